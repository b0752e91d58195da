// The "pre_tokenizer" of a Hugging Face tokenizer.json: splits text into pre-tokens
// that BPE encodes independently. Supported: null, Sequence, Split (Regex or String
// pattern; behaviors Removed, Isolated, MergedWithPrevious, MergedWithNext,
// Contiguous; invert) and ByteLevel (add_prefix_space, use_regex with GPT-2's
// pattern) as the last step. DeepSeek-V3 uses
//   Sequence[Split(\p{N}{1,3}), Split(CJK runs), Split(word/punct/space regex),
//            ByteLevel(use_regex=false)]
// with every Split Isolated: matches and the text between them are both pre-tokens.
#pragma once

#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "text/regex.h"

namespace latte {

class PreTokenizer {
 public:
  // `j`: the "pre_tokenizer" value (null gives one pre-token per input).
  static Result<std::unique_ptr<PreTokenizer>> FromJson(const nlohmann::json& j);

  // Splits `text` (valid UTF-8) into non-empty pre-tokens appended to `out`. They
  // view `text`, or `arena` where a step made new text (ByteLevel's prefix space).
  void Split(std::string_view text, std::vector<std::string_view>& out, std::deque<std::string>& arena) const;

  // True when a ByteLevel step ran: BPE then reads pre-tokens through the
  // byte-level alphabet.
  bool byte_level() const { return byte_level_; }

 private:
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct SplitStep {
    std::unique_ptr<Regex> regex;
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel only: prepend ' ' to each piece first
  };

  Status AddStep(const nlohmann::json& j, bool last);
  static void ApplyStep(const SplitStep& step, std::string_view piece, std::vector<std::string_view>& out,
                        std::deque<std::string>& arena);

  std::vector<SplitStep> steps_;
  bool byte_level_ = false;
};

}  // namespace latte
