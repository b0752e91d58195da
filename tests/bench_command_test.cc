// latte bench model / attn / machine end to end: JSON sanity and the cost figures
// as printed (no speed is ever asserted). The costs themselves are checked against
// hand counts in tests/cost_model_test.cc.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/cost_model.h"
#include "model/presets.h"
#include "run_command.h"
#include "test_models.h"

namespace latte {
namespace {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

CommandResult RunLatte(const std::string& args) {
  CommandResult r;
  r.out = testing_process::RunCommand(std::string(LATTE_BINARY) + " " + args + " 2>&1", &r.exit_code);
  return r;
}

std::vector<nlohmann::json> JsonLines(const std::string& out) {
  std::istringstream lines(out);
  std::string line;
  std::vector<nlohmann::json> objects;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] == '{') objects.push_back(nlohmann::json::parse(line));
  }
  return objects;
}

bool PositiveFinite(const nlohmann::json& v) {
  return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0;
}

void ExpectRooflineConsistent(const nlohmann::json& j);

TEST(BenchModelCommand, JsonLinesAreSane) {
  const std::string dir = testing_models::MakeModel("tiny", {});
  const CommandResult r =
      RunLatte("bench model --model " + dir + " -p 8 -n 4 -r 2 --batch 2 -t 2 --mla-mode materialized --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::vector<nlohmann::json> objects = JsonLines(r.out);
  ASSERT_EQ(objects.size(), 2u) << r.out;
  EXPECT_EQ(objects[0]["test"], "pp8");
  EXPECT_EQ(objects[0]["batch"], 1);
  EXPECT_EQ(objects[1]["test"], "tg4");
  EXPECT_EQ(objects[1]["batch"], 2);
  for (const nlohmann::json& j : objects) {
    EXPECT_EQ(j["mla_mode"], "materialized");
    EXPECT_EQ(j["threads"], 2);
    for (const char* key : {"tok_s_mean", "bytes_per_token", "flops_per_token", "achieved_gbps", "achieved_gflops",
                            "machine_read_gbps", "fraction_of_roofline"}) {
      EXPECT_TRUE(PositiveFinite(j[key])) << key << " in " << j.dump();
    }
    EXPECT_TRUE(j["tok_s_sd"].is_number() && j["tok_s_sd"].get<double>() >= 0) << j.dump();
    EXPECT_TRUE(j["machine_bf16_gflops"].is_null() || PositiveFinite(j["machine_bf16_gflops"])) << j.dump();
    // The figures agree with each other: GB/s = bytes per token x tok/s.
    EXPECT_NEAR(j["achieved_gbps"].get<double>(),
                j["bytes_per_token"].get<double>() * j["tok_s_mean"].get<double>() / 1e9,
                1e-9 * j["achieved_gbps"].get<double>() + 1e-12);
    ExpectRooflineConsistent(j);
  }
}

// Without -t a model under kSingleThreadModelBytes decodes on one thread (fork/join
// costs more than a second core brings at that size); -t still sets the count.
TEST(BenchModelCommand, SmallModelsDefaultToOneThread) {
  const std::string dir = testing_models::MakeModel("tiny", {});
  for (const auto& [flags, threads] : std::vector<std::pair<std::string, int>>{{"", 1}, {" -t 2", 2}}) {
    const CommandResult r = RunLatte("bench model --model " + dir + " -p 0 -n 2 -r 1 --json" + flags);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const std::vector<nlohmann::json> objects = JsonLines(r.out);
    ASSERT_EQ(objects.size(), 1u) << r.out;
    EXPECT_EQ(objects[0]["threads"], threads) << flags;
  }
}

// The probe's spread is reported and the binding roof is the one whose time at peak is
// longer, recomputed here from the printed bytes, FLOPs and peaks; its share is the
// one printed as fraction_of_roofline, flagged when above 1.
void ExpectRooflineConsistent(const nlohmann::json& j) {
  for (const char* key : {"machine_read_gbps_min", "machine_f32_gflops", "machine_f32_gflops_min",
                          "fraction_of_read_gbps", "fraction_of_flop_peak"}) {
    EXPECT_TRUE(PositiveFinite(j[key])) << key << " in " << j.dump();
  }
  EXPECT_GE(j["probe_rounds"].get<int>(), 3) << j.dump();
  EXPECT_LE(j["machine_read_gbps_min"].get<double>(), j["machine_read_gbps"].get<double>());
  const bool bf16 = !j["machine_bf16_gflops"].is_null();
  const double flop_peak = bf16 ? j["machine_bf16_gflops"].get<double>() : j["machine_f32_gflops"].get<double>();
  const double memory_s = j["bytes_per_token"].get<double>() / (j["machine_read_gbps"].get<double>() * 1e9);
  const double compute_s = j["flops_per_token"].get<double>() / (flop_peak * 1e9);
  const bool memory = memory_s >= compute_s;
  EXPECT_EQ(j["roofline"], memory ? "read_gbps" : (bf16 ? "bf16_gflops" : "f32_gflops")) << j.dump();
  const double fraction = j["fraction_of_roofline"].get<double>();
  EXPECT_DOUBLE_EQ(fraction,
                   memory ? j["fraction_of_read_gbps"].get<double>() : j["fraction_of_flop_peak"].get<double>());
  EXPECT_NEAR(fraction, std::max(memory_s, compute_s) * j["tok_s_mean"].get<double>(), 1e-9 * fraction);
  EXPECT_EQ(j["probe_below_run"].get<bool>(), fraction > 1) << j.dump();
}

// --quantize fp8 holds every projection, expert and lm_head in fp8: tg reads fewer
// bytes per token than the bf16 load of the same model (the embedding row stays bf16).
TEST(BenchModelCommand, QuantizeFp8ReadsFewerBytes) {
  const std::string dir = testing_models::MakeModel("tiny", {});
  const CommandResult bf16 = RunLatte("bench model --model " + dir + " -p 0 -n 2 -r 1 -t 2 --json");
  const CommandResult fp8 = RunLatte("bench model --model " + dir + " -p 0 -n 2 -r 1 -t 2 --quantize fp8 --json");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.out;
  ASSERT_EQ(fp8.exit_code, 0) << fp8.out;
  const std::vector<nlohmann::json> a = JsonLines(bf16.out), b = JsonLines(fp8.out);
  ASSERT_EQ(a.size(), 1u) << bf16.out;
  ASSERT_EQ(b.size(), 1u) << fp8.out;
  const double ratio = b[0]["weight_bytes_per_token"].get<double>() / a[0]["weight_bytes_per_token"].get<double>();
  EXPECT_GT(ratio, 0.5);  // 1 byte + scales per value, f32 norms and router, bf16 kv_b
  EXPECT_LT(ratio, 0.75);
  EXPECT_EQ(a[0]["flops_per_token"], b[0]["flops_per_token"]);
  ExpectRooflineConsistent(b[0]);
}

// -d D: tg decodes after D tokens prefilled into each cache (600: two chunks of the
// 512-token fill), and its per-token costs count the attention over them: the average
// context is D + (n - 1) / 2 (without -d: the 16-token prompt, 16 + (n - 1) / 2).
TEST(BenchModelCommand, DepthCountsTheCachedRowsInTheCosts) {
  const std::string dir = testing_models::MakeModel("tiny", {});
  const CommandResult deep = RunLatte("bench model --model " + dir + " -p 0 -n 3 -r 1 -t 2 -d 600 --json");
  ASSERT_EQ(deep.exit_code, 0) << deep.out;
  const CommandResult shallow = RunLatte("bench model --model " + dir + " -p 0 -n 3 -r 1 -t 2 --json");
  ASSERT_EQ(shallow.exit_code, 0) << shallow.out;
  const std::vector<nlohmann::json> d = JsonLines(deep.out), s = JsonLines(shallow.out);
  ASSERT_EQ(d.size(), 1u) << deep.out;
  ASSERT_EQ(s.size(), 1u) << shallow.out;
  EXPECT_EQ(d[0]["test"], "tg3@d600");
  EXPECT_EQ(d[0]["depth"], 600);
  EXPECT_EQ(s[0]["test"], "tg3");
  EXPECT_EQ(s[0]["depth"], 0);
  EXPECT_TRUE(PositiveFinite(d[0]["tok_s_mean"])) << d[0].dump();
  // Tiny: 3 layers, bf16 rows of d_c + d_r = 40 values, H 4, d_c 32.
  const double rows = 600 + 1 + 1;  // average context 601, plus the new token's own row
  EXPECT_DOUBLE_EQ(d[0]["kv_bytes_per_token"].get<double>(), 3 * rows * 40 * 2);
  EXPECT_DOUBLE_EQ(s[0]["kv_bytes_per_token"].get<double>(), 3 * (16 + 1 + 1) * 40 * 2);
  EXPECT_DOUBLE_EQ(d[0]["flops_per_token"].get<double>() - s[0]["flops_per_token"].get<double>(),
                   3 * (601 - 17) * (2 * 4 * 40 + 2 * 4 * 32));
  EXPECT_DOUBLE_EQ(d[0]["weight_bytes_per_token"].get<double>(), s[0]["weight_bytes_per_token"].get<double>());
  const Result<ModelConfig> tiny = MakeModelPreset("tiny");
  ASSERT_TRUE(tiny.ok()) << tiny.status().message();
  const TokenCosts want =
      DecodeCostsPerToken(tiny.value(), MlaMode::kAbsorbed, 1, 601, WeightValueBytes::Uniform(2), 2);
  EXPECT_DOUBLE_EQ(d[0]["flops_per_token"].get<double>(), want.flops);
  EXPECT_DOUBLE_EQ(d[0]["bytes_per_token"].get<double>(), want.Bytes());
}

// --paired-probe: one read probe figure per timed tg run, and each run's share of it is
// that run's GB/s (bytes per token x its tok/s, from tok_s_mean and the spread of the
// runs) over it; pp tests take none, and the flag needs a tg test.
TEST(BenchModelCommand, PairedProbeSharesAreEachRunsGbpsOverItsProbe) {
  const std::string dir = testing_models::MakeModel("tiny", {});
  const CommandResult r = RunLatte("bench model --model " + dir + " -p 8 -n 3 -r 3 -t 2 --paired-probe --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::vector<nlohmann::json> objects = JsonLines(r.out);
  ASSERT_EQ(objects.size(), 2u) << r.out;
  EXPECT_FALSE(objects[0].contains("paired_read_gbps")) << objects[0].dump();  // pp8
  const nlohmann::json& tg = objects[1];
  const auto probes = tg["paired_read_gbps"].get<std::vector<double>>();
  const auto shares = tg["paired_read_fraction"].get<std::vector<double>>();
  ASSERT_EQ(probes.size(), 3u) << tg.dump();
  ASSERT_EQ(shares.size(), 3u) << tg.dump();
  const double bytes = tg["bytes_per_token"].get<double>();
  std::vector<double> tok_s;  // each run's, back from its share
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(PositiveFinite(probes[i])) << tg.dump();
    tok_s.push_back(shares[i] * probes[i] * 1e9 / bytes);
  }
  const double mean = (tok_s[0] + tok_s[1] + tok_s[2]) / 3;
  double squares = 0;
  for (double v : tok_s) squares += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, tg["tok_s_mean"].get<double>(), 1e-9 * mean);
  EXPECT_NEAR(std::sqrt(squares / 2), tg["tok_s_sd"].get<double>(), 1e-6 * mean);
  std::vector<double> sorted = shares;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_DOUBLE_EQ(tg["fraction_of_paired_read"].get<double>(), sorted[1]);

  const CommandResult no_tg = RunLatte("bench model --model " + dir + " -p 8 -n 0 -r 1 --paired-probe");
  EXPECT_NE(no_tg.exit_code, 0);
  EXPECT_NE(no_tg.out.find("--paired-probe"), std::string::npos) << no_tg.out;
}

