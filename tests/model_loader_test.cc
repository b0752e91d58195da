// Loading a model directory: errors that only the model knows (config keys, the
// expected tensor set and shapes, fp8 scales), V3's extra MTP layer, and fp8
// checkpoints against the same weights dequantized and saved as bf16. The
// file-level checks (header, offsets, overlaps, shards) are in safetensors_test.cc.
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/deepseek.h"
#include "model/model_weights.h"
#include "model/safetensors.h"
#include "model/tensor_specs.h"
#include "test_models.h"

namespace latte {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing_models::MakeModel;
using testing_models::TempRoot;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A copy of model `src` at a fresh path; `mutate` edits the tensor list before it
// is written (one safetensors file) and `edit_config` the config.json.
struct TensorCopy {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
std::string CopyModel(const std::string& src, const std::string& name,
                      const std::function<void(std::vector<TensorCopy>&)>& mutate,
                      const std::function<void(json&)>& edit_config = nullptr) {
  const std::string dst = TempRoot() + "/" + name;
  fs::remove_all(dst);
  fs::create_directories(dst);
  json config = json::parse(ReadText(src + "/config.json"));
  if (edit_config) edit_config(config);
  WriteText(dst + "/config.json", config.dump(2));
  auto ck = Checkpoint::Open(src);
  EXPECT_TRUE(ck.ok()) << ck.status().message();
  std::vector<TensorCopy> tensors;
  for (const TensorInfo& t : ck->tensors()) {
    tensors.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  }
  mutate(tensors);
  SafetensorsWriter writer;
  for (TensorCopy& t : tensors) writer.Add(t.name, t.dtype, t.shape, std::move(t.bytes));
  const Status st = writer.Write(dst + "/model.safetensors");
  EXPECT_TRUE(st.ok()) << st.message();
  return dst;
}

std::string TinyBf16() { return MakeModel("tiny", MakeModelOverrides{}); }
std::string TinyFp8() {
  MakeModelOverrides o;
  o.dtype = CheckpointDType::kFp8;
  return MakeModel("tiny", o);
}

std::string LoadError(const std::string& dir) {
  auto w = ModelWeights::Load(dir, LoadOptions{MlaMode::kAbsorbed, false});
  EXPECT_FALSE(w.ok()) << "loaded a broken model from " << dir;
  const std::string msg = w.ok() ? "" : w.status().message();
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "error is not one line: " << msg;
  return msg;
}

TEST(ModelLoader, MissingConfigKeyNamesFileAndKey) {
  const std::string dir = CopyModel(
      TinyBf16(), "no-key", [](auto&) {}, [](json& c) { c.erase("kv_lora_rank"); });
  const std::string msg = LoadError(dir);
  EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kv_lora_rank"), std::string::npos) << msg;
}

TEST(ModelLoader, MissingTensorNamesIt) {
  const std::string name = "model.layers.1.self_attn.kv_b_proj.weight";
  const std::string dir = CopyModel(TinyBf16(), "no-tensor", [&](std::vector<TensorCopy>& ts) {
    std::erase_if(ts, [&](const TensorCopy& t) { return t.name == name; });
  });
  const std::string msg = LoadError(dir);
  EXPECT_NE(msg.find("missing tensor \"" + name + "\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
}

TEST(ModelLoader, WrongShapeNamesTensorAndBothShapes) {
  const std::string name = "model.layers.0.self_attn.q_b_proj.weight";
  const std::string dir = CopyModel(TinyBf16(), "bad-shape", [&](std::vector<TensorCopy>& ts) {
    for (auto& t : ts) {
      if (t.name == name) std::swap(t.shape[0], t.shape[1]);  // same bytes, transposed shape
    }
  });
  const std::string msg = LoadError(dir);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("[48, 96]"), std::string::npos) << msg;  // stored
  EXPECT_NE(msg.find("[96, 48]"), std::string::npos) << msg;  // [H·(d_n+d_r), d_cq] = [4·24, 48]
}

TEST(ModelLoader, WrongShapeOfNonSquareTensor) {
  const std::string name = "model.layers.2.mlp.experts.3.up_proj.weight";
  const std::string dir = CopyModel(TinyBf16(), "bad-shape2", [&](std::vector<TensorCopy>& ts) {
    for (auto& t : ts) {
      if (t.name == name) std::swap(t.shape[0], t.shape[1]);
    }
  });
  const std::string msg = LoadError(dir);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("[64, 32]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[32, 64]"), std::string::npos) << msg;
}

TEST(ModelLoader, ScaleInvOfWrongShapeNamesIt) {
  const std::string name = "model.layers.0.self_attn.kv_b_proj.weight_scale_inv";
  const std::string dir = CopyModel(TinyFp8(), "bad-scale", [&](std::vector<TensorCopy>& ts) {
    for (auto& t : ts) {
      if (t.name != name) continue;
      const float scales[2] = {0.01f, 0.02f};
      t.shape = {2, 1};
      t.bytes.assign(reinterpret_cast<const uint8_t*>(scales), reinterpret_cast<const uint8_t*>(scales) + 8);
    }
  });
  const std::string msg = LoadError(dir);
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 1]"), std::string::npos) << msg;
}

TEST(ModelLoader, MissingScaleInvNamesIt) {
  const std::string name = "model.layers.1.self_attn.q_b_proj.weight_scale_inv";
  const std::string dir = CopyModel(TinyFp8(), "no-scale", [&](std::vector<TensorCopy>& ts) {
    std::erase_if(ts, [&](const TensorCopy& t) { return t.name == name; });
  });
  EXPECT_NE(LoadError(dir).find(name), std::string::npos);
}

TEST(ModelLoader, Fp8WithoutQuantizationConfigIsAnError) {
  const std::string dir = CopyModel(
      TinyFp8(), "no-qconfig", [](auto&) {}, [](json& c) { c.erase("quantization_config"); });
  EXPECT_NE(LoadError(dir).find("quantization_config"), std::string::npos);
}

TEST(ModelLoader, Fp8NormIsAnError) {
  const std::string name = "model.layers.0.input_layernorm.weight";
  const std::string dir = CopyModel(TinyBf16(), "fp8-norm", [&](std::vector<TensorCopy>& ts) {
    for (auto& t : ts) {
      if (t.name != name) continue;
      t.dtype = DType::kF8E4M3;
      t.bytes.resize(t.bytes.size() / 2);
    }
  });
  EXPECT_NE(LoadError(dir).find(name), std::string::npos);
}

// A config.json that names far more layers than the checkpoint holds
// fails on the tensor names at once (it took 25 s and 7.9 GB before "missing tensor").
TEST(ModelLoader, MoreLayersThanTheCheckpointFailAtOnce) {
  // A million layers is refused by config.json's own bounds (over 2^20 tensors), before
  // any file is read; 20,000 (880,003 tensors, within the bound) by the first missing
  // tensor name in the index, before any weight is allocated.
  const std::string million = CopyModel(
      TinyBf16(), "million-layers", [](auto&) {}, [](json& c) { c["num_hidden_layers"] = 1000000; });
  const std::string too_many = LoadError(million);
  EXPECT_NE(too_many.find("num_hidden_layers 1000000"), std::string::npos) << too_many;
  EXPECT_NE(too_many.find("more than latte accepts"), std::string::npos) << too_many;

  const std::string dir = CopyModel(
      TinyBf16(), "many-layers", [](auto&) {}, [](json& c) { c["num_hidden_layers"] = 20000; });
  const std::string msg = LoadError(dir);
  EXPECT_NE(msg.find("missing tensor \"model.layers.3.input_layernorm.weight\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("20000"), std::string::npos) << msg;
  // With --huge-pages the headers are checked before the copy reads any data: the one
  // line is the error, with no "read into 2 MiB pages" progress before it.
  const std::string err = TempRoot() + "/many-layers.err";
  const int status = std::system(
      (std::string(LATTE_BINARY) + " generate --model " + dir + " --prompt-ids 1 --huge-pages >/dev/null 2>" + err)
          .c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string text = ReadText(err);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_NE(text.find("missing tensor \"model.layers.3.input_layernorm.weight\""), std::string::npos) << text;
}

// A config value latte does not implement is refused by name.
TEST(ModelLoader, UnimplementedConfigValuesAreRefusedByName) {
  const std::string gelu = CopyModel(
      TinyBf16(), "gelu", [](auto&) {}, [](json& c) { c["hidden_act"] = "gelu"; });
  const std::string msg = LoadError(gelu);
  EXPECT_NE(msg.find("hidden_act"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gelu"), std::string::npos) << msg;
  const std::string bias = CopyModel(
      TinyBf16(), "attention-bias", [](auto&) {}, [](json& c) { c["attention_bias"] = true; });
  EXPECT_NE(LoadError(bias).find("attention_bias"), std::string::npos);
}

// Weights that make the logits NaN end the request with that said,
// not a stream of token 0.
TEST(ModelLoader, NonFiniteLogitsAreReported) {
  const std::string dir = CopyModel(TinyBf16(), "nan-norm", [](std::vector<TensorCopy>& ts) {
    for (auto& t : ts) {
      if (t.name != "model.norm.weight") continue;
      ASSERT_EQ(t.dtype, DType::kBF16);
      for (size_t i = 0; i + 1 < t.bytes.size(); i += 2) {  // bf16 quiet NaN 0x7FC0, little-endian
        t.bytes[i] = 0xC0;
        t.bytes[i + 1] = 0x7F;
      }
    }
  });
  const std::string err = TempRoot() + "/nan-norm.err", out = TempRoot() + "/nan-norm.out";
  const std::string cmd = std::string(LATTE_BINARY) + " generate --model " + dir +
                          " --prompt-ids 1,2 --max-tokens 4 -t 2 >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string text = ReadText(err);
  EXPECT_NE(text.find("latte generate: error: the request was aborted: the model's logits are not finite"),
            std::string::npos)
      << text;
  EXPECT_EQ(ReadText(out), "");  // no ids printed
}

// Same bytes with three different CLI entry points: the process exits non-zero with one line.
TEST(ModelLoader, CliReportsOneLineAndNonZeroExit) {
  const std::string dir = CopyModel(TinyBf16(), "cli-bad", [](std::vector<TensorCopy>& ts) { ts.pop_back(); });
  const std::string err = TempRoot() + "/cli-bad.err";
  const std::string cmd =
      std::string(LATTE_BINARY) + " generate --model " + dir + " --prompt-ids 1,2 --max-tokens 2 >/dev/null 2>" + err;
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  const std::string text = ReadText(err);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_NE(text.find("missing tensor"), std::string::npos) << text;
}

std::vector<float> Logits(const std::string& dir, const std::vector<int32_t>& tokens) {
  auto w = ModelWeights::Load(dir, LoadOptions{MlaMode::kAbsorbed, false});
  EXPECT_TRUE(w.ok()) << w.status().message();
  if (!w.ok()) return {};
  DeepSeekModel model(**w);
  const int64_t n = static_cast<int64_t>(tokens.size());
  SequenceCaches caches = model.NewCaches(1, n);
  std::vector<float> logits;
  const SequenceSpan span[] = {{caches.table(0), 0, n, SpanLogits::kAll}};
  const Status st = model.Forward(tokens, span, caches.cache(), logits);
  EXPECT_TRUE(st.ok()) << st.message();
  return logits;
}

// DeepSeek-V3 ships a multi-token-prediction layer as model.layers.61: present in
// the files, not part of the model. Such tensors are skipped, not an error.
TEST(ModelLoader, LayersPastNumHiddenLayersAreSkipped) {
  const std::string src = TinyBf16();
  const std::string dir = CopyModel(src, "with-mtp", [](std::vector<TensorCopy>& ts) {
    std::vector<TensorCopy> extra;
    for (const auto& t : ts) {
      if (t.name.rfind("model.layers.0.", 0) == 0) {
        TensorCopy copy = t;
        copy.name = "model.layers.3." + t.name.substr(15);  // tiny has 3 layers: 0..2
        extra.push_back(copy);
      }
    }
    ts.insert(ts.end(), extra.begin(), extra.end());
  });
  const std::vector<int32_t> tokens = {5, 17, 300, 2, 99};
  const std::vector<float> with_mtp = Logits(dir, tokens);
  const std::vector<float> plain = Logits(src, tokens);
  ASSERT_EQ(with_mtp.size(), plain.size());
  EXPECT_EQ(with_mtp, plain);
}

// An F16 checkpoint loads (converted to the bf16 compute precision) and gives the
// logits of the bf16 checkpoint it was made from: bf16 → f16 is exact except for
// values below f16's normal range (2^-14), which lose a few low bits.
TEST(ModelLoader, F16CheckpointMatchesBf16) {
  const std::string src = TinyBf16();
  const std::string dir = CopyModel(src, "f16", [](std::vector<TensorCopy>& ts) {
    for (auto& t : ts) {
      if (t.dtype != DType::kBF16) continue;
      std::vector<uint8_t> out(t.bytes.size());
      for (size_t i = 0; i < t.bytes.size() / 2; ++i) {
        bf16 v;
        std::memcpy(&v, &t.bytes[2 * i], 2);
        const uint16_t h = F32ToF16(Bf16ToF32(v));
        std::memcpy(&out[2 * i], &h, 2);
      }
      t.dtype = DType::kF16;
      t.bytes = std::move(out);
    }
  });
  const std::vector<int32_t> tokens = {9, 8, 400, 33, 2, 71};
  const std::vector<float> a = Logits(dir, tokens);
  const std::vector<float> b = Logits(src, tokens);
  ASSERT_EQ(a.size(), b.size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  EXPECT_LE(std::sqrt(diff / ref), 1e-3);
  EXPECT_GT(ref, 0.01 * a.size());
}

// Writes the fp8 model's weights dequantized (fp8 value × its block's scale_inv) as bf16.
std::string DequantizedCopy(const std::string& fp8_dir, const std::string& name) {
  auto ck = Checkpoint::Open(fp8_dir);
  EXPECT_TRUE(ck.ok());
  json config = json::parse(ReadText(fp8_dir + "/config.json"));
  const std::vector<int64_t> block = config["quantization_config"]["weight_block_size"];
  return CopyModel(
      fp8_dir, name,
      [&](std::vector<TensorCopy>& ts) {
        std::vector<TensorCopy> out;
        for (const auto& t : ts) {
          if (t.name.size() > 10 && t.name.substr(t.name.size() - 10) == "_scale_inv") continue;
          if (t.dtype != DType::kF8E4M3) {
            out.push_back(t);
            continue;
          }
          const TensorInfo* scale = ck->Find(t.name + "_scale_inv");
          const int64_t rows = t.shape[0], cols = t.shape[1];
          const int64_t scale_cols = (cols + block[1] - 1) / block[1];
          TensorCopy bf = {t.name, DType::kBF16, t.shape, std::vector<uint8_t>(rows * cols * 2)};
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c) {
              float s;
              std::memcpy(&s, scale->data + 4 * ((r / block[0]) * scale_cols + c / block[1]), 4);
              const bf16 v = F32ToBf16(Fp8E4M3ToF32(t.bytes[r * cols + c]) * s);
              std::memcpy(&bf.bytes[2 * (r * cols + c)], &v, 2);
            }
          }
          out.push_back(std::move(bf));
        }
        ts = std::move(out);
      },
      [](json& c) { c.erase("quantization_config"); });
}

std::unique_ptr<ModelWeights> LoadFp8(const std::string& dir, MlaMode mode, Fp8Weights fp8) {
  LoadOptions o;
  o.mode = mode;
  o.progress = false;
  o.fp8 = fp8;
  auto w = ModelWeights::Load(dir, o);
  EXPECT_TRUE(w.ok()) << w.status().message();
  return w.ok() ? std::move(w).value() : nullptr;
}

// Logits [tokens.size(), vocab]: the first P tokens in one forward (m = P: the
// GEMM path), then the rest one at a time through the cache (m = 1: the GEMV path).
std::vector<float> TeacherForced(const ModelWeights& w, const std::vector<int32_t>& tokens, int64_t P) {
  DeepSeekModel model(w);
  return testing_models::PrefillThenDecode(model, tokens, P);
}

std::vector<std::string> Fp8Models() {
  MakeModelOverrides r1;
  r1.num_hidden_layers = 2;
  r1.vocab_size = 1024;
  r1.dtype = CheckpointDType::kFp8;
  std::vector<std::string> dirs = {TinyFp8()};
  if (!testing_models::SkipLargeModels()) dirs.push_back(MakeModel("r1", r1));
  return dirs;
}

const std::vector<int32_t> kFp8Tokens = {1, 50, 7, 300, 12, 480, 3, 411, 64, 5, 200, 17};
constexpr int64_t kFp8Prompt = 7;

// Fp8Weights::kDequantizeBf16 (the old load path) gives the bf16 copy's weights
// exactly, through the same kernels: the logits are identical.
TEST(ModelLoader, Fp8DequantizedEqualsItsBf16Copy) {
  for (const std::string& fp8 : Fp8Models()) {
    SCOPED_TRACE(fp8);
    const std::string bf16_dir = DequantizedCopy(fp8, fs::path(fp8).filename().string() + "-dequantized");
    const auto wa = LoadFp8(fp8, MlaMode::kAbsorbed, Fp8Weights::kDequantizeBf16);
    const auto wb = LoadFp8(bf16_dir, MlaMode::kAbsorbed, Fp8Weights::kKeep);
    ASSERT_TRUE(wa && wb);
    EXPECT_FALSE(wa->fp8_kept());
    const std::vector<float> a = TeacherForced(*wa, kFp8Tokens, kFp8Prompt);
    const std::vector<float> b = TeacherForced(*wb, kFp8Tokens, kFp8Prompt);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_FALSE(a.empty());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "at " << i;
    double sum_sq = 0;
    for (float v : a) sum_sq += double(v) * v;
    EXPECT_GT(sum_sq, 0.01 * a.size());
  }
}

// Kept fp8 against its bf16 dequantization. The kept GEMV uses the exact weights
// (e4m3 × scale) while the bf16 copy rounds each to bf16 (8 significant bits):
// a relative perturbation of up to 2^-8 per weight, RMS 2^-8/√3 ≈ 2.3e-3, which
// reaches each projection's output at about that size relative. The prefill GEMM
// dequantizes to the very same bf16 values, so its rows differ only where an
// expert sees fewer than kGemmMinRows tokens (GEMV) or through the cache. Across
// ~5 projections a layer plus lm_head the independent errors add in quadrature:
// ~2.3e-3·√(5·3 + 1) ≈ 9e-3 for the 3-layer tiny model; measured per row 3-5e-3
// (tiny) and 4.6-5.4e-3 (2-layer r1), every mode (the norms damp what the estimate
// adds up). 2e-2 leaves ~4x headroom and still catches a wrong block scale (an O(1)
// error in every row).
constexpr double kFp8KeptTolerance = 2e-2;
// Those rounding differences also move the router's scores, and where two experts'
// scores nearly tie, a token's top-k can change: a discrete step, not a small one
// (the r1 case's row 4 moved by 18% when only the GEMV's order of f32 additions
// changed). So the bound holds per teacher-forced row, and at most one row may exceed
// it, by less than kFp8FlippedRowTolerance: a flipped expert changes part of one
// layer's output, while logits unrelated to the reference's (equal norm) differ by √2.
constexpr int kFp8FlippedRowsAllowed = 1;
constexpr double kFp8FlippedRowTolerance = 0.5;

// Relative RMS difference of each row of got against ref ([rows, vocab] both).
std::vector<double> RowRelativeRms(const std::vector<float>& got, const std::vector<float>& ref, int64_t vocab) {
  std::vector<double> rel;
  for (size_t row = 0; row * vocab < ref.size(); ++row) {
    double diff = 0, norm = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double r = ref[row * vocab + v], d = double(got[row * vocab + v]) - r;
      diff += d * d;
      norm += r * r;
    }
    rel.push_back(std::sqrt(diff / norm));
  }
  return rel;
}

TEST(ModelLoader, Fp8KeptMatchesItsBf16Dequantization) {
  for (const std::string& fp8 : Fp8Models()) {
    SCOPED_TRACE(fp8);
    const auto ref_w = LoadFp8(fp8, MlaMode::kAbsorbed, Fp8Weights::kDequantizeBf16);
    ASSERT_TRUE(ref_w);
    const std::vector<float> ref = TeacherForced(*ref_w, kFp8Tokens, kFp8Prompt);
    const int64_t vocab = ref_w->config().vocab_size;
    // Naive decompresses with kv_b_proj (bf16 either way) and attends over the
    // full keys: its own rounding differences are within model_test's 1e-2.
    for (MlaMode mode : {MlaMode::kAbsorbed, MlaMode::kMaterialized, MlaMode::kNaive}) {
      SCOPED_TRACE(std::string(MlaModeName(mode)));
      const auto kept = LoadFp8(fp8, mode, Fp8Weights::kKeep);
      ASSERT_TRUE(kept);
      ASSERT_TRUE(kept->fp8_kept());
      const std::vector<float> got = TeacherForced(*kept, kFp8Tokens, kFp8Prompt);
      ASSERT_EQ(got.size(), ref.size());
      double norm = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(std::isfinite(got[i]));
        norm += double(ref[i]) * ref[i];
      }
      EXPECT_GT(norm, 0.01 * ref.size());
      const std::vector<double> rel = RowRelativeRms(got, ref, vocab);
      ASSERT_EQ(rel.size(), kFp8Tokens.size());
      std::string per_row;
      int flipped = 0;
      for (size_t row = 0; row < rel.size(); ++row) {
        char cell[16];
        std::snprintf(cell, sizeof cell, "%s%.2e", row ? " " : "", rel[row]);
        per_row += cell;
        if (rel[row] > kFp8KeptTolerance) {
          ++flipped;
          EXPECT_LE(rel[row], kFp8FlippedRowTolerance) << "row " << row;
        }
      }
      std::printf("[ fp8 keep vs bf16 ] %s %s: relative RMS difference per row %s\n", fs::path(fp8).filename().c_str(),
                  std::string(MlaModeName(mode)).c_str(), per_row.c_str());
      EXPECT_LE(flipped, kFp8FlippedRowsAllowed) << "rows past " << kFp8KeptTolerance << ": " << per_row;
      // Greedy ids: equal wherever the reference's top-1 margin exceeds twice the
      // largest logit change of that row (then no change can swap the order).
      int64_t checked = 0;
      for (size_t row = 0; row * vocab < ref.size(); ++row) {
        const float* r = ref.data() + row * vocab;
        const float* g = got.data() + row * vocab;
        double max_change = 0;
        for (int64_t v = 0; v < vocab; ++v) max_change = std::max(max_change, std::fabs(double(g[v]) - r[v]));
        const int64_t top = std::max_element(r, r + vocab) - r;
        float second = -INFINITY;
        for (int64_t v = 0; v < vocab; ++v) {
          if (v != top) second = std::max(second, r[v]);
        }
        if (r[top] - second > 2 * max_change) {
          ++checked;
          EXPECT_EQ(std::max_element(g, g + vocab) - g, top) << "row " << row;
        }
      }
      EXPECT_GE(checked, static_cast<int64_t>(kFp8Tokens.size()) / 2) << "margins too small to check ids";
    }
  }
}

// Kept fp8: every projection but kv_b_proj is an e4m3 view (no copy); the
// memory report counts 1 byte per weight plus the f32 block scales.
TEST(ModelLoader, Fp8KeptViewsAndMemory) {
  const std::string fp8 = TinyFp8();
  const auto kept = LoadFp8(fp8, MlaMode::kAbsorbed, Fp8Weights::kKeep);
  const auto deq = LoadFp8(fp8, MlaMode::kAbsorbed, Fp8Weights::kDequantizeBf16);
  ASSERT_TRUE(kept && deq);
  auto ck = Checkpoint::Open(fp8);
  ASSERT_TRUE(ck.ok());
  size_t dense = 0;
  for (const LayerWeights& lw : kept->layers()) {
    const MlaWeights& a = lw.attn;
    EXPECT_EQ(a.q_b_proj.dtype, DType::kF8E4M3);
    EXPECT_EQ(a.kv_a_proj_with_mqa.dtype, DType::kF8E4M3);
    EXPECT_EQ(a.o_proj.dtype, DType::kF8E4M3);
    EXPECT_EQ(a.kv_b_proj.dtype, DType::kBF16);
    EXPECT_EQ(a.w_uk_t.at(0).dtype, DType::kBF16);
    EXPECT_EQ(a.q_rope.at(1).dtype, DType::kF8E4M3);
    if (a.q_a_proj) {
      EXPECT_EQ(a.q_a_proj->dtype, DType::kF8E4M3);
    }
    if (!lw.is_moe) {
      for (const WeightView* v : {&lw.mlp.gate_proj, &lw.mlp.up_proj, &lw.mlp.down_proj}) {
        EXPECT_EQ(v->dtype, DType::kF8E4M3);
        dense += v->Bytes() + v->ScaleBytes();
      }
    } else {
      EXPECT_EQ(lw.moe.experts.at(0).up_proj.dtype, DType::kF8E4M3);
    }
  }
  // The views hold the file's e4m3 bytes as they are (views into the loaded
  // checkpoint, not converted copies), and exactly its scale tensor's bytes.
  const MlaWeights& a0 = kept->layers()[0].attn;
  const TensorInfo* o = ck->Find("model.layers.0.self_attn.o_proj.weight");
  ASSERT_NE(o, nullptr);
  ASSERT_EQ(a0.o_proj.Bytes(), o->nbytes);
  EXPECT_EQ(std::memcmp(a0.o_proj.data, o->data, o->nbytes), 0);
  EXPECT_EQ(a0.o_proj.ScaleBytes(), ck->Find("model.layers.0.self_attn.o_proj.weight_scale_inv")->nbytes);
  EXPECT_EQ(kept->memory().dense_mlp, dense);
  EXPECT_LT(kept->memory().Total(), deq->memory().Total());
  EXPECT_LT(kept->memory().experts, deq->memory().experts);
  EXPECT_EQ(kept->memory().embeddings, deq->memory().embeddings);  // bf16 in the file
}

TEST(ModelLoader, Fp8WeightsNames) {
  EXPECT_EQ(ParseFp8Weights("keep"), Fp8Weights::kKeep);
  EXPECT_EQ(ParseFp8Weights("bf16"), Fp8Weights::kDequantizeBf16);
  EXPECT_FALSE(ParseFp8Weights("fp8").has_value());
  EXPECT_EQ(Fp8WeightsName(Fp8Weights::kKeep), "keep");
}

}  // namespace
}  // namespace latte
