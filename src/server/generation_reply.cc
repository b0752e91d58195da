#include "server/generation_reply.h"

#include <cstdio>

#include "server/api_error.h"
#include "server/openai_protocol.h"

namespace latte::server {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

std::string ResponseFormatter::StreamEnd() { return kSseDone; }

std::string ResponseFormatter::StreamError(const ApiError& error) { return SseEvent(error.ToJson()); }

GenerationReply::GenerationReply(GenerationLimits limits, std::string id, bool stream, int64_t prompt_tokens,
                                 std::vector<std::shared_ptr<RequestStream>> streams,
                                 std::unique_ptr<ResponseFormatter> formatter, Clock::time_point arrival,
                                 Clock::time_point submitted)
    : limits_(limits),
      id_(std::move(id)),
      stream_(stream),
      prompt_tokens_(prompt_tokens),
      streams_(std::move(streams)),
      formatter_(std::move(formatter)),
      arrival_(arrival),
      submitted_(submitted) {}

GenerationReply::~GenerationReply() {
  // A reply dropped unfinished (its connection torn down) must not keep the engine busy.
  if (!finished_) Cancel();
}

void GenerationReply::Start(std::function<void()> wake) {
  for (auto& s : streams_) s->set_notify(wake);
  // Outputs pushed before the notify was set would otherwise wait for the next push.
  wake();
}

void GenerationReply::MarkStarted() {
  if (started_) return;
  started_ = true;
  --*limits_.queued;
}

void GenerationReply::AbortAll() {
  for (auto& s : streams_) limits_.engine->Abort(s->id());
}

void GenerationReply::Cancel() {
  if (finished_) return;
  AbortAll();
  Finish("cancelled");
}

void GenerationReply::Take(size_t prompt, GenerationOutput& out) {
  MarkStarted();
  const std::pair<size_t, int> slot{prompt, out.index};
  if (!out.tokens.empty()) {
    if (!first_token_) first_token_ = out.time;
    auto [it, first] = last_token_.try_emplace(slot, out.time);
    if (!first) gaps_.push_back(Seconds(out.time - it->second));
    it->second = out.time;
    output_tokens_ += static_cast<int64_t>(out.tokens.size());
  }
  if (out.finish) {
    // Only the engine aborts a request this reply has not cancelled: shutdown or a failed step.
    if (*out.finish == FinishReason::kAbort) error_ = out.error.empty() ? "the request was aborted" : out.error;
    finish_reasons_.emplace_back(FinishReasonName(*out.finish));
  }
}

DeferredStep GenerationReply::Poll() {
  DeferredStep step;
  if (finished_) return step;
  std::string events;
  bool all_done = true;
  const Clock::time_point now = Clock::now();
  for (size_t p = 0; p < streams_.size(); ++p) {
    while (auto out = streams_[p]->Next(now)) {
      Take(p, *out);
      // "abort" is no OpenAI finish reason: an aborted choice ends the reply with an error.
      if (out->finish == FinishReason::kAbort) continue;
      const std::string e = formatter_->OnOutput(p, *out);
      if (stream_) events += e;
    }
    all_done = all_done && streams_[p]->done();
  }
  if (!started_ && limits_.queue_timeout.count() > 0 && now - arrival_ > limits_.queue_timeout) {
    AbortAll();
    Finish("queue timeout");
    ApiError e = Unavailable("the request waited in the queue longer than --queue-timeout (" +
                                 std::to_string(limits_.queue_timeout.count() / 1000.0) + " s); retry later",
                             1);
    step.reply = ErrorReply(e);
    return step;
  }
  if (!error_.empty() && !(stream_ && headers_sent_)) {
    // Nothing sent yet: the error is the whole reply.
    AbortAll();
    Finish("error");
    ApiError e = Unavailable("the request was not completed: " + error_, 1);
    step.reply = ErrorReply(e);
    return step;
  }
  if (stream_) {
    if (!headers_sent_ && started_) {
      step.begin_stream = true;
      headers_sent_ = true;
    }
    if (!error_.empty()) {
      // Mid-stream: an error event, then [DONE], as vLLM ends a stream it cannot finish.
      AbortAll();
      ApiError e = Unavailable(error_, 1);
      step.data = events + formatter_->StreamError(e) + formatter_->StreamEnd();
      step.end_stream = true;
      Finish("error");
      return step;
    }
    if (all_done) {
      if (!headers_sent_) {
        step.begin_stream = true;
        headers_sent_ = true;
      }
      step.data = events + formatter_->Finish() + formatter_->StreamEnd();
      step.end_stream = true;
      Finish("");
      return step;
    }
    step.data = std::move(events);
    return step;
  }
  if (all_done) {
    step.reply = HttpReply{200, "application/json", formatter_->Finish(), {}};
    Finish("");
  }
  return step;
}

void GenerationReply::Finish(const std::string& why) {
  if (finished_) return;
  finished_ = true;
  MarkStarted();  // leaves the queue count either way
  const Clock::time_point end = Clock::now();
  std::string finish;
  for (const std::string& f : finish_reasons_) finish += (finish.empty() ? "" : ",") + f;
  if (!why.empty()) finish = why;
  RequestRecord record;
  record.ttft_s = first_token_ ? Seconds(*first_token_ - arrival_) : -1;
  record.inter_token_s = std::move(gaps_);
  record.e2e_s = Seconds(end - arrival_);
  record.finish_reason = why.empty() && !finish_reasons_.empty() ? finish_reasons_.front() : "abort";
  limits_.metrics->Record(record);
  // ttft counts from the body's arrival (parsing, tokenizing, queueing, prefill);
  // engine_ttft from the engine's Submit, so their difference is the server's share.
  const double engine_ttft = first_token_ ? Seconds(*first_token_ - submitted_) : -1;
  char line[512];
  std::snprintf(line, sizeof line,
                "latte serve: %s prompt_tokens=%lld output_tokens=%lld ttft=%.4fs engine_ttft=%.4fs total=%.4fs "
                "finish=%s\n",
                id_.c_str(), static_cast<long long>(prompt_tokens_), static_cast<long long>(output_tokens_),
                record.ttft_s, engine_ttft, record.e2e_s, finish.empty() ? "none" : finish.c_str());
  std::fputs(line, stderr);
}

}  // namespace latte::server
