// SharedKeyAttention over bf16 rows (a bf16 model's latent cache): the vdpbf16ps block
// kernels (attention_internal.h) each against a double computation on the same bf16
// values, and the whole kernel, portable and dispatched, split over threads and not,
// against the double-precision reference of test_util.h on random rows.
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

using testing_util::AttentionDouble;
using testing_util::ExpectAllNear;
using testing_util::ExpectWithin;
using testing_util::OnlineSoftmaxDouble;
using testing_util::OnlineSoftmaxStep;
using testing_util::RandomBf16;
using testing_util::RandomVector;
using testing_util::ScopedOmpThreads;
using testing_util::ScopedPortableKernels;
using testing_util::SharedKeyAttentionDouble;

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
// attention_test.cc (1e-5), doubled for the longer 576-wide dots.
constexpr double kF32OutTol = 2e-5;
constexpr double kF32LseTol = 2e-5;
// A block kernel's dot products (bf16 × bf16 is exact in f32) and sums against double:
// f32 accumulation, well within 1e-5 of the sum of the terms' magnitudes.
constexpr double kBlockRelTol = 1e-5;
// A softmax weight rounded to bf16 (<= 2^-8 relative: 8 significant bits) of an f32
// exp good to ~1e-5 (see attention_test.cc); the running max is exact, the rescale
// an f32 exp, the sum an f32 sum of the rounded weights.
constexpr double kRoundedWeightRelTol = 1.0 / 256 + 1e-5;
constexpr double kRescaleRelTol = 1e-5;
constexpr double kSumRelTol = 2e-5;

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
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(portable[i], Bf16ToF32(rows[i])) << "portable, count " << count << ", element " << i;
    }
    if (GetCpuFeatures().avx512f) {
      ai::Bf16ToF32Avx512(rows.data(), count, avx.data());
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(avx[i], Bf16ToF32(rows[i])) << "avx512, count " << count << ", element " << i;
      }
    }
    if (GetCpuFeatures().avx2) {
      std::vector<float> avx2(count, NAN);
      ai::Bf16ToF32Avx2(rows.data(), count, avx2.data());
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(avx2[i], Bf16ToF32(rows[i])) << "avx2, count " << count << ", element " << i;
      }
    }
  }
}

