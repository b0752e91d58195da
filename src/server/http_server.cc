#include "server/http_server.h"

#include <array>
#include <cstdio>
#include <deque>
#include <optional>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "server/api_error.h"

namespace latte::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// Threads that run the handler for requests with a body, admitting at most `threads +
// max_waiting` at a time (TryPost refuses the rest, which get 503).
class HandlerLane {
 public:
  HandlerLane(int threads, int max_waiting) : pool_(static_cast<size_t>(threads)), capacity_(threads + max_waiting) {}

  template <typename Job> bool TryPost(Job job) {
    if (admitted_.fetch_add(1) >= capacity_) {
      --admitted_;
      return false;
    }
    net::post(pool_, [this, job = std::move(job)]() mutable {
      job();
      --admitted_;
    });
    return true;
  }
  int capacity() const { return capacity_; }
  // Finishes the jobs running now and drops those waiting.
  void Stop() {
    pool_.stop();
    pool_.join();
  }

 private:
  net::thread_pool pool_;
  int capacity_;
  std::atomic<int> admitted_{0};
};

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  RequestHandler handler;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  net::signal_set signals{ioc};
  net::steady_timer shutdown_timer{ioc};
  std::atomic<int64_t> pending{0};
  std::atomic<bool> shutting_down{false};
  std::chrono::steady_clock::time_point shutdown_deadline;
  // Out of file descriptors: accepting pauses (kAcceptPause at a time) instead of
  // failing at once again and spinning; logged once per episode.
  net::steady_timer accept_timer{ioc};
  bool out_of_descriptors = false;
  // After ioc: a job that ends after the io threads stopped posts to a live io_context.
  HandlerLane small_bodies;
  HandlerLane large_bodies;

  Impl(HttpServerOptions o, RequestHandler h)
      : options(std::move(o)),
        handler(std::move(h)),
        ioc(options.threads),
        small_bodies(options.handler_threads, options.max_waiting),
        large_bodies(1, options.max_waiting_large) {}
  void Accept();
  void WaitForPendingReplies();
};

