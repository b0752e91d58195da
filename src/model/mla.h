// Multi-head Latent Attention, in its three modes side by side (docs/mla.md).
//
//   symbol  config key          V3/R1   V2-Lite
//   d       hidden_size         7168    2048
//   H       num_attention_heads 128     16
//   d_cq    q_lora_rank         1536    null (plain q_proj)
//   d_c     kv_lora_rank        512     512
//   d_n     qk_nope_head_dim    128     128
//   d_r     qk_rope_head_dim    64      64
//   d_v     v_head_dim          128     128
//   d_l     d_c + d_r           576     576  (one latent cache row: c_kv | k_r; LatentDim())
//   d_in    width of c_q: d_cq, or d with a plain q_proj
//   R       the rows of one forward call that take the latent path (decode tokens)
//
// Common to every mode, for each new token:
//   c_q  = rmsnorm(q_a_proj · x)            (or c_q = x with a plain q_proj)
//   kv   = kv_a_proj_with_mqa · x;  c_kv = rmsnorm(kv[:d_c]);  k_r = rope(kv[d_c:])
//   cache row ← c_kv | k_r   (rounded once to the cache's dtype: bf16 for bf16 models)
//
// Decompress (naive mode always; absorbed/materialized for multi-token prefill spans):
//   q = q_b · c_q, rope(q_r);  k_n, v = kv_b · c_kv(t) for every cached t
//   o = causal_attention(q, [k_n | k_r], v);  out = o_proj · o
// Absorbed (decode; nothing materialized):
//   q = q_b · c_q;  q_lat,h = W_UK,hᵀ · q_n,h  (bmm over heads);  rope(q_r)
//   o_lat = shared_key_attention([q_lat | q_r], cache rows)   (576-wide dots, MQA-like)
//   o_h = W_UV,h · o_lat,h  (bmm over heads);  out = o_proj · o
//   Every tensor keeps the token-major layout [R, H, ·]: the bmms read each head's slice
//   with a row stride (q_n out of q, o_lat,h out of o_lat) and write it the same way
//   (q_lat into query, o_h into o), so nothing is reshuffled to [H, R, ·] and back.
// Materialized (decode; the baseline):
//   q_lat = W_Q_UK · c_q;  q_r = q_b_rope · c_q;  o_lat as above;  out = W_UV_O · o_lat
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/rope.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/mla_mode.h"
#include "model/model_weights.h"
#include "model/sequence_span.h"

namespace latte {

// How multi-token spans run (the mode itself comes with the weights: ModelWeights::mode()).
struct MlaSettings {
  // Multi-token spans in absorbed/materialized mode decompress K/V (compute-bound,
  // one decompression shared by many queries); false runs them through the latent
  // path too (used by tests to exercise it on many positions).
  bool decompress_prefill = true;
  // Tokens decompressed at a time by the decompress path (blocks merged by
  // log-sum-exp): 2048 × 128 heads × 256 values × 4 B = 268 MB of K/V at R1 shapes,
  // however long the context.
  int64_t decompress_block = 2048;
};

// Reused buffers, grown on demand and never shrunk: a steady decode step allocates nothing.
// T: rows of the call; R: rows on the latent path; n: rows of one decompressed span;
// B: decompress_block (or the context, if shorter).
struct MlaScratch {
  std::vector<float> c_q;                         // c_q: [T, d_in] = rmsnorm(q_a_proj · x) (unused with q_proj)
  std::vector<float> kv;                          // kv: [T, d_l] = c_kv | k_r, the rows written to the caches
  std::vector<int64_t> positions;                 // positions: [T], each row's position in its sequence
  std::vector<int64_t> latent_rows;               // latent_rows: [R], rows taking the latent path
  std::vector<const SequenceSpan*> latent_spans;  // latent_spans: [R], their spans
  std::vector<float> rows_in;                     // rows_in: [R, d_in], c_q of the latent rows
  std::vector<float> q;                           // q: [R or n, H, d_n + d_r] = q_b_proj · c_q
  std::vector<float> q_lat;                       // q_lat: [R, H, d_c] = W_Q_UK · c_q (materialized)
  std::vector<float> query;                       // query: [R, H, d_l] = q_lat | rope(q_r) per head
  std::vector<float> o_lat;                       // o_lat: [R, H, d_c], the latent attention output
  std::vector<float> o;                           // o: [R or n, H, d_v], per-head outputs before o_proj
  std::vector<float> rows_out;                    // rows_out: [R, d], the latent rows' results
  std::vector<float> cache_rows;                  // cache_rows: [B, d_l], cached rows widened to f32
  std::vector<float> kv_dec;                      // kv_dec: [B, H, d_n + d_v] = kv_b_proj · c_kv
  std::vector<float> k;                           // k: [B, H, d_n + d_r] = k_n | k_r (k_r shared by heads)
  std::vector<float> v;                           // v: [B, H, d_v]
  std::vector<float> lse;                         // lse: [n, H], of o over the blocks so far
  std::vector<float> o_part;                      // o_part: [n, H, d_v], one block's attention output
  std::vector<float> lse_part;                    // lse_part: [n, H], its log-sum-exp
  std::vector<float> lse_lat;                     // lse_lat: [R, H], of o_lat over the latent keys
};

class MlaLayer {
 public:
  // `mode`: the one the weights were prepared for (ModelWeights::mode()).
  MlaLayer(const ModelConfig& config, MlaMode mode, const MlaSettings& settings = {});

  // x: [T, d] (already input_layernorm'd), rows in span order; out: [T, d].
  // Writes each span's new latent rows into `cache` at `layer`, through its block table.
  void Forward(const MlaWeights& w, int64_t layer, const float* x, std::span<const SequenceSpan> spans, KvCache& cache,
               float* out, MlaScratch& s) const;

 private:
  // The first position of `span` that takes the latent (decode) path; the rows before
  // it take the decompress (prefill) path.
  int64_t FirstLatentPosition(const SequenceSpan& span) const;
  void LatentPath(const MlaWeights& w, int64_t layer, const float* c_q, const std::vector<int64_t>& rows,
                  const std::vector<const SequenceSpan*>& row_span, const KvCache& cache, float* out,
                  MlaScratch& s) const;
  void DecompressPath(const MlaWeights& w, int64_t layer, const float* c_q, const SequenceSpan& span,
                      const KvCache& cache, float* out, MlaScratch& s) const;
  // The span's prefill rows at positions >= from attend to the cached rows [from,
  // position] in latent form; the results merge into o: [n, H, d_v] and lse: [n, H],
  // which hold their attention over the keys before `from`.
  void LatentKeys(const MlaWeights& w, int64_t layer, const float* q, const SequenceSpan& span, int64_t from,
                  const KvCache& cache, float* o, float* lse, MlaScratch& s) const;
  // K/V of the span's cached positions [from, from + count), count <= decompress_block:
  // k: [count, H, d_n + d_r] (k_r repeated for every head), v: [count, H, d_v].
  void DecompressRows(const MlaWeights& w, int64_t layer, const SequenceSpan& span, int64_t from, int64_t count,
                      const KvCache& cache, float* k, float* v, MlaScratch& s) const;

  const ModelConfig& c_;
  MlaMode mode_;
  MlaSettings settings_;
  RopeFrequencies rope_;
  float scale_;
  int64_t d_in_;  // width of c_q: d_cq, or d with a plain q_proj
};

}  // namespace latte
