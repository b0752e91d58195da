// The flags every command that runs the serving engine takes (generate, serve, bench
// engine), and the one place that turns them into a loaded model, a memory plan and
// an engine.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "model/deepseek.h"
#include "model/model_weights.h"
#include "text/tokenizer.h"

namespace latte::cli {

struct EngineFlags {
  std::string model;
  std::string mla_mode = "absorbed";
  std::string fp8 = "keep";
  std::string quantize = "none";
  bool huge_pages = false;
  int threads = 0;  // 0: every core (no -t)
  std::optional<double> memory_gb;
  std::optional<int64_t> num_kv_blocks;
  int64_t block_size = kDefaultKvBlockSize;
  std::string kv_cache_dtype = "auto";
  int64_t max_num_seqs = SchedulerConfig{}.max_num_seqs;
  int64_t max_num_batched_tokens = SchedulerConfig{}.max_num_batched_tokens;
  int64_t max_prefill_burst_tokens = SchedulerConfig{}.max_prefill_burst_tokens;
  bool no_prefix_cache = false;
};

void AddEngineFlags(CLI::App& cmd, EngineFlags& flags);

// --quantize none|fp8 (engine commands and bench model).
void AddQuantizeOption(CLI::App& cmd, std::string& quantize);

// The load flags every command that loads weights shares (--mla-mode, --fp8,
// --quantize, --huge-pages) as LoadOptions, checked (CheckLoadOptions) before any load.
Result<LoadOptions> LoadOptionsFromFlags(const std::string& mla_mode, const std::string& fp8,
                                         const std::string& quantize, bool huge_pages);

// The model, its tokenizer (null when the directory has none), the memory plan and a
// started engine over them.
struct ServingStack {
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<DeepSeekModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  MemoryPlan plan;
  std::unique_ptr<Engine> engine;
};

// The model directory's config.json and tokenizer (null without tokenizer.json), read
// before any weight: what a command checks its flags against (the context length, the
// vocabulary, the chat template) so that a bad request fails before the load.
struct ModelPreview {
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
};
Result<ModelPreview> PreviewModel(const std::string& dir);

// Validates the flags (before anything is loaded), loads the model and tokenizer (or
// takes `tokenizer`, from PreviewModel), plans memory, logs the plan on stderr when
// `log`, and starts the engine's thread.
Result<std::unique_ptr<ServingStack>> StartServingStack(const EngineFlags& flags, bool log,
                                                        std::unique_ptr<Tokenizer> tokenizer = nullptr);

}  // namespace latte::cli
