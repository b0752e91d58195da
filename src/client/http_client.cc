#include "client/http_client.h"

#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/version.hpp>

namespace latte {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// One request on one connection. Every network step is an asynchronous operation with
// a deadline (beast::tcp_stream's timer), run to completion on a private io_context:
// blocking calls, each bounded by the timeout (Asio's synchronous calls have none).
class Exchange {
 public:
  Exchange(const BaseUrl& base, const HttpRequestOptions& options) : base_(base), options_(options), stream_(ioc_) {}

  ~Exchange() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

  Status Send(http::verb verb, const std::string& path, const std::string& json_body) {
    beast::error_code ec;
    tcp::resolver resolver(ioc_);
    const auto endpoints = resolver.resolve(base_.host, base_.port, ec);
    if (ec) return Failure("resolving " + base_.host, ec);
    stream_.expires_after(options_.timeout);
    ec = Await([&](auto handler) { stream_.async_connect(endpoints, std::move(handler)); });
    if (ec) return Failure("connect", ec);

    http::request<http::string_body> request{verb, path, 11};
    request.set(http::field::host, base_.host + ":" + base_.port);
    request.set(http::field::user_agent, "latte");
    request.set(http::field::connection, "close");
    if (!options_.api_key.empty()) request.set(http::field::authorization, "Bearer " + options_.api_key);
    if (verb == http::verb::post) {
      request.set(http::field::content_type, "application/json");
      request.body() = json_body;
    }
    request.prepare_payload();
    stream_.expires_after(options_.timeout);
    ec = Await([&](auto handler) { http::async_write(stream_, request, std::move(handler)); });
    if (ec) return Failure("sending " + path, ec);
    return Status::Ok();
  }

  template <class Parser> Status ReadHeader(Parser& parser) {
    stream_.expires_after(options_.timeout);
    const beast::error_code ec =
        Await([&](auto handler) { http::async_read_header(stream_, buffer_, parser, std::move(handler)); });
    return ec ? Failure("reading the reply's header", ec) : Status::Ok();
  }

  template <class Parser> Status ReadAll(Parser& parser) {
    stream_.expires_after(options_.timeout);
    const beast::error_code ec =
        Await([&](auto handler) { http::async_read(stream_, buffer_, parser, std::move(handler)); });
    return ec ? Failure("reading the reply", ec) : Status::Ok();
  }

  // Reads what the socket has (at least one byte) into the parser's buffer body.
  Status ReadSome(http::response_parser<http::buffer_body>& parser) {
    stream_.expires_after(options_.timeout);
    beast::error_code ec =
        Await([&](auto handler) { http::async_read_some(stream_, buffer_, parser, std::move(handler)); });
    if (ec == http::error::need_buffer) ec = {};  // the body buffer is full: not an error
    return ec ? Failure("reading the reply's body", ec) : Status::Ok();
  }

 private:
  // Starts one asynchronous operation and runs the io_context until it completes.
  template <class Start> beast::error_code Await(Start start) {
    beast::error_code result = asio::error::would_block;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    ioc_.restart();
    ioc_.run();
    return result;
  }

  Status Failure(const std::string& what, const beast::error_code& ec) const {
    return Status::InvalidArgument(base_.text + ": " + what + ": " + ec.message());
  }

  const BaseUrl& base_;
  const HttpRequestOptions& options_;
  asio::io_context ioc_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

// A reply of any size the tools read whole: a model list, a token list, a completion.
constexpr uint64_t kMaxReplyBytes = uint64_t{256} << 20;

Result<HttpResponse> Whole(const BaseUrl& base, http::verb verb, const std::string& path, const std::string& body,
                           const HttpRequestOptions& options) {
  Exchange exchange(base, options);
  LATTE_RETURN_IF_ERROR(exchange.Send(verb, path, body));
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxReplyBytes);
  LATTE_RETURN_IF_ERROR(exchange.ReadAll(parser));
  HttpResponse response;
  response.status = parser.get().result_int();
  response.body = std::move(parser.get().body());
  return response;
}

}  // namespace

Result<BaseUrl> ParseBaseUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return Status::Unimplemented("the base URL must start with http:// (https is not supported), got \"" +
                                 std::string(url) + "\"");
  }
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  const std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  rest = rest.substr(0, slash);
  if (path != "" && path != "/" && path != "/v1" && path != "/v1/") {
    return Status::InvalidArgument("the base URL is the server's root (http://HOST:PORT, optionally with /v1), got \"" +
                                   std::string(url) + "\"");
  }
  BaseUrl base;
  const size_t colon = rest.rfind(':');
  const bool bracketed = !rest.empty() && rest.back() == ']';  // [::1] without a port
  if (colon != std::string_view::npos && !bracketed) {
    base.host = std::string(rest.substr(0, colon));
    base.port = std::string(rest.substr(colon + 1));
  } else {
    base.host = std::string(rest);
    base.port = "80";
  }
  if (base.host.size() >= 2 && base.host.front() == '[' && base.host.back() == ']') {
    base.host = base.host.substr(1, base.host.size() - 2);
  }
  if (base.host.empty()) return Status::InvalidArgument("the base URL names no host: \"" + std::string(url) + "\"");
  const bool digits =
      !base.port.empty() && base.port.size() <= 5 && base.port.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoi(base.port) > 65535) {
    return Status::InvalidArgument("the base URL's port must be a number in [0, 65535], got \"" + base.port + "\"");
  }
  base.text = "http://" + std::string(rest);
  return base;
}

Result<HttpResponse> HttpGet(const BaseUrl& base, const std::string& path, const HttpRequestOptions& options) {
  return Whole(base, http::verb::get, path, "", options);
}

Result<HttpResponse> HttpPostJson(const BaseUrl& base, const std::string& path, const std::string& json_body,
                                  const HttpRequestOptions& options) {
  return Whole(base, http::verb::post, path, json_body, options);
}

Status HttpPostStreaming(const BaseUrl& base, const std::string& path, const std::string& json_body,
                         const HttpRequestOptions& options, const std::function<void(int status)>& on_status,
                         const std::function<void(std::string_view bytes)>& on_bytes) {
  Exchange exchange(base, options);
  LATTE_RETURN_IF_ERROR(exchange.Send(http::verb::post, path, json_body));
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);  // a stream is as long as the server makes it
  LATTE_RETURN_IF_ERROR(exchange.ReadHeader(parser));
  on_status(parser.get().result_int());
  // 16 KiB: a read returns what the socket holds, usually one or a few events.
  char chunk[16384];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    LATTE_RETURN_IF_ERROR(exchange.ReadSome(parser));
    const size_t got = sizeof chunk - parser.get().body().size;
    if (got > 0) on_bytes(std::string_view(chunk, got));
  }
  return Status::Ok();
}

}  // namespace latte
