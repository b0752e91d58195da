#include "client/serve_benchmark.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/splitmix64.h"
#include "client/openai_client.h"
#include "client/sse_reader.h"

namespace latte {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A uniform double in [0, 1) from the top 53 bits.
double Uniform(SplitMix64& rng) { return static_cast<double>(rng.Next() >> 11) * 0x1.0p-53; }

// Send times from the run's start: Poisson arrivals at `rate` per second (exponential
// gaps, vLLM's default burstiness 1); all at 0 when the rate is infinite.
std::vector<double> ArrivalTimes(const ServeBenchOptions& options) {
  std::vector<double> times(static_cast<size_t>(options.num_prompts), 0.0);
  if (!std::isfinite(options.request_rate)) return times;
  SplitMix64 rng(options.seed ^ 0x5eedu);
  double t = 0;
  for (double& time : times) {
    time = t;
    t += -std::log1p(-Uniform(rng)) / options.request_rate;
  }
  return times;
}

// What one streamed reply amounts to, filled as its bytes arrive.
class StreamTally {
 public:
  StreamTally(Clock::time_point sent, RequestRecord& record) : sent_(sent), record_(record) {}

  void OnStatus(int status) { status_ = status; }

  void OnBytes(std::string_view bytes) {
    if (status_ != 200) {
      constexpr size_t kKept = 4096;  // of an error body: its message
      if (error_body_.size() < kKept) error_body_.append(bytes.substr(0, kKept - error_body_.size()));
      return;
    }
    const Clock::time_point now = Clock::now();
    events_.clear();
    reader_.Feed(bytes, events_);
    for (const std::string& event : events_) OnEvent(event, now);
  }

  // Closes the record once the reply has ended (`transfer`: how the transfer went).
  void Finish(const Status& transfer) {
    const Clock::time_point end = Clock::now();
    if (status_ == 200 && transfer.ok()) {
      events_.clear();
      if (reader_.Finish(events_)) {
        for (const std::string& event : events_) OnEvent(event, end);
      }
    }
    if (!transfer.ok()) {
      Fail(transfer.message());
    } else if (status_ != 200) {
      Fail(HttpErrorText({status_, error_body_}));
    } else if (error_.empty() && !done_) {
      Fail("the stream ended without data: [DONE]");
    } else if (error_.empty() && !first_.has_value()) {
      Fail("the stream carried no completion text");
    }
    if (!error_.empty()) {
      record_.ok = false;
      record_.error = error_;
      record_.itl_s.clear();
      return;
    }
    record_.ok = true;
    record_.ttft_s = Seconds(*first_ - sent_);
    record_.e2e_s = Seconds(end - sent_);
    if (!record_.counted_by_usage) record_.output_tokens = choice_events_;
    if (record_.output_tokens > 1) {
      record_.tpot_s = (record_.e2e_s - record_.ttft_s) / static_cast<double>(record_.output_tokens - 1);
    }
  }

 private:
  void Fail(const std::string& error) {
    if (error_.empty()) error_ = error;
  }

  void OnEvent(const std::string& data, Clock::time_point now) {
    if (!error_.empty()) return;
    if (data == "[DONE]") {
      done_ = true;
      return;
    }
    const nlohmann::json chunk = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (!chunk.is_object()) return Fail("an event that is not a JSON object: " + data.substr(0, 200));
    if (chunk.contains("error")) return Fail("error event: " + ErrorMessage(data));
    const auto choices = chunk.find("choices");
    if (choices != chunk.end() && choices->is_array() && !choices->empty()) {
      if (first_.has_value()) {
        record_.itl_s.push_back(Seconds(now - last_));
      } else {
        first_ = now;
      }
      last_ = now;
      ++choice_events_;
    }
    const auto usage = chunk.find("usage");
    if (usage != chunk.end() && usage->is_object()) {
      const auto completion = usage->find("completion_tokens");
      const auto prompt = usage->find("prompt_tokens");
      if (completion != usage->end() && completion->is_number_integer()) {
        record_.output_tokens = completion->get<int64_t>();
        record_.counted_by_usage = true;
      }
      if (prompt != usage->end() && prompt->is_number_integer()) record_.prompt_tokens = prompt->get<int64_t>();
    }
  }

