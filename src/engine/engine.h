// The serving engine: many requests at once over one paged latent KV cache.
//
// Clients Submit() requests from any thread and read their outputs from a
// RequestStream; one engine thread owns the model, the cache and the scheduler (no
// locks inside a step) and runs step after step while there is work. A step's phases:
//   take the inbox (new requests and aborts) → schedule (engine/scheduler.h: decodes,
//   then prefill chunks, preempting when the pool is full) → forward (one pass over
//   every scheduled chunk: weights read once for the batch) → sample (each sequence
//   that reached its last token, with its own Sampler: seed, penalties, logprobs) →
//   emit (stop checks, streaming detokenization, outputs pushed to the streams).
// A request with n > 1 runs n sequences; the followers wait for the first one's
// prompt rows and take its full blocks from the prefix cache.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "dist/comm.h"
#include "engine/block_pool.h"
#include "engine/kv_cache_manager.h"
#include "engine/output_constraints.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/step_control.h"
#include "engine/stop_matcher.h"
#include "model/decompressed_prefix.h"
#include "model/deepseek.h"
#include "model/kv_cache.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace latte {

// A request's state on the engine thread: its parameters, stream and choices
// (engine/engine.cc).
struct RequestState;

struct EngineOptions {
  SchedulerConfig scheduler;
  int64_t block_size = 64;  // tokens per KV block (FlashMLA's)
  int64_t num_blocks = 0;   // the pool, sized by the caller (engine/memory_plan.h)
  bool prefix_caching = true;
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
  // The decompressed K/V kept across one prompt's prefill chunks (engine/memory_plan.h
  // sizes it); 0: none.
  int64_t decompressed_prefix_bytes = 0;
  // Speculative decoding with the model's MTP layer (--speculative mtp): each decoding
  // sequence's next step runs this many drafted tokens after its last one, and keeps
  // those the model itself would have produced (0: off; needs the MTP layer loaded).
  int64_t num_speculative_tokens = 0;
};

// One rank's load in a data-parallel group, as it reported it after its last step.
struct RankLoad {
  int rank = 0;  // the replica's first rank in the job
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  double collective_seconds = 0;  // inside collectives so far
  double step_seconds = 0;        // inside engine steps so far
  int64_t requests_assigned = 0;  // requests rank 0 gave it
};

// A snapshot of the engine's counters (the server's /metrics).
struct EngineStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;    // referenced by some sequence
  int64_t kv_blocks_cached = 0;  // free but holding a reusable prefix
  int64_t block_size = 0;
  int64_t prefix_queries = 0;  // prompt tokens looked up
  int64_t prefix_hits = 0;     // of those, taken from the cache
  int64_t preemptions = 0;
  // Prompts that took the decompressed-prefix store over (it was cleared for them).
  int64_t decompressed_prefix_starts = 0;
  int64_t prompt_tokens = 0;  // computed prompt tokens (cache hits excluded)
  int64_t generation_tokens = 0;
  int64_t steps = 0;
  int64_t requests_finished = 0;
  double model_seconds = 0;       // inside the forward passes
  double step_seconds = 0;        // whole steps (scheduling, forward, sampling, outputs)
  double collective_seconds = 0;  // of those, inside collectives (a job of several ranks)
  // Speculative decoding: verify steps of sequences with drafts, the drafted tokens,
  // those accepted, and accepted by draft position (vLLM's spec_decode_* counters).
  int64_t spec_drafts = 0;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_position;
  // A data-parallel group's replicas, rank 0's first; running, waiting and the KV
  // blocks above are their sums.
  std::vector<RankLoad> ranks;
};

// The attention pairs a prompt chunk is capped at by default (SchedulerConfig::
// auto_prefill_attention_pairs): those whose arithmetic takes about twice as long as
// reading the weights a prefill step streams.
int64_t PrefillAttentionPairsFor(const DeepSeekModel& model);