// fp8 cache rows on the AVX2 path: every e4m3 code but the NaNs (0x7F, 0xFF), in a
// random order, times row scales of several magnitudes, equal to the scalar conversion.
TEST(AttentionBf16Blocks, Fp8WidenMatchesScalarConversion) {
  if (!GetCpuFeatures().avx2) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(82);
  std::vector<uint8_t> codes;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) != 0x7F) codes.push_back(static_cast<uint8_t>(c));
  }
  std::shuffle(codes.begin(), codes.end(), rng);
  for (float scale : {1.0f, 0.0123f, 3.7e-5f, 91.5f}) {
    for (int64_t count : {1, 7, 8, 9, 254}) {
      std::vector<float> got(count, NAN);
      ai::Fp8ToF32Avx2(codes.data(), count, scale, got.data());
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(got[i], Fp8E4M3ToF32(codes[i]) * scale)
            << "code 0x" << std::hex << int{codes[i]} << std::dec << ", scale " << scale << ", count " << count;
      }
    }
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
        std::vector<float> got(heads * n);
        std::vector<double> want(heads * n), allowed(heads * n);
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t t = 0; t < kLd; ++t) {
            if (t >= n) {  // past the block: untouched
              ASSERT_TRUE(std::isnan(scores[h * kLd + t])) << "wrote score [" << h << ", " << t << "]";
              continue;
            }
            double dot = 0, mag = 0;
            for (int64_t j = 0; j < s.row_dim; ++j) {
              // bf16 x bf16 is exact in f32 (8 + 8 significant bits).
              const double x = double(Bf16ToF32(q[h * s.row_dim + j])) * Bf16ToF32(rows[t * s.row_dim + j]);
              dot += x;
              mag += std::fabs(x);
            }
            got[h * n + t] = scores[h * kLd + t];
            want[h * n + t] = scale * dot;
            allowed[h * n + t] = kBlockRelTol * scale * mag + 1e-30;
          }
        }
        ExpectWithin(got.data(), want.data(), allowed.data(), got.size(), "scores", {heads, n});
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
      std::vector<double> want_max(heads, -std::numeric_limits<double>::infinity());
      std::vector<double> want_sum(heads, 0.0), want_rescale(heads);
      for (int pass = 0; pass < 2; ++pass) {
        SCOPED_TRACE("pass " + std::to_string(pass));
        std::vector<float> scores = RandomVector(heads * kLd, rng, -20.0f, 20.0f);
        if (pass == 1) {
          for (int64_t h = 0; h < heads; h += 2) {
            for (int64_t t = 0; t < n; ++t) scores[h * kLd + t] += 15.0f;
          }
        }
        const std::vector<float> in = scores;
        std::vector<bf16> p(heads * kLd, 0xABCD);
        ai::SharedKeySoftmaxBf16Avx512(scores.data(), kLd, heads, n, max.data(), sum.data(), rescale.data(), p.data(),
                                       kLd);
        EXPECT_EQ(scores, in) << "scores must be left as they are";
        const int64_t n_even = (n + 1) / 2 * 2;
        std::vector<float> got(heads * n);
        std::vector<double> want(heads * n);
        for (int64_t h = 0; h < heads; ++h) {
          const OnlineSoftmaxStep step = OnlineSoftmaxDouble(want_max[h], &in[h * kLd], n);
          double rounded_sum = 0;
          for (int64_t t = 0; t < n; ++t) {
            got[h * n + t] = Bf16ToF32(p[h * kLd + t]);
            want[h * n + t] = step.weights[t];
            rounded_sum += got[h * n + t];
          }
          if (n_even > n) {
            ASSERT_EQ(p[h * kLd + n], 0) << "the pad of an odd block, head " << h;
          }
          for (int64_t t = n_even; t < kLd; ++t) {
            ASSERT_EQ(p[h * kLd + t], 0xABCD) << "wrote past the block at [" << h << ", " << t << "]";
          }
          want_sum[h] = want_sum[h] * step.rescale + rounded_sum;
          want_max[h] = step.max;
          want_rescale[h] = step.rescale;
        }
        ExpectAllNear(got, want, 1e-30, kRoundedWeightRelTol, "rounded weights", {heads, n});
        ExpectAllNear(max, want_max, 0.0, 0.0, "max");
        ExpectAllNear(rescale, want_rescale, 1e-30, kRescaleRelTol, "rescale");
        ExpectAllNear(sum, want_sum, 0.0, kSumRelTol, "sum of the rounded weights");
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
      for (int64_t u = 0; u < pairs_count; ++u) {
        for (int64_t j = 0; j < s.value_dim; ++j) {
          for (int64_t i = 0; i < 2; ++i) {
            const int64_t t = 2 * u + i;
            const bf16 want = t < n ? rows[t * s.row_dim + j] : bf16{0};
            ASSERT_EQ(pairs[u * 2 * s.value_dim + 2 * j + i], want)
                << "pair " << u << ", column " << j << ", row " << t;
          }
        }
      }
      EXPECT_EQ(pairs.back(), 0xABCD) << "wrote past the pairs";
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
          std::vector<double> want(acc.size()), allowed(acc.size());
          for (int64_t h = 0; h < heads; ++h) {
            const double r = with_rescale ? rescale[h] : 1.0;
            for (int64_t j = 0; j < s.value_dim; ++j) {
              double w = acc0[h * s.value_dim + j] * r;
              double mag = std::fabs(w);
              for (int64_t t = 0; t < n; ++t) {
                const double x = double(Bf16ToF32(p[h * kLd + t])) * Bf16ToF32(rows[t * s.row_dim + j]);
                w += x;
                mag += std::fabs(x);
              }
              want[h * s.value_dim + j] = w;
              allowed[h * s.value_dim + j] = kBlockRelTol * mag + 1e-30;
            }
          }
          ExpectWithin(acc.data(), want.data(), allowed.data(), acc.size(), "acc", {heads, s.value_dim});
        }
      }
    }
  }
}

// ---- the whole kernel ----

struct Result {
  std::vector<float> out, lse;
};

