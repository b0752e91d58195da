// /v1/chat/completions responses in OpenAI's shape: one JSON body
//   {id, object: "chat.completion", created, model, choices: [{index, message: {role,
//    content[, reasoning_content]}, logprobs: {content: [{token, logprob, bytes,
//    top_logprobs}]} | null, finish_reason, stop_reason}], usage}
// or, streaming, "chat.completion.chunk"s: each choice's first delta carries the role,
// the following ones content (or reasoning_content, with --reasoning-parser), the last
// one finish_reason; then (include_usage) a chunk with no choices and the usage.
// With tool_choice "auto" the text is read for tool calls (ToolCallParser): a message's
// tool_calls [{id, type: "function", function: {name, arguments}}] and finish_reason
// "tool_calls", or streamed as delta.tool_calls (index, id, type and name first, then
// argument fragments); a malformed call is returned as content. With tool_choice
// "required" or a named function the output is JSON constrained to the calls (vLLM's
// way): it comes back as tool_calls only (finish_reason "tool_calls" for "required",
// "stop" for a named one), streamed call by call ("required") or as argument fragments
// (named); an output cut short by max_tokens is returned as content.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/generation_reply.h"
#include "server/openai_protocol.h"
#include "server/reasoning_parser.h"
#include "server/tool_call_output.h"

namespace latte::server {

class ChatFormatter : public ResponseFormatter {
 public:
  ChatFormatter(const ChatRequest& request, bool reasoning_parser, const Tokenizer* tokenizer, std::string id,
                int64_t created);
  std::string OnOutput(size_t prompt, const GenerationOutput& out) override;
  std::string Finish() override;

 private:
  struct Choice {
    bool role_sent = false;
    std::string content, reasoning;
    nlohmann::json logprobs = nlohmann::json::array();
    std::optional<ReasoningParser> parser;
    std::optional<ToolCallStream> tool_stream;  // streaming with tools
    nlohmann::json finish_reason = nullptr, stop_reason = nullptr;
  };
  // Streaming: the delta's content read for tool calls; returns the OpenAI tool_calls
  // pieces for the delta ([] when none) and leaves the content that is text.
  nlohmann::json StreamToolCalls(Choice& c, std::string& content, bool last);
  // Not streaming: the message's content and tool_calls from the whole text.
  void MessageWithToolCalls(const Choice& c, nlohmann::json& message, nlohmann::json& finish_reason) const;
  nlohmann::json TokenLogprobJson(const SampledToken& t) const;
  nlohmann::json ChunkBase() const;

  const Tokenizer* tokenizer_;
  const std::string id_;
  const int64_t created_;
  const std::string model_;
  const bool logprobs_;
  const bool stream_;
  const bool include_usage_;
  const bool reasoning_parser_;
  const bool tokens_as_ids_;
  const int64_t prompt_tokens_;
  const std::vector<int32_t> stop_token_ids_;
  const ToolCallReading tool_reading_;
  std::map<int, Choice> choices_;
  int64_t completion_tokens_ = 0;
};

}  // namespace latte::server
