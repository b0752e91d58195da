#include "model/deepseek.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "base/check.h"
#include "base/scratch.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/weight_rows.h"

namespace latte {

ModelRanks RanksOf(const ParallelLayout& layout, Comm& world, Comm& replica) {
  return {layout.tp > 1 ? &replica : nullptr, layout.dp > 1 ? &world : nullptr, layout.moe_exchange};
}

DeepSeekModel::DeepSeekModel(const ModelWeights& weights, const MlaSettings& settings, const ModelRanks& ranks)
    : w_(weights),
      tp_(ranks.tp),
      experts_(ranks.experts != nullptr && ranks.experts->size() > 1 ? ranks.experts : nullptr),
      moe_exchange_(experts_ != nullptr ? ranks.exchange : MoeExchange::kAllGather),
      mla_(weights.shard_config(), weights.mode(), settings) {
  LATTE_CHECK(experts_ == nullptr || experts_->size() == weights.shard().expert_size, "DeepSeekModel: experts split ",
              weights.shard().expert_size, " ways over ", experts_->size(), " ranks");
  LATTE_CHECK((tp_ == nullptr ? 1 : tp_->size()) == weights.shard().size, "DeepSeekModel: weights split ",
              weights.shard().size, " ways over ", tp_ == nullptr ? 1 : tp_->size(), " ranks");
  LATTE_CHECK(moe_exchange_ == MoeExchange::kAllGather || weights.shard().whole_experts,
              "DeepSeekModel: the all-to-all MoE exchange needs whole experts on each rank");
}

int64_t DeepSeekModel::CacheLayers() const { return config().num_hidden_layers + (w_.mtp() ? 1 : 0); }

SequenceCaches DeepSeekModel::NewCaches(int64_t sequences, int64_t capacity, KvCacheDtype dtype,
                                        int64_t block_size) const {
  return SequenceCaches(CacheLayers(), config().LatentDim(), sequences, capacity, block_size,
                        ResolveKvCacheDtype(dtype, w_.compute_dtype()));
}

namespace {

// The kernels' own per-thread buffers: oneDNN's packing, the fp8 GEMM's 8 MiB chunks
// of dequantized rows (and x in bf16), PrefillAttention's score and Vᵀ blocks
// ((128 + d_v) × 2048 floats), the split-context attention states.
constexpr int64_t kKernelScratchPerThread = int64_t{32} << 20;

template <typename T> int64_t CapacityBytes(const std::vector<T>& v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}

}  // namespace

int64_t DeepSeekModel::ScratchBytes(const ModelConfig& c, int64_t max_tokens, int64_t max_logit_rows, int64_t threads,
                                    const MlaSettings& settings, int tp_ranks, int dp_ranks) {
  const int64_t T = max_tokens, d = c.hidden_size, H = c.num_attention_heads;
  const int64_t d_in = c.q_lora_rank ? *c.q_lora_rank : d, d_c = c.kv_lora_rank, d_l = c.LatentDim();
  const int64_t qk = c.QkHeadDim(), d_v = c.v_head_dim, d_n = c.qk_nope_head_dim;
  const int64_t B = settings.decompress_block;
  // Grow() may reserve half again over the size asked for.
  const auto grown = [](int64_t floats) { return floats + floats / 2; };
  // hidden, normed, delta; final rows, the logit rows kept beside final_hidden, logits
  int64_t floats = 3 * T * d + max_logit_rows * (2 * d + c.vocab_size);
  if (tp_ranks > 1) floats += 2 * max_logit_rows * c.vocab_size;  // local and gathered logits
  // MLA: c_q, kv, rows_in, q, q_lat, query, o_lat, o, rows_out; the decompress blocks; lse / o_part.
  floats += grown(T * d_in) + grown(T * d_l) + grown(T * d_in) + grown(T * H * qk) + grown(T * H * d_c) +
            grown(T * H * d_l) + grown(T * H * d_c) + grown(T * H * d_v) + grown(T * d);
  floats += grown(B * d_l) + grown(B * H * (d_n + d_v)) + grown(B * H * qk) + grown(B * H * d_v);
  floats += grown(2 * T * H) + grown(T * H * d_v);
  // FFN: the larger of a dense MLP's gate/up and a MoE step's router, routes, rows and gate/up.
  const int64_t k = c.num_experts_per_tok;
  const int64_t all = T * dp_ranks;  // the rows a MoE layer runs
  const int64_t moe_hidden = all * (k + c.n_shared_experts) * c.moe_intermediate_size;
  const int64_t moe = c.n_routed_experts > 0 ? grown(all * c.n_routed_experts) + 4 * all * k + 2 * grown(all * k * d) +
                                                   2 * grown(moe_hidden)
                                             : 0;
  if (dp_ranks > 1) {
    floats += 2 * grown(all * d);  // gathered rows, expert sums
    // lm_head: every rank's final rows, this rank's slice of their logits, its rows' logits.
    floats += max_logit_rows * (dp_ranks * d + 2 * (c.vocab_size + dp_ranks * 128));
  }
  floats += std::max(2 * grown(T * c.intermediate_size), moe);
  const int64_t index_bytes = 8 * (grown(T) * 2 + T * k);  // positions, latent rows, expert rows
  return floats * static_cast<int64_t>(sizeof(float)) + index_bytes + threads * kKernelScratchPerThread;
}

int64_t DeepSeekModel::ScratchBytesInUse() const {
  const MlaScratch& m = mla_scratch_;
  const FfnScratch& f = ffn_scratch_;
  int64_t bytes = CapacityBytes(hidden_) + CapacityBytes(joined_) + CapacityBytes(normed_) + CapacityBytes(delta_) +
                  CapacityBytes(final_rows_) + CapacityBytes(kept_rows_) + CapacityBytes(logit_rows_) +
                  CapacityBytes(local_logits_) + CapacityBytes(gathered_logits_) + CapacityBytes(gathered_) +
                  CapacityBytes(moe_partial_) + CapacityBytes(rank_tokens_);
  for (const std::vector<float>* v :
       {&m.c_q,      &m.kv,         &m.rows_in, &m.q,        &m.q_lat,  &m.query,        &m.o_lat,  &m.o,
        &m.rows_out, &m.cache_rows, &m.kv_dec,  &m.k,        &m.v,      &m.lse,          &m.o_part, &m.lse_part,
        &f.gate,     &f.up,         &f.rows_in, &f.rows_out, &f.logits, &f.route_weights}) {
    bytes += CapacityBytes(*v);
  }
  bytes += CapacityBytes(m.positions) + CapacityBytes(m.latent_rows) + CapacityBytes(f.route_ids);
  for (const auto& rows : f.expert_rows) bytes += CapacityBytes(rows);
  for (const auto& w : f.expert_weights) bytes += CapacityBytes(w);
  return bytes;
}

void DeepSeekModel::AddToResidual(int64_t count, int64_t layer, NonFiniteSite::Sublayer sublayer) {
  // NaN and Inf are the floats whose exponent bits are all ones. An integer OR over the
  // same pass vectorizes (a float sum would not, its order being fixed), and finds the
  // first sublayer whose output overflowed for about one more instruction per element.
  constexpr uint32_t kExponent = 0x7f800000u;
  uint32_t non_finite = 0;
  for (int64_t i = 0; i < count; ++i) {
    hidden_[i] += delta_[i];
    non_finite |= static_cast<uint32_t>((std::bit_cast<uint32_t>(hidden_[i]) & kExponent) == kExponent);
  }
  if (non_finite != 0 && !first_non_finite_) first_non_finite_ = NonFiniteSite{layer, sublayer};
}

const char* NonFiniteSite::SublayerName() const {
  switch (sublayer) {
    case kAttention: return "attention";
    case kMlp: return "dense MLP";
    case kMoe: return "MoE";
  }
  return "?";
}

Status DeepSeekModel::CheckBatch(std::span<const int32_t> tokens, std::span<const SequenceSpan> spans,
                                 const KvCache& cache, int64_t cache_layers) const {
  const ModelConfig& c = config();
  if (cache.layers() < cache_layers) {
    return Status::InvalidArgument("the cache holds " + std::to_string(cache.layers()) + " layers, the pass needs " +
                                   std::to_string(cache_layers));
  }
  int64_t T = 0;
  for (const SequenceSpan& span : spans) {
    if (span.count <= 0 || span.start < 0) return Status::InvalidArgument("empty sequence span");
    if (span.start + span.count > static_cast<int64_t>(span.block_table.size()) * cache.block_size()) {
      return Status::InvalidArgument("a span ending at position " + std::to_string(span.start + span.count) +
                                     " has only " + std::to_string(span.block_table.size()) + " blocks of " +
                                     std::to_string(cache.block_size()));
    }
    for (int32_t block : span.block_table) {
      if (block < 0 || block >= cache.num_blocks()) {
        return Status::InvalidArgument("block " + std::to_string(block) + " is outside the cache's " +
                                       std::to_string(cache.num_blocks()) + " blocks");
      }
    }
    T += span.count;
  }
  if (T != static_cast<int64_t>(tokens.size())) return Status::InvalidArgument("token count does not match the spans");
  for (int32_t id : tokens) {
    if (id < 0 || id >= c.vocab_size) {
      return Status::InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                     std::to_string(c.vocab_size) + ")");
    }
  }
  return Status::Ok();
}

