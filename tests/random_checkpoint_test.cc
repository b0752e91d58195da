// make-model's random checkpoints: byte-identical per seed, the exact tensor list of
// ExpectedTensors in each dtype, fp8 blocks that dequantize to the bf16 export,
// sharding the reader opens, a tokenizer.json that is a valid BPE model, and the
// command-line errors.
#include "synth/random_checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <omp.h>
#include <nlohmann/json.hpp>

#include "base/dtype.h"
#include "model/safetensors.h"
#include "model/tensor_specs.h"
#include "synth/tiny_tokenizer.h"

namespace latte {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Every regular file in `dir` by name, with its bytes.
std::map<std::string, std::string> ReadDir(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    files[entry.path().filename().string()] = ReadFile(entry.path().string());
  }
  return files;
}

MakeModelOverrides Overrides(CheckpointDType dtype = CheckpointDType::kBf16) {
  MakeModelOverrides overrides;
  overrides.dtype = dtype;
  return overrides;
}

RandomCheckpointOptions Options(CheckpointDType dtype, uint64_t seed = 0) {
  RandomCheckpointOptions options;
  options.dtype = dtype;
  options.seed = seed;
  return options;
}

RandomCheckpointOptions Seed(uint64_t seed) { return Options(CheckpointDType::kBf16, seed); }

ModelConfig Config(const std::string& preset, MakeModelOverrides overrides = {}) {
  auto config = MakeModelConfig(preset, overrides);
  EXPECT_TRUE(config.ok()) << config.status().message();
  return *config;
}

float ToF32(const TensorInfo& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, t.data + 4 * i, 4);
      return v;
    }
    case DType::kBF16: {
      bf16 v;
      std::memcpy(&v, t.data + 2 * i, 2);
      return Bf16ToF32(v);
    }
    case DType::kF8E4M3: return Fp8E4M3ToF32(t.data[i]);
    default: break;  // F16 and the block formats: not written here
  }
  ADD_FAILURE() << "unexpected dtype";
  return 0;
}

class RandomCheckpointTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::path(testing::TempDir()) / "random_checkpoint_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr) << std::strerror(errno);
    root_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  // Writes `config` into root_/name and returns the directory.
  std::string Write(const std::string& name, const ModelConfig& config, RandomCheckpointOptions options) {
    const std::string dir = root_ + "/" + name;
    const Status status = WriteRandomCheckpoint(config, options, dir);
    EXPECT_TRUE(status.ok()) << status.message();
    return dir;
  }

  // Checks the directory holds exactly ExpectedTensors(config) (+ scale_inv for
  // fp8 linears) with the right shapes and dtypes.
  void ExpectTensors(const std::string& dir, const ModelConfig& config, CheckpointDType dtype) {
    auto checkpoint = Checkpoint::Open(dir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().message();
    size_t expected_count = 0;
    for (const TensorSpec& spec : ExpectedTensors(config)) {
      ++expected_count;
      const TensorInfo* t = checkpoint->Find(spec.name);
      ASSERT_NE(t, nullptr) << spec.name;
      EXPECT_EQ(t->shape, spec.shape) << spec.name;
      const bool is_bias = spec.name.ends_with("e_score_correction_bias");
      DType want = DType::kBF16;
      if (dtype == CheckpointDType::kF32 || is_bias) want = DType::kF32;
      if (dtype == CheckpointDType::kFp8 && spec.kind == TensorKind::kLinear) {
        want = DType::kF8E4M3;
        const TensorInfo* scale = checkpoint->Find(spec.name + "_scale_inv");
        ASSERT_NE(scale, nullptr) << spec.name;
        EXPECT_EQ(scale->dtype, DType::kF32);
        EXPECT_EQ(scale->shape, ScaleInvShape(spec.shape, *config.quantization)) << spec.name;
        ++expected_count;
      }
      EXPECT_EQ(t->dtype, want) << spec.name;
    }
    EXPECT_EQ(checkpoint->tensors().size(), expected_count);
  }

  std::string root_;
};

TEST_F(RandomCheckpointTest, SameSeedSameBytesDifferentSeedDifferentWeights) {
  const ModelConfig config = Config("tiny");
  const auto a = ReadDir(Write("a", config, Seed(7)));
  const auto b = ReadDir(Write("b", config, Seed(7)));
  const auto c = ReadDir(Write("c", config, Seed(8)));
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 4u);  // config, weights, tokenizer, tokenizer_config
  EXPECT_NE(a.at("model.safetensors"), c.at("model.safetensors"));
  EXPECT_EQ(a.at("config.json"), c.at("config.json"));
}

