// The small kernels (RmsNorm, rope, SiluMul) and the attention kernels
// (CausalAttention, SharedKeyAttention, MergeAttentionPartials), each against a plain
// double-precision computation written here, independent of the kernels' own
// reference functions, on fixed-seed random inputs.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/attention.h"
#include "kernels/attention_internal.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/silu_mul.h"
#include "model/config.h"
#include "model/presets.h"
#include "test_util.h"

namespace latte {
namespace {

using testing_util::RandomVector;
using testing_util::ScopedOmpThreads;
using testing_util::ScopedPortableKernels;

// RmsNorm: the kernel sums squares in double, then rounds 1/rms to f32 and does two
// f32 multiplies: three roundings of 2^-24 (6e-8) each, so ~2e-7 relative; 2e-6 leaves
// a 10x margin.
constexpr double kRmsNormRelTol = 2e-6;
// Rope: cos/sin are computed in double and rounded to f32, then a*c - b*s in f32: a few
// roundings of 2^-24 on values of magnitude <= |x| <= ~1.5, i.e. ~5e-7 absolute; 1e-5
// absolute leaves margin (positions up to 1e5 do not matter: the angle is a double).
constexpr double kRopeAbsTol = 1e-5;
// Norm of a rotated vector, relative: the same per-element rounding as above.
constexpr double kRopeNormRelTol = 1e-5;
// Dot products of two rotated 64-vectors: 64 products, each element off by ~5e-7,
// plus f32 summation; relative to sum |q_j||k_j| the error is ~1e-6; 2e-5 is safe.
constexpr double kRopeDotRelTol = 2e-5;
// YaRN frequencies: both sides are double; the only difference is the order of
// operations in pow/divide (a few ulps of 2^-52 ≈ 2e-16).
constexpr double kYarnRelTol = 1e-12;
// SoftmaxScale: double arithmetic on both sides.
constexpr double kSoftmaxScaleRelTol = 1e-12;
// SiluMul: f32 exp (~1 ulp), one add, one divide, one multiply: ~4 roundings of 2^-24
// ≈ 2.4e-7 relative; 2e-6 relative, plus a tiny absolute floor for results near zero
// (g << 0, where exp(-g) overflows f32 to inf and the kernel returns -0).
constexpr double kSiluRelTol = 2e-6;
constexpr double kSiluAbsTol = 1e-30;
// Attention outputs are convex combinations of values in [-1, 1], so errors are
// absolute. Scores are f32 dot products of <= 72 terms with |score| ≲ 5 (rounding
// ~sqrt(72) * 2^-24 * 5 ≈ 3e-7 typical), which perturbs each softmax weight by that
// relative amount; f32 accumulation over up to 2000 rows adds ~sqrt(2000) * 2^-24 ≈ 3e-6
// relative at worst-typical. Observed max on these inputs is below 1e-6; 1e-5 keeps a
// 10x margin without letting a wrong mask or a lost split (errors ~1e-2 and up) through.
constexpr double kAttnOutTol = 1e-5;
// The log-sum-exp: the same score error plus the relative error of the f32 sum of
// exponentials (turned into an absolute error by the log); same observed size.
constexpr double kAttnLseTol = 1e-5;
// Merged vs one-shot: both are f32 results with the error budget above (different
// summation orders over the same rows), so their difference is bounded the same way.
constexpr double kMergeTol = 1e-5;


// Reports the worst element (and how many are out of tolerance) instead of one failure
// per element. Allowed error per element: abs_tol + rel_tol * |want|.
void ExpectAllNear(const float* got, const double* want, size_t n, double abs_tol, double rel_tol,
                   const std::string& what) {
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < n; ++i) {
    const double allowed = abs_tol + rel_tol * std::fabs(want[i]);
    const double err = std::fabs(double(got[i]) - want[i]);
    if (!(err <= allowed)) ++bad;  // NaN counts as bad
    const double excess = std::isnan(err) ? std::numeric_limits<double>::infinity() : err - allowed;
    if (excess > worst_excess || i == 0) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " elements out of tolerance; worst ["
                     << worst << "] got " << got[worst] << ", want " << want[worst]
                     << " (abs tol " << abs_tol << ", rel tol " << rel_tol << ")";
}

void ExpectAllNear(const std::vector<float>& got, const std::vector<double>& want, double abs_tol,
                   double rel_tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ExpectAllNear(got.data(), want.data(), got.size(), abs_tol, rel_tol, what);
}

void ExpectAllNear(const std::vector<float>& got, const std::vector<float>& want, double abs_tol,
                   const std::string& what) {
  std::vector<double> w(want.begin(), want.end());
  ExpectAllNear(got, w, abs_tol, 0.0, what);
}

// ---------------------------------------------------------------------------------------
// RmsNorm

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
std::vector<float> RmsInput(int64_t dim, int64_t ld, std::mt19937& rng) {
  std::vector<float> x = RandomVector(kRmsRows * ld, rng);
  for (int64_t r = 0; r < kRmsRows; ++r) {
    for (int64_t i = 0; i < ld; ++i) x[r * ld + i] *= kRowScales[r];
  }
  return x;
}

TEST(KernelsRmsNorm, MatchesDoubleReference) {
  std::mt19937 rng(11);
  for (int64_t dim : {1, 7, 64, 513}) {
    SCOPED_TRACE("dim=" + std::to_string(dim));
    const std::vector<float> x = RmsInput(dim, dim, rng);
    const std::vector<float> w = RandomVector(dim, rng, 0.5f, 1.5f);
    std::vector<float> y(kRmsRows * dim, NAN);
    RmsNorm(x.data(), w.data(), kRmsRows, dim, kEps, y.data());
    for (int64_t r = 0; r < kRmsRows; ++r) {
      const std::vector<double> want = RmsNormRow(&x[r * dim], w.data(), dim, kEps);
      ExpectAllNear(&y[r * dim], want.data(), dim, 1e-30, kRmsNormRelTol,
                    "row " + std::to_string(r));
    }
  }
}

TEST(KernelsRmsNorm, StridedRowsLeavePaddingUntouched) {
  std::mt19937 rng(12);
  for (int64_t dim : {1, 7, 64, 513}) {
    SCOPED_TRACE("dim=" + std::to_string(dim));
    const int64_t ldx = dim + 3, ldy = dim + 5;
    const std::vector<float> x = RmsInput(dim, ldx, rng);
    const std::vector<float> w = RandomVector(dim, rng, 0.5f, 1.5f);
    std::vector<float> y(kRmsRows * ldy, kSentinel);
    RmsNorm(x.data(), ldx, w.data(), kRmsRows, dim, kEps, y.data(), ldy);
    for (int64_t r = 0; r < kRmsRows; ++r) {
      const std::vector<double> want = RmsNormRow(&x[r * ldx], w.data(), dim, kEps);
      ExpectAllNear(&y[r * ldy], want.data(), dim, 1e-30, kRmsNormRelTol,
                    "row " + std::to_string(r));
      for (int64_t i = dim; i < ldy; ++i) {
        EXPECT_EQ(y[r * ldy + i], kSentinel) << "wrote padding at row " << r << " col " << i;
      }
    }
  }
}

TEST(KernelsRmsNorm, InPlace) {
  std::mt19937 rng(13);
  for (int64_t dim : {1, 7, 64, 513}) {
    for (int64_t pad : {0, 4}) {
      SCOPED_TRACE("dim=" + std::to_string(dim) + " pad=" + std::to_string(pad));
      const int64_t ld = dim + pad;
      std::vector<float> x = RmsInput(dim, ld, rng);
      const std::vector<float> original = x;
      const std::vector<float> w = RandomVector(dim, rng, 0.5f, 1.5f);
      RmsNorm(x.data(), ld, w.data(), kRmsRows, dim, kEps, x.data(), ld);
      for (int64_t r = 0; r < kRmsRows; ++r) {
        const std::vector<double> want = RmsNormRow(&original[r * ld], w.data(), dim, kEps);
        ExpectAllNear(&x[r * ld], want.data(), dim, 1e-30, kRmsNormRelTol,
                      "row " + std::to_string(r));
        for (int64_t i = dim; i < ld; ++i) {
          EXPECT_EQ(x[r * ld + i], original[r * ld + i]) << "padding changed at " << r << "," << i;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Rope

// Rotates consecutive pairs as complex numbers: (x[2i] + i·x[2i+1]) · magnitude ·
// e^{i·pos·θ_i}, in double.
std::vector<double> RotateComplex(const std::vector<float>& x, int64_t position,
                                  const std::vector<double>& inv_freq, double magnitude) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size() / 2; ++i) {
    const std::complex<double> z(x[2 * i], x[2 * i + 1]);
    const std::complex<double> r =
        z * std::polar(magnitude, static_cast<double>(position) * inv_freq[i]);
    y[2 * i] = r.real();
    y[2 * i + 1] = r.imag();
  }
  return y;
}

// θ_i = theta^(-2i/dim).
std::vector<double> PlainInvFreq(int64_t dim, double theta) {
  std::vector<double> f(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) f[i] = std::pow(theta, -2.0 * i / dim);
  return f;
}

constexpr int64_t kPositions[] = {0, 1, 17, 4095, 100000};

TEST(KernelsRope, PlainMatchesComplexRotation) {
  std::mt19937 rng(21);
  for (int64_t dim : {2, 64, 128}) {
    for (double theta : {10000.0, 500000.0}) {
      const RopeFrequencies rope = RopeFrequencies::Plain(dim, theta);
      ASSERT_EQ(rope.dim(), dim);
      ASSERT_EQ(rope.magnitude(), 1.0);
      const std::vector<double> inv_freq = PlainInvFreq(dim, theta);
      for (int64_t pos : kPositions) {
        SCOPED_TRACE("dim=" + std::to_string(dim) + " theta=" + std::to_string(theta) +
                     " pos=" + std::to_string(pos));
        const std::vector<float> x = RandomVector(dim, rng);
        std::vector<float> y = x;
        rope.ApplyOne(y.data(), pos);
        ExpectAllNear(y, RotateComplex(x, pos, inv_freq, 1.0), kRopeAbsTol, 0.0, "rope");
      }
    }
  }
}

TEST(KernelsRope, ApplyRowsMatchesComplexRotation) {
  std::mt19937 rng(22);
  const int64_t dim = 64, ld = 64 + 7, rows = 5;
  const RopeFrequencies rope = RopeFrequencies::Plain(dim, 10000.0);
  const std::vector<double> inv_freq = PlainInvFreq(dim, 10000.0);
  const std::vector<float> x = RandomVector(rows * ld, rng);
  std::vector<float> y = x;
  rope.Apply(y.data(), ld, rows, kPositions);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> row(x.begin() + r * ld, x.begin() + r * ld + dim);
    const std::vector<double> want = RotateComplex(row, kPositions[r], inv_freq, 1.0);
    ExpectAllNear(&y[r * ld], want.data(), dim, kRopeAbsTol, 0.0, "row " + std::to_string(r));
    for (int64_t i = dim; i < ld; ++i) {
      EXPECT_EQ(y[r * ld + i], x[r * ld + i]) << "padding changed at " << r << "," << i;
    }
  }
}

double Norm(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return std::sqrt(s);
}

TEST(KernelsRope, PlainPreservesNorm) {
  std::mt19937 rng(23);
  const RopeFrequencies rope = RopeFrequencies::Plain(64, 10000.0);
  for (int64_t pos : kPositions) {
    const std::vector<float> x = RandomVector(64, rng);
    std::vector<float> y = x;
    rope.ApplyOne(y.data(), pos);
    EXPECT_NEAR(Norm(y), Norm(x), kRopeNormRelTol * Norm(x)) << "pos " << pos;
  }
}

// q·k after rotating q to p1 and k to p2 depends only on p1 - p2: rotations by
// angles p1·θ and p2·θ leave Re(q̄ k e^{i(p2-p1)θ}) per pair.
TEST(KernelsRope, ScoreDependsOnlyOnRelativePosition) {
  std::mt19937 rng(24);
  const int64_t dim = 64;
  const RopeFrequencies rope = RopeFrequencies::Plain(dim, 10000.0);
  const std::vector<float> q = RandomVector(dim, rng);
  const std::vector<float> k = RandomVector(dim, rng);
  double scale = 0;  // sum |q_j||k_j|, what the rounding error is proportional to
  for (int64_t j = 0; j < dim; ++j) scale += std::fabs(double(q[j]) * k[j]);
  auto score = [&](int64_t p1, int64_t p2) {
    std::vector<float> a = q, b = k;
    rope.ApplyOne(a.data(), p1);
    rope.ApplyOne(b.data(), p2);
    double s = 0;
    for (int64_t j = 0; j < dim; ++j) s += double(a[j]) * b[j];
    return s;
  };
  struct Pair {
    int64_t p1, p2, p1b, p2b;
  };
  for (const Pair& c : {Pair{10, 3, 1010, 1003}, Pair{3, 10, 4095, 4102}, Pair{5, 5, 0, 0},
                        Pair{17, 0, 100017, 100000}}) {
    const double a = score(c.p1, c.p2), b = score(c.p1b, c.p2b);
    EXPECT_NEAR(a, b, kRopeDotRelTol * scale)
        << "(" << c.p1 << "," << c.p2 << ") vs (" << c.p1b << "," << c.p2b << ")";
  }
  // And equal positions give the unrotated dot product.
  double plain = 0;
  for (int64_t j = 0; j < dim; ++j) plain += double(q[j]) * k[j];
  EXPECT_NEAR(score(4095, 4095), plain, kRopeDotRelTol * scale);
  // A different offset does change it (the test above is not vacuous).
  EXPECT_GT(std::fabs(score(10, 3) - score(3, 10)), 1e3 * kRopeDotRelTol * scale);
}

// DeepSeek-V2's Hugging Face modeling_deepseek.py, DeepseekV2YarnRotaryEmbedding, in double.
struct YarnCase {
  const char* name;
  int64_t dim;
  double base, factor;
  int64_t original_max_position;
  double beta_fast, beta_slow, mscale, mscale_all_dim;
};

double YarnGetMscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

double YarnFindCorrectionDim(double num_rotations, int64_t dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (num_rotations * 2 * M_PI))) / (2 * std::log(base));
}

std::vector<double> YarnInvFreqHf(const YarnCase& c) {
  const int64_t half = c.dim / 2;
  std::vector<double> freq_extra(half), freq_inter(half);
  for (int64_t i = 0; i < half; ++i) {
    freq_extra[i] = 1.0 / std::pow(c.base, static_cast<double>(2 * i) / c.dim);
    freq_inter[i] = 1.0 / (c.factor * std::pow(c.base, static_cast<double>(2 * i) / c.dim));
  }
  const double orig = static_cast<double>(c.original_max_position);
  double low = std::floor(YarnFindCorrectionDim(c.beta_fast, c.dim, c.base, orig));
  double high = std::ceil(YarnFindCorrectionDim(c.beta_slow, c.dim, c.base, orig));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(c.dim - 1));
  if (low == high) high += 0.001;  // yarn_linear_ramp_mask
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    double ramp = (static_cast<double>(i) - low) / (high - low);
    ramp = std::min(std::max(ramp, 0.0), 1.0);
    const double mask = 1.0 - ramp;  // inv_freq_mask
    inv_freq[i] = freq_inter[i] * (1.0 - mask) + freq_extra[i] * mask;
  }
  return inv_freq;
}