void DeepSeekModel::RunLayer(const LayerWeights& lw, int64_t layer, std::span<const SequenceSpan> spans, KvCache& cache,
                             int64_t T) {
  AttentionSublayer(lw, layer, spans, cache, T);
  FfnSublayer(lw, layer, T);
}

void DeepSeekModel::AttentionSublayer(const LayerWeights& lw, int64_t layer, std::span<const SequenceSpan> spans,
                                      KvCache& cache, int64_t T) {
  if (T == 0) return;
  const ModelConfig& c = config();
  const int64_t d = c.hidden_size;
  RmsNorm(hidden_.data(), lw.input_layernorm.data(), T, d, static_cast<float>(c.rms_norm_eps), normed_.data());
  mla_.Forward(lw.attn, layer, normed_.data(), spans, cache, delta_.data(), mla_scratch_);
  SumPartials(T * d);
  AddToResidual(T * d, layer, NonFiniteSite::kAttention);
  CheckReplicated(T * d, layer, NonFiniteSite::kAttention);
}

void DeepSeekModel::FfnSublayer(const LayerWeights& lw, int64_t layer, int64_t T) {
  const ModelConfig& c = config();
  const int64_t d = c.hidden_size;
  if (T > 0) {
    RmsNorm(hidden_.data(), lw.post_attention_layernorm.data(), T, d, static_cast<float>(c.rms_norm_eps),
            normed_.data());
  }
  if (lw.is_moe && experts_ != nullptr) {
    DataParallelMoe(lw, T);  // joins the exchanges with no rows too
  } else if (T == 0) {
    return;
  } else if (lw.is_moe) {
    MoeForward(c, lw.moe, normed_.data(), T, delta_.data(), ffn_scratch_);
  } else {
    MlpForward(lw.mlp, normed_.data(), T, delta_.data(), ffn_scratch_);
  }
  if (T == 0) return;
  SumPartials(T * d);
  AddToResidual(T * d, layer, lw.is_moe ? NonFiniteSite::kMoe : NonFiniteSite::kMlp);
  CheckReplicated(T * d, layer, lw.is_moe ? NonFiniteSite::kMoe : NonFiniteSite::kMlp);
}

