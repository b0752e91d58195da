#include "engine/engine.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/check.h"
#include "engine/step_control.h"
#include "kernels/attention.h"
#include "kernels/prefill_attention.h"
#include "model/decompressed_prefix.h"

namespace latte {

struct RequestChoice {
  Sequence seq;
  Sampler sampler;
  StopMatcher stops;
  std::optional<StreamingDetokenizer> detokenizer;
  RequestState* request = nullptr;
  int index = 0;
  bool finished = false;
  bool started = false;  // its first chunk ran (cached_tokens known)
  int64_t cached_tokens = 0;
  int64_t prompt_rows_done = 0;  // positions whose logits rows were taken
  std::vector<SampledToken> prompt_logprobs;
  bool prompt_logprobs_sent = false;
  // A constrained output: its grammar, the state its tokens so far reached, and the
  // masked logits row it samples from.
  std::shared_ptr<TokenGrammar> grammar;
  TokenGrammar::State grammar_state = 0;
  std::vector<float> masked_logits;

  explicit RequestChoice(const SamplingParams& params) : sampler(params) {}
};

struct RequestState {
  int64_t id = 0;
  GenerationRequest params;
  std::shared_ptr<RequestStream> stream;
  std::vector<std::unique_ptr<RequestChoice>> choices;
  int open = 0;
};

// The attention pairs whose arithmetic takes about twice as long as reading the weights
// a prefill step streams (every expert: a chunk of more than a few tokens touches
// them all). A pair costs 2 (d_qk + d_v) FLOP per head and layer; the CPUs measured
// run the prefill attention at ~8 FLOP per byte of their read bandwidth (bf16:
// ~470-840 GFLOP/s peak, about half of it reached, against 35-55 GB/s). The 4-layer
// v2-lite model gets 1.44M pairs: 512-token chunks up to ~2.3k deep, 86 at 16k.
int64_t PrefillAttentionPairsFor(const DeepSeekModel& model) {
  constexpr double kFlopPerByte = 8, kAttentionToReads = 2;
  const ModelConfig& local = model.weights().shard_config();
  const WeightMemory& held = model.weights().memory();
  const double step_bytes =
      static_cast<double>(held.attention + held.attention_prepared + held.dense_mlp + held.experts);
  const double flop_per_pair = 2.0 * static_cast<double>(local.num_hidden_layers * local.num_attention_heads *
                                                         (local.QkHeadDim() + local.v_head_dim));
  if (flop_per_pair <= 0) return 0;
  return static_cast<int64_t>(kAttentionToReads * kFlopPerByte * step_bytes / flop_per_pair);
}

double LatentKeyPairCostFor(const DeepSeekModel& model, DType rows) {
  if (model.weights().mode() == MlaMode::kNaive) return 0;
  const ModelConfig& local = model.weights().shard_config();
  const double arithmetic = static_cast<double>(local.LatentDim() + local.kv_lora_rank) /
                            static_cast<double>(local.QkHeadDim() + local.v_head_dim);
  return arithmetic / SharedKeyAttentionRelativeRate(rows);
}

namespace {

// The scheduler's config, told how deep a prompt's decompressed K/V is kept and what a
// query-key pair past that costs.
SchedulerConfig SchedulerFor(const EngineOptions& options, const DeepSeekModel& model) {
  SchedulerConfig config = options.scheduler;
  const ModelConfig& local = model.weights().shard_config();
  const int64_t position_bytes = DecompressedPrefix::BytesPerPosition(
      local.num_hidden_layers, local.num_attention_heads, local.QkHeadDim(), local.v_head_dim);
  // Whole KV blocks: the keys past them are read from the cache a block at a time.
  const int64_t kept = position_bytes > 0 ? options.decompressed_prefix_bytes / position_bytes : 0;
  config.kept_prefix_positions = kept / options.block_size * options.block_size;
  // Past them a prefill row attends in latent form (none: nothing to attend past).
  if (config.kept_prefix_positions == 0 || model.weights().mode() == MlaMode::kNaive) {
    config.latent_key_pair_cost = 0;
  } else if (config.latent_key_pair_cost == 0) {
    config.latent_key_pair_cost =
        LatentKeyPairCostFor(model, ResolveKvCacheDtype(options.kv_cache_dtype, model.weights().compute_dtype()));
  }
  config.min_pair_capped_tokens = kPrefillAttentionMinQueries;
  if (config.auto_prefill_attention_pairs == 0) config.auto_prefill_attention_pairs = PrefillAttentionPairsFor(model);
  return config;
}

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

Engine::Engine(DeepSeekModel& model, const Tokenizer* tokenizer, const EngineOptions& options, Comm* group,
               int replicas)
    : model_(model),
      group_(group != nullptr && group->size() > 1 ? group : nullptr),
      data_parallel_(group_ != nullptr && replicas > 1),
      replica_ranks_(data_parallel_ ? group_->size() / replicas : 1),
      tokenizer_(tokenizer),
      constraints_(tokenizer),
      options_(options),
      eos_id_(tokenizer && tokenizer->eos_id() ? *tokenizer->eos_id()
                                               : static_cast<int32_t>(model.config().eos_token_id)),
      cache_(model.CacheLayers(), model.config().LatentDim(), options.num_blocks, options.block_size,
             ResolveKvCacheDtype(options.kv_cache_dtype, model.weights().compute_dtype())),
      pool_(options.num_blocks, options.block_size, options.prefix_caching),
      kv_(pool_),
      scheduler_(SchedulerFor(options, model), kv_),
      decompressed_prefix_(options.decompressed_prefix_bytes) {
  LATTE_CHECK(options.num_speculative_tokens == 0 || model.weights().mtp(),
              "Engine: speculative decoding needs the model's MTP layer loaded");
  LATTE_CHECK(options.num_speculative_tokens == 0 || group_ == nullptr,
              "Engine: speculative decoding in one process only");
  counters_.kv_blocks_total = options.num_blocks;
  counters_.block_size = options.block_size;
  counters_.spec_accepted_per_position.assign(options.num_speculative_tokens, 0);
  published_ = counters_;
}

std::string Engine::NotFiniteMessage(int64_t position) const {
  std::string message = "the model's logits are not finite (NaN or Inf) at position " + std::to_string(position);
  if (const auto& site = model_.first_non_finite()) {
    message +=
        "; this step's first NaN/Inf came out of layer " + std::to_string(site->layer) + "'s " + site->SublayerName();
  }
  return message + ": the weights or activations overflow";
}

Engine::~Engine() { Stop(); }

void Engine::Start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stopping_) return;
  // OpenMP's thread count is per thread (libgomp): the engine thread takes the
  // starting thread's (--threads), or its forward passes would use every core.
  const int threads = omp_get_max_threads();
  thread_ = std::thread([this, threads] {
    omp_set_num_threads(threads);
    if (leads()) {
      Loop();
    } else {
      FollowLoop();
    }
  });
}