// Values depend only on their index, so the bytes are the same on any thread count.
// A 4096-token vocab makes the embeddings big enough to be drawn in parallel.
TEST_F(RandomCheckpointTest, SameBytesOnAnyThreadCount) {
  MakeModelOverrides overrides = Overrides(CheckpointDType::kFp8);
  overrides.vocab_size = 4096;
  const ModelConfig config = Config("tiny", overrides);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = ReadDir(Write("one", config, Options(CheckpointDType::kFp8, 1)));
  omp_set_num_threads(4);
  const auto four = ReadDir(Write("four", config, Options(CheckpointDType::kFp8, 1)));
  omp_set_num_threads(threads);
  EXPECT_EQ(one, four);
}

TEST_F(RandomCheckpointTest, ConfigJsonRoundTrips) {
  MakeModelOverrides overrides;
  overrides.num_hidden_layers = 2;
  overrides.rope = "plain";
  const ModelConfig config = Config("tiny", overrides);
  const std::string dir = Write("m", config, {});
  auto read = ModelConfig::FromFile(dir + "/config.json");
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->ToJsonText(), config.ToJsonText());
  EXPECT_EQ(read->num_hidden_layers, 2);
  EXPECT_FALSE(read->rope_scaling.has_value());
  EXPECT_TRUE(json::parse(ReadFile(dir + "/config.json"))["rope_scaling"].is_null());
}

TEST_F(RandomCheckpointTest, EveryExpectedTensorInEachDtype) {
  const std::pair<CheckpointDType, const char*> dtypes[] = {
      {CheckpointDType::kBf16, "bf16"}, {CheckpointDType::kF32, "f32"}, {CheckpointDType::kFp8, "fp8"}};
  for (const auto& [dtype, name] : dtypes) {
    SCOPED_TRACE(name);
    const ModelConfig config = Config("tiny", Overrides(dtype));
    const std::string dir = Write(name, config, Options(dtype));
    ExpectTensors(dir, config, dtype);
  }
}

TEST_F(RandomCheckpointTest, NoQLoraWritesPlainQProj) {
  MakeModelOverrides overrides;
  overrides.no_q_lora = true;
  const ModelConfig config = Config("tiny", overrides);
  EXPECT_FALSE(config.q_lora_rank.has_value());
  const std::string dir = Write("m", config, {});
  ExpectTensors(dir, config, CheckpointDType::kBf16);
  auto checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok());
  EXPECT_NE(checkpoint->Find("model.layers.0.self_attn.q_proj.weight"), nullptr);
  EXPECT_EQ(checkpoint->Find("model.layers.0.self_attn.q_a_proj.weight"), nullptr);
  EXPECT_EQ(checkpoint->Find("model.layers.0.self_attn.q_b_proj.weight"), nullptr);
  EXPECT_TRUE(json::parse(ReadFile(dir + "/config.json"))["q_lora_rank"].is_null());
}

