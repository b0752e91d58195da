// One memory budget (engine/memory_plan.h) on random test models: the weight bytes
// calc predicts from config.json are what the loader holds; the tokens the start-up
// log predicts for the other MLA modes are what loading in that mode plans; the
// scratch estimate bounds what a full engine step grows; `latte calc`'s engine table
// is what loading plans; budgets that cannot work are refused with the figures.
#include "engine/memory_plan.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <optional>
#include <random>

#include "bench/model_cost_report.h"
#include "engine/engine.h"
#include "engine/model_files.h"
#include "gguf_test_models.h"
#include "model/cost_model.h"
#include "model/deepseek.h"
#include "model/model_weights.h"
#include "model/safetensors.h"
#include "test_models.h"

namespace latte {
namespace {

using testing_models::MakeModel;

constexpr MlaMode kModes[] = {MlaMode::kNaive, MlaMode::kAbsorbed, MlaMode::kMaterialized};

std::unique_ptr<ModelWeights> Load(const std::string& dir, MlaMode mode) {
  LoadOptions options;
  options.mode = mode;
  options.progress = false;
  auto w = ModelWeights::Load(dir, options);
  EXPECT_TRUE(w.ok()) << w.status().message();
  return std::move(w).value();
}

std::string Tiny(CheckpointDType dtype) {
  MakeModelOverrides o;
  o.dtype = dtype;
  return MakeModel("tiny", o, /*seed=*/5);
}

TEST(MemoryPlan, HeldWeightBytesAreWhatTheLoaderHolds) {
  for (CheckpointDType dtype : {CheckpointDType::kBf16, CheckpointDType::kFp8}) {
    const std::string dir = Tiny(dtype);
    for (MlaMode mode : kModes) {
      SCOPED_TRACE(std::string(MlaModeName(mode)) + (dtype == CheckpointDType::kFp8 ? " fp8" : " bf16"));
      const auto w = Load(dir, mode);
      EXPECT_EQ(HeldWeightBytes(w->config(), mode), static_cast<int64_t>(w->memory().Total()));
    }
  }
}

// The MTP layer (--speculative mtp): its weights count in the budget, and every KV block
// holds one more layer's rows, which the engine's pool has too.
TEST(MemoryPlan, TheMtpLayerTakesWeightsAndALayerOfEveryBlock) {
  MakeModelOverrides o;
  o.dtype = CheckpointDType::kBf16;
  o.mtp_layers = 1;
  const std::string dir = MakeModel("tiny", o, /*seed=*/5);
  const auto plain = Load(dir, MlaMode::kAbsorbed);
  LoadOptions options;
  options.progress = false;
  options.mtp = true;
  auto with = ModelWeights::Load(dir, options);
  ASSERT_TRUE(with.ok()) << with.status().message();
  MemoryOptions memory;
  memory.memory_gb = 0.5;
  const int64_t available = int64_t{1} << 40;
  auto plan_plain = PlanMemory(*plain, memory, SchedulerConfig{}, available);
  auto plan_mtp = PlanMemory(**with, memory, SchedulerConfig{}, available);
  ASSERT_TRUE(plan_plain.ok() && plan_mtp.ok());
  const ModelConfig& c = plain->config();
  EXPECT_EQ(plan_mtp->weight_bytes - plan_plain->weight_bytes, static_cast<int64_t>((*with)->memory().mtp));
  EXPECT_GT((*with)->memory().mtp, 0u);
  EXPECT_EQ(plan_plain->block_bytes, KvCache::BlockBytes(c.num_hidden_layers, c.LatentDim(), 64, DType::kBF16));
  EXPECT_EQ(plan_mtp->block_bytes, KvCache::BlockBytes(c.num_hidden_layers + 1, c.LatentDim(), 64, DType::kBF16));
  DeepSeekModel model(**with);
  EngineOptions engine_options;
  engine_options.num_blocks = 4;
  engine_options.num_speculative_tokens = 2;
  Engine engine(model, nullptr, engine_options);
  EXPECT_EQ(static_cast<int64_t>(engine.kv_cache().Bytes()), 4 * plan_mtp->block_bytes);
}

// `latte calc --model`: the stored bytes it counts are the files' tensor bytes, and what
// it says the loader holds is what loading holds, for directories and GGUF files of every
// type and both kv_b layouts.
TEST(MemoryPlan, StoredBytesOfEveryFormatAreWhatTheLoaderHolds) {
  using testing_models::GgufShape;
  std::vector<std::string> models = {Tiny(CheckpointDType::kBf16), Tiny(CheckpointDType::kFp8)};
  const std::string src = testing_models::GgufTestModel(
      "memory-plan-gguf-src", testing_models::GgufTestConfig(GgufShape::kV2Lite, 2), CheckpointDType::kBf16, 3);
  for (const char* type : {"F32", "F16", "BF16", "Q8_0", "Q4_K_M", "Q6_K"}) {
    models.push_back(testing_models::ExportTestGguf(src, type, GgufExportLayout::kSplitKvB));
  }
  models.push_back(testing_models::ExportTestGguf(src, "Q4_0", GgufExportLayout::kKvB));
  models.push_back(testing_models::ExportTestGguf(src, "F16", GgufExportLayout::kKvB));
  for (const std::string& path : models) {
    SCOPED_TRACE(path);
    auto files = ModelFiles::Find(path);
    ASSERT_TRUE(files.ok()) << files.status().message();
    auto config = files->Config();
    ASSERT_TRUE(config.ok()) << config.status().message();
    auto stored = files->StoredTensors(*config);
    ASSERT_TRUE(stored.ok()) << stored.status().message();
    // The files' tensor bytes, counted from the file's own table.
    int64_t file_bytes = 0;
    if (files->is_gguf()) {
      auto gguf = GgufModel::Open(path);
      ASSERT_TRUE(gguf.ok()) << gguf.status().message();
      for (const GgufTensor& t : gguf->tensors()) file_bytes += static_cast<int64_t>(t.nbytes);
    } else {
      auto checkpoint = Checkpoint::Open(path);
      ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().message();
      file_bytes = static_cast<int64_t>(checkpoint->TotalBytes());
    }
    EXPECT_EQ(ComputeWeightCosts(*config, MlaMode::kAbsorbed, &*stored).model_bytes.Checkpoint(), file_bytes);
    for (MlaMode mode : kModes) {
      SCOPED_TRACE(MlaModeName(mode));
      const auto w = Load(path, mode);
      EXPECT_EQ(HeldWeightBytes(*config, mode, &*stored), static_cast<int64_t>(w->memory().Total()));
    }
  }
}

TEST(MemoryPlan, EachModeHoldsWhatTheStartupLogPredicts) {
  const std::string dir = Tiny(CheckpointDType::kBf16);
  MemoryOptions options;
  options.block_size = 16;
  options.decompressed_prefix_gb = 0;  // the budget's own share is tested below
  const auto absorbed = Load(dir, MlaMode::kAbsorbed);
  // A budget a few hundred blocks above the materialized weights: every mode fits some.
  const int64_t scratch = EngineScratchBytes(absorbed->config(), SchedulerConfig{}, omp_get_max_threads());
  const int64_t materialized_weights = HeldWeightBytes(absorbed->config(), MlaMode::kMaterialized);
  options.memory_gb = static_cast<double>(materialized_weights + scratch + (int64_t{3} << 20)) / kBytesPerGB;
  const int64_t available = int64_t{1} << 40;
  auto plan = PlanMemory(*absorbed, options, SchedulerConfig{}, available);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->pool_tokens(), KvTokensInMode(*plan, *absorbed, MlaMode::kAbsorbed));
  for (MlaMode mode : kModes) {
    SCOPED_TRACE(MlaModeName(mode));
    const auto w = Load(dir, mode);
    auto actual = PlanMemory(*w, options, SchedulerConfig{}, available);
    ASSERT_TRUE(actual.ok()) << actual.status().message();
    EXPECT_EQ(actual->pool_tokens(), KvTokensInMode(*plan, *absorbed, mode));
    EXPECT_GT(actual->pool_tokens(), 0);
    EXPECT_LE(actual->weight_bytes + actual->scratch_bytes + actual->pool_bytes(), plan->budget_bytes);
    EXPECT_GT(actual->weight_bytes + actual->scratch_bytes + actual->pool_bytes() + actual->block_bytes,
              plan->budget_bytes);
  }
  EXPECT_LT(KvTokensInMode(*plan, *absorbed, MlaMode::kMaterialized),
            KvTokensInMode(*plan, *absorbed, MlaMode::kAbsorbed));
}

TEST(MemoryPlan, ReservesTheDecompressedPrefixOutOfTheBudget) {
  const auto w = Load(Tiny(CheckpointDType::kBf16), MlaMode::kAbsorbed);
  const ModelConfig& c = w->config();
  const int64_t per_position = c.num_hidden_layers * c.num_attention_heads * (c.QkHeadDim() + c.v_head_dim) *
                               static_cast<int64_t>(sizeof(float));
  MemoryOptions options;
  options.memory_gb = 0.5;
  options.decompressed_prefix_gb = 0;
  auto none = PlanMemory(*w, options, SchedulerConfig{}, int64_t{1} << 40);
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->decompressed_prefix_bytes, 0);

