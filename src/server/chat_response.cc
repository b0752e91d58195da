#include "server/chat_response.h"

namespace latte::server {
namespace {

// A token's raw bytes as OpenAI's `bytes` (a list of ints: the token may be part of a
// UTF-8 character, which `token` cannot show).
nlohmann::json TokenBytesJson(const Tokenizer* tokenizer, int32_t id) {
  nlohmann::json bytes = nlohmann::json::array();
  const std::string raw = tokenizer ? tokenizer->TokenBytes(id) : TokenText(nullptr, id);
  for (unsigned char b : raw) bytes.push_back(static_cast<int>(b));
  return bytes;
}

}  // namespace

ChatFormatter::ChatFormatter(const ChatRequest& request, bool reasoning_parser, const Tokenizer* tokenizer,
                             std::string id, int64_t created)
    : tokenizer_(tokenizer),
      id_(std::move(id)),
      created_(created),
      model_(request.model),
      logprobs_(request.logprobs),
      stream_(request.stream),
      include_usage_(request.include_usage),
      reasoning_parser_(reasoning_parser),
      tokens_as_ids_(request.tokens_as_ids),
      prompt_tokens_(static_cast<int64_t>(request.request.prompt.size())),
      stop_token_ids_(request.request.stop_token_ids),
      tool_calls_(request.tool_calls),
      forced_tools_(request.forced_tools),
      forced_name_(request.forced_name) {}

namespace {

// The end of each element of a JSON array that `text` writes, from `from` (a position
// where no string or element is open, or 0): [first, end) of each whole element, and
// the position scanning may resume at.
std::vector<std::pair<size_t, size_t>> WholeArrayElements(const std::string& text, size_t& from) {
  std::vector<std::pair<size_t, size_t>> elements;
  int depth = from == 0 ? 0 : 1;  // `from` > 0 is just past an element, inside the list
  bool in_string = false;
  size_t start = std::string::npos;
  size_t resume = from;
  for (size_t i = from; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (ch == '\\') {
        ++i;
      } else if (ch == '"') {
        in_string = false;
      }
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth == 2 && start == std::string::npos) start = i;
    } else if (ch == ']' || ch == '}') {
      if (--depth == 1 && start != std::string::npos) {
        elements.emplace_back(start, i + 1);
        start = std::string::npos;
        resume = i + 1;
      }
    }
  }
  from = resume;
  return elements;
}

// One entry of OpenAI's tool_calls: a new id, the function's name and arguments.
nlohmann::json ToolCallJson(const nlohmann::json& name, const std::string& arguments) {
  return {{"id", NewRequestId("chatcmpl-tool-")},
          {"type", "function"},
          {"function", {{"name", name}, {"arguments", arguments}}}};
}

