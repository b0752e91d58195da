// config.json's string keys resolve to enums once at load: every accepted spelling
// parses and writes back the same, an unknown one is an error naming the key, the
// value and the accepted ones. And YaRN's mscale reaches the softmax scale and the rope
// magnitude through the same formula (checked against it written out here in double).
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/rope.h"
#include "model/config.h"
#include "model/presets.h"

namespace latte {
namespace {

using nlohmann::json;

// Both sides compute in double from the same few inputs: a handful of roundings of
// 2^-53 (1.1e-16); 1e-12 relative is far above that and far below any formula error.
constexpr double kDoubleRelTol = 1e-12;

// The config.json of DeepSeek-V3 (sigmoid, noaux_tc, YaRN), as a JSON object to edit.
json V3Json() {
  Result<ModelConfig> v3 = ReleasedConfig("v3");
  EXPECT_TRUE(v3.ok());
  return json::parse(v3->ToJsonText());
}

Result<ModelConfig> Parse(const json& j) { return ModelConfig::FromJsonText(j.dump()); }

// The error of parsing `j`, "" when it parsed.
std::string ParseError(const json& j) {
  const Result<ModelConfig> c = Parse(j);
  EXPECT_FALSE(c.ok()) << "parsed " << j.dump();
  return c.ok() ? "" : c.status().message();
}

void ExpectMentions(const std::string& message, const std::vector<std::string>& words) {
  for (const std::string& w : words) {
    EXPECT_NE(message.find(w), std::string::npos) << "\"" << w << "\" missing from: " << message;
  }
}

TEST(ConfigEnums, EveryScoringFuncParsesAndWritesBack) {
  const std::pair<const char*, ScoringFunc> accepted[] = {{"softmax", ScoringFunc::kSoftmax},
                                                          {"sigmoid", ScoringFunc::kSigmoid}};
  for (const auto& [name, value] : accepted) {
    SCOPED_TRACE(name);
    json j = V3Json();
    j["scoring_func"] = name;
    const Result<ModelConfig> c = Parse(j);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->scoring_func, value);
    EXPECT_EQ(json::parse(c->ToJsonText())["scoring_func"], name);
  }
}

TEST(ConfigEnums, EveryTopkMethodParsesAndWritesBack) {
  const std::pair<const char*, TopkMethod> accepted[] = {{"greedy", TopkMethod::kGreedy},
                                                         {"group_limited_greedy", TopkMethod::kGroupLimitedGreedy},
                                                         {"noaux_tc", TopkMethod::kNoauxTc}};
  for (const auto& [name, value] : accepted) {
    SCOPED_TRACE(name);
    json j = V3Json();
    j["topk_method"] = name;
    const Result<ModelConfig> c = Parse(j);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->topk_method, value);
    EXPECT_EQ(c->HasScoreCorrectionBias(), value == TopkMethod::kNoauxTc);
    EXPECT_EQ(json::parse(c->ToJsonText())["topk_method"], name);
  }
}

// Absent routing keys take Hugging Face's defaults for the architecture: V3's sigmoid
// and noaux_tc, V2's softmax and greedy.
TEST(ConfigEnums, AbsentKeysTakeTheArchitecturesDefaults) {
  json j = V3Json();
  j.erase("scoring_func");
  j.erase("topk_method");
  j.erase("rope_scaling");
  const Result<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->scoring_func, ScoringFunc::kSigmoid);
  EXPECT_EQ(c->topk_method, TopkMethod::kNoauxTc);
  EXPECT_FALSE(c->rope_scaling.has_value());

  Result<ModelConfig> v2 = ReleasedConfig("v2");
  ASSERT_TRUE(v2.ok());
  json k = json::parse(v2->ToJsonText());
  k.erase("scoring_func");
  k.erase("topk_method");
  const Result<ModelConfig> d = Parse(k);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->scoring_func, ScoringFunc::kSoftmax);
  EXPECT_EQ(d->topk_method, TopkMethod::kGreedy);
}

// The context check (CheckContextLength) accepts max_position_embeddings tokens and
// refuses one more with a message that names both numbers.
TEST(ConfigContext, CheckContextLengthNamesBothNumbers) {
  Result<ModelConfig> tiny = ReleasedConfig("tiny");
  ASSERT_TRUE(tiny.ok());
  EXPECT_TRUE(CheckContextLength(*tiny, tiny->max_position_embeddings, "x").ok());
  const Status s = CheckContextLength(*tiny, tiny->max_position_embeddings + 1, "the prompt");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "the prompt is 4097 tokens, more than the model's context length of 4096 "
            "(max_position_embeddings)");
}

