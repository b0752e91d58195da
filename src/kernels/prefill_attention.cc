#include "kernels/prefill_attention.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "base/scratch.h"
#include "kernels/attention_internal.h"
#include "kernels/matmul.h"

namespace latte {
namespace {

// Queries per GEMM: small enough that the causal triangle wastes little (keys
// are computed up to the chunk's last query), large enough for an efficient GEMM.
constexpr int64_t kQueryChunk = 128;

// e^x for x <= 0 (softmax arguments minus their max), relative error ~1e-7:
// x = n·ln2 + r with |r| <= ln2/2, e^r by its Taylor series to r^7 (the next term
// is below 6e-9 there), 2^n through the exponent bits. Plain float and int
// arithmetic that GCC vectorises without -ffast-math.
inline float ExpNonPositive(float x) {
  x = std::max(x, -87.0f);  // e^-87 ~ 1.6e-38 still has a normal 2^n
  const float n = static_cast<float>(static_cast<int32_t>(x * 1.44269504f - 0.5f));  // round(x/ln2)
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;                       // ln2 split in two: r exact-ish
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

// row[0, visible) = e^(scale·(row - max)), row[visible, n) = 0; returns the sum and
// sets *max_out to max(row[0, visible)).
double SoftmaxNumerators(float* row, int64_t visible, int64_t n, float scale, float* max_out) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < visible; ++t) max = std::max(max, row[t]);
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t t = 0; t < visible; ++t) {
    row[t] = ExpNonPositive(scale * (row[t] - max));
    sum += row[t];
  }
  std::fill(row + visible, row + n, 0.0f);
  *max_out = max;
  return sum;
}

struct HeadScratch {
  std::vector<float> scores;  // scores: [kQueryChunk, num_keys]
  std::vector<float> vt;      // vt: [value_dim, num_keys], V_hᵀ
};

void AttendHead(const CausalAttentionParams& p, int64_t h, HeadScratch& s) {
  const int64_t H = p.heads, dk = p.key_dim, dv = p.value_dim, nk = p.num_keys;
  float* vt = Grow(s.vt, dv * nk);
  for (int64_t t = 0; t < nk; ++t) {
    const float* v = p.v + (t * H + h) * dv;
    for (int64_t c = 0; c < dv; ++c) vt[c * nk + t] = v[c];
  }
  float* scores = Grow(s.scores, kQueryChunk * nk);
  for (int64_t i0 = 0; i0 < p.num_queries; i0 += kQueryChunk) {
    const int64_t rows = std::min(kQueryChunk, p.num_queries - i0);
    // Keys [0, seen) are visible to at least the chunk's last query.
    const int64_t seen = std::clamp<int64_t>(p.first_position + i0 + rows, 0, nk);
    float* out = p.out + (i0 * H + h) * dv;  // row stride H·dv
    if (seen == 0) {
      for (int64_t r = 0; r < rows; ++r) {
        std::fill(out + r * H * dv, out + r * H * dv + dv, 0.0f);
        if (p.lse) p.lse[(i0 + r) * H + h] = -std::numeric_limits<float>::infinity();
      }
      continue;
    }
    // scores: [rows, seen] = q_h · k_hᵀ (unscaled)
    Matmul({.x = p.q + (i0 * H + h) * dk,
            .m = rows,
            .ldx = H * dk,
            .w = WeightView{DType::kF32, seen, dk, H * dk, p.k + h * dk},
            .y = scores,
            .ldy = seen});
    float row_max[kQueryChunk];
    double row_sum[kQueryChunk];
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t visible = std::clamp<int64_t>(p.first_position + i0 + r + 1, 0, seen);
      row_sum[r] = SoftmaxNumerators(scores + r * seen, visible, seen, p.scale, &row_max[r]);
    }
    // out rows: [rows, dv] = P · v_h, normalised below.
    Matmul(
        {.x = scores, .m = rows, .ldx = seen, .w = WeightView{DType::kF32, dv, seen, nk, vt}, .y = out, .ldy = H * dv});
    for (int64_t r = 0; r < rows; ++r) {
      float* o = out + r * H * dv;
      const bool empty = row_sum[r] == 0;  // no visible key
      const float inv = empty ? 0.0f : static_cast<float>(1.0 / row_sum[r]);
      for (int64_t c = 0; c < dv; ++c) o[c] *= inv;
      if (p.lse) {
        p.lse[(i0 + r) * H + h] = empty ? -std::numeric_limits<float>::infinity()
                                        : p.scale * row_max[r] + static_cast<float>(std::log(row_sum[r]));
      }
    }
  }
}

}  // namespace

void PrefillAttention(const CausalAttentionParams& p) {
  attention_internal::CheckParams(p, "PrefillAttention");
  if (p.num_queries <= 0 || p.heads <= 0) return;
    // One head per thread at a time; the GEMMs inside run on that thread alone.
#pragma omp parallel
  {
    thread_local HeadScratch scratch;
#pragma omp for schedule(dynamic, 1)
    for (int64_t h = 0; h < p.heads; ++h) AttendHead(p, h, scratch);
  }
}

}  // namespace latte
