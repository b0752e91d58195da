// A Hugging Face tokenizer.json tokenizer (BPE, byte-level or byte-fallback) that
// reproduces the `tokenizers` library's ids exactly; tested against it on DeepSeek-V3's
// tokenizer (tests/tokenizer_test.cc).
//
// Encode(text) runs the pipeline of tokenizer.json:
//   1. added tokens (added_tokens.h): special and normal added tokens are cut out
//      first, leftmost-longest; each is one id.
//   2. normalizer: only null or an empty Sequence (DeepSeek-V3's) are supported.
//   3. pre_tokenizer (pre_tokenizer.h): regex Splits, then ByteLevel.
//   4. model (bpe.h): BPE merges per pre-token, with a cache of recent pre-tokens.
// Bytes that are not valid UTF-8 cannot reach the regexes; each becomes its own
// byte-level token (or <0xNN> byte-fallback token), and the valid runs around it are
// encoded as separate texts. Hugging Face cannot take such input at all.
//
// BOS rule: Encode never adds BOS (or EOS) — it is add_special_tokens=false. The
// chat template writes "<｜begin▁of▁sentence｜>" as text and Encode turns that into
// bos_id(), as vLLM, SGLang and transformers' apply_chat_template(tokenize=True) do;
// adding it here too would double it.
//
// Decode(ids) follows Hugging Face's decode with the ByteLevel decoder: model tokens
// are mapped back through the byte-level alphabet, added tokens are written as their
// content, and ill-formed UTF-8 in the result becomes U+FFFD (from_utf8_lossy).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "text/added_tokens.h"
#include "text/bpe.h"
#include "text/pre_tokenizer.h"

namespace latte {

struct GgufVocabulary;

class Tokenizer {
 public:
  // Parses tokenizer.json text / file. Errors name what is malformed or unsupported.
  static Result<std::unique_ptr<Tokenizer>> FromJson(std::string_view json_text);
  static Result<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  // `dir`/tokenizer.json plus bos/eos token names from `dir`/tokenizer_config.json
  // (a string or an {"content": ...} object), when that file exists.
  static Result<std::unique_ptr<Tokenizer>> FromDirectory(const std::string& dir);

  // Token ids of `text` (any bytes), without BOS. Thread-safe.
  std::vector<int32_t> Encode(std::string_view text) const;
  // Text of `ids`; ids with no token are skipped. `skip_special`: leave out added
  // tokens marked special (BOS, EOS, ...).
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  // Raw bytes of one token as Decode would emit them before UTF-8 repair: the
  // streaming detokenizer concatenates these. Empty for unknown ids, and for special
  // tokens when `skip_special`.
  std::string TokenBytes(int32_t id, bool skip_special = false) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The vocab string of `id` (byte-level spelling for model tokens); nullopt if none.
  std::optional<std::string> IdToToken(int32_t id) const;
  // One past the largest id in the model vocab or the added tokens.
  int32_t vocab_size() const { return vocab_size_; }
  bool IsSpecial(int32_t id) const;

  // From tokenizer_config.json (FromDirectory) or the GGUF's ids (TokenizerFromGguf);
  // nullopt when not given.
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }

 private:
  // text/gguf_vocabulary.h: builds the tokenizer.json object a GGUF vocabulary stands
  // for, then sets the ids that only the GGUF holds (bos, eos, the vocab's size).
  friend Result<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufVocabulary& vocabulary);

  Tokenizer() = default;
  static Result<std::unique_ptr<Tokenizer>> FromJsonValue(const nlohmann::json& j);
  Status LoadAddedTokens(const nlohmann::json& list);
  // Encodes valid UTF-8 text: added tokens, then pre-tokens through BPE.
  void EncodeValid(std::string_view text, std::vector<int32_t>& out) const;
  void EncodeWithoutAddedTokens(std::string_view text, std::vector<int32_t>& out) const;
  // The id standing for one byte that is not valid UTF-8, if the vocab has one.
  std::optional<int32_t> InvalidByteId(uint8_t b) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized=false
  AddedTokenMatcher normalized_matcher_;  // added tokens with normalized=true
  std::unordered_map<int32_t, AddedToken> added_by_id_;
  std::unordered_map<std::string, int32_t> added_by_content_;
  bool byte_fallback_ = false;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_, eos_id_;
};

}  // namespace latte
