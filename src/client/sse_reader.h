// Server-sent events as an OpenAI-compatible server streams them: lines "data: X",
// events separated by a blank line, "data: [DONE]" at the end. Bytes go in as they
// arrive (split anywhere, "\n" or "\r\n" line ends); each complete event's data comes
// out. Lines other than "data:" (comments ": ...", "event:", "id:", "retry:") are
// skipped, as an SSE client does; an event of several data lines is one payload with
// the lines joined by "\n" (the SSE specification).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace latte {

class SseReader {
 public:
  // Appends the data of every event `bytes` completes to `events`.
  void Feed(std::string_view bytes, std::vector<std::string>& events);
  // The data of an event the stream ended without its blank line (a server that
  // closes right after its last "data:" line), if any.
  bool Finish(std::vector<std::string>& events);

 private:
  void Line(std::string_view line, std::vector<std::string>& events);

  std::string partial_line_;
  std::string data_;
  bool has_data_ = false;
};

}  // namespace latte
