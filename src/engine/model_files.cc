#include "engine/model_files.h"

#include <filesystem>

#include "model/gguf_checkpoint.h"
#include "model/safetensors.h"
#include "text/gguf_vocabulary.h"

namespace latte {
namespace {

namespace fs = std::filesystem;

std::string FileName(const std::string& path) { return fs::path(path).filename().string(); }

// The vocabulary's metadata as text/gguf_vocabulary.h takes it.
Result<GgufVocabulary> ReadVocabulary(const GgufModel& gguf) {
  GgufVocabulary v;
  LATTE_ASSIGN_OR_RETURN(v.model, gguf.GetString(kGgufTokenizerModelKey));
  // No pre name: llama.cpp tokenizes with its "default" regexes.
  v.pre = "default";
  if (gguf.Find(kGgufTokenizerPreKey)) {
    LATTE_ASSIGN_OR_RETURN(v.pre, gguf.GetString(kGgufTokenizerPreKey));
  }
  LATTE_ASSIGN_OR_RETURN(v.tokens, gguf.GetStringArray(kGgufTokensKey));
  if (gguf.Find(kGgufTokenTypeKey)) {
    LATTE_ASSIGN_OR_RETURN(const std::vector<int64_t> types, gguf.GetIntArray(kGgufTokenTypeKey));
    v.token_types.assign(types.begin(), types.end());
  }
  if (gguf.Find(kGgufMergesKey)) {
    LATTE_ASSIGN_OR_RETURN(v.merges, gguf.GetStringArray(kGgufMergesKey));
  }
  for (auto [key, id] : {std::pair{kGgufBosIdKey, &v.bos_id}, std::pair{kGgufEosIdKey, &v.eos_id},
                         std::pair{kGgufPaddingIdKey, &v.padding_id}}) {
    if (gguf.Find(key)) {
      LATTE_ASSIGN_OR_RETURN(*id, gguf.GetInt(key));
    }
  }
  for (auto [key, flag] : {std::pair{kGgufAddBosKey, &v.add_bos}, std::pair{kGgufAddEosKey, &v.add_eos}}) {
    if (gguf.Find(key)) {
      LATTE_ASSIGN_OR_RETURN(*flag, gguf.GetBool(key));
    }
  }
  if (gguf.Find(kGgufChatTemplateKey)) {
    LATTE_ASSIGN_OR_RETURN(v.chat_template, gguf.GetString(kGgufChatTemplateKey));
  }
  return v;
}

}  // namespace

Result<ModelFiles> ModelFiles::Find(const std::string& model) {
  ModelFiles files;
  files.path_ = model;
  std::error_code ec;
  if (!fs::is_directory(model, ec) && !fs::is_regular_file(model, ec)) {
    return Status::NotFound("model " + model + " is neither a folder nor a .gguf file", "model");
  }
  LATTE_ASSIGN_OR_RETURN(const std::optional<std::string> gguf, FindGgufFile(model));
  if (!gguf) {
    if (!fs::is_directory(model, ec)) {
      return Status::InvalidArgument("model " + model + " is a file but not a .gguf one", "model");
    }
    return files;
  }
  LATTE_ASSIGN_OR_RETURN(GgufModel opened, GgufModel::Open(*gguf));
  files.gguf_path_ = *gguf;
  files.gguf_ = std::make_shared<const GgufModel>(std::move(opened));
  return files;
}

Result<ModelConfig> ModelFiles::Config() const {
  if (gguf_) return ConfigFromGguf(*gguf_, gguf_path_);
  return ModelConfig::FromFile((fs::path(path_) / "config.json").string());
}

bool ModelFiles::HasTokenizer() const {
  if (gguf_) return gguf_->Find(kGgufTokensKey) != nullptr;
  std::error_code ec;
  return fs::exists(fs::path(path_) / "tokenizer.json", ec);
}

Result<std::unique_ptr<Tokenizer>> ModelFiles::LoadTokenizer() const {
  if (!gguf_) return Tokenizer::FromDirectory(path_);
  Result<GgufVocabulary> vocabulary = ReadVocabulary(*gguf_);
  Result<std::unique_ptr<Tokenizer>> tokenizer =
      vocabulary.ok() ? TokenizerFromGguf(*vocabulary) : Result<std::unique_ptr<Tokenizer>>(vocabulary.status());
  if (!tokenizer.ok()) return tokenizer.status().WithContext(FileName(gguf_path_));
  return tokenizer;
}

Result<ChatTemplate> ModelFiles::LoadChatTemplate() const {
  if (!gguf_) {
    const std::string config = (fs::path(path_) / "tokenizer_config.json").string();
    std::error_code ec;
    if (!fs::exists(config, ec)) return Status::NotFound(config + ": cannot open");
    return ChatTemplate::FromTokenizerConfig(config);
  }
  LATTE_ASSIGN_OR_RETURN(const GgufVocabulary vocabulary, ReadVocabulary(*gguf_));
  if (!vocabulary.chat_template) {
    return Status::NotFound(FileName(gguf_path_) + " has no " + kGgufChatTemplateKey);
  }
  const std::string& source = *vocabulary.chat_template;
  // The template writes BOS and EOS by their texts, as llama.cpp renders it.
  const auto text = [&](std::optional<int64_t> id) -> std::optional<std::string> {
    if (!id || *id < 0 || *id >= static_cast<int64_t>(vocabulary.tokens.size())) return std::nullopt;
    return vocabulary.tokens[*id];
  };
  Result<ChatTemplate> parsed =
      ChatTemplate::WithSpecialTokens(source, text(vocabulary.bos_id), text(vocabulary.eos_id));
  if (!parsed.ok()) return parsed.status().WithContext(FileName(gguf_path_));
  return parsed;
}

Result<StoredCheckpoint> ModelFiles::StoredTensors(const ModelConfig& config) const {
  if (gguf_) {
    LATTE_ASSIGN_OR_RETURN(const std::vector<TensorInfo> tensors, GgufTensorTable(gguf_, config));
    return StoredCheckpointOf(tensors, /*gguf=*/true);
  }
  LATTE_ASSIGN_OR_RETURN(const Checkpoint checkpoint, Checkpoint::Open(path_));
  return StoredCheckpointOf(checkpoint.tensors(), /*gguf=*/false);
}

}  // namespace latte