// max_i |got[i] - want[i]|, for the printed summary (the checks are ExpectAllNear's).
double MaxAbsError(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::fabs(double(got[i]) - want[i]));
  return e;
}

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
      p.rows = PagedRows::Contiguous(rows.data(), DType::kBF16, c.shape.row_dim, c.rows);
      p.num_rows = c.rows;
      p.heads = c.heads;
      p.row_dim = c.shape.row_dim;
      p.value_dim = c.shape.value_dim;
      p.scale = 3.0f / std::sqrt(float(c.shape.row_dim));  // score std ~1.7
      const AttentionDouble want = SharedKeyAttentionDouble(p);
      const std::vector<int64_t> out_shape = {c.heads, c.shape.value_dim};

      const Result dispatched = RunShared(p);
      const double out_tol = HasBf16Dp() ? kBf16OutTol : kF32OutTol;
      const double lse_tol = HasBf16Dp() ? kBf16LseTol : kF32LseTol;
      ExpectAllNear(dispatched.out, want.out, out_tol, 0.0, "dispatched out", out_shape);
      ExpectAllNear(dispatched.lse, want.lse, lse_tol, 0.0, "dispatched lse");
      worst_out = std::max(worst_out, MaxAbsError(dispatched.out, want.out));
      worst_lse = std::max(worst_lse, MaxAbsError(dispatched.lse, want.lse));

      ScopedPortableKernels portable(true);
      const Result port = RunShared(p);
      ExpectAllNear(port.out, want.out, kF32OutTol, 0.0, "portable out", out_shape);
      ExpectAllNear(port.lse, want.lse, kF32LseTol, 0.0, "portable lse");
    }
  }
  std::printf("bf16 rows, dispatched vs reference: max |out error| %.2e, max |lse error| %.2e\n", worst_out, worst_lse);
}

// Every path this CPU can run, forced (the dispatch picks only one of the AVX-512 ones
// for bf16 rows): the widening f32 paths to the f32 tolerance, vdpbf16ps to bf16's.
TEST(AttentionBf16, EveryPathMatchesReference) {
  std::mt19937 rng(89);
  ScopedOmpThreads scoped(2);
  std::vector<std::pair<ai::SharedKeyPath, double>> paths = {{ai::SharedKeyPath::kPortable, kF32OutTol}};
  if (GetCpuFeatures().avx512f) paths.push_back({ai::SharedKeyPath::kAvx512, kF32OutTol});
  if (GetCpuFeatures().avx2) paths.push_back({ai::SharedKeyPath::kAvx2, kF32OutTol});
  if (HasBf16Dp()) paths.push_back({ai::SharedKeyPath::kAvx512Bf16, kBf16OutTol});
  for (int64_t num_rows : {3, 100, 1100}) {
    for (int64_t heads : {1, 16}) {
      const int64_t row_dim = 576, value_dim = 512;
      const std::vector<float> q = RandomVector(heads * row_dim, rng);
      const std::vector<bf16> rows = RandomBf16(num_rows * row_dim, rng);
      SharedKeyAttentionParams p;
      p.q = q.data();
      p.rows = PagedRows::Contiguous(rows.data(), DType::kBF16, row_dim, num_rows);
      p.num_rows = num_rows;
      p.heads = heads;
      p.row_dim = row_dim;
      p.value_dim = value_dim;
      p.scale = 0.125f;
      const AttentionDouble want = SharedKeyAttentionDouble(p);
      for (const auto& [path, tol] : paths) {
        SCOPED_TRACE("path=" + std::to_string(static_cast<int>(path)) + " rows=" + std::to_string(num_rows) +
                     " heads=" + std::to_string(heads));
        Result got{std::vector<float>(heads * value_dim, NAN), std::vector<float>(heads, NAN)};
        p.out = got.out.data();
        p.lse = got.lse.data();
        ai::SharedKeyAttentionOnPath(p, path);
        ExpectAllNear(got.out, want.out, tol, 0.0, "out", {heads, value_dim});
        ExpectAllNear(got.lse, want.lse, tol == kF32OutTol ? kF32LseTol : kBf16LseTol, 0.0, "lse");
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
  p.rows = PagedRows::Contiguous(rows.data(), DType::kBF16, row_dim, num_rows);
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
  ExpectAllNear(two.out, one.out, tol, "split vs unsplit out", {heads, value_dim});
  ExpectAllNear(two.lse, one.lse, tol, "split vs unsplit lse");
}

}  // namespace
}  // namespace latte