double YarnMagnitudeHf(const YarnCase& c) {
  return YarnGetMscale(c.factor, c.mscale) / YarnGetMscale(c.factor, c.mscale_all_dim);
}

const YarnCase kYarnCases[] = {
    // DeepSeek-V3 / R1 config.json rope_scaling.
    {"v3", 64, 10000, 40, 4096, 32, 1, 1.0, 1.0},
    // DeepSeek-V2 / V2-Lite.
    {"v2", 64, 10000, 40, 4096, 32, 1, 0.707, 0.707},
    // mscale != mscale_all_dim: magnitude = 1.369 / 1.261 ≠ 1.
    {"mixed", 64, 10000, 40, 4096, 32, 1, 1.0, 0.707},
    // mscale_all_dim absent (0): magnitude = yarn_get_mscale(40, 1) alone.
    {"no_all_dim", 64, 10000, 40, 4096, 32, 1, 1.0, 0.0},
    // The make-model "tiny" preset's scaling, other dim and base.
    {"tiny", 32, 10000, 4, 256, 32, 1, 1.0, 1.0},
    {"dim128", 128, 500000, 8, 8192, 32, 1, 1.0, 1.0},
    // original_max_position 6: both correction dims are <= 0, so low = high = 0 and the
    // ramp gets the +0.001 width (HF's zero-width guard).
    {"degenerate_ramp", 64, 10000, 40, 6, 32, 1, 1.0, 1.0},
};