namespace {

// The path without its query string.
std::string PathOf(beast::string_view target) {
  const auto q = target.find('?');
  return std::string(q == beast::string_view::npos ? target : target.substr(0, q));
}

// What one connection may hold unparsed: the headers' limit and a margin for the body
// bytes read with them. Beast's parser takes body bytes out as they come, so only a line
// that never ends (a chunk size or trailer without CRLF) fills it: then the read fails
// with buffer_overflow instead of growing without bound.
size_t ReadBufferLimit(const HttpServerOptions& o) { return o.header_limit + (64u << 10); }

// Framing a proxy in front of latte could read differently (request smuggling), refused
// as RFC 9112 and nginx do: a Transfer-Encoding other than a lone "chunked" (501: latte
// decodes no other coding; "identity" or "gzip, chunked" would otherwise be read with
// the coding ignored), an HTTP/1.1 request without exactly one Host (400).
std::optional<ApiError> FramingError(const http::request_parser<http::string_body>::value_type& head) {
  const auto te = head.find(http::field::transfer_encoding);
  if (te != head.end()) {
    std::string coding(te->value());
    const auto first = coding.find_first_not_of(" \t"), last = coding.find_last_not_of(" \t");
    coding = first == std::string::npos ? "" : coding.substr(first, last - first + 1);
    if (head.count(http::field::transfer_encoding) != 1 || !beast::iequals(coding, "chunked")) {
      ApiError e = BadRequest("Transfer-Encoding \"" + std::string(te->value()) +
                              "\" is not supported: send a body with Content-Length or Transfer-Encoding: chunked");
      e.status = 501;
      return e;
    }
  }
  if (head.version() >= 11 && head.count(http::field::host) != 1) {
    return BadRequest(head.count(http::field::host) == 0 ? "an HTTP/1.1 request needs a Host header"
                                                         : "a request must have one Host header, not several");
  }
  return std::nullopt;
}

// One connection. Its operations run on the connection's strand, one at a time; a
// pending DeferredReply wakes it through a post to that strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl* server)
      : stream_(std::move(socket)),
        server_(server),
        buffer_(ReadBufferLimit(server->options)),
        read_timer_(stream_.get_executor()),
        poll_timer_(stream_.get_executor()) {}

  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadRequest(); });
  }

 private:
  struct WriteItem {
    enum Kind { kWhole, kStreamHead, kChunk, kLastChunk } kind = kWhole;
    std::shared_ptr<http::response<http::string_body>> whole;
    std::shared_ptr<http::response<http::empty_body>> head;
    std::shared_ptr<http::response_serializer<http::empty_body>> head_serializer;
    std::shared_ptr<std::string> data;
    bool ends_reply = false;
  };

  // Starts reading the next request. While a reply is pending, the same read watches
  // the socket: a client that hangs up fails it, which cancels the reply.
  void ReadRequest() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(server_->options.body_limit);
    parser_->header_limit(static_cast<uint32_t>(server_->options.header_limit));
    stream_.expires_never();  // reads are timed by read_timer_, only while idle
    reading_ = true;
    if (!deferred_) ArmReadTimer();
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  // Headers in: a client that sent "Expect: 100-continue" (curl, for large bodies) waits
  // for "100 Continue" before it sends the body. An oversized Content-Length fails here
  // already (body_limit), so such a body is never sent.
  void OnHeader(beast::error_code ec) {
    if (!ec) {
      if (std::optional<ApiError> bad = FramingError(parser_->get())) {
        RefuseFraming(*bad);
        return;
      }
    }
    if (ec || parser_->is_done()) {
      OnRead(ec);
      return;
    }
    const bool expects_continue = beast::iequals(parser_->get()[http::field::expect], "100-continue");
    if (expects_continue && !deferred_ && !writing_) {
      auto res = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
      stream_.expires_after(server_->options.write_timeout);
      http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
        if (ec) {
          self->OnRead(ec);
          return;
        }
        self->ReadBody();
      });
      return;
    }
    ReadBody();
  }

  // The request's framing is refused: its body cannot be told from the next request, so
  // the connection ends after the answer.
  void RefuseFraming(const ApiError& error) {
    reading_ = false;
    read_timer_.cancel();
    if (deferred_) {  // a pipelined request behind a pending reply: end both
      CancelDeferred();
      Close();
      return;
    }
    SendWhole(ErrorReply(error), /*close=*/true);
  }

  void ReadBody() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  // Closes a connection whose client sends nothing (or too slowly) for read_timeout.
  void ArmReadTimer() {
    read_timer_.expires_after(server_->options.read_timeout);
    read_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec && self->reading_ && !self->deferred_) self->Close();
    });
  }

  void OnRead(beast::error_code ec) {
    reading_ = false;
    if (closed_) {  // closing (LingerThenClose): nothing more is answered
      beast::error_code ignored;
      stream_.socket().close(ignored);
      return;
    }
    read_timer_.cancel();
    if (ec) {
      if (deferred_) {  // the client hung up (or broke the protocol) while waiting
        CancelDeferred();
        Close();
        return;
      }
      if (ec == http::error::body_limit) {
        SendWhole(ErrorReply(PayloadTooLarge("the request body is over the " +
                                             std::to_string(server_->options.body_limit) + "-byte limit")),
                  /*close=*/true);
      } else if (ec == http::error::header_limit) {
        ApiError e = BadRequest("the request headers are over the limit");
        e.status = 431;
        SendWhole(ErrorReply(e), /*close=*/true);
      } else if (ec == http::error::buffer_overflow) {
        SendWhole(ErrorReply(BadRequest("a request line, header, chunk size or trailer is over the " +
                                        std::to_string(ReadBufferLimit(server_->options)) + "-byte limit")),
                  /*close=*/true);
      } else if (ec == http::error::end_of_stream || ec == net::error::operation_aborted || ec == net::error::eof ||
                 ec == net::error::connection_reset || ec == net::error::bad_descriptor || closed_) {
        Close();
      } else {
        SendWhole(ErrorReply(BadRequest("malformed HTTP request: " + ec.message())), /*close=*/true);
      }
      return;
    }
    http::request<http::string_body> req = parser_->release();
    if (deferred_ || writing_ || handling_) {
      next_request_ = std::move(req);  // pipelined: answered after the current reply
      return;
    }
    Handle(std::move(req));
  }

  // Requests without a body (/health, /metrics, GETs) are answered here on the io
  // thread; the others on a handler lane, their result delivered back on this strand.
  void Handle(http::request<http::string_body> req) {
    keep_alive_ = req.keep_alive() && !server_->shutting_down;
    HttpRequest request;
    request.method = std::string(req.method_string());
    request.path = PathOf(req.target());
    request.content_type = std::string(req[http::field::content_type]);
    request.authorization = std::string(req[http::field::authorization]);
    request.body = std::move(req.body());
    if (request.body.empty()) {
      Deliver(RunHandler(request));
      return;
    }
    const bool large = request.body.size() >= server_->options.large_body;
    HandlerLane& lane = large ? server_->large_bodies : server_->small_bodies;
    handling_ = true;
    const bool posted = lane.TryPost([self = shared_from_this(), request = std::move(request)]() mutable {
      Outcome outcome = self->RunHandler(request);
      auto executor = self->stream_.get_executor();
      net::post(executor, [self = std::move(self), outcome = std::move(outcome)]() mutable {
        self->handling_ = false;
        self->Deliver(std::move(outcome));
      });
    });
    if (!posted) {
      handling_ = false;
      const std::string what = large ? "bodies of " + std::to_string(server_->options.large_body) + " bytes and more"
                                     : "requests with a body";
      SendWhole(ErrorReply(Unavailable("the server is busy: all " + std::to_string(lane.capacity()) + " places for " +
                                           what + " are taken; retry later",
                                       1)),
                !keep_alive_);
      return;
    }
    CountPending(true);  // shutdown waits for its reply as for a generation's
  }

  struct Outcome {
    Handled handled = HttpReply{};
    bool failed = false;  // the handler threw: the connection closes after the 500
  };

  // Any thread: touches only the server's handler.
  Outcome RunHandler(HttpRequest& request) {
    Outcome outcome;
    try {
      outcome.handled = server_->handler(request);
    } catch (const std::exception& e) {  // a bug, not the client's: answer 500 and keep serving
      outcome.handled = ErrorReply(InternalError(std::string("internal error: ") + e.what()));
      outcome.failed = true;
    }
    return outcome;
  }

  void Deliver(Outcome outcome) {
    if (outcome.failed) keep_alive_ = false;
    if (auto* reply = std::get_if<HttpReply>(&outcome.handled)) {
      if (closed_) {
        CountPending(false);
        return;
      }
      SendWhole(std::move(*reply), !keep_alive_);
      return;
    }
    deferred_ = std::get<std::shared_ptr<DeferredReply>>(std::move(outcome.handled));
    if (closed_) {
      CancelDeferred();
      CountPending(false);
      return;
    }
    CountPending(true);
    // Watch for a hang-up. Started before any write: a read started while a write is
    // pending would inherit that write's timeout, and a long generation is no timeout.
    if (!reading_) ReadRequest();
    std::weak_ptr<Session> weak = weak_from_this();
    auto executor = stream_.get_executor();
    deferred_->Start([weak, executor] {
      auto self = weak.lock();
      if (!self || self->wake_posted_.exchange(true)) return;
      net::post(executor, [self] {
        self->wake_posted_ = false;
        self->Pump();
      });
    });
    ArmPollTimer();
    Pump();
  }

  void ArmPollTimer() {
    poll_timer_.expires_after(server_->options.poll_interval);
    poll_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || !self->deferred_) return;
      self->Pump();
      if (self->deferred_) self->ArmPollTimer();
    });
  }

  // Takes what the pending reply has ready and queues it for writing.
  void Pump() {
    if (!deferred_ || closed_) return;
    DeferredStep step;
    try {
      step = deferred_->Poll();
    } catch (const std::exception& e) {  // a bug, not the client's: end this exchange only
      std::fprintf(stderr, "latte serve: internal error: %s\n", e.what());
      CancelDeferred();
      Close();
      return;
    }
    if (step.reply) {
      FinishDeferred();
      SendWhole(std::move(*step.reply), !keep_alive_);
      return;
    }
    if (step.begin_stream) QueueStreamHead();
    if (!step.data.empty()) {
      WriteItem item;
      item.kind = WriteItem::kChunk;
      item.data = std::make_shared<std::string>(std::move(step.data));
      Queue(std::move(item));
    }
    if (step.end_stream) {
      FinishDeferred();
      WriteItem item;
      item.kind = WriteItem::kLastChunk;
      item.ends_reply = true;
      Queue(std::move(item));
    }
  }

  void FinishDeferred() {
    deferred_.reset();
    poll_timer_.cancel();
  }

  // A deferred reply is pending from its start until its last byte is written (or the
  // connection closes): shutdown waits for exactly that.
  void CountPending(bool pending) {
    if (pending == counted_) return;
    counted_ = pending;
    if (pending) {
      ++server_->pending;
    } else {
      --server_->pending;
    }
  }

  void CancelDeferred() {
    if (!deferred_) return;
    deferred_->Cancel();
    FinishDeferred();
  }

  void SendWhole(HttpReply reply, bool close) {
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(reply.status), 11);
    res->set(http::field::server, "latte");
    res->set(http::field::content_type, reply.content_type);
    for (const auto& [name, value] : reply.headers) res->set(name, value);
    res->keep_alive(!close);
    res->body() = std::move(reply.body);
    res->prepare_payload();
    if (close) keep_alive_ = false;
    WriteItem item;
    item.kind = WriteItem::kWhole;
    item.whole = std::move(res);
    item.ends_reply = true;
    Queue(std::move(item));
  }

  void QueueStreamHead() {
    auto head = std::make_shared<http::response<http::empty_body>>(http::status::ok, 11);
    head->set(http::field::server, "latte");
    head->set(http::field::content_type, "text/event-stream");
    head->set(http::field::cache_control, "no-cache");
    head->keep_alive(keep_alive_);
    head->chunked(true);
    WriteItem item;
    item.kind = WriteItem::kStreamHead;
    item.head_serializer = std::make_shared<http::response_serializer<http::empty_body>>(*head);
    item.head = std::move(head);
    Queue(std::move(item));
  }

  void Queue(WriteItem item) {
    if (closed_) return;
    writes_.push_back(std::move(item));
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    if (writes_.empty() || closed_) {
      writing_ = false;
      return;
    }
    writing_ = true;
    stream_.expires_after(server_->options.write_timeout);
    WriteItem& item = writes_.front();
    auto done = [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); };
    switch (item.kind) {
      case WriteItem::kWhole: http::async_write(stream_, *item.whole, std::move(done)); break;
      case WriteItem::kStreamHead: http::async_write_header(stream_, *item.head_serializer, std::move(done)); break;
      case WriteItem::kChunk:
        net::async_write(stream_, http::make_chunk(net::buffer(*item.data)), std::move(done));
        break;
      case WriteItem::kLastChunk: net::async_write(stream_, http::make_chunk_last(), std::move(done)); break;
    }
  }

  void OnWrite(beast::error_code ec) {
    if (ec || closed_) {  // the client is gone or stopped reading: nobody will see the rest
      writing_ = false;
      writes_.clear();  // only now: the write in flight read from the front item
      CancelDeferred();
      Close();
      return;
    }
    const bool ends_reply = writes_.front().ends_reply;
    writes_.pop_front();
    if (ends_reply && !deferred_) CountPending(false);
    if (!ends_reply || !writes_.empty()) {
      WriteNext();
      return;
    }
    writing_ = false;
    if (!keep_alive_) {
      LingerThenClose();
    } else if (next_request_) {
      auto req = std::move(*next_request_);
      next_request_.reset();
      Handle(std::move(req));
    } else if (reading_) {
      if (!deferred_) ArmReadTimer();  // the watch read goes on as the keep-alive wait
    } else if (!deferred_) {
      ReadRequest();
    }
  }

  // Ends a connection after a reply that said "Connection: close" (e.g. a 413 sent while
  // the client is still uploading): the send side closes at once, and what the client
  // still sends is read and dropped for a moment, because closing a socket with unread
  // data resets the connection and the client could lose the reply.
  void LingerThenClose() {
    if (closed_) return;
    closed_ = true;
    if (!writing_) writes_.clear();  // else OnWrite clears them when the write in flight ends
    poll_timer_.cancel();
    CountPending(false);
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    read_timer_.expires_after(std::chrono::seconds(2));
    read_timer_.async_wait([self = shared_from_this()](beast::error_code) {
      beast::error_code ignored;
      self->stream_.socket().close(ignored);
    });
    if (!reading_) Discard();  // a pending request read drains as well
  }

  void Discard() {
    stream_.socket().async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (!ec) {
        self->Discard();
        return;
      }
      self->read_timer_.cancel();
      beast::error_code ignored;
      self->stream_.socket().close(ignored);
    });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    if (!writing_) writes_.clear();  // else OnWrite clears them when the write in flight ends
    read_timer_.cancel();
    poll_timer_.cancel();
    CountPending(false);
    beast::error_code ignored;
    // Send side first: bytes already written still reach the client before the close.
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  HttpServer::Impl* server_;  // outlives every session (its io_context owns them)
  beast::flat_buffer buffer_;
  std::array<char, 4096> discard_;
  std::optional<http::request_parser<http::string_body>> parser_;
  net::steady_timer read_timer_;
  net::steady_timer poll_timer_;
  std::shared_ptr<DeferredReply> deferred_;
  std::optional<http::request<http::string_body>> next_request_;
  std::deque<WriteItem> writes_;
  std::atomic<bool> wake_posted_{false};
  bool reading_ = false;
  bool writing_ = false;
  bool handling_ = false;  // the request is on a handler lane
  bool keep_alive_ = true;
  bool closed_ = false;
  bool counted_ = false;  // this connection's reply counts in server_->pending
};

