// latte: one binary, one subcommand per job (see README.md).
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>

#include <omp.h>

#include "base/cpu_load.h"
#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "dist/runtime.h"

#ifndef LATTE_VERSION
#define LATTE_VERSION "unknown"
#endif
#ifndef LATTE_GIT_COMMIT
#define LATTE_GIT_COMMIT "unknown"
#endif

namespace latte::cli {
namespace {
int g_exit_code = 0;

// How OpenMP threads wait between parallel regions, chosen at start from how busy the
// other processes keep the CPUs (50 ms of /proc/stat):
//   - CPUs idle: spin GOMP_SPINCOUNT=10000 times (~0.1-0.2 ms) before sleeping. A decode
//     step opens ~13 parallel regions a layer (53 a token on the 4-layer v2-lite, counted
//     with a uprobe on GOMP_parallel) with serial work between them; a worker
//     that slept there takes ~0.1 ms to wake (a futex and, in a VM, a halted vCPU), so
//     waiting passively cost fast decode (a 4-bit v2-lite token every ~9 ms) a third of
//     its speed, and shorter spins (2000) did not cover the gaps.
//   - CPUs busy (half a CPU or more): sleep at once (OMP_WAIT_POLICY=passive). Spinning
//     workers then take the cores from the thread everyone waits for: 2 threads decoded
//     10x slower than 1 under heavy load, and with one busy process beside them a
//     10000 spin ran at 0.6x of passive waiting (docs/benchmarks.md, "Threads on a busy
//     machine").
// libgomp reads these once, when it loads, before main(): so they are set from the
// executable's .preinit_array, which runs before any shared library initializer. A value
// the user set (OMP_WAIT_POLICY, or GOMP_SPINCOUNT) is kept, and nothing is measured.
constexpr double kBusyCpusForPassive = 0.5;
constexpr int kLoadWindowMs = 50;

void DefaultWaitPolicy(int, char**, char**) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  const std::optional<double> busy = OtherBusyCpus(kLoadWindowMs);
  if (busy && *busy < kBusyCpusForPassive) {
    ::setenv("GOMP_SPINCOUNT", "10000", /*overwrite=*/0);
  } else {
    ::setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0);
  }
}
[[gnu::section(".preinit_array"), gnu::used]] void (*const g_default_wait_policy)(int, char**,
                                                                                  char**) = &DefaultWaitPolicy;
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

bool StdoutFailed() { return std::fflush(stdout) != 0 || std::ferror(stdout) != 0; }

}  // namespace latte::cli

namespace {

int Run(int argc, char** argv) {
  CLI::App app{"latte: inference for DeepSeek models with Multi-head Latent Attention", "latte"};
  app.require_subcommand(1);
  app.option_defaults()->disable_flag_override();  // "--chat=3" is an error, not true
  app.set_version_flag("--version", std::string("latte ") + LATTE_VERSION + " (commit " + LATTE_GIT_COMMIT + ")",
                       "Print the version and the git commit it was built from");
  latte::cli::AddGenerateCommand(app);
  latte::cli::AddMakeModelCommand(app);
  latte::cli::AddConvertCommand(app);
  latte::cli::AddCalcCommand(app);
  latte::cli::AddBenchCommand(app);
  latte::cli::AddTokenizeCommand(app);
  latte::cli::AddServeCommand(app);
  latte::cli::AddEvalCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s\n", latte::cli::ParseErrorMessage(app, e).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", latte::cli::CommandPath(app).c_str(), e.what());
    return 1;
  }
  // A full disk or a closed pipe: what was printed did not arrive.
  if (latte::cli::StdoutFailed()) {
    std::fprintf(stderr, "%s: error: writing to stdout failed: %s\n", latte::cli::CommandPath(app).c_str(),
                 std::strerror(errno));
    return 1;
  }
  return latte::cli::ExitCode();
}

// Run() catches what a command throws; this catches what building the app or the
// error message itself might.
int RunCatching(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "latte: error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "latte: error: an unknown exception\n");
  }
  return 1;
}

}  // namespace

// Under mpirun every process joins the job first (MPI is initialised before any thread
// starts). A rank that fails ends the whole job: the others may be waiting for it
// inside a collective, and would wait forever.
int main(int argc, char** argv) {
  if (const latte::Status s = latte::InitDistributed(&argc, &argv); !s.ok()) {
    std::fprintf(stderr, "latte: error: %s\n", s.message().c_str());
    return 1;
  }
  const int code = RunCatching(argc, argv);
  if (code != 0 && latte::WorldComm().size() > 1) {
    latte::WorldComm().Abort("exited with status " + std::to_string(code) + ": ending every rank of the job");
  }
  latte::FinalizeDistributed();
  return code;
}
