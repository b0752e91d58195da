// The DeepSeek-V2/V3 block stack: embedding, L × (MLA + MLP/MoE), final norm, lm_head.
//   h = embed(tokens)
//   for each layer: h += attn(rmsnorm(h)); h += ffn(rmsnorm(h))
//   logits = lm_head · rmsnorm(h)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "dist/comm.h"
#include "dist/layout.h"
#include "model/kv_cache.h"
#include "model/mla.h"
#include "model/mlp.h"
#include "model/model_weights.h"
#include "model/moe.h"
#include "model/sequence_span.h"

namespace latte {

// Where a forward pass first produced a NaN or Inf in the residual stream: the output
// of `layer`'s `sublayer` (weights that overflow, or bad inputs upstream of it).
struct NonFiniteSite {
  enum Sublayer { kAttention, kMlp, kMoe };
  int64_t layer = 0;
  Sublayer sublayer = kAttention;
  const char* SublayerName() const;
};

// The ranks a model is split over (null: none; one process has neither).
//   tp: the ranks that hold the other shards of tensor-parallel weights
//     (ModelWeights::shard()); each Forward sums the partial attention and FFN outputs
//     over them and gathers the logits, so every rank returns the same logits. Every
//     rank of `tp` must call Forward with the same tokens and spans.
//   experts: under data-parallel attention, every rank: each replica runs Forward over
//     its own tokens (zero rows too: it still joins every MoE layer), and each MoE layer
//     sends its rows to the ranks' routed experts (`exchange`) and takes back the sums
//     of its rows' parts (the shared expert runs on the replica's own rows); without
//     `tp`, lm_head is split by vocabulary over them.
//   Both (--dp with --tp): `tp` is the replica's ranks, which hold the same rows after
//     each all-reduce; each sends its share of them to the experts, and the sums come
//     back to every rank of the replica in the all-reduce after the FFN.
struct ModelRanks {
  Comm* tp = nullptr;
  Comm* experts = nullptr;
  MoeExchange exchange = MoeExchange::kAllGather;  // all-to-all needs whole experts
};
// The ranks `layout` splits a model over: all of them `world`, this rank's replica
// `replica` (dist/runtime.h's ReplicaComm(layout.tp)).
ModelRanks RanksOf(const ParallelLayout& layout, Comm& world, Comm& replica);

class DeepSeekModel {
 public:
  // Attention runs in the mode the weights were prepared for (weights.mode()); `ranks`
  // must match how the weights were split (weights.shard()).
  explicit DeepSeekModel(const ModelWeights& weights, const MlaSettings& settings = {}, const ModelRanks& ranks = {});

  // A cache of its own for each of `sequences` sequences of up to `capacity` tokens
  // (tests, benchmarks and tools that run fixed sequences; the engine manages a shared
  // pool instead). Rows in `dtype` (kAuto: the weights' compute dtype).
  SequenceCaches NewCaches(int64_t sequences, int64_t capacity, KvCacheDtype dtype = KvCacheDtype::kAuto,
                           int64_t block_size = kDefaultKvBlockSize) const;

  // The layers a cache for this model holds: num_hidden_layers, and the MTP layer's
  // after them when it was loaded.
  int64_t CacheLayers() const;

  // tokens: the ids of every span, concatenated in span order ([T]). Each span's rows
  // go into `cache` through its block table; the caller keeps track of what is there
  // (span.start). logits: [rows, vocab] for the rows each span asks for, in span order.
  // final_hidden (optional): [T, d], every row after the final norm (the MTP layer's
  // input). Errors: spans that do not match the tokens, ids outside the vocabulary,
  // block tables that name blocks outside the cache or do not cover their span.
  Status Forward(std::span<const int32_t> tokens, std::span<const SequenceSpan> spans, KvCache& cache,
                 std::vector<float>& logits, std::vector<float>* final_hidden = nullptr);

  // The multi-token-prediction layer (model/model_weights.h's MtpWeights) over the same
  // positions as a Forward: row i of each span pairs previous_hidden [T, d] (the final
  // hidden row at that position: Forward's final_hidden, or this layer's own
  // draft_hidden when drafting further ahead) with next_tokens[i], the token after it.
  // Its latent rows go into the cache's layer num_hidden_layers. logits: [rows, vocab]
  // for the rows the spans ask for (the drafts of the token after next);
  // draft_hidden: [T, d] the layer's output before shared_head's norm. One process only.
  Status DraftForward(std::span<const int32_t> next_tokens, std::span<const float> previous_hidden,
                      std::span<const SequenceSpan> spans, KvCache& cache, std::vector<float>& logits,
                      std::vector<float>& draft_hidden);

  // An upper bound on the bytes of the buffers one forward pass of up to `max_tokens`
  // tokens with logits for up to `max_logit_rows` rows grows (every mode and path:
  // this model's scratch, the MLA and FFN scratch, and a per-thread allowance for the
  // kernels' own buffers), so a memory budget can set them aside up front.
  // `tp_ranks` > 1: the logits gather's two buffers too.
  // `dp_ranks` > 1: the MoE layers run every rank's tokens, and the exchange's buffers.
  static int64_t ScratchBytes(const ModelConfig& c, int64_t max_tokens, int64_t max_logit_rows, int64_t threads,
                              const MlaSettings& settings = {}, int tp_ranks = 1, int dp_ranks = 1);
  // The bytes the buffers this model grew so far hold (capacities), for checking
  // ScratchBytes.
  int64_t ScratchBytesInUse() const;

