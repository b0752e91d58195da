// SharedKeyAttention over bf16 rows (a bf16 model's latent cache): the vdpbf16ps block
// kernels (attention_internal.h) each against a double computation on the same bf16
// values, and the whole kernel, portable and dispatched, split over threads and not,
// against SharedKeyAttentionReference on random rows.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/dtype.h"
#include "kernels/attention.h"
#include "kernels/attention_internal.h"
#include "test_util.h"

namespace latte {
namespace {

using testing_util::RandomVector;
using testing_util::ScopedOmpThreads;
using testing_util::ScopedPortableKernels;

namespace ai = attention_internal;

// The whole kernel on the vdpbf16ps path rounds q and the softmax weights to bf16
// (relative error <= 2^-8 each, 8 significant bits). Rounding q moves a score
// scale·q·row by ~2^-8/sqrt(3) · scale · sqrt(Σ_k (q_k row_k)²): std ~2.3e-3 here (576
// uniform [-1, 1] values, scale 0.125), and the lse moves with it; each weight moves by
// that relative amount, and out, an average of values in [-1, 1], by less. Measured max
// over these cases: 1.9e-3 on out, 5.6e-3 on lse. The tolerances keep a ~3x margin; a
// wrong mask, a lost block or a mispaired row gives errors of 1e-1 and up.
constexpr double kBf16OutTol = 6e-3;
constexpr double kBf16LseTol = 1.5e-2;
// Split vs unsplit on the vdpbf16ps path: each split rounds its weights relative to its
// own running max, so the rounded weights differ (2^-8 relative, random), averaged over
// thousands of rows. Measured 1.0e-4 (out), 1.2e-4 (lse); 1e-3 leaves a wide margin and
// still catches a merge that drops or double-counts a split (errors ~1e-2 and up).
constexpr double kSplitTol = 1e-3;
// bf16 rows widened to f32 (portable and AVX-512 f32 paths): the f32 error budget of
// kernels_test.cc (1e-5), doubled for the longer 576-wide dots.
constexpr double kF32OutTol = 2e-5;
constexpr double kF32LseTol = 2e-5;


std::vector<bf16> RandomBf16(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<bf16> v(n);
  for (bf16& x : v) x = F32ToBf16(dist(rng));
  return v;
}

// Largest |got - want| and the number of NaNs.
struct ErrorStats {
  double max_abs = 0;
  size_t nans = 0;
};
ErrorStats Compare(const std::vector<float>& got, const std::vector<float>& want) {
  ErrorStats e;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) {
      ++e.nans;
      continue;
    }
    e.max_abs = std::max(e.max_abs, std::fabs(double(got[i]) - want[i]));
  }
  return e;
}



bool HasBf16Dp() { return GetCpuFeatures().avx512_bf16; }

constexpr int64_t kLd = ai::kSharedKeyBlock;

struct BlockShape {
  int64_t row_dim, value_dim;
};
// R1/V2-Lite widths, the tiny model's, and widths with tails in both 16- and 32-lane units.
constexpr BlockShape kBlockShapes[] = {{576, 512}, {40, 32}, {72, 64}, {33, 17}, {100, 79}};
constexpr int64_t kBlockRows[] = {1, 2, 3, 4, 5, 15, 16, 17, 33, 63, 64};
constexpr int64_t kBlockHeads[] = {1, 5, 128};

// ---- block kernels ----

TEST(AttentionBf16Blocks, WidenMatchesScalarConversion) {
  std::mt19937 rng(81);
  for (int64_t count : {1, 15, 16, 17, 576, 1000}) {
    const std::vector<bf16> rows = RandomBf16(count, rng, -100.0f, 100.0f);
    std::vector<float> portable(count, NAN), avx(count, NAN);
    ai::Bf16ToF32Portable(rows.data(), count, portable.data());
    size_t bad = 0;
    for (int64_t i = 0; i < count; ++i) bad += portable[i] != Bf16ToF32(rows[i]);
    if (GetCpuFeatures().avx512f) {
      ai::Bf16ToF32Avx512(rows.data(), count, avx.data());
      for (int64_t i = 0; i < count; ++i) bad += avx[i] != Bf16ToF32(rows[i]);
    }
    EXPECT_EQ(bad, 0u) << "count " << count;
  }
}