TEST(ConfigEnums, RopeScalingTypes) {
  // null: plain rope.
  json plain = V3Json();
  plain["rope_scaling"] = nullptr;
  const Result<ModelConfig> p = Parse(plain);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_FALSE(p->rope_scaling.has_value());
  EXPECT_TRUE(json::parse(p->ToJsonText())["rope_scaling"].is_null());
  // yarn, under either spelling of the type key; written back as "type".
  for (const char* key : {"type", "rope_type"}) {
    SCOPED_TRACE(key);
    json j = V3Json();
    j["rope_scaling"].erase("type");
    j["rope_scaling"][key] = "yarn";
    j["rope_scaling"]["factor"] = 8.0;
    const Result<ModelConfig> c = Parse(j);
    ASSERT_TRUE(c.ok()) << c.status().message();
    ASSERT_TRUE(c->rope_scaling.has_value());
    EXPECT_EQ(c->rope_scaling->factor, 8.0);
    EXPECT_EQ(json::parse(c->ToJsonText())["rope_scaling"]["type"], "yarn");
  }
}

TEST(ConfigEnums, UnknownScoringFuncNamesKeyValueAndAccepted) {
  json j = V3Json();
  j["scoring_func"] = "relu";
  ExpectMentions(ParseError(j), {"scoring_func", "relu", "softmax", "sigmoid"});
  // A wrong type is an error too, naming the key.
  j["scoring_func"] = 3;
  ExpectMentions(ParseError(j), {"scoring_func"});
}

TEST(ConfigEnums, UnknownTopkMethodNamesKeyValueAndAccepted) {
  json j = V3Json();
  j["topk_method"] = "top_p";
  ExpectMentions(ParseError(j), {"topk_method", "top_p", "greedy", "group_limited_greedy", "noaux_tc"});
}

TEST(ConfigEnums, UnknownRopeScalingTypeNamesKeyValueAndAccepted) {
  json j = V3Json();
  j["rope_scaling"]["type"] = "linear";
  ExpectMentions(ParseError(j), {"rope_scaling.type", "linear", "yarn"});
  json newer = V3Json();
  newer["rope_scaling"].erase("type");
  newer["rope_scaling"]["rope_type"] = "dynamic";
  ExpectMentions(ParseError(newer), {"rope_scaling.rope_type", "dynamic", "yarn"});
  json untyped = V3Json();
  untyped["rope_scaling"].erase("type");
  ExpectMentions(ParseError(untyped), {"rope_scaling", "type", "yarn"});
}

