#include "text/gguf_vocabulary.h"

#include <algorithm>
#include <climits>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "text/utf8.h"

namespace latte {
namespace {

using nlohmann::json;

// GPT-2's word regex as llama.cpp lists it: without GPT-2's last alternative \s+, so
// whitespace before a non-space that no alternative takes is left between matches,
// and a Split isolates it as a pre-token just the same.
constexpr char kGpt2Words[] = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";

// DeepSeek-LLM's (V2's) letters: the Latin, Greek, Cyrillic, Armenian, Georgian,
// Cherokee, ... cased letters of its tokenizer.json, written as code points (several
// have canonically equivalent lookalikes that Unicode normalization would swap in).
constexpr char kDeepSeekLlmLetters[] =
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})re"
    R"re(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})re"
    R"re(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})re"
    R"re(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})re"
    R"re(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})re"
    R"re(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})re"
    R"re(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})re"
    R"re(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})re"
    R"re(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})re"
    R"re(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})re"
    R"re(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})re"
    R"re(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})re"
    R"re(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)re";

struct PreTokenizerSpec {
  std::string_view name;
  std::vector<std::string> regexes;
};

// llama.cpp's regexes per tokenizer.ggml.pre name (src/llama-vocab.cpp), in
// kGgufPreTokenizers' order.
const std::vector<PreTokenizerSpec>& PreTokenizerSpecs() {
  static const std::vector<PreTokenizerSpec> specs = {
      {"deepseek-v3",
       {R"re(\p{N}{1,3})re", R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re",
        R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|)re"
        R"re( ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {"deepseek-llm",
       {R"re([\r\n])re", kDeepSeekLlmLetters,
        R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re", R"re(\s+$)re",
        R"re([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re", R"re(\p{N}+)re"}},
      {"gpt-2", {kGpt2Words}},
      {"default", {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2Words, R"re(\p{N}+)re", R"re([0-9][0-9][0-9])re"}},
  };
  return specs;
}

std::string KnownPreNames() {
  std::string names;
  for (const char* name : kGgufPreTokenizers) names += std::string(names.empty() ? "" : ", ") + "\"" + name + "\"";
  return names;
}

// DataLoss blaming one metadata key (the message starts with it too).
Status KeyError(const char* key, const std::string& message) {
  return Status(StatusCode::kDataLoss, std::string(key) + ": " + message, key);
}

// "a b" → (a, b), split at the first space after the first byte, as llama.cpp does (a
// left part may itself be a space in a vocabulary that is not byte-level).
bool SplitMerge(std::string_view merge, std::string& left, std::string& right) {
  const size_t space = merge.size() > 1 ? merge.find(' ', 1) : std::string_view::npos;
  if (space == std::string_view::npos) return false;
  left = merge.substr(0, space);
  right = merge.substr(space + 1);
  return true;
}

// convert_hf_to_gguf.py's does_token_look_special: added tokens that ought to be
// control tokens even where a tokenizer.json marks them special=false.
bool LooksSpecial(std::string_view t) {
  const auto wrapped = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.substr(0, open.size()) == open &&
           t.substr(t.size() - close.size()) == close;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<｜", "｜>") || wrapped("<unused", ">");
}

