// Element types as safetensors names them, GGUF's block-quantized weight formats, and
// scalar conversions between them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace latte {

// The scalar types first; then ggml's block formats as GGUF files store them (a row is
// whole blocks, each block a few scales and packed quants; kernels/block_quant.h):
//   Q8_0: 32 values, f16 scale d + 32 int8                     34 bytes (8.5 bits per weight)
//   Q4_0: 32 values, f16 d + 16 bytes of 4-bit q, x = d·(q - 8)   18 bytes (4.5)
//   Q4_K: 256 values, f16 d, dmin, 12 bytes of 6-bit scales/mins for 8 sub-blocks
//         of 32, 128 bytes of 4-bit q, x = d·sc·q - dmin·m     144 bytes (4.5)
//   Q5_K: Q4_K plus 32 bytes of fifth bits                     176 bytes (5.5)
//   Q6_K: 256 values, 128 bytes low 4 bits, 64 bytes high 2 bits, 16 int8 scales, f16 d,
//         x = d·sc·(q - 32)                                  210 bytes (6.5625)
//   Q5_0: 32 values, f16 d + 4 bytes of fifth bits + 16 bytes of 4-bit q, x = d·(q - 16)
//                                                              22 bytes (5.5)
//   Q5_1: 32 values, f16 d, f16 m + 4 + 16 bytes of 5-bit q, x = d·q + m   24 bytes (6)
//   Q3_K: 256 values, 32 bytes high bits, 64 bytes low 2 bits, 12 bytes of 6-bit scales for
//         16 sub-blocks of 16, f16 d, x = d·(sc - 32)·(q - 4)   110 bytes (3.4375)
//   Q2_K: 256 values, 16 bytes of 4-bit scales/mins for 16 sub-blocks of 16, 64 bytes of
//         2-bit q, f16 d, dmin, x = d·sc·q - dmin·m              84 bytes (2.625)
//   IQ4_NL: 32 values, f16 d + 16 bytes of 4-bit indices into a fixed table of 16 int8
//         levels (non-uniform), x = d·level[q]                   18 bytes (4.5)
//   IQ4_XS: 256 values, f16 d, 8 6-bit scales for sub-blocks of 32 (2 + 4 bytes), 128 bytes
//         of IQ4_NL's indices, x = d·(sc - 32)·level[q]          136 bytes (4.25)
//   IQ2_XXS: 256 values, f16 d + per 32 values 4 indices into a codebook of 256 points of 8
//         magnitudes, 4 × 7 sign bits (the 8th: even parity) and a 4-bit scale ls,
//         x = d·(0.5 + ls)/4·grid·sign                            66 bytes (2.0625)
//   IQ3_XXS: 256 values, f16 d, 64 indices into a codebook of 256 points of 4 magnitudes,
//         per 32 values 4 × 7 sign bits and ls, x = d·(0.5 + ls)/2·grid·sign   98 bytes (3.0625)
//   IQ1_S: 256 values, f16 d, per 8 values an 11-bit index into a codebook of 2048 points in
//         {-1, 0, 1}^8, per 32 values a 3-bit scale ls and a sign for delta = ±1/8,
//         x = d·(2·ls + 1)·(grid + delta)                         50 bytes (1.5625)
// (the IQ formats' codebooks: kernels/iq_grids.h)
// (Q5_0 and Q5_1 are what llama-quantize writes for a Q4_K / Q5_K matrix whose rows are
// not whole 256-value blocks: DeepSeek's attn_k_b, V2-Lite's 1408-wide experts; Q4_0 for
// a Q2_K / Q3_K one, IQ4_NL for an IQ4_XS one.)
enum class DType {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,
  kQ8_0,
  kQ4_0,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ5_0,
  kQ5_1,
  kQ3_K,
  kQ2_K,
  kIQ4_NL,
  kIQ4_XS,
  kIQ2_XXS,
  kIQ3_XXS,
  kIQ1_S
};

// Bytes per element of a scalar type; a block format has none (LATTE_CHECK fails):
// use DTypeRowBytes.
size_t DTypeSize(DType dtype);
// Elements per block: 1 for scalar types, 32 (Q8_0, Q4_0, Q5_0, Q5_1, IQ4_NL) or 256 (the K
// formats, IQ4_XS, IQ2_XXS, IQ3_XXS, IQ1_S).
int64_t DTypeBlockElements(DType dtype);
// Bytes per block (DTypeSize for scalar types).
size_t DTypeBlockBytes(DType dtype);
bool IsBlockQuantized(DType dtype);
// Bytes of `elements` consecutive values; `elements` a multiple of DTypeBlockElements.
inline size_t DTypeRowBytes(DType dtype, int64_t elements) {
  return static_cast<size_t>(elements / DTypeBlockElements(dtype)) * DTypeBlockBytes(dtype);
}
// "F32", "F16", "BF16", "F8_E4M3" (the safetensors spelling); "Q8_0", "Q4_K", ... (ggml's).
std::string_view DTypeName(DType dtype);
// The safetensors names only: a safetensors header naming a block format is an error.
std::optional<DType> ParseDType(std::string_view name);

using bf16 = uint16_t;

inline float Bf16ToF32(bf16 v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even, as hardware conversions do; NaN stays NaN.
inline bf16 F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<bf16>(bits >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

// OCP FP8 E4M3 (the "fn" variant DeepSeek uses): bias 7, no infinities,
// S.1111.111 is NaN, max finite 448.
float Fp8E4M3ToF32(uint8_t v);
// Round to nearest even with saturation to +-448. Inline: the weight quantizer
// (kernels/fp8_quantize.h) calls it for every value of a checkpoint.
inline uint8_t F32ToFp8E4M3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fmin(std::fabs(f), 448.0f);
  if (a < 0.015625f) {  // below 2^-6: subnormal codes, units of 2^-9 (8 rounds up to 0x08)
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));  // nearbyint: ties to even
  }
  uint32_t bits;
  std::memcpy(&bits, &a, sizeof bits);
  int exponent = static_cast<int>(bits >> 23) - 127;  // in [-6, 8]
  const uint32_t mantissa = bits & 0x7fffffu;
  uint32_t kept = mantissa >> 20;  // 3 bits
  const uint32_t rest = mantissa & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (kept & 1u))) ++kept;  // round to nearest even
  if (kept == 8) {
    kept = 0;
    ++exponent;
  }
  return sign | static_cast<uint8_t>(((exponent + 7) << 3) | kept);
}

}  // namespace latte