  const Clock::time_point sent_;
  RequestRecord& record_;
  int status_ = 0;
  std::string error_body_;
  SseReader reader_;
  std::vector<std::string> events_;
  std::optional<Clock::time_point> first_;
  Clock::time_point last_;
  int64_t choice_events_ = 0;
  bool done_ = false;
  std::string error_;
};

std::string RequestBody(const ServeBenchOptions& options, int64_t index) {
  nlohmann::json body = {{"model", options.model},
                         {"prompt", BenchPrompt(options, index)},
                         {"max_tokens", options.output_len},
                         {"temperature", 0.0},
                         {"ignore_eos", true},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
  if (!options.response_format.is_null()) body["response_format"] = options.response_format;
  return body.dump();
}

void RunOne(const ServeBenchOptions& options, int64_t index, Clock::time_point run_start, RequestRecord& record) {
  const std::string body = RequestBody(options, index);
  record.index = index;
  const Clock::time_point sent = Clock::now();
  record.start_s = Seconds(sent - run_start);
  StreamTally tally(sent, record);
  const Status transfer = HttpPostStreaming(
      options.base, "/v1/completions", body, options.http, [&](int status) { tally.OnStatus(status); },
      [&](std::string_view bytes) { tally.OnBytes(bytes); });
  tally.Finish(transfer);
}

// Lowercase words of 2 to 8 letters: ordinary text every tokenizer splits into
// ordinary tokens.
std::string RandomWords(uint64_t seed, int words) {
  SplitMix64 rng(seed);
  std::string text;
  for (int w = 0; w < words; ++w) {
    if (w > 0) text += ' ';
    const int letters = 2 + static_cast<int>(rng.Next() % 7);
    for (int i = 0; i < letters; ++i) text += static_cast<char>('a' + rng.Next() % 26);
  }
  return text;
}

}  // namespace

LatencyStats SummarizeLatency(std::vector<double> seconds) {
  LatencyStats s;
  if (seconds.empty()) {
    s.mean_ms = s.median_ms = s.p99_ms = std::nan("");
    return s;
  }
  std::sort(seconds.begin(), seconds.end());
  // numpy.percentile's default ("linear"): rank q/100 · (n - 1), interpolated.
  auto percentile = [&](double q) {
    const double rank = q / 100.0 * static_cast<double>(seconds.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(rank));
    const size_t hi = std::min(lo + 1, seconds.size() - 1);
    return seconds[lo] + (seconds[hi] - seconds[lo]) * (rank - static_cast<double>(lo));
  };
  s.mean_ms = 1000.0 * std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(seconds.size());
  s.median_ms = 1000.0 * percentile(50);
  s.p99_ms = 1000.0 * percentile(99);
  return s;
}

Result<std::vector<int64_t>> PromptTokenPool(const BaseUrl& base, const HttpRequestOptions& http,
                                             const std::string& model, uint64_t seed) {
  // 2,000 words: ~14 KB of text; a byte-level BPE of any size splits it into several
  // hundred distinct tokens.
  LATTE_ASSIGN_OR_RETURN(const std::vector<int64_t> ids, TokenizeText(base, http, model, RandomWords(seed, 2000)));
  const std::set<int64_t> distinct(ids.begin(), ids.end());
  constexpr size_t kMinPool = 16;  // fewer: the prompts would repeat themselves
  if (distinct.size() < kMinPool) {
    return Status::InvalidArgument(base.text + "/tokenize split 2,000 random words into only " +
                                   std::to_string(distinct.size()) + " distinct tokens");
  }
  return std::vector<int64_t>(distinct.begin(), distinct.end());
}

std::vector<int64_t> BenchPrompt(const ServeBenchOptions& options, int64_t index) {
  // The same stream per (seed, index) as `latte bench engine`'s prompts.
  SplitMix64 rng(options.seed * 1000003 + static_cast<uint64_t>(index));
  std::vector<int64_t> prompt(static_cast<size_t>(options.input_len));
  const uint64_t n = options.token_pool.size();
  for (int64_t& id : prompt) id = options.token_pool[rng.Next() % n];
  return prompt;
}

Result<ServeBenchResult> RunServeBenchmark(const ServeBenchOptions& options) {
  if (options.num_prompts < 1) return Status::InvalidArgument("num_prompts must be at least 1");
  if (options.input_len < 1 || options.output_len < 1)
    return Status::InvalidArgument("input_len and output_len must be >= 1");
  if (options.token_pool.empty()) return Status::InvalidArgument("no token ids to draw prompts from");
  if (!(options.request_rate > 0)) return Status::InvalidArgument("request_rate must be > 0");
  const std::vector<double> arrivals = ArrivalTimes(options);
  ServeBenchResult result;
  result.requests.resize(static_cast<size_t>(options.num_prompts));
  // One thread per request in flight: each blocks on its own connection, so a thread
  // costs no CPU while it waits for the server.
  const int64_t limit = options.max_concurrency > 0 ? options.max_concurrency : kMaxClientThreads;
  const int64_t workers = std::min({limit, options.num_prompts, kMaxClientThreads});
  std::atomic<int64_t> next{0};
  std::mutex progress_mu;
  int64_t finished = 0, failed = 0;
  const Clock::time_point start = Clock::now();
  auto work = [&] {
    for (int64_t i; (i = next.fetch_add(1)) < options.num_prompts;) {
      std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(arrivals[static_cast<size_t>(i)])));
      RequestRecord& record = result.requests[static_cast<size_t>(i)];
      record.scheduled_s = arrivals[static_cast<size_t>(i)];
      RunOne(options, i, start, record);
      std::lock_guard<std::mutex> lock(progress_mu);
      ++finished;
      failed += record.ok ? 0 : 1;
      if (options.on_progress) options.on_progress(finished, failed, options.num_prompts);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(workers));
  for (int64_t w = 0; w < workers; ++w) threads.emplace_back(work);
  for (std::thread& t : threads) t.join();

