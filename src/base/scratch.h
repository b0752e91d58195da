// Scratch vectors that grow to the largest size asked for and never shrink, so a
// steady step reuses its buffers instead of allocating.
#pragma once

#include <cstdint>
#include <vector>

namespace latte {

// v.data() with room for at least n elements.
template <typename T>
T* Grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

}  // namespace latte
