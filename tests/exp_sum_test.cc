// MaxValue and ExpShiftedSum against a plain std::exp / f64 loop on random rows of
// lengths that end mid-vector and mid-chunk, with -inf entries (masked tokens) and a
// NaN: the AVX-512 loops where the CPU has them, the dispatched and the portable path;
// no write past the end.
#include "kernels/exp_sum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "test_util.h"

namespace latte {
namespace {

using testing_util::RandomVector;
using testing_util::ScopedPortableKernels;

constexpr float kUnwritten = -12345.0f;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kRelTol = 1e-6;  // ~2 ulp per term, sums in f64

const std::vector<int64_t> kLengths = {0, 1, 15, 16, 17, 1023, 1024, 1025, 102400 + 7};

// Logits-like values in [-30, 10) with a few masked to -inf.
std::vector<float> Row(int64_t n, std::mt19937& rng) {
  std::vector<float> x = RandomVector(n, rng, -30.0f, 10.0f);
  for (int64_t i = 3; i < n; i += 97) x[i] = -kInf;
  return x;
}

float ReferenceMax(const std::vector<float>& x) {
  float m = -kInf;
  for (float v : x) m = v > m ? v : m;
  return m;
}

using MaxFn = float (*)(const float*, int64_t);
using ExpFn = double (*)(const float*, int64_t, float, float*);

void ExpectMatchesReference(MaxFn max_fn, ExpFn exp_fn, const std::string& what) {
  std::mt19937 rng(11);
  for (int64_t n : kLengths) {
    const std::vector<float> x = Row(n, rng);
    const std::string at = what + " n=" + std::to_string(n);
    const float m = max_fn(x.data(), n);
    ASSERT_EQ(m, ReferenceMax(x)) << at;

    const float shift = n > 0 ? m : 0.0f;
    std::vector<float> out(n + 1, kUnwritten);
    const double sum = exp_fn(x.data(), n, shift, out.data());
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::exp(static_cast<double>(x[i] - shift));  // the f32 difference, as both paths take it
      want_sum += want;
      ASSERT_NEAR(out[i], want, kRelTol * want + 1e-37) << at << " element " << i << " (" << x[i] << ")";
    }
    EXPECT_EQ(out[n], kUnwritten) << at << ": wrote past the end";
    EXPECT_NEAR(sum, want_sum, kRelTol * want_sum) << at;
    EXPECT_EQ(exp_fn(x.data(), n, shift, nullptr), sum) << at << ": the sum without out differs";
  }
}

TEST(ExpSum, Avx512MatchesReference) {
  if (!GetCpuFeatures().avx512f) GTEST_SKIP() << "CPU lacks AVX-512";
  ExpectMatchesReference(exp_internal::MaxValueAvx512, exp_internal::ExpShiftedSumAvx512, "avx512");
}

TEST(ExpSum, DispatchedAndPortableMatchReference) {
  ExpectMatchesReference(MaxValue, ExpShiftedSum, "dispatched");
  const ScopedPortableKernels portable(true);
  ExpectMatchesReference(MaxValue, ExpShiftedSum, "portable");
}

TEST(ExpSum, MaxIsNanWhenAnyValueIsNan) {
  std::mt19937 rng(5);
  for (int64_t n : {1, 17, 1025}) {
    std::vector<float> x = Row(n, rng);
    x[n - 1] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(MaxValue(x.data(), n))) << "dispatched n=" << n;
    if (GetCpuFeatures().avx512f) {
      EXPECT_TRUE(std::isnan(exp_internal::MaxValueAvx512(x.data(), n))) << "n=" << n;
    }
    const ScopedPortableKernels portable(true);
    EXPECT_TRUE(std::isnan(MaxValue(x.data(), n))) << "portable n=" << n;
  }
}

TEST(ExpSum, AllMaskedRowHasMaxMinusInf) {
  const std::vector<float> x(33, -kInf);
  EXPECT_EQ(MaxValue(x.data(), 33), -kInf);
  EXPECT_EQ(MaxValue(x.data(), 0), -kInf);
}

}  // namespace
}  // namespace latte
