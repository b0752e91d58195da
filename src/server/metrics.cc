#include "server/metrics.h"

#include <cstdio>
#include <cstdlib>

namespace latte::server {
namespace {

// vLLM's bucket bounds for these three histograms.
std::vector<double> TtftBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> ItlBuckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> E2eBuckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

// The shortest decimal that reads back as `v` (0.1, not 0.10000000000000001).
std::string Number(double v) {
  char buf[64];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// Prometheus label values escape backslash, quote and newline.
std::string EscapeLabel(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void Metric(std::string& out, const std::string& name, const char* type, const std::string& help,
            const std::string& labels, double value) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  out += name + "{" + labels + "} " + Number(value) + "\n";
}

}  // namespace

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::Render(const std::string& name, const std::string& help, const std::string& labels,
                       std::string& out) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? Number(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum{" + labels + "} " + Number(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics(const std::string& model_name, std::string mla_mode)
    : labels_("model_name=\"" + EscapeLabel(model_name) + "\""),
      mla_mode_(std::move(mla_mode)),
      ttft_(TtftBuckets()),
      itl_(ItlBuckets()),
      e2e_(E2eBuckets()) {}

void ServerMetrics::Record(const RequestRecord& r) {
  std::lock_guard lock(mu_);
  if (r.ttft_s >= 0) ttft_.Observe(r.ttft_s);
  for (double gap : r.inter_token_s) itl_.Observe(gap);
  e2e_.Observe(r.e2e_s);
  if (r.finish_reason == "stop")
    ++finished_stop_;
  else if (r.finish_reason == "length")
    ++finished_length_;
  else
    ++finished_abort_;
}

void ServerMetrics::RenderRanks(std::string& out, const EngineStats& s) const {
  if (s.ranks.empty()) return;
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const RankLoad&);
  };
  static const Family families[] = {
      {"latte:rank_num_requests_running", "gauge", "Sequences running on each data-parallel rank.",
       [](const RankLoad& r) { return static_cast<double>(r.running); }},
      {"latte:rank_num_requests_waiting", "gauge", "Sequences waiting on each data-parallel rank.",
       [](const RankLoad& r) { return static_cast<double>(r.waiting); }},
      {"latte:rank_kv_cache_usage_perc", "gauge", "Each data-parallel rank's KV-cache usage (1 means 100 percent).",
       [](const RankLoad& r) {
         return r.kv_blocks_total > 0 ? static_cast<double>(r.kv_blocks_used) / r.kv_blocks_total : 0.0;
       }},
      {"latte:rank_requests_assigned_total", "counter", "Requests rank 0 assigned to each data-parallel rank.",
       [](const RankLoad& r) { return static_cast<double>(r.requests_assigned); }},
      {"latte:rank_collective_seconds_total", "counter", "Time each rank's engine steps spent inside collectives.",
       [](const RankLoad& r) { return r.collective_seconds; }},
      {"latte:rank_engine_step_seconds_total", "counter", "Time inside each rank's engine steps.",
       [](const RankLoad& r) { return r.step_seconds; }},
  };
  for (const Family& f : families) {
    out += std::string("# HELP ") + f.name + " " + f.help + "\n# TYPE " + f.name + " " + f.type + "\n";
    for (const RankLoad& r : s.ranks) {
      out += std::string(f.name) + "{" + labels_ + ",rank=\"" + std::to_string(r.rank) + "\"} " + Number(f.value(r)) +
             "\n";
    }
  }
}

void ServerMetrics::RenderSpeculative(std::string& out, const EngineStats& s) const {
  // vLLM's spec_decode_* counters, only when the server decodes with drafts.
  if (s.spec_accepted_per_position.empty()) return;
  const std::string& l = labels_;
  Metric(out, "latte:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", l, s.spec_drafts);
  Metric(out, "latte:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.", l, s.spec_draft_tokens);
  Metric(out, "latte:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.", l,
         s.spec_accepted_tokens);
  const std::string name = "latte:spec_decode_num_accepted_tokens_per_pos_total";
  out += "# HELP " + name + " Accepted tokens per draft position.\n# TYPE " + name + " counter\n";
  for (size_t p = 0; p < s.spec_accepted_per_position.size(); ++p) {
    out += name + "{" + l + ",position=\"" + std::to_string(p) + "\"} " +
           Number(static_cast<double>(s.spec_accepted_per_position[p])) + "\n";
  }
}

std::string ServerMetrics::Render(const EngineStats& s) const {
  std::string out;
  const std::string& l = labels_;
  Metric(out, "latte:num_requests_running", "gauge", "Sequences in the engine's running batch.", l, s.running);
  Metric(out, "latte:num_requests_waiting", "gauge", "Sequences waiting to be scheduled.", l, s.waiting);
  const double usage = s.kv_blocks_total > 0 ? static_cast<double>(s.kv_blocks_used) / s.kv_blocks_total : 0;
  Metric(out, "latte:kv_cache_usage_perc", "gauge", "KV-cache usage: 1 means 100 percent (blocks held by sequences).",
         l, usage);
  Metric(out, "latte:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", l,
         s.prefix_queries);
  Metric(out, "latte:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.", l, s.prefix_hits);
  Metric(out, "latte:num_preemptions_total", "counter", "Cumulative number of preemptions.", l, s.preemptions);
  Metric(out, "latte:prompt_tokens_total", "counter", "Prompt tokens computed (prefix-cache hits excluded).", l,
         s.prompt_tokens);
  Metric(out, "latte:generation_tokens_total", "counter", "Generated tokens.", l, s.generation_tokens);
  Metric(out, "latte:kv_cache_blocks_total", "gauge", "Blocks in the KV pool.", l, s.kv_blocks_total);
  Metric(out, "latte:kv_cache_blocks_cached", "gauge", "Free KV blocks still holding a reusable prefix.", l,
         s.kv_blocks_cached);
  Metric(out, "latte:kv_cache_tokens_total", "gauge", "Tokens the KV pool holds (blocks times block size).", l,
         static_cast<double>(s.kv_blocks_total * s.block_size));
  Metric(out, "latte:engine_steps_total", "counter", "Engine steps run.", l, s.steps);
  Metric(out, "latte:engine_step_seconds_total", "counter",
         "Time inside engine steps (scheduling, forward, sampling, outputs).", l, s.step_seconds);
  Metric(out, "latte:engine_forward_seconds_total", "counter", "Time inside the model's forward passes.", l,
         s.model_seconds);
  Metric(out, "latte:collective_seconds_total", "counter",
         "Time rank 0's engine steps spent inside collectives (a job of several ranks).", l, s.collective_seconds);
  RenderRanks(out, s);
  RenderSpeculative(out, s);
  out +=
      "# HELP latte:mla_mode The MLA attention mode the server runs (absorbed, materialized, naive).\n"
      "# TYPE latte:mla_mode gauge\n";
  out += "latte:mla_mode{" + l + ",mode=\"" + EscapeLabel(mla_mode_) + "\"} 1\n";
  std::lock_guard lock(mu_);
  out +=
      "# HELP latte:request_success_total Finished requests by finish reason.\n"
      "# TYPE latte:request_success_total counter\n";
  out += "latte:request_success_total{" + l + ",finished_reason=\"stop\"} " + std::to_string(finished_stop_) + "\n";
  out += "latte:request_success_total{" + l + ",finished_reason=\"length\"} " + std::to_string(finished_length_) + "\n";
  out += "latte:request_success_total{" + l + ",finished_reason=\"abort\"} " + std::to_string(finished_abort_) + "\n";
  ttft_.Render("latte:time_to_first_token_seconds", "Time to first token in seconds.", l, out);
  itl_.Render("latte:inter_token_latency_seconds", "Time between consecutive tokens in seconds.", l, out);
  e2e_.Render("latte:e2e_request_latency_seconds", "End-to-end request latency in seconds.", l, out);
  return out;
}

}  // namespace latte::server
