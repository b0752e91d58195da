// POST /v1/responses, OpenAI's Responses API, stateless: the request is read into a
// chat request (instructions as the system message, input items as messages:
// function_call items as the assistant turn's tool_calls, function_call_output items
// as tool messages, reasoning items dropped; function tools and tool_choice as chat's;
// max_output_tokens, temperature, top_p, text.format as response_format) and answered
// as a Response object
//   {id: "resp_…", object: "response", created_at, status: "completed" | "incomplete",
//    incomplete_details, output: [{type: "message", id: "msg_…", role: "assistant",
//    status, content: [{type: "output_text", text, annotations: []}]}], usage:
//    {input_tokens, output_tokens, total_tokens, …}, and the request's settings echoed}
// or, streaming, OpenAI's event sequence: response.created, response.in_progress,
// response.output_item.added, response.content_part.added, response.output_text.delta
// (one per output), response.output_text.done, response.content_part.done,
// response.output_item.done, then response.completed (response.incomplete when
// max_output_tokens cut it), each as `event: TYPE` + `data: {..., sequence_number}`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/generation_reply.h"
#include "server/openai_protocol.h"
#include "server/reasoning_parser.h"
#include "server/tool_call_output.h"

namespace latte::server {

// The request's settings as the Response object echoes them.
struct ResponseSettings {
  std::string model;
  nlohmann::ordered_json instructions = nullptr;
  nlohmann::ordered_json max_output_tokens = nullptr;
  double temperature = 1.0;
  double top_p = 1.0;
  nlohmann::ordered_json text_format = {{"type", "text"}};
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  nlohmann::ordered_json user = nullptr;
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // as the request gave them
  nlohmann::ordered_json tool_choice = "auto";
  bool parallel_tool_calls = true;
};

struct ResponsesRequest {
  ChatRequest chat;
  ResponseSettings settings;
};

// Errors name the Responses field (input[2].content, text.format.schema, …).
MaybeError ParseResponsesRequest(const nlohmann::ordered_json& body, const ServedModel& model, ResponsesRequest& out);

// Output items, in order: with --reasoning-parser, the text before "</think>" as a
// `reasoning` item ({type: "reasoning", id: "rs_…", summary: [], content: [{type:
// "reasoning_text", text}]}), streamed as response.reasoning_text.delta / .done; the
// text as a `message` item (left out when the output was all reasoning or all calls);
// with tools, each call as a `function_call` item ({type: "function_call", id: "fc_…",
// call_id: "call_…", name, arguments, status}), streamed as output_item.added, then
// response.function_call_arguments.delta / .done and output_item.done. Calls are read
// from the text as on chat completions (tool_call_output.h).
class ResponsesFormatter : public ResponseFormatter {
 public:
  ResponsesFormatter(const ResponsesRequest& request, bool reasoning_parser, std::string id, int64_t created);
  std::string OnOutput(size_t prompt, const GenerationOutput& out) override;
  std::string Finish() override;
  std::string StreamEnd() override { return {}; }  // the Responses stream has no [DONE]
  std::string StreamError(const ApiError& error) override;

 private:
  struct Item {
    enum class Kind { kReasoning, kMessage, kFunctionCall } kind;
    std::string id;
    std::string text;           // the reasoning, the message's text, or the call's arguments
    std::string name, call_id;  // a function_call's
    const char* status = "in_progress";
  };
  // The Response object as it stands (`done`: with its output and usage).
  nlohmann::json Response(bool done) const;
  // A new item with its ids (msg_…, rs_…, fc_… and a call's call_…).
  static Item NewItem(Item::Kind kind, std::string text, std::string name, const char* status);
  static nlohmann::json ItemJson(const Item& item);
  static nlohmann::json TextPart(const Item& message);
  std::string Event(const std::string& type, nlohmann::json payload);
  // Not streaming: the items from the whole output.
  void ItemsOfOutput();
  // Streaming: the item of `kind` open at the end of `items_` (opening it, closing the
  // one before, when it is not), its events appended to `events`; and the closing
  // events of the open item.
  Item& Open(Item::Kind kind, std::string& events, const std::string& name = "");
  std::string Close(const char* status);
  int open_index() const { return static_cast<int>(items_.size()) - 1; }

  const ResponseSettings settings_;
  const std::string id_;
  const int64_t created_;
  const bool stream_;
  const int64_t input_tokens_;
  const ToolCallReading tool_reading_;
  std::optional<ReasoningParser> parser_;
  std::optional<ToolCallStream> tool_stream_;  // streaming with tools
  std::string text_, reasoning_;               // not streaming: all of the output
  std::vector<Item> items_;
  bool open_ = false;  // streaming: the last item's closing events are not out yet
  int64_t output_tokens_ = 0;
  bool incomplete_ = false;  // max_output_tokens ended it
  bool stopped_ = false;     // the output ended by itself
  bool started_ = false;     // streaming: the opening events are out
  int64_t sequence_number_ = 0;
};

}  // namespace latte::server