int64_t DeepSeekModel::GatherRows(const std::vector<int64_t>& rows, float* out) {
  const int64_t d = config().hidden_size, n = static_cast<int64_t>(rows.size());
  // rows[i] >= i (increasing): with out = hidden_, moving them in order reads no row
  // already overwritten.
  for (int64_t i = 0; i < n; ++i) {
    const float* row = hidden_.data() + rows[i] * d;
    if (row != out + i * d) std::memcpy(out + i * d, row, d * sizeof(float));
  }
  return n;
}

void DeepSeekModel::CollectLogitRows(std::span<const SequenceSpan> spans) {
  std::vector<int64_t>& rows = logit_rows_;
  rows.clear();
  int64_t first = 0;
  for (const SequenceSpan& span : spans) {
    if (span.logits == SpanLogits::kAll) {
      for (int64_t t = first; t < first + span.count; ++t) rows.push_back(t);
    } else if (span.logits == SpanLogits::kLast) {
      rows.push_back(first + span.count - 1);
    }
    first += span.count;
  }
}

void DeepSeekModel::NormLogitRows(const std::vector<float>& norm, bool kept) {
  const int64_t d = config().hidden_size;
  const float eps = static_cast<float>(config().rms_norm_eps);
  const int64_t n = static_cast<int64_t>(logit_rows_.size());
  final_rows_.resize(n * d);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = kept ? i : logit_rows_[i];
    RmsNorm(hidden_.data() + row * d, norm.data(), 1, d, eps, final_rows_.data() + i * d);
  }
}

