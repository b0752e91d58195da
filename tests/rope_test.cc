// Rope (plain and YaRN) against a complex rotation in double and DeepSeek-V2's Hugging
// Face formulas written here; the per-position form that rotates many vectors with one
// cos/sin computation; the YaRN softmax scale of the released configs; and the checked
// boundaries.
#include "kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/presets.h"
#include "test_util.h"

namespace latte {
namespace {

using testing_util::ExpectAllNear;
using testing_util::RandomVector;

// cos/sin are computed in double and rounded to f32, then a*c - b*s in f32: a few
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

// Rotates consecutive pairs as complex numbers: (x[2i] + i·x[2i+1]) · magnitude ·
// e^{i·pos·θ_i}, in double.
std::vector<double> RotateComplex(const std::vector<float>& x, int64_t position, const std::vector<double>& inv_freq,
                                  double magnitude) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size() / 2; ++i) {
    const std::complex<double> z(x[2 * i], x[2 * i + 1]);
    const std::complex<double> r = z * std::polar(magnitude, static_cast<double>(position) * inv_freq[i]);
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

TEST(Rope, PlainMatchesComplexRotation) {
  std::mt19937 rng(21);
  for (int64_t dim : {2, 64, 128}) {
    for (double theta : {10000.0, 500000.0}) {
      const RopeFrequencies rope = RopeFrequencies::Plain(dim, theta);
      ASSERT_EQ(rope.dim(), dim);
      ASSERT_EQ(rope.magnitude(), 1.0);
      const std::vector<double> inv_freq = PlainInvFreq(dim, theta);
      for (int64_t pos : kPositions) {
        SCOPED_TRACE("dim=" + std::to_string(dim) + " theta=" + std::to_string(theta) + " pos=" + std::to_string(pos));
        const std::vector<float> x = RandomVector(dim, rng);
        std::vector<float> y = x;
        rope.ApplyOne(y.data(), pos);
        ExpectAllNear(y, RotateComplex(x, pos, inv_freq, 1.0), kRopeAbsTol, 0.0, "rope");
      }
    }
  }
}

TEST(Rope, ApplyRowsMatchesComplexRotation) {
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

TEST(Rope, PlainPreservesNorm) {
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
TEST(Rope, ScoreDependsOnlyOnRelativePosition) {
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
  for (const Pair& c :
       {Pair{10, 3, 1010, 1003}, Pair{3, 10, 4095, 4102}, Pair{5, 5, 0, 0}, Pair{17, 0, 100017, 100000}}) {
    const double a = score(c.p1, c.p2), b = score(c.p1b, c.p2b);
    EXPECT_NEAR(a, b, kRopeDotRelTol * scale) << "(" << c.p1 << "," << c.p2 << ") vs (" << c.p1b << "," << c.p2b << ")";
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

double YarnGetMscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

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

TEST(Rope, YarnMatchesHuggingFaceFormula) {
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
    EXPECT_NEAR(rope.inv_freq().back(), plain.back() / c.factor, kYarnRelTol * plain.back() / c.factor);
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

TEST(Rope, YarnApplyRotatesAndScalesByMagnitude) {
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

TEST(Rope, YarnMscaleFunction) {
  for (double s : {0.5, 1.0, 4.0, 40.0}) {
    for (double m : {0.0, 0.707, 1.0}) {
      EXPECT_NEAR(YarnMscale(s, m), YarnGetMscale(s, m), 1e-15) << s << " " << m;
    }
  }
}

// softmax_scale in DeepseekV2Attention / V3: q_head_dim^-0.5, times
// yarn_get_mscale(factor, mscale_all_dim)² when rope_scaling has mscale_all_dim.
TEST(SoftmaxScale, ReleasedConfigs) {
  struct Want {
    const char* name;
    double qk_head_dim, factor, mscale_all_dim;
  };
  for (const Want& w : {Want{"v3", 192, 40, 1.0}, Want{"r1", 192, 40, 1.0}, Want{"v2", 192, 40, 0.707}}) {
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

// ApplyAtPosition (all heads of one token, one cos/sin computation) rotates each of
// its vectors exactly as ApplyOne does, at any stride and pair count (more than the
// 32 pairs it computes at a time, and an odd number of them), and leaves the gaps
// between vectors alone.
TEST(Rope, ApplyAtPositionEqualsApplyOneOnEachVector) {
  std::mt19937 rng(26);
  for (int64_t dim : {2, 64, 70, 130}) {
    const RopeFrequencies rope = RopeFrequencies::Yarn(dim, 10000.0, ToParams(kYarnCases[2]));  // magnitude != 1
    for (int64_t vectors : {1, 3, 16}) {
      const int64_t ld = dim + 5;
      for (int64_t pos : kPositions) {
        SCOPED_TRACE("dim=" + std::to_string(dim) + " vectors=" + std::to_string(vectors) +
                     " pos=" + std::to_string(pos));
        const std::vector<float> x = RandomVector(vectors * ld, rng);
        std::vector<float> all = x, one = x;
        rope.ApplyAtPosition(all.data(), ld, vectors, pos);
        for (int64_t v = 0; v < vectors; ++v) rope.ApplyOne(one.data() + v * ld, pos);
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_EQ(all[i], one[i]) << "vector " << i / ld << " element " << i % ld;
        }
      }
    }
  }
}

TEST(RopeDeathTest, BadShapesAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(RopeFrequencies::Plain(63, 10000.0), "rope: dim 63 must be even and positive");
  const RopeFrequencies rope = RopeFrequencies::Plain(64, 10000.0);
  std::vector<float> x(128);
  const int64_t positions[] = {0, 1};
  EXPECT_DEATH(rope.Apply(x.data(), /*ld=*/32, 2, positions), "rope: 2 rows of stride 32");
}

}  // namespace
}  // namespace latte
