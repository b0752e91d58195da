// Element types as safetensors names them, and scalar conversions between them.
#pragma once

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
// Round to nearest even with saturation to +-448.
uint8_t F32ToFp8E4M3(float f);

}  // namespace latte