// fp8 and bf16 exports of one seed draw the same values, so dequantized fp8 must
// sit within e4m3 rounding of the bf16 weights. Widths that are not multiples of
// 128 exercise partial blocks.
TEST_F(RandomCheckpointTest, Fp8DequantizesToTheBf16Export) {
  MakeModelOverrides overrides = Overrides(CheckpointDType::kFp8);
  overrides.num_hidden_layers = 2;
  ModelConfig fp8_config = Config("tiny", overrides);
  fp8_config.hidden_size = 160;
  fp8_config.intermediate_size = 272;
  ModelConfig bf16_config = fp8_config;
  bf16_config.quantization = std::nullopt;
  const std::string fp8_dir = Write("fp8", fp8_config, Options(CheckpointDType::kFp8, 3));
  const std::string bf16_dir = Write("bf16", bf16_config, Seed(3));
  ExpectTensors(fp8_dir, fp8_config, CheckpointDType::kFp8);
  auto fp8 = Checkpoint::Open(fp8_dir);
  auto ref = Checkpoint::Open(bf16_dir);
  ASSERT_TRUE(fp8.ok() && ref.ok());

  // e4m3 keeps 3 mantissa bits: rounding moves a normal value by at most 1/16 of
  // it; below 2^-6 (subnormals, steps of 2^-9) by at most 2^-10 in fp8 units.
  // The bf16 reference adds its own 2^-9 relative rounding.
  constexpr float kFp8RelativeError = 1.0f / 16;
  constexpr float kFp8SubnormalError = 1.0f / 1024;
  constexpr float kBf16RelativeError = 1.0f / 256;
  int64_t checked_blocks = 0;
  for (const TensorSpec& spec : ExpectedTensors(fp8_config)) {
    if (spec.kind != TensorKind::kLinear) continue;
    const TensorInfo* w = fp8->Find(spec.name);
    const TensorInfo* scale = fp8->Find(spec.name + "_scale_inv");
    const TensorInfo* r = ref->Find(spec.name);
    ASSERT_TRUE(w && scale && r) << spec.name;
    const int64_t rows = spec.shape[0], cols = spec.shape[1];
    const int64_t col_blocks = scale->shape[1];
    std::vector<float> block_max(scale->NumElements(), 0.0f);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t b = (i / 128) * col_blocks + j / 128;
        const float s = ToF32(*scale, b);
        const float got = ToF32(*w, i * cols + j) * s;
        const float want = ToF32(*r, i * cols + j);
        const float tolerance = std::fabs(want) * (kFp8RelativeError + kBf16RelativeError) + s * kFp8SubnormalError;
        ASSERT_NEAR(got, want, tolerance) << spec.name << " [" << i << ", " << j << "]";
        block_max[b] = std::max(block_max[b], std::fabs(got));
      }
    }
    // Each block's largest value maps to +-448: its scale is max|w| / 448.
    for (int64_t b = 0; b < scale->NumElements(); ++b) {
      EXPECT_FLOAT_EQ(block_max[b], 448.0f * ToF32(*scale, b)) << spec.name << " block " << b;
      ++checked_blocks;
    }
  }
  EXPECT_GT(checked_blocks, 0);
}

// Shards open through the index and hold the same bytes as the single file: a
// tensor's values do not depend on where it lands.
TEST_F(RandomCheckpointTest, ShardedMatchesSingleFile) {
  const ModelConfig config = Config("tiny", Overrides(CheckpointDType::kFp8));
  const RandomCheckpointOptions single_options = Options(CheckpointDType::kFp8, 5);
  RandomCheckpointOptions sharded_options = single_options;
  sharded_options.shard_bytes = 60'000;
  const std::string single_dir = Write("single", config, single_options);
  const std::string sharded_dir = root_ + "/sharded";
  RandomCheckpointSummary summary;
  ASSERT_TRUE(WriteRandomCheckpoint(config, sharded_options, sharded_dir, &summary).ok());
  EXPECT_GT(summary.shards, 2);

  const json index = json::parse(ReadFile(sharded_dir + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), summary.bytes);
  EXPECT_TRUE(fs::exists(sharded_dir + "/model-00001-of-0000" + std::to_string(summary.shards) + ".safetensors"));
  EXPECT_FALSE(fs::exists(sharded_dir + "/model.safetensors"));
  ExpectTensors(sharded_dir, config, CheckpointDType::kFp8);

  auto single = Checkpoint::Open(single_dir);
  auto sharded = Checkpoint::Open(sharded_dir);
  ASSERT_TRUE(single.ok() && sharded.ok()) << sharded.status().message();
  EXPECT_EQ(sharded->TotalBytes(), summary.bytes);
  for (const TensorInfo& t : single->tensors()) {
    const TensorInfo* s = sharded->Find(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    ASSERT_EQ(s->nbytes, t.nbytes);
    EXPECT_EQ(std::memcmp(s->data, t.data, t.nbytes), 0) << t.name;
    // A weight and its scale_inv stay in one shard.
    if (const TensorInfo* scale = sharded->Find(t.name + "_scale_inv")) {
      EXPECT_EQ(scale->file, s->file) << t.name;
    }
  }

  // Rewriting as one file removes the shards and the index.
  ASSERT_TRUE(WriteRandomCheckpoint(config, single_options, sharded_dir).ok());
  EXPECT_FALSE(fs::exists(sharded_dir + "/model.safetensors.index.json"));
  EXPECT_EQ(ReadDir(sharded_dir), ReadDir(single_dir));
}

// The scales of random_checkpoint.h, measured on the f32 export.
TEST_F(RandomCheckpointTest, WeightScalesKeepActivationsNearUnitRms) {
  const ModelConfig config = Config("tiny", Overrides(CheckpointDType::kF32));
  auto checkpoint = Checkpoint::Open(Write("m", config, Options(CheckpointDType::kF32)));
  ASSERT_TRUE(checkpoint.ok());
  auto moments = [](const TensorInfo& t) {
    double sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < t.NumElements(); ++i) {
      const double v = ToF32(t, i);
      EXPECT_TRUE(std::isfinite(v)) << t.name;
      sum += v;
      sum_sq += v * v;
    }
    const double n = static_cast<double>(t.NumElements());
    return std::pair<double, double>(sum / n, std::sqrt(sum_sq / n - (sum / n) * (sum / n)));
  };
  const double layers = static_cast<double>(config.num_hidden_layers);
  const double d = static_cast<double>(config.hidden_size);
  constexpr double kStdTolerance = 0.1;  // relative; thousands of samples per tensor
  for (const TensorSpec& spec : ExpectedTensors(config)) {
    const auto [mean, stddev] = moments(*checkpoint->Find(spec.name));
    if (spec.kind == TensorKind::kVector) {
      const bool norm = spec.name.ends_with("norm.weight");
      EXPECT_NEAR(mean, norm ? 1.0 : 0.0, 0.05) << spec.name;
      EXPECT_LT(stddev, 0.1) << spec.name;
      continue;
    }
    double want = 1.0 / std::sqrt(static_cast<double>(spec.shape[1]));
    if (spec.name == "model.embed_tokens.weight") want = 1.0;
    if (spec.name.ends_with("o_proj.weight") || spec.name.ends_with("down_proj.weight")) {
      want /= std::sqrt(2 * layers);
    }
    if (spec.kind == TensorKind::kRouter || spec.name == "lm_head.weight") want = 1 / std::sqrt(d);
    EXPECT_NEAR(stddev, want, kStdTolerance * want) << spec.name;
    EXPECT_NEAR(mean, 0.0, 0.1 * want) << spec.name;
  }
}

