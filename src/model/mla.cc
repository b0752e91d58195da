#include "model/mla.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "base/scratch.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "model/decompressed_prefix.h"

namespace latte {
namespace {

RopeFrequencies MakeRope(const ModelConfig& c) {
  if (!c.rope_scaling) return RopeFrequencies::Plain(c.qk_rope_head_dim, c.rope_theta);
  const YarnScaling& y = *c.rope_scaling;
  return RopeFrequencies::Yarn(
      c.qk_rope_head_dim, c.rope_theta,
      YarnParams{y.factor, y.original_max_position_embeddings, y.beta_fast, y.beta_slow, y.mscale, y.mscale_all_dim});
}

}  // namespace

MlaLayer::MlaLayer(const ModelConfig& config, MlaMode mode, const MlaSettings& settings)
    : c_(config),
      mode_(mode),
      settings_(settings),
      rope_(MakeRope(config)),
      scale_(static_cast<float>(config.SoftmaxScale())),
      d_in_(config.q_lora_rank ? *config.q_lora_rank : config.hidden_size) {
  LATTE_CHECK(settings.decompress_block >= 1, "MlaSettings: decompress_block ", settings.decompress_block);
}

int64_t MlaLayer::FirstLatentPosition(const SequenceSpan& span) const {
  const int64_t end = span.start + span.count;
  if (mode_ == MlaMode::kNaive) return end;
  if (!settings_.decompress_prefill) return span.start;
  if (span.decode_from == kDecodeBySpanLength) return span.count == 1 ? span.start : end;
  return std::clamp(span.decode_from, span.start, end);
}

void MlaLayer::Forward(const MlaWeights& w, int64_t layer, const float* x, std::span<const SequenceSpan> spans,
                       KvCache& cache, float* out, MlaScratch& s) const {
  const int64_t d = c_.hidden_size, d_c = c_.kv_lora_rank, d_l = c_.LatentDim();
  const float eps = static_cast<float>(c_.rms_norm_eps);
  // The MTP layers' attention runs after the L others, on cache layers of their own.
  LATTE_CHECK(layer >= 0 && layer < c_.num_hidden_layers + c_.num_nextn_predict_layers, "MlaLayer: layer ", layer,
              " of ", c_.num_hidden_layers, " (+ ", c_.num_nextn_predict_layers, " MTP)");
  LATTE_CHECK(x != nullptr && out != nullptr, "MlaLayer: null x or out");
  int64_t T = 0;
  LATTE_CHECK(cache.row_dim() == d_l && layer < cache.layers(), "MlaLayer: layer ", layer, " of a cache of ",
              cache.layers(), " layers of ", cache.row_dim(), "-value rows (the model's rows have ", d_l, ")");
  for (const SequenceSpan& span : spans) {
    LATTE_CHECK(span.count >= 1 && span.start >= 0, "MlaLayer: span of ", span.count, " tokens at ", span.start);
    LATTE_CHECK(span.start + span.count <= static_cast<int64_t>(span.block_table.size()) * cache.block_size(),
                "MlaLayer: span ends at ", span.start + span.count, ", past its ", span.block_table.size(),
                " blocks of ", cache.block_size());
    T += span.count;
  }
  LATTE_DCHECK(mode_ == MlaMode::kNaive || w.w_uk_t.size() == static_cast<size_t>(c_.num_attention_heads),
               "MlaLayer: weights not prepared for mode ", MlaModeName(mode_));
  LATTE_DCHECK(mode_ != MlaMode::kMaterialized || (w.w_q_uk && w.w_uv_o), "MlaLayer: weights not prepared for mode ",
               MlaModeName(mode_));

  // c_q: [T, d_in]
  const float* c_q = x;
  if (w.q_a_proj) {
    float* cq = Grow(s.c_q, T * d_in_);
    Matmul(x, T, *w.q_a_proj, cq);
    RmsNorm(cq, w.q_a_layernorm.data(), T, d_in_, eps, cq);
    c_q = cq;
  }

  // kv: [T, d_l] = c_kv | k_r, normalised and rotated in place, then appended to the caches.
  float* kv = Grow(s.kv, T * d_l);
  Matmul(x, T, w.kv_a_proj_with_mqa, kv);
  RmsNorm(kv, d_l, w.kv_a_layernorm.data(), T, d_c, eps, kv, d_l);
  int64_t* positions = Grow(s.positions, T);
  std::vector<int64_t>& latent_rows = s.latent_rows;
  std::vector<const SequenceSpan*>& latent_spans = s.latent_spans;
  latent_rows.clear();
  latent_spans.clear();
  int64_t row = 0;
  for (const SequenceSpan& span : spans) {
    const int64_t first_latent = FirstLatentPosition(span);
    for (int64_t i = 0; i < span.count; ++i, ++row) {
      positions[row] = span.start + i;
      rope_.ApplyOne(kv + row * d_l + d_c, positions[row]);
      cache.Write(layer, span.block_table, positions[row], kv + row * d_l);  // rounded to the cache dtype once
      if (positions[row] >= first_latent) {
        latent_rows.push_back(row);
        latent_spans.push_back(&span);
      }
    }
  }

  if (!latent_rows.empty()) LatentPath(w, layer, c_q, latent_rows, latent_spans, cache, out, s);
  // The prefill rows of each span, [start, first latent position): their attention
  // sees keys up to their own positions only, so the rows written after them this step
  // are masked out.
  row = 0;
  for (const SequenceSpan& span : spans) {
    SequenceSpan prefill = span;
    prefill.count = FirstLatentPosition(span) - span.start;
    if (prefill.count > 0) DecompressPath(w, layer, c_q + row * d_in_, prefill, cache, out + row * d, s);
    row += span.count;
  }
}

void MlaLayer::LatentPath(const MlaWeights& w, int64_t layer, const float* c_q, const std::vector<int64_t>& rows,
                          const std::vector<const SequenceSpan*>& row_span, const KvCache& cache, float* out,
                          MlaScratch& s) const {
  const int64_t H = c_.num_attention_heads, d_n = c_.qk_nope_head_dim, d_r = c_.qk_rope_head_dim;
  const int64_t d_c = c_.kv_lora_rank, d_v = c_.v_head_dim, qk = c_.QkHeadDim(), d_l = c_.LatentDim();
  const int64_t d = c_.hidden_size;
  const int64_t R = static_cast<int64_t>(rows.size());

  // c_q of the latent rows: [R, d_in]
  float* cq = Grow(s.rows_in, R * d_in_);
  for (int64_t r = 0; r < R; ++r) std::memcpy(cq + r * d_in_, c_q + rows[r] * d_in_, d_in_ * sizeof(float));

  // query: [R, H, d_l] = q_lat | q_r per head
  float* query = Grow(s.query, R * H * d_l);
  if (mode_ == MlaMode::kAbsorbed) {
    float* q = Grow(s.q, R * H * qk);  // q: [R, H, d_n + d_r]
    Matmul(cq, R, w.q_b_proj, q);
    // q_lat,h = W_UK,hᵀ · q_n,h: read from q's d_n columns of head h, written to query's d_c.
    MatmulBatched(
        {.x = q, .x_stride = qk, .ldx = H * qk, .m = R, .w = w.w_uk_t, .y = query, .y_stride = d_l, .ldy = H * d_l});
    for (int64_t rh = 0; rh < R * H; ++rh) {
      std::memcpy(query + rh * d_l + d_c, q + rh * qk + d_n, d_r * sizeof(float));
    }
  } else {
    float* q_lat = Grow(s.q_lat, R * H * d_c);  // q_lat: [R, H, d_c]
    Matmul(cq, R, *w.w_q_uk, q_lat);
    for (int64_t rh = 0; rh < R * H; ++rh) {
      std::memcpy(query + rh * d_l, q_lat + rh * d_c, d_c * sizeof(float));
    }
    // q_r,h = q_b_rope,h · c_q, written to query's d_r columns of head h.
    MatmulBatched({.x = cq,
                   .x_stride = 0,
                   .ldx = d_in_,
                   .m = R,
                   .w = w.q_rope,
                   .y = query + d_c,
                   .y_stride = d_l,
                   .ldy = H * d_l});
  }
  // o_lat: [R, H, d_c]; each row attends to its sequence's rows [0, position].
  float* o_lat = Grow(s.o_lat, R * H * d_c);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t position = s.positions[rows[r]];
    rope_.ApplyAtPosition(query + r * H * d_l + d_c, d_l, H, position);  // q_r of every head
    SharedKeyAttentionParams p;
    p.q = query + r * H * d_l;
    p.rows = cache.Rows(layer, row_span[r]->block_table);
    p.out = o_lat + r * H * d_c;
    p.num_rows = position + 1;
    p.heads = H;
    p.row_dim = d_l;
    p.value_dim = d_c;
    p.scale = scale_;
    SharedKeyAttention(p);
  }

