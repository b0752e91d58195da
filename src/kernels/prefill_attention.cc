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
#include "kernels/matmul_internal.h"

namespace latte {
namespace {

// Queries per GEMM: small enough that the causal triangle wastes little (keys
// are computed up to the chunk's last query), large enough for an efficient GEMM.
constexpr int64_t kQueryChunk = 128;
// Keys per block: a block's scores, [kQueryChunk, kKeyBlock] f32 (256 KiB), stay in L2.
constexpr int64_t kKeyBlock = 512;

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

float RowMax(const float* row, int64_t visible) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < visible; ++t) max = std::max(max, row[t]);
  return max;
}

// row[0, visible) = e^(scale·(row - max)), row[visible, n) = 0; returns their sum.
double SoftmaxNumerators(float* row, int64_t visible, int64_t n, float scale, float max) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t t = 0; t < visible; ++t) {
    row[t] = ExpNonPositive(scale * (row[t] - max));
    sum += row[t];
  }
  std::fill(row + visible, row + n, 0.0f);
  return sum;
}

struct TileScratch {
  std::vector<float> scores;  // scores: [kQueryChunk, kKeyBlock], one key block's P
  std::vector<float> pv;      // pv: [kQueryChunk, value_dim], that block's P · V
  std::vector<float> acc;     // acc: [kQueryChunk, value_dim], Σ over blocks so far
};

// y [m, n] = x [m, k] · b [k, n], all row-major with row strides: oneDNN, or this loop
// where oneDNN has no fast kernel.
void MatmulKN(const float* x, int64_t m, int64_t ldx, const float* b, int64_t k, int64_t n, int64_t ldb, float* y,
              int64_t ldy) {
  if (matmul_internal::MatmulOneDnnF32KN(x, m, ldx, b, k, n, ldb, y, ldy)) return;
  for (int64_t i = 0; i < m; ++i) {
    float* yi = y + i * ldy;
    std::fill(yi, yi + n, 0.0f);
    for (int64_t t = 0; t < k; ++t) {
      const float xt = x[i * ldx + t];
      const float* bt = b + t * ldb;
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) yi[c] += xt * bt[c];
    }
  }
}

// Queries [i0, i0 + rows) of head h, flash-attention style: over blocks of kKeyBlock
// keys, S = Q·Kᵀ, a running max and sum per query (the accumulated output rescaled
// when the max grows), then acc += P·V. A block's scores stay in cache, and every
// GEMM but the last block's has one shape, so its oneDNN primitive is reused.
void AttendQueryChunk(const CausalAttentionParams& p, int64_t h, int64_t i0, int64_t rows, TileScratch& s) {
  const int64_t H = p.heads, dk = p.key_dim, dv = p.value_dim;
  float* out = p.out + (i0 * H + h) * dv;  // row stride H·dv
  // Keys [0, seen) are visible to at least the chunk's last query.
  const int64_t seen = std::clamp<int64_t>(p.first_position + i0 + rows, 0, p.num_keys);
  float row_max[kQueryChunk];
  double row_sum[kQueryChunk];
  float rescale[kQueryChunk];
  std::fill(row_max, row_max + rows, -std::numeric_limits<float>::infinity());
  std::fill(row_sum, row_sum + rows, 0.0);
  float* scores = Grow(s.scores, kQueryChunk * kKeyBlock);
  float* pv = Grow(s.pv, kQueryChunk * dv);
  float* acc = Grow(s.acc, kQueryChunk * dv);
  std::fill(acc, acc + rows * dv, 0.0f);
  for (int64_t k0 = 0; k0 < seen; k0 += kKeyBlock) {
    const int64_t n = std::min(kKeyBlock, seen - k0);
    // scores: [rows, n] = q_h · k_hᵀ over keys [k0, k0 + n) (unscaled)
    Matmul({.x = p.q + (i0 * H + h) * dk,
            .m = rows,
            .ldx = H * dk,
            .w = WeightView{DType::kF32, n, dk, H * dk, p.k + (k0 * H + h) * dk},
            .y = scores,
            .ldy = n});
    for (int64_t r = 0; r < rows; ++r) {
      float* row = scores + r * n;
      const int64_t visible = std::clamp<int64_t>(p.first_position + i0 + r + 1 - k0, 0, n);
      rescale[r] = 1.0f;
      if (visible == 0) {
        std::fill(row, row + n, 0.0f);
        continue;
      }
      const float block_max = RowMax(row, visible);
      if (block_max > row_max[r]) {
        // Earlier blocks' terms were e^(scale·(t - old max)): bring them to the new max
        // (the first block's old max is -inf, and acc and the sum are still 0).
        rescale[r] = ExpNonPositive(p.scale * (row_max[r] - block_max));
        row_sum[r] *= rescale[r];
        row_max[r] = block_max;
      }
      row_sum[r] += SoftmaxNumerators(row, visible, n, p.scale, row_max[r]);
    }
    // pv: [rows, dv] = P · v_h over the block, v_h read in place: [n, dv], row stride H·dv.
    MatmulKN(scores, rows, n, p.v + (k0 * H + h) * dv, n, dv, H * dv, pv, dv);
    for (int64_t r = 0; r < rows; ++r) {
      float* a = acc + r * dv;
      const float* b = pv + r * dv;
      const float f = rescale[r];
#pragma omp simd
      for (int64_t c = 0; c < dv; ++c) a[c] = a[c] * f + b[c];
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * H * dv;
    const bool empty = row_sum[r] == 0;  // no visible key
    const float inv = empty ? 0.0f : static_cast<float>(1.0 / row_sum[r]);
    for (int64_t c = 0; c < dv; ++c) o[c] = acc[r * dv + c] * inv;
    if (p.lse) {
      p.lse[(i0 + r) * H + h] = empty ? -std::numeric_limits<float>::infinity()
                                      : p.scale * row_max[r] + static_cast<float>(std::log(row_sum[r]));
    }
  }
}

}  // namespace

void PrefillAttention(const CausalAttentionParams& p) {
  attention_internal::CheckParams(p, "PrefillAttention");
  if (p.num_queries <= 0 || p.heads <= 0) return;
  // One (query chunk, head) per thread at a time, the GEMMs inside on that thread
  // alone; the last chunks, which see the most keys, go first.
  const int64_t chunks = (p.num_queries + kQueryChunk - 1) / kQueryChunk;
#pragma omp parallel
  {
    thread_local TileScratch scratch;
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < chunks * p.heads; ++task) {
      const int64_t chunk = chunks - 1 - task / p.heads, h = task % p.heads;
      const int64_t i0 = chunk * kQueryChunk;
      AttendQueryChunk(p, h, i0, std::min(kQueryChunk, p.num_queries - i0), scratch);
    }
  }
}

}  // namespace latte