TEST_F(RandomCheckpointTest, TokenizerIsAValidByteLevelBpe) {
  const ModelConfig config = Config("tiny");
  const std::string dir = Write("m", config, {});
  const json tok = json::parse(ReadFile(dir + "/tokenizer.json"));
  const json& model = tok["model"];
  EXPECT_EQ(model["type"], "BPE");
  EXPECT_EQ(tok["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(tok["pre_tokenizer"]["type"], "Sequence");
  EXPECT_EQ(tok["pre_tokenizer"]["pretokenizers"].back()["type"], "ByteLevel");
  EXPECT_EQ(tok["pre_tokenizer"]["pretokenizers"].back()["use_regex"], false);

  std::set<int64_t> ids;
  const json& vocab = model["vocab"];
  for (const auto& [token, id] : vocab.items()) {
    EXPECT_TRUE(ids.insert(id.get<int64_t>()).second) << "duplicate id " << id;
    EXPECT_LT(id.get<int64_t>(), config.vocab_size);
  }
  EXPECT_TRUE(vocab.contains("Ġ"));  // byte 0x20 under GPT-2's byte-to-unicode
  EXPECT_TRUE(vocab.contains("Ċ"));  // byte 0x0a
  EXPECT_TRUE(vocab.contains("a"));
  EXPECT_TRUE(vocab.contains("Ġthe"));
  // Each merge joins two tokens that exist into one that exists.
  for (const json& merge : model["merges"]) {
    const std::string m = merge.get<std::string>();
    const size_t space = m.find(' ');
    ASSERT_NE(space, std::string::npos) << m;
    const std::string left = m.substr(0, space), right = m.substr(space + 1);
    EXPECT_TRUE(vocab.contains(left)) << m;
    EXPECT_TRUE(vocab.contains(right)) << m;
    EXPECT_TRUE(vocab.contains(left + right)) << m;
  }

  std::map<std::string, int64_t> specials;
  for (const json& added : tok["added_tokens"]) {
    const int64_t id = added["id"].get<int64_t>();
    // As in DeepSeek-V3's file, each added token sits in model.vocab at its own id
    // (Hugging Face renumbers an added token the vocab does not agree with).
    const std::string content = added["content"].get<std::string>();
    ASSERT_TRUE(vocab.contains(content)) << content;
    EXPECT_EQ(vocab[content].get<int64_t>(), id) << content;
    EXPECT_LT(id, config.vocab_size);
    EXPECT_TRUE(added["special"].get<bool>());
    specials[added["content"].get<std::string>()] = id;
  }
  EXPECT_EQ(specials.at(kBosToken), config.bos_token_id);
  EXPECT_EQ(specials.at(kEosToken), config.eos_token_id);
  EXPECT_TRUE(specials.contains(kUserToken));
  EXPECT_TRUE(specials.contains(kAssistantToken));
  // Every id of the model has a token (the ones past TinyTokenizerSize() no merge makes).
  EXPECT_EQ(static_cast<int64_t>(ids.size()), config.vocab_size);
  EXPECT_GT(config.vocab_size, TinyTokenizerSize());

  const json tok_config = json::parse(ReadFile(dir + "/tokenizer_config.json"));
  EXPECT_EQ(tok_config["bos_token"], kBosToken);
  EXPECT_EQ(tok_config["eos_token"], kEosToken);
  const std::string chat_template = tok_config["chat_template"].get<std::string>();
  EXPECT_NE(chat_template.find(kAssistantToken), std::string::npos);
}

TEST(MakeModelConfigTest, OverridesAndErrors) {
  // A vocab cut below v2-lite's bos id 100000 moves bos/eos to DeepSeek-V3's 0/1.
  MakeModelOverrides small_lite;
  small_lite.num_hidden_layers = 2;
  small_lite.vocab_size = 1024;
  auto lite = MakeModelConfig("v2-lite", small_lite);
  ASSERT_TRUE(lite.ok()) << lite.status().message();
  EXPECT_EQ(lite->bos_token_id, 0);
  EXPECT_EQ(lite->eos_token_id, 1);
  EXPECT_FALSE(lite->q_lora_rank.has_value());
  auto fp8 = MakeModelConfig("r1", Overrides(CheckpointDType::kFp8));
  ASSERT_TRUE(fp8.ok());
  ASSERT_TRUE(fp8->quantization.has_value());
  EXPECT_EQ(fp8->quantization->block_rows, 128);

  EXPECT_FALSE(MakeModelConfig("huge", {}).ok());
  MakeModelOverrides no_layers, small_vocab, bad_rope;
  no_layers.num_hidden_layers = 0;
  small_vocab.vocab_size = 100;
  bad_rope.rope = "ntk";
  EXPECT_FALSE(MakeModelConfig("tiny", no_layers).ok());
  EXPECT_FALSE(MakeModelConfig("tiny", small_vocab).ok());
  EXPECT_FALSE(MakeModelConfig("tiny", bad_rope).ok());
  // The dtype must agree with quantization_config.
  EXPECT_FALSE(WriteRandomCheckpoint(*fp8, {}, testing::TempDir() + "/never").ok());
}

// ---- The command line ----------------------------------------------------------------

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};

CommandResult RunLatte(const std::string& args) {
  const std::string command = std::string(LATTE_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, ""};
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

TEST_F(RandomCheckpointTest, CommandWritesTheDirectory) {
  const std::string dir = root_ + "/cli";
  const CommandResult r = RunLatte(
      "make-model --preset tiny --layers 2 --dtype fp8 --seed 9 "
      "--shard-bytes 100000 --out " +
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(dir + "\n"), std::string::npos) << r.output;
  auto config = ModelConfig::FromFile(dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->num_hidden_layers, 2);
  ExpectTensors(dir, *config, CheckpointDType::kFp8);
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
}

TEST(MakeModelCommandTest, BadArgumentsFailWithOneLine) {
  const std::string out = testing::TempDir() + "/make_model_bad_args";
  const std::string bad_args[] = {"--preset huge --out " + out,
                                  "--preset tiny --layers 0 --out " + out,
                                  "--preset tiny --dtype int4 --out " + out,
                                  "--preset tiny --rope ntk --out " + out,
                                  "--preset tiny --shard-bytes 0 --out " + out,
                                  "--preset tiny --out /proc/latte_cannot_write_here"};
  for (const std::string& args : bad_args) {
    const CommandResult r = RunLatte("make-model " + args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << ": " << r.output;
    EXPECT_NE(r.output.find("error"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace latte