TEST(AttentionBf16Blocks, RoundMatchesScalarRounding) {
  if (!HasBf16Dp()) GTEST_SKIP() << "no AVX512_BF16";
  std::mt19937 rng(82);
  for (int64_t count : {1, 15, 16, 17, 576 * 5}) {
    const std::vector<float> q = RandomVector(count, rng, -50.0f, 50.0f);
    std::vector<bf16> got(count + 1, 0xABCD);
    ai::RoundToBf16Avx512(q.data(), count, got.data());
    size_t bad = 0;
    for (int64_t i = 0; i < count; ++i) bad += got[i] != F32ToBf16(q[i]);
    EXPECT_EQ(bad, 0u) << "count " << count;
    EXPECT_EQ(got[count], 0xABCD) << "wrote past the end";
  }
}

TEST(AttentionBf16Blocks, ScoresMatchDouble) {
  if (!HasBf16Dp()) GTEST_SKIP() << "no AVX512_BF16";
  std::mt19937 rng(83);
  const float scale = 0.3f;
  for (const BlockShape& s : kBlockShapes) {
    for (int64_t heads : kBlockHeads) {
      for (int64_t n : kBlockRows) {
        SCOPED_TRACE("row_dim=" + std::to_string(s.row_dim) + " heads=" + std::to_string(heads) +
                     " n=" + std::to_string(n));
        const std::vector<bf16> q = RandomBf16(heads * s.row_dim, rng);
        const std::vector<bf16> rows = RandomBf16(n * s.row_dim, rng);
        std::vector<float> scores(heads * kLd, NAN);
        ai::SharedKeyScoresBf16Dp(q.data(), heads, rows.data(), n, s.row_dim, scale, scores.data(), kLd);
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
              // bf16 x bf16 is exact in f32 (8 + 8 significant bits).
              const double x = double(Bf16ToF32(q[h * s.row_dim + j])) * Bf16ToF32(rows[t * s.row_dim + j]);
              dot += x;
              mag += std::fabs(x);
            }
            bad += !(std::fabs(got - scale * dot) <= 1e-5 * scale * mag + 1e-30);
          }
        }
        EXPECT_EQ(bad, 0u);
      }
    }
  }
}