// What a prefill query-key pair with its key in latent form costs against a
// decompressed one (SchedulerConfig::latent_key_pair_cost), for KV rows of `rows`: the
// arithmetic of each, (d_l + d_c) against d_qk + d_v per head, over the rates of the
// kernels that run them on this CPU. 0 for the naive mode, which has no latent form.
double LatentKeyPairCostFor(const DeepSeekModel& model, DType rows);

class Engine {
 public:
  // `model` and `tokenizer` must outlive the engine; tokenizer may be null (then no
  // text, no stop strings, and EOS from config.json).
  // `group`: every rank `model` is split over (the job's world). Rank 0
  // leads: clients submit to it, and each of its steps starts by broadcasting the new
  // requests and aborts (engine/step_control.h); every other rank runs the same
  // scheduler over the same requests in lockstep and drops its outputs. Null: one process.
  // `replicas` > 1: data-parallel attention, the group's ranks split into that many
  // replicas of consecutive ranks (one rank each, or a tensor-parallel group each), and
  // each replica runs requests of its own: rank 0 assigns each new request to the least
  // loaded replica, every step every rank reports its tokens and load (all-gathered; a
  // forward runs on every rank when any has tokens, since its MoE layers are
  // collective), and each replica's first rank sends its outputs to rank 0, which
  // streams them to the clients.
  Engine(DeepSeekModel& model, const Tokenizer* tokenizer, const EngineOptions& options, Comm* group = nullptr,
         int replicas = 1);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Backs the whole KV pool with memory now (before Start): a pool the machine cannot
  // hold fails at start, not under traffic (KvCache::CommitPages).
  void CommitKvPool() { cache_.CommitPages(); }
  // Runs the step loop on a thread of its own until Stop().
  void Start();
  // Finishes every request with FinishReason::kAbort (error `reason`) and joins the thread.
  // The leader tells the followers to stop too.
  void Stop(const std::string& reason = "the engine stopped");
  // A follower: waits until the leader stops the group.
  void WaitForLeaderToStop();
  bool leads() const { return group_ == nullptr || group_->rank() == 0; }

  // Validates the request (CheckRequest against limits(): one that can never fit,
  // prompt + max_tokens over the pool or the context length, is kOutOfRange) and
  // queues it; kUnavailable once the engine is stopping.
  Result<std::shared_ptr<RequestStream>> Submit(GenerationRequest request);
  // What a request may ask of this engine (engine/request.h).
  RequestLimits limits() const;
  // Ends the request at the next step with FinishReason::kAbort and frees its blocks.
  void Abort(int64_t request_id);

  // One step on the caller's thread (without Start()): takes queued requests and
  // aborts, runs the scheduled chunks. False when there was nothing to do.
  bool Step();

  EngineStats Stats() const;
  // Tokens the pool holds: num_blocks · block_size.
  int64_t pool_tokens() const { return options_.num_blocks * options_.block_size; }
  const EngineOptions& options() const { return options_; }
  // The scheduler's config as the engine completed it (the model-derived pair cap).
  const SchedulerConfig& scheduler_config() const { return scheduler_.config(); }
  const KvCache& kv_cache() const { return cache_; }

