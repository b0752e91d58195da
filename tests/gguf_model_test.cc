// GGUF files of llama.cpp's deepseek2 architecture as latte's model: the config from
// the metadata equals config.json's, both kv_b layouts, the tensors as stored, against
// independent computations: the same weights as a safetensors directory (F32 and BF16:
// the same logits; block formats: the GGUF's own values dequantized and written as f32
// safetensors, so the only difference left is the kernels' int8 rounding of x), and the
// refusals (another architecture, a type latte does not compute on, broken k_b).
// The container itself (header, metadata, offsets, damage) is tested in gguf_file_test.cc.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/gguf_file.h"
#include "engine/model_files.h"
#include "gguf_test_models.h"
#include "kernels/weight_rows.h"
#include "model/cost_model.h"
#include "model/deepseek.h"
#include "model/gguf_checkpoint.h"
#include "model/model_weights.h"
#include "model/safetensors.h"
#include "synth/gguf_export.h"
#include "synth/random_checkpoint.h"
#include "test_models.h"

namespace latte {
namespace {

namespace fs = std::filesystem;
using testing_models::PrefillThenDecode;
using testing_models::RelativeRms;
using testing_models::TempRoot;

// Every token takes every expert (top-8 of 8, every group): the logits are then
// continuous in the weights, and two computations that round differently cannot part at
// a near tie of the router. (The routing itself is compared with llama.cpp in
// gguf_llamacpp_test.cc.)
using Shape = testing_models::GgufShape;

std::string ModelDir(Shape shape, CheckpointDType dtype) {
  return testing_models::GgufTestModel(
      "gguf-src-" + std::to_string(static_cast<int>(shape)) + "-" + std::to_string(static_cast<int>(dtype)),
      testing_models::GgufTestConfig(shape, /*experts_per_token=*/8), dtype, /*seed=*/11);
}

std::string Export(const std::string& dir, const std::string& type, GgufExportLayout layout) {
  return testing_models::ExportTestGguf(dir, type, layout);
}

LoadOptions Quiet(MlaMode mode = MlaMode::kAbsorbed) {
  LoadOptions o;
  o.mode = mode;
  o.progress = false;
  return o;
}

const std::vector<int32_t> kTokens = {5, 300, 17, 42, 99, 256, 3, 77, 150, 8};

std::vector<float> Logits(const std::string& model, MlaMode mode = MlaMode::kAbsorbed) {
  auto w = ModelWeights::Load(model, Quiet(mode));
  EXPECT_TRUE(w.ok()) << w.status().message();
  if (!w.ok()) return {};
  DeepSeekModel m(**w);
  return PrefillThenDecode(m, kTokens, 6);
}

TEST(GgufModel, ConfigFromMetadataIsConfigJsons) {
  for (Shape shape : {Shape::kV3, Shape::kV2Lite}) {
    for (GgufExportLayout layout : {GgufExportLayout::kSplitKvB, GgufExportLayout::kKvB}) {
      const std::string dir = ModelDir(shape, CheckpointDType::kBf16);
      const std::string path = Export(dir, "BF16", layout);
      auto gguf = GgufModel::Open(path);
      ASSERT_TRUE(gguf.ok()) << gguf.status().message();
      auto config = ConfigFromGguf(*gguf, path);
      ASSERT_TRUE(config.ok()) << config.status().message();
      auto want = ModelConfig::FromFile(dir + "/config.json");
      ASSERT_TRUE(want.ok());
      // The file stores floats as f32: compare through that rounding.
      want->rms_norm_eps = static_cast<float>(want->rms_norm_eps);
      if (want->rope_scaling) {
        want->rope_scaling->mscale_all_dim = static_cast<float>(0.1 * want->rope_scaling->mscale_all_dim) / 0.1;
        want->rope_scaling->mscale = want->rope_scaling->mscale_all_dim;
      }
      EXPECT_EQ(config->ToJsonText(), want->ToJsonText()) << path;
      EXPECT_EQ(config->q_lora_rank.has_value(), shape == Shape::kV3);
    }
  }
}

// F32 and BF16 files hold the checkpoint's own values: the same logits as the
// directory, in both kv_b layouts (the split one rebuilt to kv_b_proj exactly).
TEST(GgufModel, ScalarFilesGiveTheDirectorysLogits) {
  for (auto [dtype, type] : {std::pair{CheckpointDType::kF32, "F32"}, std::pair{CheckpointDType::kBf16, "BF16"}}) {
    const std::string dir = ModelDir(Shape::kV3, dtype);
    const std::vector<float> want = Logits(dir);
    for (GgufExportLayout layout : {GgufExportLayout::kSplitKvB, GgufExportLayout::kKvB}) {
      const std::vector<float> got = Logits(Export(dir, type, layout));
      ASSERT_EQ(got.size(), want.size());
      EXPECT_LE(RelativeRms(got, want), 1e-6) << type;
    }
  }
}

// The GGUF's tensors (HF names) dequantized and written as an f32 directory: the same
// weights computed by the f32 kernels, an independent path.
std::string DequantizedDirectory(const std::string& gguf_path, const std::string& src_dir) {
  const std::string dst = gguf_path + ".dequantized";
  fs::remove_all(dst);
  fs::create_directories(dst);
  auto gguf = GgufModel::Open(gguf_path);
  EXPECT_TRUE(gguf.ok()) << gguf.status().message();
  auto config = ConfigFromGguf(*gguf, gguf_path);
  EXPECT_TRUE(config.ok());
  auto ck = CheckpointFromGguf(std::make_shared<const GgufModel>(std::move(*gguf)), *config);
  EXPECT_TRUE(ck.ok()) << ck.status().message();
  SafetensorsWriter writer;
  for (const TensorInfo& t : ck->tensors()) {
    const int64_t cols = t.shape.back(), rows = t.NumElements() / cols;
    std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols) * sizeof(float));
    const WeightView view{t.dtype, rows, cols, cols, t.data};
    for (int64_t r = 0; r < rows; ++r) WeightRowToF32(view, r, reinterpret_cast<float*>(bytes.data()) + r * cols);
    writer.Add(t.name, DType::kF32, t.shape, std::move(bytes));
  }
  EXPECT_TRUE(writer.Write(dst + "/model.safetensors").ok());
  std::ofstream(dst + "/config.json") << config->ToJsonText();
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(src_dir + "/" + f, dst + "/" + f);
  return dst;
}

