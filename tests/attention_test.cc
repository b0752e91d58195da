// The attention kernels over f32 rows (CausalAttention, SharedKeyAttention,
// MergeAttentionPartials, and SharedKeyAttention's block kernels on every path this CPU
// can run) against the double-precision reference of test_util.h, on fixed-seed random
// inputs; and their checked boundaries. bf16 rows: attention_bf16_test.cc; the GEMM-based
// prefill kernel: prefill_attention_test.cc.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/attention_internal.h"
#include "test_util.h"

namespace latte {
namespace {

using testing_util::AttentionDouble;
using testing_util::CausalAttentionDouble;
using testing_util::ExpectAllNear;
using testing_util::ExpectWithin;
using testing_util::OnlineSoftmaxDouble;
using testing_util::OnlineSoftmaxStep;
using testing_util::RandomVector;
using testing_util::ScopedOmpThreads;
using testing_util::ScopedPortableKernels;
using testing_util::SharedKeyAttentionDouble;

namespace ai = attention_internal;

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
// A block kernel's f32 dot products and sums against double: the f32 accumulation error
// of n terms stays well within 1e-5 of the sum of their magnitudes at these sizes
// (<= 576 terms: ~sqrt(576) · 2^-24 ≈ 1.4e-6 typical).
constexpr double kBlockRelTol = 1e-5;
// An online-softmax weight e^{s - m}: the f32 argument s - m is rounded (|s - m| <= 55:
// ~4e-6 absolute), then exp: relative error ~4e-6; the running sum adds f32 summation.
constexpr double kSoftmaxWeightRelTol = 1e-5;
constexpr double kSoftmaxSumRelTol = 2e-5;

// ---- CausalAttention ----

TEST(CausalAttention, MatchesDoubleReference) {
  constexpr int64_t kKeyDim = 24, kValueDim = 16;
  // q·k of 24 uniform [-1, 1] pairs has std sqrt(24/9) ≈ 1.6, so scores have std ~1.1:
  // the softmax is neither uniform nor one-hot.
  constexpr float kScale = 0.7f;
  std::mt19937 rng(41);
  struct Case {
    int64_t num_queries, first_position, heads;
  };
  for (const Case& c : {Case{5, 7, 1}, Case{5, 7, 4}, Case{9, 0, 1}, Case{9, 0, 4}, Case{1, 20, 4}, Case{1, 0, 4},
                        Case{33, 100, 4}, Case{3, -2, 2}}) {
    const int64_t n = c.num_queries, H = c.heads, S = std::max<int64_t>(c.first_position + n, 1);
    SCOPED_TRACE("n=" + std::to_string(n) + " first_position=" + std::to_string(c.first_position) +
                 " heads=" + std::to_string(H));
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
    const AttentionDouble want = CausalAttentionDouble(p);
    ExpectAllNear(out, want.out, kAttnOutTol, 0.0, "out", {n, H, kValueDim});
    ExpectAllNear(lse, want.lse, kAttnLseTol, 0.0, "lse", {n, H});

    // lse is optional: the output must not depend on it.
    std::vector<float> out2(n * H * kValueDim, NAN);
    p.out = out2.data();
    p.lse = nullptr;
    CausalAttention(p);
    ExpectAllNear(out2, want.out, kAttnOutTol, 0.0, "out without lse", {n, H, kValueDim});
  }
}

// ---- SharedKeyAttention ----

constexpr int64_t kRowDim = 72, kValueDim = 64;
// Scores have std ~1.4 on uniform [-1, 1] inputs of 72 values (|q·row| std ≈ 2.8).
constexpr float kSharedScale = 0.5f;

struct SharedResult {
  std::vector<float> out, lse;
};

SharedKeyAttentionParams SharedParams(const std::vector<float>& q, const float* rows, int64_t num_rows, int64_t heads) {
  SharedKeyAttentionParams p;
  p.q = q.data();
  p.rows = PagedRows::Contiguous(rows, DType::kF32, kRowDim, num_rows);
  p.num_rows = num_rows;
  p.heads = heads;
  p.row_dim = kRowDim;
  p.value_dim = kValueDim;
  p.scale = kSharedScale;
  return p;
}

SharedResult RunSharedKey(SharedKeyAttentionParams p) {
  SharedResult r{std::vector<float>(p.heads * p.value_dim, NAN), std::vector<float>(p.heads, NAN)};
  p.out = r.out.data();
  p.lse = r.lse.data();
  SharedKeyAttention(p);
  return r;
}

TEST(SharedKeyAttention, MatchesDoubleReference) {
  std::mt19937 rng(51);
  // 2 threads: 2000 rows take two splits (below 256 rows per thread there is one);
  // 3 threads: three uneven splits.
  for (int threads : {2, 3}) {
    ScopedOmpThreads scoped(threads);
    for (int64_t num_rows : {1, 5, 300, 2000}) {
      for (int64_t heads : {1, 3, 16}) {
        SCOPED_TRACE("threads=" + std::to_string(threads) + " rows=" + std::to_string(num_rows) +
                     " heads=" + std::to_string(heads));
        const std::vector<float> q = RandomVector(heads * kRowDim, rng);
        const std::vector<float> rows = RandomVector(num_rows * kRowDim, rng);
        const SharedKeyAttentionParams p = SharedParams(q, rows.data(), num_rows, heads);
        const SharedResult got = RunSharedKey(p);
        const AttentionDouble want = SharedKeyAttentionDouble(p);
        ExpectAllNear(got.out, want.out, kAttnOutTol, 0.0, "out", {heads, kValueDim});
        ExpectAllNear(got.lse, want.lse, kAttnLseTol, 0.0, "lse");
      }
    }
  }
}

TEST(SharedKeyAttention, WithoutLse) {
  std::mt19937 rng(52);
  ScopedOmpThreads scoped(2);
  const int64_t heads = 3, num_rows = 2000;
  const std::vector<float> q = RandomVector(heads * kRowDim, rng);
  const std::vector<float> rows = RandomVector(num_rows * kRowDim, rng);
  std::vector<float> out(heads * kValueDim, NAN);
  SharedKeyAttentionParams p = SharedParams(q, rows.data(), num_rows, heads);
  p.out = out.data();
  SharedKeyAttention(p);
  EXPECT_EQ(out, RunSharedKey(p).out) << "out depends on whether lse is asked for";
  ExpectAllNear(out, SharedKeyAttentionDouble(p).out, kAttnOutTol, 0.0, "out", {heads, kValueDim});
}

// No rows: every head gets out 0 and lse -inf (an empty partial for the merge).
TEST(SharedKeyAttention, NoRowsGivesAnEmptyPartial) {
  const std::vector<float> q(2 * kRowDim, 0.5f);
  const std::vector<float> rows(kRowDim, 0.5f);
  const SharedResult got = RunSharedKey(SharedParams(q, rows.data(), 0, 2));
  EXPECT_EQ(got.out, std::vector<float>(2 * kValueDim, 0.0f));
  EXPECT_EQ(got.lse, std::vector<float>(2, -std::numeric_limits<float>::infinity()));
}

// With the same key/value for every head, per-head causal attention of the last query
// (it sees every key) is multi-query attention over shared rows.
TEST(SharedKeyAttention, EqualsCausalWithRepeatedKeys) {
  std::mt19937 rng(53);
  ScopedOmpThreads scoped(2);
  for (int64_t num_rows : {1, 5, 300, 2000}) {
    for (int64_t heads : {1, 3, 16}) {
      SCOPED_TRACE("rows=" + std::to_string(num_rows) + " heads=" + std::to_string(heads));
      const std::vector<float> q = RandomVector(heads * kRowDim, rng);  // [1, H, row_dim]
      const std::vector<float> rows = RandomVector(num_rows * kRowDim, rng);
      const SharedResult shared = RunSharedKey(SharedParams(q, rows.data(), num_rows, heads));

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
      ExpectAllNear(shared.out, out, 2 * kAttnOutTol, "out", {heads, kValueDim});
      ExpectAllNear(shared.lse, lse, 2 * kAttnLseTol, "lse");
    }
  }
}

// ---- MergeAttentionPartials ----

TEST(MergeAttentionPartials, ThreeSplitsEqualOneShot) {
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
      SCOPED_TRACE("split=" + std::to_string(s.a) + "+" + std::to_string(s.b) + "+" + std::to_string(s.c) +
                   " heads=" + std::to_string(heads));
      const std::vector<float> q = RandomVector(heads * kRowDim, rng);
      const std::vector<float> rows = RandomVector(total * kRowDim, rng);
      const SharedResult whole = RunSharedKey(SharedParams(q, rows.data(), total, heads));
      const SharedResult p0 = RunSharedKey(SharedParams(q, rows.data(), s.a, heads));
      const SharedResult p1 = RunSharedKey(SharedParams(q, rows.data() + s.a * kRowDim, s.b, heads));
      const SharedResult p2 = RunSharedKey(SharedParams(q, rows.data() + (s.a + s.b) * kRowDim, s.c, heads));
      const float* outs[] = {p0.out.data(), p1.out.data(), p2.out.data()};
      const float* lses[] = {p0.lse.data(), p1.lse.data(), p2.lse.data()};
      std::vector<float> out(heads * kValueDim, NAN), lse(heads, NAN);
      MergeAttentionPartials(outs, lses, 3, heads, kValueDim, out.data(), lse.data());
      ExpectAllNear(out, whole.out, kMergeTol, "merged out vs one-shot", {heads, kValueDim});
      ExpectAllNear(lse, whole.lse, kMergeTol, "merged lse vs one-shot");

      const AttentionDouble want = SharedKeyAttentionDouble(SharedParams(q, rows.data(), total, heads));
      ExpectAllNear(out, want.out, kAttnOutTol, 0.0, "merged out vs double", {heads, kValueDim});
      ExpectAllNear(lse, want.lse, kAttnLseTol, 0.0, "merged lse vs double");

      // out may alias outs[0]; lse may be left out.
      SharedResult alias = p0;
      const float* alias_outs[] = {alias.out.data(), p1.out.data(), p2.out.data()};
      MergeAttentionPartials(alias_outs, lses, 3, heads, kValueDim, alias.out.data(), nullptr);
      EXPECT_EQ(alias.out, out) << "merged in place into outs[0], without lse";
    }
  }
}