TEST(BenchModelCommand, RejectsANegativeDepth) {
  const std::string dir = testing_models::MakeModel("tiny", {});
  const CommandResult r = RunLatte("bench model --model " + dir + " -p 0 -n 2 -r 1 -d -5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("-d"), std::string::npos) << r.out;
}

// bench engine counts every token of every request, also when a pool too small for
// all of them at once makes the engine preempt and recompute.
TEST(BenchEngineCommand, CountsEveryTokenThroughPreemption) {
  const std::string dir = testing_models::MakeModel("tiny", {});
  const CommandResult r = RunLatte("bench engine --model " + dir +
                                   " --num-prompts 6 --input-len 9 --output-len 40 --max-concurrency 0"
                                   " --block-size 16 --num-kv-blocks 6 --json -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::vector<nlohmann::json> lines = JsonLines(r.out);
  ASSERT_EQ(lines.size(), 1u) << r.out;
  const nlohmann::json& j = lines[0];
  EXPECT_EQ(j["num_prompts"].get<int64_t>(), 6);
  EXPECT_EQ(j["input_tokens"].get<int64_t>(), 6 * 9);
  EXPECT_EQ(j["output_tokens"].get<int64_t>(), 6 * 40);
  // 6 sequences of up to 49 tokens need 4 blocks each; 6 blocks hold one and a half.
  EXPECT_GT(j["preemptions"].get<int64_t>(), 0);
  EXPECT_TRUE(PositiveFinite(j["output_tok_s"])) << j;
  const double overhead = j["overhead_share"].get<double>();
  EXPECT_GE(overhead, 0.0);
  EXPECT_LT(overhead, 1.0);
}

// bench attn's core rows: the bf16 rows one step reads and the core's FLOPs, exactly,
// beside the machine peaks measured in the same run.
TEST(BenchAttnCommand, CoreRowsCountBytesAndFlops) {
  const CommandResult r = RunLatte(
      "bench attn --preset v2-lite --mla-mode absorbed --batch 1 --batch 2 --context 100 --min-seconds 0 --threads 2 "
      "--json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::vector<nlohmann::json> objects = JsonLines(r.out);
  ASSERT_EQ(objects.size(), 4u) << r.out;  // absorbed x 2 batches, then core x 2
  for (int i = 0; i < 4; ++i) {
    const nlohmann::json& j = objects[i];
    const double batch = j["batch"].get<double>();
    EXPECT_EQ(j["mode"], i < 2 ? "absorbed" : "core") << j.dump();
    // V2-Lite: 16 heads, rows of 576 bf16 values, d_c 512; 101 rows per sequence.
    EXPECT_DOUBLE_EQ(j["kv_bytes"].get<double>(), batch * 101 * 576 * 2) << j.dump();
    if (i >= 2) {
      EXPECT_DOUBLE_EQ(j["flops"].get<double>(), batch * 101 * (2 * 16 * 576 + 2 * 16 * 512)) << j.dump();
      for (const char* key : {"ms_per_step", "achieved_gbps", "achieved_gflops", "machine_read_gbps",
                              "fraction_of_read_gbps", "fraction_of_flop_peak"}) {
        EXPECT_TRUE(PositiveFinite(j[key])) << key << " in " << j.dump();
      }
      EXPECT_TRUE(j["roofline"] == "flops" || j["roofline"] == "read_gbps") << j.dump();
    }
  }
}

// --compare-block-size times each point over both layouts: every row carries both times,
// and without it no row has the second.
TEST(BenchAttnCommand, ComparedLayoutIsTimedBesideTheFirst) {
  for (const bool compare : {true, false}) {
    const CommandResult r = RunLatte(
        "bench attn --preset v2-lite --mla-mode absorbed,materialized --batch 2 --context 70 --block-size 16 "
        "--min-seconds 0 --no-core --threads 2 --json" +
        std::string(compare ? " --compare-block-size 0" : ""));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const std::vector<nlohmann::json> objects = JsonLines(r.out);
    ASSERT_EQ(objects.size(), 2u) << r.out;
    for (const nlohmann::json& j : objects) {
      EXPECT_TRUE(PositiveFinite(j["ms_per_step"])) << j.dump();
      if (compare) {
        EXPECT_TRUE(PositiveFinite(j["compared_ms_per_step"])) << j.dump();
      } else {
        EXPECT_FALSE(j.contains("compared_ms_per_step")) << j.dump();
      }
    }
  }
}

TEST(BenchModelCommand, RejectsABadMode) {
  const std::string dir = testing_models::MakeModel("tiny", {});
  const CommandResult r = RunLatte("bench model --model " + dir + " -p 4 -n 2 -r 1 --mla-mode fast");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("--mla-mode"), std::string::npos) << r.out;
}

TEST(BenchMachineCommand, JsonParses) {
  const CommandResult r = RunLatte("bench machine --json -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["threads"], 2);
  EXPECT_TRUE(PositiveFinite(j["read_gbps"])) << r.out;
  EXPECT_TRUE(PositiveFinite(j["read_gbps_1thread"])) << r.out;
  EXPECT_TRUE(PositiveFinite(j["f32_gflops"])) << r.out;
  EXPECT_TRUE(j["bf16_gflops"].is_null() || PositiveFinite(j["bf16_gflops"])) << r.out;
  EXPECT_TRUE(j["f32_kernel"] == "avx512-fma" || j["f32_kernel"] == "avx2-fma" || j["f32_kernel"] == "portable")
      << r.out;
}

// --read-only: the all-thread read alone, one figure.
TEST(BenchMachineCommand, ReadOnlyIsOneFigure) {
  const CommandResult r = RunLatte("bench machine --json -t 2 --read-only");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.size(), 2u) << r.out;
  EXPECT_EQ(j["threads"], 2);
  EXPECT_TRUE(PositiveFinite(j["read_gbps"])) << r.out;
}

}  // namespace
}  // namespace latte
