// latte: one binary, one subcommand per job (see README.md).
#include <cstdio>
#include <exception>

#include <omp.h>

#include "cli/commands.h"

namespace latte::cli {
namespace {
int g_exit_code = 0;
}  // namespace

void ExitWith(int code) {
  if (code != 0) g_exit_code = code;
}
int ExitCode() { return g_exit_code; }

void ExitOnError(const char* command, const Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "latte %s: error: %s\n", command, status.message().c_str());
  ExitWith(1);
}

void SetThreads(int threads) {
  if (threads <= 0) threads = omp_get_num_procs();
  omp_set_num_threads(threads);
}

}  // namespace latte::cli

namespace {

int Run(int argc, char** argv) {
  CLI::App app{"latte: inference for DeepSeek models with Multi-head Latent Attention"};
  app.require_subcommand(1);
  latte::cli::AddGenerateCommand(app);
  latte::cli::AddMakeModelCommand(app);
  latte::cli::AddCalcCommand(app);
  latte::cli::AddBenchCommand(app);
  latte::cli::AddTokenizeCommand(app);
  latte::cli::AddServeCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return latte::cli::ExitCode();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "latte: error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "latte: error: an unknown exception\n");
  }
  return 1;
}