// Parts that saw no key (lse -inf, as a key block after the query gives) add nothing,
// wherever they stand, even as outs[0] aliased by out; no part at all gives out 0, lse -inf.
TEST(MergeAttentionPartials, EmptyPartsAddNothing) {
  std::mt19937 rng(62);
  const int64_t n = 3, dim = 5;
  const float kInf = std::numeric_limits<float>::infinity();
  const std::vector<float> a = RandomVector(n * dim, rng), b = RandomVector(n * dim, rng);
  const std::vector<float> lse_a = RandomVector(n, rng, -3.0f, 3.0f);
  const std::vector<float> lse_b = RandomVector(n, rng, -3.0f, 3.0f);
  std::vector<float> empty(n * dim, NAN);  // never read: its lse is -inf
  const std::vector<float> lse_empty(n, -kInf);
  std::vector<float> want(n * dim), want_lse(n);
  {
    const float* outs[] = {a.data(), b.data()};
    const float* lses[] = {lse_a.data(), lse_b.data()};
    MergeAttentionPartials(outs, lses, 2, n, dim, want.data(), want_lse.data());
  }
  std::vector<float> got(n * dim, NAN), got_lse(n, NAN);
  const float* outs[] = {empty.data(), a.data(), empty.data(), b.data()};
  const float* lses[] = {lse_empty.data(), lse_a.data(), lse_empty.data(), lse_b.data()};
  MergeAttentionPartials(outs, lses, 4, n, dim, got.data(), got_lse.data());
  EXPECT_EQ(got, want);
  EXPECT_EQ(got_lse, want_lse);
  const float* in_place_outs[] = {empty.data(), a.data(), b.data()};
  const float* in_place_lses[] = {lse_empty.data(), lse_a.data(), lse_b.data()};
  MergeAttentionPartials(in_place_outs, in_place_lses, 3, n, dim, empty.data(), got_lse.data());
  EXPECT_EQ(empty, want) << "out aliasing an empty outs[0]";

  const float* none_outs[] = {a.data()};
  const float* none_lses[] = {lse_empty.data()};
  MergeAttentionPartials(none_outs, none_lses, 1, n, dim, got.data(), got_lse.data());
  EXPECT_EQ(got, std::vector<float>(n * dim, 0.0f));
  EXPECT_EQ(got_lse, lse_empty);
}