void Engine::WaitForLeaderToStop() {
  LATTE_CHECK(!leads(), "Engine::WaitForLeaderToStop on the leader");
  if (thread_.joinable()) thread_.join();
  Stop("the leading rank stopped");
}

void Engine::Stop(const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    stop_reason_ = reason;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The loop has ended (or never ran): this thread owns the engine state now.
  if (!leads()) {
    // A follower's requests end with the leader's; its inbox is empty.
    requests_.clear();
    PublishStats();
    return;
  }
  // Followers are waiting for the next step's message: it is the shutdown. What is
  // still in the inbox never reached them and ends here.
  if (group_ && !shutdown_sent_) {
    SendControl({}, {}, {}, /*shutdown=*/true);
    shutdown_sent_ = true;
  }
  // Requests other ranks ran end here: their ranks have stopped too.
  for (auto& [id, remote] : remote_) {
    for (size_t i = 0; i < remote.finished.size(); ++i) {
      if (remote.finished[i]) continue;
      GenerationOutput out;
      out.index = static_cast<int>(i);
      out.finish = FinishReason::kAbort;
      out.error = reason;
      out.time = Clock::now();
      remote.stream->Push(std::move(out));
    }
  }
  remote_.clear();
  TakeInbox();
  std::vector<int64_t> ids;
  for (const auto& [id, r] : requests_) ids.push_back(id);
  for (int64_t id : ids) EndRequest(*requests_.at(id), reason);
  requests_.clear();
  PublishStats();
}

RequestLimits Engine::limits() const {
  const ModelConfig& c = model_.config();
  return {c.vocab_size, c.max_position_embeddings, pool_tokens(), options_.scheduler.max_num_seqs,
          tokenizer_ != nullptr};
}

Result<std::shared_ptr<RequestStream>> Engine::Submit(GenerationRequest request) {
  LATTE_CHECK(leads(), "Engine::Submit on a follower rank");
  LATTE_RETURN_IF_ERROR(CheckRequest(request, limits()));
  // Every rank of a group samples the request with the same seed.
  if (group_ && !request.sampling.seed) request.sampling.seed = RandomSeed();
  LATTE_ASSIGN_OR_RETURN(std::unique_ptr<RequestState> r, NewRequestState(next_id_++, std::move(request)));
  std::shared_ptr<RequestStream> stream = r->stream;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return Status::Unavailable("the engine is shutting down");
    inbox_.push_back(std::move(r));
  }
  work_cv_.notify_all();
  return stream;
}

Result<std::unique_ptr<RequestState>> Engine::NewRequestState(int64_t id, GenerationRequest request) {
  const int64_t P = static_cast<int64_t>(request.prompt.size());
  auto r = std::make_unique<RequestState>();
  r->id = id;
  r->stream = std::make_shared<RequestStream>(r->id, request.n);
  if (!leads() && data_parallel_ && leads_replica()) {
    r->stream->SendOutputsTo([this, id](GenerationOutput out) { outbox_.emplace_back(id, std::move(out)); });
  } else if (!leads()) {
    r->stream->DiscardOutputs();
  }
  std::vector<int32_t> stop_ids = request.stop_token_ids;
  if (!request.ignore_eos) stop_ids.push_back(eos_id_);
  std::shared_ptr<TokenGrammar> grammar;
  if (!request.output_constraint.empty()) {
    // EOS ends a complete output even with ignore_eos: the grammar allows nothing else.
    std::vector<int32_t> end_ids = request.stop_token_ids;
    end_ids.push_back(eos_id_);
    LATTE_ASSIGN_OR_RETURN(grammar, constraints_.Get(request.output_constraint, end_ids));
  }
  for (int i = 0; i < request.n; ++i) {
    SamplingParams params = request.sampling;
    if (params.seed && i > 0) *params.seed += static_cast<uint64_t>(i);  // choices differ, reproducibly
    auto choice = std::make_unique<RequestChoice>(params);
    LATTE_ASSIGN_OR_RETURN(choice->stops, StopMatcher::Create(request.stop, stop_ids));
    if (tokenizer_) choice->detokenizer.emplace(*tokenizer_, request.skip_special_tokens);
    choice->request = r.get();
    choice->index = i;
    choice->seq.id = r->id;
    choice->seq.tokens = request.prompt;
    choice->seq.prompt_len = P;
    choice->seq.choice = choice.get();
    if (grammar) {
      choice->grammar = grammar;
      choice->grammar_state = grammar->start();
    }
    if (i == 0) {
      choice->seq.needs_prompt_logits = request.prompt_logprobs || request.return_logits;
    } else {
      choice->seq.leader = &r->choices[0]->seq;
    }
    r->choices.push_back(std::move(choice));
  }
  r->open = request.n;
  r->params = std::move(request);
  return r;
}

