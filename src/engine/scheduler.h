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
// Prefill bursts: while more prompt tokens wait than one step holds, decoding sequences
// sit out steps, so that a step's whole budget goes to prompts, until
// max_prefill_burst_tokens prompt tokens have run since their last token; the step that
// ends the burst carries their next token. So a decode waits for a burst of prompt
// tokens a few times, instead of for a chunk in every step: llama.cpp's server decodes
// with each n_batch (2048) of prompt tokens the same way. A burst equal to
// max_num_batched_tokens gives vLLM's schedule, a decode token in every step.
// Long prompts share: while more than one prompt wants tokens (another mid-prefill, or
// one waiting that could be admitted), no prompt chunk takes more than
// long_prefill_token_threshold tokens, so a short request that arrives behind a long
// prompt is admitted in the next step instead of after the whole prefill (vLLM's
// --long-prefill-token-threshold). A prompt alone takes whole steps of tokens.
// Short prompts first: in a step where the first waiting prompt that can be admitted
// is short (its tokens fit one chunk under long_prefill_token_threshold), the long
// prompts mid-prefill sit the step out, so the short one's first token costs one step
// of its own rather than one shared with a deep chunk; never two steps in a row, so a
// stream of short requests slows a long prompt at most twofold and never starves it.
// Deep prompts' chunks are sized by their attention too: a chunk of c tokens after L
// computed ones attends over c × (L + c) query-key pairs, a cost that grows with the
// depth whatever the chunk's token count, so it is kept under a cap (by default one the
// engine derives from the model: a step's attention at most about twice the time of its
// weight reads; and, while other prompts want tokens, under
// long_prefill_token_threshold × max_num_batched_tokens): a step beside a 16k-deep
// prefill then lasts about as long as one at the start of it, and a request that
// arrives meanwhile waits for a short step. Past the positions whose decompressed K/V
// the engine keeps across a prompt's chunks (kept_prefix_positions), a chunk attends to
// the keys beyond them in latent form, at latent_key_pair_cost the arithmetic of a pair
// within them, and is capped counting them so; where nothing is kept, or the model has
// no latent form (naive mode), a chunk past them decompresses its whole prefix again,
// smaller chunks would only multiply that, and they are not capped.
// A sequence is only ever admitted when it can fit alone (Engine refuses the rest),
// so preemption always makes progress.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <vector>

#include "base/status.h"
#include "engine/kv_cache_manager.h"
#include "engine/sequence.h"

namespace latte {

struct SchedulerConfig {
  int64_t max_num_seqs = 64;             // running sequences at once
  int64_t max_num_batched_tokens = 512;  // tokens in one forward pass
  // At most this many prompt tokens run between two tokens of a decoding sequence.
  int64_t max_prefill_burst_tokens = 2048;
  // The most tokens one prompt chunk takes while other prompts want tokens too; 0: half
  // of max_num_batched_tokens.
  int64_t long_prefill_token_threshold = 0;
  // long_prefill_token_threshold, resolved.
  int64_t LongPrefillThreshold() const;
  // The most query-key pairs, c × (L + c), one prompt chunk attends over in a step;
  // 0: auto_prefill_attention_pairs; -1: no such cap (chunks sized by tokens only).
  int64_t max_prefill_attention_pairs = 0;
  // Set by the engine from the model unless given (PrefillAttentionPairsFor; 0 after
  // that: none): the pairs whose attention takes about twice as long as reading the
  // weights a prefill step streams, so a capped step costs at most ~1.5× its attention
  // and a step beside a deep prompt stays short. Ranks that schedule in lockstep are
  // given the same value.
  int64_t auto_prefill_attention_pairs = 0;
  // Resolved: alone, and while other prompts want tokens too; kNoPairCap where no cap applies.
  static constexpr int64_t kNoPairCap = std::numeric_limits<int64_t>::max();
  int64_t MaxPrefillAttentionPairs() const;
  int64_t ContendedPrefillAttentionPairs() const;
  // Set by the engine: a prompt's positions whose decompressed K/V it keeps across the
  // prompt's chunks (0: none).
  int64_t kept_prefix_positions = 0;
  // What a query-key pair with its key past kept_prefix_positions costs against one
  // within them, its key attended in latent form (SequenceSpan::latent_keys_from): set by
  // the engine (LatentKeyPairCostFor) unless given; ranks that schedule in lockstep are
  // given the same value. 0 after that: the keys are decompressed again in every chunk,
  // and chunks that end past kept_prefix_positions are not capped by pairs.
  double latent_key_pair_cost = 0;
  // Set by the engine: the fewest tokens a chunk cut by its pairs keeps (while the prompt
  // has them). Attention over fewer queries than the kernels' tiled form takes costs more
  // per pair, and every step streams the weights again, so thinner chunks only lose.
  int64_t min_pair_capped_tokens = 1;

  // Each value in its range; an error names the field ("max_num_seqs").
  Status Validate() const;
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
  // This step's chunks: decodes first (running order), then prefill chunks. Decodes are
  // left out of a step that is not the last of a prefill burst.
  const std::vector<ScheduledChunk>& Schedule();
  // After the forward pass: every scheduled chunk's rows are written.
  void Completed();

  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_preemptions() const { return preemptions_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  const SchedulerConfig& config() const { return config_; }

 private:
  // What is left of this step's tokens, and of them, for prompt tokens.
  struct StepBudget {
    int64_t tokens = 0;
    int64_t prompt = 0;
    int64_t prompt_chunk = 0;  // the most one prompt chunk takes
    int64_t pairs = 0;         // the most query-key pairs one prompt chunk attends over
  };

  void Preempt(Sequence* seq);
  // Prompt tokens still to run: the rest of the running prompts, and the waiting ones
  // while a sequence could be admitted; counting stops once it passes `enough`.
  int64_t PendingPromptTokens(int64_t enough) const;
  // The tokens seq's next chunk takes: what it lacks rows for, within the step's tokens
  // and, while in its prompt, the step's prompt tokens and the prompt chunk cap.
  int64_t ChunkTokens(const Sequence& seq, const StepBudget& budget) const;
  // The most tokens a prompt chunk from position `start` may take under `pairs`.
  int64_t PairCappedTokens(int64_t start, int64_t tokens, int64_t pairs) const;
  // Schedules the next chunk of a running sequence, preempting the most recently
  // admitted ones while the pool cannot hold it (seq itself, at worst).
  void ScheduleRunning(Sequence* seq, StepBudget& budget);
  bool TryAdmit(Sequence* seq, StepBudget& budget);
  void AddChunk(Sequence* seq, int64_t count, StepBudget& budget);
  // Waiting sequences that could be admitted now (not waiting for a leader's prompt),
  // counted up to 2.
  int64_t AdmittableWaiting() const;
  // The first waiting sequence that could be admitted now, or nullptr.
  const Sequence* FirstAdmittableWaiting() const;
  // Its prompt fits one chunk under the long-prompt threshold (short prompts first).
  bool IsShortPrompt(const Sequence& seq) const;
  // After admission: the step's tokens the prompt chunk cap kept and nothing else took
  // go back to the capped prompt chunks, in order, so prompts still fill the step.
  void TopUpPromptChunks(StepBudget& budget);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::vector<Sequence*> running_;  // admission order
  std::deque<Sequence*> waiting_;
  std::vector<ScheduledChunk> chunks_;
  bool preempted_ = false;             // in this step
  bool long_prompts_sat_out_ = false;  // in the last step, for a short prompt
  int64_t burst_tokens_ = 0;           // prompt tokens run since decoding sequences last took a token
  int64_t preemptions_ = 0;
};

}  // namespace latte
