// A small but real byte-level BPE tokenizer in Hugging Face format, written beside
// make-model's random checkpoints so that every tool which expects a model directory
// (tokenizer.json + tokenizer_config.json) works on them.
//
// Layout of the ids (all < config.vocab_size):
//   config.bos_token_id  "<｜begin▁of▁sentence｜>"   (added token, special)
//   config.eos_token_id  "<｜end▁of▁sentence｜>"     (added token, special)
//   the 256 byte-level characters (GPT-2 byte-to-unicode), then one token per merge
//   of a few dozen common English pairs, filling the lowest free ids in that order;
//   then "<｜▁pad▁｜>", "<｜User｜>", "<｜Assistant｜>" on the next free ids.
// Every id after those, up to config.vocab_size, is a lowercase "word" with a leading
// space that no merge makes: Encode never emits it, but every id the model can generate
// decodes to text (so `generate --prompt` prints something and `tokenize --decode`
// takes every id `generate` emits).
// The pre-tokenizer, decoder and chat template follow DeepSeek-V3's tokenizer files.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "model/config.h"

namespace latte {

inline constexpr char kBosToken[] = "<｜begin▁of▁sentence｜>";
inline constexpr char kEosToken[] = "<｜end▁of▁sentence｜>";
inline constexpr char kPadToken[] = "<｜▁pad▁｜>";
inline constexpr char kUserToken[] = "<｜User｜>";
inline constexpr char kAssistantToken[] = "<｜Assistant｜>";

// How many ids the tiny tokenizer uses (bytes + merges + special tokens): the
// smallest vocab_size it fits in.
int64_t TinyTokenizerSize();

// tokenizer.json text for `config` (uses vocab_size, bos_token_id, eos_token_id).
// Fails when bos/eos are equal or outside the vocab, or the vocab is too small.
Result<std::string> TinyTokenizerJson(const ModelConfig& config);
// tokenizer_config.json text: bos/eos token strings and a DeepSeek-V3 style chat template.
std::string TinyTokenizerConfigJson(const ModelConfig& config);

// Writes both files into `dir` (which must exist).
Status WriteTinyTokenizer(const ModelConfig& config, const std::string& dir);

}  // namespace latte