YarnParams ToParams(const YarnCase& c) {
  YarnParams p;
  p.factor = c.factor;
  p.original_max_position = c.original_max_position;
  p.beta_fast = c.beta_fast;
  p.beta_slow = c.beta_slow;
  p.mscale = c.mscale;
  p.mscale_all_dim = c.mscale_all_dim;
  return p;
}

TEST(KernelsRope, YarnMatchesHuggingFaceFormula) {
  for (const YarnCase& c : kYarnCases) {
    SCOPED_TRACE(c.name);
    const RopeFrequencies rope = RopeFrequencies::Yarn(c.dim, c.base, ToParams(c));
    const std::vector<double> want = YarnInvFreqHf(c);
    ASSERT_EQ(rope.inv_freq().size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(rope.inv_freq()[i], want[i], kYarnRelTol * want[i]) << "inv_freq[" << i << "]";
    }
    EXPECT_NEAR(rope.magnitude(), YarnMagnitudeHf(c), kYarnRelTol) << "magnitude";
    // The highest frequency is kept and the lowest divided by the factor (the direction
    // of the ramp), as the YaRN paper's §3.2 prescribes.
    const std::vector<double> plain = PlainInvFreq(c.dim, c.base);
    EXPECT_NEAR(rope.inv_freq().front(), plain.front(), kYarnRelTol * plain.front());
    EXPECT_NEAR(rope.inv_freq().back(), plain.back() / c.factor,
                kYarnRelTol * plain.back() / c.factor);
  }
  // The magnitudes the cases are meant to exercise.
  EXPECT_EQ(YarnMagnitudeHf(kYarnCases[0]), 1.0);
  EXPECT_EQ(YarnMagnitudeHf(kYarnCases[1]), 1.0);
  EXPECT_GT(YarnMagnitudeHf(kYarnCases[2]), 1.05);
  // Sanity of the V3 ramp: low = floor(10.47) = 10, high = ceil(22.5) = 23, so some
  // frequencies sit strictly between the kept and the interpolated value.
  {
    const RopeFrequencies v3 = RopeFrequencies::Yarn(64, 10000, ToParams(kYarnCases[0]));
    const std::vector<double> plain = PlainInvFreq(64, 10000);
    EXPECT_NEAR(v3.inv_freq()[10], plain[10], kYarnRelTol * plain[10]);
    EXPECT_NEAR(v3.inv_freq()[23], plain[23] / 40, kYarnRelTol * plain[23]);
    EXPECT_LT(v3.inv_freq()[16], plain[16] * 0.9);
    EXPECT_GT(v3.inv_freq()[16], plain[16] / 40 * 1.1);
  }
}

