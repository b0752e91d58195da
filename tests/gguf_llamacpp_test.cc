// latte's reading of GGUF files against llama.cpp itself: node-llama-cpp (pinned in
// tests/llamacpp, its prebuilt CPU build of llama.cpp) runs a greedy generation on the same
// file and reports its next-token probabilities at every step; latte runs the same
// tokens (teacher-forced on llama.cpp's path) and must pick the same token at every
// step and give the top tokens log-probabilities within the type's tolerance. Files:
// written by latte convert from random-weight models shaped like V3 (q_lora, sigmoid
// routing with groups and bias, YaRN) and V2-Lite (plain q_proj, softmax routing),
// every supported type, both kv_b layouts; and the vocabulary: the file's tokenizer in
// latte encodes as llama.cpp's does.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model_files.h"
#include "gguf_test_models.h"
#include "model/deepseek.h"
#include "model/model_weights.h"
#include "run_command.h"
#include "synth/gguf_export.h"
#include "synth/random_checkpoint.h"
#include "test_models.h"

namespace latte {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing_models::PrefillThenDecode;
using testing_models::TempRoot;
using testing_process::RunCommand;

const std::string kNpmDir = LATTE_LLAMACPP_DIR;

::testing::AssertionResult HaveLlamaCpp() {
  int code = 0;
  RunCommand("command -v node >/dev/null 2>&1", &code);
  if (code != 0) return ::testing::AssertionFailure() << "node is not on PATH (scripts/install-deps.sh installs it)";
  // node-llama-cpp 3.21.1 needs Node.js 20 or newer; Debian 12's own nodejs is 18.
  const std::string major = RunCommand("node -p \"process.versions.node.split('.')[0]\"", &code);
  if (std::atoi(major.c_str()) < 20) {
    return ::testing::AssertionFailure() << "node-llama-cpp needs Node.js 20 or newer; this node is " << major;
  }
  if (!fs::exists(kNpmDir + "/node_modules/node-llama-cpp")) {
    return ::testing::AssertionFailure() << kNpmDir
                                         << "/node_modules/node-llama-cpp is missing: run `cd tests/llamacpp && "
                                         << "npm ci --omit=optional --ignore-scripts`";
  }
  return ::testing::AssertionSuccess();
}

// Runs the reference over `requests` (one JSON object each), returns its answers.
std::vector<json> LlamaCpp(const std::vector<json>& requests) {
  const std::string in = TempRoot() + "/llamacpp-in.jsonl", out = TempRoot() + "/llamacpp-out.jsonl",
                    err = TempRoot() + "/llamacpp-err.txt";
  {
    std::ofstream f(in);
    for (const json& r : requests) f << r.dump() << "\n";
  }
  int code = 0;
  RunCommand("node " + kNpmDir + "/llamacpp_reference.mjs < " + in + " > " + out + " 2> " + err, &code);
  std::ifstream err_file(err);
  const std::string log((std::istreambuf_iterator<char>(err_file)), std::istreambuf_iterator<char>());
  std::ifstream f(out);
  std::vector<json> answers;
  for (std::string line; std::getline(f, line);) {
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) answers.push_back(std::move(j));
  }
  EXPECT_EQ(code, 0) << "node-llama-cpp failed:\n" << log;
  EXPECT_EQ(answers.size(), requests.size()) << log;
  return answers;
}

using Shape = testing_models::GgufShape;

// Each token takes 2 of 8 experts: the routing (groups, bias, softmax) is compared too.
std::string Model(Shape shape) {
  return testing_models::GgufTestModel("oracle-src-" + std::to_string(static_cast<int>(shape)),
                                       testing_models::GgufTestConfig(shape, /*experts_per_token=*/2),
                                       CheckpointDType::kBf16, /*seed=*/23);
}

std::string Export(const std::string& dir, const std::string& type, GgufExportLayout layout) {
  return testing_models::ExportTestGguf(dir, type, layout);
}