Status DeepSeekModel::Forward(std::span<const int32_t> tokens, std::span<const SequenceSpan> spans, KvCache& cache,
                              std::vector<float>& logits, std::vector<float>* final_hidden) {
  const ModelConfig& c = config();
  const int64_t d = c.hidden_size;
  LATTE_RETURN_IF_ERROR(CheckBatch(tokens, spans, cache, c.num_hidden_layers));
  const int64_t T = static_cast<int64_t>(tokens.size());

  first_non_finite_.reset();
  // hidden: [T, d], the residual stream.
  hidden_.resize(T * d);
  normed_.resize(T * d);
  delta_.resize(T * d);
  const WeightView& embed = w_.embed_tokens();
  for (int64_t t = 0; t < T; ++t) WeightRowToF32(embed, tokens[t], hidden_.data() + t * d);

  // Data-parallel attention: every rank's MoE rows, the exchanges' sizes (a rank with
  // none still joins every MoE layer's exchange). With tensor parallelism inside each
  // replica its ranks hold the same T rows, and each sends only its share of them.
  if (experts_ != nullptr) {
    const int64_t P = tp_ != nullptr ? tp_->size() : 1, r = tp_ != nullptr ? tp_->rank() : 0;
    moe_rows_ = {T * r / P, T * (r + 1) / P - T * r / P};
    rank_tokens_.resize(experts_->size());
    experts_->AllGatherBytes(&moe_rows_.count, sizeof moe_rows_.count, rank_tokens_.data());
  }
  CollectLogitRows(spans);
  const int64_t L = c.num_hidden_layers;
  for (int64_t layer = 0; layer + 1 < L; ++layer) RunLayer(w_.layers()[layer], layer, spans, cache, T);
  // The last layer's output is read only by the final norm of the logit rows (and by
  // final_hidden), so past its attention, which every row runs for the cache, its MLP /
  // MoE runs on the logit rows alone, as llama.cpp's graph does: a prompt's last MoE for
  // one row instead of all of them. Not under data-parallel attention, whose MoE
  // exchanges were sized for every row above, nor where every row wants logits (decode
  // and verify steps: the logit rows are rows 0 .. T - 1 already).
  const LayerWeights& last = w_.layers()[L - 1];
  AttentionSublayer(last, L - 1, spans, cache, T);
  const int64_t n = static_cast<int64_t>(logit_rows_.size());
  const bool keep_logit_rows = experts_ == nullptr && n < T;
  if (final_hidden != nullptr) {
    // The MTP layer reads every row: the last MLP / MoE over all of them for it, and the
    // logit rows' own pass below, so that their logits are the bits of a Forward without
    // final_hidden (speculative decoding changes no logprob).
    if (keep_logit_rows) {
      kept_rows_.resize(n * d);
      GatherRows(logit_rows_, kept_rows_.data());
    }
    FfnSublayer(last, L - 1, T);
    // final_hidden: [T, d], every row after the final norm.
    final_hidden->resize(T * d);
    RmsNorm(hidden_.data(), w_.final_norm().data(), T, d, static_cast<float>(c.rms_norm_eps), final_hidden->data());
    if (keep_logit_rows) {
      std::copy(kept_rows_.begin(), kept_rows_.end(), hidden_.begin());
      FfnSublayer(last, L - 1, n);
    }
  } else {
    FfnSublayer(last, L - 1, keep_logit_rows ? GatherRows(logit_rows_, hidden_.data()) : T);
  }
  // Final norm and lm_head on the rows that need logits.
  NormLogitRows(w_.final_norm(), keep_logit_rows);
  LmHead(static_cast<int64_t>(logit_rows_.size()), logits);
  return Status::Ok();
}

