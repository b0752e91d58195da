// Each subcommand lives in its own file and registers itself on the root app.
// A command's callback ends through ExitOnError(), which sets the exit code (ExitWith())
// that main() returns.
#pragma once

#include <CLI/CLI.hpp>

#include "base/status.h"

namespace latte::cli {

void AddGenerateCommand(CLI::App& app);
void AddMakeModelCommand(CLI::App& app);
void AddConvertCommand(CLI::App& app);
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

// Flushes stdout; true when a write to it failed (a full disk, a closed pipe).
// main() checks it at exit; a command that streams checks it as it goes.
bool StdoutFailed();

}  // namespace latte::cli
