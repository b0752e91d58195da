// The HTTP/1.1 side of `latte serve`: Boost.Beast on one Asio io_context run by a few
// threads. Each connection is a chain of asynchronous operations on its own strand, so
// hundreds of idle or streaming connections cost memory, not threads (cpp-httplib runs
// a thread per connection). Beast parses requests; this file decides only what the
// protocol needs: body and header limits, read and write timeouts, keep-alive, chunked
// streaming of a DeferredReply, and noticing a client that hung up while its reply is
// pending (a failed read or write cancels the reply).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "server/http_types.h"

namespace latte::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: any free port (port() tells which)
  int threads = 2;       // io threads: reading, writing, requests without a body
  // Requests with a body are handled on `handler_threads` threads; those of at least
  // `large_body` bytes one at a time on a thread of their own, so a few large ones hold
  // up neither small ones nor /health. Past `max_waiting` waiting in a lane: 503.
  int handler_threads = 2;
  size_t large_body = 256u << 10;
  int max_waiting = 64;             // small bodies
  int max_waiting_large = 8;        // large bodies (each holds its body until handled)
  size_t body_limit = 8u << 20;     // larger bodies: 413
  size_t header_limit = 16u << 10;  // larger headers: 431
  // Receiving one request (headers and body), and waiting idle on a kept-alive connection.
  std::chrono::milliseconds read_timeout{std::chrono::seconds(30)};
  // One write; a client that stops reading a stream for this long is dropped.
  std::chrono::milliseconds write_timeout{std::chrono::seconds(30)};
  // How often a pending DeferredReply is polled without being woken (queue timeouts).
  std::chrono::milliseconds poll_interval{std::chrono::milliseconds(200)};
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, RequestHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens (errors: the address, e.g. a port in use).
  Status Listen();
  uint16_t port() const;
  // Calls `on_signal` once on SIGINT or SIGTERM (on an io thread), then Shutdown(grace).
  void ShutdownOnSignals(std::function<void()> on_signal, std::chrono::milliseconds grace);
  // Serves on `options.threads` threads until Shutdown has finished; blocks.
  void Run();
  // Stops accepting, waits up to `grace` for pending replies to finish, then stops. Any thread.
  void Shutdown(std::chrono::milliseconds grace);
  // Replies started and not yet finished or cancelled.
  int64_t pending_replies() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace latte::server
