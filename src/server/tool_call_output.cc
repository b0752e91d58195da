#include "server/tool_call_output.h"

#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace latte::server {
namespace {

// [first, end) of each whole element of a JSON array that `text` writes, read from
// `from` (0, or a position just past an element, inside the list); `from` is left
// where reading may resume.
std::vector<std::pair<size_t, size_t>> WholeArrayElements(const std::string& text, size_t& from) {
  std::vector<std::pair<size_t, size_t>> elements;
  int depth = from == 0 ? 0 : 1;
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

// One element of the "required" list as a call: its name, and its parameters as
// compact JSON text with the members in the order the model wrote them.
bool RequiredCall(const nlohmann::ordered_json& element, ToolCall& call) {
  if (!element.is_object() || !element.contains("name") || !element["name"].is_string() ||
      !element.contains("parameters")) {
    return false;
  }
  call.name = element["name"].get<std::string>();
  call.arguments = element["parameters"].dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  return true;
}

}  // namespace

ParsedToolCalls ReadToolCalls(const ToolCallReading& reading, const std::string& text, bool stopped) {
  if (reading.parser) return ToolCallParser::Parse(*reading.parser, text);
  ParsedToolCalls parsed;
  if (reading.forced == ChatRequest::ForcedTools::kNone || !stopped) return parsed;
  if (reading.forced == ChatRequest::ForcedTools::kNamed) {
    if (!nlohmann::json::accept(text)) return parsed;  // a stop string cut it: not whole
    parsed.calls.push_back({reading.forced_name, text});
    parsed.ok = true;
    return parsed;
  }
  const nlohmann::ordered_json list = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!list.is_array() || list.empty()) return parsed;
  for (const nlohmann::ordered_json& element : list) {
    ToolCall call;
    if (!RequiredCall(element, call)) return {};
    parsed.calls.push_back(std::move(call));
  }
  parsed.ok = true;
  return parsed;
}

ToolCallStream::ToolCallStream(ToolCallReading reading) : reading_(std::move(reading)) {
  if (reading_.parser) parser_.emplace(*reading_.parser);
}

ToolCallDelta ToolCallStream::PushRequired(std::string_view text) {
  ToolCallDelta d;
  required_text_ += text;
  for (const auto& [first, end] : WholeArrayElements(required_text_, required_scanned_)) {
    const nlohmann::ordered_json element =
        nlohmann::ordered_json::parse(required_text_.substr(first, end - first), nullptr, false);
    ToolCall call;
    if (!RequiredCall(element, call)) continue;
    d.calls.push_back({calls_++, /*first=*/true, std::move(call.name), std::move(call.arguments)});
  }
  return d;
}

ToolCallDelta ToolCallStream::Push(std::string_view text, bool last) {
  switch (reading_.forced) {
    case ChatRequest::ForcedTools::kRequired: return PushRequired(text);
    case ChatRequest::ForcedTools::kNamed: {
      ToolCallDelta d;
      if (text.empty()) return d;
      d.calls.push_back({0, /*first=*/calls_ == 0, calls_ == 0 ? reading_.forced_name : "", std::string(text)});
      calls_ = 1;
      return d;
    }
    case ChatRequest::ForcedTools::kNone: break;
  }
  if (!parser_) return {std::string(text), {}};
  ToolCallDelta d = parser_->Push(text);
  if (last) {
    ToolCallDelta rest = parser_->Flush();
    d.content += rest.content;
    d.calls.insert(d.calls.end(), rest.calls.begin(), rest.calls.end());
  }
  for (const ToolCallPiece& piece : d.calls) {
    if (piece.first) ++calls_;
  }
  return d;
}

}  // namespace latte::server
