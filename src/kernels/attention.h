// The two attention kernels. Both take the softmax scale and return, per query and
// head, the output and the log-sum-exp of the scaled scores, so partial results over
// disjoint key ranges merge exactly with MergeAttentionPartials.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/paged_rows.h"

namespace latte {

// Causal multi-head attention with separate per-head keys and values (prefill, and
// the decompressed "naive" form). Query i sees keys [0, first_position + i]: with the
// keys a block [k0, k1) of a longer sequence, pass first_position = position - k0
// (it may be negative); a query that sees no key gets out = 0 and lse = -inf.
struct CausalAttentionParams {
  const float* q = nullptr;  // q: [num_queries, heads, key_dim]
  const float* k = nullptr;  // k: [num_keys, heads, key_dim]
  const float* v = nullptr;  // v: [num_keys, heads, value_dim]
  float* out = nullptr;      // out: [num_queries, heads, value_dim]
  float* lse = nullptr;      // lse: [num_queries, heads], may be null
  int64_t num_queries = 0;
  int64_t num_keys = 0;
  int64_t first_position = 0;
  int64_t heads = 0;
  int64_t key_dim = 0;
  int64_t value_dim = 0;
  float scale = 1.0f;
};
void CausalAttention(const CausalAttentionParams& p);

// Attention of several heads over one shared set of rows (multi-query, as MLA's latent
// cache is): score_h(t) = scale · q_h · row(t) over all row_dim values, and
// out_h = Σ_t softmax(score_h)(t) · row(t)[0:value_dim] (the value is a prefix of the row).
// Every row is read once for all heads. The context is split over threads, each split
// producing a partial (output, lse) that MergeAttentionPartials merges. With no rows a
// head gets out 0 and lse -inf.
//
// Rows are read through a block table (kernels/paged_rows.h: a paged KV cache; one
// block for contiguous rows), a run of at most kSharedKeyBlock rows inside one block at
// a time. They are f32, bf16 or fp8 e4m3 with a per-row scale. With bf16 rows on a CPU
// with AVX512_BF16 the dot products run on vdpbf16ps: q and the softmax weights are
// rounded to bf16 for them (relative error <= 2^-8 per value; the weights' sum is taken
// over the rounded weights, so out_h stays a convex combination of rows), accumulation
// is f32. fp8 rows are first converted per run: to bf16 (e4m3 · scale, rounded once)
// for the vdpbf16ps path, to f32 otherwise. Elsewhere bf16 rows are widened to f32 and
// the f32 kernels run.
struct SharedKeyAttentionParams {
  const float* q = nullptr;  // q: [heads, row_dim]
  PagedRows rows;            // rows: [num_rows, row_dim] through a block table
  float* out = nullptr;      // out: [heads, value_dim]
  float* lse = nullptr;      // lse: [heads], may be null
  int64_t num_rows = 0;
  int64_t heads = 0;
  int64_t row_dim = 0;    // = rows.row_dim
  int64_t value_dim = 0;  // <= row_dim
  float scale = 1.0f;
};
void SharedKeyAttention(const SharedKeyAttentionParams& p);

// SharedKeyAttention's arithmetic rate over rows of `rows_dtype` on this CPU's path,
// relative to CausalAttention's (tiled, f32) with a full tile of queries, as
// bench/attention_bench.cc measures them on 2 Zen 4 cores with AVX-512 and AVX512_BF16:
// CausalAttention ~93 GFLOP/s; SharedKeyAttention ~330 over bf16 (and fp8) rows with
// vdpbf16ps, ~150 over f32 rows with AVX-512, ~18 on the portable path; with AVX-512 off
// (LATTE_ISA=avx2, one thread) 78 over bf16 rows against CausalAttention's 46. A caller
// that chooses between the two kernels weighs their arithmetic with it.
double SharedKeyAttentionRelativeRate(DType rows_dtype);

// Merges `parts` partial results for the same queries over disjoint key sets:
// out_i: [n, dim] with lse_i: [n] → out: [n, dim], lse: [n] (out, lse may alias
// outs[0], lses[0]; lse may be null). Parts with lse = -inf (no keys) contribute
// nothing; a query no part saw gets out 0 and lse -inf. SharedKeyAttention merges its
// context splits with it, the decompress path its key blocks.
void MergeAttentionPartials(const float* const* outs, const float* const* lses, int64_t parts, int64_t n, int64_t dim,
                            float* out, float* lse);

}  // namespace latte
