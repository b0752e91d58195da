// The vocabulary a GGUF file (llama.cpp's format) carries as metadata, and the Tokenizer
// that tokenizes with it as llama.cpp does. No GGUF parsing here: the model layer reads
// the file (base/gguf_file.h) and fills a GgufVocabulary from the keys named below.
//
// Supported: tokenizer.ggml.model "gpt2" (byte-level BPE, what DeepSeek-V2/V3/R1 GGUFs
// use) with tokenizer.ggml.pre one of kGgufPreTokenizers:
//   "deepseek-v3"  (V3, R1)  \p{N}{1,3} | CJK and kana runs | DeepSeek-V3's word regex:
//                            the three Splits of DeepSeek-V3's tokenizer.json
//   "deepseek-llm" (V2)      [\r\n] | letters | ASCII and CJK punctuation | trailing
//                            space | CJK and Hangul runs | \p{N}+
//   "gpt-2"                  GPT-2's word regex
//   "default"                llama.cpp's fallback: punctuation runs, GPT-2's regex,
//                            \p{N}+, [0-9]{3}
// each regex a Split with behavior Isolated (matches and the text between them are
// pre-tokens), in that order, then byte-level BPE with tokenizer.ggml.merges (a pair
// listed twice keeps its first rank, as in llama.cpp; Hugging Face keeps the last). The
// regexes are llama.cpp's per name (src/llama-vocab.cpp); latte runs them with its
// Oniguruma-compatible PCRE2 (text/regex.h), i.e. as Hugging Face's tokenizers would.
// (V2's tokenizer.json splits digits one by one where llama.cpp takes \p{N}+; the ids
// agree while the vocab has no multi-digit token.)
//
// Token types (tokenizer.ggml.token_type) decide how an id takes part:
//   1 normal, 6 byte   BPE vocab entries; decoded through the byte-level alphabet.
//   3 control, 2 unknown   matched in text as whole tokens before BPE, special: Decode
//                          with skip_special leaves them out (llama.cpp's special=false).
//   4 user-defined     matched in text as whole tokens before BPE, not special.
//   5 unused           no token at that id: decodes to nothing, never produced
//                      (convert_hf_to_gguf.py writes "[PAD{id}]" for ids past the
//                      tokenizer's).
// Control and user-defined tokens are matched leftmost-longest in the raw text (one
// pass, as Hugging Face does with normalized=false tokens); llama.cpp matches the
// longest token first over the whole text, which differs only for added tokens that
// overlap each other in the text. Encode always matches control tokens (llama.cpp's
// parse_special=true): the chat template writes them as text.
//
// A GGUF made from a tokenizer.json by llama.cpp's converter tokenizes as that
// tokenizer.json does when the pre name's regexes are its pre_tokenizer's, except that
// added tokens the tokenizer.json marks special=false but that look special ("<｜...｜>",
// "<|...|>") become control tokens, so IsSpecial() is true for them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/tokenizer.h"

namespace latte {

// The metadata keys, as llama.cpp names them.
inline constexpr char kGgufTokenizerModelKey[] = "tokenizer.ggml.model";
inline constexpr char kGgufTokenizerPreKey[] = "tokenizer.ggml.pre";
inline constexpr char kGgufTokensKey[] = "tokenizer.ggml.tokens";
inline constexpr char kGgufTokenTypeKey[] = "tokenizer.ggml.token_type";
inline constexpr char kGgufMergesKey[] = "tokenizer.ggml.merges";
inline constexpr char kGgufBosIdKey[] = "tokenizer.ggml.bos_token_id";
inline constexpr char kGgufEosIdKey[] = "tokenizer.ggml.eos_token_id";
inline constexpr char kGgufPaddingIdKey[] = "tokenizer.ggml.padding_token_id";
inline constexpr char kGgufAddBosKey[] = "tokenizer.ggml.add_bos_token";
inline constexpr char kGgufAddEosKey[] = "tokenizer.ggml.add_eos_token";
inline constexpr char kGgufChatTemplateKey[] = "tokenizer.chat_template";

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum GgufTokenType : int32_t {
  kGgufTokenNormal = 1,
  kGgufTokenUnknown = 2,
  kGgufTokenControl = 3,
  kGgufTokenUserDefined = 4,
  kGgufTokenUnused = 5,
  kGgufTokenByte = 6,
};

// The tokenizer.ggml.pre names TokenizerFromGguf knows, in the order listed above.
inline constexpr const char* kGgufPreTokenizers[] = {"deepseek-v3", "deepseek-llm", "gpt-2", "default"};

struct GgufVocabulary {
  std::string model;                // tokenizer.ggml.model: "gpt2"
  std::string pre;                  // tokenizer.ggml.pre: "deepseek-v3", ...
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens: one per id, byte-level spelling
  // tokenizer.ggml.token_type: one GgufTokenType per id; empty when the file has none
  // (then every token is normal, as llama.cpp reads such a file).
  std::vector<int32_t> token_types;
  std::vector<std::string> merges;           // tokenizer.ggml.merges: "a b", in rank order
  std::optional<int64_t> bos_id;             // tokenizer.ggml.bos_token_id
  std::optional<int64_t> eos_id;             // tokenizer.ggml.eos_token_id
  std::optional<int64_t> padding_id;         // tokenizer.ggml.padding_token_id
  std::optional<bool> add_bos;               // tokenizer.ggml.add_bos_token
  std::optional<bool> add_eos;               // tokenizer.ggml.add_eos_token
  std::optional<std::string> chat_template;  // tokenizer.chat_template
};

// The regexes of a tokenizer.ggml.pre name, in order; Unimplemented (naming it and the
// known names) for any other.
Result<std::vector<std::string>> GgufPreTokenizerRegexes(std::string_view pre);

// A Tokenizer over `vocabulary` (see the file comment); vocab_size() is tokens.size(),
// bos_id()/eos_id() are bos_id/eos_id. Errors: a model other than "gpt2" or an unknown
// pre name: Unimplemented; a vocabulary that contradicts itself (token_type's length,
// a token type outside 1..6, a repeated token, an empty or non-UTF-8 control or
// user-defined token, a merge without a space or naming a token not in the vocab, no
// tokens, a bos/eos/padding id out of range): DataLoss naming the key as the field.
Result<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufVocabulary& vocabulary);

// What llama.cpp's converter (convert_hf_to_gguf.py, byte-level BPE) writes for a
// tokenizer.json: ids 0..vocab_size-1, each the tokenizer's token at that id ("[PAD{id}]",
// unused, where it has none); added tokens control when special or when they look
// special ("<|...|>", "<｜...｜>", ...), else user-defined (with "▁" written as " ");
// merges as "a b" ([a, b] pairs joined, a space inside a part written as "Ġ"). From
// `tokenizer_config_json` when given: bos/eos/padding ids (bos_token, eos_token,
// pad_token: a string or {"content": ...}, looked up among the added tokens, then the
// vocab), add_bos_token, add_eos_token, chat_template. `pre` is stored as given and
// must be a known name. Errors: malformed JSON or merges (DataLoss), a tokenizer that is
// not byte-level BPE or an unknown pre (Unimplemented), vocab_size below the
// tokenizer's largest id + 1 (InvalidArgument, field "vocab_size"), a config token name
// with no id (NotFound).
Result<GgufVocabulary> GgufVocabularyFromTokenizerJson(std::string_view tokenizer_json, int64_t vocab_size,
                                                       std::string pre,
                                                       std::optional<std::string_view> tokenizer_config_json = {});

}  // namespace latte
