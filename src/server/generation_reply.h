// The DeferredReply of a generation: the engine requests of one HTTP request (one per
// prompt, each with n choices), from submission to the last byte. It owns what both
// endpoints share — waking the HTTP session when the engine pushes, the queue limit and
// timeout, aborting the engine requests when the client goes away, the error chunk when
// the engine gives up (shutdown), metrics and the one log line per request — and leaves
// the JSON to a ResponseFormatter (completions or chat).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/api_error.h"
#include "server/http_types.h"
#include "server/metrics.h"

namespace latte::server {

// How one endpoint writes its outputs.
class ResponseFormatter {
 public:
  virtual ~ResponseFormatter() = default;
  // One engine output of prompt `prompt`. Streaming: the SSE events to send now (may be
  // empty). Not streaming: kept for Finish.
  virtual std::string OnOutput(size_t prompt, const GenerationOutput& out) = 0;
  // After every choice finished. Streaming: the last events before StreamEnd (the usage
  // chunk). Not streaming: the whole JSON body.
  virtual std::string Finish() = 0;
  // Streaming: the bytes that close the stream (chat and completions: data: [DONE]),
  // and the event that reports an engine failure midway (sent before StreamEnd).
  virtual std::string StreamEnd();
  virtual std::string StreamError(const ApiError& error);
};

// The server-wide limits and counters a generation takes part in.
struct GenerationLimits {
  Engine* engine = nullptr;
  ServerMetrics* metrics = nullptr;
  // Requests submitted and not yet started (no output yet): --max-queue counts these.
  std::atomic<int64_t>* queued = nullptr;
  std::chrono::milliseconds queue_timeout{0};  // 0: none
};

class GenerationReply : public DeferredReply {
 public:
  // `streams` are already submitted; `queued` was incremented for this reply. `arrival`:
  // when the request's body was in (before parsing); `submitted`: when the engine got it.
  GenerationReply(GenerationLimits limits, std::string id, bool stream, int64_t prompt_tokens,
                  std::vector<std::shared_ptr<RequestStream>> streams, std::unique_ptr<ResponseFormatter> formatter,
                  std::chrono::steady_clock::time_point arrival, std::chrono::steady_clock::time_point submitted);
  ~GenerationReply() override;

  void Start(std::function<void()> wake) override;
  DeferredStep Poll() override;
  void Cancel() override;

 private:
  void Take(size_t prompt, GenerationOutput& out);
  void MarkStarted();
  void AbortAll();
  void Finish(const std::string& finish);
  DeferredStep ErrorStep(const std::string& message);

  GenerationLimits limits_;
  const std::string id_;
  const bool stream_;
  const int64_t prompt_tokens_;
  std::vector<std::shared_ptr<RequestStream>> streams_;
  std::unique_ptr<ResponseFormatter> formatter_;
  const std::chrono::steady_clock::time_point arrival_;
  const std::chrono::steady_clock::time_point submitted_;

  bool started_ = false;       // some output arrived (the request left the queue)
  bool headers_sent_ = false;  // streaming: the 200 and the event-stream headers are out
  bool finished_ = false;      // the reply ended (or was cancelled)
  std::string error_;          // the engine gave up on a choice (shutdown, internal error)
  int64_t output_tokens_ = 0;
  std::vector<std::string> finish_reasons_;
  std::optional<std::chrono::steady_clock::time_point> first_token_;
  std::map<std::pair<size_t, int>, std::chrono::steady_clock::time_point> last_token_;  // per (prompt, choice)
  std::vector<double> gaps_;
};

}  // namespace latte::server