  // out rows: [R, d]
  float* result = Grow(s.rows_out, R * d);
  if (mode_ == MlaMode::kAbsorbed) {
    // o_h = W_UV,h · o_lat,h: read from o_lat's head h, written to o's: o: [R, H, d_v].
    float* o = Grow(s.o, R * H * d_v);
    MatmulBatched(
        {.x = o_lat, .x_stride = d_c, .ldx = H * d_c, .m = R, .w = w.w_uv, .y = o, .y_stride = d_v, .ldy = H * d_v});
    Matmul(o, R, w.o_proj, result);
  } else {
    Matmul(o_lat, R, *w.w_uv_o, result);
  }
  for (int64_t r = 0; r < R; ++r) std::memcpy(out + rows[r] * d, result + r * d, d * sizeof(float));
}

void MlaLayer::DecompressPath(const MlaWeights& w, int64_t layer, const float* c_q, const SequenceSpan& span,
                              const KvCache& cache, float* out, MlaScratch& s) const {
  const int64_t H = c_.num_attention_heads, d_n = c_.qk_nope_head_dim;
  const int64_t d_v = c_.v_head_dim, qk = c_.QkHeadDim();
  const int64_t n = span.count, S = span.start + span.count;

  float* q = Grow(s.q, n * H * qk);  // q: [n, H, d_n + d_r]
  Matmul(c_q, n, w.q_b_proj, q);
  for (int64_t i = 0; i < n; ++i) rope_.ApplyAtPosition(q + i * H * qk + d_n, qk, H, span.start + i);

  // Decompress the cached tokens block by block — K/V: [block, H, ·] — and merge the
  // blocks' partial attention by log-sum-exp, so a 32k-token context needs 2k tokens
  // of decompressed K/V at a time, not all of them. Blocks inside the sequence's kept
  // prefix are read where they are kept (decompressing only the rows not kept yet).
  const int64_t block = std::min<int64_t>(S, settings_.decompress_block);
  DecompressedPrefix::Layer* kept = span.decompressed != nullptr
                                        ? span.decompressed->ForLayer(layer, c_.num_hidden_layers, H * qk, H * d_v)
                                        : nullptr;
  // Kept rows are the sequence's earlier chunks' (a span that starts before them is not
  // the prompt they were kept for).
  LATTE_CHECK(kept == nullptr || kept->rows <= span.start, "MlaLayer: ", kept ? kept->rows : 0,
              " decompressed rows kept for a span that starts at ", span.start);
  float* k = Grow(s.k, block * H * qk);   // k: [block, H, d_n + d_r], k_r shared by all heads
  float* v = Grow(s.v, block * H * d_v);  // v: [block, H, d_v]
  float* o = Grow(s.o, n * H * d_v);      // o: [n, H·d_v], the merged result so far
  float* lse = Grow(s.lse, n * H);
  float* part = Grow(s.o_part, n * H * d_v);
  float* part_lse = Grow(s.lse_part, n * H);
  // Keys [0, decompressed_end) are decompressed, the rest attended in latent form.
  const int64_t latent_from = mode_ == MlaMode::kNaive ? kAllKeysDecompressed : span.latent_keys_from;
  const int64_t decompressed_end = std::min(S, latent_from);
  if (decompressed_end == 0) {  // no decompressed keys: the latent ones are all there is
    std::fill(o, o + n * H * d_v, 0.0f);
    std::fill(lse, lse + n * H, -std::numeric_limits<float>::infinity());
  }
  for (int64_t k0 = 0; k0 < decompressed_end; k0 += block) {
    const int64_t count = std::min(block, decompressed_end - k0);
    const float* block_k = k;
    const float* block_v = v;
    if (kept != nullptr && k0 + count <= kept->capacity) {
      // The blocks before this one are kept whole, so kept->rows >= k0.
      if (kept->rows < k0 + count) {
        DecompressRows(w, layer, span, kept->rows, k0 + count - kept->rows, cache, kept->k + kept->rows * H * qk,
                       kept->v + kept->rows * H * d_v, s);
        kept->rows = k0 + count;
      }
      block_k = kept->k + k0 * H * qk;
      block_v = kept->v + k0 * H * d_v;
    } else {
      DecompressRows(w, layer, span, k0, count, cache, k, v, s);
    }
    CausalAttentionParams p;
    p.q = q;
    p.k = block_k;
    p.v = block_v;
    p.out = k0 == 0 ? o : part;
    p.lse = k0 == 0 ? lse : part_lse;
    p.num_queries = n;
    p.num_keys = count;
    p.first_position = span.start - k0;
    p.heads = H;
    p.key_dim = qk;
    p.value_dim = d_v;
    p.scale = scale_;
    CausalAttention(p);
    if (k0 > 0) {
      const float* outs[2] = {o, part};
      const float* lses[2] = {lse, part_lse};
      MergeAttentionPartials(outs, lses, 2, n * H, d_v, o, lse);
    }
  }
  if (decompressed_end < S) LatentKeys(w, layer, q, span, decompressed_end, cache, o, lse, s);
  Matmul(o, n, w.o_proj, out);
}

