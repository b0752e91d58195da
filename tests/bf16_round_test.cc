// RoundToBf16 (f32 -> bf16 rows, round to nearest even) against the scalar F32ToBf16 on
// random values with a tie, a NaN and an infinity: every AVX-512 variant this CPU can
// run, the dispatched one and the portable one; strided rows; no write past the end.
#include "kernels/bf16_round.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/parallel.h"
#include "test_util.h"

namespace latte {
namespace {

using testing_util::RandomVector;
using testing_util::ScopedPortableKernels;

constexpr bf16 kUnwritten = 0xdead;

// Random values in [-100, 100) with the cases rounding must get right.
std::vector<float> Inputs(int64_t n, std::mt19937& rng) {
  std::vector<float> x = RandomVector(n, rng, -100.0f, 100.0f);
  if (n > 5) {
    x[3] = NAN;
    x[4] = INFINITY;
    x[5] = 1.0f + 1.0f / 256;  // a tie: rounds to even (1.0)
  }
  return x;
}

void ExpectRoundedEach(const std::vector<float>& x, const std::vector<bf16>& got, const std::string& what) {
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(Bf16ToF32(got[i]))) << what << ": NaN at " << i << " not kept";
    } else {
      ASSERT_EQ(got[i], F32ToBf16(x[i])) << what << ": element " << i << " (" << x[i] << ")";
    }
  }
  EXPECT_EQ(got[x.size()], kUnwritten) << what << ": wrote past the end";
}

TEST(RoundToBf16, Avx512VariantsMatchScalar) {
  if (!GetCpuFeatures().avx512f) GTEST_SKIP() << "CPU lacks AVX-512";
  std::mt19937 rng(7);
  for (int64_t n : {1, 15, 16, 17, 999, 576 * 5}) {
    const std::vector<float> x = Inputs(n, rng);
    for (bool has_bf16 : {false, true}) {
      if (has_bf16 && !GetCpuFeatures().avx512_bf16) continue;
      std::vector<bf16> out(n + 1, kUnwritten);
      bf16_internal::RoundToBf16Avx512(x.data(), n, out.data(), has_bf16);
      ExpectRoundedEach(x, out, "n=" + std::to_string(n) + (has_bf16 ? " vcvtneps2bf16" : " integer"));
    }
  }
}

TEST(RoundToBf16, DispatchedAndPortableRowsMatchScalar) {
  std::mt19937 rng(8);
  for (bool portable : {false, true}) {
    ScopedPortableKernels force(portable);
    static_assert(400 * 700 >= kMinParallelConversion);
    // 400 x 700 values: past kMinParallelConversion, so the rows go to the OpenMP team.
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1, 37}, {3, 100}, {400, 700}}) {
      const int64_t ldx = cols + 3;
      const std::vector<float> x = Inputs(rows * ldx, rng);
      std::vector<bf16> out(rows * cols + 1, kUnwritten);
      RoundToBf16(x.data(), rows, ldx, cols, out.data());
      std::vector<float> packed(rows * cols);  // the columns read, without the stride padding
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) packed[r * cols + c] = x[r * ldx + c];
      }
      ExpectRoundedEach(
          packed, out,
          std::string(portable ? "portable " : "dispatched ") + std::to_string(rows) + "x" + std::to_string(cols));
    }
  }
}

}  // namespace
}  // namespace latte
