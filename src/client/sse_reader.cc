#include "client/sse_reader.h"

namespace latte {

void SseReader::Feed(std::string_view bytes, std::vector<std::string>& events) {
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != '\n') continue;
    partial_line_.append(bytes.substr(start, i - start));
    std::string_view line = partial_line_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    Line(line, events);
    partial_line_.clear();
    start = i + 1;
  }
  partial_line_.append(bytes.substr(start));
}

bool SseReader::Finish(std::vector<std::string>& events) {
  if (!partial_line_.empty()) {
    std::string line = std::move(partial_line_);
    partial_line_.clear();
    if (!line.empty() && line.back() == '\r') line.pop_back();
    Line(line, events);
  }
  if (!has_data_) return false;
  events.push_back(std::move(data_));
  data_.clear();
  has_data_ = false;
  return true;
}

void SseReader::Line(std::string_view line, std::vector<std::string>& events) {
  if (line.empty()) {  // the event ends
    if (has_data_) events.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  constexpr std::string_view kData = "data:";
  if (line.substr(0, kData.size()) != kData) return;
  std::string_view value = line.substr(kData.size());
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);  // one space after the colon is not data
  if (has_data_) data_ += '\n';
  data_.append(value);
  has_data_ = true;
}

}  // namespace latte
