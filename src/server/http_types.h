// What the HTTP layer hands the API and takes back, free of Beast's types: a parsed
// request, a whole reply, or a reply produced over time (a generation).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace latte::server {

struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string path;           // the target without its query string
  std::string content_type;   // the header's value, "" when absent
  std::string authorization;  // the header's value, "" when absent
  std::string body;
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (Retry-After, ...)
};

// One step of a reply produced over time (DeferredReply::Poll).
struct DeferredStep {
  std::optional<HttpReply> reply;  // a whole reply: the exchange ends with it
  bool begin_stream = false;       // send 200 text/event-stream headers now (once)
  std::string data;                // body bytes to stream now
  bool end_stream = false;         // the streamed body is complete
  bool idle() const { return !reply && !begin_stream && data.empty() && !end_stream; }
};

// A reply that waits on something else (the engine). The HTTP session calls Start once,
// then Poll on its own strand whenever `wake` was called (from any thread) and every
// HttpServerOptions::poll_interval, until a step carries `reply` or `end_stream`.
// Cancel: the client went away or stopped reading; no Poll follows.
class DeferredReply {
 public:
  virtual ~DeferredReply() = default;
  virtual void Start(std::function<void()> wake) = 0;
  virtual DeferredStep Poll() = 0;
  virtual void Cancel() = 0;
};

using Handled = std::variant<HttpReply, std::shared_ptr<DeferredReply>>;
using RequestHandler = std::function<Handled(HttpRequest&)>;

}  // namespace latte::server
