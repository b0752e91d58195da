// config.json's string keys resolve to enums once at load: every accepted spelling
// parses and writes back the same, an unknown one is an error naming the key, the
// value and the accepted ones.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/presets.h"

namespace latte {
namespace {

using nlohmann::json;

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
  const std::pair<const char*, TopkMethod> accepted[] = {
      {"greedy", TopkMethod::kGreedy},
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

TEST(ConfigEnums, AbsentKeysTakeTheDefaults) {
  json j = V3Json();
  j.erase("scoring_func");
  j.erase("topk_method");
  j.erase("rope_scaling");
  const Result<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->scoring_func, ScoringFunc::kSoftmax);
  EXPECT_EQ(c->topk_method, TopkMethod::kGreedy);
  EXPECT_FALSE(c->rope_scaling.has_value());
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

}  // namespace
}  // namespace latte
