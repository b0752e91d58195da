// Continuous batching with chunked prefill and recompute preemption, as vLLM's V1
// scheduler does it. Each step:
//   1. running sequences, in admission order, each get the tokens they still lack
//      rows for: one for a decoding sequence, the rest of the prompt (up to the
//      token budget) for one mid-prefill. When the pool cannot hold them, the most
//      recently admitted running sequence is preempted: its blocks are freed and it
//      goes back to the front of the waiting queue, to be recomputed from its prompt
//      and the tokens it already generated (its full blocks often still sit in the
//      prefix cache, so the recompute is mostly hits).
//   2. if nothing was preempted, waiting sequences are admitted first come, first
//      served while the budget (max_num_batched_tokens) and max_num_seqs allow: each
//      takes its cached prefix, then a chunk of the rest of its prompt.
// A sequence is only ever admitted when it can fit alone (Engine refuses the rest),
// so preemption always makes progress.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/sequence.h"

namespace latte {

struct SchedulerConfig {
  int64_t max_num_seqs = 64;             // running sequences at once
  int64_t max_num_batched_tokens = 512;  // tokens in one forward pass
};

// One sequence's share of a step: positions [start, start + count).
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t start = 0;
  int64_t count = 0;
  bool samples = false;  // the chunk ends at the sequence's last token: sample after it
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv) : config_(config), kv_(kv) {}

  void Add(Sequence* seq);
  // Takes seq out of whichever queue holds it and frees its blocks.
  void Remove(Sequence* seq);
  // This step's chunks: decodes first (running order), then prefill chunks.
  const std::vector<ScheduledChunk>& Schedule();
  // After the forward pass: every scheduled chunk's rows are written.
  void Completed();

  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_preemptions() const { return preemptions_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  const SchedulerConfig& config() const { return config_; }

 private:
  void Preempt(Sequence* seq);
  bool TryAdmit(Sequence* seq, int64_t& budget);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::vector<Sequence*> running_;  // admission order
  std::deque<Sequence*> waiting_;
  std::vector<ScheduledChunk> chunks_;
  int64_t preemptions_ = 0;
};

}  // namespace latte
