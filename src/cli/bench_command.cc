// latte bench: measurements the project reports in docs/benchmarks.md.
//   latte bench attn — one MLA layer's decode step in each mode (engine/attention_benchmark.h)
#include <omp.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/attention_benchmark.h"
#include "kernels/memory_probe.h"
#include "model/presets.h"

namespace latte::cli {
namespace {

struct AttnArgs {
  std::string preset = "r1";
  std::string config;
  std::vector<int64_t> batches = {1, 16};
  std::vector<int64_t> contexts = {1024, 4096, 16384, 32768};
  std::vector<std::string> modes = {"absorbed", "materialized", "naive"};
  double min_seconds = 1.0;
  int threads = 0;
  bool json = false;
};

struct PrintContext {
  bool json = false;
  double read_gbps = 0;  // the machine's read bandwidth, measured at the start of the run
  std::vector<AttentionBenchPoint> points;
};

// materialized / absorbed time for every (batch, context) measured in both modes.
void PrintRatios(const std::vector<AttentionBenchPoint>& points) {
  bool header = false;
  for (const AttentionBenchPoint& a : points) {
    if (a.mode != MlaMode::kAbsorbed) continue;
    for (const AttentionBenchPoint& m : points) {
      if (m.mode != MlaMode::kMaterialized || m.batch != a.batch || m.context != a.context) continue;
      if (!header) {
        std::printf("\n%6s %8s %22s %22s %20s\n", "batch", "context", "time mat/abs", "weight bytes mat/abs",
                    "FLOPs mat/abs");
        header = true;
      }
      std::printf("%6lld %8lld %21.2fx %21.2fx %19.2fx\n", static_cast<long long>(a.batch),
                  static_cast<long long>(a.context), m.ms_per_step / a.ms_per_step,
                  double(m.weight_bytes) / a.weight_bytes, double(m.flops) / a.flops);
    }
  }
}

void PrintPoint(const AttentionBenchPoint& p, void* user) {
  auto& ctx = *static_cast<PrintContext*>(user);
  ctx.points.push_back(p);
  const bool json = ctx.json;
  if (json) {
    nlohmann::json j = {{"mode", MlaModeName(p.mode)},   {"batch", p.batch},
                        {"context", p.context},          {"ms_per_step", p.ms_per_step},
                        {"steps", p.steps},              {"weight_bytes", p.weight_bytes},
                        {"kv_bytes", p.kv_bytes},        {"flops", p.flops},
                        {"achieved_gbps", p.achieved_gbps}, {"achieved_gflops", p.achieved_gflops},
                        {"threads", omp_get_max_threads()}, {"machine_read_gbps", ctx.read_gbps}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%-13s %6lld %8lld %11.3f %14.1f %12.1f %10.1f %10.1f\n",
                std::string(MlaModeName(p.mode)).c_str(), static_cast<long long>(p.batch),
                static_cast<long long>(p.context), p.ms_per_step, p.weight_bytes / 1e6, p.flops / 1e9,
                p.achieved_gbps, p.achieved_gflops);
  }
  std::fflush(stdout);
}

Status RunAttn(const AttnArgs& args) {
  SetThreads(args.threads);
  ModelConfig config;
  if (!args.config.empty()) {
    LATTE_ASSIGN_OR_RETURN(config, ModelConfig::FromFile(args.config));
  } else {
    LATTE_ASSIGN_OR_RETURN(config, ReleasedConfig(args.preset));
  }
  AttentionBenchOptions options;
  for (const std::string& m : args.modes) {
    const auto mode = ParseMlaMode(m);
    if (!mode) return Status::Error("--mode \"" + m + "\": use absorbed, materialized or naive");
    options.modes.push_back(*mode);
  }
  for (int64_t b : args.batches) {
    if (b < 1 || b > 1024) return Status::Error("--batch must be in [1, 1024]");
  }
  for (int64_t c : args.contexts) {
    if (c < 0 || c > (1 << 20)) return Status::Error("--context must be in [0, 1048576]");
  }
  options.batches = args.batches;
  options.contexts = args.contexts;
  options.min_seconds = args.min_seconds;
  PrintContext ctx{args.json, MeasureReadBandwidthGBps(), {}};
  if (!args.json) {
    std::printf("machine read bandwidth (1 GiB, %d threads): %.1f GB/s\n", omp_get_max_threads(), ctx.read_gbps);
    std::printf("one MLA layer, d=%lld H=%lld d_c=%lld, bf16 weights, f32 latent cache, %d threads\n",
                static_cast<long long>(config.hidden_size), static_cast<long long>(config.num_attention_heads),
                static_cast<long long>(config.kv_lora_rank), omp_get_max_threads());
    std::printf("%-13s %6s %8s %11s %14s %12s %10s %10s\n", "mode", "batch", "context", "ms/step",
                "weight MB/step", "GFLOP/step", "GB/s", "GFLOP/s");
  }
  LATTE_RETURN_IF_ERROR(RunAttentionBenchmark(config, options, &PrintPoint, &ctx));
  if (!args.json) PrintRatios(ctx.points);
  return Status::Ok();
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (see docs/benchmarks.md)");
  bench->require_subcommand(1);

  auto attn = std::make_shared<AttnArgs>();
  CLI::App* cmd = bench->add_subcommand("attn", "One MLA layer's decode step in each mode, random weights");
  cmd->add_option("--preset", attn->preset, "v2 | v2-lite | v3 | r1")->capture_default_str();
  cmd->add_option("--config", attn->config, "A config.json instead of a preset");
  cmd->add_option("--batch", attn->batches, "Sequences decoding together (repeatable)")->capture_default_str();
  cmd->add_option("--context", attn->contexts, "Cached tokens per sequence (repeatable)")->capture_default_str();
  cmd->add_option("--mode", attn->modes, "absorbed | materialized | naive (repeatable)")->capture_default_str();
  cmd->add_option("--min-seconds", attn->min_seconds, "Time per point, after a warm-up step")
      ->capture_default_str();
  cmd->add_option("--threads", attn->threads, "Threads (0: every core)")->capture_default_str();
  cmd->add_flag("--json", attn->json, "One JSON object per line");
  cmd->callback([attn] {
    const Status status = RunAttn(*attn);
    if (!status.ok()) {
      std::fprintf(stderr, "latte bench attn: error: %s\n", status.message().c_str());
      ExitWith(1);
    }
  });
}

}  // namespace latte::cli
