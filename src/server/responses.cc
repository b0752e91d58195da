#include "server/responses.h"

#include <utility>

#include "server/json_fields.h"

namespace latte::server {
namespace {

// Fields of the Responses API latte does not implement, refused unless neutral.
MaybeError RefuseUnsupportedResponseFields(const nlohmann::ordered_json& body) {
  if (HasField(body, "previous_response_id")) {
    return BadRequest("previous_response_id: latte keeps no responses (it is stateless); send the whole input",
                      "previous_response_id");
  }
  if (HasField(body, "conversation")) {
    return BadRequest("conversation: latte keeps no conversations (it is stateless)", "conversation");
  }
  if (HasField(body, "background") && body["background"] != false) {
    return BadRequest("background responses are not supported", "background");
  }
  if (HasField(body, "top_logprobs") && body["top_logprobs"] != 0) {
    return BadRequest("top_logprobs is not supported on /v1/responses", "top_logprobs");
  }
  return std::nullopt;
}

// An input item's content (`value`, found at `at_content`) as chat content: a string, or
// input_text / output_text parts (as chat text parts).
MaybeError InputContent(const nlohmann::ordered_json& value, const std::string& at_content,
                        nlohmann::ordered_json& content) {
  if (value.is_string()) {
    content = value;
    return std::nullopt;
  }
  if (!value.is_array()) {
    return BadRequest(at_content + " must be a string or a list of input_text parts", at_content);
  }
  content = nlohmann::ordered_json::array();
  for (size_t k = 0; k < value.size(); ++k) {
    const nlohmann::ordered_json& part = value[k];
    const std::string at = at_content + "[" + std::to_string(k) + "]";
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

// A string field of an input item.
MaybeError ItemString(const nlohmann::ordered_json& item, const char* field, const std::string& where,
                      std::string& out) {
  if (!HasField(item, field) || !item[field].is_string()) {
    return BadRequest(where + "." + field + " must be a string", where + "." + field);
  }
  out = item[field].get<std::string>();
  return std::nullopt;
}

// A message item as a chat message.
MaybeError InputMessage(const nlohmann::ordered_json& item, const std::string& where,
                        nlohmann::ordered_json& messages) {
  const std::string role = item.value("role", nlohmann::ordered_json("")).is_string() ? item.value("role", "") : "";
  if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
    return BadRequest(where + ".role must be user, assistant, system or developer", where + ".role");
  }
  if (!HasField(item, "content")) return BadRequest(where + ".content is required", where + ".content");
  nlohmann::ordered_json content;
  LATTE_RETURN_IF_API_ERROR(InputContent(item["content"], where + ".content", content));
  messages.push_back({{"role", role}, {"content", std::move(content)}});
  return std::nullopt;
}

// A function_call item {call_id, name, arguments} as a call of the assistant turn it
// follows (a message item of the model's, or calls before it), else of a new one.
MaybeError InputFunctionCall(const nlohmann::ordered_json& item, const std::string& where,
                             nlohmann::ordered_json& messages) {
  std::string call_id, name, arguments;
  LATTE_RETURN_IF_API_ERROR(ItemString(item, "call_id", where, call_id));
  LATTE_RETURN_IF_API_ERROR(ItemString(item, "name", where, name));
  LATTE_RETURN_IF_API_ERROR(ItemString(item, "arguments", where, arguments));
  if (messages.empty() || messages.back()["role"] != "assistant") {
    // Content "" rather than null: the templates write either the same, and some
    // (models/default's) cannot add null to a string.
    messages.push_back({{"role", "assistant"}, {"content", ""}});
  }
  nlohmann::ordered_json& turn = messages.back();
  if (!turn.contains("tool_calls")) turn["tool_calls"] = nlohmann::ordered_json::array();
  turn["tool_calls"].push_back(
      {{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}});
  return std::nullopt;
}

// A function_call_output item {call_id, output: a string or input_text parts} as a
// tool message.
MaybeError InputFunctionCallOutput(const nlohmann::ordered_json& item, const std::string& where,
                                   nlohmann::ordered_json& messages) {
  std::string call_id;
  LATTE_RETURN_IF_API_ERROR(ItemString(item, "call_id", where, call_id));
  if (!HasField(item, "output")) return BadRequest(where + ".output is required", where + ".output");
  nlohmann::ordered_json content;
  LATTE_RETURN_IF_API_ERROR(InputContent(item["output"], where + ".output", content));
  messages.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", std::move(content)}});
  return std::nullopt;
}

// instructions and input as chat messages.
MaybeError InputMessages(const nlohmann::ordered_json& body, nlohmann::ordered_json& messages) {
  messages = nlohmann::ordered_json::array();
  if (HasField(body, "instructions")) {
    if (!body["instructions"].is_string()) return BadRequest("instructions must be a string", "instructions");
    messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
  }
  if (!HasField(body, "input")) return BadRequest("input is required", "input");
  const nlohmann::ordered_json& input = body["input"];
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return std::nullopt;
  }
  if (!input.is_array() || input.empty()) {
    return BadRequest("input must be a string or a non-empty list of messages", "input");
  }
  for (size_t i = 0; i < input.size(); ++i) {
    const nlohmann::ordered_json& item = input[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) return BadRequest(where + " must be an input item object", where);
    const std::string type = !HasField(item, "type")    ? "message"
                             : item["type"].is_string() ? item["type"].get<std::string>()
                                                        : std::string();
    if (type == "message") {
      LATTE_RETURN_IF_API_ERROR(InputMessage(item, where, messages));
    } else if (type == "function_call") {
      LATTE_RETURN_IF_API_ERROR(InputFunctionCall(item, where, messages));
    } else if (type == "function_call_output") {
      LATTE_RETURN_IF_API_ERROR(InputFunctionCallOutput(item, where, messages));
    } else if (type != "reasoning") {  // an earlier turn's reasoning: DeepSeek's templates drop it
      return BadRequest(where +
                            ".type: only message, function_call, function_call_output and reasoning items are "
                            "supported, got " +
                            item["type"].dump(),
                        where + ".type");
    }
  }
  return std::nullopt;
}

// text.format as chat's response_format.
MaybeError TextFormat(const nlohmann::ordered_json& body, nlohmann::ordered_json& response_format,
                      nlohmann::ordered_json& echo) {
  if (!HasField(body, "text")) return std::nullopt;
  const nlohmann::ordered_json& text = body["text"];
  if (!text.is_object()) return BadRequest("text must be an object", "text");
  if (!HasField(text, "format")) return std::nullopt;
  const nlohmann::ordered_json& format = text["format"];
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
  nlohmann::ordered_json js = {{"schema", format["schema"]},
                               {"name", format.value("name", nlohmann::ordered_json("response"))}};
  if (format.contains("strict")) js["strict"] = format["strict"];
  response_format = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
  return std::nullopt;
}

// tools: Responses function tools {type: "function", name, description?, parameters?,
// strict?} as chat's {type: "function", function: {...}}.
MaybeError ChatTools(const nlohmann::ordered_json& tools, nlohmann::ordered_json& chat_tools) {
  if (!tools.is_array()) return BadRequest("tools must be a list of function tools", "tools");
  chat_tools = nlohmann::ordered_json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const nlohmann::ordered_json& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || t.value("type", nlohmann::ordered_json()) != "function") {
      return BadRequest(where + ".type: only function tools are supported (latte runs no hosted tools)",
                        where + ".type");
    }
    nlohmann::ordered_json function = nlohmann::ordered_json::object();
    for (const char* field : {"name", "description", "parameters", "strict"}) {
      if (HasField(t, field)) function[field] = t[field];
    }
    chat_tools.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return std::nullopt;
}

// tool_choice: none, auto, required or {type: "function", name} as chat's.
MaybeError ChatToolChoice(const nlohmann::ordered_json& choice, nlohmann::ordered_json& chat_choice) {
  if (choice.is_string()) {
    chat_choice = choice;
    return std::nullopt;
  }
  if (!choice.is_object() || choice.value("type", nlohmann::ordered_json()) != "function") {
    return BadRequest("tool_choice must be none, auto, required or {\"type\": \"function\", \"name\": ...}",
                      "tool_choice");
  }
  chat_choice = {{"type", "function"}, {"function", {{"name", choice.value("name", nlohmann::ordered_json(nullptr))}}}};
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
      {"tool_choice.function.name", "tool_choice.name"},
      {"].function.", "]."},
  };
  for (const auto& [chat, responses] : kNames) {
    for (std::string* s : {&e.param, &e.message}) {
      const size_t at = s->find(chat);
      if (at != std::string::npos) s->replace(at, std::string_view(chat).size(), responses);
    }
  }
}

}  // namespace