// ---- SharedKeyAttention block kernels (attention_internal.h), each variant ----

struct SharedKeyKernels {
  const char* name;
  decltype(&ai::SharedKeyScoresPortable) scores;
  decltype(&ai::SharedKeySoftmaxPortable) softmax;
  decltype(&ai::SharedKeyAccumulatePortable) accumulate;
};

std::vector<SharedKeyKernels> SharedKeyKernelVariants() {
  std::vector<SharedKeyKernels> v = {
      {"portable", ai::SharedKeyScoresPortable, ai::SharedKeySoftmaxPortable, ai::SharedKeyAccumulatePortable}};
  if (GetCpuFeatures().avx512f) {
    v.push_back({"avx512", ai::SharedKeyScoresAvx512, ai::SharedKeySoftmaxAvx512, ai::SharedKeyAccumulateAvx512});
  }
  if (GetCpuFeatures().avx2) {
    v.push_back({"avx2", ai::SharedKeyScoresAvx2, ai::SharedKeySoftmaxAvx2, ai::SharedKeyAccumulateAvx2});
  }
  return v;
}

struct BlockShape {
  int64_t row_dim, value_dim;
};
constexpr BlockShape kBlockShapes[] = {{40, 32}, {72, 64}, {576, 512}, {33, 17}, {100, 79}};
constexpr int64_t kBlockRows[] = {1, 2, 3, 4, 5, 15, 16, 17, 33, 63, 64};
constexpr int64_t kBlockHeads[] = {1, 5, 128};
constexpr int64_t kLd = ai::kSharedKeyBlock;

