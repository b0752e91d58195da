// /metrics: Prometheus histograms count cumulatively per bound, and the exposition
// carries vLLM's metric names under latte: with the engine's counters.
#include "server/metrics.h"

#include <gtest/gtest.h>

namespace latte::server {
namespace {

bool Has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

TEST(ServerMetrics, HistogramIsCumulative) {
  Histogram h({0.1, 1.0});
  h.Observe(0.05);
  h.Observe(0.1);  // on the bound: counted in it (le)
  h.Observe(0.5);
  h.Observe(7);
  std::string out;
  h.Render("x", "help", "m=\"a\"", out);
  EXPECT_TRUE(Has(out, "x_bucket{m=\"a\",le=\"0.1\"} 2")) << out;
  EXPECT_TRUE(Has(out, "x_bucket{m=\"a\",le=\"1\"} 3")) << out;
  EXPECT_TRUE(Has(out, "x_bucket{m=\"a\",le=\"+Inf\"} 4")) << out;
  EXPECT_TRUE(Has(out, "x_count{m=\"a\"} 4")) << out;
  EXPECT_NE(out.find("x_sum{m=\"a\"} 7.65"), std::string::npos) << out;
}

TEST(ServerMetrics, RendersEngineCountersUnderVllmNames) {
  ServerMetrics m("tiny", "absorbed");
  EngineStats s;
  s.running = 3;
  s.waiting = 2;
  s.kv_blocks_total = 100;
  s.kv_blocks_used = 25;
  s.block_size = 64;
  s.preemptions = 4;
  s.prefix_queries = 50;
  s.prefix_hits = 20;
  RequestRecord r;
  r.ttft_s = 0.003;
  r.inter_token_s = {0.02, 0.03};
  r.e2e_s = 0.4;
  r.finish_reason = "length";
  m.Record(r);
  const std::string out = m.Render(s);
  const std::string l = "{model_name=\"tiny\"}";
  EXPECT_TRUE(Has(out, "latte:num_requests_running" + l + " 3")) << out;
  EXPECT_TRUE(Has(out, "latte:num_requests_waiting" + l + " 2"));
  EXPECT_TRUE(Has(out, "latte:kv_cache_usage_perc" + l + " 0.25"));
  EXPECT_TRUE(Has(out, "latte:num_preemptions_total" + l + " 4"));
  EXPECT_TRUE(Has(out, "latte:prefix_cache_queries_total" + l + " 50"));
  EXPECT_TRUE(Has(out, "latte:prefix_cache_hits_total" + l + " 20"));
  EXPECT_TRUE(Has(out, "latte:kv_cache_blocks_total" + l + " 100"));
  EXPECT_TRUE(Has(out, "latte:kv_cache_tokens_total" + l + " 6400"));
  EXPECT_TRUE(Has(out, "latte:mla_mode{model_name=\"tiny\",mode=\"absorbed\"} 1"));
  EXPECT_TRUE(Has(out, "latte:time_to_first_token_seconds_count" + l + " 1"));
  EXPECT_TRUE(Has(out, "latte:inter_token_latency_seconds_count" + l + " 2"));
  EXPECT_TRUE(Has(out, "latte:e2e_request_latency_seconds_count" + l + " 1"));
  EXPECT_TRUE(Has(out, "latte:request_success_total{model_name=\"tiny\",finished_reason=\"length\"} 1"));
  EXPECT_NE(out.find("# TYPE latte:time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_FALSE(Has(out, "spec_decode")) << "no drafts: no speculative counters";
}

TEST(ServerMetrics, SpeculativeCountersUnderVllmNames) {
  ServerMetrics m("tiny", "absorbed");
  EngineStats s;
  s.spec_drafts = 7;
  s.spec_draft_tokens = 14;
  s.spec_accepted_tokens = 9;
  s.spec_accepted_per_position = {6, 3};
  const std::string out = m.Render(s);
  const std::string l = "{model_name=\"tiny\"}";
  EXPECT_TRUE(Has(out, "latte:spec_decode_num_drafts_total" + l + " 7")) << out;
  EXPECT_TRUE(Has(out, "latte:spec_decode_num_draft_tokens_total" + l + " 14"));
  EXPECT_TRUE(Has(out, "latte:spec_decode_num_accepted_tokens_total" + l + " 9"));
  EXPECT_TRUE(Has(out, "latte:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"0\"} 6"));
  EXPECT_TRUE(Has(out, "latte:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"1\"} 3"));
}

}  // namespace
}  // namespace latte::server