std::string ReplaceAll(std::string s, std::string_view from, std::string_view to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

// The token string a tokenizer_config.json entry names: "..." or {"content": "..."}.
std::optional<std::string> ConfigTokenName(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

Result<std::vector<std::string>> GgufPreTokenizerRegexes(std::string_view pre) {
  for (const PreTokenizerSpec& spec : PreTokenizerSpecs()) {
    if (spec.name == pre) return spec.regexes;
  }
  return Status::Unimplemented(std::string(kGgufTokenizerPreKey) + " \"" + std::string(pre) +
                                   "\" is not supported (supported: " + KnownPreNames() + ")",
                               kGgufTokenizerPreKey);
}

Result<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufVocabulary& v) {
  if (v.model != "gpt2") {
    return Status::Unimplemented(std::string(kGgufTokenizerModelKey) + " \"" + v.model +
                                     "\" is not supported (supported: \"gpt2\", byte-level BPE)",
                                 kGgufTokenizerModelKey);
  }
  LATTE_ASSIGN_OR_RETURN(const std::vector<std::string> regexes, GgufPreTokenizerRegexes(v.pre));
  const size_t n = v.tokens.size();
  if (n == 0) return KeyError(kGgufTokensKey, "the vocabulary has no tokens");
  if (n > static_cast<size_t>(INT32_MAX)) return KeyError(kGgufTokensKey, std::to_string(n) + " tokens is too many");
  if (!v.token_types.empty() && v.token_types.size() != n) {
    return KeyError(kGgufTokenTypeKey,
                    "has " + std::to_string(v.token_types.size()) + " entries for " + std::to_string(n) + " tokens");
  }
  for (const auto& [key, id] : {std::pair{kGgufBosIdKey, v.bos_id}, std::pair{kGgufEosIdKey, v.eos_id},
                                std::pair{kGgufPaddingIdKey, v.padding_id}}) {
    if (id && (*id < 0 || *id >= static_cast<int64_t>(n))) {
      return KeyError(key, "id " + std::to_string(*id) + " is outside the " + std::to_string(n) + " tokens");
    }
  }

  // model.vocab: every token but unused (and empty) ones, as llama.cpp's token_to_id
  // holds them; added_tokens: control, unknown and user-defined ones.
  json vocab = json::object();
  json added = json::array();
  std::unordered_map<std::string_view, int32_t> ids;  // model.vocab, to check the merges
  ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const int32_t type = v.token_types.empty() ? kGgufTokenNormal : v.token_types[i];
    const std::string& token = v.tokens[i];
    const auto at = [i] { return "[" + std::to_string(i) + "]"; };
    if (type < kGgufTokenNormal || type > kGgufTokenByte) {
      return KeyError(kGgufTokenTypeKey, at() + " is " + std::to_string(type) + ", not a token type (1..6)");
    }
    if (type == kGgufTokenUnused) continue;
    const bool whole = type == kGgufTokenControl || type == kGgufTokenUnknown || type == kGgufTokenUserDefined;
    if (whole && (token.empty() || !IsValidUtf8(token))) {
      return KeyError(kGgufTokensKey, at() + ": a control or user-defined token must be non-empty UTF-8");
    }
    if (token.empty()) continue;  // llama.cpp renames it "[EMPTY_i]": nothing can produce it
    const auto [it, inserted] = ids.emplace(token, static_cast<int32_t>(i));
    if (!inserted) {
      return KeyError(kGgufTokensKey, at() + " repeats token [" + std::to_string(it->second) + "]");
    }
    vocab[token] = static_cast<int32_t>(i);
    if (whole) {
      added.push_back({{"id", static_cast<int32_t>(i)},
                       {"content", token},
                       {"special", type != kGgufTokenUserDefined},
                       {"normalized", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"single_word", false}});
    }
  }

  // A repeated pair keeps its first rank, as llama.cpp's bpe_ranks.emplace does.
  json merges = json::array();
  std::unordered_set<std::string> seen;
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const auto at = [r] { return "[" + std::to_string(r) + "]"; };
    std::string left, right;
    if (!SplitMerge(v.merges[r], left, right)) {
      return KeyError(kGgufMergesKey, at() + " \"" + v.merges[r] + "\" is not two tokens and a space");
    }
    for (const std::string& part : {left, right, left + right}) {
      if (!ids.count(part)) {
        return KeyError(kGgufMergesKey, at() + " \"" + v.merges[r] + "\" needs \"" + part +
                                            "\", which is not a token of the vocabulary");
      }
    }
    if (seen.insert(v.merges[r]).second) merges.push_back({std::move(left), std::move(right)});
  }

  json pretokenizers = json::array();
  for (const std::string& regex : regexes) {
    pretokenizers.push_back(
        {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}});
  }
  const json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  pretokenizers.push_back(byte_level);
  json j = {{"version", "1.0"},
            {"added_tokens", std::move(added)},
            {"normalizer", nullptr},
            {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", std::move(pretokenizers)}}},
            {"post_processor", nullptr},
            {"decoder", byte_level},
            {"model",
             {{"type", "BPE"},
              {"byte_fallback", false},
              {"ignore_merges", false},
              {"vocab", std::move(vocab)},
              {"merges", std::move(merges)}}}};
  auto tokenizer = Tokenizer::FromJsonValue(j);
  if (!tokenizer.ok()) return tokenizer.status().WithContext("GGUF vocabulary");
  Tokenizer& tok = *tokenizer.value();
  tok.vocab_size_ = static_cast<int32_t>(n);
  if (v.bos_id) tok.bos_id_ = static_cast<int32_t>(*v.bos_id);
  if (v.eos_id) tok.eos_id_ = static_cast<int32_t>(*v.eos_id);
  return tokenizer;
}