void Engine::Abort(int64_t request_id) {
  {
    std::lock_guard lock(mu_);
    aborts_.push_back(request_id);
  }
  work_cv_.notify_all();
}

void Engine::Loop() {
  bool progressed = false;
  while (true) {
    // Sleep while idle, or after a step that could schedule nothing (then only a new
    // request or an abort changes anything).
    const bool idle = data_parallel_ ? std::all_of(shapes_.begin(), shapes_.end(),
                                                   [](const StepShape& s) { return s.running + s.waiting == 0; })
                                     : scheduler_.idle();
    const bool busy = progressed && !idle;
    {
      std::unique_lock lock(mu_);
      if (!busy) {
        work_cv_.wait_for(lock, std::chrono::milliseconds(100),
                          [this] { return stopping_ || !inbox_.empty() || !aborts_.empty(); });
      }
      if (stopping_) break;
    }
    progressed = Step();
  }
}

void Engine::FollowLoop() {
  while (!shutdown_received_) Step();
}

void Engine::SendControl(const std::vector<std::unique_ptr<RequestState>>& inbox, const std::vector<int32_t>& ranks,
                         const std::vector<int64_t>& aborts, bool shutdown) {
  StepControl control;
  control.shutdown = shutdown;
  for (const auto& r : inbox) control.requests.emplace_back(r->id, r->params);
  control.ranks = ranks;
  control.aborts = aborts;
  std::vector<uint8_t> bytes = EncodeStepControl(control);
  group_->Broadcast(bytes, 0);
}

void Engine::ReceiveControl(std::vector<std::unique_ptr<RequestState>>& inbox, std::vector<int64_t>& aborts) {
  std::vector<uint8_t> bytes;
  // An idle server's followers wait here as long as no request comes: asleep.
  group_->Broadcast(bytes, 0, /*idle_wait=*/true);
  Result<StepControl> control = DecodeStepControl(bytes);
  if (!control.ok()) group_->Abort("the leading rank's step message: " + control.status().message());
  shutdown_received_ = control->shutdown;
  for (size_t i = 0; i < control->requests.size(); ++i) {
    auto& [id, request] = control->requests[i];
    if (data_parallel_ && (i >= control->ranks.size() || control->ranks[i] != replica())) continue;
    Result<std::unique_ptr<RequestState>> r = NewRequestState(id, std::move(request));
    // The leader accepted it with the same limits: a refusal here is a divergence.
    if (!r.ok()) group_->Abort("request " + std::to_string(id) + " from the leading rank: " + r.status().message());
    inbox.push_back(std::move(*r));
  }
  aborts = std::move(control->aborts);
}

void Engine::TakeInbox() {
  std::vector<std::unique_ptr<RequestState>> inbox;
  std::vector<int64_t> aborts;
  if (!leads()) {
    ReceiveControl(inbox, aborts);
  } else {
    {
      std::lock_guard lock(mu_);
      inbox.swap(inbox_);
      aborts.swap(aborts_);
    }
    if (group_ && !shutdown_sent_) {
      const std::vector<int32_t> ranks = data_parallel_ ? AssignRanks(inbox) : std::vector<int32_t>{};
      SendControl(inbox, ranks, aborts, /*shutdown=*/false);
      // The leader keeps only the streams of requests other replicas run.
      assigned_.resize(replicas());
      for (size_t i = 0; i < ranks.size(); ++i) {
        ++assigned_[ranks[i]];
        if (ranks[i] == 0) continue;
        remote_[inbox[i]->id] = RemoteRequest{inbox[i]->stream, std::vector<char>(inbox[i]->params.n, 0)};
        inbox[i].reset();
      }
      std::erase(inbox, nullptr);
    }
  }
  for (auto& r : inbox) {
    RequestState& state = *r;
    requests_.emplace(state.id, std::move(r));
    const bool runs = state.params.max_tokens > 0 || state.params.prompt_logprobs || state.params.return_logits;
    for (auto& c : state.choices) {
      if (runs) {
        scheduler_.Add(&c->seq);
      } else {  // max_tokens 0 and nothing asked of the prompt: nothing to compute
        GenerationOutput out;
        out.index = c->index;
        out.prompt_tokens = c->seq.prompt_len;
        FinishChoice(*c, FinishReason::kLength, out);
        out.time = Clock::now();
        state.stream->Push(std::move(out));
      }
    }
  }
  for (int64_t id : aborts) {
    auto it = requests_.find(id);
    if (it != requests_.end()) EndRequest(*it->second, "");
  }
  std::erase_if(requests_, [](const auto& kv) { return kv.second->open == 0; });
}

