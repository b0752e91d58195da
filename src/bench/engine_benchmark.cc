#include "bench/engine_benchmark.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/splitmix64.h"

namespace latte {
namespace {

using Clock = std::chrono::steady_clock;

GenerationRequest MakeRequest(const EngineBenchOptions& options, int64_t vocab, int64_t index) {
  GenerationRequest r;
  SplitMix64 rng(options.seed * 1000003 + static_cast<uint64_t>(index));
  r.prompt.resize(static_cast<size_t>(options.input_len));
  for (int32_t& id : r.prompt) id = static_cast<int32_t>(rng.Next() % static_cast<uint64_t>(vocab));
  r.max_tokens = options.output_len;
  r.ignore_eos = true;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = options.seed + static_cast<uint64_t>(index);
  return r;
}

// Wakes the submitting thread when a request has finished, not at every token: an
// offline benchmark has no client to feed per token (vLLM's `bench throughput` runs
// in the engine's own loop), and on a 2-core machine a thread woken 16 times per
// step takes a core from the forward pass's OpenMP workers.
struct Wakeup {
  std::mutex mu;
  std::condition_variable cv;
  int64_t finishes = 0;

  void Notify() {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++finishes;
    }
    cv.notify_one();
  }
};

}  // namespace

Result<EngineBenchResult> RunEngineBenchmark(Engine& engine, int64_t vocab, const EngineBenchOptions& options) {
  if (options.num_prompts < 1) return Status::InvalidArgument("--num-prompts must be at least 1");
  if (options.input_len < 1) return Status::InvalidArgument("--input-len must be at least 1");
  if (options.output_len < 1) return Status::InvalidArgument("--output-len must be at least 1");
  if (options.max_concurrency < 0) return Status::InvalidArgument("--max-concurrency must be 0 (all) or more");
  const int64_t concurrency = options.max_concurrency == 0 ? options.num_prompts : options.max_concurrency;
  const EngineStats before = engine.Stats();

  auto wakeup = std::make_shared<Wakeup>();
  std::vector<std::shared_ptr<RequestStream>> in_flight;
  EngineBenchResult result;
  int64_t submitted = 0;
  const Clock::time_point start = Clock::now();
  while (submitted < options.num_prompts || !in_flight.empty()) {
    while (submitted < options.num_prompts && static_cast<int64_t>(in_flight.size()) < concurrency) {
      LATTE_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream,
                             engine.Submit(MakeRequest(options, vocab, submitted)));
      // A push before set_notify is a missed wake-up: the wait below has a timeout.
      stream->set_notify([wakeup, raw = stream.get()] {
        if (raw->finished()) wakeup->Notify();
      });
      in_flight.push_back(std::move(stream));
      ++submitted;
      result.input_tokens += options.input_len;
    }
    int64_t seen = 0;
    {
      std::unique_lock<std::mutex> lock(wakeup->mu);
      seen = wakeup->finishes;
    }
    bool progressed = false;
    for (auto it = in_flight.begin(); it != in_flight.end();) {
      while (auto out = (*it)->Next(Clock::now())) {
        progressed = true;
        result.output_tokens += static_cast<int64_t>(out->tokens.size());
        if (out->finish && *out->finish == FinishReason::kAbort) {
          return Status::InvalidArgument("request " + std::to_string((*it)->id()) + " aborted: " + out->error);
        }
      }
      it = (*it)->done() ? in_flight.erase(it) : it + 1;
    }
    if (!progressed && !in_flight.empty()) {
      std::unique_lock<std::mutex> lock(wakeup->mu);
      wakeup->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return wakeup->finishes != seen; });
    }
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.requests = options.num_prompts;

  // The engine publishes its counters after each step; the last step's may trail
  // the last output by a moment.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
  EngineStats after = engine.Stats();
  while (after.requests_finished - before.requests_finished < options.num_prompts && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    after = engine.Stats();
  }
  // The counters this run added (an engine may have run other requests before, as
  // bench engine's --warmup-prompts does).
  result.stats = after;
  result.stats.steps -= before.steps;
  result.stats.preemptions -= before.preemptions;
  result.stats.prefix_hits -= before.prefix_hits;
  result.stats.prefix_queries -= before.prefix_queries;
  result.stats.spec_drafts -= before.spec_drafts;
  result.stats.spec_draft_tokens -= before.spec_draft_tokens;
  result.stats.spec_accepted_tokens -= before.spec_accepted_tokens;
  for (size_t p = 0; p < before.spec_accepted_per_position.size(); ++p) {
    result.stats.spec_accepted_per_position[p] -= before.spec_accepted_per_position[p];
  }
  result.step_seconds = after.step_seconds - before.step_seconds;
  result.model_seconds = after.model_seconds - before.model_seconds;
  result.overhead_share = result.step_seconds > 0 ? 1.0 - result.model_seconds / result.step_seconds : 0;
  result.requests_per_s = result.requests / result.seconds;
  result.output_tok_s = result.output_tokens / result.seconds;
  result.total_tok_s = (result.input_tokens + result.output_tokens) / result.seconds;
  return result;
}

}  // namespace latte