MaybeError ParseResponsesRequest(const nlohmann::ordered_json& body, const ServedModel& model, ResponsesRequest& out) {
  LATTE_RETURN_IF_API_ERROR(RefuseUnsupportedResponseFields(body));
  nlohmann::ordered_json chat = {{"model", body.value("model", nlohmann::ordered_json(nullptr))}};
  nlohmann::ordered_json messages;
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
  nlohmann::ordered_json response_format;
  LATTE_RETURN_IF_API_ERROR(TextFormat(body, response_format, s.text_format));
  if (!response_format.is_null()) chat["response_format"] = std::move(response_format);
  if (HasField(body, "tools")) {
    LATTE_RETURN_IF_API_ERROR(ChatTools(body["tools"], chat["tools"]));
    s.tools = body["tools"];
  }
  if (HasField(body, "tool_choice")) {
    LATTE_RETURN_IF_API_ERROR(ChatToolChoice(body["tool_choice"], chat["tool_choice"]));
    s.tool_choice = body["tool_choice"];
  }
  if (HasField(body, "parallel_tool_calls")) {
    if (!body["parallel_tool_calls"].is_boolean()) {
      return BadRequest("parallel_tool_calls must be a boolean", "parallel_tool_calls");
    }
    chat["parallel_tool_calls"] = body["parallel_tool_calls"];
    s.parallel_tool_calls = body["parallel_tool_calls"].get<bool>();
  }
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
      created_(created),
      stream_(request.chat.stream),
      input_tokens_(static_cast<int64_t>(request.chat.request.prompt.size())),
      tool_reading_(ToolCallReading::Of(request.chat)) {
  if (reasoning_parser) parser_.emplace();
  if (stream_ && tool_reading_.any()) tool_stream_.emplace(tool_reading_);
}

nlohmann::json ResponsesFormatter::TextPart(const Item& message) {
  return {{"type", "output_text"},
          {"text", message.text},
          {"annotations", nlohmann::json::array()},
          {"logprobs", nlohmann::json::array()}};
}

nlohmann::json ResponsesFormatter::ItemJson(const Item& item) {
  const bool done = std::string_view(item.status) != "in_progress";
  switch (item.kind) {
    case Item::Kind::kReasoning:
      return {{"id", item.id},
              {"type", "reasoning"},
              {"summary", nlohmann::json::array()},
              {"content", done ? nlohmann::json::array({{{"type", "reasoning_text"}, {"text", item.text}}})
                               : nlohmann::json::array()},
              {"encrypted_content", nullptr},
              {"status", item.status}};
    case Item::Kind::kMessage:
      return {{"id", item.id},
              {"type", "message"},
              {"status", item.status},
              {"role", "assistant"},
              {"content", done ? nlohmann::json::array({TextPart(item)}) : nlohmann::json::array()}};
    case Item::Kind::kFunctionCall:
      return {{"id", item.id},           {"type", "function_call"},
              {"status", item.status},   {"arguments", done ? item.text : std::string()},
              {"call_id", item.call_id}, {"name", item.name}};
  }
  return nullptr;
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
                      {"parallel_tool_calls", settings_.parallel_tool_calls},
                      {"previous_response_id", nullptr},
                      {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
                      {"store", false},
                      {"temperature", settings_.temperature},
                      {"text", {{"format", settings_.text_format}}},
                      {"tool_choice", settings_.tool_choice},
                      {"tools", settings_.tools},
                      {"top_logprobs", 0},
                      {"top_p", settings_.top_p},
                      {"truncation", "disabled"},
                      {"usage", nullptr},
                      {"user", settings_.user},
                      {"metadata", settings_.metadata}};
  if (done) {
    if (incomplete_) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    for (const Item& item : items_) r["output"].push_back(ItemJson(item));
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

ResponsesFormatter::Item ResponsesFormatter::NewItem(Item::Kind kind, std::string text, std::string name,
                                                     const char* status) {
  const char* prefix = kind == Item::Kind::kReasoning ? "rs_" : kind == Item::Kind::kMessage ? "msg_" : "fc_";
  return {kind,
          NewRequestId(prefix),
          std::move(text),
          std::move(name),
          kind == Item::Kind::kFunctionCall ? NewRequestId("call_") : std::string(),
          status};
}

void ResponsesFormatter::ItemsOfOutput() {
  const char* status = incomplete_ ? "incomplete" : "completed";
  if (!reasoning_.empty())
    items_.push_back({Item::Kind::kReasoning, NewRequestId("rs_"), reasoning_, "", "", "completed"});
  ParsedToolCalls calls;
  if (tool_reading_.any()) calls = ReadToolCalls(tool_reading_, text_, stopped_);
  if (!calls.ok) {
    calls.content = text_;
    calls.calls.clear();
  }
  if (!calls.content.empty() || (items_.empty() && calls.calls.empty())) {
    items_.push_back(NewItem(Item::Kind::kMessage, calls.content, "", status));
  }
  for (const ToolCall& call : calls.calls) {
    items_.push_back(NewItem(Item::Kind::kFunctionCall, call.arguments, call.name, "completed"));
  }
}

ResponsesFormatter::Item& ResponsesFormatter::Open(Item::Kind kind, std::string& events, const std::string& name) {
  if (open_ && items_.back().kind == kind && kind != Item::Kind::kFunctionCall) return items_.back();
  if (open_) events += Close("completed");
  open_ = true;
  items_.push_back(NewItem(kind, "", name, "in_progress"));
  const Item& item = items_.back();
  events += Event("response.output_item.added", {{"output_index", open_index()}, {"item", ItemJson(item)}});
  if (kind == Item::Kind::kMessage) {
    events += Event("response.content_part.added",
                    {{"item_id", item.id},
                     {"output_index", open_index()},
                     {"content_index", 0},
                     {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", nlohmann::json::array()}}}});
  }
  return items_.back();
}

std::string ResponsesFormatter::Close(const char* status) {
  if (!open_) return {};
  open_ = false;
  Item& item = items_.back();
  item.status = status;
  const int index = open_index();
  // One statement per event: each takes the next sequence number.
  std::string events;
  switch (item.kind) {
    case Item::Kind::kReasoning:
      events = Event("response.reasoning_text.done",
                     {{"item_id", item.id}, {"output_index", index}, {"content_index", 0}, {"text", item.text}});
      break;
    case Item::Kind::kMessage:
      events = Event("response.output_text.done", {{"item_id", item.id},
                                                   {"output_index", index},
                                                   {"content_index", 0},
                                                   {"text", item.text},
                                                   {"logprobs", nlohmann::json::array()}});
      events += Event("response.content_part.done",
                      {{"item_id", item.id}, {"output_index", index}, {"content_index", 0}, {"part", TextPart(item)}});
      break;
    case Item::Kind::kFunctionCall:
      events = Event("response.function_call_arguments.done",
                     {{"item_id", item.id}, {"output_index", index}, {"arguments", item.text}, {"name", item.name}});
      break;
  }
  events += Event("response.output_item.done", {{"output_index", index}, {"item", ItemJson(item)}});
  return events;
}

std::string ResponsesFormatter::OnOutput(size_t, const GenerationOutput& out) {
  output_tokens_ += static_cast<int64_t>(out.tokens.size());
  if (out.finish && *out.finish == FinishReason::kLength) incomplete_ = true;
  if (out.finish && *out.finish == FinishReason::kStop) stopped_ = true;
  ReasoningDelta delta;
  if (parser_) {
    delta = parser_->Take(out.text, out.finish.has_value());
  } else {
    delta.content = out.text;
  }
  if (!stream_) {
    text_ += delta.content;
    reasoning_ += delta.reasoning;
    return {};
  }
  std::string events;
  if (!started_) {
    started_ = true;
    events += Event("response.created", {{"response", Response(false)}});
    events += Event("response.in_progress", {{"response", Response(false)}});
    // A plain answer's message opens at once, as OpenAI's does; with reasoning or
    // calls, the first item is not known yet.
    if (!parser_ && !tool_stream_) Open(Item::Kind::kMessage, events);
  }
  if (!delta.reasoning.empty()) {
    Item& reasoning = Open(Item::Kind::kReasoning, events);
    reasoning.text += delta.reasoning;
    events += Event(
        "response.reasoning_text.delta",
        {{"item_id", reasoning.id}, {"output_index", open_index()}, {"content_index", 0}, {"delta", delta.reasoning}});
  }
  ToolCallDelta calls;
  if (tool_stream_) {
    calls = tool_stream_->Push(delta.content, out.finish.has_value());
  } else {
    calls.content = std::move(delta.content);
  }
  if (!calls.content.empty()) {
    Item& message = Open(Item::Kind::kMessage, events);
    message.text += calls.content;
    events += Event("response.output_text.delta", {{"item_id", message.id},
                                                   {"output_index", open_index()},
                                                   {"content_index", 0},
                                                   {"delta", calls.content},
                                                   {"logprobs", nlohmann::json::array()}});
  }
  for (const ToolCallPiece& piece : calls.calls) {
    const bool call_open = open_ && items_.back().kind == Item::Kind::kFunctionCall;
    Item* call = piece.first || !call_open ? &Open(Item::Kind::kFunctionCall, events, piece.name) : &items_.back();
    if (piece.arguments.empty()) continue;
    call->text += piece.arguments;
    events += Event("response.function_call_arguments.delta",
                    {{"item_id", call->id}, {"output_index", open_index()}, {"delta", piece.arguments}});
  }
  return events;
}

std::string ResponsesFormatter::Finish() {
  if (!stream_) {
    ItemsOfOutput();
    return Response(true).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string events;
  if (items_.empty()) Open(Item::Kind::kMessage, events);  // nothing at all was written: an empty message
  events += Close(incomplete_ ? "incomplete" : "completed");
  events += Event(incomplete_ ? "response.incomplete" : "response.completed", {{"response", Response(true)}});
  return events;
}

std::string ResponsesFormatter::StreamError(const ApiError& error) {
  return Event("error", {{"code", error.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.code)},
                         {"message", error.message},
                         {"param", nullptr}});
}

}  // namespace latte::server