void MlaLayer::LatentKeys(const MlaWeights& w, int64_t layer, const float* q, const SequenceSpan& span, int64_t from,
                          const KvCache& cache, float* o, float* lse, MlaScratch& s) const {
  const int64_t H = c_.num_attention_heads, d_n = c_.qk_nope_head_dim, d_r = c_.qk_rope_head_dim;
  const int64_t d_c = c_.kv_lora_rank, d_v = c_.v_head_dim, qk = c_.QkHeadDim(), d_l = c_.LatentDim();
  // Rows before `from` see none of these keys.
  const int64_t first = std::max<int64_t>(0, from - span.start), R = span.count - first;
  if (R <= 0) return;
  PagedRows rows = cache.Rows(layer, span.block_table);
  LATTE_CHECK(from % rows.block_rows == 0, "MlaLayer: latent keys from ", from, ", inside a block of ",
              rows.block_rows);
  rows.block_table += from / rows.block_rows;

  // query: [R, H, d_l] = W_UK,hᵀ · q_n,h | q_r,h (q_r already rotated at its position).
  const float* q_rows = q + first * H * qk;
  float* query = Grow(s.query, R * H * d_l);
  MatmulBatched(
      {.x = q_rows, .x_stride = qk, .ldx = H * qk, .m = R, .w = w.w_uk_t, .y = query, .y_stride = d_l, .ldy = H * d_l});
  for (int64_t rh = 0; rh < R * H; ++rh) {
    std::memcpy(query + rh * d_l + d_c, q_rows + rh * qk + d_n, d_r * sizeof(float));
  }
  // o_lat: [R, H, d_c], lse_lat: [R, H]; row r sees the keys [from, its position].
  float* o_lat = Grow(s.o_lat, R * H * d_c);
  float* lse_lat = Grow(s.lse_lat, R * H);
  for (int64_t r = 0; r < R; ++r) {
    SharedKeyAttentionParams p;
    p.q = query + r * H * d_l;
    p.rows = rows;
    p.out = o_lat + r * H * d_c;
    p.lse = lse_lat + r * H;
    p.num_rows = span.start + first + r - from + 1;
    p.heads = H;
    p.row_dim = d_l;
    p.value_dim = d_c;
    p.scale = scale_;
    SharedKeyAttention(p);
  }
  // o_h = W_UV,h · o_lat,h: [R, H, d_v], merged with the decompressed keys' result.
  float* o_latent = Grow(s.o_part, R * H * d_v);
  MatmulBatched({.x = o_lat,
                 .x_stride = d_c,
                 .ldx = H * d_c,
                 .m = R,
                 .w = w.w_uv,
                 .y = o_latent,
                 .y_stride = d_v,
                 .ldy = H * d_v});
  const float* outs[2] = {o + first * H * d_v, o_latent};
  const float* lses[2] = {lse + first * H, lse_lat};
  MergeAttentionPartials(outs, lses, 2, R * H, d_v, o + first * H * d_v, lse + first * H);
}

