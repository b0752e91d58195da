#include "base/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>

namespace latte {
namespace {

size_t Rounded(size_t bytes) { return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes; }

}  // namespace

void* AllocateHugePageRegion(size_t bytes, bool zero_fill) {
  if (bytes == 0) return nullptr;
  const size_t size = Rounded(bytes);
  // Over-allocate by one huge page, then trim both ends to a 2 MiB boundary.
  void* raw = ::mmap(nullptr, size + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = start + size + kHugePageBytes;
  // Pointer arithmetic on the mapping itself (no integer-to-pointer casts).
  char* p = static_cast<char*>(raw) + (aligned - start);
  if (end > aligned + size) ::munmap(p + size, end - (aligned + size));
  ::madvise(p, size, MADV_HUGEPAGE);  // advisory: without THP the region keeps 4 KiB pages
  if (zero_fill) std::memset(p, 0, size);
  return p;
}

void CommitPages(void* p, size_t bytes) {
  if (p == nullptr || bytes == 0) return;
#ifdef MADV_POPULATE_WRITE
  if (::madvise(p, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
  // A write per 4 KiB page; the byte written back is the byte read, so contents stay.
  volatile char* bytes_of = static_cast<volatile char*>(p);
  for (size_t i = 0; i < bytes; i += 4096) bytes_of[i] = bytes_of[i];
}

void FreeHugePageRegion(void* p, size_t bytes) {
  if (p != nullptr) ::munmap(p, Rounded(bytes));
}

}  // namespace latte
