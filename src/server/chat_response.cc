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
      tool_reading_(ToolCallReading::Of(request)) {}

namespace {

// One entry of OpenAI's tool_calls: a new id, the function's name and arguments.
nlohmann::json ToolCallJson(const std::string& name, const std::string& arguments) {
  return {{"id", NewRequestId("chatcmpl-tool-")},
          {"type", "function"},
          {"function", {{"name", name}, {"arguments", arguments}}}};
}

}  // namespace

nlohmann::json ChatFormatter::StreamToolCalls(Choice& c, std::string& content, bool last) {
  nlohmann::json pieces = nlohmann::json::array();
  if (!tool_reading_.any()) return pieces;
  if (!c.tool_stream) c.tool_stream.emplace(tool_reading_);
  ToolCallDelta d = c.tool_stream->Push(content, last);
  content = std::move(d.content);
  for (const ToolCallPiece& piece : d.calls) {
    if (piece.first) {
      nlohmann::json first = ToolCallJson(piece.name, piece.arguments);
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
  const ParsedToolCalls parsed = ReadToolCalls(tool_reading_, c.content, finish_reason == "stop");
  if (!parsed.ok) return;
  message["content"] = parsed.content.empty() ? nlohmann::json(nullptr) : nlohmann::json(parsed.content);
  nlohmann::json calls = nlohmann::json::array();
  for (const ToolCall& call : parsed.calls) calls.push_back(ToolCallJson(call.name, call.arguments));
  message["tool_calls"] = std::move(calls);
  // A named function's call ends as "stop", vLLM's way; the others as "tool_calls".
  if (finish_reason == "stop" && tool_reading_.forced != ChatRequest::ForcedTools::kNamed) {
    finish_reason = "tool_calls";
  }
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
  nlohmann::json calls = StreamToolCalls(c, delta.content, out.finish.has_value());
  if (out.finish && c.finish_reason == "stop" && c.tool_stream && c.tool_stream->calls() > 0 &&
      tool_reading_.forced != ChatRequest::ForcedTools::kNamed) {
    c.finish_reason = "tool_calls";
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
    if (tool_reading_.any()) MessageWithToolCalls(c, message, finish_reason);
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
