// The serving stack built from one EngineConfig: the weights, the model over them,
// the tokenizer, the memory plan and a started engine. `latte generate`, `serve` and
// `bench engine` build theirs here, as the tests do, and as each process of a
// multi-process run will: nothing about assembling an engine lives in the CLI.
#pragma once

#include <memory>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/engine_config.h"
#include "engine/memory_plan.h"
#include "model/config.h"
#include "model/deepseek.h"
#include "model/model_weights.h"
#include "text/tokenizer.h"

namespace latte {

struct ServingStack {
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<DeepSeekModel> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the directory has no tokenizer.json
  MemoryPlan plan;
  std::unique_ptr<Engine> engine;  // started (its step loop runs on its own thread)
};

// The model directory's config.json and tokenizer (null without tokenizer.json), read
// before any weight: what a command checks its requests against (the context length,
// the vocabulary, the chat template) so that a bad one fails before the load.
struct ModelPreview {
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
};
Result<ModelPreview> PreviewModel(const std::string& dir);

// Validates `config` and the memory budget against the machine (before anything is
// read), loads the weights and the tokenizer (or takes `tokenizer`, from
// PreviewModel), sets the compute threads, plans memory, logs the plan on stderr
// when `log`, and starts the engine. Errors from the config name its field.
Result<std::unique_ptr<ServingStack>> BuildServingStack(const EngineConfig& config, bool log,
                                                        std::unique_ptr<Tokenizer> tokenizer = nullptr);

}  // namespace latte
