#include "server/responses.h"

#include <utility>

#include "server/json_fields.h"

namespace latte::server {
namespace {

// Fields of the Responses API latte does not implement, refused unless neutral.
MaybeError RefuseUnsupportedResponseFields(const nlohmann::json& body) {
  if (HasField(body, "previous_response_id")) {
    return BadRequest("previous_response_id: latte keeps no responses (it is stateless); send the whole input",
                      "previous_response_id");
  }
  if (HasField(body, "conversation")) {
    return BadRequest("conversation: latte keeps no conversations (it is stateless)", "conversation");
  }
  if (HasField(body, "tools") && !(body["tools"].is_array() && body["tools"].empty())) {
    return BadRequest("tools are not supported", "tools");
  }
  if (HasField(body, "background") && body["background"] != false) {
    return BadRequest("background responses are not supported", "background");
  }
  if (HasField(body, "top_logprobs") && body["top_logprobs"] != 0) {
    return BadRequest("top_logprobs is not supported on /v1/responses", "top_logprobs");
  }
  return std::nullopt;
}

// One input item's content as chat content: a string, or input_text / output_text
// parts (as chat text parts).
MaybeError InputContent(const nlohmann::json& item, const std::string& where, nlohmann::json& content) {
  const auto it = item.find("content");
  if (it == item.end() || it->is_null()) return BadRequest(where + ".content is required", where + ".content");
  if (it->is_string()) {
    content = *it;
    return std::nullopt;
  }
  if (!it->is_array()) {
    return BadRequest(where + ".content must be a string or a list of input_text parts", where + ".content");
  }
  content = nlohmann::json::array();
  for (size_t k = 0; k < it->size(); ++k) {
    const nlohmann::json& part = (*it)[k];
    const std::string at = where + ".content[" + std::to_string(k) + "]";
    const std::string type = part.is_object() && part.contains("type") && part["type"].is_string()
                                 ? part["type"].get<std::string>()
                                 : std::string();
    if (type != "input_text" && type != "output_text") {
      return BadRequest(at + ": only input_text (and, in assistant turns, output_text) parts are supported, got " +
                            (type.empty() ? std::string("no type") : "\"" + type + "\""),
                        at + ".type");
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return BadRequest(at + ".text must be a string", at + ".text");
    }
    content.push_back({{"type", "text"}, {"text", part["text"]}});
  }
  return std::nullopt;
}

// instructions and input as chat messages.
MaybeError InputMessages(const nlohmann::json& body, nlohmann::json& messages) {
  messages = nlohmann::json::array();
  if (HasField(body, "instructions")) {
    if (!body["instructions"].is_string()) return BadRequest("instructions must be a string", "instructions");
    messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
  }
  if (!HasField(body, "input")) return BadRequest("input is required", "input");
  const nlohmann::json& input = body["input"];
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return std::nullopt;
  }
  if (!input.is_array() || input.empty()) {
    return BadRequest("input must be a string or a non-empty list of messages", "input");
  }
  for (size_t i = 0; i < input.size(); ++i) {
    const nlohmann::json& item = input[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) return BadRequest(where + " must be a message object", where);
    if (HasField(item, "type") && item["type"] != "message") {
      return BadRequest(where + ".type: only message items are supported, got " + item["type"].dump(), where + ".type");
    }
    const std::string role = item.value("role", nlohmann::json("")).is_string() ? item.value("role", "") : "";
    if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
      return BadRequest(where + ".role must be user, assistant, system or developer", where + ".role");
    }
    nlohmann::json content;
    LATTE_RETURN_IF_API_ERROR(InputContent(item, where, content));
    messages.push_back({{"role", role}, {"content", std::move(content)}});
  }
  return std::nullopt;
}

// text.format as chat's response_format.
MaybeError TextFormat(const nlohmann::json& body, nlohmann::json& response_format, nlohmann::json& echo) {
  if (!HasField(body, "text")) return std::nullopt;
  const nlohmann::json& text = body["text"];
  if (!text.is_object()) return BadRequest("text must be an object", "text");
  if (!HasField(text, "format")) return std::nullopt;
  const nlohmann::json& format = text["format"];
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string()) {
    return BadRequest("text.format must be an object with a type: text, json_object or json_schema", "text.format");
  }
  const std::string type = format["type"].get<std::string>();
  echo = format;
  if (type == "text" || type == "json_object") {
    response_format = {{"type", type}};
    return std::nullopt;
  }
  if (type != "json_schema") {
    return BadRequest("text.format.type must be text, json_object or json_schema, got \"" + type + "\"",
                      "text.format.type");
  }
  if (!format.contains("schema")) return BadRequest("text.format.schema is required", "text.format.schema");
  nlohmann::json js = {{"schema", format["schema"]}, {"name", format.value("name", nlohmann::json("response"))}};
  if (format.contains("strict")) js["strict"] = format["strict"];
  response_format = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
  return std::nullopt;
}