 private:
  void Loop();
  void FollowLoop();
  // The leader's side of the step broadcast (new requests and aborts, or the shutdown),
  // and the followers' (requests decoded into their own states).
  void SendControl(const std::vector<std::unique_ptr<RequestState>>& inbox, const std::vector<int32_t>& ranks,
                   const std::vector<int64_t>& aborts, bool shutdown);
  // Data-parallel: the rank each new request runs on (least running + waiting, then the
  // lowest rank), from the last step's loads.
  std::vector<int32_t> AssignRanks(const std::vector<std::unique_ptr<RequestState>>& inbox) const;
  // Data-parallel: every rank's tokens and load this step; true when any rank has tokens.
  bool ExchangeShapes(const std::vector<ScheduledChunk>& chunks);
  // Data-parallel: the step's outputs of every rank to rank 0, pushed to their streams.
  void ExchangeOutputs();
  // The end of every step: outputs exchanged, counters published.
  void FinishStep();
  // Adds the step's time since step_start and its forward passes' time to the counters
  // together, so that no snapshot holds a step's model time without its step time.
  void CountStepTime(std::chrono::steady_clock::time_point step_start);
  void ReceiveControl(std::vector<std::unique_ptr<RequestState>>& inbox, std::vector<int64_t>& aborts);
  // The engine-thread state of a request accepted with id `id`.
  Result<std::unique_ptr<RequestState>> NewRequestState(int64_t id, GenerationRequest request);
  // Step's phases: take the inbox, schedule, then
  //   BuildBatch → RunForward → LocateLogitRows → SampleChunks → EmitOutputs.
  void TakeInbox();
  // The forward pass's tokens and spans for the scheduled chunks.
  void BuildBatch(const std::vector<ScheduledChunk>& chunks);
  // The chunk of `chunks` that gets the decompressed prefix this step, or -1.
  int64_t DecompressedPrefixChunk(const std::vector<ScheduledChunk>& chunks);
  // Every span's SequenceSpan::latent_keys_from: the kept prefix's end, where the
  // scheduler counts the pairs past it as latent ones.
  int64_t LatentKeysFrom() const;
  Status RunForward();
  // Ends every request in a batch whose forward pass failed.
  void FailBatch(const std::vector<ScheduledChunk>& chunks, const Status& status);
  // Each chunk's rows of logits: its prompt rows (kAll) and the row it samples from.
  void LocateLogitRows(const std::vector<ScheduledChunk>& done);
  // The next token of every chunk that samples, and which rows are not finite.
  void SampleChunks(const std::vector<ScheduledChunk>& done);
  // Each choice's news (prompt rows, its token, text, finish) pushed to its stream.
  void EmitOutputs(const std::vector<ScheduledChunk>& done);
  // Speculative decoding: a chunk's `drafts` guesses checked against its rows [drafts + 1,
  // vocab], token by token as plain decoding would draw them: each drawn token is
  // emitted, and the next row counts only while the drawn token equals the draft. The
  // sequence keeps the rows of what it emitted. Returns the drafts accepted.
  int64_t VerifyDrafts(RequestChoice& c, const ScheduledChunk& ch, const float* rows, int64_t drafts,
                       GenerationOutput& out);
  // Speculative decoding: the MTP layer over each chunk's rows that stand (filling its
  // latent cache), then up to num_speculative_tokens greedy drafts for every sequence
  // that decodes next, appended to its tokens (Sequence::drafts).
  Status ProposeDrafts(const std::vector<ScheduledChunk>& done);
  // Whether choice c decodes with drafts (not for prompt logits or return_logits).
  bool Speculates(const RequestChoice& c) const;
  // A sequence that drafts in ProposeDrafts: how many, and its row in the last pass.
  struct Drafting {
    Sequence* seq;
    int64_t wanted;
    int64_t row;
  };
  // The drafts s may verify next step (0: it does not decode next).
  int64_t DraftsWanted(Sequence& s);
  // Rows [start, start + hidden / d) of s into the MTP layer's batch, each with the
  // token after it and its hidden row; logits for none (the caller asks for the last).
  void AddDraftRows(Sequence& s, int64_t start, std::span<const float> hidden);
  // The MTP layer over the batch; each drafting sequence (one logits row each, in
  // order) gets its greedy draft appended. Empties the batch.
  Status RunDraftPass(std::vector<Drafting>& drafting);
  void FinishChoice(RequestChoice& c, FinishReason reason, GenerationOutput& out);
  // The choice's next token from its row of logits; nullopt when max_tokens was reached
  // already. Reads only the choice's own state (runs on any thread).
  std::optional<SampledToken> Draw(RequestChoice& c, const float* logits_row) const;
  void ProcessSampled(RequestChoice& c, const std::optional<SampledToken>& drawn, GenerationOutput& out);
  void ProcessPromptRows(RequestChoice& c, int64_t start, int64_t count, const float* rows, GenerationOutput& out);
  void EndRequest(RequestState& r, const std::string& error);
  // Why a request whose logits at `position` are NaN/Inf ends, naming the layer where
  // the step's forward pass first went non-finite.
  std::string NotFiniteMessage(int64_t position) const;
  void PublishStats();
  // Data-parallel: this rank's replica, how many there are, and whether this is the
  // replica's first rank.
  int replica() const { return group_->rank() / replica_ranks_; }
  int replicas() const { return group_->size() / replica_ranks_; }
  bool leads_replica() const { return group_->rank() % replica_ranks_ == 0; }

