// Stop conditions of one request as text streams out: OpenAI's `stop` strings and
// vLLM's `stop_token_ids` (the caller adds EOS unless the request ignores it).
// max_tokens is counted by the caller.
//
// Stop strings are matched on the detokenized text, so one may span several tokens.
// Push() takes each new piece of text and returns what is safe to emit now: it holds
// back the longest suffix that is still a proper prefix of some stop string, so text
// that turns out to begin a stop string is never emitted. When a stop string completes,
// the text before it is returned, the stop string itself is not (OpenAI's behaviour),
// and everything after it is dropped.
//
// Which stop wins: the occurrence that ENDS first in the text, and among those ending at
// the same byte the longest (it starts first). That is the one a byte-by-byte stream
// would complete first, so the result does not depend on how the text is split into
// pieces (tested by brute force over split points).
//
// UTF-8: stop strings must be valid UTF-8; then, when the pushed pieces end on character
// boundaries (as the streaming detokenizer's do), every emitted chunk does too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace latte {

// OpenAI's limit on `stop`.
constexpr size_t kMaxStopStrings = 4;

struct StopStep {
  std::string text;      // safe to emit now (may be empty)
  bool stopped = false;  // a stop string completed: `text` ends just before it
  int stop_index = -1;   // which stop string (index into stop_strings()), when stopped
};

class StopMatcher {
 public:
  // At most kMaxStopStrings strings, each non-empty and valid UTF-8 (field "stop").
  static Status CheckStopStrings(const std::vector<std::string>& stop_strings);
  StopMatcher() = default;  // no stop strings, no stop tokens
  // Errors: more than kMaxStopStrings strings, an empty string, invalid UTF-8.
  static Result<StopMatcher> Create(std::vector<std::string> stop_strings, std::vector<int32_t> stop_token_ids);

  // Consumes the next piece of detokenized text. After a stop, returns empty steps
  // with stopped = true.
  StopStep Push(std::string_view piece);
  // The held-back text, released when generation ends without a stop string (EOS, a stop
  // token, max_tokens): it only looked like the start of a stop string. Empty after a stop.
  std::string Flush();

  // True for the ids the request stops on; the caller does not detokenize or emit them.
  bool IsStopToken(int32_t id) const;

  bool stopped() const { return stop_index_ >= 0; }
  // The stop string that matched (vLLM's stop_reason), or empty.
  std::string_view matched_stop() const {
    return stopped() ? std::string_view(stop_strings_[stop_index_]) : std::string_view();
  }
  const std::vector<std::string>& stop_strings() const { return stop_strings_; }

 private:
  std::vector<std::string> stop_strings_;
  std::vector<int32_t> stop_token_ids_;
  std::string held_;  // text received but not yet emitted: a prefix of some stop string
  int stop_index_ = -1;
};

}  // namespace latte