TEST(AttentionBf16Blocks, SoftmaxWritesRoundedWeightsAndSumsThem) {
  if (!HasBf16Dp()) GTEST_SKIP() << "no AVX512_BF16";
  std::mt19937 rng(84);
  for (int64_t heads : kBlockHeads) {
    for (int64_t n : kBlockRows) {
      SCOPED_TRACE("heads=" + std::to_string(heads) + " n=" + std::to_string(n));
      std::vector<float> max(heads, -std::numeric_limits<float>::infinity());
      std::vector<float> sum(heads, 0.0f), rescale(heads, NAN);
      std::vector<double> want_max(heads, -1e300), want_sum(heads, 0.0);
      for (int pass = 0; pass < 2; ++pass) {
        std::vector<float> scores = RandomVector(heads * kLd, rng, -20.0f, 20.0f);
        if (pass == 1) {
          for (int64_t h = 0; h < heads; h += 2) {
            for (int64_t t = 0; t < n; ++t) scores[h * kLd + t] += 15.0f;
          }
        }
        const std::vector<float> in = scores;
        std::vector<bf16> p(heads * kLd, 0xABCD);
        ai::SharedKeySoftmaxBf16Avx512(scores.data(), kLd, heads, n, max.data(), sum.data(), rescale.data(),
                                       p.data(), kLd);
        EXPECT_EQ(scores, in) << "scores must be left as they are";
        const int64_t n_even = (n + 1) / 2 * 2;
        size_t bad = 0;
        for (int64_t h = 0; h < heads; ++h) {
          double m = want_max[h];
          for (int64_t t = 0; t < n; ++t) m = std::max(m, double(in[h * kLd + t]));
          const double r = std::exp(want_max[h] - m);
          double rounded_sum = 0;
          for (int64_t t = 0; t < n; ++t) {
            const double e = std::exp(double(in[h * kLd + t]) - m);
            const double got = Bf16ToF32(p[h * kLd + t]);
            rounded_sum += got;
            // bf16 rounding (<= 2^-8 relative: 8 significant bits) of an f32 exp good to ~1e-5.
            bad += !(std::fabs(got - e) <= (1.0 / 256 + 1e-5) * e + 1e-30);
          }
          if (n_even > n) bad += p[h * kLd + n] != 0;  // the pad of an odd block
          for (int64_t t = n_even; t < kLd; ++t) bad += p[h * kLd + t] != 0xABCD;
          want_sum[h] = want_sum[h] * r + rounded_sum;
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

TEST(AttentionBf16Blocks, PairRowsInterleavesTwoRows) {
  if (!HasBf16Dp()) GTEST_SKIP() << "no AVX512_BF16";
  std::mt19937 rng(85);
  for (const BlockShape& s : kBlockShapes) {
    for (int64_t n : kBlockRows) {
      SCOPED_TRACE("row_dim=" + std::to_string(s.row_dim) + " n=" + std::to_string(n));
      const std::vector<bf16> rows = RandomBf16(n * s.row_dim, rng);
      const int64_t pairs_count = (n + 1) / 2;
      std::vector<bf16> pairs(pairs_count * 2 * s.value_dim + 1, 0xABCD);
      ai::SharedKeyPairRowsAvx512(rows.data(), n, s.row_dim, s.value_dim, pairs.data());
      size_t bad = 0;
      for (int64_t u = 0; u < pairs_count; ++u) {
        for (int64_t j = 0; j < s.value_dim; ++j) {
          for (int64_t i = 0; i < 2; ++i) {
            const int64_t t = 2 * u + i;
            const bf16 want = t < n ? rows[t * s.row_dim + j] : bf16{0};
            bad += pairs[u * 2 * s.value_dim + 2 * j + i] != want;
          }
        }
      }
      bad += pairs.back() != 0xABCD;  // nothing past the pairs
      EXPECT_EQ(bad, 0u);
    }
  }
}

TEST(AttentionBf16Blocks, AccumulateMatchesDouble) {
  if (!HasBf16Dp()) GTEST_SKIP() << "no AVX512_BF16";
  std::mt19937 rng(86);
  for (const BlockShape& s : kBlockShapes) {
    for (int64_t heads : kBlockHeads) {
      for (int64_t n : kBlockRows) {
        for (bool with_rescale : {true, false}) {
          SCOPED_TRACE("row_dim=" + std::to_string(s.row_dim) + " value_dim=" + std::to_string(s.value_dim) +
                       " heads=" + std::to_string(heads) + " n=" + std::to_string(n) +
                       " rescale=" + std::to_string(with_rescale));
          const std::vector<bf16> rows = RandomBf16(n * s.row_dim, rng);
          std::vector<bf16> p = RandomBf16(heads * kLd, rng, 0.0f, 1.0f);
          if (n % 2 == 1) {
            for (int64_t h = 0; h < heads; ++h) p[h * kLd + n] = 0;  // as the softmax pads
          }
          const std::vector<float> rescale = RandomVector(heads, rng, 0.0f, 1.0f);
          const std::vector<float> acc0 = RandomVector(heads * s.value_dim, rng, -5.0f, 5.0f);
          std::vector<bf16> pairs((n + 1) / 2 * 2 * s.value_dim);
          ai::SharedKeyPairRowsAvx512(rows.data(), n, s.row_dim, s.value_dim, pairs.data());
          std::vector<float> acc = acc0;
          ai::SharedKeyAccumulateBf16Dp(p.data(), kLd, heads, pairs.data(), n, s.value_dim,
                                        with_rescale ? rescale.data() : nullptr, acc.data());
          size_t bad = 0;
          for (int64_t h = 0; h < heads; ++h) {
            const double r = with_rescale ? rescale[h] : 1.0;
            for (int64_t j = 0; j < s.value_dim; ++j) {
              double want = acc0[h * s.value_dim + j] * r;
              double mag = std::fabs(want);
              for (int64_t t = 0; t < n; ++t) {
                const double x = double(Bf16ToF32(p[h * kLd + t])) * Bf16ToF32(rows[t * s.row_dim + j]);
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

// ---- the whole kernel ----

struct Result {
  std::vector<float> out, lse;
};

Result RunShared(SharedKeyAttentionParams p) {
  Result r{std::vector<float>(p.heads * p.value_dim, NAN), std::vector<float>(p.heads, NAN)};
  p.out = r.out.data();
  p.lse = r.lse.data();
  SharedKeyAttention(p);
  return r;
}

// Rows not a multiple of the 64-row block, below and above the 256-rows-per-thread split
// threshold; 1, 5, 16 (V2-Lite) and 128 (R1) heads; 1 thread (one split) and 2 and 3
// (split over context, merged by log-sum-exp); the dispatched path (vdpbf16ps where the
// CPU has it) and the portable one, each against the double reference on the same rows.
TEST(AttentionBf16, PortableAndDispatchedMatchReference) {
  std::mt19937 rng(87);
  double worst_out = 0, worst_lse = 0;
  struct Case {
    BlockShape shape;
    int64_t rows, heads;
  };
  std::vector<Case> cases;
  for (const BlockShape& s : {BlockShape{576, 512}, BlockShape{40, 32}, BlockShape{33, 17}}) {
    for (int64_t rows : {1, 7, 65, 130, 777}) {
      for (int64_t heads : {1, 5, 16}) cases.push_back({s, rows, heads});
    }
  }
  cases.push_back({{576, 512}, 1000, 128});
  cases.push_back({{576, 512}, 2049, 16});
  for (int threads : {1, 2, 3}) {
    ScopedOmpThreads scoped(threads);
    for (const Case& c : cases) {
      if (threads == 3 && c.rows < 777) continue;  // three uneven splits need >= 768 rows
      SCOPED_TRACE("threads=" + std::to_string(threads) + " row_dim=" + std::to_string(c.shape.row_dim) +
                   " rows=" + std::to_string(c.rows) + " heads=" + std::to_string(c.heads));
      const std::vector<float> q = RandomVector(c.heads * c.shape.row_dim, rng);
      const std::vector<bf16> rows = RandomBf16(c.rows * c.shape.row_dim, rng);
      SharedKeyAttentionParams p;
      p.q = q.data();
      p.rows = rows.data();
      p.rows_dtype = DType::kBF16;
      p.num_rows = c.rows;
      p.heads = c.heads;
      p.row_dim = c.shape.row_dim;
      p.value_dim = c.shape.value_dim;
      p.scale = 3.0f / std::sqrt(float(c.shape.row_dim));  // score std ~1.7
      Result want{std::vector<float>(c.heads * c.shape.value_dim), std::vector<float>(c.heads)};
      p.out = want.out.data();
      p.lse = want.lse.data();
      SharedKeyAttentionReference(p);

      const Result dispatched = RunShared(p);
      const ErrorStats out_err = Compare(dispatched.out, want.out);
      const ErrorStats lse_err = Compare(dispatched.lse, want.lse);
      const double out_tol = HasBf16Dp() ? kBf16OutTol : kF32OutTol;
      const double lse_tol = HasBf16Dp() ? kBf16LseTol : kF32LseTol;
      EXPECT_EQ(out_err.nans + lse_err.nans, 0u);
      EXPECT_LE(out_err.max_abs, out_tol) << "dispatched out";
      EXPECT_LE(lse_err.max_abs, lse_tol) << "dispatched lse";
      worst_out = std::max(worst_out, out_err.max_abs);
      worst_lse = std::max(worst_lse, lse_err.max_abs);

      ScopedPortableKernels portable(true);
      const Result port = RunShared(p);
      const ErrorStats pout = Compare(port.out, want.out), plse = Compare(port.lse, want.lse);
      EXPECT_EQ(pout.nans + plse.nans, 0u);
      EXPECT_LE(pout.max_abs, kF32OutTol) << "portable out";
      EXPECT_LE(plse.max_abs, kF32LseTol) << "portable lse";
    }
  }
  std::printf("bf16 rows, dispatched vs reference: max |out error| %.2e, max |lse error| %.2e\n", worst_out,
              worst_lse);
}

// Every path this CPU can run, forced (the dispatch picks only one of the AVX-512 ones
// for bf16 rows): the widening f32 paths to the f32 tolerance, vdpbf16ps to bf16's.
TEST(AttentionBf16, EveryPathMatchesReference) {
  std::mt19937 rng(89);
  ScopedOmpThreads scoped(2);
  std::vector<std::pair<ai::SharedKeyPath, double>> paths = {{ai::SharedKeyPath::kPortable, kF32OutTol}};
  if (GetCpuFeatures().avx512f) paths.push_back({ai::SharedKeyPath::kAvx512, kF32OutTol});
  if (HasBf16Dp()) paths.push_back({ai::SharedKeyPath::kAvx512Bf16, kBf16OutTol});
  for (int64_t num_rows : {3, 100, 1100}) {
    for (int64_t heads : {1, 16}) {
      const int64_t row_dim = 576, value_dim = 512;
      const std::vector<float> q = RandomVector(heads * row_dim, rng);
      const std::vector<bf16> rows = RandomBf16(num_rows * row_dim, rng);
      SharedKeyAttentionParams p;
      p.q = q.data();
      p.rows = rows.data();
      p.rows_dtype = DType::kBF16;
      p.num_rows = num_rows;
      p.heads = heads;
      p.row_dim = row_dim;
      p.value_dim = value_dim;
      p.scale = 0.125f;
      Result want{std::vector<float>(heads * value_dim), std::vector<float>(heads)};
      p.out = want.out.data();
      p.lse = want.lse.data();
      SharedKeyAttentionReference(p);
      for (const auto& [path, tol] : paths) {
        SCOPED_TRACE("path=" + std::to_string(static_cast<int>(path)) + " rows=" + std::to_string(num_rows) +
                     " heads=" + std::to_string(heads));
        Result got{std::vector<float>(heads * value_dim, NAN), std::vector<float>(heads, NAN)};
        p.out = got.out.data();
        p.lse = got.lse.data();
        ai::SharedKeyAttentionOnPath(p, path);
        const ErrorStats out = Compare(got.out, want.out), lse = Compare(got.lse, want.lse);
        EXPECT_EQ(out.nans + lse.nans, 0u);
        EXPECT_LE(out.max_abs, tol);
        EXPECT_LE(lse.max_abs, tol == kF32OutTol ? kF32LseTol : kBf16LseTol);
      }
    }
  }
}

// A split and an unsplit run over the same bf16 rows agree (the merge is exact; the
// weights' bf16 rounding differs, see kSplitTol), and out does not depend on lse
// being requested.
TEST(AttentionBf16, SplitEqualsUnsplit) {
  std::mt19937 rng(88);
  const int64_t heads = 16, num_rows = 3001, row_dim = 576, value_dim = 512;
  const std::vector<float> q = RandomVector(heads * row_dim, rng);
  const std::vector<bf16> rows = RandomBf16(num_rows * row_dim, rng);
  SharedKeyAttentionParams p;
  p.q = q.data();
  p.rows = rows.data();
  p.rows_dtype = DType::kBF16;
  p.num_rows = num_rows;
  p.heads = heads;
  p.row_dim = row_dim;
  p.value_dim = value_dim;
  p.scale = 0.125f;
  Result one, two;
  {
    ScopedOmpThreads t(1);
    one = RunShared(p);
  }
  {
    ScopedOmpThreads t(2);
    two = RunShared(p);
    std::vector<float> no_lse(heads * value_dim, NAN);
    SharedKeyAttentionParams p2 = p;
    p2.out = no_lse.data();
    p2.lse = nullptr;
    SharedKeyAttention(p2);
    EXPECT_EQ(no_lse, two.out);
  }
  const double tol = HasBf16Dp() ? kSplitTol : kF32OutTol;
  EXPECT_LE(Compare(two.out, one.out).max_abs, tol);
  EXPECT_LE(Compare(two.lse, one.lse).max_abs, tol);
}

}  // namespace
}  // namespace latte