  result.duration_s = Seconds(Clock::now() - start);  // as vLLM: start to the last reply's end
  std::vector<double> ttft, tpot, itl, e2el;
  for (const RequestRecord& r : result.requests) {
    if (!r.ok) {
      ++result.failed;
      continue;
    }
    ++result.completed;
    result.total_input_tokens += r.prompt_tokens >= 0 ? r.prompt_tokens : options.input_len;
    result.total_output_tokens += r.output_tokens;
    if (r.prompt_tokens >= 0 && r.prompt_tokens != options.input_len) ++result.prompt_token_mismatches;
    if (r.output_tokens != options.output_len) ++result.output_token_mismatches;
    ttft.push_back(r.ttft_s);
    e2el.push_back(r.e2e_s);
    if (r.output_tokens > 1) tpot.push_back(r.tpot_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
  }
  if (result.duration_s > 0) {
    result.request_throughput = static_cast<double>(result.completed) / result.duration_s;
    result.output_throughput = static_cast<double>(result.total_output_tokens) / result.duration_s;
    result.total_token_throughput =
        static_cast<double>(result.total_input_tokens + result.total_output_tokens) / result.duration_s;
  }
  result.ttft = SummarizeLatency(std::move(ttft));
  result.tpot = SummarizeLatency(std::move(tpot));
  result.itl = SummarizeLatency(std::move(itl));
  result.e2el = SummarizeLatency(std::move(e2el));
  return result;
}

}  // namespace latte
