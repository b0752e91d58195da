// Constrained decoding inside the engine (GenerationRequest::output_constraint): greedy
// constrained outputs equal a plain reference loop over the model's own logits that
// tries every token's bytes against the grammar; other sequences of the same batch are
// untouched; sampled choices stay inside the grammar and end when the JSON is done.
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "greedy_generate.h"
#include "model/model_weights.h"
#include "test_models.h"
#include "text/json_schema_grammar.h"
#include "text/tokenizer.h"

namespace latte {
namespace {

// The grammar out of a compile that must succeed.
Grammar Compiled(Result<Grammar> g) {
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(*g) : Grammar();
}

struct Fixture {
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<DeepSeekModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

Fixture& Tiny() {
  static Fixture f = [] {
    Fixture x;
    MakeModelOverrides o;
    o.dtype = CheckpointDType::kF32;  // exact: the batch and the reference agree bit for bit
    const std::string dir = testing_models::MakeModel("tiny", o, /*seed=*/5);
    auto w = ModelWeights::Load(dir, LoadOptions{MlaMode::kAbsorbed, false});
    EXPECT_TRUE(w.ok()) << w.status().message();
    x.weights = std::move(w).value();
    x.model = std::make_unique<DeepSeekModel>(*x.weights);
    auto t = Tokenizer::FromDirectory(dir);
    EXPECT_TRUE(t.ok()) << t.status().message();
    x.tokenizer = std::move(t).value();
    return x;
  }();
  return f;
}

std::string SchemaSpec(const char* schema) {
  return nlohmann::json({{"type", "json_schema"}, {"schema", nlohmann::json::parse(schema)}}).dump();
}

const char* const kSchemas[] = {
    R"({"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"integer"},"k":{"enum":["x","yy",null]}},
        "required":["ok","k"],"additionalProperties":false})",
    R"({"type":"array","items":{"anyOf":[{"type":"boolean"},{"type":"null"}]},"minItems":2,"maxItems":5})",
    R"({"type":"object","properties":{"v":{"const":[1,2,{"a":true}]},"w":{"type":"array","items":{"type":"integer"},
        "maxItems":3}},"required":["v","w"],"additionalProperties":false})",
};

// The reference: greedy over the logits RunSequence gives, each step allowing the
// tokens whose bytes the grammar's recognizer takes from the text so far (EOS where
// the text is complete), until EOS or until nothing may follow.
std::vector<int32_t> ReferenceConstrainedGreedy(const std::vector<int32_t>& prompt, const std::string& spec,
                                                int64_t max_tokens) {
  Fixture& f = Tiny();
  GrammarDfa dfa(Compiled(OutputConstraintGrammar(spec)));
  const int32_t eos = *f.tokenizer->eos_id();
  const int64_t V = f.model->config().vocab_size;
  std::vector<int32_t> out;
  std::string text;
  auto next = [&](std::span<const float> logits) -> std::optional<int32_t> {
    const GrammarDfa::State st = dfa.Next(dfa.start(), text);
    if (dfa.Accepting(st) && !dfa.CanContinue(st)) return std::nullopt;
    int32_t best = -1;
    for (int32_t t = 0; t < V; ++t) {
      bool allowed;
      if (t == eos) {
        allowed = dfa.Accepting(st);
      } else {
        const std::string bytes =
            t < f.tokenizer->vocab_size() && !f.tokenizer->IsSpecial(t) ? f.tokenizer->TokenBytes(t) : "";
        allowed = !bytes.empty() && dfa.Next(st, bytes) != GrammarDfa::kDead;
      }
      if (allowed && (best < 0 || logits[t] > logits[best])) best = t;
    }
    if (best < 0) return std::nullopt;
    out.push_back(best);
    if (best == eos) return std::nullopt;
    text += f.tokenizer->TokenBytes(best);
    return best;
  };
  auto times = RunSequence(*f.model, prompt, max_tokens, SpanLogits::kLast, next);
  EXPECT_TRUE(times.ok()) << times.status().message();
  return out;
}

std::vector<int32_t> Ids(const std::vector<GenerationOutput>& outputs, std::optional<FinishReason>* finish = nullptr) {
  std::vector<int32_t> ids;
  for (const GenerationOutput& o : outputs) {
    for (const SampledToken& t : o.tokens) ids.push_back(t.id);
    if (finish && o.finish) *finish = o.finish;
  }
  return ids;
}

EngineOptions Options() {
  EngineOptions e;
  e.block_size = 16;
  e.num_blocks = 256;
  e.scheduler.max_num_seqs = 16;
  e.scheduler.max_num_batched_tokens = 128;
  return e;
}