  DeepSeekModel& model_;
  Comm* group_;
  bool data_parallel_ = false;
  int replica_ranks_ = 1;          // data-parallel: the ranks of each replica
  std::vector<StepShape> shapes_;  // data-parallel: every rank's, from the last step
  // Data-parallel, rank 0: the streams of requests other ranks run, and which of their
  // choices have finished.
  struct RemoteRequest {
    std::shared_ptr<RequestStream> stream;
    std::vector<char> finished;
  };
  std::unordered_map<int64_t, RemoteRequest> remote_;
  std::vector<int64_t> assigned_;  // data-parallel, rank 0: requests given to each replica
  // Data-parallel, the first rank of each replica but rank 0's: this step's outputs.
  std::vector<std::pair<int64_t, GenerationOutput>> outbox_;
  const Tokenizer* tokenizer_;
  OutputConstraints constraints_;
  bool shutdown_sent_ = false;      // leader: the followers were told to stop
  bool shutdown_received_ = false;  // follower: the leader stopped
  EngineOptions options_;
  int32_t eos_id_;
  KvCache cache_;
  BlockPool pool_;
  KvCacheManager kv_;
  Scheduler scheduler_;

  // Engine-thread state.
  std::unordered_map<int64_t, std::unique_ptr<RequestState>> requests_;
  std::vector<int32_t> batch_tokens_;  // batch_tokens: [T] every chunk's tokens, chunk order
  std::vector<SequenceSpan> batch_spans_;
  // One prompt at a time keeps its decompressed K/V across its chunks: the sequence
  // (its id) and the position its next chunk starts at.
  DecompressedPrefix decompressed_prefix_;
  int64_t decompressed_owner_ = -1;
  int64_t decompressed_next_ = 0;
  std::vector<float> logits_;  // logits: [rows, vocab]
  // Speculative decoding: the step's final hidden rows [T, d]; each chunk's drafts
  // (verified this step); the MTP layer's batch, its logits and output rows.
  std::vector<float> final_hidden_;
  std::vector<int64_t> chunk_drafts_;
  std::vector<int32_t> draft_tokens_;
  std::vector<SequenceSpan> draft_spans_;
  std::vector<float> draft_inputs_, draft_logits_, draft_hidden_;
  struct ChunkRows {
    const float* prompt = nullptr;  // [count, vocab] when the chunk's span has SpanLogits::kAll
    const float* sample = nullptr;  // [vocab] the row the chunk samples from, if it samples
  };
  std::vector<ChunkRows> chunk_rows_;               // per scheduled chunk
  std::vector<std::optional<SampledToken>> draws_;  // per scheduled chunk
  std::vector<char> not_finite_;                    // per scheduled chunk: its sampled row has NaN or Inf
  // EmitOutputs' news, pushed to the streams once the step's counters are published.
  std::vector<std::pair<RequestStream*, GenerationOutput>> step_news_;
  EngineStats counters_;
  // The forward passes' seconds of the step in progress (CountStepTime adds them): the
  // counters are published mid-step too (EmitOutputs), before the step's own seconds.
  double step_model_seconds_ = 0;

  // Shared with client threads.
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::vector<std::unique_ptr<RequestState>> inbox_;
  std::vector<int64_t> aborts_;
  EngineStats published_;
  bool stopping_ = false;
  std::string stop_reason_;
  std::atomic<int64_t> next_id_{0};
  std::thread thread_;
};

}  // namespace latte
