// latte bench: measurements the project reports in docs/benchmarks.md.
//   latte bench attn    — one MLA layer's decode step in each mode (bench/attention_benchmark.h)
//   latte bench machine — this machine's measured peaks (bench/machine_probe.h)
//   latte bench model   — whole-model pp / tg throughput against those peaks (bench/model_benchmark.h)
//   latte bench engine  — the serving engine's offline throughput (bench/engine_benchmark.h)
//   latte bench serve   — a server's online serving figures (bench_serve_command.cc)
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include <nlohmann/json.hpp>

#include "bench/attention_benchmark.h"
#include "bench/engine_benchmark.h"
#include "bench/machine_probe.h"
#include "bench/model_benchmark.h"
#include "bench/roofline.h"
#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "engine/serving_stack.h"
#include "model/cost_model.h"
#include "model/kv_cache.h"
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

Status RunAttn(const AttnArgs& args, const CLI::App& cmd) {
  if (Given(cmd, "--preset") && Given(cmd, "--config"))
    return Status::InvalidArgument("give one of --preset and --config");
  ModelConfig config;
  if (!args.config.empty()) {
    LATTE_ASSIGN_OR_RETURN(config, ModelConfig::FromFile(args.config));
  } else {
    LATTE_ASSIGN_OR_RETURN(config, ReleasedConfig(args.preset));
  }
  AttentionBenchOptions options;
  for (const std::string& m : args.modes) options.modes.push_back(*ParseMlaMode(m));  // checked by the parser
  for (int64_t c : args.contexts) {  // a step at context C attends C + 1 rows
    LATTE_RETURN_IF_ERROR(
        CheckContextLength(config, c + 1, "--context " + std::to_string(c) + " plus the decoded token"));
  }
  options.batches = args.batches;
  options.contexts = args.contexts;
  options.min_seconds = args.min_seconds;
  options.block_size = args.block_size;
  options.compare_block_size = args.compare_block_size;
  SetThreads(args.threads);
  MachineProbeOptions probe;
  probe.read_repeats = 3;
  probe.compute_seconds = 0.2;
  PrintContext ctx{args.json, ProbeMachine(probe), {}};
  if (!args.json) {
    std::printf("machine (measured now, %d threads): read %.1f GB/s, bf16 ", omp_get_max_threads(),
                ctx.peaks.read_gbps);
    PrintComputePeaks(ctx.peaks);
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
  LATTE_RETURN_IF_ERROR(RunAttentionBenchmark(config, options, &PrintPoint, &ctx));
  if (!args.json) PrintRatios(ctx.points);
  if (!args.core) return Status::Ok();
  // The peak the core is held against: the larger of two probes, at the start and now
  // (a probe that shares the cores with another job reads low; a peak cannot).
  if (const std::optional<double> again = MeasureBf16DotGflops(0.2); again && ctx.peaks.bf16_gflops) {
    ctx.peaks.bf16_gflops = std::max(*ctx.peaks.bf16_gflops, *again);
  }
  if (!args.json) {
    if (ctx.peaks.bf16_gflops)
      std::printf("\nbf16 peak (larger of two probes): %.1f GFLOP/s\n", *ctx.peaks.bf16_gflops);
    std::printf(
        "attention core alone (absorbed/materialized decode: %lld heads over the bf16 latent rows, "
        "split over %d threads by context)\n",
        static_cast<long long>(config.num_attention_heads), omp_get_max_threads());
    std::printf("%6s %8s %11s %12s %12s %10s %10s %11s %11s %6s\n", "batch", "context", "ms/step", "KV MB/step",
                "GFLOP/step", "KV GB/s", "GFLOP/s", "FLOP peak", "read BW", "bound");
  }
  return RunAttentionCoreBenchmark(config, options, &PrintCorePoint, &ctx);
}

struct MachineArgs {
  int threads = 0;
  bool json = false;
};

nlohmann::json PeaksJson(const MachinePeaks& p) {
  nlohmann::json j = {{"threads", p.threads},
                      {"read_gbps", p.read_gbps},
                      {"read_gbps_1thread", p.read_gbps_1thread},
                      {"read_gbps_small_pages", p.read_gbps_small_pages},
                      {"bf16_gflops", nullptr},
                      {"f32_gflops", p.f32_gflops},
                      {"f32_kernel", p.f32_kernel}};
  if (p.bf16_gflops) j["bf16_gflops"] = *p.bf16_gflops;
  return j;
}

// One row per probe; each column says one thing: what ran, on how many threads, over
// which pages, and the figure with its unit.
void PrintPeaks(const MachinePeaks& p) {
  auto row = [](const std::string& probe, int threads, const char* pages, const std::string& peak) {
    std::printf("%-24s %7d  %-7s %16s\n", probe.c_str(), threads, pages, peak.c_str());
  };
  auto figure = [](double v, const char* unit) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.1f %s", v, unit);
    return std::string(buf);
  };
  std::printf("%-24s %7s  %-7s %16s\n", "probe", "threads", "pages", "peak");
  row("memory read", p.threads, "2 MiB", figure(p.read_gbps, "GB/s"));
  row("memory read", 1, "2 MiB", figure(p.read_gbps_1thread, "GB/s"));
  row("memory read", p.threads, "4 KiB", figure(p.read_gbps_small_pages, "GB/s"));
  row("bf16 dot (vdpbf16ps)", p.threads, "-", p.bf16_gflops ? figure(*p.bf16_gflops, "GFLOP/s") : "n/a");
  row("f32 FMA (" + p.f32_kernel + ")", p.threads, "-", figure(p.f32_gflops, "GFLOP/s"));
}