void MlaLayer::DecompressRows(const MlaWeights& w, int64_t layer, const SequenceSpan& span, int64_t from, int64_t count,
                              const KvCache& cache, float* k, float* v, MlaScratch& s) const {
  const int64_t H = c_.num_attention_heads, d_n = c_.qk_nope_head_dim, d_r = c_.qk_rope_head_dim;
  const int64_t d_c = c_.kv_lora_rank, d_v = c_.v_head_dim, qk = c_.QkHeadDim(), d_l = c_.LatentDim();
  float* cache_rows = Grow(s.cache_rows, count * d_l);      // cache_rows: [count, d_l], widened to f32
  float* kv_dec = Grow(s.kv_dec, count * H * (d_n + d_v));  // kv_dec: [count, H, d_n + d_v]
  cache.ReadF32(layer, span.block_table, from, count, cache_rows);
  // kv_dec = kv_b · c_kv: the first d_c columns of each cached row.
  Matmul({.x = cache_rows, .m = count, .ldx = d_l, .w = w.kv_b_proj, .y = kv_dec, .ldy = H * (d_n + d_v)});
  for (int64_t t = 0; t < count; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float* src = kv_dec + (t * H + h) * (d_n + d_v);
      std::memcpy(k + (t * H + h) * qk, src, d_n * sizeof(float));
      std::memcpy(k + (t * H + h) * qk + d_n, cache_rows + t * d_l + d_c, d_r * sizeof(float));
      std::memcpy(v + (t * H + h) * d_v, src + d_n, d_v * sizeof(float));
    }
  }
}

}  // namespace latte
