// latte bench attn: one MLA layer's decode step in each mode over random weights
// (bench/attention_benchmark.h), then the attention core alone, each point printed as
// it is measured (a table row or a JSON line) beside the machine's peaks probed in the
// same run, and the materialized / absorbed ratios of the points measured in both modes.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/attention_benchmark.h"
#include "bench/machine_probe.h"
#include "bench/roofline.h"
#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/mla_mode.h"
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
  int64_t block_size = kDefaultKvBlockSize;
  std::optional<int64_t> compare_block_size;
  int threads = 0;
  bool core = true;
  bool json = false;
};

struct PrintContext {
  bool json = false;
  MachinePeaks peaks;  // measured at the start of the run
  std::vector<AttentionBenchPoint> points;
};

// Ends a "... bf16 " line with the compute peaks: "<GFLOP/s or n/a>, f32 FMA <GFLOP/s>".
void PrintComputePeaks(const MachinePeaks& peaks) {
  if (peaks.bf16_gflops) {
    std::printf("%.1f GFLOP/s", *peaks.bf16_gflops);
  } else {
    std::printf("n/a");
  }
  std::printf(", f32 FMA %.1f GFLOP/s\n", peaks.f32_gflops);
}

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
    nlohmann::json j = {{"mode", MlaModeName(p.mode)},
                        {"batch", p.batch},
                        {"context", p.context},
                        {"ms_per_step", p.ms_per_step},
                        {"steps", p.steps},
                        {"weight_bytes", p.weight_bytes},
                        {"kv_bytes", p.kv_bytes},
                        {"flops", p.flops},
                        {"achieved_gbps", p.achieved_gbps},
                        {"achieved_gflops", p.achieved_gflops},
                        {"threads", omp_get_max_threads()},
                        {"machine_read_gbps", ctx.peaks.read_gbps}};
    if (p.compared_ms_per_step) j["compared_ms_per_step"] = *p.compared_ms_per_step;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%-13s %6lld %8lld %11.3f %14.1f %12.1f %10.1f %10.1f", std::string(MlaModeName(p.mode)).c_str(),
                static_cast<long long>(p.batch), static_cast<long long>(p.context), p.ms_per_step, p.weight_bytes / 1e6,
                p.flops / 1e9, p.achieved_gbps, p.achieved_gflops);
    if (p.compared_ms_per_step) {
      std::printf(" %11.3f %8.3f", *p.compared_ms_per_step, p.ms_per_step / *p.compared_ms_per_step);
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

// The core's roofline (bench/roofline.h): it must read kv_bytes and do flops, so its
// time is at least the larger of kv_bytes / read bandwidth and flops / bf16 peak (f32
// FMA peak without AVX512_BF16). Fractions of both peaks are printed, and which one binds.
struct CoreRoofline {
  double bytes_fraction = 0;  // achieved KV GB/s / machine read GB/s
  double flops_fraction = 0;  // achieved GFLOP/s / machine bf16 (or f32) GFLOP/s
  bool bytes_bind = false;    // the KV-bytes time exceeds the FLOP time at peak
};

CoreRoofline CoreFractions(const AttentionCorePoint& p, const MachinePeaks& peaks) {
  RooflinePeaks roof;
  roof.read_gbps = peaks.read_gbps;
  roof.flop_gflops = peaks.bf16_gflops ? *peaks.bf16_gflops : peaks.f32_gflops;
  const double steps_per_s = 1e3 / p.ms_per_step;
  const RooflinePlace place =
      PlaceOnRoofline(static_cast<double>(p.kv_bytes), static_cast<double>(p.flops), steps_per_s, roof);
  return {place.memory_fraction, place.compute_fraction, place.bound == RooflineBound::kMemory};
}

void PrintCorePoint(const AttentionCorePoint& p, void* user) {
  const auto& ctx = *static_cast<PrintContext*>(user);
  const CoreRoofline r = CoreFractions(p, ctx.peaks);
  if (ctx.json) {
    nlohmann::json j = {{"mode", "core"},
                        {"batch", p.batch},
                        {"context", p.context},
                        {"ms_per_step", p.ms_per_step},
                        {"steps", p.steps},
                        {"kv_bytes", p.kv_bytes},
                        {"flops", p.flops},
                        {"achieved_gbps", p.achieved_gbps},
                        {"achieved_gflops", p.achieved_gflops},
                        {"threads", omp_get_max_threads()},
                        {"machine_read_gbps", ctx.peaks.read_gbps},
                        {"machine_bf16_gflops", nullptr},
                        {"machine_f32_gflops", ctx.peaks.f32_gflops},
                        {"fraction_of_read_gbps", r.bytes_fraction},
                        {"fraction_of_flop_peak", r.flops_fraction},
                        {"roofline", r.bytes_bind ? "read_gbps" : "flops"}};
    if (ctx.peaks.bf16_gflops) j["machine_bf16_gflops"] = *ctx.peaks.bf16_gflops;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%6lld %8lld %11.3f %12.1f %12.2f %10.1f %10.1f %10.1f%% %10.1f%% %6s\n",
                static_cast<long long>(p.batch), static_cast<long long>(p.context), p.ms_per_step, p.kv_bytes / 1e6,
                p.flops / 1e9, p.achieved_gbps, p.achieved_gflops, 100.0 * r.flops_fraction, 100.0 * r.bytes_fraction,
                r.bytes_bind ? "bytes" : "FLOPs");
  }
  std::fflush(stdout);
}

