// The OpenAI-compatible API over one engine: routes each HTTP request to its endpoint,
// checks the API key, the Content-Type and the body, and answers with a whole reply or
// a GenerationReply. Endpoints (vLLM's shapes):
//   POST /v1/completions, POST /v1/chat/completions, GET /v1/models,
//   GET /health, GET /metrics, GET /version, POST /tokenize, POST /detokenize.
// Only /v1/ paths need the API key, as in vLLM.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/http_types.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"

namespace latte::server {

struct ApiOptions {
  std::string api_key;                         // empty: no key needed
  int64_t max_queue = 256;                     // requests waiting to start; more get 503
  std::chrono::milliseconds queue_timeout{0};  // 0: wait as long as it takes
};

// The version /version reports.
inline constexpr char kLatteVersion[] = "0.1.0";

class ApiServer {
 public:
  // `engine` and what `model` points to must outlive the server.
  ApiServer(Engine& engine, ServedModel model, std::string mla_mode, ApiOptions options);

  Handled Handle(HttpRequest& request);
  // After this, /health answers 503 and generations are refused.
  void SetShuttingDown() { shutting_down_ = true; }
  const ServedModel& model() const { return model_; }

 private:
  Handled Completions(const nlohmann::ordered_json& body);
  Handled ChatCompletions(const nlohmann::ordered_json& body);
  Handled Responses(const nlohmann::ordered_json& body);
  HttpReply Models() const;
  HttpReply Tokenize(const nlohmann::ordered_json& body) const;
  HttpReply Detokenize(const nlohmann::ordered_json& body) const;
  // Admission (queue limit) and submission of every prompt; on failure nothing stays queued.
  Handled Submit(std::vector<GenerationRequest> requests, std::string id, bool stream, int64_t prompt_tokens,
                 std::unique_ptr<class ResponseFormatter> formatter, std::chrono::steady_clock::time_point arrival);

  Engine& engine_;
  ServedModel model_;
  ApiOptions options_;
  ServerMetrics metrics_;
  std::atomic<int64_t> queued_{0};
  std::atomic<bool> shutting_down_{false};
};

}  // namespace latte::server