  // Default: a tenth of the budget, at most one prompt of the model's longest context.
  options.decompressed_prefix_gb.reset();
  auto share = PlanMemory(*w, options, SchedulerConfig{}, int64_t{1} << 40);
  ASSERT_TRUE(share.ok()) << share.status().message();
  EXPECT_EQ(share->decompressed_prefix_position_bytes, per_position);
  EXPECT_EQ(share->decompressed_prefix_bytes,
            std::min<int64_t>(share->budget_bytes / 10, c.max_position_embeddings * per_position));
  EXPECT_GT(share->decompressed_prefix_positions(), 0);
  // The pool gets what the weights, scratch and prefix leave.
  EXPECT_EQ(share->num_blocks,
            (share->budget_bytes - share->weight_bytes - share->scratch_bytes - share->decompressed_prefix_bytes) /
                share->block_bytes);
  EXPECT_LT(share->num_blocks, none->num_blocks);

  options.decompressed_prefix_gb = 0.01;
  auto set = PlanMemory(*w, options, SchedulerConfig{}, int64_t{1} << 40);
  ASSERT_TRUE(set.ok()) << set.status().message();
  EXPECT_EQ(set->decompressed_prefix_bytes, 10'000'000);
  EXPECT_EQ(set->decompressed_prefix_positions(), 10'000'000 / per_position);

