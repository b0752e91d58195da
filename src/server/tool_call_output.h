// The output text of a request with tools, read as content and tool calls, the same
// way for /v1/chat/completions and /v1/responses:
//   tool_choice "auto"     the text read by the --tool-call-parser format (ToolCallParser);
//   tool_choice "required" the constrained JSON list [{"name": N, "parameters": {...}}, ...]:
//                          each element a call, its parameters the arguments;
//   a named function       the constrained JSON: that function's arguments.
// An output that is not whole calls (malformed, or cut short by max_tokens or a stop
// string) is content.
#pragma once

#include <string>
#include <string_view>

#include "server/openai_protocol.h"
#include "server/tool_call_parser.h"

namespace latte::server {

// How a request's output holds calls (from its ChatRequest).
struct ToolCallReading {
  std::optional<ToolCallFormat> parser;  // "auto"
  ChatRequest::ForcedTools forced = ChatRequest::ForcedTools::kNone;
  std::string forced_name;

  static ToolCallReading Of(const ChatRequest& request) {
    return {request.tool_calls, request.forced_tools, request.forced_name};
  }
  bool any() const { return parser.has_value() || forced != ChatRequest::ForcedTools::kNone; }
};

// Not streaming: the whole text as content and calls (ok false: it is all content).
// `stopped`: the output ended by itself (finish_reason "stop"), not cut short.
ParsedToolCalls ReadToolCalls(const ToolCallReading& reading, const std::string& text, bool stopped);

// Streaming: each new piece of text gives the content that can be shown and the call
// pieces (ToolCallPiece: a call's first piece carries its name, and, for "required",
// its whole arguments; later pieces carry argument fragments).
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallReading reading);
  // `last`: the output ends with this piece.
  ToolCallDelta Push(std::string_view text, bool last);
  int calls() const { return calls_; }

 private:
  ToolCallDelta PushRequired(std::string_view text);

  const ToolCallReading reading_;
  std::optional<ToolCallParser> parser_;
  std::string required_text_;    // "required": all of the output so far
  size_t required_scanned_ = 0;  // where reading it for whole calls resumes
  int calls_ = 0;
};

}  // namespace latte::server