// A call of the "required" list: its name and its parameters as compact JSON text,
// members in the order the model wrote them.
nlohmann::json RequiredCallJson(const nlohmann::ordered_json& call) {
  return ToolCallJson(call["name"],
                      call["parameters"].dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

bool IsRequiredCall(const nlohmann::ordered_json& call) {
  return call.is_object() && call.contains("name") && call.contains("parameters");
}

}  // namespace

nlohmann::json ChatFormatter::StreamForcedCalls(Choice& c, const std::string& delta) {
  nlohmann::json pieces = nlohmann::json::array();
  if (forced_tools_ == ChatRequest::ForcedTools::kNamed) {
    if (delta.empty()) return pieces;
    if (c.call_ids.empty()) {
      nlohmann::json piece = ToolCallJson(forced_name_, delta);
      c.call_ids.push_back(piece["id"]);
      piece["index"] = 0;
      pieces.push_back(std::move(piece));
    } else {
      pieces.push_back({{"index", 0}, {"function", {{"arguments", delta}}}});
    }
    return pieces;
  }
  // "required": whole calls as their elements of the list close.
  c.content += delta;
  for (const auto& [first, end] : WholeArrayElements(c.content, c.forced_scanned)) {
    const nlohmann::ordered_json call =
        nlohmann::ordered_json::parse(c.content.substr(first, end - first), nullptr, /*allow_exceptions=*/false);
    if (!IsRequiredCall(call)) continue;
    nlohmann::json piece = RequiredCallJson(call);
    c.call_ids.push_back(piece["id"]);
    piece["index"] = c.call_ids.size() - 1;
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

void ChatFormatter::MessageWithForcedCalls(const Choice& c, nlohmann::json& message,
                                           nlohmann::json& finish_reason) const {
  if (finish_reason != "stop") return;  // cut short: the JSON is not whole, it stays content
  nlohmann::json calls = nlohmann::json::array();
  if (forced_tools_ == ChatRequest::ForcedTools::kNamed) {
    if (!nlohmann::json::accept(c.content)) return;  // a stop string cut it: not whole either
    calls.push_back(ToolCallJson(forced_name_, c.content));
  } else {
    const nlohmann::ordered_json list = nlohmann::ordered_json::parse(c.content, nullptr, false);
    if (!list.is_array()) return;
    for (const nlohmann::ordered_json& call : list) {
      if (!IsRequiredCall(call)) return;
      calls.push_back(RequiredCallJson(call));
    }
    finish_reason = "tool_calls";
  }
  message["content"] = nullptr;
  message["tool_calls"] = std::move(calls);
}

nlohmann::json ChatFormatter::StreamToolCalls(Choice& c, std::string& content, bool last) {
  nlohmann::json pieces = nlohmann::json::array();
  if (!tool_calls_) return pieces;
  if (!c.tool_parser) c.tool_parser.emplace(*tool_calls_);
  ToolCallDelta d = c.tool_parser->Push(content);
  if (last) {
    ToolCallDelta rest = c.tool_parser->Flush();
    d.content += rest.content;
    d.calls.insert(d.calls.end(), rest.calls.begin(), rest.calls.end());
  }
  content = std::move(d.content);
  for (const ToolCallPiece& piece : d.calls) {
    if (piece.first) {
      nlohmann::json first = ToolCallJson(piece.name, "");
      c.call_ids.push_back(first["id"]);
      first["index"] = piece.index;
      pieces.push_back(std::move(first));
    } else {
      pieces.push_back({{"index", piece.index}, {"function", {{"arguments", piece.arguments}}}});
    }
  }
  return pieces;
}

void ChatFormatter::MessageWithToolCalls(const Choice& c, nlohmann::json& message,
                                         nlohmann::json& finish_reason) const {
  const ParsedToolCalls parsed = ToolCallParser::Parse(*tool_calls_, c.content);
  if (!parsed.ok) return;
  message["content"] = parsed.content.empty() ? nlohmann::json(nullptr) : nlohmann::json(parsed.content);
  nlohmann::json calls = nlohmann::json::array();
  for (const ToolCall& call : parsed.calls) calls.push_back(ToolCallJson(call.name, call.arguments));
  message["tool_calls"] = std::move(calls);
  if (finish_reason == "stop") finish_reason = "tool_calls";
}

nlohmann::json ChatFormatter::TokenLogprobJson(const SampledToken& t) const {
  nlohmann::json top = nlohmann::json::array();
  for (const TokenLogprob& alt : t.top_logprobs()) {
    top.push_back({{"token", TokenText(tokenizer_, alt.id, tokens_as_ids_)},
                   {"logprob", alt.logprob},
                   {"bytes", TokenBytesJson(tokenizer_, alt.id)}});
  }
  return {{"token", TokenText(tokenizer_, t.id, tokens_as_ids_)},
          {"logprob", t.logprob},
          {"bytes", TokenBytesJson(tokenizer_, t.id)},
          {"top_logprobs", top}};
}

nlohmann::json ChatFormatter::ChunkBase() const {
  nlohmann::json chunk = {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_}};
  if (include_usage_) chunk["usage"] = nullptr;
  return chunk;
}

std::string ChatFormatter::OnOutput(size_t, const GenerationOutput& out) {
  Choice& c = choices_[out.index];
  if (reasoning_parser_ && !c.parser) c.parser.emplace();
  ReasoningDelta delta;
  if (c.parser) {
    delta = c.parser->Take(out.text, out.finish.has_value());
  } else {
    delta.content = out.text;
  }
  nlohmann::json lp = nlohmann::json::array();
  if (logprobs_) {
    for (const SampledToken& t : out.tokens) lp.push_back(TokenLogprobJson(t));
  }
  completion_tokens_ += static_cast<int64_t>(out.tokens.size());
  if (out.finish) {
    c.finish_reason = std::string(FinishReasonName(*out.finish));
    if (!out.stop_reason.empty()) {
      c.stop_reason = out.stop_reason;
    } else if (*out.finish == FinishReason::kStop && !out.tokens.empty()) {
      for (int32_t id : stop_token_ids_) {
        if (id == out.tokens.back().id) c.stop_reason = id;
      }
    }
  }
  if (!stream_) {
    c.content += delta.content;
    c.reasoning += delta.reasoning;
    for (auto& e : lp) c.logprobs.push_back(std::move(e));
    return {};
  }
  std::string events;
  if (!c.role_sent) {  // OpenAI's first delta of a choice: the role, empty content
    c.role_sent = true;
    nlohmann::json chunk = ChunkBase();
    chunk["choices"] = nlohmann::json::array({{{"index", out.index},
                                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                                               {"logprobs", nullptr},
                                               {"finish_reason", nullptr}}});
    events += SseEvent(chunk);
  }
  nlohmann::json calls;
  if (forced_tools_ != ChatRequest::ForcedTools::kNone) {
    calls = StreamForcedCalls(c, delta.content);
    delta.content.clear();
    if (out.finish && c.finish_reason == "stop" && forced_tools_ == ChatRequest::ForcedTools::kRequired) {
      c.finish_reason = "tool_calls";
    }
  } else {
    calls = StreamToolCalls(c, delta.content, out.finish.has_value());
    if (out.finish && !c.call_ids.empty() && c.finish_reason == "stop") c.finish_reason = "tool_calls";
  }
  if (delta.content.empty() && delta.reasoning.empty() && calls.empty() && lp.empty() && !out.finish) return events;
  nlohmann::json d = nlohmann::json::object();
  if (!delta.reasoning.empty()) d["reasoning_content"] = delta.reasoning;
  if (!delta.content.empty() || (delta.reasoning.empty() && calls.empty())) d["content"] = delta.content;
  if (!calls.empty()) d["tool_calls"] = calls;
  nlohmann::json choice = {{"index", out.index},
                           {"delta", d},
                           {"logprobs", logprobs_ ? nlohmann::json({{"content", lp}}) : nlohmann::json(nullptr)},
                           {"finish_reason", out.finish ? c.finish_reason : nlohmann::json(nullptr)}};
  if (out.finish) choice["stop_reason"] = c.stop_reason;
  nlohmann::json chunk = ChunkBase();
  chunk["choices"] = nlohmann::json::array({choice});
  return events + SseEvent(chunk);
}

std::string ChatFormatter::Finish() {
  const nlohmann::json usage = UsageJson(prompt_tokens_, completion_tokens_);
  if (stream_) {
    return include_usage_ ? UsageChunkEvent(ChunkBase(), usage) : std::string();
  }
  nlohmann::json choices = nlohmann::json::array();
  for (const auto& [index, c] : choices_) {
    nlohmann::json message = {{"role", "assistant"}};
    if (reasoning_parser_) {
      // vLLM's R1 parser: no "</think>" means it was all reasoning, and content is null.
      message["reasoning_content"] = c.reasoning.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.reasoning);
      message["content"] = c.content.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.content);
    } else {
      message["content"] = c.content;
    }
    nlohmann::json finish_reason = c.finish_reason;
    if (tool_calls_) MessageWithToolCalls(c, message, finish_reason);
    if (forced_tools_ != ChatRequest::ForcedTools::kNone) MessageWithForcedCalls(c, message, finish_reason);
    choices.push_back({{"index", index},
                       {"message", message},
                       {"logprobs", logprobs_ ? nlohmann::json({{"content", c.logprobs}}) : nlohmann::json(nullptr)},
                       {"finish_reason", finish_reason},
                       {"stop_reason", c.stop_reason}});
  }
  nlohmann::json body = {{"id", id_},       {"object", "chat.completion"}, {"created", created_},
                         {"model", model_}, {"choices", choices},          {"usage", usage}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace latte::server
