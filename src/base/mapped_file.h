// A read-only file's bytes in memory. Weights stored in the compute precision
// are used in place from here, never converted or copied again.
//   kMapped (the default): mmap, zero-copy, pages shared with the page cache.
//   kHugePageCopy: the file is read once into anonymous memory on 2 MiB pages
//     (base/huge_pages.h): fewer TLB misses for a decode that streams every
//     weight, at the cost of a read at open and the file's size in RAM besides
//     the page cache. On the project's VM, quiet, the two decode at the same
//     speed (docs/benchmarks.md), so it is an option, not the default.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <functional>

#include "base/status.h"

namespace latte {

enum class FileResidency { kMapped, kHugePageCopy };

class MappedFile {
 public:
  // `on_read` (huge-page copies only) is called as the file is read, with the bytes
  // read so far. A huge-page copy is placed so that the file's byte `line_offset` lands
  // on a 64-byte cache line (a safetensors file's data section: its header is padded to
  // 8 bytes only, and a vector load that straddles two lines costs a second L1 access);
  // a mapping keeps the file's own offsets.
  static Result<std::shared_ptr<MappedFile>> Open(const std::string& path,
                                                  FileResidency residency = FileResidency::kMapped,
                                                  const std::function<void(size_t)>& on_read = nullptr,
                                                  size_t line_offset = 0);
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  FileResidency residency() const { return residency_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size, FileResidency residency, size_t lead)
      : path_(std::move(path)), data_(data), size_(size), residency_(residency), lead_(lead) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
  FileResidency residency_;
  size_t lead_;  // huge-page copy: bytes of its region before data_
};

// Gives back the whole pages inside [data, data + bytes) of a MappedFile's memory, for
// bytes that are never read again (a weight quantized at load: its source pages would
// otherwise stay in the resident set beside the quantized copy). From an mmap the pages
// leave this process's RSS (the page cache keeps them until the kernel wants the memory;
// a read would fault them back in); from a huge-page copy they are freed (a read would
// see zeros). Pages that also hold bytes outside the range are kept, so neighbouring
// tensors are never touched.
void ReleasePages(const void* data, size_t bytes);

}  // namespace latte
