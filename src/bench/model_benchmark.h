// `latte bench model`: whole-model throughput in the style of llama-bench.
//   pp<P>: one forward of P prompt tokens into a fresh cache (prefill: the latent
//          path's decompress-prefill, as `generate` runs it);
//   tg<N>: N decode steps after a short prompt, B sequences decoding together
//          (each its own cache; the weights are read once per step for all B);
//   tg<N>@d<D>: the same after D tokens already in each cache (-d, the attention
//          over the D cached rows is part of the step and of its costs);
//   tg<N>x<V>: tg whose steps each run V tokens per sequence (--verify-tokens V: a
//          speculative step verifying V - 1 drafts), counted as one token per step.
// Each figure is mean ± sd tok/s over R runs after one warm-up run, printed beside
// the bytes and FLOPs per token computed from the config (model/cost_model.h:
// DecodeCostsPerToken, PrefillCostsPerToken), so the achieved GB/s and GFLOP/s can
// be set against the machine's measured peaks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "dist/comm.h"
#include "model/config.h"
#include "model/cost_model.h"
#include "model/mla_mode.h"
#include "model/model_weights.h"

namespace latte {

struct ModelBenchOptions {
  std::string model_dir;
  // Each value is a test, in order (llama-bench's lists: -p 128,512).
  std::vector<int64_t> prompts = {512};  // -p: pp test lengths (0: skip)
  std::vector<int64_t> gens = {128};     // -n: tg test lengths (0: skip)
  int64_t tg_prompt = 16;                // the short prompt before the timed decode steps (depth 0)
  // -d: tg decodes after `depth` tokens already in each sequence's cache (llama-bench's
  // --n-depth), filled by prefill in chunks of `depth_chunk` outside the timed region,
  // once per depth: every run restarts from the same filled cache. 0: the tg_prompt
  // prompt. Every tg length runs at every depth.
  std::vector<int64_t> depths = {0};
  int64_t depth_chunk = 512;
  int64_t repetitions = 5;  // -r, after one warm-up run
  int64_t batch = 1;        // sequences decoding together in tg
  // --verify-tokens: tg steps run this many tokens per sequence (one span on the decode
  // path, logits for every row): the shape of a speculative decoding step that checks
  // verify_tokens - 1 drafts. tok/s then counts sequence steps (one token each).
  int64_t verify_tokens = 1;
  // --paired-probe: tg tests take a read probe (bench/machine_probe.h: ReadProbe) before
  // and after each timed run, so each run's GB/s stands beside what the memory gave
  // within seconds of it. One process only.
  bool paired_read_probe = false;
  LoadOptions load = {.progress = false};  // MLA mode, --fp8, --quantize, --huge-pages; progress on stderr
};

struct ModelBenchResult {
  std::string test;  // "pp512", "tg128", "tg128@d8192"
  int64_t batch = 1;
  int64_t depth = 0;  // tg: tokens in each cache before the timed steps (-d); pp: 0
  int64_t tokens_per_run = 0;
  std::vector<double> tok_s;  // one per timed run
  // --paired-probe, tg: per timed run, the larger of the read probes just before and
  // just after it (the higher roof: the run's share of it is the lower), 1e9 bytes/s.
  std::vector<double> paired_read_gbps;
  std::vector<double> paired_read_fraction;  // per timed run: its GB/s (costs.Bytes() · tok/s) / paired_read_gbps
  double tok_s_mean = 0;
  double tok_s_sd = 0;         // sample standard deviation (0 for one run)
  TokenCosts costs;            // per token
  double achieved_gbps = 0;    // costs.Bytes() · tok_s_mean
  double achieved_gflops = 0;  // costs.flops · tok_s_mean
  // A job of several ranks: rank 0's collectives over the timed runs, their forward
  // passes (pp: one per run; tg: one per step) and the runs' time, so per forward and
  // as a share of the time.
  CommStats collectives;
  int64_t timed_forwards = 0;
  double timed_seconds = 0;
};

// The options on their own and against the model's config (every test fits in its
// context): what RunModelBenchmark checks before it loads anything.
Status CheckModelBenchOptions(const ModelBenchOptions& options, const ModelConfig& config);

// Loads the model once and runs pp then tg, calling `report` after each test.
Status RunModelBenchmark(const ModelBenchOptions& options,
                         void (*report)(const ModelBenchResult&, const ModelConfig&, void*), void* user);

}  // namespace latte
