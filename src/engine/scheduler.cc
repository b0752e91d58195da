#include "engine/scheduler.h"

#include <algorithm>

namespace latte {

namespace {

Status CheckCount(const char* field, int64_t value, int64_t max) {
  if (value >= 1 && value <= max) return Status::Ok();
  return Status::InvalidArgument(
      std::string(field) + " must be in [1, " + std::to_string(max) + "], got " + std::to_string(value), field);
}

}  // namespace

Status SchedulerConfig::Validate() const {
  LATTE_RETURN_IF_ERROR(CheckCount("max_num_seqs", max_num_seqs, int64_t{1} << 20));
  LATTE_RETURN_IF_ERROR(CheckCount("max_num_batched_tokens", max_num_batched_tokens, int64_t{1} << 24));
  LATTE_RETURN_IF_ERROR(CheckCount("max_prefill_burst_tokens", max_prefill_burst_tokens, int64_t{1} << 30));
  if (long_prefill_token_threshold < 0 || long_prefill_token_threshold > max_num_batched_tokens) {
    return Status::InvalidArgument("long_prefill_token_threshold must be in [0, max_num_batched_tokens = " +
                                       std::to_string(max_num_batched_tokens) + "], got " +
                                       std::to_string(long_prefill_token_threshold),
                                   "long_prefill_token_threshold");
  }
  if (max_prefill_attention_pairs < -1) {
    return Status::InvalidArgument(
        "max_prefill_attention_pairs must be >= -1 (0: derived from the model, -1: no cap), "
        "got " +
            std::to_string(max_prefill_attention_pairs),
        "max_prefill_attention_pairs");
  }
  return Status::Ok();
}

int64_t SchedulerConfig::MaxPrefillAttentionPairs() const {
  const int64_t cap = max_prefill_attention_pairs == 0 ? auto_prefill_attention_pairs : max_prefill_attention_pairs;
  return cap > 0 ? cap : kNoPairCap;
}

int64_t SchedulerConfig::ContendedPrefillAttentionPairs() const {
  const int64_t cap = MaxPrefillAttentionPairs();
  if (cap == kNoPairCap) return cap;
  return std::min(cap, LongPrefillThreshold() * max_num_batched_tokens);
}

int64_t SchedulerConfig::LongPrefillThreshold() const {
  return long_prefill_token_threshold > 0 ? long_prefill_token_threshold
                                          : std::max<int64_t>(1, max_num_batched_tokens / 2);
}

void Scheduler::Add(Sequence* seq) {
  seq->state = SequenceState::kWaiting;
  waiting_.push_back(seq);
}

void Scheduler::Remove(Sequence* seq) {
  seq->DropDrafts(seq->drafts);
  std::erase(running_, seq);
  std::erase(waiting_, seq);
  kv_.Free(seq->blocks);
  seq->num_computed = 0;
  seq->state = SequenceState::kFinished;
}

void Scheduler::Preempt(Sequence* seq) {
  seq->DropDrafts(seq->drafts);  // recomputed from what was verified
  std::erase(running_, seq);
  kv_.Free(seq->blocks);
  seq->num_computed = 0;
  seq->state = SequenceState::kWaiting;
  ++seq->preemptions;
  ++preemptions_;
  waiting_.push_front(seq);
}

namespace {

bool IsPromptChunk(const ScheduledChunk& c) { return c.start < c.seq->prompt_len; }

// An n > 1 choice waits for its leader's prompt blocks before it is admitted.
bool WaitsForLeader(const Sequence& s) {
  return s.leader != nullptr && s.leader->state != SequenceState::kFinished && !s.leader->prompt_computed();
}

}  // namespace

int64_t Scheduler::PendingPromptTokens(int64_t enough) const {
  int64_t pending = 0;
  for (const Sequence* s : running_) {
    if (!s->prompt_computed()) pending += s->num_tokens() - s->num_computed;
    if (pending > enough) return pending;
  }
  if (num_running() >= config_.max_num_seqs) return pending;
  for (const Sequence* s : waiting_) {
    pending += s->num_tokens() - s->num_computed;
    if (pending > enough) break;
  }
  return pending;
}

const std::vector<ScheduledChunk>& Scheduler::Schedule() {
  chunks_.clear();
  preempted_ = false;
  const int64_t step_tokens = config_.max_num_batched_tokens;
  const int64_t burst = config_.max_prefill_burst_tokens;
  std::vector<Sequence*> decoding, prefilling;  // running order
  for (Sequence* s : running_) (s->prompt_computed() ? decoding : prefilling).push_back(s);

  // Decodes sit out a step that prompts fill, unless it is the burst's last.
  const bool decodes_wait =
      !decoding.empty() && burst_tokens_ + step_tokens < burst && PendingPromptTokens(step_tokens) > step_tokens;
  const int64_t prompt_tokens =
      decoding.empty() || decodes_wait ? step_tokens : std::max<int64_t>(0, burst - burst_tokens_);
  // More than one prompt wants tokens: each chunk of them is capped, so a long one
  // leaves the rest of the step to the others.
  const bool prompts_contend = prefilling.size() + AdmittableWaiting() > 1;
  const Sequence* next_waiting = prompts_contend ? FirstAdmittableWaiting() : nullptr;
  // A threshold of the whole step turns sharing off, and this with it.
  const bool long_prompts_sit_out = next_waiting != nullptr && IsShortPrompt(*next_waiting) && !long_prompts_sat_out_ &&
                                    config_.LongPrefillThreshold() < step_tokens;
  bool sat_out = false;
  StepBudget budget{step_tokens, prompt_tokens, prompts_contend ? config_.LongPrefillThreshold() : step_tokens,
                    prompts_contend ? config_.ContendedPrefillAttentionPairs() : config_.MaxPrefillAttentionPairs()};
  const auto schedule_decodes = [&] {
    for (Sequence* seq : decoding) {
      if (budget.tokens == 0) break;
      if (seq->state == SequenceState::kRunning) ScheduleRunning(seq, budget);  // else preempted, this step
    }
  };
  // Decodes before prefill chunks, so a long prompt never starves running decodes.
  if (!decodes_wait) schedule_decodes();
  for (Sequence* seq : prefilling) {
    if (budget.tokens == 0 || budget.prompt == 0) break;
    if (long_prompts_sit_out && !IsShortPrompt(*seq)) {
      sat_out = true;
      continue;
    }
    if (seq->state == SequenceState::kRunning) ScheduleRunning(seq, budget);
  }
  if (!preempted_) {
    for (auto it = waiting_.begin(); it != waiting_.end() && budget.tokens > 0 && budget.prompt > 0;) {
      if (num_running() >= config_.max_num_seqs) break;
      Sequence* seq = *it;
      if (WaitsForLeader(*seq)) {
        ++it;
        continue;
      }
      if (!TryAdmit(seq, budget)) break;  // first come, first served: no overtaking
      it = waiting_.erase(it);
    }
  }

  if (prompts_contend) TopUpPromptChunks(budget);

  int64_t prompt_run = 0;
  for (const ScheduledChunk& c : chunks_) {
    if (IsPromptChunk(c)) prompt_run += c.count;
  }
  bool decoded = !decodes_wait;
  if (decodes_wait && prompt_run < step_tokens) {
    // Prompts did not fill the step after all (prefix hits, a full pool): the burst
    // ends here, and the decodes go first as always.
    schedule_decodes();
    std::sort(decoding.begin(), decoding.end());
    std::stable_partition(chunks_.begin(), chunks_.end(), [&](const ScheduledChunk& c) {
      return std::binary_search(decoding.begin(), decoding.end(), c.seq);
    });
    decoded = true;
  }
  burst_tokens_ = decoding.empty() || decoded ? 0 : burst_tokens_ + prompt_run;
  long_prompts_sat_out_ = sat_out;
  return chunks_;
}

int64_t Scheduler::AdmittableWaiting() const {
  if (num_running() >= config_.max_num_seqs) return 0;
  int64_t admittable = 0;
  for (const Sequence* s : waiting_) {
    if (!WaitsForLeader(*s) && ++admittable > 1) break;  // more than one is all Schedule asks
  }
  return admittable;
}

const Sequence* Scheduler::FirstAdmittableWaiting() const {
  if (num_running() >= config_.max_num_seqs) return nullptr;
  for (const Sequence* s : waiting_) {
    if (!WaitsForLeader(*s)) return s;
  }
  return nullptr;
}

bool Scheduler::IsShortPrompt(const Sequence& seq) const {
  return seq.num_tokens() - seq.num_computed <= config_.LongPrefillThreshold();
}

void Scheduler::TopUpPromptChunks(StepBudget& budget) {
  for (ScheduledChunk& c : chunks_) {
    if (budget.tokens == 0 || budget.prompt == 0) return;
    if (!IsPromptChunk(c)) continue;
    const int64_t end = c.start + c.count;
    const int64_t more =
        PairCappedTokens(c.start, c.count + std::min({c.seq->num_tokens() - end, budget.tokens, budget.prompt}),
                         budget.pairs) -
        c.count;
    if (more <= 0 || !kv_.Grow(c.seq->blocks, end + more)) continue;
    c.count += more;
    c.samples = c.start + c.count == c.seq->num_tokens();
    budget.tokens -= more;
    budget.prompt -= more;
  }
}

int64_t Scheduler::ChunkTokens(const Sequence& seq, const StepBudget& budget) const {
  const int64_t left = seq.num_tokens() - seq.num_computed;
  if (seq.prompt_computed()) return std::min(left, budget.tokens);
  return PairCappedTokens(seq.num_computed, std::min({left, budget.tokens, budget.prompt, budget.prompt_chunk}),
                          budget.pairs);
}

int64_t Scheduler::PairCappedTokens(int64_t start, int64_t tokens, int64_t pairs) const {
  const int64_t kept = config_.kept_prefix_positions;
  const double latent_cost = config_.latent_key_pair_cost;
  if (tokens <= 1 || pairs == SchedulerConfig::kNoPairCap || (latent_cost <= 0 && start + tokens > kept)) {
    return tokens;
  }
  // A chunk of c tokens: c × (start + c) pairs, those with keys past `kept` weighted.
  const auto cost = [&](int64_t c) {
    const int64_t keys = start + c, kept_keys = std::min(keys, kept);
    return static_cast<double>(c) *
           (static_cast<double>(kept_keys) + latent_cost * static_cast<double>(keys - kept_keys));
  };
  // The largest c that costs at most `pairs`, at least the floor so the prompt moves.
  int64_t lo = std::clamp<int64_t>(config_.min_pair_capped_tokens, 1, tokens), hi = tokens;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (cost(mid) <= static_cast<double>(pairs)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

void Scheduler::ScheduleRunning(Sequence* seq, StepBudget& budget) {
  int64_t count = ChunkTokens(*seq, budget);
  // Drafts the step has no room for are dropped (a chunk always ends at the last token).
  seq->DropDrafts(std::min(seq->drafts, seq->num_tokens() - seq->num_computed - count));
  while (!kv_.Grow(seq->blocks, seq->num_computed + count)) {
    if (seq->drafts > 0) {  // a full pool drops drafts before it preempts anyone
      count -= seq->drafts;
      seq->DropDrafts(seq->drafts);
      continue;
    }
    Sequence* victim = running_.back();  // the most recently admitted
    Preempt(victim);
    preempted_ = true;
    if (victim == seq) return;
    // A victim scheduled earlier in this step gives back its chunk.
    for (auto it = chunks_.begin(); it != chunks_.end(); ++it) {
      if (it->seq == victim) {
        budget.tokens += it->count;
        if (IsPromptChunk(*it)) budget.prompt += it->count;
        chunks_.erase(it);
        break;
      }
    }
  }
  AddChunk(seq, count, budget);
}

bool Scheduler::TryAdmit(Sequence* seq, StepBudget& budget) {
  if (!seq->needs_prompt_logits) seq->num_computed = kv_.MatchPrefix(seq->tokens, seq->blocks);
  const int64_t count = ChunkTokens(*seq, budget);
  if (!kv_.Grow(seq->blocks, seq->num_computed + count)) {
    kv_.Free(seq->blocks);
    seq->num_computed = 0;
    return false;
  }
  if (kv_.pool().prefix_caching() && !seq->needs_prompt_logits) {
    kv_.CountPrefixLookup(seq->num_tokens(), seq->num_computed);
  }
  seq->state = SequenceState::kRunning;
  running_.push_back(seq);
  AddChunk(seq, count, budget);
  return true;
}

void Scheduler::AddChunk(Sequence* seq, int64_t count, StepBudget& budget) {
  const ScheduledChunk chunk{seq, seq->num_computed, count, seq->num_computed + count == seq->num_tokens()};
  budget.tokens -= count;
  if (IsPromptChunk(chunk)) budget.prompt -= count;
  chunks_.push_back(chunk);
}

void Scheduler::Completed() {
  for (const ScheduledChunk& c : chunks_) {
    Sequence* seq = c.seq;
    seq->num_computed = c.start + c.count;
    // Rows of drafts stand only once verified (the engine registers them then).
    kv_.RegisterFullBlocks(seq->tokens, std::min(seq->num_computed, seq->num_tokens() - seq->drafts), seq->blocks);
  }
}

}  // namespace latte