GenerationRequest Prompted(const std::string& text, int64_t max_tokens) {
  GenerationRequest r;
  const Tokenizer& t = *Tiny().tokenizer;
  r.prompt = {*t.bos_id()};
  for (int32_t id : t.Encode(text)) r.prompt.push_back(id);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

TEST(ConstrainedDecoding, GreedyEqualsAReferenceLoopAndLeavesTheRestOfTheBatchAlone) {
  Fixture& f = Tiny();
  Engine engine(*f.model, f.tokenizer.get(), Options());
  std::vector<GenerationRequest> requests;
  std::vector<std::vector<int32_t>> want;
  // Constrained requests beside unconstrained ones, all in one batch.
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r = Prompted("Give the answer as JSON, case " + std::to_string(i) + ":", 60);
    if (i % 2 == 0) {
      r.output_constraint = i == 4 ? std::string(R"({"type":"json_object"})") : SchemaSpec(kSchemas[i / 2]);
      want.push_back(ReferenceConstrainedGreedy(r.prompt, r.output_constraint, r.max_tokens));
    } else {
      r.ignore_eos = true;
      auto g = GreedyGenerate(*f.model, r.prompt, r.max_tokens, false);
      EXPECT_TRUE(g.ok());
      want.push_back(g->tokens);
    }
    requests.push_back(std::move(r));
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const GenerationRequest& r : requests) {
    auto s = engine.Submit(r);
    ASSERT_TRUE(s.ok()) << s.status().message();
    streams.push_back(*s);
  }
  while (engine.Step()) {
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    std::optional<FinishReason> finish;
    const std::vector<int32_t> got = Ids(streams[i]->Drain(), &finish);
    EXPECT_EQ(got, want[i]) << "request " << i;
    if (i % 2 == 0 && static_cast<int64_t>(got.size()) < requests[i].max_tokens) {
      EXPECT_EQ(finish, FinishReason::kStop) << "request " << i;
    }
  }
}

TEST(ConstrainedDecoding, SampledChoicesStayInsideTheGrammarAndStopWhenComplete) {
  Fixture& f = Tiny();
  Engine engine(*f.model, f.tokenizer.get(), Options());
  const int32_t eos = *f.tokenizer->eos_id();
  int complete = 0;
  for (const char* schema : kSchemas) {
    GenerationRequest r = Prompted("JSON:", 80);
    r.output_constraint = SchemaSpec(schema);
    r.n = 4;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 17;
    auto s = engine.Submit(r);
    ASSERT_TRUE(s.ok()) << s.status().message();
    while (engine.Step()) {
    }
    std::map<int, std::vector<GenerationOutput>> by_choice;
    for (GenerationOutput& o : (*s)->Drain()) by_choice[o.index].push_back(std::move(o));
    ASSERT_EQ(by_choice.size(), 4u);
    GrammarDfa dfa(Compiled(OutputConstraintGrammar(r.output_constraint)));
    for (auto& [index, outputs] : by_choice) {
      std::optional<FinishReason> finish;
      std::string text;
      for (int32_t id : Ids(outputs, &finish)) {
        if (id != eos) text += f.tokenizer->TokenBytes(id);
      }
      const GrammarDfa::State st = dfa.Next(dfa.start(), text);
      ASSERT_NE(st, GrammarDfa::kDead) << text;
      ASSERT_TRUE(finish.has_value());
      if (*finish == FinishReason::kStop) {
        ++complete;
        EXPECT_TRUE(dfa.Accepting(st)) << text;
        EXPECT_FALSE(nlohmann::json::parse(text, nullptr, false).is_discarded()) << text;
      }
    }
  }
  EXPECT_GE(complete, 4);
}

TEST(ConstrainedDecoding, ABadSpecIsRefusedAtSubmitAndTheEngineKeepsServing) {
  Fixture& f = Tiny();
  Engine engine(*f.model, f.tokenizer.get(), Options());
  GenerationRequest bad = Prompted("x", 4);
  bad.output_constraint = SchemaSpec(R"({"type":"string","pattern":"a+"})");
  auto refused = engine.Submit(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("\"pattern\" is not supported"), std::string::npos)
      << refused.status().message();
  GenerationRequest good = Prompted("x", 4);
  good.output_constraint = R"({"type":"json_object"})";
  auto s = engine.Submit(good);
  ASSERT_TRUE(s.ok()) << s.status().message();
  while (engine.Step()) {
  }
  EXPECT_FALSE(Ids((*s)->Drain()).empty());
}

TEST(ConstrainedDecoding, NeedsATokenizer) {
  Fixture& f = Tiny();
  Engine engine(*f.model, nullptr, Options());
  GenerationRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 2;
  r.output_constraint = R"({"type":"json_object"})";
  auto s = engine.Submit(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().field(), "response_format");
}

}  // namespace
}  // namespace latte
