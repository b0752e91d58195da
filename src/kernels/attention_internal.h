// The block kernels behind SharedKeyAttention's run-time dispatch, exposed so tests
// can check each variant. Not part of the kernel API: callers use attention.h.
//
// A block is n <= kSharedKeyBlock consecutive cache rows (row stride row_dim); the
// scores of all heads for one block live in `scores`: [heads, ld] (ld >= n).
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/attention.h"

namespace latte::attention_internal {

inline constexpr int64_t kSharedKeyBlock = 64;

// The block kernels a SharedKeyAttention call runs; SharedKeyAttention picks one from
// the CPU (GetCpuFeatures) and the rows' dtype.
enum class SharedKeyPath {
  kPortable,    // plain loops; bf16 rows widened to f32 per block
  kAvx512,      // f32 FMA; bf16 rows widened to f32 per block (AVX-512 without BF16)
  kAvx2,        // the same on 8-float AVX2 + FMA registers (CPUs without AVX-512)
  kAvx512Bf16,  // bf16 rows only: vdpbf16ps, q and the weights rounded to bf16
};

// The checks (LATTE_CHECK) every attention entry point makes of its params: counts
// and widths in range, non-null pointers where something is read or written, rows
// aligned to their dtype. `caller` names the entry point in the message.
void CheckParams(const CausalAttentionParams& p, const char* caller);
void CheckParams(const SharedKeyAttentionParams& p, const char* caller);

// SharedKeyAttention on a given path (for tests: every path the CPU can run, whatever
// the dispatch would pick). kAvx512* and kAvx2 need the CPU features they name.
void SharedKeyAttentionOnPath(const SharedKeyAttentionParams& p, SharedKeyPath path);

// scores[h * ld + t] = scale · q[h] · rows[t] over row_dim values, h < heads, t < n.
// q: [heads, row_dim].
void SharedKeyScoresPortable(const float* q, int64_t heads, const float* rows, int64_t n, int64_t row_dim, float scale,
                             float* scores, int64_t ld);
void SharedKeyScoresAvx512(const float* q, int64_t heads, const float* rows, int64_t n, int64_t row_dim, float scale,
                           float* scores, int64_t ld);
void SharedKeyScoresAvx2(const float* q, int64_t heads, const float* rows, int64_t n, int64_t row_dim, float scale,
                         float* scores, int64_t ld);

// Online-softmax step of each head over one block of scores: with m = max(max[h],
// max_t scores[h, t]), scores[h, t] <- e^{scores[h, t] - m}, rescale[h] <- e^{max[h] - m}
// (0 while max[h] = -inf), sum[h] <- sum[h] · rescale[h] + Σ_t scores[h, t], max[h] <- m.
void SharedKeySoftmaxPortable(float* scores, int64_t ld, int64_t heads, int64_t n, float* max, float* sum,
                              float* rescale);
void SharedKeySoftmaxAvx512(float* scores, int64_t ld, int64_t heads, int64_t n, float* max, float* sum,
                            float* rescale);
void SharedKeySoftmaxAvx2(float* scores, int64_t ld, int64_t heads, int64_t n, float* max, float* sum, float* rescale);

// acc[h, j] = acc[h, j] · rescale[h] + Σ_{t<n} p[h * ld + t] · rows[t * row_dim + j] for
// h < heads, j < value_dim (value_dim <= row_dim); acc: [heads, value_dim]. rescale may be
// null (no rescaling).
void SharedKeyAccumulatePortable(const float* p, int64_t ld, int64_t heads, const float* rows, int64_t n,
                                 int64_t row_dim, int64_t value_dim, const float* rescale, float* acc);
void SharedKeyAccumulateAvx512(const float* p, int64_t ld, int64_t heads, const float* rows, int64_t n, int64_t row_dim,
                               int64_t value_dim, const float* rescale, float* acc);
void SharedKeyAccumulateAvx2(const float* p, int64_t ld, int64_t heads, const float* rows, int64_t n, int64_t row_dim,
                             int64_t value_dim, const float* rescale, float* acc);

// ---- bf16 rows ----

// out[i] = rows[i] widened to f32, i < count (bf16 rows on the f32 kernels' paths).
void Bf16ToF32Portable(const bf16* rows, int64_t count, float* out);
void Bf16ToF32Avx512(const bf16* rows, int64_t count, float* out);
void Bf16ToF32Avx2(const bf16* rows, int64_t count, float* out);

// out[i] = e4m3(codes[i]) · scale, i < count, the same f32 values as Fp8E4M3ToF32(c) · scale
// (fp8 rows on the AVX2 path; the portable path converts value by value).
void Fp8ToF32Avx2(const uint8_t* codes, int64_t count, float scale, float* out);

// The vdpbf16ps path (AVX512_BF16), per block of n <= kSharedKeyBlock bf16 rows.
//
// scores[h * ld + t] = scale · q[h] · rows[t] over row_dim values, h < heads, t < n,
// with q: [heads, row_dim] already rounded to bf16. next_rows (may be null): the next
// block's next_n rows, prefetched into cache meanwhile (the rows stream from memory
// once per step: without the prefetch the first head tile waits on every line).
void SharedKeyScoresBf16Dp(const bf16* q, int64_t heads, const bf16* rows, int64_t n, int64_t row_dim, float scale,
                           float* scores, int64_t ld, const bf16* next_rows = nullptr, int64_t next_n = 0);

// The online-softmax step of SharedKeySoftmax* (same max, sum, rescale), except that
// the weights go to p[h * ldp + t], t < n, rounded to bf16 (and p[h * ldp + n] = 0 when
// n is odd, so pairs are complete; ldp even), scores are left as they are, and sum[h]
// adds the rounded weights, not the f32 ones: acc / sum is then exactly the average of
// the rows under the weights the dot products used.
void SharedKeySoftmaxBf16Avx512(float* scores, int64_t ld, int64_t heads, int64_t n, float* max, float* sum,
                                float* rescale, bf16* p, int64_t ldp);

// vdpbf16ps sums pairs of products, so the value side pairs consecutive rows:
// pairs[u * 2 * value_dim + 2 * j + i] = rows[(2u + i) * row_dim + j] for j < value_dim,
// u < ceil(n / 2), i in {0, 1}; the missing row of an odd n reads as 0.
void SharedKeyPairRowsAvx512(const bf16* rows, int64_t n, int64_t row_dim, int64_t value_dim, bf16* pairs);

// acc[h, j] = acc[h, j] · rescale[h] + Σ_{t < n} p[h * ldp + t] · rows[t, j], h < heads,
// j < value_dim, from the bf16 weights and the paired rows above; acc: [heads, value_dim].
// rescale may be null (no rescaling).
void SharedKeyAccumulateBf16Dp(const bf16* p, int64_t ldp, int64_t heads, const bf16* pairs, int64_t n,
                               int64_t value_dim, const float* rescale, float* acc);

}  // namespace latte::attention_internal