  options.decompressed_prefix_gb = -1;
  auto negative = PlanMemory(*w, options, SchedulerConfig{}, int64_t{1} << 40);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().field(), "decompressed_prefix_gb");
}

// calc's engine table from config.json alone, default decompressed-prefix store
// included, holds the blocks that loading the model in each mode plans.
TEST(MemoryPlan, CalcEngineFitIsWhatLoadingPlans) {
  const std::string dir = Tiny(CheckpointDType::kBf16);
  for (std::optional<double> prefix_gb : {std::optional<double>{}, std::optional<double>{0.002}}) {
    MemoryOptions options;
    options.memory_gb = 0.5;  // over the scratch of a 512-token step on every thread
    options.decompressed_prefix_gb = prefix_gb;
    ModelCostOptions calc;
    calc.memory_gb = options.memory_gb;
    calc.threads = omp_get_max_threads();
    calc.decompressed_prefix_gb = prefix_gb;
    for (MlaMode mode : kModes) {
      SCOPED_TRACE(std::string(MlaModeName(mode)) + (prefix_gb ? " prefix set" : " default prefix"));
      const auto w = Load(dir, mode);
      auto plan = PlanMemory(*w, options, SchedulerConfig{}, int64_t{1} << 40);
      ASSERT_TRUE(plan.ok()) << plan.status().message();
      ASSERT_GT(plan->decompressed_prefix_bytes, 0);
      const ModelCostReport report = BuildModelCostReport("test", w->config(), calc);
      ASSERT_TRUE(report.engine_fit.has_value());
      EXPECT_EQ(report.engine_fit->scratch_bytes, plan->scratch_bytes);
      EXPECT_EQ(report.engine_fit->decompressed_prefix_bytes, plan->decompressed_prefix_bytes);
      const auto fit = std::find_if(report.engine_fit->modes.begin(), report.engine_fit->modes.end(),
                                    [&](const EngineFit::Mode& m) { return m.mode == mode; });
      ASSERT_NE(fit, report.engine_fit->modes.end());
      EXPECT_EQ(fit->blocks, plan->num_blocks);
    }
  }
}

