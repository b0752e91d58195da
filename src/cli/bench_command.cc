// latte bench: measurements the project reports in docs/benchmarks.md. This file only
// creates the `bench` subcommand; each benchmark registers itself from its own file:
//   latte bench attn    — one MLA layer's decode step in each mode (bench_attn_command.cc)
//   latte bench machine — this machine's measured peaks (bench_machine_command.cc)
//   latte bench model   — whole-model pp / tg throughput against those peaks (bench_model_command.cc)
//   latte bench engine  — the serving engine's offline throughput (bench_engine_command.cc)
//   latte bench serve   — a server's online serving figures (bench_serve_command.cc)
#include "cli/commands.h"

namespace latte::cli {

void AddBenchCommand(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (see docs/benchmarks.md)");
  bench->require_subcommand(1);
  AddBenchAttnCommand(*bench);
  AddBenchMachineCommand(*bench);
  AddBenchModelCommand(*bench);
  AddBenchEngineCommand(*bench);
  AddBenchServeCommand(*bench);
}

}  // namespace latte::cli