  // The last Forward's first non-finite sublayer output, over all of its tokens; none
  // when the residual stream stayed finite.
  const std::optional<NonFiniteSite>& first_non_finite() const { return first_non_finite_; }

  // --dist-check: under tensor parallelism, after every sublayer each rank hashes its
  // residual stream (replicated: it must hold the same bits on every rank) and the
  // hashes are compared; the first difference ends the job naming the layer.
  void set_dist_check(bool on) { dist_check_ = on; }

  const ModelConfig& config() const { return w_.config(); }
  const ModelWeights& weights() const { return w_; }

 private:
  const ModelWeights& w_;
  Comm* tp_;
  Comm* experts_;
  bool dist_check_ = false;
  MoeExchange moe_exchange_;
  // All-to-all: per destination rank the own rows sent and the counts; the packed rows.
  std::vector<std::vector<int64_t>> sent_rows_;
  std::vector<int64_t> send_counts_, recv_counts_, back_send_counts_, back_recv_counts_, route_ids_, recv_ids_;
  std::vector<float> send_rows_, recv_rows_, route_weights_, recv_weights_;
  std::vector<int64_t> rank_tokens_;           // data-parallel: every rank's MoE rows this Forward
  IndexRange moe_rows_;                        // data-parallel: this rank's share of its replica's rows
  std::vector<float> gathered_, moe_partial_;  // data-parallel: [Σ tokens, d] rows and expert sums
  MlaLayer mla_;
  MlaScratch mla_scratch_;
  FfnScratch ffn_scratch_;
  std::vector<float> hidden_, normed_, delta_, final_rows_;
  std::vector<float> joined_;                          // the MTP layer's [T, 2d] input
  std::vector<float> local_logits_, gathered_logits_;  // tensor parallel: [n, local vocab], every rank's
  std::vector<int64_t> logit_rows_;
  std::vector<float> kept_rows_;  // [n, d]: the logit rows of hidden_ before the last MLP / MoE
  std::optional<NonFiniteSite> first_non_finite_;

  // The checks of Forward's inputs, against a cache of at least `cache_layers` layers.
  Status CheckBatch(std::span<const int32_t> tokens, std::span<const SequenceSpan> spans, const KvCache& cache,
                    int64_t cache_layers) const;
  // One decoder layer over hidden_ [T, d] (its latent rows into cache layer `layer`):
  // the attention sublayer, then the MLP / MoE sublayer, each adding to hidden_.
  void RunLayer(const LayerWeights& lw, int64_t layer, std::span<const SequenceSpan> spans, KvCache& cache, int64_t T);
  void AttentionSublayer(const LayerWeights& lw, int64_t layer, std::span<const SequenceSpan> spans, KvCache& cache,
                         int64_t T);
  void FfnSublayer(const LayerWeights& lw, int64_t layer, int64_t T);
  // hidden_ rows `rows` (increasing) to rows 0 .. rows.size() - 1 of out [rows.size(), d]
  // (hidden_ itself, or another buffer); returns the count.
  int64_t GatherRows(const std::vector<int64_t>& rows, float* out);
  // logit_rows_: the rows the spans ask logits for, in order.
  void CollectLogitRows(std::span<const SequenceSpan> spans);
  // final_rows_: those rows of hidden_ (rows 0 .. n - 1 where the last layer kept them
  // alone), normed by `norm`.
  void NormLogitRows(const std::vector<float>& norm, bool kept);
  // hidden_ += delta_ over `count` values, noting the first non-finite sublayer output.
  void AddToResidual(int64_t count, int64_t layer, NonFiniteSite::Sublayer sublayer);
  // --dist-check after one sublayer (see set_dist_check).
  void CheckReplicated(int64_t count, int64_t layer, NonFiniteSite::Sublayer sublayer);
  // delta_ summed over the tensor-parallel ranks (their partial outputs of one sublayer).
  void SumPartials(int64_t count);
  // logits: [n, vocab] = lm_head · final_rows_, each rank's vocabulary rows gathered.
  void LmHead(int64_t n, std::vector<float>& logits);
  // The same under data-parallel attention, where each rank holds 1/P of lm_head and has
  // rows of its own: every rank's n rows are all-gathered, each rank computes its
  // vocabulary slice of all of them, and an all-to-all gives each rank its rows' slices.
  void DataParallelLmHead(int64_t n, std::vector<float>& logits);
  // delta_ [T, d] = the MoE of normed_ under data-parallel attention (see ModelRanks):
  // the routed experts of this rank's share moe_rows_, exchanged with every rank, plus
  // the shared expert (partial sums under tensor parallelism).
  void DataParallelMoe(const LayerWeights& lw, int64_t T);
  // The routed part by all-to-all: each of the T rows x [T, d] goes to the ranks holding
  // one of its experts, with its routing, and comes back as their sums (added in rank
  // order) in out [T, d].
  void AllToAllMoe(const LayerWeights& lw, const float* x, int64_t T, float* out);
  // delta_ += the shared expert over the replica's T rows (data-parallel attention).
  void AddSharedExpert(const LayerWeights& lw, int64_t T);
};

}  // namespace latte
