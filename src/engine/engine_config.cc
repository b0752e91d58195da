#include "engine/engine_config.h"

#include <omp.h>

#include "dist/runtime.h"

namespace latte {

Status EngineConfig::Validate() const {
  if (model.empty()) return Status::InvalidArgument("model must name a model directory", "model");
  if (threads < 0 || threads > kMaxThreads) {
    return Status::InvalidArgument(
        "threads must be in [0, " + std::to_string(kMaxThreads) + "] (0: every core), got " + std::to_string(threads),
        "threads");
  }
  LATTE_RETURN_IF_ERROR(CheckLoadOptions(load));
  LATTE_RETURN_IF_ERROR(CheckLayout(load.parallel, LauncherWorldSize(), MpiBuiltIn()));
  if (!(dist_timeout_s >= 0)) {
    return Status::InvalidArgument("dist_timeout must be >= 0 seconds (0: no limit)", "dist_timeout");
  }
  if (speculative != "none" && speculative != "mtp") {
    return Status::InvalidArgument("speculative must be none or mtp, got \"" + speculative + "\"", "speculative");
  }
  if (num_speculative_tokens < 1 || num_speculative_tokens > kMaxSpeculativeTokens) {
    return Status::InvalidArgument("num_speculative_tokens must be in [1, " + std::to_string(kMaxSpeculativeTokens) +
                                       "], got " + std::to_string(num_speculative_tokens),
                                   "num_speculative_tokens");
  }
  if (speculates() && load.parallel.world_size() > 1) {
    return Status::InvalidArgument("--speculative mtp runs in one process only (not under --tp, --dp or --ep)",
                                   "speculative");
  }
  LATTE_RETURN_IF_ERROR(memory.Validate());
  return scheduler.Validate();
}

void SetThreads(int threads) {
  if (threads <= 0) threads = omp_get_num_procs();
  omp_set_num_threads(threads);
}

void SetThreadsForModel(int threads, int64_t weight_bytes) {
  if (threads <= 0 && weight_bytes < kSingleThreadModelBytes) threads = 1;
  SetThreads(threads);
}

}  // namespace latte