void Engine::EndRequest(RequestState& r, const std::string& error) {
  for (auto& c : r.choices) {
    if (c->finished) continue;
    GenerationOutput out;
    out.index = c->index;
    out.error = error;
    out.prompt_tokens = c->seq.prompt_len;
    out.cached_tokens = c->cached_tokens;
    c->finished = true;
    --r.open;
    scheduler_.Remove(&c->seq);
    out.finish = FinishReason::kAbort;
    out.time = Clock::now();
    r.stream->Push(std::move(out));
  }
}

void Engine::FinishChoice(RequestChoice& c, FinishReason reason, GenerationOutput& out) {
  if (c.detokenizer && reason != FinishReason::kAbort && !c.stops.stopped()) {
    const StopStep s = c.stops.Push(c.detokenizer->Flush());
    out.text += s.text;
    if (s.stopped) {
      reason = FinishReason::kStop;
    } else {
      out.text += c.stops.Flush();
    }
  }
  if (c.stops.stopped()) out.stop_reason = std::string(c.stops.matched_stop());
  out.finish = reason;
  c.finished = true;
  --c.request->open;
  ++counters_.requests_finished;
  scheduler_.Remove(&c.seq);
}

void Engine::ProcessPromptRows(RequestChoice& c, int64_t start, int64_t count, const float* rows,
                               GenerationOutput& out) {
  const GenerationRequest& params = c.request->params;
  const int64_t V = model_.config().vocab_size, P = c.seq.prompt_len;
  for (int64_t p = std::max(start, c.prompt_rows_done); p < start + count; ++p) {
    const float* row = rows + (p - start) * V;
    if (params.prompt_logprobs && p + 1 < P) {
      c.prompt_logprobs.push_back(
          ScoreToken({row, static_cast<size_t>(V)}, c.seq.tokens[p + 1], params.sampling.logprobs));
    }
    if (params.return_logits) out.logits.insert(out.logits.end(), row, row + V);
  }
  c.prompt_rows_done = std::max(c.prompt_rows_done, start + count);
}

std::optional<SampledToken> Engine::Draw(RequestChoice& c, const float* logits_row) const {
  if (c.seq.generated() >= c.request->params.max_tokens) return std::nullopt;  // max_tokens 0: the prompt was all
  const int64_t V = model_.config().vocab_size;
  const std::span<const int32_t> prompt(c.seq.tokens.data(), static_cast<size_t>(c.seq.prompt_len));
  const std::span<const int32_t> output(c.seq.tokens.data() + c.seq.prompt_len, static_cast<size_t>(c.seq.generated()));
  std::span<const float> logits(logits_row, static_cast<size_t>(V));
  if (c.grammar) {
    if (c.grammar->Finished(c.grammar_state)) return std::nullopt;  // nothing may follow: ProcessSampled stops it
    const std::shared_ptr<const TokenMask> allowed = c.grammar->Mask(c.grammar_state);
    // No token of the vocabulary spells a way on (a grammar needing bytes no token
    // has): the output ends where it is.
    if (std::all_of(allowed->begin(), allowed->end(), [](uint64_t w) { return w == 0; })) return std::nullopt;
    MaskLogits(*allowed, logits, c.masked_logits);
    logits = c.masked_logits;
  }
  return c.sampler.Sample(logits, prompt, output);
}

void Engine::ProcessSampled(RequestChoice& c, const std::optional<SampledToken>& drawn, GenerationOutput& out) {
  const GenerationRequest& params = c.request->params;
  if (!drawn) {
    const bool complete = c.grammar && c.grammar->Finished(c.grammar_state);
    FinishChoice(c, complete ? FinishReason::kStop : FinishReason::kLength, out);
    return;
  }
  const SampledToken& token = *drawn;
  c.seq.tokens.push_back(token.id);
  out.tokens.push_back(token);
  ++counters_.generation_tokens;
  if (c.grammar) {
    if (c.grammar->IsEndToken(token.id)) {
      FinishChoice(c, FinishReason::kStop, out);
      return;
    }
    c.grammar_state = c.grammar->Next(c.grammar_state, token.id);
  }
  if (c.stops.IsStopToken(token.id)) {
    FinishChoice(c, FinishReason::kStop, out);
    return;
  }
  if (c.detokenizer) {
    const StopStep s = c.stops.Push(c.detokenizer->Add(token.id));
    out.text += s.text;
    if (s.stopped) {
      FinishChoice(c, FinishReason::kStop, out);
      return;
    }
  }
  if (c.grammar && c.grammar->Finished(c.grammar_state)) {
    FinishChoice(c, FinishReason::kStop, out);
    return;
  }
  if (c.seq.generated() >= params.max_tokens || c.seq.num_tokens() >= model_.config().max_position_embeddings) {
    FinishChoice(c, FinishReason::kLength, out);
  }
}

