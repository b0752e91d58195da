// What `--model` names, for everything but the weights (model/model_weights.h loads
// those): a Hugging Face directory (config.json, tokenizer.json, tokenizer_config.json)
// or a GGUF file, or a directory holding one (its metadata: the deepseek2.* keys, the
// tokenizer.ggml.* vocabulary, tokenizer.chat_template).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/gguf_file.h"
#include "base/status.h"
#include "model/config.h"
#include "model/cost_model.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace latte {

class ModelFiles {
 public:
  // Errors: a path that is neither a directory nor a .gguf file; a broken GGUF (its
  // header is read here, the tensor data is not).
  static Result<ModelFiles> Find(const std::string& model);

  const std::string& path() const { return path_; }
  bool is_gguf() const { return gguf_ != nullptr; }

  Result<ModelConfig> Config() const;
  bool HasTokenizer() const;
  Result<std::unique_ptr<Tokenizer>> LoadTokenizer() const;
  // NotFound when the model has no chat template.
  Result<ChatTemplate> LoadChatTemplate() const;
  // The weights' types and bytes as the files store them (headers only, no data read).
  Result<StoredCheckpoint> StoredTensors(const ModelConfig& config) const;

 private:
  std::string path_;
  std::string gguf_path_;
  std::shared_ptr<const GgufModel> gguf_;
};

}  // namespace latte
