// --tool-call-parser deepseek_v3 | deepseek_v31: tool calls in a DeepSeek model's output
// text, as vLLM's parsers of those names read them.
//
//   deepseek_v3 (V3, R1):  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//                          ```json\nARGUMENTS\n```<｜tool▁call▁end｜> … <｜tool▁calls▁end｜>
//   deepseek_v31 (V3.1):   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGUMENTS
//                          <｜tool▁call▁end｜> … <｜tool▁calls▁end｜>
//
// (V3's NAME line ends with "\n", and "```json" is followed by "\n".) Text before the
// first marker is the message's content.
//
// Streaming: Push() takes each new piece of text and returns the content and the call
// pieces that can be shown now (a call's name once it is whole, then its arguments as
// they come), holding back a tail that could still be the start of a marker. Once the
// text stops following the format, the rest is content (what was already sent as calls
// stays sent). Parse() reads a whole text and refuses it (ok false: all of it is content)
// when any call is malformed, cut short, or has arguments that are not a JSON value.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace latte::server {

enum class ToolCallFormat { kDeepSeekV3, kDeepSeekV31 };

// "deepseek_v3" / "deepseek_v31"; false for another name.
bool ToolCallFormatFromName(std::string_view name, ToolCallFormat& out);
// The format a chat template writes calls back in (V3/R1: the type, the separator,
// then the name; V3.1: the name, then the separator), or nullopt when it writes none.
std::optional<ToolCallFormat> ToolCallFormatOfTemplate(std::string_view source);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text, as the model wrote it
};

// One piece of one call: the first carries the name (and no arguments yet).
struct ToolCallPiece {
  int index = 0;
  bool first = false;
  std::string name;
  std::string arguments;
};

struct ToolCallDelta {
  std::string content;
  std::vector<ToolCallPiece> calls;
};

struct ParsedToolCalls {
  bool ok = false;  // tool calls were found and every one is well formed
  std::string content;
  std::vector<ToolCall> calls;
};

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallFormat format) : format_(format) {}

  ToolCallDelta Push(std::string_view text);
  // At the end: whatever was held back (a call cut short is content from where it was).
  ToolCallDelta Flush();
  // Calls whose closing marker was read.
  int complete_calls() const { return complete_; }

  static ParsedToolCalls Parse(ToolCallFormat format, std::string_view text);

 private:
  enum class State { kText, kBetween, kHeader, kArguments, kDone, kFailed };
  // One step over held_; false when it needs more text.
  bool Step(ToolCallDelta& out);
  void Fail(ToolCallDelta& out);

  const ToolCallFormat format_;
  State state_ = State::kText;
  std::string held_;
  int calls_ = 0;     // calls started
  int complete_ = 0;  // calls ended
};

}  // namespace latte::server
