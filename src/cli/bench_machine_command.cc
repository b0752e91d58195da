// latte bench machine: this machine's measured peaks (bench/machine_probe.h), read
// bandwidth and bf16 / f32 FMA GFLOP/s, as one row per probe or one JSON object.
#include <omp.h>

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/machine_probe.h"
#include "cli/arg_checks.h"
#include "cli/commands.h"

namespace latte::cli {
namespace {

struct MachineArgs {
  int threads = 0;
  bool json = false;
  bool read_only = false;
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

// --read-only: the read probe beside each timed run of `bench model --paired-probe`
// (ReadProbe), best of 3 samples, for scripts that bracket another engine's run with it.
void PrintReadProbe(bool json) {
  const double best = ReadProbe().SampleGbps(/*repeats=*/3);
  if (json) {
    std::printf("%s\n", nlohmann::json{{"threads", omp_get_max_threads()}, {"read_gbps", best}}.dump().c_str());
  } else {
    std::printf("memory read, %d threads, 2 MiB pages: %.1f GB/s\n", omp_get_max_threads(), best);
  }
}

Status RunMachine(const MachineArgs& args) {
  SetThreads(args.threads);
  if (args.read_only) {
    PrintReadProbe(args.json);
    return Status::Ok();
  }
  const MachinePeaks p = ProbeMachine();
  if (args.json) {
    std::printf("%s\n", PeaksJson(p).dump().c_str());
  } else {
    PrintPeaks(p);
  }
  return Status::Ok();
}

}  // namespace

void AddBenchMachineCommand(CLI::App& bench) {
  auto machine = std::make_shared<MachineArgs>();
  CLI::App* cmd = bench.add_subcommand("machine", "This machine's measured peaks: read GB/s, bf16 and f32 GFLOP/s");
  AddThreadsOption(*cmd, machine->threads);
  cmd->add_flag("--json", machine->json, "One JSON object");
  cmd->add_flag("--read-only", machine->read_only,
                "Only the all-thread memory read (256 MiB on 2 MiB pages, best of 3; ~0.5 s): the probe "
                "`bench model --paired-probe` takes beside each run");
  cmd->callback([machine] { ExitOnError("bench machine", RunMachine(*machine)); });
}

}  // namespace latte::cli
