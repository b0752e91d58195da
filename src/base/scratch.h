// Scratch vectors and buffers that grow to the largest size asked for and never
// shrink, so a steady step reuses its buffers instead of allocating.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/aligned_buffer.h"

namespace latte {

// v.data() with room for at least n elements. Capacity grows by half again at
// least, so a size that creeps up by one per decode step (a score row over the
// growing context) reallocates O(log n) times per sequence, not once per token.
template <typename T> T* Grow(std::vector<T>& v, int64_t n) {
  const size_t want = static_cast<size_t>(std::max<int64_t>(n, 0));
  if (v.size() < want) {
    if (v.capacity() < want) v.reserve(std::max(want, v.capacity() + v.capacity() / 2));
    v.resize(want);
  }
  return v.data();
}

// b's data with room for at least `bytes`: b is replaced by a bigger buffer (its
// contents not kept) only when smaller.
template <typename T = std::byte> T* GrowAligned(AlignedBuffer& b, size_t bytes) {
  if (b.size() < bytes) b = AlignedBuffer(bytes);
  return b.as<T>();
}

}  // namespace latte
