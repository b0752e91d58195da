// Every option of a serving stack, declared once: where the model is, how its
// weights load, how many threads compute, the memory budget and the KV pool's shape,
// what one engine step holds, and whether prompts share cached prefixes. The CLI
// binds its flags straight to these fields (--max-num-seqs is scheduler.max_num_seqs);
// tests and each process of a multi-process run fill one in code. Validate() is the
// one check of the values; BuildServingStack (engine/serving_stack.h) runs it first.
#pragma once

#include <string>

#include "base/status.h"
#include "engine/memory_plan.h"
#include "engine/scheduler.h"
#include "model/model_weights.h"

namespace latte {

// The most compute threads a process takes.
inline constexpr int kMaxThreads = 1024;
// The most drafted tokens a sequence verifies in one step.
inline constexpr int64_t kMaxSpeculativeTokens = 16;

struct EngineConfig {
  std::string model;  // the model directory (config.json, safetensors, tokenizer.json)
  LoadOptions load;   // MLA mode, fp8 handling, quantize-at-load, huge pages
  int threads = 0;    // compute threads; 0: every core, one for a model under kSingleThreadModelBytes
  MemoryOptions memory;
  SchedulerConfig scheduler;
  bool prefix_caching = true;
  // A job of several ranks (load.parallel): --dist-check hashes the replicated residual
  // stream after every sublayer (DeepSeekModel::set_dist_check); a rank that waits
  // longer than dist_timeout_s seconds inside a collective ends the job, naming the
  // ranks that did not come (Comm::set_wait_limit; 0: never).
  bool dist_check = false;
  double dist_timeout_s = 600;
  // Speculative decoding (--speculative): "none", or "mtp" (drafts from the checkpoint's
  // multi-token-prediction layer, num_speculative_tokens per sequence per step).
  std::string speculative = "none";
  int64_t num_speculative_tokens = 1;
  bool speculates() const { return speculative == "mtp"; }

  // Each value on its own and the load options together, before anything is read;
  // an error names the field ("max_num_seqs", "block_size"), one message per value.
  Status Validate() const;
};

// Below this many bytes of weights a decode step takes ~100-300 us, and waking and
// joining a second thread costs more than it brings: the 2.9 MB default model decodes
// faster on one thread on a quiet 2-core machine, and 2-4x faster on one under load,
// while a 4.5 GB model gains from every core (docs/benchmarks.md, "Threads on a busy
// machine"). Sizes between those two were not measured; 64 MiB sits well inside them.
inline constexpr int64_t kSingleThreadModelBytes = int64_t{64} << 20;

// Sets OpenMP's (and so oneDNN's) thread count; 0 means every core.
void SetThreads(int threads);

// SetThreads for a model holding `weight_bytes`: `threads` as given; 0 means every
// core, or one thread for a model under kSingleThreadModelBytes.
void SetThreadsForModel(int threads, int64_t weight_bytes);

}  // namespace latte