Status DeepSeekModel::DraftForward(std::span<const int32_t> next_tokens, std::span<const float> previous_hidden,
                                   std::span<const SequenceSpan> spans, KvCache& cache, std::vector<float>& logits,
                                   std::vector<float>& draft_hidden) {
  if (!w_.mtp()) return Status::FailedPrecondition("the model was loaded without its multi-token-prediction layer");
  if (tp_ != nullptr || experts_ != nullptr) {
    return Status::FailedPrecondition("the multi-token-prediction layer runs in one process only");
  }
  const ModelConfig& c = config();
  const MtpWeights& mtp = *w_.mtp();
  const int64_t d = c.hidden_size, L = c.num_hidden_layers;
  const float eps = static_cast<float>(c.rms_norm_eps);
  LATTE_RETURN_IF_ERROR(CheckBatch(next_tokens, spans, cache, L + 1));
  const int64_t T = static_cast<int64_t>(next_tokens.size());
  if (static_cast<int64_t>(previous_hidden.size()) != T * d) {
    return Status::InvalidArgument("previous hidden rows do not match the tokens");
  }

  first_non_finite_.reset();
  // joined: [T, 2d] = [enorm(embed(t_{i+1})); hnorm(h_i)], the embedding half zero at position 0.
  joined_.resize(T * 2 * d);
  hidden_.resize(T * d);
  normed_.resize(T * d);
  delta_.resize(T * d);
  int64_t t = 0;
  for (const SequenceSpan& span : spans) {
    for (int64_t i = 0; i < span.count; ++i, ++t) {
      float* row = joined_.data() + t * 2 * d;
      if (span.start + i == 0) {
        std::fill(row, row + d, 0.0f);
      } else {
        WeightRowToF32(mtp.embed_tokens, next_tokens[t], hidden_.data() + t * d);
        RmsNorm(hidden_.data() + t * d, mtp.enorm.data(), 1, d, eps, row);
      }
      RmsNorm(previous_hidden.data() + t * d, mtp.hnorm.data(), 1, d, eps, row + d);
    }
  }
  // hidden: [T, d] = eh_proj · joined, then the MTP decoder layer (cache layer L).
  if (T > 0) Matmul(joined_.data(), T, mtp.eh_proj, hidden_.data());
  RunLayer(mtp.block, L, spans, cache, T);
  draft_hidden.assign(hidden_.begin(), hidden_.begin() + T * d);
  CollectLogitRows(spans);
  NormLogitRows(mtp.head_norm, /*kept=*/false);
  const int64_t n = static_cast<int64_t>(logit_rows_.size());
  logits.resize(n * c.vocab_size);
  if (n > 0) Matmul(final_rows_.data(), n, mtp.head, logits.data());
  return Status::Ok();
}

void DeepSeekModel::CheckReplicated(int64_t count, int64_t layer, NonFiniteSite::Sublayer sublayer) {
  if (!dist_check_ || tp_ == nullptr || tp_->size() == 1) return;
  uint64_t hash = 14695981039346656037ull;  // FNV-1a over the floats' bits
  for (int64_t i = 0; i < count; ++i) {
    hash = (hash ^ std::bit_cast<uint32_t>(hidden_[i])) * 1099511628211ull;
  }
  std::vector<uint64_t> every(tp_->size());
  tp_->AllGatherBytes(&hash, sizeof hash, every.data());
  for (size_t r = 1; r < every.size(); ++r) {
    if (every[r] == every[0]) continue;
    NonFiniteSite site{layer, sublayer};
    tp_->Abort("--dist-check: after layer " + std::to_string(layer) + "'s " + site.SublayerName() +
               " the residual stream differs between rank 0 and rank " + std::to_string(r));
  }
}

void DeepSeekModel::SumPartials(int64_t count) {
  if (tp_ != nullptr && tp_->size() > 1) tp_->AllReduceSum(delta_.data(), count);
}