bool Engine::Step() {
  const Clock::time_point step_start = Clock::now();
  TakeInbox();
  if (shutdown_received_) return false;
  const std::vector<ScheduledChunk>& chunks = scheduler_.Schedule();
  // Data-parallel: when any rank has tokens, every rank runs the forward (with none of
  // its own: only the MoE layers' exchanges).
  const bool group_has_tokens = data_parallel_ ? ExchangeShapes(chunks) : !chunks.empty();
  if (chunks.empty()) {
    if (group_has_tokens) {
      batch_tokens_.clear();
      batch_spans_.clear();
      const Status status = RunForward();
      if (!status.ok()) group_->Abort("an empty forward pass failed: " + status.message());
      CountStepTime(step_start);
    }
    FinishStep();
    return group_has_tokens;
  }
  BuildBatch(chunks);
  const Status status = RunForward();
  if (!status.ok()) {
    // Inputs are checked before any collective: a rank that failed here would leave
    // the others waiting inside one.
    if (data_parallel_) group_->Abort("a forward pass failed: " + status.message());
    CountStepTime(step_start);
    FailBatch(chunks, status);
    return true;
  }
  // The chunks are copied: finishing a sequence below removes it from the scheduler.
  const std::vector<ScheduledChunk> done(chunks.begin(), chunks.end());
  scheduler_.Completed();
  LocateLogitRows(done);
  SampleChunks(done);
  EmitOutputs(done);
  if (options_.num_speculative_tokens > 0) {
    if (const Status drafted = ProposeDrafts(done); !drafted.ok()) FailBatch(done, drafted);
  }
  std::erase_if(requests_, [](const auto& kv) { return kv.second->open == 0; });
  ++counters_.steps;
  CountStepTime(step_start);
  FinishStep();
  return true;
}

void Engine::CountStepTime(Clock::time_point step_start) {
  counters_.step_seconds += SecondsSince(step_start);
  counters_.model_seconds += step_model_seconds_;
  step_model_seconds_ = 0;
}

void Engine::FinishStep() {
  if (data_parallel_) ExchangeOutputs();
  PublishStats();
}

std::vector<int32_t> Engine::AssignRanks(const std::vector<std::unique_ptr<RequestState>>& inbox) const {
  // Each replica's load as its first rank reported it (its other ranks run the same).
  std::vector<int64_t> load(replicas(), 0);
  for (size_t q = 0; q < load.size() && q * replica_ranks_ < shapes_.size(); ++q) {
    load[q] = shapes_[q * replica_ranks_].running + shapes_[q * replica_ranks_].waiting;
  }
  std::vector<int32_t> ranks;
  for (const auto& request : inbox) {
    const int32_t r = static_cast<int32_t>(std::min_element(load.begin(), load.end()) - load.begin());
    ranks.push_back(r);
    load[r] += request->params.n;
  }
  return ranks;
}

bool Engine::ExchangeShapes(const std::vector<ScheduledChunk>& chunks) {
  StepShape mine;
  for (const ScheduledChunk& ch : chunks) mine.tokens += ch.count;
  mine.running = scheduler_.num_running();
  mine.waiting = scheduler_.num_waiting();
  mine.kv_blocks_total = options_.num_blocks;
  mine.kv_blocks_used = pool_.NumInUse();
  mine.kv_blocks_cached = pool_.NumCached();
  mine.collective_seconds = group_->stats().TotalSeconds();
  mine.step_seconds = counters_.step_seconds;
  shapes_.resize(group_->size());
  group_->AllGatherBytes(&mine, sizeof mine, shapes_.data());
  return std::any_of(shapes_.begin(), shapes_.end(), [](const StepShape& s) { return s.tokens > 0; });
}

void Engine::ExchangeOutputs() {
  std::vector<std::vector<uint8_t>> every;
  group_->GatherBytes(EncodeOutputs(outbox_), 0, every);
  outbox_.clear();
  if (!leads()) return;
  for (size_t rank = 1; rank < every.size(); ++rank) {
    Result<std::vector<std::pair<int64_t, GenerationOutput>>> outputs = DecodeOutputs(every[rank]);
    if (!outputs.ok()) group_->Abort("rank " + std::to_string(rank) + "'s outputs: " + outputs.status().message());
    for (auto& [id, out] : *outputs) {
      auto it = remote_.find(id);
      if (it == remote_.end()) continue;
      RemoteRequest& remote = it->second;
      out.time = Clock::now();  // this host's clock: the client's latencies are measured here
      if (out.finish && out.index >= 0 && static_cast<size_t>(out.index) < remote.finished.size()) {
        remote.finished[out.index] = 1;
      }
      remote.stream->Push(std::move(out));
      if (std::all_of(remote.finished.begin(), remote.finished.end(), [](char f) { return f != 0; })) {
        remote_.erase(it);
      }
    }
  }
}