// Block formats computed as stored: against the f32 model of their own dequantized
// values. x is rounded to int8 per 32-value block in the kernels (relative error up to
// 1/254 per value, ~1/(254·√3) RMS), compounding over 3 layers: 2% of the logits' RMS
// bounds it with room; a wrong scale, nibble order or block stride is off by O(1).
TEST(GgufModel, BlockFormatsTrackTheirDequantizedValues) {
  for (Shape shape : {Shape::kV3, Shape::kV2Lite}) {
    const std::string dir = ModelDir(shape, CheckpointDType::kBf16);
    for (const char* type : {"Q8_0", "Q4_0", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS",
                             "IQ2_XXS", "IQ3_XXS", "IQ1_S", "Q4_K_M", "F16"}) {
      SCOPED_TRACE(std::string(type) + (shape == Shape::kV3 ? " V3-like" : " V2-Lite-like"));
      const std::string path = Export(dir, type, GgufExportLayout::kSplitKvB);
      const std::vector<float> got = Logits(path);
      const std::vector<float> want = Logits(DequantizedDirectory(path, dir));
      ASSERT_EQ(got.size(), want.size());
      EXPECT_LE(RelativeRms(got, want), 0.02);
      // ... and the quantization itself stays near the bf16 model (a sanity bound on
      // the exporter: 4-bit weights move logits by some percent, not by their size; 2-bit
      // ones by 0.55-0.61 of their RMS on these models (Q2_K, IQ2_XXS), IQ1_S's three
      // values per weight by 0.78-0.79).
      const std::string t = type;
      EXPECT_LE(RelativeRms(got, Logits(dir)), t == "IQ1_S" ? 0.9 : t == "Q2_K" || t == "IQ2_XXS" ? 0.8 : 0.5);
    }
  }
}

TEST(GgufModel, EveryMlaModeAgreesOnAQuantizedFile) {
  const std::string path = Export(ModelDir(Shape::kV3, CheckpointDType::kBf16), "Q4_K", GgufExportLayout::kSplitKvB);
  const std::vector<float> absorbed = Logits(path, MlaMode::kAbsorbed);
  for (MlaMode mode : {MlaMode::kNaive, MlaMode::kMaterialized}) {
    EXPECT_LE(RelativeRms(Logits(path, mode), absorbed), 0.02) << MlaModeName(mode);
  }
}

