#include "engine/stop_matcher.h"

#include <algorithm>

#include "text/utf8.h"

namespace latte {

Status StopMatcher::CheckStopStrings(const std::vector<std::string>& stop_strings) {
  if (stop_strings.size() > kMaxStopStrings) {
    return Status::InvalidArgument(
        "at most " + std::to_string(kMaxStopStrings) + " stop strings, got " + std::to_string(stop_strings.size()),
        "stop");
  }
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    if (stop_strings[i].empty())
      return Status::InvalidArgument("stop string " + std::to_string(i) + " is empty", "stop");
    if (!IsValidUtf8(stop_strings[i])) {
      return Status::InvalidArgument("stop string " + std::to_string(i) + " is not valid UTF-8", "stop");
    }
  }
  return Status::Ok();
}

Result<StopMatcher> StopMatcher::Create(std::vector<std::string> stop_strings, std::vector<int32_t> stop_token_ids) {
  LATTE_RETURN_IF_ERROR(CheckStopStrings(stop_strings));
  StopMatcher m;
  m.stop_strings_ = std::move(stop_strings);
  m.stop_token_ids_ = std::move(stop_token_ids);
  return m;
}

bool StopMatcher::IsStopToken(int32_t id) const {
  return std::find(stop_token_ids_.begin(), stop_token_ids_.end(), id) != stop_token_ids_.end();
}

StopStep StopMatcher::Push(std::string_view piece) {
  StopStep step;
  if (stopped()) {
    step.stopped = true;
    step.stop_index = stop_index_;
    return step;
  }
  held_.append(piece);

  // A completed stop: no occurrence ended in an earlier piece (we would have stopped), and
  // none starts in emitted text (held_ keeps every suffix that could begin one), so the
  // first occurrence of each string in held_ is its first in the whole text.
  size_t best_end = std::string::npos, best_start = 0;
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    const std::string& s = stop_strings_[i];
    const size_t start = held_.find(s);
    if (start == std::string::npos) continue;
    const size_t end = start + s.size();
    if (end < best_end || (end == best_end && start < best_start)) {
      best_end = end;
      best_start = start;
      stop_index_ = static_cast<int>(i);
    }
  }
  if (stopped()) {
    step.text = held_.substr(0, best_start);
    step.stopped = true;
    step.stop_index = stop_index_;
    held_.clear();
    return step;
  }

  // Hold back the longest suffix of held_ that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& s : stop_strings_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > hold; --len) {
      if (std::string_view(held_).substr(held_.size() - len) == std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  step.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return step;
}

std::string StopMatcher::Flush() {
  std::string rest;
  rest.swap(held_);
  return rest;
}

}  // namespace latte