void Engine::BuildBatch(const std::vector<ScheduledChunk>& chunks) {
  // Decodes first (the scheduler's order), each chunk's tokens, and logits only for
  // the rows that need them.
  batch_tokens_.clear();
  batch_spans_.clear();
  chunk_drafts_.clear();
  const int64_t keeps_prefix = DecompressedPrefixChunk(chunks);
  for (const ScheduledChunk& ch : chunks) {
    const Sequence& s = *ch.seq;
    // A chunk that ends at the last token holds all of its sequence's drafts.
    chunk_drafts_.push_back(ch.samples ? s.drafts : 0);
    batch_tokens_.insert(batch_tokens_.end(), s.tokens.begin() + ch.start, s.tokens.begin() + ch.start + ch.count);
    SequenceSpan span;
    span.block_table = s.blocks.table;
    span.start = ch.start;
    span.count = ch.count;
    span.decode_from = s.prompt_len;
    span.latent_keys_from = LatentKeysFrom();
    if (static_cast<int64_t>(batch_spans_.size()) == keeps_prefix) span.decompressed = &decompressed_prefix_;
    const bool prompt_rows =
        s.needs_prompt_logits && (ch.start < s.prompt_len || s.choice->request->params.return_logits);
    span.logits = prompt_rows || chunk_drafts_.back() > 0 ? SpanLogits::kAll
                  : ch.samples                            ? SpanLogits::kLast
                                                          : SpanLogits::kNone;
    batch_spans_.push_back(span);
    if (ch.start < s.prompt_len) counters_.prompt_tokens += std::min(ch.start + ch.count, s.prompt_len) - ch.start;
  }
}

int64_t Engine::LatentKeysFrom() const {
  const SchedulerConfig& c = scheduler_.config();
  return c.latent_key_pair_cost > 0 ? c.kept_prefix_positions : kAllKeysDecompressed;
}

int64_t Engine::DecompressedPrefixChunk(const std::vector<ScheduledChunk>& chunks) {
  if (decompressed_prefix_.capacity_bytes() == 0) return -1;
  // Only a prompt that runs over several chunks gains: the owner keeps the store while
  // each step carries its next chunk, or no other such prompt's (a step it sits out for
  // a short prompt); otherwise it passes, cleared, to the first such prompt of this
  // step (a prompt that was preempted restarts elsewhere and loses it).
  int64_t owner = -1, first = -1;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ScheduledChunk& ch = chunks[i];
    const Sequence& s = *ch.seq;
    const bool prompt_in_chunks = ch.start < s.prompt_len && (ch.start > 0 || ch.start + ch.count < s.prompt_len);
    if (!prompt_in_chunks) continue;
    if (first < 0) first = static_cast<int64_t>(i);
    if (s.id == decompressed_owner_ && ch.start == decompressed_next_) owner = static_cast<int64_t>(i);
  }
  if (owner < 0) {
    if (first < 0) return -1;
    decompressed_prefix_.Clear();
    owner = first;
    decompressed_owner_ = chunks[owner].seq->id;
    ++counters_.decompressed_prefix_starts;
  }
  decompressed_next_ = chunks[owner].start + chunks[owner].count;
  return owner;
}

Status Engine::RunForward() {
  const Clock::time_point model_start = Clock::now();
  const Status status = model_.Forward(batch_tokens_, batch_spans_, cache_, logits_,
                                       options_.num_speculative_tokens > 0 ? &final_hidden_ : nullptr);
  step_model_seconds_ += SecondsSince(model_start);
  return status;
}

void Engine::FailBatch(const std::vector<ScheduledChunk>& chunks, const Status& status) {
  // (Only without data parallelism: a data-parallel rank ends the job instead.)
  // Inputs are validated at Submit: a failed forward is a bug, not a client's error.
  std::vector<RequestState*> failed;
  failed.reserve(chunks.size());
  for (const ScheduledChunk& ch : chunks) failed.push_back(ch.seq->choice->request);
  for (RequestState* r : failed) {
    if (r->open > 0) EndRequest(*r, "internal error: " + status.message());
  }
  std::erase_if(requests_, [](const auto& kv) { return kv.second->open == 0; });
  PublishStats();
}

void Engine::LocateLogitRows(const std::vector<ScheduledChunk>& done) {
  const int64_t V = model_.config().vocab_size;
  chunk_rows_.assign(done.size(), ChunkRows{});
  const float* row = logits_.data();
  for (size_t i = 0; i < done.size(); ++i) {
    const SpanLogits rows = batch_spans_[i].logits;
    if (rows == SpanLogits::kAll) {
      chunk_rows_[i].prompt = row;
      row += done[i].count * V;
    }
    if (done[i].samples) chunk_rows_[i].sample = rows == SpanLogits::kAll ? row - V : row;
    if (rows == SpanLogits::kLast) row += V;
  }
}

void Engine::SampleChunks(const std::vector<ScheduledChunk>& done) {
  const int64_t V = model_.config().vocab_size;
  int64_t draws = 0;
  for (const ChunkRows& rows : chunk_rows_) draws += rows.sample != nullptr;
  // The draws touch only their own sequence's sampler and read its tokens: one per
  // thread (a draw over a ~100k vocabulary is several passes over it).
  draws_.resize(done.size());
  // A row with NaN or Inf (weights that overflow) ends its request with that said,
  // instead of a stream of whatever the sampler makes of it.
  not_finite_.assign(done.size(), 0);
#pragma omp parallel for schedule(dynamic, 1) if (draws > 1)
  for (size_t i = 0; i < done.size(); ++i) {
    if (!chunk_rows_[i].sample || chunk_drafts_[i] > 0) continue;  // drafts: drawn in VerifyDrafts
    const float* sample_row = chunk_rows_[i].sample;
    for (int64_t v = 0; v < V; ++v) {
      if (!std::isfinite(sample_row[v])) {
        not_finite_[i] = 1;
        break;
      }
    }
    if (!not_finite_[i]) draws_[i] = Draw(*done[i].seq->choice, sample_row);
  }
}

