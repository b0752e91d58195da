#include "text/tokenizer.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "text/byte_level.h"
#include "text/utf8.h"

namespace latte {
namespace {

using nlohmann::json;

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Normalizers that leave text unchanged: null and (nested) empty Sequences, which is
// what DeepSeek-V3 ships. Anything else would change ids, so it is an error.
Status CheckNormalizer(const json& j) {
  if (j.is_null()) return Status::Ok();
  const std::string type = j.is_object() ? j.value("type", std::string()) : std::string();
  if (type == "Sequence" && j.contains("normalizers") && j["normalizers"].is_array()) {
    for (const json& n : j["normalizers"]) LATTE_RETURN_IF_ERROR(CheckNormalizer(n));
    return Status::Ok();
  }
  return Status::Unimplemented("normalizer type \"" + type + "\" is not supported (supported: null, Sequence of none)");
}

Status CheckDecoder(const json& j) {
  const std::string type = j.is_object() ? j.value("type", std::string()) : std::string();
  if (type == "ByteLevel") return Status::Ok();
  return Status::Unimplemented("decoder type \"" + (j.is_null() ? std::string("null") : type) +
                               "\" is not supported (supported: ByteLevel)");
}

// Length of the valid UTF-8 character at text[i], or 0 when the byte there starts none.
size_t ValidCharLength(std::string_view text, size_t i) {
  const size_t n = Utf8SequenceLength(static_cast<unsigned char>(text[i]));
  if (n == 0 || i + n > text.size()) return 0;
  return IsValidUtf8(text.substr(i, n)) ? n : 0;
}

// The token string named by tokenizer_config.json's `key`: "..." or {"content": "..."}.
std::optional<std::string> ConfigTokenName(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text) {
  const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::DataLoss("tokenizer.json is not a JSON object");
  return FromJsonValue(j);
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromJsonValue(const json& j) {
  if (!j.contains("model") || !j["model"].is_object())
    return Status::DataLoss("tokenizer.json has no \"model\" object");
  const json& model = j["model"];
  const std::string type = model.value("type", std::string(model.contains("merges") ? "BPE" : ""));
  if (type != "BPE") {
    return Status::Unimplemented("model type \"" + type + "\" is not supported (supported: BPE)");
  }
  auto tok = std::unique_ptr<Tokenizer>(new Tokenizer());
  LATTE_RETURN_IF_ERROR(CheckNormalizer(j.value("normalizer", json())));
  LATTE_RETURN_IF_ERROR(CheckDecoder(j.value("decoder", json())));
  LATTE_ASSIGN_OR_RETURN(tok->pre_tokenizer_, PreTokenizer::FromJson(j.value("pre_tokenizer", json())));
  LATTE_ASSIGN_OR_RETURN(tok->model_, BpeModel::FromJson(model, tok->pre_tokenizer_->byte_level()));
  tok->byte_fallback_ = model.value("byte_fallback", false);
  tok->vocab_size_ = tok->model_->IdLimit();
  LATTE_RETURN_IF_ERROR(tok->LoadAddedTokens(j.value("added_tokens", json::array())));
  return tok;
}

Status Tokenizer::LoadAddedTokens(const json& list) {
  if (!list.is_array()) return Status::DataLoss("added_tokens must be an array");
  std::vector<AddedToken> raw, normalized;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
        t["id"].get<int64_t>() >= INT32_MAX || !t.contains("content") || !t["content"].is_string() ||
        t["content"].get<std::string>().empty()) {
      return Status::DataLoss("added_tokens[" + std::to_string(i) + "] needs an id >= 0 and a non-empty content");
    }
    AddedToken token;
    token.id = t["id"].get<int32_t>();
    token.content = t["content"].get<std::string>();
    if (!IsValidUtf8(token.content)) return Status::DataLoss("added_tokens[" + std::to_string(i) + "] is not UTF-8");
    token.special = t.value("special", false);
    token.normalized = t.value("normalized", !token.special);
    token.lstrip = t.value("lstrip", false);
    token.rstrip = t.value("rstrip", false);
    token.single_word = t.value("single_word", false);
    (token.normalized ? normalized : raw).push_back(token);
    added_by_id_[token.id] = token;
    added_by_content_[token.content] = token.id;
    vocab_size_ = std::max(vocab_size_, token.id + 1);
  }
  raw_matcher_ = AddedTokenMatcher(std::move(raw));
  normalized_matcher_ = AddedTokenMatcher(std::move(normalized));
  return Status::Ok();
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  LATTE_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  auto tok = FromJson(text);
  if (!tok.ok()) return tok.status().WithContext(path);
  return tok;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir) {
  LATTE_ASSIGN_OR_RETURN(auto tok, FromFile(dir + "/tokenizer.json"));
  const std::string config_path = dir + "/tokenizer_config.json";
  if (!std::filesystem::exists(config_path)) return tok;
  LATTE_ASSIGN_OR_RETURN(const std::string text, ReadFile(config_path));
  const json config = json::parse(text, nullptr, false);
  if (config.is_discarded() || !config.is_object()) return Status::DataLoss(config_path + ": not a JSON object");
  for (const auto& [key, slot] : {std::pair{"bos_token", &tok->bos_id_}, std::pair{"eos_token", &tok->eos_id_}}) {
    const auto name = ConfigTokenName(config, key);
    if (!name) continue;
    const auto id = tok->TokenToId(*name);
    if (!id) return Status::NotFound(config_path + ": " + key + " \"" + *name + "\" is not in tokenizer.json");
    *slot = *id;
  }
  return tok;
}

std::optional<int32_t> Tokenizer::InvalidByteId(uint8_t b) const {
  if (pre_tokenizer_->byte_level()) return model_->TokenToId(ByteLevelChar(b));
  if (byte_fallback_) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    return model_->TokenToId(name);
  }
  return std::nullopt;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  if (IsValidUtf8(text)) {
    EncodeValid(text, out);
    return out;
  }
  // Valid runs are encoded on their own; each byte between them is one token.
  size_t run_start = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t n = ValidCharLength(text, i);
    if (n > 0) {
      i += n;
      continue;
    }
    EncodeValid(text.substr(run_start, i - run_start), out);
    if (const auto id = InvalidByteId(static_cast<uint8_t>(text[i]))) out.push_back(*id);
    run_start = ++i;
  }
  EncodeValid(text.substr(run_start), out);
  return out;
}

