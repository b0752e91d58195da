// Random-weight model directories for tests. ctest runs every test case in its own
// process (gtest_discover_tests) and points LATTE_TEST_MODEL_CACHE at build/test-models,
// so a model is written once per build of the tests and shared; run by hand without it,
// models go to a temp dir of the process, removed at exit.
#pragma once

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "model/deepseek.h"
#include "model/model_weights.h"
#include "model/tensor_specs.h"
#include "synth/random_checkpoint.h"

namespace latte::testing_models {

// LATTE_SMALL_TESTS=1 skips the r1-shaped models (GBs of weights): for sanitizer
// builds, where they would take most of an hour. CI runs them.
inline bool SkipLargeModels() {
  const char* v = std::getenv("LATTE_SMALL_TESTS");
  return v != nullptr && std::string(v) == "1";
}

// A temp directory for this test process, removed with everything in it when the
// process exits (the r1-shaped models are GBs: leaving them would fill the disk).
class TempDirectory {
 public:
  TempDirectory() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "latte-test-XXXXXX").string();
    const char* dir = ::mkdtemp(tmpl.data());
    if (dir == nullptr) {
      ADD_FAILURE() << "mkdtemp failed for " << tmpl;
      return;
    }
    path_ = dir;
  }
  ~TempDirectory() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string TempRoot() {
  static const TempDirectory root;
  return root.path();
}

// Where MakeModel writes: one subdirectory of $LATTE_TEST_MODEL_CACHE per build of the
// test binary (so a changed generator never serves a stale model; older builds' models
// are removed), else TempRoot().
inline std::string ModelRoot() {
  static const std::string root = [] {
    const char* cache = std::getenv("LATTE_TEST_MODEL_CACHE");
    if (cache == nullptr || *cache == '\0') return TempRoot();
    std::error_code ec;
    const auto built = std::filesystem::last_write_time("/proc/self/exe", ec).time_since_epoch().count();
    const std::filesystem::path dir = std::filesystem::path(cache) / ("build-" + std::to_string(built));
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      ADD_FAILURE() << "cannot create " << dir << ": " << ec.message();
      return TempRoot();
    }
    for (const auto& entry : std::filesystem::directory_iterator(cache, ec)) {
      std::error_code ignored;
      if (entry.path() != dir) std::filesystem::remove_all(entry.path(), ignored);
    }
    return dir.string();
  }();
  return root;
}

// A model directory for (preset, overrides, dtype, seed), made on first use. Written to
// a private directory and renamed into place, so concurrent test processes never read
// a half-written model.
inline std::string MakeModel(const std::string& preset, MakeModelOverrides overrides, uint64_t seed = 7) {
  static std::map<std::string, std::string> made;
  std::string key = preset + "-L" + std::to_string(overrides.num_hidden_layers.value_or(0)) + "-V" +
                    std::to_string(overrides.vocab_size.value_or(0)) + (overrides.no_q_lora ? "-noq" : "") + "-" +
                    overrides.rope.value_or("default") + "-d" + std::to_string(static_cast<int>(overrides.dtype)) +
                    (overrides.mtp_layers ? "-mtp" + std::to_string(*overrides.mtp_layers) : "") + "-s" +
                    std::to_string(seed);
  auto it = made.find(key);
  if (it != made.end()) return it->second;
  const std::string dir = ModelRoot() + "/" + key;
  if (std::filesystem::exists(dir)) {
    made[key] = dir;
    return dir;
  }
  auto config = MakeModelConfig(preset, overrides);
  EXPECT_TRUE(config.ok()) << config.status().message();
  const std::string part = dir + ".part-" + std::to_string(::getpid());
  RandomCheckpointOptions options;
  options.dtype = overrides.dtype;
  options.seed = seed;
  const Status st = WriteRandomCheckpoint(config.value(), options, part);
  EXPECT_TRUE(st.ok()) << st.message();
  std::error_code ec;
  std::filesystem::rename(part, dir, ec);
  if (ec) std::filesystem::remove_all(part, ec);  // another process renamed its copy first
  made[key] = dir;
  return dir;
}

// A model directory loaded with `options` (progress off), and a model over it.
struct LoadedModel {
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<DeepSeekModel> model;
};
inline LoadedModel LoadModel(const std::string& dir, LoadOptions options) {
  options.progress = false;
  auto w = ModelWeights::Load(dir, options);
  EXPECT_TRUE(w.ok()) << w.status().message();
  LoadedModel l;
  if (!w.ok()) return l;
  l.weights = std::move(w).value();
  l.model = std::make_unique<DeepSeekModel>(*l.weights);
  return l;
}