// The chat parser's field names, as the Responses request spells them.
void RenameChatFields(ApiError& e) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"response_format.json_schema.schema", "text.format.schema"},
      {"response_format.json_schema.name", "text.format.name"},
      {"response_format.json_schema", "text.format"},
      {"response_format", "text.format"},
      {"max_tokens", "max_output_tokens"},
      {"messages", "input"},
  };
  for (const auto& [chat, responses] : kNames) {
    for (std::string* s : {&e.param, &e.message}) {
      const size_t at = s->find(chat);
      if (at != std::string::npos) s->replace(at, std::string_view(chat).size(), responses);
    }
  }
}

}  // namespace

MaybeError ParseResponsesRequest(const nlohmann::json& body, const ServedModel& model, ResponsesRequest& out) {
  LATTE_RETURN_IF_API_ERROR(RefuseUnsupportedResponseFields(body));
  nlohmann::json chat = {{"model", body.value("model", nlohmann::json(nullptr))}};
  nlohmann::json messages;
  LATTE_RETURN_IF_API_ERROR(InputMessages(body, messages));
  chat["messages"] = std::move(messages);
  ResponseSettings& s = out.settings;
  if (HasField(body, "instructions")) s.instructions = body["instructions"];
  if (HasField(body, "max_output_tokens")) {
    chat["max_tokens"] = body["max_output_tokens"];
    s.max_output_tokens = body["max_output_tokens"];
  }
  for (const char* field : {"temperature", "top_p", "stream"}) {
    if (HasField(body, field)) chat[field] = body[field];
  }
  nlohmann::json response_format;
  LATTE_RETURN_IF_API_ERROR(TextFormat(body, response_format, s.text_format));
  if (!response_format.is_null()) chat["response_format"] = std::move(response_format);
  if (HasField(body, "metadata")) {
    if (!body["metadata"].is_object()) return BadRequest("metadata must be an object", "metadata");
    s.metadata = body["metadata"];
  }
  if (HasField(body, "user")) s.user = body["user"];
  if (auto e = ParseChatRequest(chat, model, out.chat)) {
    ApiError renamed = *e;
    RenameChatFields(renamed);
    return renamed;
  }
  s.model = out.chat.model;
  if (HasField(body, "temperature")) s.temperature = body["temperature"].get<double>();
  if (HasField(body, "top_p")) s.top_p = body["top_p"].get<double>();
  return std::nullopt;
}

ResponsesFormatter::ResponsesFormatter(const ResponsesRequest& request, bool reasoning_parser, std::string id,
                                       int64_t created)
    : settings_(request.settings),
      id_(std::move(id)),
      message_id_(NewRequestId("msg_")),
      created_(created),
      stream_(request.chat.stream),
      input_tokens_(static_cast<int64_t>(request.chat.request.prompt.size())),
      reasoning_id_(NewRequestId("rs_")) {
  if (reasoning_parser) parser_.emplace();
}

nlohmann::json ResponsesFormatter::TextPart() const {
  return {{"type", "output_text"},
          {"text", text_},
          {"annotations", nlohmann::json::array()},
          {"logprobs", nlohmann::json::array()}};
}

nlohmann::json ResponsesFormatter::MessageItem(bool done) const {
  const char* status = !done ? "in_progress" : incomplete_ ? "incomplete" : "completed";
  return {{"id", message_id_},
          {"type", "message"},
          {"status", status},
          {"role", "assistant"},
          {"content", done ? nlohmann::json::array({TextPart()}) : nlohmann::json::array()}};
}

nlohmann::json ResponsesFormatter::ReasoningItem(bool done) const {
  return {{"id", reasoning_id_},
          {"type", "reasoning"},
          {"summary", nlohmann::json::array()},
          {"content", done ? nlohmann::json::array({{{"type", "reasoning_text"}, {"text", reasoning_}}})
                           : nlohmann::json::array()},
          {"encrypted_content", nullptr},
          {"status", done ? "completed" : "in_progress"}};
}

