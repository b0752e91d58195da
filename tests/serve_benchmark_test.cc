// The serving benchmark's pieces that need no server: base URLs, the latency summary
// (numpy's mean, median and linear-interpolation p99, recomputed here), the prompts.
// End to end against servers: tests/server/bench_serve.test.js.
#include "client/serve_benchmark.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "base/splitmix64.h"

namespace latte {
namespace {

TEST(ServeBenchmark, ParsesBaseUrls) {
  auto u = ParseBaseUrl("http://127.0.0.1:8000");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, "8000");
  u = ParseBaseUrl("http://localhost:9/v1/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "localhost");
  EXPECT_EQ(u->text, "http://localhost:9");
  u = ParseBaseUrl("http://[::1]:8080");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  u = ParseBaseUrl("http://example.com");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, "80");
  EXPECT_FALSE(ParseBaseUrl("https://example.com").ok());
  EXPECT_FALSE(ParseBaseUrl("http://h:99999").ok());
  EXPECT_FALSE(ParseBaseUrl("http://h:8000/v1/completions").ok());
  EXPECT_FALSE(ParseBaseUrl("http://:80").ok());
}

// numpy.percentile(values, q) with its default linear interpolation, by the formula
// in numpy's documentation: i + (j - i) * fraction between the ranks around q/100·(n-1).
double NumpyPercentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double rank = q / 100 * (v.size() - 1);
  const double below = std::floor(rank);
  const size_t i = static_cast<size_t>(below);
  return i + 1 < v.size() ? v[i] + (v[i + 1] - v[i]) * (rank - below) : v[i];
}

TEST(ServeBenchmark, LatencySummaryAsNumpy) {
  const LatencyStats four = SummarizeLatency({0.004, 0.001, 0.003, 0.002});
  EXPECT_DOUBLE_EQ(four.mean_ms, 2.5);
  EXPECT_DOUBLE_EQ(four.median_ms, 2.5);
  EXPECT_NEAR(four.p99_ms, 3.97, 1e-12);
  SplitMix64 rng(7);
  for (int n : {1, 2, 3, 10, 101, 1000}) {
    std::vector<double> v(n);
    for (double& x : v) x = static_cast<double>(rng.Next() % 100000) / 1e5;
    const LatencyStats s = SummarizeLatency(v);
    EXPECT_NEAR(s.mean_ms, 1000 * std::accumulate(v.begin(), v.end(), 0.0) / n, 1e-9);
    EXPECT_NEAR(s.median_ms, 1000 * NumpyPercentile(v, 50), 1e-9) << n;
    EXPECT_NEAR(s.p99_ms, 1000 * NumpyPercentile(v, 99), 1e-9) << n;
  }
  EXPECT_TRUE(std::isnan(SummarizeLatency({}).median_ms));
}

TEST(ServeBenchmark, PromptsComeFromThePoolAndDifferPerRequest) {
  ServeBenchOptions o;
  o.input_len = 300;
  o.seed = 3;
  for (int64_t id = 500; id < 600; ++id) o.token_pool.push_back(id);
  const std::vector<int64_t> a = BenchPrompt(o, 0), b = BenchPrompt(o, 1);
  ASSERT_EQ(a.size(), 300u);
  EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](int64_t id) { return id >= 500 && id < 600; }));
  EXPECT_NE(a, b);
  EXPECT_EQ(a, BenchPrompt(o, 0));
  o.seed = 4;
  EXPECT_NE(a, BenchPrompt(o, 0));
}

TEST(ServeBenchmark, RefusesBadOptions) {
  ServeBenchOptions o;
  o.token_pool = {1, 2, 3};
  o.num_prompts = 0;
  EXPECT_FALSE(RunServeBenchmark(o).ok());
  o.num_prompts = 1;
  o.token_pool.clear();
  EXPECT_FALSE(RunServeBenchmark(o).ok());
}

}  // namespace
}  // namespace latte