TEST(SharedKeyBlocks, ScoresMatchDouble) {
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
          // Past the block (t >= n) the scores must stay untouched (NaN).
          std::vector<float> got(heads * n);
          std::vector<double> want(heads * n), allowed(heads * n);
          for (int64_t h = 0; h < heads; ++h) {
            for (int64_t t = 0; t < kLd; ++t) {
              if (t >= n) {
                ASSERT_TRUE(std::isnan(scores[h * kLd + t])) << "wrote score [" << h << ", " << t << "]";
                continue;
              }
              double dot = 0, mag = 0;
              for (int64_t j = 0; j < s.row_dim; ++j) {
                const double x = double(q[h * s.row_dim + j]) * rows[t * s.row_dim + j];
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
}

TEST(SharedKeyBlocks, SoftmaxMatchesDouble) {
  std::mt19937 rng(72);
  for (const SharedKeyKernels& k : SharedKeyKernelVariants()) {
    for (int64_t heads : kBlockHeads) {
      for (int64_t n : kBlockRows) {
        SCOPED_TRACE(std::string(k.name) + " heads=" + std::to_string(heads) + " n=" + std::to_string(n));
        // First block (max = -inf, sum = 0), then a second one over the same state.
        std::vector<float> max(heads, -std::numeric_limits<float>::infinity());
        std::vector<float> sum(heads, 0.0f), rescale(heads, NAN);
        std::vector<double> want_max(heads, -std::numeric_limits<double>::infinity());
        std::vector<double> want_sum(heads, 0.0), want_rescale(heads);
        for (int pass = 0; pass < 2; ++pass) {
          SCOPED_TRACE("pass " + std::to_string(pass));
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
          std::vector<float> got(heads * n);
          std::vector<double> want(heads * n);
          for (int64_t h = 0; h < heads; ++h) {
            const OnlineSoftmaxStep step = OnlineSoftmaxDouble(want_max[h], &in[h * kLd], n);
            double block_sum = 0;
            for (int64_t t = 0; t < n; ++t) {
              got[h * n + t] = scores[h * kLd + t];
              want[h * n + t] = step.weights[t];
              block_sum += step.weights[t];
            }
            for (int64_t t = n; t < kLd; ++t) {
              ASSERT_TRUE(std::isnan(scores[h * kLd + t])) << "wrote past the block at [" << h << ", " << t << "]";
            }
            want_sum[h] = want_sum[h] * step.rescale + block_sum;
            want_max[h] = step.max;
            want_rescale[h] = step.rescale;
          }
          ExpectAllNear(got, want, 1e-30, kSoftmaxWeightRelTol, "weights", {heads, n});
          ExpectAllNear(max, want_max, 0.0, 0.0, "max");
          ExpectAllNear(rescale, want_rescale, 1e-30, kSoftmaxWeightRelTol, "rescale");
          ExpectAllNear(sum, want_sum, 0.0, kSoftmaxSumRelTol, "sum");
        }
      }
    }
  }
}

TEST(SharedKeyBlocks, AccumulateMatchesDouble) {
  std::mt19937 rng(73);
  for (const SharedKeyKernels& k : SharedKeyKernelVariants()) {
    for (const BlockShape& s : kBlockShapes) {
      for (int64_t heads : kBlockHeads) {
        for (int64_t n : kBlockRows) {
          for (bool with_rescale : {true, false}) {
            SCOPED_TRACE(std::string(k.name) + " row_dim=" + std::to_string(s.row_dim) +
                         " value_dim=" + std::to_string(s.value_dim) + " heads=" + std::to_string(heads) +
                         " n=" + std::to_string(n) + " rescale=" + std::to_string(with_rescale));
            const std::vector<float> p = RandomVector(heads * kLd, rng, 0.0f, 1.0f);
            const std::vector<float> rows = RandomVector(n * s.row_dim, rng);
            const std::vector<float> rescale = RandomVector(heads, rng, 0.0f, 1.0f);
            const std::vector<float> acc0 = RandomVector(heads * s.value_dim, rng, -5.0f, 5.0f);
            std::vector<float> acc = acc0;
            k.accumulate(p.data(), kLd, heads, rows.data(), n, s.row_dim, s.value_dim,
                         with_rescale ? rescale.data() : nullptr, acc.data());
            std::vector<double> want(acc.size()), allowed(acc.size());
            for (int64_t h = 0; h < heads; ++h) {
              const double r = with_rescale ? rescale[h] : 1.0;
              for (int64_t j = 0; j < s.value_dim; ++j) {
                double w = acc0[h * s.value_dim + j] * r;
                double mag = std::fabs(w);
                for (int64_t t = 0; t < n; ++t) {
                  const double x = double(p[h * kLd + t]) * rows[t * s.row_dim + j];
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
}

// At R1's widths (row_dim 576, value_dim 512), and at the tiny model-test widths:
// the portable and dispatched (AVX-512 where available) paths both match the
// double-precision reference, and each other.
TEST(SharedKeyAttention, PortableAndDispatchedMatchReference) {
  std::mt19937 rng(74);
  ScopedOmpThreads scoped(2);
  for (const BlockShape& s : {BlockShape{576, 512}, BlockShape{40, 32}}) {
    for (int64_t num_rows : {1, 7, 130, 1000}) {
      for (int64_t heads : {1, 5, 128}) {
        SCOPED_TRACE("row_dim=" + std::to_string(s.row_dim) + " rows=" + std::to_string(num_rows) +
                     " heads=" + std::to_string(heads));
        const std::vector<float> q = RandomVector(heads * s.row_dim, rng);
        const std::vector<float> rows = RandomVector(num_rows * s.row_dim, rng);
        SharedKeyAttentionParams p;
        p.q = q.data();
        p.rows = PagedRows::Contiguous(rows.data(), DType::kF32, s.row_dim, num_rows);
        p.num_rows = num_rows;
        p.heads = heads;
        p.row_dim = s.row_dim;
        p.value_dim = s.value_dim;
        p.scale = 1.0f / std::sqrt(float(s.row_dim)) * 3.0f;  // score std ~1.7
        const AttentionDouble want = SharedKeyAttentionDouble(p);
        SharedResult got[2];
        for (int portable = 0; portable < 2; ++portable) {
          ScopedPortableKernels force(portable == 1);
          got[portable] = RunSharedKey(p);
          const std::string what = portable ? "portable" : "dispatched";
          ExpectAllNear(got[portable].out, want.out, 2 * kAttnOutTol, 0.0, what + " out", {heads, s.value_dim});
          ExpectAllNear(got[portable].lse, want.lse, 2 * kAttnLseTol, 0.0, what + " lse");
        }
        ExpectAllNear(got[0].out, got[1].out, 2 * kAttnOutTol, "dispatched vs portable out", {heads, s.value_dim});
        ExpectAllNear(got[0].lse, got[1].lse, 2 * kAttnLseTol, "dispatched vs portable lse");
      }
    }
  }
}

// ---- checked boundaries ----

TEST(AttentionDeathTest, BadParamsAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<float> q(2 * kRowDim, 0.5f), rows(4 * kRowDim, 0.5f);
  std::vector<float> out(2 * kRowDim);
  SharedKeyAttentionParams p = SharedParams(q, rows.data(), 4, 2);
  p.out = out.data();
  SharedKeyAttentionParams wide = p;
  wide.value_dim = kRowDim + 1;
  EXPECT_DEATH(SharedKeyAttention(wide), "row_dim 72, value_dim 73");
  SharedKeyAttentionParams no_rows = p;
  no_rows.rows.data = nullptr;
  EXPECT_DEATH(SharedKeyAttention(no_rows), "rows without data, block table or block size");
  SharedKeyAttentionParams misaligned = p;
  misaligned.rows.data = reinterpret_cast<const std::byte*>(rows.data()) + 1;
  EXPECT_DEATH(SharedKeyAttention(misaligned), "rows not aligned to their 4-byte elements");
  SharedKeyAttentionParams f16 = p;
  f16.rows.dtype = DType::kF16;
  EXPECT_DEATH(SharedKeyAttention(f16), "rows dtype F16");
  SharedKeyAttentionParams narrow = p;
  narrow.rows.row_dim = kRowDim - 1;
  EXPECT_DEATH(SharedKeyAttention(narrow), "rows of 71 values, row_dim 72");
  SharedKeyAttentionParams fp8 = p;
  fp8.rows.dtype = DType::kF8E4M3;
  EXPECT_DEATH(SharedKeyAttention(fp8), "fp8 rows without scales");

  CausalAttentionParams c;
  c.q = q.data();
  c.k = rows.data();
  c.v = rows.data();
  c.out = out.data();
  c.num_queries = 1;
  c.num_keys = 4;
  c.heads = 1;
  c.key_dim = 0;
  c.value_dim = 8;
  EXPECT_DEATH(CausalAttention(c), "CausalAttention: key_dim 0, value_dim 8");
  c.key_dim = 8;
  c.v = nullptr;
  EXPECT_DEATH(CausalAttention(c), "CausalAttention: null k or v");

  const float* outs[] = {out.data()};
  EXPECT_DEATH(MergeAttentionPartials(outs, nullptr, 1, 2, 8, out.data(), nullptr), "null outs, lses or out");
}

}  // namespace
}  // namespace latte
