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
#include <functional>
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

  // Hands each non-empty pre-token of `text` (valid UTF-8) to `emit`, in order. A
  // pre-token views `text`, or text a step made (ByteLevel's prefix space) that lives
  // only during the call. Depth first, one regex match at a time: what this holds does
  // not grow with the text (a breadth-first split of 8 MB held ~100 bytes per piece).
  void ForEach(std::string_view text, const std::function<void(std::string_view)>& emit) const;

  // True when a ByteLevel step ran: BPE then reads pre-tokens through the
  // byte-level alphabet.
  bool byte_level() const { return byte_level_; }

 private:
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  class PartJoiner;  // joins one step's spans into parts per Behavior (pre_tokenizer.cc)
  struct SplitStep {
    std::unique_ptr<Regex> regex;
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel only: prepend ' ' to each piece first
  };

  Status AddStep(const nlohmann::json& j, bool last);
  // Splits `piece` by steps_[step] and passes each part on to the next step.
  void ApplyStep(size_t step, std::string_view piece, const std::function<void(std::string_view)>& emit) const;

  std::vector<SplitStep> steps_;
  bool byte_level_ = false;
};

}  // namespace latte
