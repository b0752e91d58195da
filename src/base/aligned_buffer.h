// An owning, 64-byte aligned, zero-initialised byte buffer (one cache line,
// one AVX-512 register): weights prepared at load and scratch live in these.
// Buffers of 2 MiB and more are huge-page regions (base/huge_pages.h).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "base/huge_pages.h"

namespace latte {

class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 64;

  // How a huge region (>= kHugePageBytes) gets its pages: all now (the first timed
  // step does not fault them in), or as each is first written (a KV cache pool sized
  // for the whole memory budget takes memory only as far as sequences fill it). Both
  // read as zeros; small buffers are always allocated and zeroed now.
  enum class Pages { kNow, kOnFirstTouch };

  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, Pages pages = Pages::kNow) : size_(bytes) {
    if (bytes == 0) return;
    if (bytes >= kHugePageBytes) {
      data_ = static_cast<std::byte*>(AllocateHugePageRegion(bytes, pages == Pages::kNow));
      if (data_ == nullptr) throw std::bad_alloc();
      return;
    }
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    data_ = static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded));
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(data_, 0, rounded);
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      Release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~AlignedBuffer() { Release(); }

  // Takes memory for pages still untouched (Pages::kOnFirstTouch); contents stay.
  void CommitPages() {
    if (size_ >= kHugePageBytes) latte::CommitPages(data_, size_);
  }

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T> T* as() { return reinterpret_cast<T*>(data_); }
  template <typename T> const T* as() const { return reinterpret_cast<const T*>(data_); }

 private:
  void Release() {
    if (size_ >= kHugePageBytes) {
      FreeHugePageRegion(data_, size_);
    } else {
      std::free(data_);
    }
  }
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace latte