void DeepSeekModel::AllToAllMoe(const LayerWeights& lw, const float* x, int64_t T, float* out) {
  const ModelConfig& c = config();
  const int64_t d = c.hidden_size, k = c.num_experts_per_tok, P = experts_->size();
  const int64_t per_rank = c.n_routed_experts / P, width = d + 2 * k;  // a row: x | ids | weights
  route_ids_.resize(std::max<int64_t>(1, T * k));
  route_weights_.resize(std::max<int64_t>(1, T * k));
  if (T > 0) RouteRows(c, lw.moe, x, T, route_ids_.data(), route_weights_.data(), ffn_scratch_);
  // The own rows each rank gets: those with at least one expert there, in row order.
  sent_rows_.assign(P, {});
  // A row's experts are listed once each, so a rank is its destination at its first expert there.
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t q = 0; q < P; ++q) {
      for (int64_t i = 0; i < k; ++i) {
        if (route_ids_[t * k + i] / per_rank == q) {
          sent_rows_[q].push_back(t);
          break;
        }
      }
    }
  }
  send_counts_.assign(P, 0);
  int64_t sent = 0;
  for (int64_t q = 0; q < P; ++q) sent += static_cast<int64_t>(sent_rows_[q].size());
  send_rows_.resize(std::max<int64_t>(1, sent * width));
  float* packed = send_rows_.data();
  for (int64_t q = 0; q < P; ++q) {
    send_counts_[q] = static_cast<int64_t>(sent_rows_[q].size()) * width;
    for (int64_t t : sent_rows_[q]) {
      std::memcpy(packed, x + t * d, d * sizeof(float));
      for (int64_t i = 0; i < k; ++i) {
        packed[d + i] = static_cast<float>(route_ids_[t * k + i]);  // exact: ids < 2^24
        packed[d + k + i] = route_weights_[t * k + i];
      }
      packed += width;
    }
  }
  recv_counts_.assign(P, 0);
  experts_->AllToAllCounts(send_counts_, recv_counts_);
  int64_t received = 0;
  for (int64_t q = 0; q < P; ++q) received += recv_counts_[q] / width;
  recv_rows_.resize(std::max<int64_t>(1, received * width));
  experts_->AllToAllV(send_rows_.data(), send_counts_, recv_rows_.data(), recv_counts_);
  // The received rows unpacked (x into gathered_, routing beside), run through this
  // rank's experts into moe_partial_.
  gathered_.resize(std::max<int64_t>(1, received * d));
  moe_partial_.resize(std::max<int64_t>(1, std::max(received, sent) * d));
  int64_t* ids = Grow(recv_ids_, received * k);
  float* weights = Grow(recv_weights_, received * k);
  for (int64_t r = 0; r < received; ++r) {
    const float* row = recv_rows_.data() + r * width;
    std::memcpy(gathered_.data() + r * d, row, d * sizeof(float));
    for (int64_t i = 0; i < k; ++i) {
      ids[r * k + i] = static_cast<int64_t>(row[d + i]);
      weights[r * k + i] = row[d + k + i];
    }
  }
  if (received > 0) {
    MoeExperts(c, lw.moe, gathered_.data(), received, ids, weights, moe_partial_.data(), ffn_scratch_,
               /*with_shared=*/false);
  }
  // The sums go back the way the rows came; each rank adds its rows' parts in rank order.
  back_send_counts_.resize(P);
  back_recv_counts_.resize(P);
  for (int64_t q = 0; q < P; ++q) {
    back_send_counts_[q] = recv_counts_[q] / width * d;
    back_recv_counts_[q] = send_counts_[q] / width * d;
  }
  recv_rows_.resize(std::max<int64_t>(1, sent * d));
  experts_->AllToAllV(moe_partial_.data(), back_send_counts_, recv_rows_.data(), back_recv_counts_);
  std::fill(out, out + T * d, 0.0f);
  const float* back = recv_rows_.data();
  for (int64_t q = 0; q < P; ++q) {
    for (int64_t t : sent_rows_[q]) {
      float* dst = out + t * d;
      for (int64_t j = 0; j < d; ++j) dst[j] += back[j];
      back += d;
    }
  }
}

void DeepSeekModel::DataParallelMoe(const LayerWeights& lw, int64_t T) {
  const ModelConfig& c = config();
  const int64_t d = c.hidden_size;
  // x, out: this rank's share of the T rows (all of them without tensor parallelism).
  const float* x = normed_.data() + moe_rows_.first * d;
  float* out = delta_.data() + moe_rows_.first * d;
  // Under tensor parallelism the other ranks' shares are zero here and their routed sums
  // arrive in SumPartials, with the shared expert's partial sums.
  if (tp_ != nullptr) std::fill(delta_.begin(), delta_.begin() + T * d, 0.0f);
  if (moe_exchange_ == MoeExchange::kAllToAll) {
    AllToAllMoe(lw, x, moe_rows_.count, out);
  } else {
    std::vector<int64_t> counts;
    int64_t all = 0;
    for (int64_t t : rank_tokens_) {
      counts.push_back(t * d);
      all += t;
    }
    // gathered: [all, d], rank 0's rows first; moe_partial: this rank's experts' part of each.
    gathered_.resize(std::max<int64_t>(1, all * d));
    moe_partial_.resize(std::max<int64_t>(1, all * d));
    experts_->AllGatherV(x, counts, gathered_.data());
    if (all > 0) {
      MoeForward(c, lw.moe, gathered_.data(), all, moe_partial_.data(), ffn_scratch_, /*with_shared=*/false);
    }
    experts_->ReduceScatterV(moe_partial_.data(), counts, out);
  }
  AddSharedExpert(lw, T);
}