TEST(KernelsRope, YarnApplyRotatesAndScalesByMagnitude) {
  std::mt19937 rng(25);
  for (const YarnCase& c : kYarnCases) {
    const RopeFrequencies rope = RopeFrequencies::Yarn(c.dim, c.base, ToParams(c));
    const std::vector<double> inv_freq = YarnInvFreqHf(c);
    const double magnitude = YarnMagnitudeHf(c);
    for (int64_t pos : kPositions) {
      SCOPED_TRACE(std::string(c.name) + " pos=" + std::to_string(pos));
      const std::vector<float> x = RandomVector(c.dim, rng);
      std::vector<float> y = x;
      rope.ApplyOne(y.data(), pos);
      ExpectAllNear(y, RotateComplex(x, pos, inv_freq, magnitude), kRopeAbsTol, 0.0, "yarn rope");
      EXPECT_NEAR(Norm(y), magnitude * Norm(x), kRopeNormRelTol * magnitude * Norm(x));
    }
  }
}

TEST(KernelsRope, YarnMscaleFunction) {
  for (double s : {0.5, 1.0, 4.0, 40.0}) {
    for (double m : {0.0, 0.707, 1.0}) {
      EXPECT_NEAR(YarnMscale(s, m), YarnGetMscale(s, m), 1e-15) << s << " " << m;
    }
  }
}

// softmax_scale in DeepseekV2Attention / V3: q_head_dim^-0.5, times
// yarn_get_mscale(factor, mscale_all_dim)² when rope_scaling has mscale_all_dim.
TEST(KernelsSoftmaxScale, ReleasedConfigs) {
  struct Want {
    const char* name;
    double qk_head_dim, factor, mscale_all_dim;
  };
  for (const Want& w : {Want{"v3", 192, 40, 1.0}, Want{"r1", 192, 40, 1.0},
                        Want{"v2", 192, 40, 0.707}}) {
    SCOPED_TRACE(w.name);
    const Result<ModelConfig> c = ReleasedConfig(w.name);
    ASSERT_TRUE(c.ok());
    ASSERT_EQ(c->QkHeadDim(), static_cast<int64_t>(w.qk_head_dim));
    const double mscale = 0.1 * w.mscale_all_dim * std::log(w.factor) + 1.0;
    const double want = 1.0 / std::sqrt(w.qk_head_dim) * mscale * mscale;
    EXPECT_NEAR(c->SoftmaxScale(), want, kSoftmaxScaleRelTol * want);
  }
  // V3: 1/sqrt(192) = 0.07217, (0.1·ln 40 + 1)² = 1.8739: 0.13524.
  Result<ModelConfig> v3 = ReleasedConfig("v3");
  ASSERT_TRUE(v3.ok());
  EXPECT_NEAR(v3->SoftmaxScale(), 0.13524, 1e-5);
  // Without rope_scaling: just 1/sqrt(d_n + d_r).
  ModelConfig plain = v3.value();
  plain.rope_scaling.reset();
  EXPECT_NEAR(plain.SoftmaxScale(), 1.0 / std::sqrt(192.0), kSoftmaxScaleRelTol);
}

// ---------------------------------------------------------------------------------------
// SiluMul

std::vector<double> SiluMulDouble(const std::vector<float>& g, const std::vector<float>& u) {
  std::vector<double> out(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    out[i] = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * double(u[i]);
  }
  return out;
}

TEST(KernelsSiluMul, MatchesDouble) {
  std::mt19937 rng(31);
  // 70000 > 65536: the OpenMP-parallel path.
  for (int64_t count : {1, 7, 1000, 70000}) {
    SCOPED_TRACE("count=" + std::to_string(count));
    std::vector<float> g = RandomVector(count, rng, -8.0f, 8.0f);
    const std::vector<float> u = RandomVector(count, rng, -2.0f, 2.0f);
    if (count >= 7) {  // saturated tails: silu(g) → g for g >> 0, → 0 for g << 0
      g[1] = 30.0f;
      g[2] = -30.0f;
      g[3] = -100.0f;  // exp(100) overflows f32
      g[4] = 100.0f;
    }
    std::vector<float> out(count, NAN);
    SiluMul(g.data(), u.data(), count, out.data());
    ExpectAllNear(out, SiluMulDouble(g, u), kSiluAbsTol, kSiluRelTol, "silu_mul");
  }
}

