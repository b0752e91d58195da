// Each subcommand lives in its own file and registers itself on the root app.
// A command's callback returns through ExitWith() so main() reports one exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>

#include "base/status.h"

namespace latte::cli {

void AddGenerateCommand(CLI::App& app);
void AddMakeModelCommand(CLI::App& app);
void AddCalcCommand(CLI::App& app);
void AddBenchCommand(CLI::App& app);
void AddTokenizeCommand(CLI::App& app);
void AddServeCommand(CLI::App& app);
void AddEvalCommand(CLI::App& app);
// The `latte bench` subcommands, each in bench_<name>_command.cc, registered on
// `bench` by AddBenchCommand.
void AddBenchAttnCommand(CLI::App& bench);
void AddBenchMachineCommand(CLI::App& bench);
void AddBenchModelCommand(CLI::App& bench);
void AddBenchEngineCommand(CLI::App& bench);
void AddBenchServeCommand(CLI::App& bench);

// Sets the process exit code (the last non-zero one wins).
void ExitWith(int code);
int ExitCode();

// Ends a command's callback: a failed `status` is one line on stderr,
// "latte <command>: error: <message>", and exit code 1.
void ExitOnError(const char* command, const Status& status);

// Sets OpenMP's (and so oneDNN's) thread count; 0 means every core.
void SetThreads(int threads);

// Below this many bytes of weights a decode step takes ~100-300 us, and waking and
// joining a second thread costs more than it brings: the 2.9 MB default model decodes
// faster on one thread on a quiet 2-core machine, and 2-4x faster on one under load,
// while a 4.5 GB model gains from every core (docs/benchmarks.md, "Threads on a busy
// machine"). Sizes between those two were not measured; 64 MiB sits well inside them.
inline constexpr int64_t kSingleThreadModelBytes = int64_t{64} << 20;

// SetThreads for a model holding `weight_bytes`: -t as given; without -t (0) every
// core, or one thread for a model under kSingleThreadModelBytes.
void SetThreadsForModel(int threads, int64_t weight_bytes);

// Flushes stdout; true when a write to it failed (a full disk, a closed pipe).
// main() checks it at exit; a command that streams checks it as it goes.
bool StdoutFailed();

}  // namespace latte::cli
