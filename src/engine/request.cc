#include "engine/request.h"

#include "engine/stop_matcher.h"

namespace latte {
namespace {

std::string IdRange(int64_t vocab_size) { return "[0, " + std::to_string(vocab_size) + ")"; }

// prompt + max_tokens against the context and the pool; the field to blame is the
// prompt when it alone is too long.
Status CheckLength(int64_t prompt_tokens, int64_t max_tokens, const RequestLimits& limits,
                   const std::string& max_tokens_field) {
  // Saturating: a client's max_tokens near INT64_MAX is refused, not wrapped around.
  const int64_t total = max_tokens > INT64_MAX - prompt_tokens ? INT64_MAX : prompt_tokens + max_tokens;
  const std::string parts =
      std::to_string(prompt_tokens) + " in the prompt, " + std::to_string(max_tokens) + " in " + max_tokens_field;
  if (total > limits.max_model_len) {
    return Status::OutOfRange("this model's maximum context length is " + std::to_string(limits.max_model_len) +
                                  " tokens, but the request asks for " + std::to_string(total) + " (" + parts + ")",
                              prompt_tokens > limits.max_model_len ? "prompt" : max_tokens_field);
  }
  if (total > limits.pool_tokens) {
    return Status::OutOfRange("the request needs " + std::to_string(total) + " tokens of KV cache (" + parts +
                                  "), more than the whole KV cache holds (" + std::to_string(limits.pool_tokens) +
                                  " tokens)",
                              prompt_tokens > limits.pool_tokens ? "prompt" : max_tokens_field);
  }
  return Status::Ok();
}

}  // namespace

Status CheckRequest(const GenerationRequest& r, const RequestLimits& limits, std::string_view max_tokens_field) {
  const std::string max_field(max_tokens_field);
  if (r.prompt.empty()) return Status::InvalidArgument("prompt must not be empty", "prompt");
  for (int32_t id : r.prompt) {
    if (id < 0 || id >= limits.vocab_size) {
      return Status::InvalidArgument(
          "prompt token id " + std::to_string(id) + " is outside the vocabulary " + IdRange(limits.vocab_size),
          "prompt");
    }
  }
  if (r.max_tokens < 0) {
    return Status::InvalidArgument(max_field + " must be >= 0, got " + std::to_string(r.max_tokens), max_field);
  }
  if (r.n < 1) return Status::InvalidArgument("n must be at least 1, got " + std::to_string(r.n), "n");
  if (r.n > limits.max_num_seqs) {
    return Status::InvalidArgument("n = " + std::to_string(r.n) + " is more than the engine runs at once (" +
                                       "--max-num-seqs " + std::to_string(limits.max_num_seqs) + ")",
                                   "n");
  }
  LATTE_RETURN_IF_ERROR(r.sampling.Validate());
  LATTE_RETURN_IF_ERROR(StopMatcher::CheckStopStrings(r.stop));
  if (!r.stop.empty() && !limits.has_tokenizer) {
    return Status::FailedPrecondition("stop strings need a tokenizer, and this model has none", "stop");
  }
  if (!r.output_constraint.empty() && !limits.has_tokenizer) {
    return Status::FailedPrecondition("constrained output needs a tokenizer, and this model has none",
                                      "response_format");
  }
  for (int32_t id : r.stop_token_ids) {
    if (id < 0 || id >= limits.vocab_size) {
      return Status::InvalidArgument(
          "stop_token_ids: " + std::to_string(id) + " is outside the vocabulary " + IdRange(limits.vocab_size),
          "stop_token_ids");
    }
  }
  return CheckLength(static_cast<int64_t>(r.prompt.size()), r.max_tokens, limits, max_field);
}

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "?";
}

std::optional<GenerationOutput> RequestStream::Next(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  const auto ready = [this] { return !outputs_.empty() || open_choices_ == 0; };
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    cv_.wait(lock, ready);  // wait_until(max) overflows converting to the system clock
  } else {
    cv_.wait_until(lock, deadline, ready);
  }
  if (outputs_.empty()) return std::nullopt;
  GenerationOutput out = std::move(outputs_.front());
  outputs_.pop_front();
  return out;
}

std::vector<GenerationOutput> RequestStream::Drain() {
  std::vector<GenerationOutput> all;
  while (auto out = Next(std::chrono::steady_clock::time_point::max())) all.push_back(std::move(*out));
  return all;
}

bool RequestStream::done() const {
  std::lock_guard lock(mu_);
  return outputs_.empty() && open_choices_ == 0;
}

bool RequestStream::finished() const {
  std::lock_guard lock(mu_);
  return open_choices_ == 0;
}

void RequestStream::set_notify(std::function<void()> notify) {
  std::lock_guard lock(mu_);
  notify_ = std::move(notify);
}

void RequestStream::Push(GenerationOutput output) {
  if (sink_) {
    {
      std::lock_guard lock(mu_);
      if (output.finish) --open_choices_;
    }
    sink_(std::move(output));
    return;
  }
  std::function<void()> notify;
  {
    std::lock_guard lock(mu_);
    if (output.finish) --open_choices_;
    if (!discard_) outputs_.push_back(std::move(output));
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) notify();
}

}  // namespace latte