TEST(KernelsSiluMul, InPlace) {
  std::mt19937 rng(32);
  const int64_t count = 513;
  const std::vector<float> g = RandomVector(count, rng, -8.0f, 8.0f);
  const std::vector<float> u = RandomVector(count, rng, -2.0f, 2.0f);
  const std::vector<double> want = SiluMulDouble(g, u);
  std::vector<float> into_gate = g;  // out aliases gate, as MlpForward calls it
  SiluMul(into_gate.data(), u.data(), count, into_gate.data());
  ExpectAllNear(into_gate, want, kSiluAbsTol, kSiluRelTol, "out = gate");
  std::vector<float> into_up = u;
  SiluMul(g.data(), into_up.data(), count, into_up.data());
  ExpectAllNear(into_up, want, kSiluAbsTol, kSiluRelTol, "out = up");
}

// ---------------------------------------------------------------------------------------
// Attention

// Softmax attention of one query vector over `n` keys, in double.
// key(t), value(t) give pointers to key / value t. Returns lse; writes out[value_dim].
template <typename KeyFn, typename ValueFn>
double SoftmaxAttendDouble(const float* q, int64_t key_dim, int64_t value_dim, int64_t n,
                           double scale, KeyFn key, ValueFn value, double* out) {
  std::vector<double> s(n);
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t t = 0; t < n; ++t) {
    const float* kt = key(t);
    double dot = 0;
    for (int64_t j = 0; j < key_dim; ++j) dot += double(q[j]) * double(kt[j]);
    s[t] = scale * dot;
    m = std::max(m, s[t]);
  }
  double z = 0;
  for (int64_t t = 0; t < n; ++t) z += std::exp(s[t] - m);
  for (int64_t j = 0; j < value_dim; ++j) out[j] = 0;
  for (int64_t t = 0; t < n; ++t) {
    const double p = std::exp(s[t] - m) / z;
    const float* vt = value(t);
    for (int64_t j = 0; j < value_dim; ++j) out[j] += p * double(vt[j]);
  }
  return m + std::log(z);
}

struct CausalCase {
  int64_t num_queries, first_position, heads;
};

TEST(KernelsCausalAttention, MatchesDoubleReference) {
  constexpr int64_t kKeyDim = 24, kValueDim = 16;
  // q·k of 24 uniform [-1, 1] pairs has std sqrt(24/9) ≈ 1.6, so scores have std ~1.1:
  // the softmax is neither uniform nor one-hot.
  constexpr float kScale = 0.7f;
  std::mt19937 rng(41);
  for (const CausalCase& c : {CausalCase{5, 7, 1}, CausalCase{5, 7, 4}, CausalCase{9, 0, 1},
                              CausalCase{9, 0, 4}, CausalCase{1, 20, 4}, CausalCase{1, 0, 4},
                              CausalCase{33, 100, 4}}) {
    const int64_t n = c.num_queries, H = c.heads, S = c.first_position + n;
    SCOPED_TRACE("n=" + std::to_string(n) + " first_position=" +
                 std::to_string(c.first_position) + " heads=" + std::to_string(H));
    const std::vector<float> q = RandomVector(n * H * kKeyDim, rng);
    const std::vector<float> k = RandomVector(S * H * kKeyDim, rng);
    const std::vector<float> v = RandomVector(S * H * kValueDim, rng);
    std::vector<float> out(n * H * kValueDim, NAN), lse(n * H, NAN);
    CausalAttentionParams p;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.out = out.data();
    p.lse = lse.data();
    p.num_queries = n;
    p.num_keys = S;
    p.first_position = c.first_position;
    p.heads = H;
    p.key_dim = kKeyDim;
    p.value_dim = kValueDim;
    p.scale = kScale;
    CausalAttention(p);

    std::vector<double> want_out(n * H * kValueDim), want_lse(n * H);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t visible = c.first_position + i + 1;  // keys 0..position
        want_lse[i * H + h] = SoftmaxAttendDouble(
            &q[(i * H + h) * kKeyDim], kKeyDim, kValueDim, visible, kScale,
            [&](int64_t t) { return &k[(t * H + h) * kKeyDim]; },
            [&](int64_t t) { return &v[(t * H + h) * kValueDim]; },
            &want_out[(i * H + h) * kValueDim]);
      }
    }
    ExpectAllNear(out, want_out, kAttnOutTol, 0.0, "out");
    ExpectAllNear(lse, want_lse, kAttnLseTol, 0.0, "lse");

    // lse is optional: the output must not depend on it.
    std::vector<float> out2(n * H * kValueDim, NAN);
    p.out = out2.data();
    p.lse = nullptr;
    CausalAttention(p);
    ExpectAllNear(out2, want_out, kAttnOutTol, 0.0, "out without lse");
  }
}


constexpr int64_t kRowDim = 72, kValueDim = 64;
// Scores have std ~1.4 on uniform [-1, 1] inputs of 72 values (|q·row| std ≈ 2.8).
constexpr float kSharedScale = 0.5f;

struct SharedResult {
  std::vector<float> out, lse;
};

SharedResult RunSharedKey(const std::vector<float>& q, const float* rows, int64_t num_rows,
                          int64_t heads) {
  SharedResult r{std::vector<float>(heads * kValueDim, NAN), std::vector<float>(heads, NAN)};
  SharedKeyAttentionParams p;
  p.q = q.data();
  p.rows = rows;
  p.out = r.out.data();
  p.lse = r.lse.data();
  p.num_rows = num_rows;
  p.heads = heads;
  p.row_dim = kRowDim;
  p.value_dim = kValueDim;
  p.scale = kSharedScale;
  SharedKeyAttention(p);
  return r;
}

