// HttpServer's handler lanes with a handler that blocks on purpose: a lane admits its
// threads plus max_waiting requests with a body and answers the next with a 503 at
// once, the other lane and requests without a body are still served, and a lane
// admits again once a request has left it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "client/http_client.h"
#include "server/http_server.h"

namespace latte::server {
namespace {

constexpr size_t kLargeBody = 64;  // bytes: bodies of at least this go to the large lane

TEST(HttpServer, AFullLaneAnswers503WhileTheOtherLaneAndGetsAreServed) {
  HttpServerOptions options;
  options.port = 0;
  options.handler_threads = 1;
  options.max_waiting = 0;
  options.large_body = kLargeBody;
  options.max_waiting_large = 0;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> large_entered{0};
  HttpServer server(options, [&](HttpRequest& r) -> Handled {
    if (r.body.size() >= kLargeBody) {  // a large body holds its lane until released
      ++large_entered;
      released.wait();
    }
    return HttpReply{200, "application/json", "{\"bytes\":" + std::to_string(r.body.size()) + "}", {}};
  });
  ASSERT_TRUE(server.Listen().ok());
  std::thread io([&server] { server.Run(); });
  const BaseUrl base = ParseBaseUrl("http://127.0.0.1:" + std::to_string(server.port())).value();
  HttpRequestOptions client;
  client.timeout = std::chrono::seconds(30);
  const std::string large(kLargeBody + 10, 'x'), small = "{}";

  auto first = std::async(std::launch::async, [&] { return HttpPostJson(base, "/p", large, client); });
  while (large_entered == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  const auto refused = HttpPostJson(base, "/p", large, client);  // the large lane is full
  ASSERT_TRUE(refused.ok()) << refused.status().message();
  EXPECT_EQ(refused.value().status, 503);
  EXPECT_NE(refused.value().body.find("the server is busy"), std::string::npos) << refused.value().body;
  EXPECT_NE(refused.value().body.find("all 1 places for bodies of 64 bytes and more are taken"), std::string::npos)
      << refused.value().body;

  const auto small_reply = HttpPostJson(base, "/p", small, client);  // the small lane is free
  ASSERT_TRUE(small_reply.ok()) << small_reply.status().message();
  EXPECT_EQ(small_reply.value().status, 200);
  EXPECT_EQ(small_reply.value().body, "{\"bytes\":2}");
  const auto get = HttpGet(base, "/health", client);  // no body: answered on an io thread
  ASSERT_TRUE(get.ok()) << get.status().message();
  EXPECT_EQ(get.value().status, 200);

  release.set_value();
  const auto first_reply = first.get();
  ASSERT_TRUE(first_reply.ok()) << first_reply.status().message();
  EXPECT_EQ(first_reply.value().status, 200);
  EXPECT_EQ(first_reply.value().body, "{\"bytes\":" + std::to_string(large.size()) + "}");
  const auto again = HttpPostJson(base, "/p", large, client);  // admitted again
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again.value().status, 200);
  EXPECT_EQ(large_entered, 2);

  server.Shutdown(std::chrono::seconds(1));
  io.join();
}

}  // namespace
}  // namespace latte::server
