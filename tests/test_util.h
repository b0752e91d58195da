// Helpers the kernel tests share: random inputs, scoped CPU-feature and thread-count
// settings, element-wise checks that name the worst element, and the double-precision
// attention reference and online-softmax step every attention test compares with.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/dtype.h"
#include "kernels/attention.h"

namespace latte::testing_util {

// n values uniform in [lo, hi).
inline std::vector<float> RandomVector(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// n bf16 values, uniform in [lo, hi) before rounding.
inline std::vector<bf16> RandomBf16(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<bf16> v(n);
  for (bf16& x : v) x = F32ToBf16(dist(rng));
  return v;
}

// Forces the portable kernels (or not) for a scope, then restores the detected CPU features.
class ScopedPortableKernels {
 public:
  explicit ScopedPortableKernels(bool portable) { SetPortableKernelsForTesting(portable); }
  ~ScopedPortableKernels() { SetPortableKernelsForTesting(false); }
  ScopedPortableKernels(const ScopedPortableKernels&) = delete;
  ScopedPortableKernels& operator=(const ScopedPortableKernels&) = delete;
};

// Sets the OpenMP thread count for a scope, then restores it.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedOmpThreads() { omp_set_num_threads(saved_); }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

// ---- row splits ----

// A product of m x rows by n weight rows gives every output row the same sum whichever
// rows share its call (a thread's share of a MatmulMany batch starts at any row): for
// row blocks [first, first + count) at the starts and lengths a split makes, rows(first,
// count, y) must fill y's rows (y: [m, n], row stride n) with `whole`'s values bit for bit.
inline void ExpectRowsIndependentOfSplit(int64_t m, int64_t n, const std::vector<float>& whole,
                                         const std::function<void(int64_t, int64_t, float*)>& rows) {
  std::vector<float> parts(static_cast<size_t>(m * n));
  for (int64_t first : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{13}, n - 1}) {
    for (int64_t count : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{9}, n - first}) {
      if (first < 0 || count < 1 || first + count > n) continue;
      rows(first, count, parts.data());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t r = first; r < first + count; ++r) {
          ASSERT_EQ(parts[i * n + r], whole[i * n + r])
              << "m " << m << " rows [" << first << ", " << first + count << ") row " << r << " x row " << i;
        }
      }
    }
  }
}

// ... and whichever x rows share it: alone(i, y) fills y [n] with x row i's product alone,
// which must equal `whole`'s row i bit for bit.
inline void ExpectXRowsIndependentOfBatch(int64_t m, int64_t n, const std::vector<float>& whole,
                                          const std::function<void(int64_t, float*)>& alone) {
  std::vector<float> one(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    alone(i, one.data());
    for (int64_t r = 0; r < n; ++r) ASSERT_EQ(one[r], whole[i * n + r]) << "x row " << i << " alone, row " << r;
  }
}

// ---- element-wise checks ----

// Flat index i of a row-major array of `shape` as "[a, b, c]" (just "[i]" without a shape).
inline std::string IndexString(size_t i, const std::vector<int64_t>& shape) {
  if (shape.empty()) return "[" + std::to_string(i) + "]";
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = static_cast<int64_t>(i % static_cast<size_t>(shape[d]));
    i /= static_cast<size_t>(shape[d]);
  }
  std::string s = "[";
  for (size_t d = 0; d < index.size(); ++d) s += (d ? ", " : "") + std::to_string(index[d]);
  return s + "]";
}

// Expects |got[i] - want[i]| <= allowed[i] for every i (NaN is never within; an infinite
// want must be matched exactly). On failure one message: how many elements are out, and
// the worst one (the largest error beyond its allowance) with its index in `shape`, both
// values, the error and the allowance.
inline void ExpectWithin(const float* got, const double* want, const double* allowed, size_t n, const std::string& what,
                         const std::vector<int64_t>& shape = {}) {
  size_t bad = 0, worst = 0;
  double worst_excess = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n; ++i) {
    double excess;
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      excess = double(got[i]) == want[i] ? -1.0 : std::numeric_limits<double>::infinity();
    } else {
      const double err = std::fabs(double(got[i]) - want[i]);
      excess = std::isnan(err) ? std::numeric_limits<double>::infinity() : err - allowed[i];
    }
    if (excess > 0) ++bad;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " elements out of tolerance; worst "
                     << IndexString(worst, shape) << " got " << got[worst] << ", want " << want[worst] << ", error "
                     << std::fabs(double(got[worst]) - want[worst]) << ", allowed " << allowed[worst];
}

// The same with allowed[i] = abs_tol + rel_tol · |want[i]|.
inline void ExpectAllNear(const float* got, const double* want, size_t n, double abs_tol, double rel_tol,
                          const std::string& what, const std::vector<int64_t>& shape = {}) {
  std::vector<double> allowed(n);
  for (size_t i = 0; i < n; ++i) allowed[i] = abs_tol + rel_tol * std::fabs(want[i]);
  ExpectWithin(got, want, allowed.data(), n, what, shape);
}

