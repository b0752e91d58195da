// POST /v1/responses, OpenAI's Responses API, stateless: the request is read into a
// chat request (instructions as the system message, input items as messages,
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

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/generation_reply.h"
#include "server/openai_protocol.h"
#include "server/reasoning_parser.h"

namespace latte::server {

// The request's settings as the Response object echoes them.
struct ResponseSettings {
  std::string model;
  nlohmann::json instructions = nullptr;
  nlohmann::json max_output_tokens = nullptr;
  double temperature = 1.0;
  double top_p = 1.0;
  nlohmann::json text_format = {{"type", "text"}};
  nlohmann::json metadata = nlohmann::json::object();
  nlohmann::json user = nullptr;
};

struct ResponsesRequest {
  ChatRequest chat;
  ResponseSettings settings;
};

// Errors name the Responses field (input[2].content, text.format.schema, …).
MaybeError ParseResponsesRequest(const nlohmann::json& body, const ServedModel& model, ResponsesRequest& out);

// With --reasoning-parser, the text before "</think>" becomes a `reasoning` item
// ({type: "reasoning", id: "rs_…", summary: [], content: [{type: "reasoning_text",
// text}]}) before the message, streamed as response.reasoning_text.delta / .done; the
// message item is left out when all of the output was reasoning.
class ResponsesFormatter : public ResponseFormatter {
 public:
  ResponsesFormatter(const ResponsesRequest& request, bool reasoning_parser, std::string id, int64_t created);
  std::string OnOutput(size_t prompt, const GenerationOutput& out) override;
  std::string Finish() override;
  std::string StreamEnd() override { return {}; }  // the Responses stream has no [DONE]
  std::string StreamError(const ApiError& error) override;

 private:
  // The Response object as it stands (`done`: with its output and usage).
  nlohmann::json Response(bool done) const;
  nlohmann::json MessageItem(bool done) const;
  nlohmann::json ReasoningItem(bool done) const;
  nlohmann::json TextPart() const;
  std::string Event(const std::string& type, nlohmann::json payload);
  // Streaming: the events that open the message item (closing the reasoning item
  // first), and those that close each.
  std::string OpenMessage();
  std::string CloseReasoning();
  std::string CloseMessage();

  const ResponseSettings settings_;
  const std::string id_;
  const std::string message_id_;
  const int64_t created_;
  const bool stream_;
  const int64_t input_tokens_;
  const std::string reasoning_id_;
  std::optional<ReasoningParser> parser_;
  std::string text_, reasoning_;
  int64_t output_tokens_ = 0;
  bool incomplete_ = false;  // max_output_tokens ended it
  bool started_ = false;     // streaming: the opening events are out
  // Streaming: each item's place in `output` once opened (-1: not yet), and whether
  // its closing events are out.
  int reasoning_index_ = -1, message_index_ = -1;
  bool reasoning_closed_ = false;
  int64_t sequence_number_ = 0;
};

}  // namespace latte::server
