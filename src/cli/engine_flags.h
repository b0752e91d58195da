// The flags every command that runs the serving engine takes (generate, serve, bench
// engine), bound straight to the fields of one EngineConfig (engine/engine_config.h):
// --max-num-seqs is config.scheduler.max_num_seqs. The values are checked once, by
// EngineConfig::Validate when the stack is built; here only their types and choices.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "engine/engine_config.h"
#include "model/model_weights.h"

namespace latte::cli {

void AddEngineFlags(CLI::App& cmd, EngineConfig& config);

// The load flags every command that loads weights shares: --mla-mode, --fp8,
// --quantize, --huge-pages (bench model takes them without the engine's).
void AddLoadFlags(CLI::App& cmd, LoadOptions& load);

}  // namespace latte::cli