void Engine::EmitOutputs(const std::vector<ScheduledChunk>& done) {
  // News wait in step_news_ until the counters are published: a client that reads
  // /metrics once its last token arrives finds that token (and its request's end)
  // counted. Before anything that may end a request (EndRequest pushes at once) the
  // news so far go out, so a stream's outputs keep their order.
  auto deliver = [this] {
    PublishStats();
    for (auto& [stream, out] : step_news_) stream->Push(std::move(out));
    step_news_.clear();
  };
  step_news_.clear();
  for (size_t i = 0; i < done.size(); ++i) {
    const ScheduledChunk& ch = done[i];
    RequestChoice& c = *ch.seq->choice;
    if (c.finished) continue;  // ended above with another choice of its request
    if (not_finite_[i]) {
      deliver();
      EndRequest(*c.request, NotFiniteMessage(ch.start + ch.count - 1));
      continue;
    }
    GenerationOutput out;
    out.index = c.index;
    if (!c.started) {
      c.started = true;
      c.cached_tokens = ch.start;
    }
    if (chunk_drafts_[i] > 0) {
      deliver();  // VerifyDrafts may end the request
      VerifyDrafts(c, ch, chunk_rows_[i].prompt, chunk_drafts_[i], out);
      if (c.finished && out.finish == std::nullopt) continue;  // ended by EndRequest, which pushed its output
    } else {
      if (chunk_rows_[i].prompt) ProcessPromptRows(c, ch.start, ch.count, chunk_rows_[i].prompt, out);
      if (ch.samples) ProcessSampled(c, draws_[i], out);
    }
    const bool news = !out.tokens.empty() || !out.text.empty() || out.finish || !out.logits.empty();
    if (!news) continue;
    if (!c.prompt_logprobs_sent && c.prompt_rows_done >= c.seq.prompt_len) {
      out.prompt_logprobs = std::move(c.prompt_logprobs);
      c.prompt_logprobs_sent = true;
    }
    out.prompt_tokens = c.seq.prompt_len;
    out.cached_tokens = c.cached_tokens;
    out.time = Clock::now();
    step_news_.emplace_back(c.request->stream.get(), std::move(out));
  }
  deliver();
}

bool Engine::Speculates(const RequestChoice& c) const {
  return options_.num_speculative_tokens > 0 && !c.seq.needs_prompt_logits;
}

int64_t Engine::VerifyDrafts(RequestChoice& c, const ScheduledChunk& ch, const float* rows, int64_t drafts,
                             GenerationOutput& out) {
  Sequence& s = c.seq;
  const int64_t V = model_.config().vocab_size;
  const std::vector<int32_t> proposed(s.tokens.end() - drafts, s.tokens.end());
  s.DropDrafts(drafts);
  int64_t accepted = 0;
  for (int64_t j = 0; j <= drafts; ++j) {
    const float* row = rows + j * V;
    if (!std::all_of(row, row + V, [](float x) { return std::isfinite(x); })) {
      EndRequest(*c.request, NotFiniteMessage(ch.start + j));
      break;
    }
    const std::optional<SampledToken> drawn = Draw(c, row);
    ProcessSampled(c, drawn, out);
    const bool agrees = drawn && j < drafts && drawn->id == proposed[j];
    if (agrees) {
      ++accepted;
      ++counters_.spec_accepted_per_position[j];
    }
    if (c.finished || !agrees) break;
  }
  ++counters_.spec_drafts;
  counters_.spec_draft_tokens += drafts;
  counters_.spec_accepted_tokens += accepted;
  if (!c.finished) {
    // Rows stand up to the last token emitted, which has none yet; the rejected
    // drafts' rows are written over by the next step.
    s.num_computed = s.num_tokens() - 1;
    kv_.RegisterFullBlocks(s.tokens, s.num_computed, s.blocks);
  }
  return accepted;
}

int64_t Engine::DraftsWanted(Sequence& s) {
  // Only a sequence whose rows stand up to its last token decodes next.
  if (s.num_computed != s.num_tokens() - 1) return 0;
  // The next step's tokens stay within max_tokens and the context.
  int64_t wanted = std::min({options_.num_speculative_tokens, s.choice->request->params.max_tokens - s.generated() - 1,
                             model_.config().max_position_embeddings - s.num_tokens() - 1});
  // Drafts past the first write the MTP layer's rows ahead of the sequence.
  if (wanted > 1 && !kv_.Grow(s.blocks, s.num_computed + wanted - 1)) wanted = 1;
  return wanted;
}

void Engine::AddDraftRows(Sequence& s, int64_t start, std::span<const float> hidden) {
  const int64_t d = model_.config().hidden_size, count = static_cast<int64_t>(hidden.size()) / d;
  draft_tokens_.insert(draft_tokens_.end(), s.tokens.begin() + start + 1, s.tokens.begin() + start + count + 1);
  draft_inputs_.insert(draft_inputs_.end(), hidden.begin(), hidden.end());
  SequenceSpan span;
  span.block_table = s.blocks.table;
  span.start = start;
  span.count = count;
  span.decode_from = s.prompt_len;
  span.latent_keys_from = LatentKeysFrom();
  span.logits = SpanLogits::kNone;
  draft_spans_.push_back(span);
}

