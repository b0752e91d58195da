// The block kernels behind SharedKeyAttention's run-time dispatch, exposed so tests
// can check each variant. Not part of the kernel API: callers use attention.h.
//
// A block is n <= kSharedKeyBlock consecutive cache rows (row stride row_dim); the
// scores of all heads for one block live in `scores`: [heads, ld] (ld >= n).
#pragma once

#include <cstdint>

namespace latte::attention_internal {

inline constexpr int64_t kSharedKeyBlock = 64;

// scores[h * ld + t] = scale · q[h] · rows[t] over row_dim values, h < heads, t < n.
// q: [heads, row_dim].
void SharedKeyScoresPortable(const float* q, int64_t heads, const float* rows, int64_t n,
                             int64_t row_dim, float scale, float* scores, int64_t ld);
void SharedKeyScoresAvx512(const float* q, int64_t heads, const float* rows, int64_t n,
                           int64_t row_dim, float scale, float* scores, int64_t ld);

// Online-softmax step of each head over one block of scores: with m = max(max[h],
// max_t scores[h, t]), scores[h, t] <- e^{scores[h, t] - m}, rescale[h] <- e^{max[h] - m}
// (0 while max[h] = -inf), sum[h] <- sum[h] · rescale[h] + Σ_t scores[h, t], max[h] <- m.
void SharedKeySoftmaxPortable(float* scores, int64_t ld, int64_t heads, int64_t n, float* max,
                              float* sum, float* rescale);
void SharedKeySoftmaxAvx512(float* scores, int64_t ld, int64_t heads, int64_t n, float* max,
                            float* sum, float* rescale);

// acc[h, j] = acc[h, j] · rescale[h] + Σ_{t<n} p[h * ld + t] · rows[t * row_dim + j] for
// h < heads, j < value_dim (value_dim <= row_dim); acc: [heads, value_dim]. rescale may be
// null (no rescaling).
void SharedKeyAccumulatePortable(const float* p, int64_t ld, int64_t heads, const float* rows,
                                 int64_t n, int64_t row_dim, int64_t value_dim,
                                 const float* rescale, float* acc);
void SharedKeyAccumulateAvx512(const float* p, int64_t ld, int64_t heads, const float* rows,
                               int64_t n, int64_t row_dim, int64_t value_dim,
                               const float* rescale, float* acc);

}  // namespace latte::attention_internal
