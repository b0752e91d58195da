// --reasoning-parser deepseek_r1: DeepSeek-R1 thinks first, "<think>...</think>", then
// answers. As vLLM's parser of that name, the text before "</think>" is returned as
// `reasoning_content` and the text after it as `content`; R1's chat template ends the
// prompt with "<think>\n", so the output usually starts inside the thought, and a
// "<think>" the model writes itself at the start is dropped. Output with no "</think>"
// is all reasoning (the thought was cut short).
//
// Streaming: Push() takes each new piece of text and returns what can be shown now,
// holding back a tail that could still be the start of "</think>" (or of a leading
// "<think>"), so a marker split across tokens never leaks into either part.
#pragma once

#include <string>

namespace latte::server {

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  ReasoningDelta Push(const std::string& text);
  // At the end: whatever was held back, on the side it was on.
  ReasoningDelta Flush();
  // Push, then Flush when `last` (the output's final piece), as one delta.
  ReasoningDelta Take(const std::string& text, bool last);

 private:
  bool start_checked_ = false;  // a leading "<think>" was looked for
  bool thinking_ = true;
  std::string held_;
};

}  // namespace latte::server
