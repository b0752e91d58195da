// Element types as safetensors names them, and scalar conversions between them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace latte {

enum class DType { kF32, kF16, kBF16, kF8E4M3 };

size_t DTypeSize(DType dtype);
// "F32", "F16", "BF16", "F8_E4M3" (the safetensors spelling).
std::string_view DTypeName(DType dtype);
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