// The points to time, from the flags. Every --context plus its decoded token must fit
// in the model's context (a step at context C attends C + 1 rows).
Result<AttentionBenchOptions> AttnOptions(const AttnArgs& args, const ModelConfig& config) {
  AttentionBenchOptions options;
  for (const std::string& m : args.modes) options.modes.push_back(*ParseMlaMode(m));  // checked by the parser
  for (int64_t c : args.contexts) {
    LATTE_RETURN_IF_ERROR(
        CheckContextLength(config, c + 1, "--context " + std::to_string(c) + " plus the decoded token"));
  }
  options.batches = args.batches;
  options.contexts = args.contexts;
  options.min_seconds = args.min_seconds;
  options.block_size = args.block_size;
  options.compare_block_size = args.compare_block_size;
  return options;
}

// The layer table's heading: the peaks just probed, the layer's shape, the cache's
// layout (and the one compared against), the column names.
void PrintLayerHeader(const AttnArgs& args, const ModelConfig& config, const MachinePeaks& peaks) {
  std::printf("machine (measured now, %d threads): read %.1f GB/s, bf16 ", omp_get_max_threads(), peaks.read_gbps);
  PrintComputePeaks(peaks);
  const std::string layout =
      args.block_size > 0 ? "in shuffled blocks of " + std::to_string(args.block_size) + " tokens" : "contiguous";
  std::printf("one MLA layer, d=%lld H=%lld d_c=%lld, bf16 weights, bf16 latent cache %s, %d threads\n",
              static_cast<long long>(config.hidden_size), static_cast<long long>(config.num_attention_heads),
              static_cast<long long>(config.kv_lora_rank), layout.c_str(), omp_get_max_threads());
  if (args.compare_block_size) {
    std::printf("compared, step by step: the same steps over %s (\"vs ms/step\"; ratio = ms/step / vs ms/step)\n",
                *args.compare_block_size > 0
                    ? ("shuffled blocks of " + std::to_string(*args.compare_block_size) + " tokens").c_str()
                    : "a contiguous cache");
  }
  std::printf("%-13s %6s %8s %11s %14s %12s %10s %10s%s\n", "mode", "batch", "context", "ms/step", "weight MB/step",
              "GFLOP/step", "GB/s", "GFLOP/s", args.compare_block_size ? "  vs ms/step    ratio" : "");
}

// The core table's heading: the bf16 peak the core is held against, the core's shape,
// the column names.
void PrintCoreHeader(const ModelConfig& config, const MachinePeaks& peaks) {
  if (peaks.bf16_gflops) std::printf("\nbf16 peak (larger of two probes): %.1f GFLOP/s\n", *peaks.bf16_gflops);
  std::printf(
      "attention core alone (absorbed/materialized decode: %lld heads over the bf16 latent rows, "
      "split over %d threads by context)\n",
      static_cast<long long>(config.num_attention_heads), omp_get_max_threads());
  std::printf("%6s %8s %11s %12s %12s %10s %10s %11s %11s %6s\n", "batch", "context", "ms/step", "KV MB/step",
              "GFLOP/step", "KV GB/s", "GFLOP/s", "FLOP peak", "read BW", "bound");
}

