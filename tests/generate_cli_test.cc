// `latte generate` end to end: the ids it prints and the .npy it writes match an
// in-process greedy run of the same model.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/npy.h"
#include "greedy_generate.h"
#include "model/deepseek.h"
#include "run_command.h"
#include "test_models.h"

namespace latte {
namespace {

using testing_process::RunCommand;

TEST(GenerateCli, IdsAndLogitsFileMatchInProcessRun) {
  const std::string dir = testing_models::MakeModel("tiny", MakeModelOverrides{});
  const std::string npy = testing_models::TempRoot() + "/logits.npy";
  const std::vector<int32_t> prompt = {3, 141, 59, 26, 5};
  const int64_t max_tokens = 7;
  // --huge-pages serves a copy of the same bytes: the in-process run below
  // (default: an mmap) must match it bit for bit.
  const std::pair<const char*, const char*> runs[] = {
      {"absorbed", ""}, {"materialized", ""}, {"naive", ""}, {"absorbed", " --huge-pages"}};
  for (const auto& [mode, extra] : runs) {
    SCOPED_TRACE(std::string(mode) + extra);
    int code = 0;
    const std::string out = RunCommand(std::string(LATTE_BINARY) + " generate --model " + dir +
                                           " --prompt-ids 3,141,59,26,5 --max-tokens 7 --threads 2 --mla-mode " + mode +
                                           extra + " --logits-out " + npy + " 2>/dev/null",
                                       &code);
    ASSERT_EQ(code, 0) << out;

    auto weights = ModelWeights::Load(dir, LoadOptions{*ParseMlaMode(mode), false});
    ASSERT_TRUE(weights.ok());
    DeepSeekModel model(*weights.value());
    auto expected = GreedyGenerate(model, prompt, max_tokens, true);
    ASSERT_TRUE(expected.ok());
    std::string ids;
    for (size_t i = 0; i < expected->tokens.size(); ++i) ids += (i ? "," : "") + std::to_string(expected->tokens[i]);
    EXPECT_EQ(out, ids + "\n");

    std::vector<int64_t> shape;
    auto logits = ReadNpyF32(npy, &shape);
    ASSERT_TRUE(logits.ok()) << logits.status().message();
    const int64_t vocab = weights.value()->config().vocab_size;
    ASSERT_EQ(shape, (std::vector<int64_t>{static_cast<int64_t>(prompt.size()) + max_tokens - 1, vocab}));
    ASSERT_EQ(logits->size(), expected->logits.size());
    for (size_t i = 0; i < logits->size(); ++i) ASSERT_EQ((*logits)[i], expected->logits[i]) << i;
    // Row P-1 predicts the first generated token, row P+i the token after generated i.
    for (int64_t i = 0; i < max_tokens; ++i) {
      const float* row = logits->data() + (prompt.size() - 1 + i) * vocab;
      EXPECT_EQ(ArgMax(row, vocab), expected->tokens[i]);
    }
  }
}

TEST(GenerateCli, BadArgumentsAreOneLineErrors) {
  const std::string dir = testing_models::MakeModel("tiny", MakeModelOverrides{});
  for (const std::string args : {"--prompt-ids 1,x,3", "--prompt-ids 1,2 --mla-mode fast", "--prompt-ids 1,99999",
                                 "--prompt-ids 1,2 --max-tokens 0"}) {
    SCOPED_TRACE(args);
    int code = 0;
    const std::string err =
        RunCommand(std::string(LATTE_BINARY) + " generate --model " + dir + " " + args + " 2>&1 >/dev/null", &code);
    EXPECT_NE(code, 0);
    // Exactly one error line, naming the command (load progress may precede it).
    std::istringstream lines(err);
    int error_lines = 0;
    for (std::string line; std::getline(lines, line);) {
      if (line.find("error") != std::string::npos) {
        ++error_lines;
        EXPECT_EQ(line.rfind("latte generate: error: ", 0), 0u) << line;
      }
    }
    EXPECT_EQ(error_lines, 1) << err;
    EXPECT_NE(err.find("error"), std::string::npos) << err;
  }
}

// Writes bf16 NaN (0x7fc0) over every element of `tensor` in dir/model.safetensors.
void PoisonBf16Tensor(const std::string& dir, const std::string& tensor) {
  const std::string path = dir + "/model.safetensors";
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(file) << path;
  uint64_t header_size = 0;
  file.read(reinterpret_cast<char*>(&header_size), 8);
  std::string header(header_size, '\0');
  file.read(header.data(), static_cast<std::streamsize>(header_size));
  const nlohmann::json entry = nlohmann::json::parse(header).at(tensor);
  ASSERT_EQ(entry.at("dtype"), "BF16");
  const uint64_t begin = entry.at("data_offsets")[0], end = entry.at("data_offsets")[1];
  const std::string nans = [&] {
    std::string bytes;
    for (uint64_t i = begin; i < end; i += 2) bytes += std::string("\xc0\x7f", 2);
    return bytes;
  }();
  file.seekp(static_cast<std::streamoff>(8 + header_size + begin));
  file.write(nans.data(), static_cast<std::streamsize>(nans.size()));
  ASSERT_TRUE(file.good());
}

// Weights that overflow end the request once, saying the logits are not finite and
// naming the first sublayer whose output went NaN, instead of streaming token 0.
TEST(GenerateCli, NonFiniteWeightsEndTheRequestNamingTheLayer) {
  const std::string source = testing_models::MakeModel("tiny", MakeModelOverrides{});
  const std::pair<const char*, const char*> cases[] = {
      {"model.layers.1.self_attn.o_proj.weight", "layer 1's attention"},
      {"model.layers.0.mlp.down_proj.weight", "layer 0's dense MLP"},
      {"model.layers.2.mlp.shared_experts.down_proj.weight", "layer 2's MoE"}};
  for (const auto& [tensor, site] : cases) {
    SCOPED_TRACE(tensor);
    const std::string dir = testing_models::TempRoot() + "/poisoned";
    std::filesystem::remove_all(dir);
    std::filesystem::copy(source, dir);
    PoisonBf16Tensor(dir, tensor);
    for (const char* mode : {"absorbed", "materialized", "naive"}) {
      int code = 0;
      const std::string out = RunCommand(std::string(LATTE_BINARY) + " generate --model " + dir +
                                             " --prompt-ids 3,141,59 --max-tokens 4 --mla-mode " + mode + " 2>&1",
                                         &code);
      EXPECT_EQ(code, 1) << mode << ": " << out;
      const std::string expected = std::string(
                                       "logits are not finite (NaN or Inf) at position 2; this step's first "
                                       "NaN/Inf came out of ") +
                                   site;
      EXPECT_NE(out.find(expected), std::string::npos) << mode << ": " << out;
      EXPECT_EQ(out.find("not finite"), out.rfind("not finite")) << "reported once: " << out;
    }
  }
}

}  // namespace
}  // namespace latte
