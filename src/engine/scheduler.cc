#include "engine/scheduler.h"

#include <algorithm>

namespace latte {

void Scheduler::Add(Sequence* seq) {
  seq->state = SequenceState::kWaiting;
  waiting_.push_back(seq);
}

void Scheduler::Remove(Sequence* seq) {
  std::erase(running_, seq);
  std::erase(waiting_, seq);
  kv_.Free(seq->blocks);
  seq->num_computed = 0;
  seq->state = SequenceState::kFinished;
}

void Scheduler::Preempt(Sequence* seq) {
  std::erase(running_, seq);
  kv_.Free(seq->blocks);
  seq->num_computed = 0;
  seq->state = SequenceState::kWaiting;
  ++seq->preemptions;
  ++preemptions_;
  waiting_.push_front(seq);
}

const std::vector<ScheduledChunk>& Scheduler::Schedule() {
  chunks_.clear();
  int64_t budget = config_.max_num_batched_tokens;
  bool preempted = false;

  // Decodes before prefill chunks, so a long prompt never starves running decodes.
  std::vector<Sequence*> order;
  order.reserve(running_.size());
  for (Sequence* s : running_) {
    if (s->prompt_computed()) order.push_back(s);
  }
  for (Sequence* s : running_) {
    if (!s->prompt_computed()) order.push_back(s);
  }
  for (Sequence* seq : order) {
    if (budget == 0) break;
    if (seq->state != SequenceState::kRunning) continue;  // preempted below, this step
    const int64_t count = std::min(seq->num_tokens() - seq->num_computed, budget);
    bool fits = true;
    while (!kv_.Grow(seq->blocks, seq->num_computed + count)) {
      Sequence* victim = running_.back();  // the most recently admitted
      Preempt(victim);
      preempted = true;
      if (victim == seq) {
        fits = false;
        break;
      }
      // A victim scheduled earlier in this step gives back its chunk.
      for (auto it = chunks_.begin(); it != chunks_.end(); ++it) {
        if (it->seq == victim) {
          budget += it->count;
          chunks_.erase(it);
          break;
        }
      }
    }
    if (!fits) continue;
    chunks_.push_back({seq, seq->num_computed, count, seq->num_computed + count == seq->num_tokens()});
    budget -= count;
  }

  if (!preempted) {
    for (auto it = waiting_.begin(); it != waiting_.end() && budget > 0;) {
      if (num_running() >= config_.max_num_seqs) break;
      Sequence* seq = *it;
      if (seq->leader != nullptr && seq->leader->state != SequenceState::kFinished && !seq->leader->prompt_computed()) {
        ++it;  // waits for its leader's prompt blocks
        continue;
      }
      if (!TryAdmit(seq, budget)) break;  // first come, first served: no overtaking
      it = waiting_.erase(it);
    }
  }
  return chunks_;
}

bool Scheduler::TryAdmit(Sequence* seq, int64_t& budget) {
  if (!seq->needs_prompt_logits) seq->num_computed = kv_.MatchPrefix(seq->tokens, seq->blocks);
  const int64_t count = std::min(seq->num_tokens() - seq->num_computed, budget);
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
  chunks_.push_back({seq, seq->num_computed, count, seq->num_computed + count == seq->num_tokens()});
  budget -= count;
  return true;
}

void Scheduler::Completed() {
  for (const ScheduledChunk& c : chunks_) {
    Sequence* seq = c.seq;
    seq->num_computed = c.start + c.count;
    kv_.RegisterFullBlocks(seq->tokens, seq->num_computed, seq->blocks);
  }
}

}  // namespace latte