Status RunAttn(const AttnArgs& args, const CLI::App& cmd) {
  if (Given(cmd, "--preset") && Given(cmd, "--config"))
    return Status::InvalidArgument("give one of --preset and --config");
  ModelConfig config;
  if (!args.config.empty()) {
    LATTE_ASSIGN_OR_RETURN(config, ModelConfig::FromFile(args.config));
  } else {
    LATTE_ASSIGN_OR_RETURN(config, ReleasedConfig(args.preset));
  }
  LATTE_ASSIGN_OR_RETURN(const AttentionBenchOptions options, AttnOptions(args, config));
  SetThreads(args.threads);
  MachineProbeOptions probe;
  probe.read_repeats = 3;
  probe.compute_seconds = 0.2;
  PrintContext ctx{args.json, ProbeMachine(probe), {}};
  if (!args.json) PrintLayerHeader(args, config, ctx.peaks);
  LATTE_RETURN_IF_ERROR(RunAttentionBenchmark(config, options, &PrintPoint, &ctx));
  if (!args.json) PrintRatios(ctx.points);
  if (!args.core) return Status::Ok();
  // The peak the core is held against: the larger of two probes, at the start and now
  // (a probe that shares the cores with another job reads low; a peak cannot).
  if (const std::optional<double> again = MeasureBf16DotGflops(0.2); again && ctx.peaks.bf16_gflops) {
    ctx.peaks.bf16_gflops = std::max(*ctx.peaks.bf16_gflops, *again);
  }
  if (!args.json) PrintCoreHeader(config, ctx.peaks);
  return RunAttentionCoreBenchmark(config, options, &PrintCorePoint, &ctx);
}

}  // namespace

void AddBenchAttnCommand(CLI::App& bench) {
  auto attn = std::make_shared<AttnArgs>();
  CLI::App* cmd = bench.add_subcommand("attn", "One MLA layer's decode step in each mode, random weights");
  cmd->add_option("--preset", attn->preset, "Preset: " + PresetList())
      ->check(OneOf(PresetNames()))
      ->capture_default_str();
  cmd->add_option("--config", attn->config, "A config.json instead of a preset");
  cmd->add_option("--batch", attn->batches, "Sequences decoding together (list: 1,16 or repeated)")
      ->check(IntIn(1, 1024))
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--context", attn->contexts, "Cached tokens per sequence (list)")
      ->check(IntIn(0, 1 << 20))
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--mla-mode", attn->modes, "absorbed | materialized | naive (list)")
      ->check(OneOf({"absorbed", "materialized", "naive"}))
      ->delimiter(',')
      ->capture_default_str();
  AddRenamedFlag(*cmd, "--mode", "--mla-mode");
  cmd->add_option("--min-seconds", attn->min_seconds, "Time per point, after a warm-up step")
      ->check(NumberIn(0, 3600))
      ->capture_default_str();
  cmd->add_option("--block-size", attn->block_size,
                  "Latent rows in paged-cache blocks of this many tokens, shuffled over the pool (0: contiguous)")
      ->check(IntIn(0, 4096))
      ->capture_default_str();
  cmd->add_option("--compare-block-size", attn->compare_block_size,
                  "Also time every point over a cache in blocks of this many tokens (0: contiguous), alternating "
                  "with --block-size's step by step, and print both and their ratio")
      ->check(IntIn(0, 4096));
  AddThreadsOption(*cmd, attn->threads);
  cmd->add_flag("--core,!--no-core", attn->core,
                "Also time the attention core alone against the machine's peaks (mode \"core\" in JSON)")
      ->capture_default_str();
  cmd->add_flag("--json", attn->json, "One JSON object per line");
  cmd->callback([attn, cmd] { ExitOnError("bench attn", RunAttn(*attn, *cmd)); });
}

}  // namespace latte::cli
