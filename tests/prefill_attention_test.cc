// PrefillAttention (GEMM-based causal attention for many queries) against the
// double-precision reference of test_util.h, on random inputs: whole prompts, key blocks of
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

using testing_util::AttentionDouble;
using testing_util::CausalAttentionDouble;
using testing_util::ExpectAllNear;
using testing_util::RandomVector;
using testing_util::ScopedPortableKernels;

// Outputs are convex combinations of values in [-1, 1]: absolute errors. Scores are
// f32 dot products of up to 192 terms (|score| ≲ 6, rounding ~sqrt(192)·2^-24·6 ≈ 5e-6
// at worst-typical), the exponential is good to ~2e-7 relative, and the f32 sums run
// over up to ~1300 keys; observed max error is ~1e-6, 2e-5 keeps margin while a wrong
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

TEST(PrefillAttention, MatchesDoubleReference) {
  std::mt19937 rng(2026);
  const Case cases[] = {
      {16, 16, 0, 1, 24, 16},       // the smallest call routed here
      {130, 130, 0, 3, 24, 16},     // a prompt: one full chunk and a 2-row chunk
      {300, 300, 0, 2, 192, 128},   // V2/V3 head dims, three chunks
      {40, 77, 37, 3, 24, 16},      // appended to 37 cached tokens
      {300, 150, -100, 2, 24, 16},  // a key block that starts after the first 100 queries
      {200, 64, 300, 2, 24, 20},    // a key block entirely before every query
      // Over several of the kernel's key blocks (512 keys): a chunk at the end of a
      // long prefix, and queries that see none of a later block while others see it.
      {150, 1300, 1150, 2, 24, 16},
      {900, 1100, -300, 2, 24, 16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(Name(c));
    const std::vector<float> q = RandomVector(c.queries * c.heads * c.key_dim, rng);
    const std::vector<float> k = RandomVector(c.keys * c.heads * c.key_dim, rng);
    const std::vector<float> v = RandomVector(c.keys * c.heads * c.value_dim, rng);
    const float scale = 2.5f / std::sqrt(float(c.key_dim));  // score std ~0.8: a non-flat softmax
    CausalAttentionParams p;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.num_queries = c.queries;
    p.num_keys = c.keys;
    p.first_position = c.first_position;
    p.heads = c.heads;
    p.key_dim = c.key_dim;
    p.value_dim = c.value_dim;
    p.scale = scale;
    const AttentionDouble want = CausalAttentionDouble(p);
    const std::vector<int64_t> out_shape = {c.queries, c.heads, c.value_dim};
    for (int portable = 0; portable < 2; ++portable) {
      ScopedPortableKernels force(portable == 1);
      const std::string path = portable ? "portable" : "dispatched";
      std::vector<float> out(want.out.size(), NAN), lse(want.lse.size(), NAN);
      p.out = out.data();
      p.lse = lse.data();
      PrefillAttention(p);
      ExpectAllNear(out, want.out, kOutTol, 0.0, path + " out", out_shape);
      ExpectAllNear(lse, want.lse, kLseTol, 0.0, path + " lse", {c.queries, c.heads});

      // Through CausalAttention (which sends calls this size here), without lse.
      std::vector<float> out2(want.out.size(), NAN);
      p.out = out2.data();
      p.lse = nullptr;
      CausalAttention(p);
      ExpectAllNear(out2, want.out, kOutTol, 0.0, path + " CausalAttention out", out_shape);
    }
  }
}

}  // namespace
}  // namespace latte