TEST(GgufModel, WeightsAreHeldAsStored) {
  const std::string path = Export(ModelDir(Shape::kV3, CheckpointDType::kBf16), "Q4_K_M", GgufExportLayout::kSplitKvB);
  auto w = ModelWeights::Load(path, Quiet());
  ASSERT_TRUE(w.ok()) << w.status().message();
  const LayerWeights& moe = (*w)->layers()[1];
  EXPECT_EQ(moe.attn.q_a_proj->dtype, DType::kQ4_K);
  EXPECT_EQ(moe.moe.experts[3].gate_proj.dtype, DType::kQ4_K);
  EXPECT_EQ(moe.moe.experts[3].down_proj.dtype, DType::kQ6_K);
  EXPECT_EQ((*w)->lm_head().dtype, DType::kQ6_K);
  EXPECT_EQ((*w)->embed_tokens().dtype, DType::kQ4_K);
  EXPECT_EQ(moe.attn.kv_b_proj.dtype, DType::kBF16);  // rebuilt for the per-head products
  // Rows that are not whole 256-value blocks take llama-quantize's Q4_K fallback, Q5_0:
  // o_proj (H·d_v = 64 columns) and attn_k_b (d_n = 32).
  EXPECT_EQ(moe.attn.o_proj.dtype, DType::kQ5_0);
  // An expert is a view into its layer's stacked tensor, not a copy.
  auto gguf = GgufModel::Open(path);
  ASSERT_TRUE(gguf.ok());
  const GgufTensor* k_b = gguf->FindTensor("blk.1.attn_k_b.weight");
  ASSERT_NE(k_b, nullptr);
  EXPECT_EQ(k_b->dtype, DType::kQ5_0);
  const GgufTensor* stacked = gguf->FindTensor("blk.1.ffn_gate_exps.weight");
  ASSERT_NE(stacked, nullptr);
  EXPECT_EQ(moe.moe.experts[3].gate_proj.Bytes(), stacked->nbytes / 8);
  // bench model's roofline counts the mix's real bytes per value: the file's own
  // projection and MLP tensors, summed from its tensor list.
  double bytes = 0, values = 0;
  for (const GgufTensor& t : gguf->tensors()) {
    const std::string& n = t.name;
    const bool matrix = n.find("attn_q") != std::string::npos || n.find("attn_kv_a_mqa") != std::string::npos ||
                        n.find("attn_output") != std::string::npos ||
                        (n.find("ffn_") != std::string::npos && n.find("norm") == std::string::npos &&
                         n.find("ffn_gate_inp") == std::string::npos);
    if (!matrix || t.shape.size() < 2) continue;
    bytes += static_cast<double>(t.nbytes);
    values += static_cast<double>(t.NumElements());
  }
  EXPECT_NEAR(MeasureWeightValueBytes(**w).matrices, bytes / values, 1e-12);
  EXPECT_GT(bytes / values, DTypeBlockBytes(DType::kQ4_K) / 256.0);  // the Q6_K tensors count
}

// ---- What --model names, and refusals ------------------------------------------------

TEST(GgufModel, TokenizerAndChatTemplateComeFromTheFile) {
  const std::string dir = ModelDir(Shape::kV3, CheckpointDType::kBf16);
  const std::string path = Export(dir, "Q8_0", GgufExportLayout::kSplitKvB);
  auto from_file = ModelFiles::Find(path);
  ASSERT_TRUE(from_file.ok()) << from_file.status().message();
  auto from_dir = ModelFiles::Find(dir);
  ASSERT_TRUE(from_dir.ok());
  EXPECT_TRUE(from_file->is_gguf());
  EXPECT_FALSE(from_dir->is_gguf());
  auto a = from_file->LoadTokenizer();
  auto b = from_dir->LoadTokenizer();
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok());
  for (int32_t id = 0; id < (*b)->vocab_size(); ++id) EXPECT_EQ((*a)->TokenBytes(id), (*b)->TokenBytes(id)) << id;
  EXPECT_EQ((*a)->bos_id(), (*b)->bos_id());
  EXPECT_EQ((*a)->eos_id(), (*b)->eos_id());
  auto ta = from_file->LoadChatTemplate();
  auto tb = from_dir->LoadChatTemplate();
  ASSERT_TRUE(ta.ok()) << ta.status().message();
  ASSERT_TRUE(tb.ok());
  const nlohmann::json context = {
      {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi there"}}}},
      {"add_generation_prompt", true}};
  EXPECT_EQ(ta->Render(context).value(), tb->Render(context).value());
  // A directory holding one GGUF is that file.
  const std::string holder = TempRoot() + "/gguf-holder";
  fs::create_directories(holder);
  fs::copy_file(path, holder + "/model.gguf", fs::copy_options::overwrite_existing);
  auto held = ModelFiles::Find(holder);
  ASSERT_TRUE(held.ok());
  EXPECT_TRUE(held->is_gguf());
  // Two are ambiguous.
  fs::copy_file(path, holder + "/other.gguf", fs::copy_options::overwrite_existing);
  auto two = ModelFiles::Find(holder);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("several GGUF models"), std::string::npos) << two.status().message();
}