void SharedKeyDouble(const std::vector<float>& q, const float* rows, int64_t num_rows,
                     int64_t heads, std::vector<double>* out, std::vector<double>* lse) {
  out->assign(heads * kValueDim, 0);
  lse->assign(heads, 0);
  for (int64_t h = 0; h < heads; ++h) {
    (*lse)[h] = SoftmaxAttendDouble(
        &q[h * kRowDim], kRowDim, kValueDim, num_rows, kSharedScale,
        [&](int64_t t) { return rows + t * kRowDim; },
        [&](int64_t t) { return rows + t * kRowDim; },  // the value is the row's prefix
        &(*out)[h * kValueDim]);
  }
}

TEST(KernelsSharedKeyAttention, MatchesDoubleReference) {
  std::mt19937 rng(51);
  // 2 threads: 2000 rows take two splits (below 256 rows per thread there is one);
  // 3 threads: three uneven splits.
  for (int threads : {2, 3}) {
    ScopedOmpThreads scoped(threads);
    for (int64_t num_rows : {1, 5, 300, 2000}) {
      for (int64_t heads : {1, 3, 16}) {
        SCOPED_TRACE("threads=" + std::to_string(threads) + " rows=" +
                     std::to_string(num_rows) + " heads=" + std::to_string(heads));
        const std::vector<float> q = RandomVector(heads * kRowDim, rng);
        const std::vector<float> rows = RandomVector(num_rows * kRowDim, rng);
        const SharedResult got = RunSharedKey(q, rows.data(), num_rows, heads);
        std::vector<double> want_out, want_lse;
        SharedKeyDouble(q, rows.data(), num_rows, heads, &want_out, &want_lse);
        ExpectAllNear(got.out, want_out, kAttnOutTol, 0.0, "out");
        ExpectAllNear(got.lse, want_lse, kAttnLseTol, 0.0, "lse");
      }
    }
  }
}

TEST(KernelsSharedKeyAttention, WithoutLse) {
  std::mt19937 rng(52);
  ScopedOmpThreads scoped(2);
  const int64_t heads = 3, num_rows = 2000;
  const std::vector<float> q = RandomVector(heads * kRowDim, rng);
  const std::vector<float> rows = RandomVector(num_rows * kRowDim, rng);
  std::vector<float> out(heads * kValueDim, NAN);
  SharedKeyAttentionParams p;
  p.q = q.data();
  p.rows = rows.data();
  p.out = out.data();
  p.num_rows = num_rows;
  p.heads = heads;
  p.row_dim = kRowDim;
  p.value_dim = kValueDim;
  p.scale = kSharedScale;
  SharedKeyAttention(p);
  std::vector<double> want_out, want_lse;
  SharedKeyDouble(q, rows.data(), num_rows, heads, &want_out, &want_lse);
  ExpectAllNear(out, want_out, kAttnOutTol, 0.0, "out");
}

// With the same key/value for every head, per-head causal attention of the last query
// (it sees every key) is multi-query attention over shared rows.
TEST(KernelsSharedKeyAttention, EqualsCausalWithRepeatedKeys) {
  std::mt19937 rng(53);
  ScopedOmpThreads scoped(2);
  for (int64_t num_rows : {1, 5, 300, 2000}) {
    for (int64_t heads : {1, 3, 16}) {
      SCOPED_TRACE("rows=" + std::to_string(num_rows) + " heads=" + std::to_string(heads));
      const std::vector<float> q = RandomVector(heads * kRowDim, rng);  // [1, H, row_dim]
      const std::vector<float> rows = RandomVector(num_rows * kRowDim, rng);
      const SharedResult shared = RunSharedKey(q, rows.data(), num_rows, heads);

      std::vector<float> k(num_rows * heads * kRowDim);    // k: [S, H, row_dim]
      std::vector<float> v(num_rows * heads * kValueDim);  // v: [S, H, value_dim]
      for (int64_t t = 0; t < num_rows; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
          std::copy_n(&rows[t * kRowDim], kRowDim, &k[(t * heads + h) * kRowDim]);
          std::copy_n(&rows[t * kRowDim], kValueDim, &v[(t * heads + h) * kValueDim]);
        }
      }
      std::vector<float> out(heads * kValueDim, NAN), lse(heads, NAN);
      CausalAttentionParams p;
      p.q = q.data();
      p.k = k.data();
      p.v = v.data();
      p.out = out.data();
      p.lse = lse.data();
      p.num_queries = 1;
      p.num_keys = num_rows;
      p.first_position = num_rows - 1;
      p.heads = heads;
      p.key_dim = kRowDim;
      p.value_dim = kValueDim;
      p.scale = kSharedScale;
      CausalAttention(p);
      // Both are f32 with the reference error budget each.
      ExpectAllNear(shared.out, out, 2 * kAttnOutTol, "out");
      ExpectAllNear(shared.lse, lse, 2 * kAttnLseTol, "lse");
    }
  }
}

