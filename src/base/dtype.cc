#include "base/dtype.h"

#include <array>
#include <cmath>

#include "base/check.h"

namespace latte {

size_t DTypeSize(DType dtype) {
  LATTE_CHECK(!IsBlockQuantized(dtype), "DTypeSize of block format ", DTypeName(dtype), ": use DTypeRowBytes");
  return DTypeBlockBytes(dtype);
}

int64_t DTypeBlockElements(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kIQ4_NL: return 32;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ3_K:
    case DType::kQ2_K:
    case DType::kIQ4_XS:
    case DType::kIQ2_XXS:
    case DType::kIQ3_XXS:
    case DType::kIQ1_S: return 256;
    default: return 1;
  }
}

size_t DTypeBlockBytes(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kF8E4M3: return 1;
    case DType::kQ8_0: return 34;
    case DType::kQ4_0: return 18;
    case DType::kQ4_K: return 144;
    case DType::kQ5_K: return 176;
    case DType::kQ6_K: return 210;
    case DType::kQ5_0: return 22;
    case DType::kQ5_1: return 24;
    case DType::kQ3_K: return 110;
    case DType::kQ2_K: return 84;
    case DType::kIQ4_NL: return 18;
    case DType::kIQ4_XS: return 136;
    case DType::kIQ2_XXS: return 66;
    case DType::kIQ3_XXS: return 98;
    case DType::kIQ1_S: return 50;
  }
  return 0;
}

bool IsBlockQuantized(DType dtype) { return DTypeBlockElements(dtype) > 1; }

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kQ8_0: return "Q8_0";
    case DType::kQ4_0: return "Q4_0";
    case DType::kQ4_K: return "Q4_K";
    case DType::kQ5_K: return "Q5_K";
    case DType::kQ6_K: return "Q6_K";
    case DType::kQ5_0: return "Q5_0";
    case DType::kQ5_1: return "Q5_1";
    case DType::kQ3_K: return "Q3_K";
    case DType::kQ2_K: return "Q2_K";
    case DType::kIQ4_NL: return "IQ4_NL";
    case DType::kIQ4_XS: return "IQ4_XS";
    case DType::kIQ2_XXS: return "IQ2_XXS";
    case DType::kIQ3_XXS: return "IQ3_XXS";
    case DType::kIQ1_S: return "IQ1_S";
  }
  return "?";
}

std::optional<DType> ParseDType(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  return std::nullopt;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  return sign ? -magnitude : magnitude;
}

uint16_t F32ToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00u;
  if (a >= 65520.0f) return sign | 0x7c00u;
  if (a < std::ldexp(1.0f, -14)) {  // subnormal: units of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t mant = static_cast<uint32_t>(std::nearbyint((m * 2.0f - 1.0f) * 1024.0f));
  int exp16 = e - 1 + 15;
  if (mant == 1024) {
    mant = 0;
    ++exp16;
  }
  if (exp16 >= 31) return sign | 0x7c00u;
  return sign | static_cast<uint16_t>(exp16 << 10) | static_cast<uint16_t>(mant);
}

namespace {
std::array<float, 256> MakeFp8Table() {
  std::array<float, 256> table{};
  for (int v = 0; v < 256; ++v) {
    const int sign = (v >> 7) & 1;
    const int exponent = (v >> 3) & 0xf;
    const int mantissa = v & 0x7;
    float magnitude;
    if (exponent == 0xf && mantissa == 0x7) {
      magnitude = NAN;
    } else if (exponent == 0) {
      magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // 2^-6 * m/8
    } else {
      magnitude = std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
    }
    table[v] = sign ? -magnitude : magnitude;
  }
  return table;
}
const std::array<float, 256> kFp8Table = MakeFp8Table();
}  // namespace

float Fp8E4M3ToF32(uint8_t v) { return kFp8Table[v]; }

}  // namespace latte
