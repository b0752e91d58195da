// IQ4_XS's sub-block scales for the vector kernels, written once for the AVX2 and the AVX-512
// units (gemv_block_avx2_inl.h, gemv_block_avx512_inl.h). Internal linkage, so each unit keeps
// its own copy built for its own ISA. Include only from files compiled with AVX2 or later.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/block_quant.h"

namespace latte::matmul_internal {
namespace {

// int32 lane s < 8: the IQ4_XS block's scale code ls[s] - 32, in [-32, 31] (block_quant.h's
// IQ4XSScale for all s at once: nibble s of scales_l, bit pair s of scales_h).
inline __m256i IQ4XSScaleCodes(const uint8_t* block) {
  uint32_t low;
  uint16_t high;
  std::memcpy(&low, block + block_layout::kIQ4XSScalesL, sizeof low);
  std::memcpy(&high, block + block_layout::kIQ4XSScalesH, sizeof high);
  const __m256i l =
      _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(low)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
  const __m256i h = _mm256_srlv_epi32(_mm256_set1_epi32(high), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
  const __m256i codes = _mm256_or_si256(_mm256_and_si256(l, _mm256_set1_epi32(15)),
                                        _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(3)), 4));
  return _mm256_sub_epi32(codes, _mm256_set1_epi32(32));
}

}  // namespace
}  // namespace latte::matmul_internal