void DeepSeekModel::AddSharedExpert(const LayerWeights& lw, int64_t T) {
  if (!lw.moe.shared || T == 0) return;
  // The shared expert (this rank's columns of it under tensor parallelism) over the
  // replica's rows, added to the routed sums.
  const int64_t d = config().hidden_size;
  float* shared = Grow(ffn_scratch_.rows_out, T * d);
  MlpForward(*lw.moe.shared, normed_.data(), T, shared, ffn_scratch_);
  for (int64_t i = 0; i < T * d; ++i) delta_[i] += shared[i];
}

void DeepSeekModel::DataParallelLmHead(int64_t n, std::vector<float>& logits) {
  const int64_t V = config().vocab_size, d = config().hidden_size;
  const int P = experts_->size(), me = experts_->rank();
  std::vector<int64_t> rows(P);
  experts_->AllGatherBytes(&n, sizeof n, rows.data());
  std::vector<int64_t> row_counts(P), send_counts(P), recv_counts(P);
  const std::vector<IndexRange>& vocab = w_.vocab_ranges();
  const int64_t local = vocab[me].count;
  int64_t all = 0;
  for (int q = 0; q < P; ++q) {
    row_counts[q] = rows[q] * d;
    send_counts[q] = rows[q] * local;  // [rows of q, this rank's vocabulary]
    recv_counts[q] = n * vocab[q].count;
    all += rows[q];
  }
  if (all == 0) return;
  // gathered: [all, d], every rank's final rows in rank order; local_logits: [all, V_me].
  gathered_.resize(std::max<int64_t>(1, all * d));
  experts_->AllGatherV(final_rows_.data(), row_counts, gathered_.data());
  local_logits_.resize(std::max<int64_t>(1, all * local));
  if (local > 0) Matmul(gathered_.data(), all, w_.lm_head(), local_logits_.data());
  gathered_logits_.resize(std::max<int64_t>(1, n * V));
  experts_->AllToAllV(local_logits_.data(), send_counts, gathered_logits_.data(), recv_counts);
  const float* block = gathered_logits_.data();  // rank q's slice of this rank's rows: [n, V_q]
  for (int q = 0; q < P; ++q) {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(logits.data() + i * V + vocab[q].first, block + i * vocab[q].count, vocab[q].count * sizeof(float));
    }
    block += n * vocab[q].count;
  }
}

void DeepSeekModel::LmHead(int64_t n, std::vector<float>& logits) {
  const int64_t V = config().vocab_size;
  logits.resize(n * V);
  if (experts_ != nullptr && tp_ == nullptr) {  // with tensor parallelism: split over the replica
    DataParallelLmHead(n, logits);
    return;
  }
  if (tp_ == nullptr || tp_->size() == 1) {
    if (n > 0) Matmul(final_rows_.data(), n, w_.lm_head(), logits.data());
    return;
  }
  if (n == 0) return;
  // local: [n, V_r] for this rank's rows of the vocabulary; gathered: rank by rank.
  const std::vector<IndexRange>& ranges = w_.vocab_ranges();
  const int64_t local = w_.lm_head().rows;
  local_logits_.resize(std::max<int64_t>(1, n * local));
  if (local > 0) Matmul(final_rows_.data(), n, w_.lm_head(), local_logits_.data());
  std::vector<int64_t> counts;
  for (const IndexRange& r : ranges) counts.push_back(n * r.count);
  gathered_logits_.resize(n * V);
  tp_->AllGatherV(local_logits_.data(), counts, gathered_logits_.data());
  const float* block = gathered_logits_.data();
  for (const IndexRange& r : ranges) {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(logits.data() + i * V + r.first, block + i * r.count, r.count * sizeof(float));
    }
    block += n * r.count;
  }
}

}  // namespace latte