Status RunMachine(const MachineArgs& args) {
  SetThreads(args.threads);
  const MachinePeaks p = ProbeMachine();
  if (args.json) {
    std::printf("%s\n", PeaksJson(p).dump().c_str());
  } else {
    PrintPeaks(p);
  }
  return Status::Ok();
}

struct ModelArgs {
  std::string model;
  std::vector<int64_t> prompts = {512};
  std::vector<int64_t> gens = {128};
  std::vector<int64_t> depths = {0};
  int threads = 0;
  int64_t repetitions = 5;
  int64_t batch = 1;
  LoadOptions load;
  bool json = false;
};

struct ModelPrintContext {
  bool json = false;
  int threads = 0;
  std::string mla_mode;
  SampledPeaks probe;  // taken once, before the model loads
  RooflinePeaks roof;  // the largest sample of each probe
};

// The roofs of a sampled probe: each probe's largest sample (bf16 where the CPU has
// AVX512_BF16, as the GEMMs and attention then run on it; else f32 FMA).
RooflinePeaks RoofOf(const SampledPeaks& probe) {
  RooflinePeaks roof;
  roof.read_gbps = probe.read_gbps.max;
  roof.flop_gflops = probe.bf16_gflops ? probe.bf16_gflops->max : probe.f32_gflops.max;
  roof.flop_name = probe.bf16_gflops ? "bf16" : "f32";
  return roof;
}

// "36.9 GB/s (min 27.7, median 35.0)": the peak, then the smallest and the median sample.
std::string SpreadText(const ProbeSpread& s, const char* unit) {
  char text[96];
  std::snprintf(text, sizeof text, "%.1f %s (min %.1f, median %.1f)", s.max, unit, s.min, s.median);
  return text;
}

// A probe whose smallest sample is this far below its largest ran beside other work.
constexpr double kBusySpread = 0.8;