// log-softmax of one row of logits.
std::vector<double> LogSoftmax(const float* logits, int64_t n) {
  double max = logits[0];
  for (int64_t i = 1; i < n; ++i) max = std::max<double>(max, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(logits[i] - max);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = logits[i] - max - std::log(sum);
  return out;
}

struct Case {
  Shape shape;
  std::string type;
  GgufExportLayout layout;
  // The largest |latte - llama.cpp| of a top token's log-probability. Both engines round
  // activations before a product, differently: llama.cpp to Q8_0 / Q8_K blocks for block
  // formats (latte to int8 per 32 values), to bf16 for BF16 weights (latte too, in
  // vdpbf16ps), not for F32; and llama.cpp's attention reads an f16 KV cache (latte's
  // bf16 or f32). Seen: F32 4e-4, F16 / BF16 under 0.01, block formats 0.02-0.065, Q2_K
  // 0.05 (V2-Lite-like) and 0.099 (V3-like). latte's own Q2_K logits stay as close to the
  // exact product with the stored weights (its f32 dequantized model) as every other
  // block format's, 0.027-0.033 against 0.017-0.03, so the rest is llama.cpp's side (it
  // rounds x per 256 values, Q8_K, for the K formats): Q2_K gets 0.15. IQ1_S (0.045 and
  // 0.097, latte's logits 0.0095 of their RMS from its dequantized model, as every
  // format's) too; IQ2_XXS, IQ3_XXS 0.029-0.038.
  double logprob_tolerance;
};

double ToleranceFor(const std::string& type) {
  if (type == "F32") return 0.005;
  if (type == "F16" || type == "BF16") return 0.02;
  if (type == "Q2_K" || type == "IQ1_S") return 0.15;
  return 0.1;
}

const std::vector<int32_t> kPrompt = {0, 45, 300, 17, 42, 99, 256, 3};
constexpr int kSteps = 8;
constexpr int kTop = 5;

// Skips (saying why) where llama.cpp cannot run: a node older than 20 (Debian 12's own).
#define REQUIRE_LLAMACPP()                                                     \
  if (const ::testing::AssertionResult have = HaveLlamaCpp(); !have) {         \
    if (std::string(have.message()).find("Node.js 20") != std::string::npos) { \
      GTEST_SKIP() << have.message();                                          \
    }                                                                          \
    FAIL() << have.message();                                                  \
  }

TEST(GgufLlamaCpp, GreedyTokensAndLogprobsMatchLlamaCpp) {
  REQUIRE_LLAMACPP();
  std::vector<Case> cases;
  for (Shape shape : {Shape::kV3, Shape::kV2Lite}) {
    for (const char* type : {"F32", "BF16", "F16", "Q8_0", "Q4_0", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                             "Q6_K", "IQ4_NL", "IQ4_XS", "IQ2_XXS", "IQ3_XXS", "IQ1_S", "Q4_K_M"}) {
      cases.push_back({shape, type, GgufExportLayout::kSplitKvB, ToleranceFor(type)});
    }
    cases.push_back({shape, "Q8_0", GgufExportLayout::kKvB, ToleranceFor("Q8_0")});
  }
  std::vector<json> requests;
  std::vector<std::string> paths;
  for (const Case& c : cases) {
    paths.push_back(Export(Model(c.shape), c.type, c.layout));
    requests.push_back({{"model", paths.back()}, {"prompt", kPrompt}, {"steps", kSteps}, {"top", kTop}});
  }
  const std::vector<json> answers = LlamaCpp(requests);
  ASSERT_EQ(answers.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(paths[i]);
    const json& steps = answers[i]["steps"];
    ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps));
    std::vector<int32_t> tokens = kPrompt;
    for (const json& s : steps) tokens.push_back(s["token"].get<int32_t>());
    LoadOptions load;
    load.progress = false;
    auto w = ModelWeights::Load(paths[i], load);
    ASSERT_TRUE(w.ok()) << w.status().message();
    DeepSeekModel model(**w);
    const std::vector<float> logits = PrefillThenDecode(model, tokens, static_cast<int64_t>(kPrompt.size()));
    const int64_t vocab = (*w)->config().vocab_size;
    // A router near a tie can take another expert (or group) in one engine than in the
    // other (they round differently) at one position, and that step's distribution then
    // differs by more: two such steps per file are allowed (on an AVX-512 CPU the V3
    // Q5_0 and Q4_K_M files each have two, 0.22-0.27 apart, every other step within 0.055). Its greedy token may differ
    // too, by no more than the step moved: these random models' top tokens lie within a few hundredths of each other.
    // (Seen: V3 Q5_0, a group gap of 0.0005 at one decode step; V3 Q4_K_M, an expert gap of 0.003; V2-Lite Q5_1, 0.0003
    // in the prompt; each moved its step by 0.4-0.55 and its argmax, and latte's own MLA modes or ISAs split the same
    // way there.) A wrong kernel or layout moves every step.
    double worst = 0;
    int steps_past_tolerance = 0;
    for (int s = 0; s < kSteps; ++s) {
      // Row kPrompt.size() - 1 + s predicts llama.cpp's step s.
      const float* row = logits.data() + (kPrompt.size() - 1 + s) * vocab;
      const std::vector<double> lp = LogSoftmax(row, vocab);
      const int32_t want = steps[s]["token"];
      const int32_t got = static_cast<int32_t>(std::max_element(lp.begin(), lp.end()) - lp.begin());
      double step_worst = 0;
      for (const json& top : steps[s]["top"]) {
        step_worst = std::max(step_worst, std::abs(lp[top[0].get<int32_t>()] - top[1].get<double>()));
      }
      const bool past = step_worst > c.logprob_tolerance;
      // A different argmax is allowed only at a near tie: the two within the tolerance
      // (at the step past it, within what the step moved).
      if (got != want) {
        EXPECT_LE(lp[got] - lp[want], past ? step_worst : c.logprob_tolerance)
            << "step " << s << ": latte " << got << ", llama.cpp " << want << " (the step differs by " << step_worst
            << ")";
      }
      if (past) {
        ++steps_past_tolerance;
      } else {
        worst = std::max(worst, step_worst);
      }
    }
    EXPECT_LE(steps_past_tolerance, 2) << "steps whose top log-probabilities differ by more than "
                                       << c.logprob_tolerance;
    std::printf("%s: largest log-prob difference %.4f (steps past the tolerance: %d)\n",
                fs::path(paths[i]).filename().c_str(), worst, steps_past_tolerance);
  }
}

TEST(GgufLlamaCpp, TokenizerEncodesAsLlamaCpp) {
  REQUIRE_LLAMACPP();
  const std::string path = Export(Model(Shape::kV3), "Q8_0", GgufExportLayout::kSplitKvB);
  const std::vector<std::string> texts = {
      "Tom has 25 apples. He buys 17 more apples.",
      "  leading spaces and\ttabs\nnew lines 1234567 digits",
      "Ünïcödé, 中文, emoji 😀 and punctuation!?;",
      "<｜begin▁of▁sentence｜>special <｜User｜>Hi<｜Assistant｜>",
  };
  const std::vector<json> answers = LlamaCpp({{{"model", path}, {"tokenize", texts}}});
  ASSERT_EQ(answers.size(), 1u);
  auto files = ModelFiles::Find(path);
  ASSERT_TRUE(files.ok());
  auto tokenizer = files->LoadTokenizer();
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ((*tokenizer)->Encode(texts[i]), answers[0]["tokens"][i].get<std::vector<int32_t>>()) << texts[i];
  }
}

}  // namespace
}  // namespace latte