Status Engine::RunDraftPass(std::vector<Drafting>& drafting) {
  LATTE_RETURN_IF_ERROR(
      model_.DraftForward(draft_tokens_, draft_inputs_, draft_spans_, cache_, draft_logits_, draft_hidden_));
  const int64_t V = model_.config().vocab_size;
  for (size_t i = 0; i < drafting.size(); ++i) {
    const float* row = draft_logits_.data() + static_cast<int64_t>(i) * V;
    drafting[i].seq->tokens.push_back(static_cast<int32_t>(std::max_element(row, row + V) - row));  // greedy
    ++drafting[i].seq->drafts;
  }
  draft_tokens_.clear();
  draft_spans_.clear();
  draft_inputs_.clear();
  return Status::Ok();
}

Status Engine::ProposeDrafts(const std::vector<ScheduledChunk>& done) {
  const int64_t d = model_.config().hidden_size;
  const Clock::time_point model_start = Clock::now();
  // The first pass: each chunk's rows that stand (its MTP rows), row i with the token
  // after it; a sequence that decodes next drafts from its last row.
  std::vector<Drafting> drafting;
  int64_t chunk_first = 0;  // the chunk's first row in final_hidden_
  for (const ScheduledChunk& ch : done) {
    const std::span<const float> rows(final_hidden_.data() + chunk_first * d, static_cast<size_t>(ch.count * d));
    chunk_first += ch.count;
    Sequence& s = *ch.seq;
    const int64_t standing = s.num_computed - ch.start;
    if (s.choice->finished || s.state != SequenceState::kRunning || !Speculates(*s.choice) || standing <= 0) continue;
    // First: DraftsWanted may grow the block table the span points into.
    const int64_t wanted = DraftsWanted(s);
    AddDraftRows(s, ch.start, rows.first(static_cast<size_t>(standing * d)));
    if (wanted > 0) {
      draft_spans_.back().logits = SpanLogits::kLast;
      drafting.push_back({&s, wanted, static_cast<int64_t>(draft_tokens_.size()) - 1});
    }
  }
  if (!draft_spans_.empty()) LATTE_RETURN_IF_ERROR(RunDraftPass(drafting));
  // Each next pass: one row per sequence that wants more, at the position before its
  // last draft, with the draft and the previous pass's output row (as vLLM chains them).
  for (int64_t k = 2; k <= options_.num_speculative_tokens; ++k) {
    std::erase_if(drafting, [&](const Drafting& g) { return g.wanted < k; });
    if (drafting.empty()) break;
    for (size_t i = 0; i < drafting.size(); ++i) {
      Drafting& g = drafting[i];
      const std::span<const float> row(draft_hidden_.data() + g.row * d, static_cast<size_t>(d));
      AddDraftRows(*g.seq, g.seq->num_tokens() - 2, row);
      draft_spans_.back().logits = SpanLogits::kLast;
      g.row = static_cast<int64_t>(i);
    }
    // draft_hidden_ is read above before the pass writes it again.
    LATTE_RETURN_IF_ERROR(RunDraftPass(drafting));
  }
  step_model_seconds_ += SecondsSince(model_start);
  return Status::Ok();
}

void Engine::PublishStats() {
  counters_.running = scheduler_.num_running();
  counters_.waiting = scheduler_.num_waiting();
  counters_.kv_blocks_used = pool_.NumInUse();
  counters_.kv_blocks_cached = pool_.NumCached();
  counters_.prefix_queries = kv_.counters().queries;
  counters_.prefix_hits = kv_.counters().hits;
  counters_.preemptions = scheduler_.num_preemptions();
  if (group_) counters_.collective_seconds = group_->stats().TotalSeconds();
  if (data_parallel_ && leads() && !shapes_.empty()) {
    // Rank 0's own load as it is now, the other replicas' as their first ranks reported
    // it this step.
    counters_.ranks.clear();
    for (size_t q = 0; q * replica_ranks_ < shapes_.size(); ++q) {
      const StepShape& s = shapes_[q * replica_ranks_];
      const int rank = static_cast<int>(q) * replica_ranks_;
      counters_.ranks.push_back(q == 0 ? RankLoad{rank, counters_.running, counters_.waiting, counters_.kv_blocks_total,
                                                  counters_.kv_blocks_used, counters_.collective_seconds,
                                                  counters_.step_seconds}
                                       : RankLoad{rank, s.running, s.waiting, s.kv_blocks_total, s.kv_blocks_used,
                                                  s.collective_seconds, s.step_seconds});
      counters_.ranks.back().requests_assigned = q < assigned_.size() ? assigned_[q] : 0;
    }
  }
  std::lock_guard lock(mu_);
  published_ = counters_;
  published_.waiting += static_cast<int64_t>(inbox_.size());
  if (!published_.ranks.empty()) {
    published_.running = published_.waiting = published_.kv_blocks_total = published_.kv_blocks_used = 0;
    for (const RankLoad& r : published_.ranks) {
      published_.running += r.running;
      published_.waiting += r.waiting;
      published_.kv_blocks_total += r.kv_blocks_total;
      published_.kv_blocks_used += r.kv_blocks_used;
    }
    published_.waiting += static_cast<int64_t>(inbox_.size());
  }
}

EngineStats Engine::Stats() const {
  std::lock_guard lock(mu_);
  return published_;
}

}  // namespace latte
