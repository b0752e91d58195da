#include "server/tool_call_parser.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace latte::server {
namespace {

constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kSep = "<｜tool▁sep｜>";
constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kV3ArgumentsOpen = "\n```json\n";
constexpr std::string_view kV3ArgumentsClose = "\n```<｜tool▁call▁end｜>";
// A call's header (its type and name) longer than this is no call.
constexpr size_t kMaxHeaderBytes = 512;

// The length of the longest suffix of `text` that is a proper prefix of `marker`:
// what must be held back because the marker may be arriving.
size_t MarkerPrefixAtEnd(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

bool IsPrefixOf(std::string_view text, std::string_view marker) {
  return text.size() <= marker.size() && marker.substr(0, text.size()) == text;
}

}  // namespace

bool ToolCallFormatFromName(std::string_view name, ToolCallFormat& out) {
  if (name == "deepseek_v3") {
    out = ToolCallFormat::kDeepSeekV3;
  } else if (name == "deepseek_v31") {
    out = ToolCallFormat::kDeepSeekV31;
  } else {
    return false;
  }
  return true;
}

std::optional<ToolCallFormat> ToolCallFormatOfTemplate(std::string_view source) {
  std::string compact;
  for (char ch : source) {
    if (ch != ' ') compact += ch == '"' ? '\'' : ch;
  }
  if (compact.find("<｜tool▁sep｜>'+tool['function']['name']") != std::string::npos) return ToolCallFormat::kDeepSeekV3;
  if (compact.find("tool['function']['name']+'<｜tool▁sep｜>'") != std::string::npos)
    return ToolCallFormat::kDeepSeekV31;
  return std::nullopt;
}

void ToolCallParser::Fail(ToolCallDelta& out) {
  state_ = State::kFailed;
  out.content += held_;
  held_.clear();
}

bool ToolCallParser::Step(ToolCallDelta& out) {
  switch (state_) {
    case State::kText: {
      const size_t at = held_.find(kCallsBegin);
      if (at == std::string::npos) {
        const size_t keep = MarkerPrefixAtEnd(held_, kCallsBegin);
        out.content += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return false;
      }
      out.content += held_.substr(0, at);
      held_.erase(0, at + kCallsBegin.size());
      state_ = State::kBetween;
      return true;
    }
    case State::kBetween: {
      const size_t start = held_.find_first_not_of(" \n");
      if (start == std::string::npos) return false;
      const std::string_view rest = std::string_view(held_).substr(start);
      if (rest.starts_with(kCallBegin)) {
        held_.erase(0, start + kCallBegin.size());
        state_ = State::kHeader;
        return true;
      }
      if (rest.starts_with(kCallsEnd)) {
        held_.erase(0, start + kCallsEnd.size());
        state_ = State::kDone;
        return true;
      }
      if (IsPrefixOf(rest, kCallBegin) || IsPrefixOf(rest, kCallsEnd)) return false;
      Fail(out);
      return false;
    }
    case State::kHeader: {
      std::string name;
      size_t end;
      if (format_ == ToolCallFormat::kDeepSeekV3) {
        const size_t sep = held_.find(kSep);
        const size_t open = sep == std::string::npos ? sep : held_.find(kV3ArgumentsOpen, sep);
        if (open == std::string::npos) {
          if (held_.size() > kMaxHeaderBytes) Fail(out);
          return false;
        }
        if (held_.substr(0, sep) != "function") {
          Fail(out);
          return false;
        }
        name = held_.substr(sep + kSep.size(), open - sep - kSep.size());
        end = open + kV3ArgumentsOpen.size();
      } else {
        const size_t sep = held_.find(kSep);
        if (sep == std::string::npos) {
          if (held_.size() > kMaxHeaderBytes) Fail(out);
          return false;
        }
        name = held_.substr(0, sep);
        end = sep + kSep.size();
      }
      if (name.empty() || name.size() > kMaxHeaderBytes || name.find_first_of("\n<") != std::string::npos) {
        Fail(out);
        return false;
      }
      held_.erase(0, end);
      out.calls.push_back({calls_++, true, std::move(name), ""});
      state_ = State::kArguments;
      return true;
    }
    case State::kArguments: {
      const std::string_view close = format_ == ToolCallFormat::kDeepSeekV3 ? kV3ArgumentsClose : kCallEnd;
      const size_t at = held_.find(close);
      const size_t take = at != std::string::npos ? at : held_.size() - MarkerPrefixAtEnd(held_, close);
      if (take > 0) {
        // The first piece of a call carries its name alone; its arguments follow in others.
        if (!out.calls.empty() && out.calls.back().index == calls_ - 1 && !out.calls.back().first) {
          out.calls.back().arguments += held_.substr(0, take);
        } else {
          out.calls.push_back({calls_ - 1, false, "", held_.substr(0, take)});
        }
      }
      if (at == std::string::npos) {
        held_.erase(0, take);
        return false;
      }
      held_.erase(0, at + close.size());
      ++complete_;
      state_ = State::kBetween;
      return true;
    }
    case State::kDone:
    case State::kFailed:
      out.content += held_;
      held_.clear();
      return false;
  }
  return false;
}

ToolCallDelta ToolCallParser::Push(std::string_view text) {
  held_ += text;
  ToolCallDelta out;
  while (Step(out)) {
  }
  return out;
}

ToolCallDelta ToolCallParser::Flush() {
  ToolCallDelta out;
  while (Step(out)) {
  }
  // What is still held is a marker that never came whole, or a call cut short (then the
  // calls did not end well: the rest is content).
  if (state_ == State::kBetween && held_.find_first_not_of(" \n") == std::string::npos) {
    held_.clear();
  } else if (state_ == State::kBetween || state_ == State::kHeader || state_ == State::kArguments) {
    Fail(out);
  } else {
    out.content += held_;
    held_.clear();
  }
  return out;
}

ParsedToolCalls ToolCallParser::Parse(ToolCallFormat format, std::string_view text) {
  ToolCallParser parser(format);
  ToolCallDelta a = parser.Push(text);
  ToolCallDelta b = parser.Flush();
  ParsedToolCalls result;
  std::vector<ToolCall> calls;
  for (const ToolCallDelta* d : {&a, &b}) {
    for (const ToolCallPiece& piece : d->calls) {
      if (piece.first) calls.push_back({piece.name, ""});
      calls.back().arguments += piece.arguments;
    }
  }
  const bool every_call_ended = parser.state_ == State::kDone || parser.state_ == State::kBetween;
  const bool arguments_are_json =
      std::all_of(calls.begin(), calls.end(), [](const ToolCall& c) { return nlohmann::json::accept(c.arguments); });
  if (calls.empty() || !every_call_ended || !arguments_are_json || parser.complete_ != parser.calls_) {
    result.content = std::string(text);
    return result;
  }
  result.ok = true;
  result.content = a.content + b.content;
  result.calls = std::move(calls);
  return result;
}

}  // namespace latte::server
