// splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
// OOPSLA 2014): a 64-bit counter stepped by an odd constant and passed through a
// bijective mixer. Its output passes BigCrush, and since output i is Mix(seed + i·gamma),
// element i of a stream can be drawn on its own (random checkpoints fill tensors
// in parallel and in any order that way).
#pragma once

#include <cstdint>

namespace latte {

// The counter's step: 2^64 / golden ratio, rounded to odd.
inline constexpr uint64_t kSplitMix64Gamma = 0x9e3779b97f4a7c15ull;

// The output function: a bijective 64-bit mixer.
constexpr uint64_t SplitMix64Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The sequential generator: Mix(state + gamma), Mix(state + 2·gamma), ...
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t Next() {
    state_ += kSplitMix64Gamma;
    return SplitMix64Mix(state_);
  }

 private:
  uint64_t state_;
};

}  // namespace latte
