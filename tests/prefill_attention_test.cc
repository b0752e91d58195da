// PrefillAttention (GEMM-based causal attention for many queries) against a plain
// double-precision loop written here, on random inputs: whole prompts, key blocks of
// a longer sequence (queries that see all, some or none of the block), several heads,
// dispatched and portable matmuls; and CausalAttention routes big calls to it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/attention.h"
#include "kernels/prefill_attention.h"
#include "test_util.h"

namespace latte {
namespace {

using testing_util::RandomVector;
using testing_util::ScopedPortableKernels;

// Outputs are convex combinations of values in [-1, 1]: absolute errors. Scores are
// f32 dot products of up to 192 terms (|score| ≲ 6, rounding ~sqrt(192)·2^-24·6 ≈ 5e-6
// at worst-typical), the exponential is good to ~2e-7 relative, and the f32 sums run
// over up to ~500 keys; observed max error is ~1e-6, 2e-5 keeps margin while a wrong
// mask or a dropped chunk (errors ≥ 1e-2) fails.
constexpr double kOutTol = 2e-5;
constexpr double kLseTol = 2e-5;

struct Case {
  int64_t queries, keys, first_position, heads, key_dim, value_dim;
};

std::string Name(const Case& c) {
  return "queries=" + std::to_string(c.queries) + " keys=" + std::to_string(c.keys) +
         " first_position=" + std::to_string(c.first_position) + " heads=" + std::to_string(c.heads) +
         " dims=" + std::to_string(c.key_dim) + "/" + std::to_string(c.value_dim);
}


struct Expected {
  std::vector<double> out, lse;
};

// Query i sees keys [0, min(first_position + i + 1, keys)); none: out 0, lse -inf.
Expected Reference(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, double scale) {
  const int64_t H = c.heads, dk = c.key_dim, dv = c.value_dim;
  Expected e{std::vector<double>(c.queries * H * dv, 0.0), std::vector<double>(c.queries * H)};
  for (int64_t i = 0; i < c.queries; ++i) {
    const int64_t visible = std::clamp<int64_t>(c.first_position + i + 1, 0, c.keys);
    for (int64_t h = 0; h < H; ++h) {
      double* out = &e.out[(i * H + h) * dv];
      if (visible == 0) {
        e.lse[i * H + h] = -std::numeric_limits<double>::infinity();
        continue;
      }
      std::vector<double> s(visible);
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t t = 0; t < visible; ++t) {
        double dot = 0;
        for (int64_t j = 0; j < dk; ++j) dot += double(q[(i * H + h) * dk + j]) * k[(t * H + h) * dk + j];
        s[t] = scale * dot;
        max = std::max(max, s[t]);
      }
      double z = 0;
      for (double x : s) z += std::exp(x - max);
      for (int64_t t = 0; t < visible; ++t) {
        const double p = std::exp(s[t] - max) / z;
        for (int64_t j = 0; j < dv; ++j) out[j] += p * v[(t * H + h) * dv + j];
      }
      e.lse[i * H + h] = max + std::log(z);
    }
  }
  return e;
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      ASSERT_TRUE(std::isinf(got[i]) && got[i] < 0) << what << " [" << i << "] = " << got[i] << ", want -inf";
      continue;
    }
    const double err = std::abs(double(got[i]) - want[i]);
    if (!(err <= worst)) {
      worst = err;
      at = i;
    }
  }
  EXPECT_LE(worst, tol) << what << " worst at [" << at << "]: " << got[at] << " vs " << want[at];
}


TEST(PrefillAttention, MatchesDoubleReference) {
  std::mt19937 rng(2026);
  const Case cases[] = {
      {16, 16, 0, 1, 24, 16},      // the smallest call routed here
      {130, 130, 0, 3, 24, 16},    // a prompt: one full chunk and a 2-row chunk
      {300, 300, 0, 2, 192, 128},  // V2/V3 head dims, three chunks
      {40, 77, 37, 3, 24, 16},     // appended to 37 cached tokens
      {300, 150, -100, 2, 24, 16}, // a key block that starts after the first 100 queries
      {200, 64, 300, 2, 24, 20},   // a key block entirely before every query
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(Name(c));
    const std::vector<float> q = RandomVector(c.queries * c.heads * c.key_dim, rng);
    const std::vector<float> k = RandomVector(c.keys * c.heads * c.key_dim, rng);
    const std::vector<float> v = RandomVector(c.keys * c.heads * c.value_dim, rng);
    const float scale = 2.5f / std::sqrt(float(c.key_dim));  // score std ~0.8: a non-flat softmax
    const Expected want = Reference(c, q, k, v, scale);
    for (int portable = 0; portable < 2; ++portable) {
      ScopedPortableKernels force(portable == 1);
      const std::string path = portable ? "portable" : "dispatched";
      std::vector<float> out(want.out.size(), NAN), lse(want.lse.size(), NAN);
      CausalAttentionParams p;
      p.q = q.data();
      p.k = k.data();
      p.v = v.data();
      p.out = out.data();
      p.lse = lse.data();
      p.num_queries = c.queries;
      p.num_keys = c.keys;
      p.first_position = c.first_position;
      p.heads = c.heads;
      p.key_dim = c.key_dim;
      p.value_dim = c.value_dim;
      p.scale = scale;
      PrefillAttention(p);
      ExpectNear(out, want.out, kOutTol, path + " out");
      ExpectNear(lse, want.lse, kLseTol, path + " lse");

      // Through CausalAttention (which sends calls this size here), without lse.
      std::vector<float> out2(want.out.size(), NAN);
      p.out = out2.data();
      p.lse = nullptr;
      CausalAttention(p);
      ExpectNear(out2, want.out, kOutTol, path + " CausalAttention out");
    }
  }
}

}  // namespace
}  // namespace latte
