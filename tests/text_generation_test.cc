// Text in, text out through the engine: greedy text generation picks the tokens the
// model-level greedy loop picks, the stream equals the decoded tokens, stop strings cut the text
// before themselves, seeds repeat, and the CLI streams the same text.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "greedy_generate.h"
#include "model/deepseek.h"
#include "run_command.h"
#include "test_models.h"
#include "text/tokenizer.h"

namespace latte {
namespace {

struct Fixture {
  std::string dir;
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<Tokenizer> tokenizer;
};

Fixture& Tiny() {
  static Fixture f = [] {
    Fixture x;
    x.dir = testing_models::MakeModel("tiny", MakeModelOverrides{});
    auto w = ModelWeights::Load(x.dir, LoadOptions{MlaMode::kAbsorbed, false});
    EXPECT_TRUE(w.ok()) << w.status().message();
    x.weights = std::move(w).value();
    auto t = Tokenizer::FromDirectory(x.dir);
    EXPECT_TRUE(t.ok()) << t.status().message();
    x.tokenizer = std::move(t).value();
    return x;
  }();
  return f;
}

using TextRequest = GenerationRequest;

struct TextResult {
  std::vector<int32_t> tokens;  // every sampled token, a final stop token included
  std::string text;
  std::string finish_reason;
};

// One request through an engine of its own, stepped on this thread.
TextResult Generate(const TextRequest& request, std::string* streamed) {
  DeepSeekModel model(*Tiny().weights);
  EngineOptions options;
  options.num_blocks = 16;
  Engine engine(model, Tiny().tokenizer.get(), options);
  auto stream = engine.Submit(request);
  EXPECT_TRUE(stream.ok()) << stream.status().message();
  if (!stream.ok()) return {};
  while (engine.Step()) {
  }
  TextResult r;
  for (const GenerationOutput& out : stream.value()->Drain()) {
    for (const SampledToken& t : out.tokens) r.tokens.push_back(t.id);
    *streamed += out.text;
    r.text += out.text;
    if (out.finish) r.finish_reason = std::string(FinishReasonName(*out.finish));
  }
  return r;
}

TEST(TextGeneration, GreedyMatchesIdsPathAndStreamEqualsDecode) {
  TextRequest request;
  request.prompt = Tiny().tokenizer->Encode("The quick brown fox jumps over");
  request.sampling.temperature = 0;
  request.max_tokens = 40;
  request.ignore_eos = true;
  std::string streamed;
  const TextResult r = Generate(request, &streamed);
  DeepSeekModel model(*Tiny().weights);
  auto ids = GreedyGenerate(model, request.prompt, request.max_tokens, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(r.tokens, ids->tokens);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(streamed, Tiny().tokenizer->Decode(r.tokens, /*skip_special=*/true));
  EXPECT_FALSE(streamed.empty());
}

TEST(TextGeneration, StopStringCutsTextBeforeIt) {
  TextRequest request;
  request.prompt = Tiny().tokenizer->Encode("Once upon a time");
  request.sampling.temperature = 0;
  request.max_tokens = 40;
  request.ignore_eos = true;
  std::string full;
  const TextResult unstopped = Generate(request, &full);
  ASSERT_GE(full.size(), 12u);
  // A stop string taken from the middle of what the model writes: the output ends
  // right before its first occurrence, whichever tokens it spans.
  // (3 printable ASCII characters: a stop string must be valid UTF-8.)
  std::string stop;
  for (size_t i = 4; i + 3 <= full.size() && stop.empty(); ++i) {
    const std::string w = full.substr(i, 3);
    if (std::all_of(w.begin(), w.end(), [](char ch) { return ch >= 0x20 && ch < 0x7f; })) stop = w;
  }
  ASSERT_FALSE(stop.empty()) << full;
  request.stop = {stop};
  std::string streamed;
  const TextResult r = Generate(request, &streamed);
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(streamed, full.substr(0, full.find(stop)));
  EXPECT_EQ(streamed.find(stop), std::string::npos);
  EXPECT_LT(r.tokens.size(), unstopped.tokens.size());
}

TEST(TextGeneration, EosStopsUnlessIgnored) {
  // Make EOS the most likely token by stopping on whatever greedy picks first.
  TextRequest request;
  request.prompt = Tiny().tokenizer->Encode("Hello");
  request.sampling.temperature = 0;
  request.max_tokens = 10;
  std::string s1;
  const TextResult first = Generate(request, &s1);
  request.stop_token_ids = {first.tokens[0]};
  std::string s2;
  const TextResult stopped = Generate(request, &s2);
  EXPECT_EQ(stopped.tokens.size(), 1u);
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(s2, "");  // the stop token itself is not shown
}

TEST(TextGeneration, SameSeedSameTokens) {
  TextRequest request;
  request.prompt = Tiny().tokenizer->Encode("Sampling with a seed");
  request.sampling.temperature = 1.0f;
  request.sampling.top_p = 0.9f;
  request.sampling.seed = 1234;
  request.max_tokens = 30;
  request.ignore_eos = true;
  std::string a, b, c;
  const TextResult r1 = Generate(request, &a);
  const TextResult r2 = Generate(request, &b);
  request.sampling.seed = 999;
  const TextResult r3 = Generate(request, &c);
  EXPECT_EQ(r1.tokens, r2.tokens);
  EXPECT_EQ(a, b);
  EXPECT_NE(r1.tokens, r3.tokens);
}

TEST(TextGeneration, CliStreamsTheSameText) {
  TextRequest request;
  request.prompt = Tiny().tokenizer->Encode("abc def");
  request.sampling.temperature = 0.7f;
  request.sampling.seed = 5;
  request.max_tokens = 25;
  request.ignore_eos = true;
  std::string expected;
  Generate(request, &expected);
  const std::string cmd = std::string(LATTE_BINARY) + " generate --model " + Tiny().dir +
                          " --prompt 'abc def' --temperature 0.7 --seed 5 --max-tokens 25 --ignore-eos 2>/dev/null";
  int code = 0;
  const std::string out = testing_process::RunCommand(cmd, &code);
  ASSERT_EQ(code, 0);
  EXPECT_EQ(out, expected + "\n");
}

}  // namespace
}  // namespace latte