void Tokenizer::EncodeValid(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  thread_local std::vector<TextSegment> raw_segments, segments;
  raw_segments.clear();
  raw_matcher_.Split(text, raw_segments);
  // The normalizer is the identity (CheckNormalizer), so normalized added tokens
  // are matched on the same bytes, in what the first pass left.
  const std::vector<TextSegment> first_pass = raw_segments;
  for (const TextSegment& seg : first_pass) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    segments.clear();
    normalized_matcher_.Split(seg.text, segments);
    for (const TextSegment& s : segments) {
      if (s.id >= 0)
        out.push_back(s.id);
      else
        EncodeWithoutAddedTokens(s.text, out);
    }
  }
}

void Tokenizer::EncodeWithoutAddedTokens(std::string_view text, std::vector<int32_t>& out) const {
  pre_tokenizer_->ForEach(text, [this, &out](std::string_view piece) { model_->Encode(piece, out); });
}

std::string Tokenizer::TokenBytes(int32_t id, bool skip_special) const {
  const auto added = added_by_id_.find(id);
  if (added != added_by_id_.end()) {
    return skip_special && added->second.special ? std::string() : added->second.content;
  }
  const std::string& token = model_->IdToToken(id);
  std::string bytes;
  if (!AppendFromByteLevel(token, bytes)) return token;  // not byte-level: its own UTF-8
  return bytes;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) bytes += TokenBytes(id, skip_special);
  return Utf8Lossy(bytes);
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  const auto it = added_by_content_.find(std::string(token));
  if (it != added_by_content_.end()) return it->second;
  return model_->TokenToId(token);
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  const auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return it->second.content;
  const std::string& token = model_->IdToToken(id);
  if (token.empty()) return std::nullopt;
  return token;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && it->second.special;
}

}  // namespace latte
