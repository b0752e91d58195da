#include "synth/tiny_tokenizer.h"

#include <fstream>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/byte_level.h"

namespace latte {
namespace {

using nlohmann::ordered_json;  // keeps the vocab in id order, so the file reads naturally

// Merges in rank order, written as raw text (a leading space is the 'Ġ' of byte-level
// BPE). Each part is a single byte or the result of an earlier merge, so the list is a
// valid BPE model; the test checks that.
constexpr std::pair<const char*, const char*> kMerges[] = {
    {" ", "t"},    {" ", "a"},   {"h", "e"},   {"i", "n"},   {"r", "e"},   {"o", "n"},   {" t", "he"},  {"e", "r"},
    {" ", "s"},    {"a", "t"},   {" ", "w"},   {" ", "o"},   {"e", "n"},   {" ", "c"},   {"i", "t"},    {"i", "s"},
    {"a", "n"},    {"o", "r"},   {"e", "s"},   {" ", "b"},   {"e", "d"},   {" ", "f"},   {"in", "g"},   {" ", "p"},
    {"o", "u"},    {" a", "n"},  {"a", "l"},   {"a", "r"},   {" t", "o"},  {" ", "m"},   {" o", "f"},   {" ", "in"},
    {" ", "d"},    {" ", "h"},   {" an", "d"}, {"i", "c"},   {"a", "s"},   {"l", "e"},   {" t", "h"},   {"i", "on"},
    {"o", "m"},    {"l", "l"},   {"en", "t"},  {" ", "n"},   {" ", "l"},   {"s", "t"},   {" ", "re"},   {"v", "e"},
    {" ", "e"},    {"r", "o"},   {"l", "y"},   {" b", "e"},  {" ", "g"},   {" ", "T"},   {"c", "t"},    {" ", "S"},
    {"i", "d"},    {"o", "t"},   {" ", "I"},   {"u", "t"},   {"e", "t"},   {" ", "A"},   {" ", "is"},   {" ", "on"},
    {"i", "m"},    {"a", "m"},   {"o", "w"},   {"a", "y"},   {"a", "d"},   {"s", "e"},   {" th", "at"}, {" w", "it"},
    {" wit", "h"}, {" T", "he"}, {" ", "y"},   {" y", "ou"}, {"\n", "\n"}, {" f", "or"},
};

// Special tokens after bos/eos, in DeepSeek-V3's naming.
constexpr const char* kExtraSpecials[] = {kPadToken, kUserToken, kAssistantToken};

// Hands out ids from 0 upward, skipping the ids bos and eos already hold.
class IdAllocator {
 public:
  IdAllocator(int64_t bos, int64_t eos) : reserved_{bos, eos} {}
  int64_t Next() {
    while (reserved_.count(next_)) ++next_;
    return next_++;
  }