TEST(KernelsMergeAttentionPartials, ThreeSplitsEqualOneShot) {
  std::mt19937 rng(61);
  ScopedOmpThreads scoped(2);
  // Uneven parts, including a 1-row part whose lse (one score) is ~7 below the
  // 2000-row part's, so the merge weights are far from equal.
  struct Split {
    int64_t a, b, c;
  };
  for (const Split& s : {Split{100, 350, 250}, Split{1, 2000, 7}, Split{600, 600, 600}}) {
    for (int64_t heads : {1, 3, 16}) {
      const int64_t total = s.a + s.b + s.c;
      SCOPED_TRACE("split=" + std::to_string(s.a) + "+" + std::to_string(s.b) + "+" +
                   std::to_string(s.c) + " heads=" + std::to_string(heads));
      const std::vector<float> q = RandomVector(heads * kRowDim, rng);
      const std::vector<float> rows = RandomVector(total * kRowDim, rng);
      const SharedResult whole = RunSharedKey(q, rows.data(), total, heads);
      const SharedResult p0 = RunSharedKey(q, rows.data(), s.a, heads);
      const SharedResult p1 = RunSharedKey(q, rows.data() + s.a * kRowDim, s.b, heads);
      const SharedResult p2 = RunSharedKey(q, rows.data() + (s.a + s.b) * kRowDim, s.c, heads);
      const float* outs[] = {p0.out.data(), p1.out.data(), p2.out.data()};
      const float* lses[] = {p0.lse.data(), p1.lse.data(), p2.lse.data()};
      std::vector<float> out(heads * kValueDim, NAN), lse(heads, NAN);
      MergeAttentionPartials(outs, lses, 3, heads, kValueDim, out.data(), lse.data());
      ExpectAllNear(out, whole.out, kMergeTol, "merged out vs one-shot");
      ExpectAllNear(lse, whole.lse, kMergeTol, "merged lse vs one-shot");

      std::vector<double> want_out, want_lse;
      SharedKeyDouble(q, rows.data(), total, heads, &want_out, &want_lse);
      ExpectAllNear(out, want_out, kAttnOutTol, 0.0, "merged out vs double");
      ExpectAllNear(lse, want_lse, kAttnLseTol, 0.0, "merged lse vs double");

      // out may alias outs[0].
      SharedResult alias = p0;
      const float* alias_outs[] = {alias.out.data(), p1.out.data(), p2.out.data()};
      std::vector<float> lse2(heads, NAN);
      MergeAttentionPartials(alias_outs, lses, 3, heads, kValueDim, alias.out.data(), lse2.data());
      ExpectAllNear(alias.out, out, 0.0, "merged in place into outs[0]");
    }
  }
}


// ---- SharedKeyAttention block kernels (attention_internal.h), each variant ----

struct SharedKeyKernels {
  const char* name;
  decltype(&attention_internal::SharedKeyScoresPortable) scores;
  decltype(&attention_internal::SharedKeySoftmaxPortable) softmax;
  decltype(&attention_internal::SharedKeyAccumulatePortable) accumulate;
};

std::vector<SharedKeyKernels> SharedKeyKernelVariants() {
  std::vector<SharedKeyKernels> v = {{"portable", attention_internal::SharedKeyScoresPortable,
                                      attention_internal::SharedKeySoftmaxPortable,
                                      attention_internal::SharedKeyAccumulatePortable}};
  if (GetCpuFeatures().avx512f) {
    v.push_back({"avx512", attention_internal::SharedKeyScoresAvx512,
                 attention_internal::SharedKeySoftmaxAvx512,
                 attention_internal::SharedKeyAccumulateAvx512});
  }
  return v;
}

struct BlockShape {
  int64_t row_dim, value_dim;
};
constexpr BlockShape kBlockShapes[] = {{40, 32}, {72, 64}, {576, 512}, {33, 17}, {100, 79}};
constexpr int64_t kBlockRows[] = {1, 2, 3, 4, 5, 15, 16, 17, 33, 63, 64};
constexpr int64_t kBlockHeads[] = {1, 5, 128};
constexpr int64_t kLd = attention_internal::kSharedKeyBlock;

TEST(KernelsSharedKeyBlocks, ScoresMatchDouble) {
  std::mt19937 rng(71);
  const float scale = 0.3f;
  for (const SharedKeyKernels& k : SharedKeyKernelVariants()) {
    for (const BlockShape& s : kBlockShapes) {
      for (int64_t heads : kBlockHeads) {
        for (int64_t n : kBlockRows) {
          SCOPED_TRACE(std::string(k.name) + " row_dim=" + std::to_string(s.row_dim) +
                       " heads=" + std::to_string(heads) + " n=" + std::to_string(n));
          const std::vector<float> q = RandomVector(heads * s.row_dim, rng);
          const std::vector<float> rows = RandomVector(n * s.row_dim, rng);
          std::vector<float> scores(heads * kLd, NAN);
          k.scores(q.data(), heads, rows.data(), n, s.row_dim, scale, scores.data(), kLd);
          size_t bad = 0;
          for (int64_t h = 0; h < heads; ++h) {
            for (int64_t t = 0; t < kLd; ++t) {
              const float got = scores[h * kLd + t];
              if (t >= n) {  // past the block: untouched
                bad += !std::isnan(got);
                continue;
              }
              double dot = 0, mag = 0;
              for (int64_t j = 0; j < s.row_dim; ++j) {
                const double x = double(q[h * s.row_dim + j]) * rows[t * s.row_dim + j];
                dot += x;
                mag += std::fabs(x);
              }
              // f32 accumulation error: well within 1e-5 of the sum of |terms|.
              bad += !(std::fabs(got - scale * dot) <= 1e-5 * scale * mag + 1e-30);
            }
          }
          EXPECT_EQ(bad, 0u);
        }
      }
    }
  }
}