// yarn_get_mscale of DeepSeek-V2's Hugging Face code, written out again here.
double HfYarnGetMscale(double scale, double mscale) {
  if (scale <= 1) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// The rope of a config's YaRN scaling, built from its fields as the MLA layer does.
RopeFrequencies RopeOf(const ModelConfig& c) {
  const YarnScaling& y = *c.rope_scaling;
  return RopeFrequencies::Yarn(
      c.qk_rope_head_dim, c.rope_theta,
      YarnParams{y.factor, y.original_max_position_embeddings, y.beta_fast, y.beta_slow, y.mscale, y.mscale_all_dim});
}

// softmax_scale = q_head_dim^-0.5 · m_all² and the rope's cos/sin magnitude
// = m / m_all, with m = yarn_get_mscale(factor, mscale) and
// m_all = yarn_get_mscale(factor, mscale_all_dim): the m_all the rope divides by is the
// one the softmax scale multiplies by.
TEST(ConfigYarn, SoftmaxScaleAndRopeMagnitudeShareTheMscale) {
  struct Case {
    double factor, mscale, mscale_all_dim;
  };
  const Case cases[] = {
      {40, 1.0, 1.0},      // V3 / R1
      {40, 0.707, 0.707},  // V2 / V2-Lite
      {40, 1.0, 0.707},    // mscale != mscale_all_dim: magnitude != 1
      {40, 0.707, 1.3},    // magnitude < 1
      {40, 1.0, 0.0},      // mscale_all_dim absent: softmax scale unchanged
      {4, 1.0, 1.0},       // make-model's tiny preset
      {1, 1.0, 1.0},       // factor 1: no temperature at all
  };
  for (const Case& k : cases) {
    SCOPED_TRACE("factor " + std::to_string(k.factor) + " mscale " + std::to_string(k.mscale) + " mscale_all_dim " +
                 std::to_string(k.mscale_all_dim));
    json j = V3Json();
    j["rope_scaling"]["factor"] = k.factor;
    j["rope_scaling"]["mscale"] = k.mscale;
    j["rope_scaling"]["mscale_all_dim"] = k.mscale_all_dim;
    const Result<ModelConfig> c = Parse(j);
    ASSERT_TRUE(c.ok()) << c.status().message();

    const double m = HfYarnGetMscale(k.factor, k.mscale);
    const double m_all = HfYarnGetMscale(k.factor, k.mscale_all_dim);
    const double q_head_dim = 192;  // d_n + d_r = 128 + 64
    ASSERT_EQ(c->QkHeadDim(), 192);
    const double want_scale = m_all * m_all / std::sqrt(q_head_dim);
    EXPECT_NEAR(c->SoftmaxScale(), want_scale, kDoubleRelTol * want_scale);
    const double magnitude = RopeOf(c.value()).magnitude();
    EXPECT_NEAR(magnitude, m / m_all, kDoubleRelTol * m / m_all);
    // The m_all implied by the rope magnitude, squared, is the softmax scale's factor.
    const double implied_m_all = m / magnitude;
    EXPECT_NEAR(c->SoftmaxScale() * std::sqrt(q_head_dim), implied_m_all * implied_m_all,
                kDoubleRelTol * want_scale * std::sqrt(q_head_dim));
  }
}

// Sizes so large that their products overflow int64 (the config fuzzer's finding: the
// tensor shapes and the cost model multiply them) are load errors naming the key.
constexpr int64_t kMaxSize = int64_t{1} << 20;

// YaRN's mscale factors reach the rope magnitude and the softmax scale: a value
// that makes one infinite or not positive is an error naming the key (the config
// fuzzer's finding: mscale_all_dim 1e308 gave an infinite softmax scale).
TEST(ConfigYarn, AnMscaleThatIsNotPositiveOrFiniteNamesTheKey) {
  for (const char* key : {"mscale", "mscale_all_dim"}) {
    SCOPED_TRACE(key);
    json j = V3Json();
    j["rope_scaling"][key] = 1e308;
    ExpectMentions(ParseError(j), {std::string("rope_scaling.") + key, "positive and finite"});
    // factor 40: 0.1 * -10 * ln(40) + 1 < 0.
    j["rope_scaling"][key] = -10.0;
    ExpectMentions(ParseError(j), {std::string("rope_scaling.") + key, "positive and finite"});
  }
  json j = V3Json();
  j["rope_scaling"]["mscale_all_dim"] = 0.707;  // DeepSeek-V3's own value parses
  EXPECT_TRUE(Parse(j).ok());
}

TEST(ConfigSizes, ReleasedConfigsAreWithinTheLimits) {
  for (const char* name : {"v2", "v2-lite", "v3"}) {
    const Result<ModelConfig> released = ReleasedConfig(name);
    ASSERT_TRUE(released.ok()) << name;
    const Result<ModelConfig> c = ModelConfig::FromJsonText(released->ToJsonText());
    EXPECT_TRUE(c.ok()) << name << ": " << c.status().message();
  }
}

TEST(ConfigSizes, ASizeOver2To20NamesTheKey) {
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
                          "num_hidden_layers", "num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                          "qk_rope_head_dim", "v_head_dim", "n_routed_experts", "n_shared_experts"}) {
    SCOPED_TRACE(key);
    json j = V3Json();
    j[key] = kMaxSize + 2;  // even: qk_rope_head_dim must be
    ExpectMentions(ParseError(j), {std::string("\"") + key + "\"", std::to_string(kMaxSize + 2), "2^20"});
    // 4e9 squared overflows int64: the first overflow the fuzzer found.
    j[key] = int64_t{4'000'000'000};
    ExpectMentions(ParseError(j), {std::string("\"") + key + "\"", "4000000000"});
  }
  json j = V3Json();
  j["quantization_config"]["weight_block_size"] = {int64_t{1} << 62, 128};
  ExpectMentions(ParseError(j), {"weight_block_size[0]", "2^20"});
}

TEST(ConfigSizes, AtTheLimitASizeIsAccepted) {
  json j = V3Json();
  j["vocab_size"] = kMaxSize;
  const Result<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->vocab_size, kMaxSize);
}

TEST(ConfigSizes, SizesWhoseProductsAreTooLargeAreRejected) {
  // Each size within 2^20, but 2^20 layers of 256 experts are 2^28 expert tensors.
  json j = V3Json();
  j["num_hidden_layers"] = kMaxSize;
  ExpectMentions(ParseError(j), {"num_hidden_layers", "n_routed_experts", "tensors"});
  // Every layer dimension 2^20 on DeepSeek-V3's 61 layers and 128 heads: ~2^57 values.
  j = V3Json();
  for (const char* key : {"hidden_size", "intermediate_size", "moe_intermediate_size"}) j[key] = kMaxSize;
  ExpectMentions(ParseError(j), {"weight values", "num_attention_heads 128", "2^52"});
  // The same dimensions in one layer of 16 experts fit (~2^51 by the bound).
  j["num_hidden_layers"] = 1;
  j["first_k_dense_replace"] = 0;
  j["n_routed_experts"] = 16;
  const Result<ModelConfig> c = Parse(j);
  EXPECT_TRUE(c.ok()) << c.status().message();
}

}  // namespace
}  // namespace latte