Result<GgufVocabulary> GgufVocabularyFromTokenizerJson(std::string_view tokenizer_json, int64_t vocab_size,
                                                       std::string pre,
                                                       std::optional<std::string_view> tokenizer_config_json) {
  LATTE_RETURN_IF_ERROR(GgufPreTokenizerRegexes(pre).status());
  if (vocab_size <= 0 || vocab_size > INT32_MAX) {
    return Status::InvalidArgument("vocab_size " + std::to_string(vocab_size) + " is not a vocabulary size",
                                   "vocab_size");
  }
  const json j = json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::DataLoss("tokenizer.json is not a JSON object");
  if (!j.contains("model") || !j["model"].is_object())
    return Status::DataLoss("tokenizer.json has no \"model\" object");
  const json& model = j["model"];
  const std::string decoder =
      j.contains("decoder") && j["decoder"].is_object() ? j["decoder"].value("type", std::string()) : std::string();
  if (model.value("type", std::string()) != "BPE" || model.value("byte_fallback", false) || decoder != "ByteLevel") {
    return Status::Unimplemented(
        "tokenizer.json is not byte-level BPE (model BPE without byte_fallback, decoder "
        "ByteLevel): tokenizer.ggml.model \"gpt2\" cannot hold it");
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) return Status::DataLoss("model.vocab must be an object");
  const json added_list = j.value("added_tokens", json::array());
  if (!added_list.is_array()) return Status::DataLoss("added_tokens must be an array");

  // id → token; the added tokens' entries win over model.vocab's, as in the converter's
  // reverse of tokenizer.vocab.
  struct Entry {
    std::string token;
    bool present = false;
    const json* added = nullptr;
  };
  std::vector<Entry> entries(static_cast<size_t>(vocab_size));
  const auto place = [&](int64_t id, const std::string& token, const json* added, const std::string& where) -> Status {
    if (id < 0) return Status::DataLoss(where + " has id " + std::to_string(id));
    if (id >= vocab_size) {
      return Status::InvalidArgument("vocab_size " + std::to_string(vocab_size) + " is below the tokenizer's id " +
                                         std::to_string(id) + " (" + where + ")",
                                     "vocab_size");
    }
    Entry& e = entries[static_cast<size_t>(id)];
    if (e.added && !added) return Status::Ok();
    e = Entry{token, true, added};
    return Status::Ok();
  };
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer()) return Status::DataLoss("model.vocab[\"" + token + "\"] is not a token id");
    LATTE_RETURN_IF_ERROR(place(id.get<int64_t>(), token, nullptr, "model.vocab[\"" + token + "\"]"));
  }
  for (size_t i = 0; i < added_list.size(); ++i) {
    const json& t = added_list[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
        !t["content"].is_string()) {
      return Status::DataLoss(where + " needs an integer id and a string content");
    }
    LATTE_RETURN_IF_ERROR(place(t["id"].get<int64_t>(), t["content"].get<std::string>(), &t, where));
  }

  GgufVocabulary out;
  out.model = "gpt2";
  out.pre = std::move(pre);
  out.tokens.reserve(entries.size());
  out.token_types.reserve(entries.size());
  for (size_t id = 0; id < entries.size(); ++id) {
    Entry& e = entries[id];
    if (!e.present) {
      out.tokens.push_back("[PAD" + std::to_string(id) + "]");
      out.token_types.push_back(kGgufTokenUnused);
    } else if (!e.added) {
      out.tokens.push_back(std::move(e.token));
      out.token_types.push_back(kGgufTokenNormal);
    } else if (e.added->value("special", false) || LooksSpecial(e.token)) {
      out.tokens.push_back(std::move(e.token));
      out.token_types.push_back(kGgufTokenControl);
    } else {
      out.tokens.push_back(ReplaceAll(std::move(e.token), "▁", " "));  // the converter's pre-normalized spaces
      out.token_types.push_back(kGgufTokenUserDefined);
    }
  }

  if (!model.contains("merges") || !model["merges"].is_array())
    return Status::DataLoss("model.merges must be an array");
  const json& merges = model["merges"];
  out.merges.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const json& m = merges[r];
    if (m.is_string()) {
      out.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      // A space inside a part would read as the separator: the converter writes it as
      // its byte-level character.
      out.merges.push_back(ReplaceAll(m[0].get<std::string>(), " ", "Ġ") + " " +
                           ReplaceAll(m[1].get<std::string>(), " ", "Ġ"));
    } else {
      return Status::DataLoss("model.merges[" + std::to_string(r) + "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }

  if (!tokenizer_config_json) return out;
  const json config = json::parse(*tokenizer_config_json, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return Status::DataLoss("tokenizer_config.json is not a JSON object");
  }
  // Token names resolve through the added tokens first (the converter's lookup), then
  // model.vocab.
  const auto id_of = [&](const std::string& name) -> std::optional<int64_t> {
    for (const json& t : added_list) {
      if (t["content"] == name) return t["id"].get<int64_t>();
    }
    if (model["vocab"].contains(name)) return model["vocab"][name].get<int64_t>();
    return std::nullopt;
  };
  for (const auto& [key, slot] : {std::pair{"bos_token", &out.bos_id}, std::pair{"eos_token", &out.eos_id},
                                  std::pair{"pad_token", &out.padding_id}}) {
    const auto name = ConfigTokenName(config, key);
    if (!name) continue;
    *slot = id_of(*name);
    if (!*slot)
      return Status::NotFound(std::string("tokenizer_config.json: ") + key + " \"" + *name +
                              "\" is not in tokenizer.json");
  }
  for (const auto& [key, slot] : {std::pair{"add_bos_token", &out.add_bos}, std::pair{"add_eos_token", &out.add_eos}}) {
    if (config.contains(key) && config[key].is_boolean()) *slot = config[key].get<bool>();
  }
  if (config.contains("chat_template")) {
    const json& t = config["chat_template"];
    if (t.is_string()) {
      out.chat_template = t.get<std::string>();
    } else if (t.is_array()) {  // named templates: GGUF's tokenizer.chat_template is the "default" one
      for (const json& named : t) {
        if (named.is_object() && named.value("name", std::string()) == "default" && named.contains("template") &&
            named["template"].is_string()) {
          out.chat_template = named["template"].get<std::string>();
        }
      }
    }
  }
  return out;
}

}  // namespace latte
