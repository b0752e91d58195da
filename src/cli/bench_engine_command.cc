// latte bench engine: the serving engine's offline throughput
// (bench/engine_benchmark.h), as vLLM's bench throughput measures it: random prompts of
// fixed lengths through a started engine, its throughput, step time and forward-pass
// share printed as a few lines or one JSON object.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "bench/engine_benchmark.h"
#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "engine/serving_stack.h"
#include "model/config.h"

namespace latte::cli {
namespace {

struct EngineArgs {
  EngineConfig engine;
  EngineBenchOptions bench;
  int64_t warmup_prompts = 0;
  bool json = false;
};

// The run as one JSON object: the requests, the engine's limits, the figures.
nlohmann::json EngineResultJson(const EngineArgs& args, const EngineOptions& e, const EngineBenchResult& r) {
  return {{"num_prompts", r.requests},
          {"input_len", args.bench.input_len},
          {"output_len", args.bench.output_len},
          {"max_concurrency", args.bench.max_concurrency},
          {"threads", omp_get_max_threads()},
          {"mla_mode", MlaModeName(args.engine.load.mode)},
          {"max_num_seqs", e.scheduler.max_num_seqs},
          {"max_num_batched_tokens", e.scheduler.max_num_batched_tokens},
          {"max_prefill_burst_tokens", e.scheduler.max_prefill_burst_tokens},
          {"long_prefill_token_threshold", e.scheduler.LongPrefillThreshold()},
          {"seconds", r.seconds},
          {"input_tokens", r.input_tokens},
          {"output_tokens", r.output_tokens},
          {"requests_per_s", r.requests_per_s},
          {"output_tok_s", r.output_tok_s},
          {"total_tok_s", r.total_tok_s},
          {"step_seconds", r.step_seconds},
          {"model_seconds", r.model_seconds},
          {"overhead_share", r.overhead_share},
          {"steps", r.stats.steps},
          {"preemptions", r.stats.preemptions},
          {"prefix_hits", r.stats.prefix_hits},
          {"speculative", args.engine.speculative},
          {"num_speculative_tokens", args.engine.speculates() ? args.engine.num_speculative_tokens : 0},
          {"spec_drafts", r.stats.spec_drafts},
          {"spec_draft_tokens", r.stats.spec_draft_tokens},
          {"spec_accepted_tokens", r.stats.spec_accepted_tokens},
          {"spec_accepted_per_position", r.stats.spec_accepted_per_position}};
}

// The run as a few lines: the requests, throughput, where the time went, the cache.
void PrintEngineResult(const EngineArgs& args, const EngineBenchResult& r) {
  std::printf("%lld requests of %lld + %lld tokens, max concurrency %lld, %s, %d threads\n",
              static_cast<long long>(r.requests), static_cast<long long>(args.bench.input_len),
              static_cast<long long>(args.bench.output_len), static_cast<long long>(args.bench.max_concurrency),
              std::string(MlaModeName(args.engine.load.mode)).c_str(), omp_get_max_threads());
  std::printf("Throughput: %.2f requests/s, %.2f output tok/s, %.2f total tok/s (%.2f s)\n", r.requests_per_s,
              r.output_tok_s, r.total_tok_s, r.seconds);
  std::printf("Engine steps: %lld, %.3f s in steps, %.3f s in the forward pass: %.2f%% outside it\n",
              static_cast<long long>(r.stats.steps), r.step_seconds, r.model_seconds, 100.0 * r.overhead_share);
  std::printf("Preemptions: %lld, prefix-cache hits: %lld of %lld prompt tokens\n",
              static_cast<long long>(r.stats.preemptions), static_cast<long long>(r.stats.prefix_hits),
              static_cast<long long>(r.stats.prefix_queries));
  if (r.stats.spec_drafts > 0) {
    std::printf("Speculative (mtp, %lld drafts): %lld of %lld drafted tokens accepted (%.1f%%), by position:",
                static_cast<long long>(args.engine.num_speculative_tokens),
                static_cast<long long>(r.stats.spec_accepted_tokens), static_cast<long long>(r.stats.spec_draft_tokens),
                100.0 * r.stats.spec_accepted_tokens / std::max<int64_t>(1, r.stats.spec_draft_tokens));
    for (int64_t a : r.stats.spec_accepted_per_position) {
      std::printf(" %.1f%%", 100.0 * a / std::max<int64_t>(1, r.stats.spec_drafts));
    }
    std::printf("\n");
  }
}

Status RunEngine(const EngineArgs& args, const CLI::App& cmd) {
  LATTE_RETURN_IF_ERROR(AsFlagError(args.engine.Validate()));
  auto previewed = PreviewModel(args.engine.model);
  if (!previewed.ok()) return AsFlagError(previewed.status());
  ModelPreview preview = std::move(previewed).value();
  LATTE_RETURN_IF_ERROR(
      RefuseUnless(cmd, preview.config.quantization.has_value(), {"--fp8"}, "on a checkpoint without fp8 weights"));
  LATTE_RETURN_IF_ERROR(CheckContextLength(preview.config, args.bench.input_len + args.bench.output_len,
                                           "--input-len (" + std::to_string(args.bench.input_len) +
                                               ") plus --output-len (" + std::to_string(args.bench.output_len) + ")"));
  auto built = BuildServingStack(args.engine, /*log=*/!args.json, std::move(preview.tokenizer));
  if (!built.ok()) return AsFlagError(built.status());
  std::unique_ptr<ServingStack> stack = std::move(built).value();
  if (!stack->engine->leads()) {  // the other ranks run rank 0's requests in lockstep
    stack->engine->WaitForLeaderToStop();
    return Status::Ok();
  }
  const int64_t vocab = stack->model->config().vocab_size;
  if (args.warmup_prompts > 0) {
    EngineBenchOptions warmup = args.bench;
    warmup.num_prompts = args.warmup_prompts;
    warmup.seed = ~args.bench.seed;  // other prompt ids: the timed run gets no prefix-cache hit from these
    LATTE_RETURN_IF_ERROR(RunEngineBenchmark(*stack->engine, vocab, warmup).status());
  }
  LATTE_ASSIGN_OR_RETURN(EngineBenchResult r, RunEngineBenchmark(*stack->engine, vocab, args.bench));
  const EngineOptions& e = stack->engine->options();
  if (args.json) {
    std::printf("%s\n", EngineResultJson(args, e, r).dump().c_str());
  } else {
    PrintEngineResult(args, r);
  }
  std::fflush(stdout);
  stack->engine->Stop();
  return Status::Ok();
}

}  // namespace

void AddBenchEngineCommand(CLI::App& bench) {
  auto engine = std::make_shared<EngineArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "engine", "The serving engine's offline throughput (as vLLM's bench throughput): random prompts, fixed lengths");
  AddEngineFlags(*cmd, engine->engine);
  cmd->add_option("--num-prompts", engine->bench.num_prompts, "Requests")
      ->check(IntIn(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--input-len", engine->bench.input_len, "Prompt tokens per request (random ids)")
      ->check(IntIn(1, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--output-len", engine->bench.output_len, "Tokens generated per request (EOS ignored)")
      ->check(IntIn(1, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--max-concurrency", engine->bench.max_concurrency,
                  "Requests in flight at once; a new one is submitted as one finishes (0: all at once)")
      ->check(IntIn(0, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--warmup-prompts", engine->warmup_prompts,
                  "Requests of the same shape run untimed first (other prompt ids), so the timed run starts with "
                  "the engine's buffers grown and its GEMM kernels built, as bench model's warm-up run does")
      ->check(IntIn(0, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--seed", engine->bench.seed, "Seed of the prompt ids and of the sampling")->capture_default_str();
  cmd->add_flag("--json", engine->json, "One JSON object");
  cmd->callback([engine, cmd] { ExitOnError("bench engine", RunEngine(*engine, *cmd)); });
}

}  // namespace latte::cli
