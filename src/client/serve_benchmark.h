// `latte bench serve`: the online serving benchmark, as vLLM's `bench serve`
// (benchmarks/benchmark_serving.py) measures it, against any OpenAI-compatible server.
// N streaming /v1/completions requests, each a prompt of exactly I random token ids
// asking for exactly O tokens (ignore_eos, temperature 0, as vLLM's random dataset and
// its completions client send them), started at a request rate (Poisson arrivals;
// infinite: all at once) with at most C in flight. Per request, from the client's side:
//   TTFT  send -> the first event with a choice;
//   ITL   the gaps between successive events with a choice (one per token on vLLM,
//         llama.cpp and latte, except where a token has no text yet);
//   TPOT  (E2E - TTFT) / (output tokens - 1);
//   E2E   send -> the end of the stream.
// Output tokens are the server's count (usage.completion_tokens, asked for with
// stream_options.include_usage), else the events with a choice. Throughputs are over
// the run's wall time, first send to last finish. A request that fails (no connection,
// an HTTP error, an error event, a stream without [DONE]) is counted and its error kept.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "client/http_client.h"

namespace latte {

// Requests in flight at most, whatever max_concurrency says: each is a thread blocked on
// its connection (and far more than a CPU server runs at once).
inline constexpr int64_t kMaxClientThreads = 1024;

struct ServeBenchOptions {
  BaseUrl base;
  HttpRequestOptions http;
  std::string model;  // "model" in every request
  int64_t num_prompts = 64;
  int64_t input_len = 128;
  int64_t output_len = 128;
  int64_t max_concurrency = 0;                                    // 0: no limit (but kMaxClientThreads)
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s
  uint64_t seed = 0;                                              // prompts and arrival times
  // Sent as every request's response_format when not null ({"type": "json_object"},
  // {"type": "json_schema", ...}): a constrained output may end before output_len.
  nlohmann::json response_format;
  // Prompt ids are drawn uniformly from these (PromptTokenPool).
  std::vector<int64_t> token_pool;
  // Called after each request finishes (from the thread that ran it; serialized).
  std::function<void(int64_t finished, int64_t failed, int64_t total)> on_progress;
};

struct RequestRecord {
  int64_t index = 0;
  bool ok = false;
  std::string error;           // when !ok
  double scheduled_s = 0;      // its arrival time in the request-rate schedule, from the run's start
  double start_s = 0;          // send time (>= scheduled_s: a client must also be free)
  double ttft_s = 0;           // ok only
  double e2e_s = 0;            // ok only
  double tpot_s = 0;           // ok and output_tokens > 1
  std::vector<double> itl_s;   // ok only: gaps between events with a choice
  int64_t prompt_tokens = -1;  // usage.prompt_tokens; -1 when the server sent no usage
  int64_t output_tokens = 0;   // usage.completion_tokens, else events with a choice
  bool counted_by_usage = false;
};

// mean, median and p99 (numpy's linear interpolation) of one latency, in ms; NaN when
// no request measured it.
struct LatencyStats {
  double mean_ms = 0;
  double median_ms = 0;
  double p99_ms = 0;
};
LatencyStats SummarizeLatency(std::vector<double> seconds);

struct ServeBenchResult {
  std::vector<RequestRecord> requests;  // in index order
  int64_t completed = 0;
  int64_t failed = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0;  // of completed requests: the server's counts where it sent them, else input_len
  int64_t total_output_tokens = 0;
  double request_throughput = 0;  // completed / duration
  double output_throughput = 0;   // output tokens / duration
  double total_token_throughput = 0;
  LatencyStats ttft, tpot, itl, e2el;
  int64_t prompt_token_mismatches = 0;  // completed requests whose usage.prompt_tokens != input_len
  int64_t output_token_mismatches = 0;  // completed requests with output_tokens != output_len
};

// Ids to draw random prompts from: the distinct ids of a random text of lowercase words
// as the server's /tokenize splits it (ordinary tokens, no special ones). Error when the
// server has no usable /tokenize.
Result<std::vector<int64_t>> PromptTokenPool(const BaseUrl& base, const HttpRequestOptions& http,
                                             const std::string& model, uint64_t seed);

// The prompt of request `index`: input_len ids from the pool, seeded by (seed, index).
std::vector<int64_t> BenchPrompt(const ServeBenchOptions& options, int64_t index);

// Runs the requests; errors only for bad options (failed requests are in the result).
Result<ServeBenchResult> RunServeBenchmark(const ServeBenchOptions& options);

}  // namespace latte
