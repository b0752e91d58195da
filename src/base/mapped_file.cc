#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/huge_pages.h"

namespace latte {
namespace {

// Closes the descriptor on every return path.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

Result<const uint8_t*> Map(const std::string& path, int fd, size_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return Status::Internal(path + ": cannot mmap: " + std::strerror(errno));
  return static_cast<const uint8_t*>(p);
}

// The file's bytes at region + lead (the region is lead + size bytes).
Result<const uint8_t*> ReadIntoHugePages(const std::string& path, int fd, size_t size, size_t lead,
                                         const std::function<void(size_t)>& on_read) {
  auto* region = static_cast<uint8_t*>(AllocateHugePageRegion(lead + size, /*zero_fill=*/false));
  if (region == nullptr) {
    return Status::Internal(path + ": cannot allocate " + std::to_string(size) + " bytes to hold the file");
  }
  uint8_t* data = region + lead;
  constexpr size_t kChunk = size_t{64} << 20;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, data + done, std::min(kChunk, size - done), static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "the file shrank while being read";
      FreeHugePageRegion(region, lead + size);
      return Status::Internal(path + ": cannot read: " + why);
    }
    done += static_cast<size_t>(n);
    if (on_read) on_read(done);
  }
  return static_cast<const uint8_t*>(data);
}

}  // namespace

Result<std::shared_ptr<MappedFile>> MappedFile::Open(const std::string& path, FileResidency residency,
                                                     const std::function<void(size_t)>& on_read, size_t line_offset) {
  const FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) return Status::Internal(path + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return Status::Internal(path + ": not a regular file");
  const size_t size = static_cast<size_t>(st.st_size);
  const uint8_t* data = nullptr;
  size_t lead = 0;
  if (size > 0) {
    if (residency == FileResidency::kMapped) {
      LATTE_ASSIGN_OR_RETURN(data, Map(path, file.fd, size));
    } else {
      constexpr size_t kLine = 64;
      lead = (kLine - line_offset % kLine) % kLine;
      LATTE_ASSIGN_OR_RETURN(data, ReadIntoHugePages(path, file.fd, size, lead, on_read));
    }
  }
  return std::shared_ptr<MappedFile>(new MappedFile(path, data, size, residency, lead));
}

MappedFile::~MappedFile() {
  if (data_ == nullptr) return;
  if (residency_ == FileResidency::kMapped) {
    ::munmap(const_cast<uint8_t*>(data_), size_);
  } else {
    FreeHugePageRegion(const_cast<uint8_t*>(data_ - lead_), lead_ + size_);
  }
}

void ReleasePages(const void* data, size_t bytes) {
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + page - 1) / page * page;  // the first whole page
  const uintptr_t end = (begin + bytes) / page * page;       // past the last whole page
  if (end <= first) return;
  // Advisory: a failure (EINVAL on memory not mapped by MappedFile) only keeps the pages.
  ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
}

}  // namespace latte
