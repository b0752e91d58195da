// /metrics: Prometheus text exposition of the engine's counters (EngineStats) and the
// server's request histograms, named as vLLM names them with a "latte:" prefix
// (vllm:time_to_first_token_seconds → latte:time_to_first_token_seconds), plus what
// only latte has: the KV pool's size in blocks and tokens, and the MLA mode.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace latte::server {

// A Prometheus histogram: cumulative counts over fixed upper bounds, plus sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void Observe(double v);
  // "# TYPE", one _bucket line per bound and +Inf, _sum, _count; `labels` like model_name="x".
  void Render(const std::string& name, const std::string& help, const std::string& labels, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What one finished request contributes.
struct RequestRecord {
  double ttft_s = -1;                 // < 0: no token came out
  std::vector<double> inter_token_s;  // gaps between consecutive tokens of each choice
  double e2e_s = 0;
  std::string finish_reason;  // "stop", "length", "abort"
};

class ServerMetrics {
 public:
  ServerMetrics(const std::string& model_name, std::string mla_mode);
  void Record(const RequestRecord& r);
  // The whole /metrics body for this moment's engine counters.
  std::string Render(const EngineStats& stats) const;

 private:
  // Per-rank gauges and counters of a data-parallel group (stats.ranks).
  void RenderRanks(std::string& out, const EngineStats& stats) const;
  // Speculative decoding's counters (vLLM's spec_decode_*), when the engine drafts.
  void RenderSpeculative(std::string& out, const EngineStats& stats) const;

  const std::string labels_;  // model_name="..."
  const std::string mla_mode_;
  mutable std::mutex mu_;
  Histogram ttft_, itl_, e2e_;
  uint64_t finished_stop_ = 0, finished_length_ = 0, finished_abort_ = 0;
};

}  // namespace latte::server
