// Scalar conversions against brute-force definitions.
#include "base/dtype.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

namespace latte {
namespace {

// The nearest finite e4m3 code by exhaustive search, ties to the even code.
uint8_t NearestFp8(float f) {
  const float a = std::fmin(std::fabs(f), 448.0f);
  int best = 0;
  double best_err = INFINITY;
  for (int code = 0; code < 0x7f; ++code) {
    const double err = std::fabs(double(Fp8E4M3ToF32(static_cast<uint8_t>(code))) - a);
    if (err < best_err || (err == best_err && (code & 1) == 0)) {
      best = code;
      best_err = err;
    }
  }
  return static_cast<uint8_t>((std::signbit(f) ? 0x80 : 0) | best);
}

TEST(DType, Fp8DecodeTable) {
  EXPECT_EQ(Fp8E4M3ToF32(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4M3ToF32(0x08), 0.015625f);     // smallest normal 2^-6
  EXPECT_EQ(Fp8E4M3ToF32(0x01), 0.001953125f);  // smallest subnormal 2^-9
  EXPECT_EQ(Fp8E4M3ToF32(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(0x7f)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(0xff)));
}

TEST(DType, Fp8EncodeMatchesExhaustiveNearest) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> log_mag(-12.0f, 10.0f);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::exp2(log_mag(rng)) * (rng() & 1 ? 1.0f : -1.0f);
    ASSERT_EQ(F32ToFp8E4M3(f), NearestFp8(f)) << f;
  }
  // Every code round-trips, and every midpoint between neighbours ties to even.
  for (int code = 0; code < 0x7e; ++code) {
    const float v = Fp8E4M3ToF32(static_cast<uint8_t>(code));
    ASSERT_EQ(F32ToFp8E4M3(v), code);
    const float mid = (v + Fp8E4M3ToF32(static_cast<uint8_t>(code + 1))) / 2;
    ASSERT_EQ(F32ToFp8E4M3(mid), NearestFp8(mid)) << mid;
  }
  EXPECT_EQ(F32ToFp8E4M3(1e6f), 0x7e);  // saturates
  EXPECT_EQ(F32ToFp8E4M3(-1e6f), 0xfe);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(F32ToBf16(1.00390625f), 0x3f80);
  EXPECT_EQ(F32ToBf16(1.01171875f), 0x3f82);  // 1 + 3·2^-8: ties up to even
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 10.0f);
  for (int i = 0; i < 10000; ++i) {
    const float f = normal(rng);
    const float back = Bf16ToF32(F32ToBf16(f));
    EXPECT_LE(std::fabs(back - f), std::fabs(f) * (1.0f / 256));
  }
}

TEST(DType, F16RoundTrip) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> log_mag(-20.0f, 15.0f);
  for (int i = 0; i < 10000; ++i) {
    const float f = std::exp2(log_mag(rng));
    const float back = F16ToF32(F32ToF16(f));
    // Normal f16 keeps 11 significant bits; subnormals (< 2^-14) are absolute 2^-25.
    EXPECT_LE(std::fabs(back - f), std::fmax(std::fabs(f) / 2048, std::ldexp(1.0f, -25))) << f;
  }
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_TRUE(std::isinf(F16ToF32(0x7c00)));
}

}  // namespace
}  // namespace latte
