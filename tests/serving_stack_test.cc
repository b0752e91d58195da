// The serving stack built from one EngineConfig (engine/serving_stack.h): every bad
// value is refused by name before anything loads, and a built stack generates what
// the model alone generates greedily (tests/greedy_generate.h, no engine).
#include "engine/serving_stack.h"

#include <gtest/gtest.h>

#include "greedy_generate.h"
#include "test_models.h"

namespace latte {
namespace {

// The tiny preset in f32, where the engine's batch and the model alone sum alike.
EngineConfig TinyConfig() {
  MakeModelOverrides f32;
  f32.dtype = CheckpointDType::kF32;
  EngineConfig config;
  config.model = testing_models::MakeModel("tiny", f32);
  config.threads = 1;
  config.memory.memory_gb = 0.5;
  return config;
}

TEST(ServingStack, EachBadValueIsRefusedByItsField) {
  struct Case {
    const char* field;
    void (*spoil)(EngineConfig&);
  };
  const Case cases[] = {
      {"model", [](EngineConfig& c) { c.model.clear(); }},
      {"threads", [](EngineConfig& c) { c.threads = -1; }},
      {"block_size", [](EngineConfig& c) { c.memory.block_size = 0; }},
      {"block_size", [](EngineConfig& c) { c.memory.block_size = kMaxKvBlockSize + 1; }},
      {"num_kv_blocks", [](EngineConfig& c) { c.memory.num_kv_blocks = 0; }},
      {"memory_gb", [](EngineConfig& c) { c.memory.memory_gb = -2; }},
      {"max_num_seqs", [](EngineConfig& c) { c.scheduler.max_num_seqs = 0; }},
      {"max_num_batched_tokens", [](EngineConfig& c) { c.scheduler.max_num_batched_tokens = 0; }},
      {"max_prefill_burst_tokens", [](EngineConfig& c) { c.scheduler.max_prefill_burst_tokens = -5; }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.field);
    EngineConfig config = TinyConfig();
    ASSERT_TRUE(config.Validate().ok());
    k.spoil(config);
    const Status validated = config.Validate();
    EXPECT_EQ(validated.code(), StatusCode::kInvalidArgument) << validated.message();
    EXPECT_EQ(validated.field(), k.field) << validated.message();
    EXPECT_EQ(validated.message().rfind(k.field, 0), 0u) << validated.message();
    // The builder refuses the same value with the same error, before any load.
    const auto built = BuildServingStack(config, /*log=*/false);
    ASSERT_FALSE(built.ok());
    EXPECT_EQ(built.status().message(), validated.message());
  }
  EngineConfig contradiction = TinyConfig();
  contradiction.load.quantize = WeightQuantization::kFp8;
  contradiction.load.fp8 = Fp8Weights::kDequantizeBf16;
  EXPECT_EQ(contradiction.Validate().code(), StatusCode::kInvalidArgument);
}

TEST(ServingStack, MissingModelIsNotFound) {
  EngineConfig config = TinyConfig();
  config.model = "/nonexistent/latte-model";
  const auto preview = PreviewModel(config.model);
  EXPECT_EQ(preview.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(preview.status().field(), "model");
  EXPECT_FALSE(BuildServingStack(config, /*log=*/false).ok());
}

TEST(ServingStack, BuiltStackGeneratesWhatTheModelAloneDoes) {
  EngineConfig config = TinyConfig();
  config.memory.block_size = 16;
  auto built = BuildServingStack(config, /*log=*/false);
  ASSERT_TRUE(built.ok()) << built.status().message();
  ServingStack& stack = *built.value();
  ASSERT_NE(stack.tokenizer, nullptr);
  EXPECT_EQ(stack.plan.block_size, 16);
  EXPECT_EQ(stack.engine->limits().pool_tokens, stack.plan.pool_tokens());

  GenerationRequest request;
  request.prompt = stack.tokenizer->Encode("the latent cache holds 576 values per token");
  request.sampling.temperature = 0;
  request.max_tokens = 12;
  request.ignore_eos = true;
  auto stream = stack.engine->Submit(request);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  std::vector<int32_t> tokens;
  for (const GenerationOutput& out : stream.value()->Drain()) {
    for (const SampledToken& t : out.tokens) tokens.push_back(t.id);
  }
  stack.engine->Stop();

  // An independent model over the same weights, decoded without the engine.
  DeepSeekModel alone(*stack.weights);
  const auto expected = GreedyGenerate(alone, request.prompt, request.max_tokens, /*keep_logits=*/false);
  ASSERT_TRUE(expected.ok()) << expected.status().message();
  EXPECT_EQ(tokens, expected->tokens);
}

}  // namespace
}  // namespace latte
