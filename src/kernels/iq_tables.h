// The lattice codebooks (iq_grids.h) expanded for the vector kernels: one entry's values
// as the bytes a kernel loads in one piece (IQ2_XXS 8 magnitudes, IQ3_XXS 4, IQ1_S 8 codes
// 8·grid). Built at compile time; inline variables, so one copy in the program.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/block_quant.h"
#include "kernels/iq_grids.h"

namespace latte::iq_tables {

// Entry e of a packed codebook (n values of `bits` bits, levels[code]) times `mul`, as
// little-endian bytes of a T.
template <typename T, size_t N, size_t L>
constexpr std::array<T, N> Expand(const uint16_t (&book)[N], int n, int bits, const int8_t (&levels)[L], int mul) {
  std::array<T, N> out{};
  for (size_t e = 0; e < N; ++e) {
    T v = 0;
    for (int j = 0; j < n; ++j) {
      const int level = levels[(book[e] >> (bits * j)) & ((1 << bits) - 1)] * mul;
      v |= static_cast<T>(static_cast<uint8_t>(level)) << (8 * j);
    }
    out[e] = v;
  }
  return out;
}

inline constexpr std::array<uint64_t, 256> kIq2xxsBytes = Expand<uint64_t>(iq_grids::kIq2xxs, 8, 2, kIq2Levels, 1);
inline constexpr std::array<uint32_t, 256> kIq3xxsBytes = Expand<uint32_t>(iq_grids::kIq3xxs, 4, 3, kIq3Levels, 1);
inline constexpr std::array<uint64_t, 2048> kIq1sBytes = Expand<uint64_t>(iq_grids::kIq1s, 8, 2, kIq1Levels, 8);

}  // namespace latte::iq_tables
