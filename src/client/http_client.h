// A small blocking HTTP/1.1 client (Boost.Beast) for the tools that talk to an
// OpenAI-compatible server over the network: `latte bench serve` and `latte eval`.
// One request per connection (Connection: close): a benchmark client that opens a
// connection per request measures what vLLM's and lm-eval's clients measure, and no
// connection state is shared between the threads that call it. Plain http only
// (the servers under test listen on loopback or a private network).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace latte {

// Where the server is: "http://127.0.0.1:8000" (a trailing "/" or "/v1" is dropped:
// paths are given in full, "/v1/completions").
struct BaseUrl {
  std::string host;
  std::string port;  // "80" when the URL names none
  std::string text;  // scheme://host:port, for messages
};
Result<BaseUrl> ParseBaseUrl(std::string_view url);

struct HttpRequestOptions {
  std::string api_key;  // non-empty: "Authorization: Bearer <key>"
  // The longest wait for the connection or for any bytes of the reply; a server that
  // goes silent this long fails the request (a long prefill on a busy CPU server sends
  // nothing for minutes, so the default is generous).
  std::chrono::seconds timeout{1800};
};

struct HttpResponse {
  int status = 0;
  std::string body;
};

// GET or POST (with a JSON body when `json_body` is non-empty) and the whole reply.
// Errors: the connection or the transfer failed (an HTTP error status is a response).
Result<HttpResponse> HttpGet(const BaseUrl& base, const std::string& path, const HttpRequestOptions& options);
Result<HttpResponse> HttpPostJson(const BaseUrl& base, const std::string& path, const std::string& json_body,
                                  const HttpRequestOptions& options);

// POST a JSON body and hand the reply's body to `on_bytes` as it arrives (the chunks
// of a chunked reply, decoded), after `on_status` has seen the status code. For
// server-sent events: the caller times each piece on arrival.
Status HttpPostStreaming(const BaseUrl& base, const std::string& path, const std::string& json_body,
                         const HttpRequestOptions& options, const std::function<void(int status)>& on_status,
                         const std::function<void(std::string_view bytes)>& on_bytes);

}  // namespace latte
