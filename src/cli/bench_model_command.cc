// latte bench model: whole-model pp / tg throughput of a checkpoint
// (bench/model_benchmark.h), llama-bench style, each test placed on the roofline of
// the machine's peaks sampled once before the model loads: a markdown table row or a
// JSON object per test.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/machine_probe.h"
#include "bench/model_benchmark.h"
#include "bench/roofline.h"
#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "dist/runtime.h"
#include "engine/serving_stack.h"
#include "model/config.h"
#include "model/cost_model.h"
#include "model/mla_mode.h"

namespace latte::cli {
namespace {

struct ModelArgs {
  ModelBenchOptions bench;  // the flags bind to its fields (-p is bench.prompts)
  int threads = 0;
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

// Rank 0's collectives per timed forward pass, by kind: {"all_reduce": {"calls",
// "bytes_sent", "seconds"}, ...} (only kinds that ran).
nlohmann::json CollectivesJson(const ModelBenchResult& r) {
  nlohmann::json j = nlohmann::json::object();
  const double n = static_cast<double>(r.timed_forwards);
  for (int k = 0; k < static_cast<int>(CollectiveKind::kCount); ++k) {
    const CollectiveStats& s = r.collectives.by_kind[k];
    if (s.calls == 0) continue;
    j[std::string(CollectiveKindName(static_cast<CollectiveKind>(k)))] = {
        {"calls", static_cast<double>(s.calls) / n},
        {"bytes_sent", static_cast<double>(s.bytes_sent) / n},
        {"seconds", s.seconds / n}};
  }
  return j;
}

// One test as a JSON object: its figures, the probe's, and its place on the roofline.
nlohmann::json ModelResultJson(const ModelBenchResult& r, const ModelPrintContext& ctx, const RooflinePlace& place) {
  const bool memory = place.bound == RooflineBound::kMemory;
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
  if (!r.paired_read_gbps.empty()) {
    j["paired_read_gbps"] = r.paired_read_gbps;
    j["paired_read_fraction"] = r.paired_read_fraction;
    j["fraction_of_paired_read"] = SpreadOf(r.paired_read_fraction).median;
  }
  if (ctx.probe.bf16_gflops) {
    j["machine_bf16_gflops"] = ctx.probe.bf16_gflops->max;
    j["machine_bf16_gflops_min"] = ctx.probe.bf16_gflops->min;
  }
  if (r.timed_forwards > 0 && r.collectives.TotalBytesSent() + r.collectives[CollectiveKind::kAllGather].calls > 0) {
    j["collectives_per_forward"] = CollectivesJson(r);
    j["collective_share"] = r.timed_seconds > 0 ? r.collectives.TotalSeconds() / r.timed_seconds : 0.0;
  }
  return j;
}

// "  paired read probe: 52.1, 33.0 GB/s; the runs read 94%, 96% of it (median 95%)".
void PrintPairedProbe(const ModelBenchResult& r) {
  std::string probes, shares;
  for (size_t i = 0; i < r.paired_read_gbps.size(); ++i) {
    probes += (i ? ", " : "") + Fixed(r.paired_read_gbps[i], 1);
    shares += (i ? ", " : "") + Fixed(100 * r.paired_read_fraction[i], 0) + "%";
  }
  std::printf(
      "  paired read probe (the larger of those before and after each run): %s GB/s; the runs read %s of it "
      "(median %s%%)\n",
      probes.c_str(), shares.c_str(), Fixed(100 * SpreadOf(r.paired_read_fraction).median, 0).c_str());
}

void PrintModelResult(const ModelBenchResult& r, const ModelConfig& /*config*/, void* user) {
  auto& ctx = *static_cast<ModelPrintContext*>(user);
  const RooflinePlace place = PlaceOnRoofline(r.costs.Bytes(), r.costs.flops, r.tok_s_mean, ctx.roof);
  if (ctx.json) {
    std::printf("%s\n", ModelResultJson(r, ctx, place).dump().c_str());
  } else {
    PrintModelRow({ctx.mla_mode, std::to_string(ctx.threads), std::to_string(r.batch), r.test,
                   Fixed(r.tok_s_mean, 2) + " ± " + Fixed(r.tok_s_sd, 2), Fixed(r.costs.Bytes() / 1e6, 2),
                   Fixed(r.costs.flops / 1e9, 3), Fixed(r.achieved_gbps, 1), Fixed(r.achieved_gflops, 1),
                   DescribeRooflinePlace(place, ctx.roof)});
    if (!r.paired_read_gbps.empty()) PrintPairedProbe(r);
    if (r.timed_forwards > 0 && r.collectives.TotalSeconds() > 0) {
      std::string line = "  collectives per forward (rank 0):";
      for (int k = 0; k < static_cast<int>(CollectiveKind::kCount); ++k) {
        const CollectiveStats& c = r.collectives.by_kind[k];
        if (c.calls == 0) continue;
        line += " " + std::string(CollectiveKindName(static_cast<CollectiveKind>(k))) + " " +
                Fixed(static_cast<double>(c.calls) / r.timed_forwards, 0) + " calls, " +
                Fixed(static_cast<double>(c.bytes_sent) / r.timed_forwards / 1e3, 1) + " kB;";
      }
      line += " " + Fixed(100 * r.collectives.TotalSeconds() / r.timed_seconds, 1) + "% of the time inside them";
      std::printf("%s\n", line.c_str());
    }
  }
  std::fflush(stdout);
}

// The table's heading: the model and how its weights are held, the probe, the columns.
void PrintModelHeader(const ModelBenchOptions& options, const ModelPrintContext& ctx) {
  const LoadOptions& load = options.load;
  std::printf("model %s, %s%d threads, weights %s%s%s\n", options.model_dir.c_str(),
              load.parallel.world_size() > 1 ? (LayoutName(load.parallel) + " ranks × ").c_str() : "", ctx.threads,
              load.residency == FileResidency::kHugePageCopy ? "on 2 MiB pages" : "mmapped",
              load.fp8 == Fp8Weights::kKeep ? "" : ", fp8 dequantized to bf16",
              load.quantize == WeightQuantization::kFp8 ? ", quantized to fp8 at load" : "");
  PrintProbe(ctx.probe);
  PrintModelRow({"mla_mode", "threads", "batch", "test", "t/s", "MB/tok", "GFLOP/tok", "GB/s", "GFLOP/s", "roofline"});
  PrintModelRow(std::vector<std::string>(10, ""), '-');
}

Status RunModel(const ModelArgs& args, const CLI::App& cmd) {
  const ModelBenchOptions& options = args.bench;
  const LoadOptions& load = options.load;
  LATTE_RETURN_IF_ERROR(CheckLoadOptions(load));
  const bool tg = std::any_of(options.gens.begin(), options.gens.end(), [](int64_t n) { return n > 0; });
  LATTE_RETURN_IF_ERROR(
      RefuseUnless(cmd, tg, {"--n-depth", "--batch", "--paired-probe"}, "without a tg test (every -n is 0)"));
  // Every test fits in the model's context before the probe runs or a weight loads.
  auto previewed = PreviewModel(options.model_dir);
  if (!previewed.ok()) return AsFlagError(previewed.status());
  const ModelPreview& preview = previewed.value();
  LATTE_RETURN_IF_ERROR(
      RefuseUnless(cmd, preview.config.quantization.has_value(), {"--fp8"}, "on a checkpoint without fp8 weights"));
  LATTE_RETURN_IF_ERROR(CheckModelBenchOptions(options, preview.config));
  const Status layout = CheckLayout(load.parallel, LauncherWorldSize(), MpiBuiltIn());
  if (!layout.ok()) return AsFlagError(layout);
  SetThreadsForModel(args.threads, HeldWeightBytes(preview.config, load.mode) / load.parallel.world_size());
  ModelPrintContext ctx;
  ctx.json = args.json;
  ctx.threads = omp_get_max_threads();
  ctx.mla_mode = std::string(MlaModeName(load.mode));
  // Rank 0 probes the machine alone: the others wait asleep, not spinning in MPI.
  Comm& world = WorldComm();
  if (world.rank() == 0) {
    ctx.probe = SampleMachinePeaks();
    ctx.roof = RoofOf(ctx.probe);
    if (!args.json) PrintModelHeader(options, ctx);
  }
  std::vector<uint8_t> none;
  world.Broadcast(none, 0, /*idle_wait=*/true);
  return RunModelBenchmark(options, &PrintModelResult, &ctx);
}

}  // namespace

void AddBenchModelCommand(CLI::App& bench) {
  auto model = std::make_shared<ModelArgs>();
  CLI::App* cmd = bench.add_subcommand("model", "Whole-model pp / tg throughput against the machine's peaks");
  cmd->add_option("--model", model->bench.model_dir, "Model directory")->required();
  cmd->add_option("-p,--n-prompt", model->bench.prompts,
                  "pp tests: prompt tokens in one forward (list: 128,512; 0: skip)")
      ->check(IntIn(0, int64_t{1} << 40))
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-n,--n-gen", model->bench.gens, "tg tests: decode steps (list; 0: skip)")
      ->check(IntIn(0, int64_t{1} << 40))
      ->delimiter(',')
      ->capture_default_str();
  AddThreadsOption(*cmd, model->threads);
  cmd->add_option("-r,--repetitions", model->bench.repetitions, "Timed runs per test, after one warm-up run")
      ->check(IntIn(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--verify-tokens", model->bench.verify_tokens,
                  "tg: tokens each sequence runs per step, as a speculative step verifying N-1 drafts (tgNxV; "
                  "t/s counts one token per sequence step)")
      ->check(CLI::Range(int64_t{1}, int64_t{64}))
      ->capture_default_str();
  cmd->add_flag("--paired-probe", model->bench.paired_read_probe,
                "tg: a memory read probe before and after each timed run; each run's GB/s against the larger of its "
                "two (JSON paired_read_gbps, fraction_of_paired_read); one process only");
  cmd->add_option("--batch", model->bench.batch, "tg: sequences decoding together")
      ->check(IntIn(1, 1024))
      ->capture_default_str();
  cmd->add_option("-d,--n-depth", model->bench.depths,
                  "tg: tokens already in each sequence's cache (list; prefilled in chunks of 512, untimed); "
                  "0: a 16-token prompt")
      ->check(IntIn(0, int64_t{1} << 40))
      ->delimiter(',')
      ->capture_default_str();
  AddRenamedFlag(*cmd, "--prompt", "-p/--n-prompt (--prompt is prompt text in latte generate)");
  AddRenamedFlag(*cmd, "--gen", "-n/--n-gen");
  AddRenamedFlag(*cmd, "--depth", "-d/--n-depth");
  AddLoadFlags(*cmd, model->bench.load);
  cmd->add_flag("--json", model->json, "One JSON object per test");
  cmd->callback([model, cmd] { ExitOnError("bench model", RunModel(*model, *cmd)); });
}

}  // namespace latte::cli
