#include "server/reasoning_parser.h"

#include <algorithm>
#include <string_view>

namespace latte::server {
namespace {

constexpr std::string_view kStart = "<think>";
constexpr std::string_view kEnd = "</think>";

// Length of the longest suffix of `text` that is a proper prefix of `marker`.
size_t PartialMarkerSuffix(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

ReasoningDelta ReasoningParser::Push(const std::string& text) {
  ReasoningDelta out;
  held_ += text;
  if (!start_checked_) {
    // Wait until the text either starts with "<think>" or cannot.
    const size_t n = std::min(held_.size(), kStart.size());
    if (std::string_view(held_).substr(0, n) != kStart.substr(0, n)) {
      start_checked_ = true;
    } else if (held_.size() >= kStart.size()) {
      held_.erase(0, kStart.size());
      start_checked_ = true;
    } else {
      return out;
    }
  }
  if (thinking_) {
    const size_t end = held_.find(kEnd);
    if (end == std::string::npos) {
      const size_t keep = PartialMarkerSuffix(held_, kEnd);
      out.reasoning = held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
    out.reasoning = held_.substr(0, end);
    held_.erase(0, end + kEnd.size());
    thinking_ = false;
  }
  out.content = std::move(held_);
  held_.clear();
  return out;
}

ReasoningDelta ReasoningParser::Flush() {
  ReasoningDelta out;
  (thinking_ ? out.reasoning : out.content) = std::move(held_);
  held_.clear();
  start_checked_ = true;
  return out;
}

ReasoningDelta ReasoningParser::Take(const std::string& text, bool last) {
  ReasoningDelta delta = Push(text);
  if (last) {
    ReasoningDelta rest = Flush();
    delta.reasoning += rest.reasoning;
    delta.content += rest.content;
  }
  return delta;
}

}  // namespace latte::server