// A failed accept that another attempt at once would repeat: the process (EMFILE) or
// the system (ENFILE) has no descriptor left, or the kernel no memory for the socket.
bool OutOfResources(const beast::error_code& ec) {
  return ec == net::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system ||
         ec == net::error::no_buffer_space || ec == net::error::no_memory;
}

// How long accepting pauses while out of descriptors (nginx: 500 ms).
constexpr std::chrono::milliseconds kAcceptPause{500};

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (shutting_down || !acceptor.is_open()) return;
    if (OutOfResources(ec)) {
      if (!out_of_descriptors) {
        std::fprintf(stderr,
                     "latte serve: cannot accept connections (%s): pausing new ones %lld ms at a time until some "
                     "close; open connections are still served\n",
                     ec.message().c_str(), static_cast<long long>(kAcceptPause.count()));
        out_of_descriptors = true;
      }
      accept_timer.expires_after(kAcceptPause);
      accept_timer.async_wait([this](beast::error_code timer_ec) {
        if (!timer_ec) Accept();
      });
      return;
    }
    if (!ec) {
      if (out_of_descriptors) {
        std::fprintf(stderr, "latte serve: accepting connections again\n");
        out_of_descriptors = false;
      }
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);  // SSE chunks are small: send each now
      std::make_shared<Session>(std::move(socket), this)->Start();
    }
    Accept();
  });
}