void PrintProbe(const SampledPeaks& p) {
  std::printf("machine (probed once before the tests, %d rounds, %d threads; each peak is the largest sample): ",
              p.read_gbps.samples, p.threads);
  std::printf("read %s, bf16 %s, f32 FMA %s\n", SpreadText(p.read_gbps, "GB/s").c_str(),
              p.bf16_gflops ? SpreadText(*p.bf16_gflops, "GFLOP/s").c_str() : "n/a",
              SpreadText(p.f32_gflops, "GFLOP/s").c_str());
  double lowest = p.read_gbps.min / p.read_gbps.max;
  if (p.bf16_gflops) lowest = std::min(lowest, p.bf16_gflops->min / p.bf16_gflops->max);
  lowest = std::min(lowest, p.f32_gflops.min / p.f32_gflops.max);
  if (lowest < kBusySpread) {
    std::printf(
        "note: some probe samples read %.0f%% below their peak: the machine is busy, so the tok/s below "
        "may move with the load too\n",
        100.0 * (1 - lowest));
  }
}

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Characters on screen: UTF-8 continuation bytes take no column ("±" is two bytes).
size_t DisplayWidth(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// bench model's markdown table: columns wide enough for large and noisy figures
// (a cell wider still widens its own row, never shifts the ones after it within the row).
constexpr size_t kModelColumns[] = {12, 7, 5, 11, 22, 10, 10, 9, 10, 20};

void PrintModelRow(const std::vector<std::string>& cells, char fill = ' ') {
  std::string line = "|";
  for (size_t i = 0; i < cells.size(); ++i) {
    const size_t width = kModelColumns[i], used = DisplayWidth(cells[i]);
    const std::string pad(used < width ? width - used : 0, fill);
    const bool left = i == 0 || i == 3;  // mla_mode, test
    line += std::string(1, fill == ' ' ? ' ' : '-') + (left ? cells[i] + pad : pad + cells[i]) +
            (fill == ' ' ? " |" : "-|");
  }
  std::printf("%s\n", line.c_str());
}

void PrintModelResult(const ModelBenchResult& r, const ModelConfig& /*config*/, void* user) {
  auto& ctx = *static_cast<ModelPrintContext*>(user);
  const RooflinePlace place = PlaceOnRoofline(r.costs.Bytes(), r.costs.flops, r.tok_s_mean, ctx.roof);
  const bool memory = place.bound == RooflineBound::kMemory;
  if (ctx.json) {
    nlohmann::json j = {{"test", r.test},
                        {"batch", r.batch},
                        {"depth", r.depth},
                        {"threads", ctx.threads},
                        {"mla_mode", ctx.mla_mode},
                        {"tok_s_mean", r.tok_s_mean},
                        {"tok_s_sd", r.tok_s_sd},
                        {"runs", r.tok_s.size()},
                        {"bytes_per_token", r.costs.Bytes()},
                        {"weight_bytes_per_token", r.costs.weight_bytes},
                        {"kv_bytes_per_token", r.costs.kv_bytes},
                        {"flops_per_token", r.costs.flops},
                        {"achieved_gbps", r.achieved_gbps},
                        {"achieved_gflops", r.achieved_gflops},
                        {"machine_read_gbps", ctx.probe.read_gbps.max},
                        {"machine_read_gbps_min", ctx.probe.read_gbps.min},
                        {"machine_bf16_gflops", nullptr},
                        {"machine_bf16_gflops_min", nullptr},
                        {"machine_f32_gflops", ctx.probe.f32_gflops.max},
                        {"machine_f32_gflops_min", ctx.probe.f32_gflops.min},
                        {"probe_rounds", ctx.probe.read_gbps.samples},
                        {"roofline", memory ? "read_gbps" : ctx.roof.flop_name + "_gflops"},
                        {"fraction_of_roofline", place.fraction},
                        {"fraction_of_read_gbps", place.memory_fraction},
                        {"fraction_of_flop_peak", place.compute_fraction},
                        {"probe_below_run", place.above_roof()}};
    if (ctx.probe.bf16_gflops) {
      j["machine_bf16_gflops"] = ctx.probe.bf16_gflops->max;
      j["machine_bf16_gflops_min"] = ctx.probe.bf16_gflops->min;
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    PrintModelRow({ctx.mla_mode, std::to_string(ctx.threads), std::to_string(r.batch), r.test,
                   Fixed(r.tok_s_mean, 2) + " ± " + Fixed(r.tok_s_sd, 2), Fixed(r.costs.Bytes() / 1e6, 2),
                   Fixed(r.costs.flops / 1e9, 3), Fixed(r.achieved_gbps, 1), Fixed(r.achieved_gflops, 1),
                   DescribeRooflinePlace(place, ctx.roof)});
  }
  std::fflush(stdout);
}

Status RunModel(const ModelArgs& args, const CLI::App& cmd) {
  const LoadOptions& load = args.load;
  LATTE_RETURN_IF_ERROR(CheckLoadOptions(load));
  ModelBenchOptions options;
  options.model_dir = args.model;
  options.prompts = args.prompts;
  options.gens = args.gens;
  options.repetitions = args.repetitions;
  options.batch = args.batch;
  options.depths = args.depths;
  options.mode = load.mode;
  options.fp8 = load.fp8;
  options.quantize = load.quantize;
  options.residency = load.residency;
  const bool tg = std::any_of(args.gens.begin(), args.gens.end(), [](int64_t n) { return n > 0; });
  LATTE_RETURN_IF_ERROR(RefuseUnless(cmd, tg, {"--n-depth", "--batch"}, "without a tg test (every -n is 0)"));
  // Every test fits in the model's context before the probe runs or a weight loads.
  auto previewed = PreviewModel(args.model);
  if (!previewed.ok()) return AsFlagError(previewed.status());
  const ModelPreview& preview = previewed.value();
  LATTE_RETURN_IF_ERROR(
      RefuseUnless(cmd, preview.config.quantization.has_value(), {"--fp8"}, "on a checkpoint without fp8 weights"));
  LATTE_RETURN_IF_ERROR(CheckModelBenchOptions(options, preview.config));
  SetThreadsForModel(args.threads, HeldWeightBytes(preview.config, load.mode));
  ModelPrintContext ctx;
  ctx.json = args.json;
  ctx.threads = omp_get_max_threads();
  ctx.mla_mode = std::string(MlaModeName(load.mode));
  ctx.probe = SampleMachinePeaks();
  ctx.roof = RoofOf(ctx.probe);
  if (!args.json) {
    std::printf("model %s, %d threads, weights %s%s%s\n", args.model.c_str(), ctx.threads,
                load.residency == FileResidency::kHugePageCopy ? "on 2 MiB pages" : "mmapped",
                load.fp8 == Fp8Weights::kKeep ? "" : ", fp8 dequantized to bf16",
                load.quantize == WeightQuantization::kFp8 ? ", quantized to fp8 at load" : "");
    PrintProbe(ctx.probe);
    PrintModelRow(
        {"mla_mode", "threads", "batch", "test", "t/s", "MB/tok", "GFLOP/tok", "GB/s", "GFLOP/s", "roofline"});
    PrintModelRow(std::vector<std::string>(10, ""), '-');
  }
  return RunModelBenchmark(options, &PrintModelResult, &ctx);
}

struct EngineArgs {
  EngineConfig engine;
  EngineBenchOptions bench;
  bool json = false;
};

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
  const std::string mla_mode(MlaModeName(args.engine.load.mode));
  const int64_t vocab = stack->model->config().vocab_size;
  LATTE_ASSIGN_OR_RETURN(EngineBenchResult r, RunEngineBenchmark(*stack->engine, vocab, args.bench));
  const EngineOptions& e = stack->engine->options();
  if (args.json) {
    nlohmann::json j = {{"num_prompts", r.requests},
                        {"input_len", args.bench.input_len},
                        {"output_len", args.bench.output_len},
                        {"max_concurrency", args.bench.max_concurrency},
                        {"threads", omp_get_max_threads()},
                        {"mla_mode", mla_mode},
                        {"max_num_seqs", e.scheduler.max_num_seqs},
                        {"max_num_batched_tokens", e.scheduler.max_num_batched_tokens},
                        {"max_prefill_burst_tokens", e.scheduler.max_prefill_burst_tokens},
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
                        {"prefix_hits", r.stats.prefix_hits}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%lld requests of %lld + %lld tokens, max concurrency %lld, %s, %d threads\n",
                static_cast<long long>(r.requests), static_cast<long long>(args.bench.input_len),
                static_cast<long long>(args.bench.output_len), static_cast<long long>(args.bench.max_concurrency),
                mla_mode.c_str(), omp_get_max_threads());
    std::printf("Throughput: %.2f requests/s, %.2f output tok/s, %.2f total tok/s (%.2f s)\n", r.requests_per_s,
                r.output_tok_s, r.total_tok_s, r.seconds);
    std::printf("Engine steps: %lld, %.3f s in steps, %.3f s in the forward pass: %.2f%% outside it\n",
                static_cast<long long>(r.stats.steps), r.step_seconds, r.model_seconds, 100.0 * r.overhead_share);
    std::printf("Preemptions: %lld, prefix-cache hits: %lld of %lld prompt tokens\n",
                static_cast<long long>(r.stats.preemptions), static_cast<long long>(r.stats.prefix_hits),
                static_cast<long long>(r.stats.prefix_queries));
  }
  std::fflush(stdout);
  stack->engine->Stop();
  return Status::Ok();
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (see docs/benchmarks.md)");
  bench->require_subcommand(1);
  const CLI::Validator mla_mode = OneOf({"absorbed", "materialized", "naive"});

  auto attn = std::make_shared<AttnArgs>();
  CLI::App* cmd = bench->add_subcommand("attn", "One MLA layer's decode step in each mode, random weights");
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
      ->check(mla_mode)
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

  auto machine = std::make_shared<MachineArgs>();
  CLI::App* mcmd = bench->add_subcommand("machine", "This machine's measured peaks: read GB/s, bf16 and f32 GFLOP/s");
  AddThreadsOption(*mcmd, machine->threads);
  mcmd->add_flag("--json", machine->json, "One JSON object");
  mcmd->callback([machine] { ExitOnError("bench machine", RunMachine(*machine)); });

  auto model = std::make_shared<ModelArgs>();
  CLI::App* bcmd = bench->add_subcommand("model", "Whole-model pp / tg throughput against the machine's peaks");
  bcmd->add_option("--model", model->model, "Model directory")->required();
  bcmd->add_option("-p,--n-prompt", model->prompts, "pp tests: prompt tokens in one forward (list: 128,512; 0: skip)")
      ->check(IntIn(0, int64_t{1} << 40))
      ->delimiter(',')
      ->capture_default_str();
  bcmd->add_option("-n,--n-gen", model->gens, "tg tests: decode steps (list; 0: skip)")
      ->check(IntIn(0, int64_t{1} << 40))
      ->delimiter(',')
      ->capture_default_str();
  AddThreadsOption(*bcmd, model->threads);
  bcmd->add_option("-r,--repetitions", model->repetitions, "Timed runs per test, after one warm-up run")
      ->check(IntIn(1, 1000000))
      ->capture_default_str();
  bcmd->add_option("--batch", model->batch, "tg: sequences decoding together")
      ->check(IntIn(1, 1024))
      ->capture_default_str();
  bcmd->add_option("-d,--n-depth", model->depths,
                   "tg: tokens already in each sequence's cache (list; prefilled in chunks of 512, untimed); "
                   "0: a 16-token prompt")
      ->check(IntIn(0, int64_t{1} << 40))
      ->delimiter(',')
      ->capture_default_str();
  AddRenamedFlag(*bcmd, "--prompt", "-p/--n-prompt (--prompt is prompt text in latte generate)");
  AddRenamedFlag(*bcmd, "--gen", "-n/--n-gen");
  AddRenamedFlag(*bcmd, "--depth", "-d/--n-depth");
  AddLoadFlags(*bcmd, model->load);
  bcmd->add_flag("--json", model->json, "One JSON object per test");
  bcmd->callback([model, bcmd] { ExitOnError("bench model", RunModel(*model, *bcmd)); });

  auto engine = std::make_shared<EngineArgs>();
  CLI::App* ecmd = bench->add_subcommand(
      "engine", "The serving engine's offline throughput (as vLLM's bench throughput): random prompts, fixed lengths");
  AddEngineFlags(*ecmd, engine->engine);
  ecmd->add_option("--num-prompts", engine->bench.num_prompts, "Requests")
      ->check(IntIn(1, 1 << 24))
      ->capture_default_str();
  ecmd->add_option("--input-len", engine->bench.input_len, "Prompt tokens per request (random ids)")
      ->check(IntIn(1, int64_t{1} << 40))
      ->capture_default_str();
  ecmd->add_option("--output-len", engine->bench.output_len, "Tokens generated per request (EOS ignored)")
      ->check(IntIn(1, int64_t{1} << 40))
      ->capture_default_str();
  ecmd->add_option("--max-concurrency", engine->bench.max_concurrency,
                   "Requests in flight at once; a new one is submitted as one finishes (0: all at once)")
      ->check(IntIn(0, 1 << 24))
      ->capture_default_str();
  ecmd->add_option("--seed", engine->bench.seed, "Seed of the prompt ids and of the sampling")->capture_default_str();
  ecmd->add_flag("--json", engine->json, "One JSON object");
  ecmd->callback([engine, ecmd] { ExitOnError("bench engine", RunEngine(*engine, *ecmd)); });

  AddBenchServeCommand(*bench);
}

}  // namespace latte::cli