// A GGUF rewritten with `edit` applied to its metadata and tensors.
std::string Rewrite(const std::string& path, const std::string& name,
                    const std::function<void(std::string& key, GgufValue& value)>& edit_metadata,
                    const std::function<bool(const GgufTensor&, GgufWriter&)>& edit_tensor) {
  auto gguf = GgufModel::Open(path);
  EXPECT_TRUE(gguf.ok());
  GgufWriter w;
  for (auto [key, value] : gguf->metadata()) {
    std::string k = key;
    if (edit_metadata) edit_metadata(k, value);
    w.Set(k, value);
  }
  for (const GgufTensor& t : gguf->tensors()) {
    if (edit_tensor && edit_tensor(t, w)) continue;
    w.AddRawTensor(t.name, t.ggml_type, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes));
  }
  const std::string out = TempRoot() + "/" + name + ".gguf";
  EXPECT_TRUE(w.Write(out).ok());
  return out;
}

std::string LoadError(const std::string& path) {
  auto w = ModelWeights::Load(path, Quiet());
  EXPECT_FALSE(w.ok()) << "loaded " << path;
  return w.ok() ? "" : w.status().message();
}

TEST(GgufModel, RefusalsNameWhatIsWrong) {
  const std::string path = Export(ModelDir(Shape::kV3, CheckpointDType::kBf16), "Q8_0", GgufExportLayout::kSplitKvB);
  const std::string llama = Rewrite(
      path, "llama",
      [](std::string& key, GgufValue& v) {
        if (key == "general.architecture") v.value = std::string("llama");
      },
      nullptr);
  EXPECT_NE(LoadError(llama).find("\"llama\": latte reads only \"deepseek2\""), std::string::npos) << LoadError(llama);

  // IQ2_XS (ggml type 17): a type latte does not compute on, named with the list.
  const std::string iq2 = Rewrite(path, "iq2", nullptr, [](const GgufTensor& t, GgufWriter& w) {
    if (t.name != "blk.1.ffn_up_exps.weight") return false;
    const int64_t cols = t.shape.back(), rows = t.NumElements() / cols;
    w.AddRawTensor(t.name, 17, t.shape, std::vector<uint8_t>(static_cast<size_t>(rows * cols / 256 * 74), 0x5a));
    return true;
  });
  const std::string msg = LoadError(iq2);
  EXPECT_NE(msg.find("\"blk.1.ffn_up_exps.weight\" is IQ2_XS"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Q4_K"), std::string::npos) << msg;

  const std::string no_v_b = Rewrite(
      path, "no-v-b", nullptr, [](const GgufTensor& t, GgufWriter&) { return t.name == "blk.0.attn_v_b.weight"; });
  EXPECT_NE(LoadError(no_v_b).find("without its attn_v_b half"), std::string::npos) << LoadError(no_v_b);

  const std::string no_norm = Rewrite(
      path, "no-norm", nullptr, [](const GgufTensor& t, GgufWriter&) { return t.name == "blk.2.ffn_norm.weight"; });
  EXPECT_NE(LoadError(no_norm).find("\"model.layers.2.post_attention_layernorm.weight\" (the GGUF metadata expects"),
            std::string::npos)
      << LoadError(no_norm);

  // A metadata key the config needs, missing: named.
  auto gguf = GgufModel::Open(path);
  ASSERT_TRUE(gguf.ok());
  {
    GgufWriter w;
    for (const auto& [key, value] : gguf->metadata()) {
      if (key != "deepseek2.embedding_length") w.Set(key, value);
    }
    for (const GgufTensor& t : gguf->tensors()) {
      w.AddRawTensor(t.name, t.ggml_type, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes));
    }
    const std::string no_key = TempRoot() + "/no-key.gguf";
    ASSERT_TRUE(w.Write(no_key).ok());
    EXPECT_NE(LoadError(no_key).find("deepseek2.embedding_length"), std::string::npos) << LoadError(no_key);
  }
  // A tensor of the wrong shape (o_proj's rows halved): both shapes named.
  const std::string short_o = Rewrite(path, "short-o", nullptr, [](const GgufTensor& t, GgufWriter& w) {
    if (t.name != "blk.1.attn_output.weight") return false;
    const size_t half = t.nbytes / 2;
    w.AddRawTensor(t.name, t.ggml_type, {t.shape[0] / 2, t.shape[1]}, std::vector<uint8_t>(t.data, t.data + half));
    return true;
  });
  EXPECT_NE(LoadError(short_o).find("\"model.layers.1.self_attn.o_proj.weight\" has shape [128, 64], the GGUF "
                                    "metadata implies [256, 64]"),
            std::string::npos)
      << LoadError(short_o);

  // A truncated file: the reader's error, naming the file.
  const std::string cut = TempRoot() + "/cut.gguf";
  fs::copy_file(path, cut, fs::copy_options::overwrite_existing);
  fs::resize_file(cut, fs::file_size(cut) / 2);
  EXPECT_NE(LoadError(cut).find("cut.gguf"), std::string::npos) << LoadError(cut);
}

}  // namespace
}  // namespace latte