nlohmann::json ResponsesFormatter::Response(bool done) const {
  nlohmann::json r = {{"id", id_},
                      {"object", "response"},
                      {"created_at", created_},
                      {"status", !done         ? "in_progress"
                                 : incomplete_ ? "incomplete"
                                               : "completed"},
                      {"background", false},
                      {"error", nullptr},
                      {"incomplete_details", nullptr},
                      {"instructions", settings_.instructions},
                      {"max_output_tokens", settings_.max_output_tokens},
                      {"max_tool_calls", nullptr},
                      {"model", settings_.model},
                      {"output", nlohmann::json::array()},
                      {"parallel_tool_calls", true},
                      {"previous_response_id", nullptr},
                      {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
                      {"store", false},
                      {"temperature", settings_.temperature},
                      {"text", {{"format", settings_.text_format}}},
                      {"tool_choice", "auto"},
                      {"tools", nlohmann::json::array()},
                      {"top_logprobs", 0},
                      {"top_p", settings_.top_p},
                      {"truncation", "disabled"},
                      {"usage", nullptr},
                      {"user", settings_.user},
                      {"metadata", settings_.metadata}};
  if (done) {
    if (incomplete_) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    if (!reasoning_.empty()) r["output"].push_back(ReasoningItem(true));
    if (!text_.empty() || reasoning_.empty()) r["output"].push_back(MessageItem(true));
    r["usage"] = {{"input_tokens", input_tokens_},
                  {"input_tokens_details", {{"cached_tokens", 0}}},
                  {"output_tokens", output_tokens_},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", input_tokens_ + output_tokens_}};
  }
  return r;
}

std::string ResponsesFormatter::Event(const std::string& type, nlohmann::json payload) {
  payload["type"] = type;
  payload["sequence_number"] = sequence_number_++;
  return "event: " + type + "\ndata: " + payload.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n\n";
}

std::string ResponsesFormatter::CloseReasoning() {
  if (reasoning_index_ < 0 || reasoning_closed_) return {};
  reasoning_closed_ = true;
  // One statement per event: each takes the next sequence number.
  std::string events = Event(
      "response.reasoning_text.done",
      {{"item_id", reasoning_id_}, {"output_index", reasoning_index_}, {"content_index", 0}, {"text", reasoning_}});
  events += Event("response.output_item.done", {{"output_index", reasoning_index_}, {"item", ReasoningItem(true)}});
  return events;
}

std::string ResponsesFormatter::OpenMessage() {
  if (message_index_ >= 0) return {};
  std::string events = CloseReasoning();
  message_index_ = reasoning_index_ + 1;
  events += Event("response.output_item.added", {{"output_index", message_index_}, {"item", MessageItem(false)}});
  events += Event("response.content_part.added",
                  {{"item_id", message_id_},
                   {"output_index", message_index_},
                   {"content_index", 0},
                   {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", nlohmann::json::array()}}}});
  return events;
}

std::string ResponsesFormatter::CloseMessage() {
  if (message_index_ < 0) return {};
  std::string events = Event("response.output_text.done", {{"item_id", message_id_},
                                                           {"output_index", message_index_},
                                                           {"content_index", 0},
                                                           {"text", text_},
                                                           {"logprobs", nlohmann::json::array()}});
  events +=
      Event("response.content_part.done",
            {{"item_id", message_id_}, {"output_index", message_index_}, {"content_index", 0}, {"part", TextPart()}});
  events += Event("response.output_item.done", {{"output_index", message_index_}, {"item", MessageItem(true)}});
  return events;
}

std::string ResponsesFormatter::OnOutput(size_t, const GenerationOutput& out) {
  output_tokens_ += static_cast<int64_t>(out.tokens.size());
  if (out.finish && *out.finish == FinishReason::kLength) incomplete_ = true;
  ReasoningDelta delta;
  if (parser_) {
    delta = parser_->Take(out.text, out.finish.has_value());
  } else {
    delta.content = out.text;
  }
  text_ += delta.content;
  reasoning_ += delta.reasoning;
  if (!stream_) return {};
  std::string events;
  if (!started_) {
    started_ = true;
    events += Event("response.created", {{"response", Response(false)}});
    events += Event("response.in_progress", {{"response", Response(false)}});
    // Without a reasoning parser the message opens at once, as OpenAI's does.
    if (!parser_) events += OpenMessage();
  }
  if (!delta.reasoning.empty()) {
    if (reasoning_index_ < 0) {
      reasoning_index_ = 0;
      events += Event("response.output_item.added", {{"output_index", 0}, {"item", ReasoningItem(false)}});
    }
    events += Event("response.reasoning_text.delta", {{"item_id", reasoning_id_},
                                                      {"output_index", reasoning_index_},
                                                      {"content_index", 0},
                                                      {"delta", delta.reasoning}});
  }
  if (!delta.content.empty()) {
    events += OpenMessage();
    events += Event("response.output_text.delta", {{"item_id", message_id_},
                                                   {"output_index", message_index_},
                                                   {"content_index", 0},
                                                   {"delta", delta.content},
                                                   {"logprobs", nlohmann::json::array()}});
  }
  return events;
}

std::string ResponsesFormatter::Finish() {
  if (!stream_) return Response(true).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string events = CloseReasoning();
  if (reasoning_index_ < 0) events += OpenMessage();  // nothing at all was written: an empty message
  events += CloseMessage();
  events += Event(incomplete_ ? "response.incomplete" : "response.completed", {{"response", Response(true)}});
  return events;
}

std::string ResponsesFormatter::StreamError(const ApiError& error) {
  return Event("error", {{"code", error.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.code)},
                         {"message", error.message},
                         {"param", nullptr}});
}

}  // namespace latte::server