TEST(MemoryPlan, RefusesBudgetsThatCannotWork) {
  const auto w = Load(Tiny(CheckpointDType::kBf16), MlaMode::kAbsorbed);
  MemoryOptions options;
  options.memory_gb = static_cast<double>(w->memory().Total()) / kBytesPerGB;  // no room for scratch + KV
  auto none = PlanMemory(*w, options, SchedulerConfig{}, int64_t{1} << 40);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("leaves no room for the KV cache"), std::string::npos)
      << none.status().message();

  options.memory_gb = 64;
  auto over = PlanMemory(*w, options, SchedulerConfig{}, /*available=*/int64_t{8} << 30);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("more than this machine has available"), std::string::npos)
      << over.status().message();
  EXPECT_EQ(over.status().field(), "memory_gb");

  MemoryOptions blocks;
  blocks.num_kv_blocks = int64_t{1} << 40;
  auto huge = PlanMemory(*w, blocks, SchedulerConfig{}, int64_t{8} << 30);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().field(), "num_kv_blocks") << huge.status().message();
  EXPECT_EQ(huge.status().code(), StatusCode::kOutOfRange);

  blocks.num_kv_blocks = 7;
  auto seven = PlanMemory(*w, blocks, SchedulerConfig{}, int64_t{8} << 30);
  ASSERT_TRUE(seven.ok()) << seven.status().message();
  EXPECT_EQ(seven->num_blocks, 7);
  EXPECT_TRUE(seven->num_blocks_overridden);
}

// The scratch estimate the plan reserves bounds what the buffers grow to over
// steps as full as the scheduler allows: a whole chunk of prompt tokens, and the
// most sequences decoding at once.
TEST(MemoryPlan, ScratchEstimateBoundsAFullStep) {
  for (MlaMode mode : kModes) {
    SCOPED_TRACE(MlaModeName(mode));
    const auto w = Load(Tiny(CheckpointDType::kBf16), mode);
    DeepSeekModel model(*w);
    EngineOptions options;
    options.block_size = 16;
    options.num_blocks = 512;
    options.scheduler.max_num_seqs = 8;
    options.scheduler.max_num_batched_tokens = 64;
    Engine engine(model, nullptr, options);
    std::mt19937 rng(3);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 12; ++i) {
      GenerationRequest r;
      r.prompt.resize(static_cast<size_t>(20 + 17 * i));
      for (int32_t& t : r.prompt) t = static_cast<int32_t>(rng() % model.config().vocab_size);
      r.max_tokens = 6;
      r.ignore_eos = true;
      r.prompt_logprobs = i % 4 == 0;  // logits for whole prompt chunks
      auto s = engine.Submit(r);
      ASSERT_TRUE(s.ok()) << s.status().message();
      streams.push_back(s.value());
    }
    while (engine.Step()) {
    }
    const int64_t estimate = EngineScratchBytes(model.config(), options.scheduler, omp_get_max_threads());
    EXPECT_GT(model.ScratchBytesInUse(), 0);
    EXPECT_LE(model.ScratchBytesInUse(), estimate);
  }
}

}  // namespace
}  // namespace latte