// Logits [tokens.size(), vocab] for `tokens`: the first P in one prefill span,
// the rest fed one by one through the cache (teacher forcing, so modes see the same inputs).
inline std::vector<float> PrefillThenDecode(DeepSeekModel& model, const std::vector<int32_t>& tokens, int64_t P) {
  SequenceCaches caches = model.NewCaches(1, static_cast<int64_t>(tokens.size()));
  std::vector<float> all, logits;
  std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + P);
  const SequenceSpan prefill[] = {{caches.table(0), 0, P, SpanLogits::kAll}};
  Status st = model.Forward(prompt, prefill, caches.cache(), logits);
  EXPECT_TRUE(st.ok()) << st.message();
  all = logits;
  for (int64_t pos = P; pos < static_cast<int64_t>(tokens.size()); ++pos) {
    const SequenceSpan step[] = {{caches.table(0), pos, 1, SpanLogits::kLast}};
    st = model.Forward(std::vector<int32_t>{tokens[pos]}, step, caches.cache(), logits);
    EXPECT_TRUE(st.ok()) << st.message();
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

// The loaded model's matrices by checkpoint tensor name: every layer's projections
// (kv_b_proj as held: bf16), dense MLP, routed and shared experts, and lm_head and
// embed_tokens. What the fp8 quantization tests compare tensor by tensor.
inline std::vector<std::pair<std::string, const WeightView*>> NamedMatrices(const ModelWeights& w) {
  std::vector<std::pair<std::string, const WeightView*>> out;
  const auto mlp = [&out](const std::string& prefix, const MlpWeights& m) {
    out.emplace_back(prefix + "gate_proj.weight", &m.gate_proj);
    out.emplace_back(prefix + "up_proj.weight", &m.up_proj);
    out.emplace_back(prefix + "down_proj.weight", &m.down_proj);
  };
  for (size_t layer = 0; layer < w.layers().size(); ++layer) {
    const LayerWeights& lw = w.layers()[layer];
    const std::string p = LayerPrefix(static_cast<int64_t>(layer));
    const MlaWeights& a = lw.attn;
    if (a.q_a_proj) {
      out.emplace_back(p + "self_attn.q_a_proj.weight", &*a.q_a_proj);
      out.emplace_back(p + "self_attn.q_b_proj.weight", &a.q_b_proj);
    } else {
      out.emplace_back(p + "self_attn.q_proj.weight", &a.q_b_proj);
    }
    out.emplace_back(p + "self_attn.kv_a_proj_with_mqa.weight", &a.kv_a_proj_with_mqa);
    out.emplace_back(p + "self_attn.kv_b_proj.weight", &a.kv_b_proj);
    out.emplace_back(p + "self_attn.o_proj.weight", &a.o_proj);
    if (!lw.is_moe) {
      mlp(p + "mlp.", lw.mlp);
      continue;
    }
    for (size_t e = 0; e < lw.moe.experts.size(); ++e)
      mlp(p + "mlp.experts." + std::to_string(e) + ".", lw.moe.experts[e]);
    if (lw.moe.shared) mlp(p + "mlp.shared_experts.", *lw.moe.shared);
  }
  out.emplace_back("lm_head.weight", &w.lm_head());
  out.emplace_back("model.embed_tokens.weight", &w.embed_tokens());
  return out;
}

// Both views hold the same bytes (dtype, values; what a bf16 tensor keeps whichever
// way it was loaded).
inline void ExpectSameBytes(const WeightView& got, const WeightView& want) {
  ASSERT_EQ(got.dtype, want.dtype);
  ASSERT_EQ(got.Bytes(), want.Bytes());
  EXPECT_EQ(std::memcmp(got.data, want.data, got.Bytes()), 0);
}

// `view` holds, byte for byte, the e4m3 values of checkpoint tensor `name` and its
// `name`_scale_inv: what a weight quantized at load must equal in an fp8 export.
inline void ExpectHoldsFp8Tensor(const WeightView& view, const Checkpoint& ck, const std::string& name) {
  const TensorInfo* t = ck.Find(name);
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(view.dtype, DType::kF8E4M3);
  ASSERT_EQ(view.Bytes(), t->nbytes);
  EXPECT_EQ(std::memcmp(view.data, t->data, t->nbytes), 0);
  const TensorInfo* s = ck.Find(name + "_scale_inv");
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(view.ScaleBytes(), s->nbytes);
  EXPECT_EQ(std::memcmp(view.scale, s->data, s->nbytes), 0);
}

// Relative RMS difference of two logit arrays of one size: |a - b| / |b|.
inline double RelativeRms(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace latte::testing_models