inline void ExpectAllNear(const std::vector<float>& got, const std::vector<double>& want, double abs_tol,
                          double rel_tol, const std::string& what, const std::vector<int64_t>& shape = {}) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ExpectAllNear(got.data(), want.data(), got.size(), abs_tol, rel_tol, what, shape);
}

inline void ExpectAllNear(const std::vector<float>& got, const std::vector<float>& want, double abs_tol,
                          const std::string& what, const std::vector<int64_t>& shape = {}) {
  ExpectAllNear(got, std::vector<double>(want.begin(), want.end()), abs_tol, 0.0, what, shape);
}

// ---- attention in double precision ----

// Softmax attention of one query over n keys: score(t) = scale · q · key(t) over key_dim
// values, out = Σ_t softmax(score)(t) · value(t) over value_dim values. key(t) and
// value(t) return element j of key / value t as a double. Returns the log-sum-exp of
// the scores; n = 0 gives out 0 and lse -inf.
template <typename KeyFn, typename ValueFn> double SoftmaxAttendDouble(const float* q, int64_t key_dim,
                                                                       int64_t value_dim, int64_t n, double scale,
                                                                       KeyFn key, ValueFn value, double* out) {
  std::fill(out, out + value_dim, 0.0);
  if (n <= 0) return -std::numeric_limits<double>::infinity();
  std::vector<double> s(n);
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t t = 0; t < n; ++t) {
    double dot = 0;
    for (int64_t j = 0; j < key_dim; ++j) dot += double(q[j]) * key(t, j);
    s[t] = scale * dot;
    m = std::max(m, s[t]);
  }
  double z = 0;
  for (int64_t t = 0; t < n; ++t) z += std::exp(s[t] - m);
  for (int64_t t = 0; t < n; ++t) {
    const double p = std::exp(s[t] - m) / z;
    for (int64_t j = 0; j < value_dim; ++j) out[j] += p * value(t, j);
  }
  return m + std::log(z);
}

struct AttentionDouble {
  std::vector<double> out;  // out: [queries, heads, value_dim]
  std::vector<double> lse;  // lse: [queries, heads]
};

// CausalAttention's definition: query i sees keys [0, first_position + i] of the block
// (clamped to [0, num_keys)); p.out and p.lse are not touched.
inline AttentionDouble CausalAttentionDouble(const CausalAttentionParams& p) {
  const int64_t H = p.heads, dk = p.key_dim, dv = p.value_dim;
  AttentionDouble a{std::vector<double>(p.num_queries * H * dv), std::vector<double>(p.num_queries * H)};
  for (int64_t i = 0; i < p.num_queries; ++i) {
    const int64_t visible = std::clamp<int64_t>(p.first_position + i + 1, 0, p.num_keys);
    for (int64_t h = 0; h < H; ++h) {
      a.lse[i * H + h] = SoftmaxAttendDouble(
          p.q + (i * H + h) * dk, dk, dv, visible, p.scale,
          [&](int64_t t, int64_t j) { return double(p.k[(t * H + h) * dk + j]); },
          [&](int64_t t, int64_t j) { return double(p.v[(t * H + h) * dv + j]); }, &a.out[(i * H + h) * dv]);
    }
  }
  return a;
}

// SharedKeyAttention's definition over the rows' exact values (bf16 rows widened, fp8
// rows times their scale), read through the block table; one query: out [heads,
// value_dim], lse [heads].
inline AttentionDouble SharedKeyAttentionDouble(const SharedKeyAttentionParams& p) {
  const auto row = [&p](int64_t t, int64_t j) -> double { return p.rows.At(t, j); };
  AttentionDouble a{std::vector<double>(p.heads * p.value_dim), std::vector<double>(p.heads)};
  for (int64_t h = 0; h < p.heads; ++h) {
    a.lse[h] = SoftmaxAttendDouble(p.q + h * p.row_dim, p.row_dim, p.value_dim, p.num_rows, p.scale, row, row,
                                   &a.out[h * p.value_dim]);
  }
  return a;
}

// One online-softmax step of one row in double, as the attention block kernels take it:
// with m = max(max, scores[0, n)), weights[t] = e^{scores[t] - m} and rescale =
// e^{max - m} (0 while max = -inf); the caller's running sum becomes sum · rescale + Σ
// weights (or the sum of the weights as the kernel rounded them).
struct OnlineSoftmaxStep {
  double max = 0;
  double rescale = 0;
  std::vector<double> weights;  // weights: [n]
};

inline OnlineSoftmaxStep OnlineSoftmaxDouble(double max, const float* scores, int64_t n) {
  OnlineSoftmaxStep step;
  step.max = max;
  for (int64_t t = 0; t < n; ++t) step.max = std::max(step.max, double(scores[t]));
  step.rescale = std::exp(max - step.max);
  step.weights.resize(n);
  for (int64_t t = 0; t < n; ++t) step.weights[t] = std::exp(double(scores[t]) - step.max);
  return step;
}

}  // namespace latte::testing_util