void HttpServer::Impl::WaitForPendingReplies() {
  if (pending == 0 || std::chrono::steady_clock::now() >= shutdown_deadline) {
    ioc.stop();
    return;
  }
  shutdown_timer.expires_after(std::chrono::milliseconds(20));
  shutdown_timer.async_wait([this](beast::error_code) { WaitForPendingReplies(); });
}

HttpServer::HttpServer(HttpServerOptions options, RequestHandler handler)
    : impl_(std::make_shared<Impl>(std::move(options), std::move(handler))) {}

HttpServer::~HttpServer() = default;

Status HttpServer::Listen() {
  beast::error_code ec;
  const auto address = net::ip::make_address(impl_->options.host, ec);
  if (ec) return Status::InvalidArgument("--host \"" + impl_->options.host + "\" is not an IP address");
  const tcp::endpoint endpoint(address, impl_->options.port);
  const std::string where = impl_->options.host + ":" + std::to_string(impl_->options.port);
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(endpoint, ec);
  if (!ec) impl_->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable("cannot listen on " + where + ": " + ec.message());
  impl_->Accept();
  return Status::Ok();
}

uint16_t HttpServer::port() const {
  beast::error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

void HttpServer::ShutdownOnSignals(std::function<void()> on_signal, std::chrono::milliseconds grace) {
  impl_->signals.add(SIGINT);
  impl_->signals.add(SIGTERM);
  impl_->signals.async_wait([this, on_signal = std::move(on_signal), grace](beast::error_code ec, int) {
    if (ec) return;
    on_signal();
    Shutdown(grace);
  });
}

void HttpServer::Run() {
  std::vector<std::thread> threads;
  for (int i = 1; i < impl_->options.threads; ++i) threads.emplace_back([this] { impl_->ioc.run(); });
  impl_->ioc.run();
  for (auto& t : threads) t.join();
  impl_->small_bodies.Stop();
  impl_->large_bodies.Stop();
}

void HttpServer::Shutdown(std::chrono::milliseconds grace) {
  net::post(impl_->ioc, [impl = impl_.get(), grace] {
    if (impl->shutting_down.exchange(true)) return;
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->accept_timer.cancel();
    impl->signals.cancel(ignored);
    impl->shutdown_deadline = std::chrono::steady_clock::now() + grace;
    impl->WaitForPendingReplies();
  });
}

int64_t HttpServer::pending_replies() const { return impl_->pending; }

}  // namespace latte::server
