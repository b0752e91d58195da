// RmsNorm against a plain double-precision computation written here, on fixed-seed
// random rows of very different magnitudes; strided and in-place calls; and the
// checked boundary.
#include "kernels/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace latte {
namespace {

using testing_util::ExpectAllNear;
using testing_util::RandomVector;

// The kernel sums squares in double, then rounds 1/rms to f32 and does two f32
// multiplies: three roundings of 2^-24 (6e-8) each, so ~2e-7 relative; 2e-6 leaves a
// 10x margin.
constexpr double kRmsNormRelTol = 2e-6;

// y = x / sqrt(mean(x²) + eps) * w in double, for one row.
std::vector<double> RmsNormRow(const float* x, const float* w, int64_t dim, double eps) {
  double mean_sq = 0;
  for (int64_t i = 0; i < dim; ++i) mean_sq += double(x[i]) * double(x[i]);
  mean_sq /= static_cast<double>(dim);
  const double denom = std::sqrt(mean_sq + eps);
  std::vector<double> y(dim);
  for (int64_t i = 0; i < dim; ++i) y[i] = double(x[i]) / denom * double(w[i]);
  return y;
}

constexpr float kEps = 1e-6f;
// Row magnitudes: at 1e-3, mean(x²) ≈ 3e-7 is comparable to eps, so eps must sit inside
// the square root next to the mean; at 10 it is negligible.
constexpr float kRowScales[] = {1.0f, 1e-3f, 10.0f};
constexpr int64_t kRmsRows = 3;
constexpr float kSentinel = 12345.0f;

// Fills rows [kRmsRows, ld] with random values scaled per row by kRowScales.
std::vector<float> RmsInput(int64_t ld, std::mt19937& rng) {
  std::vector<float> x = RandomVector(kRmsRows * ld, rng);
  for (int64_t r = 0; r < kRmsRows; ++r) {
    for (int64_t i = 0; i < ld; ++i) x[r * ld + i] *= kRowScales[r];
  }
  return x;
}

TEST(RmsNorm, MatchesDoubleReference) {
  std::mt19937 rng(11);
  for (int64_t dim : {1, 7, 64, 513}) {
    SCOPED_TRACE("dim=" + std::to_string(dim));
    const std::vector<float> x = RmsInput(dim, rng);
    const std::vector<float> w = RandomVector(dim, rng, 0.5f, 1.5f);
    std::vector<float> y(kRmsRows * dim, NAN);
    RmsNorm(x.data(), w.data(), kRmsRows, dim, kEps, y.data());
    for (int64_t r = 0; r < kRmsRows; ++r) {
      const std::vector<double> want = RmsNormRow(&x[r * dim], w.data(), dim, kEps);
      ExpectAllNear(&y[r * dim], want.data(), dim, 1e-30, kRmsNormRelTol, "row " + std::to_string(r));
    }
  }
}

TEST(RmsNorm, StridedRowsLeavePaddingUntouched) {
  std::mt19937 rng(12);
  for (int64_t dim : {1, 7, 64, 513}) {
    SCOPED_TRACE("dim=" + std::to_string(dim));
    const int64_t ldx = dim + 3, ldy = dim + 5;
    const std::vector<float> x = RmsInput(ldx, rng);
    const std::vector<float> w = RandomVector(dim, rng, 0.5f, 1.5f);
    std::vector<float> y(kRmsRows * ldy, kSentinel);
    RmsNorm(x.data(), ldx, w.data(), kRmsRows, dim, kEps, y.data(), ldy);
    for (int64_t r = 0; r < kRmsRows; ++r) {
      const std::vector<double> want = RmsNormRow(&x[r * ldx], w.data(), dim, kEps);
      ExpectAllNear(&y[r * ldy], want.data(), dim, 1e-30, kRmsNormRelTol, "row " + std::to_string(r));
      for (int64_t i = dim; i < ldy; ++i) {
        EXPECT_EQ(y[r * ldy + i], kSentinel) << "wrote padding at row " << r << " col " << i;
      }
    }
  }
}

TEST(RmsNorm, InPlace) {
  std::mt19937 rng(13);
  for (int64_t dim : {1, 7, 64, 513}) {
    for (int64_t pad : {0, 4}) {
      SCOPED_TRACE("dim=" + std::to_string(dim) + " pad=" + std::to_string(pad));
      const int64_t ld = dim + pad;
      std::vector<float> x = RmsInput(ld, rng);
      const std::vector<float> original = x;
      const std::vector<float> w = RandomVector(dim, rng, 0.5f, 1.5f);
      RmsNorm(x.data(), ld, w.data(), kRmsRows, dim, kEps, x.data(), ld);
      for (int64_t r = 0; r < kRmsRows; ++r) {
        const std::vector<double> want = RmsNormRow(&original[r * ld], w.data(), dim, kEps);
        ExpectAllNear(&x[r * ld], want.data(), dim, 1e-30, kRmsNormRelTol, "row " + std::to_string(r));
        for (int64_t i = dim; i < ld; ++i) {
          EXPECT_EQ(x[r * ld + i], original[r * ld + i]) << "padding changed at " << r << "," << i;
        }
      }
    }
  }
}

TEST(RmsNormDeathTest, RowStrideNarrowerThanRowAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> x(64, 1.0f), w(16, 1.0f), y(64);
  EXPECT_DEATH(RmsNorm(x.data(), /*ldx=*/8, w.data(), 4, /*dim=*/16, kEps, y.data(), 16),
               "RmsNorm: \\[4, 16\\] with row strides 8 \\(x\\), 16 \\(y\\)");
  EXPECT_DEATH(RmsNorm(x.data(), w.data(), 4, 16, kEps, nullptr), "null x, weight or y");
}

}  // namespace
}  // namespace latte
