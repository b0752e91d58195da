// `latte bench engine`: offline throughput of the serving engine, as vLLM's
// `bench throughput` measures it: N requests of random prompt ids (input_len
// tokens each) asking for exactly output_len tokens (ignore_eos, sampled at
// temperature 1 with a seed per request), at most C in flight at once (a new one
// is submitted as one finishes), on the engine's own thread as `latte serve` runs it.
// Reported: requests/s, output and total tok/s over the whole run, and the share of
// the engine's step time spent outside the model's forward pass (scheduling,
// sampling, stop checks, detokenizing, pushing outputs).
#pragma once

#include <cstdint>

#include "base/status.h"
#include "engine/engine.h"

namespace latte {

struct EngineBenchOptions {
  int64_t num_prompts = 64;
  int64_t input_len = 128;
  int64_t output_len = 128;
  int64_t max_concurrency = 0;  // 0: every request submitted at once
  uint64_t seed = 0;            // prompt ids and sampling seeds
};

struct EngineBenchResult {
  int64_t requests = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  double seconds = 0;  // first submit to last output
  double requests_per_s = 0;
  double output_tok_s = 0;
  double total_tok_s = 0;     // (input + output) tokens / seconds
  double step_seconds = 0;    // the engine's steps, summed
  double model_seconds = 0;   // of those, inside the forward passes
  double overhead_share = 0;  // 1 - model_seconds / step_seconds
  EngineStats stats;          // the engine's stats after the run; steps, preemptions and prefix counts: the run's own
};

// Runs the benchmark on a started engine (Engine::Start) with nothing else in it.
// `vocab`: prompt ids are drawn from [0, vocab).
Result<EngineBenchResult> RunEngineBenchmark(Engine& engine, int64_t vocab, const EngineBenchOptions& options);

}  // namespace latte
