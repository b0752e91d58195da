#include "engine/request.h"

namespace latte {

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
  std::function<void()> notify;
  {
    std::lock_guard lock(mu_);
    if (output.finish) --open_choices_;
    outputs_.push_back(std::move(output));
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) notify();
}

}  // namespace latte