TEST(KernelsSharedKeyBlocks, SoftmaxMatchesDouble) {
  std::mt19937 rng(72);
  for (const SharedKeyKernels& k : SharedKeyKernelVariants()) {
    for (int64_t heads : kBlockHeads) {
      for (int64_t n : kBlockRows) {
        SCOPED_TRACE(std::string(k.name) + " heads=" + std::to_string(heads) + " n=" +
                     std::to_string(n));
        // First block (max = -inf, sum = 0), then a second one over the same state.
        std::vector<float> max(heads, -std::numeric_limits<float>::infinity());
        std::vector<float> sum(heads, 0.0f), rescale(heads, NAN);
        std::vector<double> want_max(heads, -1e300), want_sum(heads, 0.0);
        for (int pass = 0; pass < 2; ++pass) {
          // Scores up to ±20 so exp spans a wide range; pass 1 shifts some heads up.
          std::vector<float> scores = RandomVector(heads * kLd, rng, -20.0f, 20.0f);
          if (pass == 1) {
            for (int64_t h = 0; h < heads; h += 2) {
              for (int64_t t = 0; t < n; ++t) scores[h * kLd + t] += 15.0f;
            }
          }
          const std::vector<float> in = scores;
          for (int64_t h = 0; h < heads; ++h) {
            for (int64_t t = n; t < kLd; ++t) scores[h * kLd + t] = NAN;
          }
          k.softmax(scores.data(), kLd, heads, n, max.data(), sum.data(), rescale.data());
          size_t bad = 0;
          for (int64_t h = 0; h < heads; ++h) {
            double m = want_max[h];
            for (int64_t t = 0; t < n; ++t) m = std::max(m, double(in[h * kLd + t]));
            const double r = std::exp(want_max[h] - m);
            double block_sum = 0;
            for (int64_t t = 0; t < n; ++t) {
              const double e = std::exp(double(in[h * kLd + t]) - m);
              block_sum += e;
              // The f32 argument s - m is rounded (|s - m| <= 55: ~4e-6 abs), then exp.
              bad += !(std::fabs(scores[h * kLd + t] - e) <= 1e-5 * e + 1e-30);
            }
            for (int64_t t = n; t < kLd; ++t) bad += !std::isnan(scores[h * kLd + t]);
            want_sum[h] = want_sum[h] * r + block_sum;
            want_max[h] = m;
            bad += !(max[h] == static_cast<float>(m));
            bad += !(std::fabs(rescale[h] - r) <= 1e-5 * r + 1e-30);
            bad += !(std::fabs(sum[h] - want_sum[h]) <= 2e-5 * want_sum[h]);
          }
          EXPECT_EQ(bad, 0u) << "pass " << pass;
        }
      }
    }
  }
}

TEST(KernelsSharedKeyBlocks, AccumulateMatchesDouble) {
  std::mt19937 rng(73);
  for (const SharedKeyKernels& k : SharedKeyKernelVariants()) {
    for (const BlockShape& s : kBlockShapes) {
      for (int64_t heads : kBlockHeads) {
        for (int64_t n : kBlockRows) {
          for (bool with_rescale : {true, false}) {
            SCOPED_TRACE(std::string(k.name) + " row_dim=" + std::to_string(s.row_dim) +
                         " value_dim=" + std::to_string(s.value_dim) + " heads=" +
                         std::to_string(heads) + " n=" + std::to_string(n) +
                         " rescale=" + std::to_string(with_rescale));
            const std::vector<float> p = RandomVector(heads * kLd, rng, 0.0f, 1.0f);
            const std::vector<float> rows = RandomVector(n * s.row_dim, rng);
            const std::vector<float> rescale = RandomVector(heads, rng, 0.0f, 1.0f);
            const std::vector<float> acc0 = RandomVector(heads * s.value_dim, rng, -5.0f, 5.0f);
            std::vector<float> acc = acc0;
            k.accumulate(p.data(), kLd, heads, rows.data(), n, s.row_dim, s.value_dim,
                         with_rescale ? rescale.data() : nullptr, acc.data());
            size_t bad = 0;
            for (int64_t h = 0; h < heads; ++h) {
              const double r = with_rescale ? rescale[h] : 1.0;
              for (int64_t j = 0; j < s.value_dim; ++j) {
                double want = acc0[h * s.value_dim + j] * r;
                double mag = std::fabs(want);
                for (int64_t t = 0; t < n; ++t) {
                  const double x = double(p[h * kLd + t]) * rows[t * s.row_dim + j];
                  want += x;
                  mag += std::fabs(x);
                }
                bad += !(std::fabs(acc[h * s.value_dim + j] - want) <= 1e-5 * mag + 1e-30);
              }
            }
            EXPECT_EQ(bad, 0u);
          }
        }
      }
    }
  }
}

// At R1's widths (row_dim 576, value_dim 512), and at the tiny model-test widths:
// the portable and dispatched (AVX-512 where available) paths both match the
// double-precision reference, and each other.
TEST(KernelsSharedKeyAttention, PortableAndDispatchedMatchReference) {
  std::mt19937 rng(74);
  ScopedOmpThreads scoped(2);
  for (const BlockShape& s : {BlockShape{576, 512}, BlockShape{40, 32}}) {
    for (int64_t num_rows : {1, 7, 130, 1000}) {
      for (int64_t heads : {1, 5, 128}) {
        SCOPED_TRACE("row_dim=" + std::to_string(s.row_dim) + " rows=" +
                     std::to_string(num_rows) + " heads=" + std::to_string(heads));
        const std::vector<float> q = RandomVector(heads * s.row_dim, rng);
        const std::vector<float> rows = RandomVector(num_rows * s.row_dim, rng);
        SharedKeyAttentionParams p;
        p.q = q.data();
        p.rows = rows.data();
        p.num_rows = num_rows;
        p.heads = heads;
        p.row_dim = s.row_dim;
        p.value_dim = s.value_dim;
        p.scale = 1.0f / std::sqrt(float(s.row_dim)) * 3.0f;  // score std ~1.7
        SharedResult want{std::vector<float>(heads * s.value_dim), std::vector<float>(heads)};
        p.out = want.out.data();
        p.lse = want.lse.data();
        SharedKeyAttentionReference(p);
        SharedResult got[2];
        for (int portable = 0; portable < 2; ++portable) {
          ScopedPortableKernels force(portable == 1);
          got[portable] = {std::vector<float>(heads * s.value_dim, NAN),
                           std::vector<float>(heads, NAN)};
          p.out = got[portable].out.data();
          p.lse = got[portable].lse.data();
          SharedKeyAttention(p);
          const std::string what = portable ? "portable" : "dispatched";
          ExpectAllNear(got[portable].out, want.out, 2 * kAttnOutTol, what + " out");
          ExpectAllNear(got[portable].lse, want.lse, 2 * kAttnLseTol, what + " lse");
        }
        ExpectAllNear(got[0].out, got[1].out, 2 * kAttnOutTol, "dispatched vs portable out");
        ExpectAllNear(got[0].lse, got[1].lse, 2 * kAttnLseTol, "dispatched vs portable lse");
      }
    }
  }
}

}  // namespace
}  // namespace latte