 private:
  std::set<int64_t> reserved_;
  int64_t next_ = 0;
};

ordered_json AddedToken(int64_t id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

// DeepSeek-V3's pre-tokenizer: digits in groups of up to 3, CJK runs, then a
// GPT-4-like word/punctuation split; ByteLevel only maps bytes (use_regex false).
ordered_json PreTokenizer() {
  auto split = [](const char* regex) {
    return ordered_json{
        {"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
  };
  return {{"type", "Sequence"},
          {"pretokenizers",
           {split("\\p{N}{1,3}"),
            split("[一-龥\u3040-ゟ゠-ヿ]+"),
            split("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|"
                  "[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|"
                  "\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
}

}  // namespace

int64_t TinyTokenizerSize() {
  std::set<std::string> tokens;
  for (const auto& [a, b] : kMerges) tokens.insert(std::string(a) + b);
  return 256 + static_cast<int64_t>(tokens.size()) + 2 + std::size(kExtraSpecials);
}

Result<std::string> TinyTokenizerJson(const ModelConfig& config) {
  const int64_t bos = config.bos_token_id;
  const int64_t eos = config.eos_token_id;
  if (bos == eos) return Status::InvalidArgument("bos_token_id and eos_token_id must differ");
  if (bos < 0 || eos < 0 || bos >= config.vocab_size || eos >= config.vocab_size) {
    return Status::InvalidArgument("bos_token_id/eos_token_id must be inside vocab_size");
  }
  if (config.vocab_size < TinyTokenizerSize()) {
    return Status::InvalidArgument("vocab_size " + std::to_string(config.vocab_size) + " is below the tokenizer's " +
                                   std::to_string(TinyTokenizerSize()) + " tokens");
  }

  IdAllocator ids(bos, eos);
  ordered_json vocab = ordered_json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteLevelChar(static_cast<uint8_t>(b))] = ids.Next();
  ordered_json merges = ordered_json::array();
  for (const auto& [a, b] : kMerges) {
    const std::string left = ToByteLevel(a), right = ToByteLevel(b);
    merges.push_back(left + " " + right);
    if (!vocab.contains(left + right)) vocab[left + right] = ids.Next();
  }

  // Each added token is also in model.vocab at its id, as in DeepSeek-V3's file:
  // Hugging Face keeps an added token's declared id only when the vocab agrees,
  // and renumbers it otherwise.
  ordered_json added = ordered_json::array();
  auto add_special = [&](int64_t id, const char* text) {
    added.push_back(AddedToken(id, text));
    vocab[text] = id;
  };
  add_special(bos, kBosToken);
  add_special(eos, kEosToken);
  for (const char* special : kExtraSpecials) add_special(ids.Next(), special);

  // Every other id of the model gets a token no merge makes (Encode never emits it), so
  // that whatever id the model generates decodes to text: " aaa", " aab", ... Appended
  // without ordered_json's linear key search (129,280 ids on r1); the names are
  // unique by the set.
  std::set<std::string> names;
  for (const auto& [name, id] : vocab.items()) names.insert(name);
  auto& entries = vocab.get_ref<ordered_json::object_t&>();
  for (int64_t n = 0; static_cast<int64_t>(entries.size()) < config.vocab_size; ++n) {
    std::string name = ByteLevelChar(' ');
    for (int64_t k = n + 26 * 27 * 27; k > 0; k /= 26) name += static_cast<char>('a' + k % 26);
    if (!names.insert(name).second) continue;
    entries.ordered_json::object_t::Container::emplace_back(name, ids.Next());
  }

  ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = PreTokenizer();
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", vocab},
                {"merges", merges}};
  return j.dump(2) + "\n";
}

std::string TinyTokenizerConfigJson(const ModelConfig& config) {
  // DeepSeek-V3's template, cut to system / user / assistant turns.
  const std::string chat_template =
      "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}"
      "{% endif %}{{ bos_token }}"
      "{% for message in messages %}"
      "{% if message['role'] == 'system' %}{{ message['content'] }}"
      "{% elif message['role'] == 'user' %}{{ '<｜User｜>' + message['content'] }}"
      "{% elif message['role'] == 'assistant' %}"
      "{{ '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' }}"
      "{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}";
  ordered_json j;
  j["add_bos_token"] = true;
  j["add_eos_token"] = false;
  j["bos_token"] = kBosToken;
  j["eos_token"] = kEosToken;
  j["pad_token"] = kPadToken;
  j["unk_token"] = nullptr;
  j["clean_up_tokenization_spaces"] = false;
  j["legacy"] = true;
  j["model_max_length"] = config.max_position_embeddings;
  j["tokenizer_class"] = "LlamaTokenizerFast";
  j["chat_template"] = chat_template;
  return j.dump(2) + "\n";
}

Status WriteTinyTokenizer(const ModelConfig& config, const std::string& dir) {
  auto tokenizer = TinyTokenizerJson(config);
  if (!tokenizer.ok()) return tokenizer.status().WithContext("tokenizer.json");
  const std::pair<std::string, std::string> files[] = {{"tokenizer.json", *tokenizer},
                                                       {"tokenizer_config.json", TinyTokenizerConfigJson(config)}};
  for (const auto& [name, text] : files) {
    const std::string path = dir + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out.flush()) return Status::Internal(path + ": cannot write");
  }
  return Status::Ok();
}

}  // namespace latte
