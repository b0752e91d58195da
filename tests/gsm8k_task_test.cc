// lm-eval's gsm8k filters and metric (client/gsm8k_task.h) on hand-written completions.
// Each expected value is what lm-eval's own code gives (RegexFilter.apply and
// exact_match_hf_evaluate with gsm8k.yaml's settings, run under Python's re on these
// strings), including the cases where Python's and PCRE2's defaults could part: `$`
// before a final newline, greedy (?s).*, tuples of groups, group_select -1.
#include "client/gsm8k_task.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace latte {
namespace {

struct FilterCase {
  std::string completion;
  std::string strict, flexible;            // the filters' answers
  std::string strict_norm, flexible_norm;  // after the metric's normalization
};

const FilterCase kCases[] = {
    {"25 + 17 = 42\n#### 42", "42", "42", "42", "42"},
    {"#### 1,234.\n", "1,234.", "1,234.", "1234", "1234"},
    {"The answer is $18.", "[invalid]", "$18.", "[invalid]", "18"},
    {"#### -5 and #### 7", "-5", "7", "-5", "7"},
    {"3 apples and 4 pears", "[invalid]", "4", "[invalid]", "4"},
    {"", "[invalid]", "[invalid]", "[invalid]", "[invalid]"},
    {"x = 1.5, so #### 2.\n\n", "2.", "2.", "2", "2"},
    {"no numbers here", "[invalid]", "[invalid]", "[invalid]", "[invalid]"},
    {"-7 then -8", "[invalid]", "-8", "[invalid]", "-8"},
};

TEST(Gsm8kTask, FiltersAsLmEval) {
  auto scorer = Gsm8kScorer::Create();
  ASSERT_TRUE(scorer.ok()) << scorer.status().message();
  for (const FilterCase& c : kCases) {
    EXPECT_EQ((*scorer)->StrictMatch(c.completion), c.strict) << c.completion;
    EXPECT_EQ((*scorer)->FlexibleExtract(c.completion), c.flexible) << c.completion;
    EXPECT_EQ((*scorer)->Normalize(c.strict), c.strict_norm) << c.completion;
    EXPECT_EQ((*scorer)->Normalize(c.flexible), c.flexible_norm) << c.completion;
  }
}

TEST(Gsm8kTask, NormalizationAsLmEval) {
  auto scorer = Gsm8kScorer::Create();
  ASSERT_TRUE(scorer.ok());
  const std::pair<std::string, std::string> cases[] = {
      {"Foo #### 12", "12"},        {"ABC", "abc"},    {"12.\n", "12\n"},
      {"a\n#### b #### 5", "5"},    {"x.\n.", "x.\n"}, {"$1,000.50.", "1000.50"},
      {"4 * 3 = 12\n#### 12", "12"}};
  for (const auto& [in, out] : cases) EXPECT_EQ((*scorer)->Normalize(in), out) << in;
  // A target is the whole worked answer; the filtered answer matches its final number.
  EXPECT_TRUE((*scorer)->ExactMatch("1,234.", "1000 + 234 = 1234\n#### 1234"));
  EXPECT_TRUE((*scorer)->ExactMatch("$18.", "#### 18"));
  EXPECT_FALSE((*scorer)->ExactMatch("18.5", "#### 18"));
  EXPECT_FALSE((*scorer)->ExactMatch("[invalid]", "#### 3"));
}

TEST(Gsm8kTask, PromptAsLmEval) {
  const std::vector<Gsm8kDoc> shots = {{"Q1?", "1 + 1 = 2\n#### 2"}, {"Q2?", "#### 5"}, {"Q3?", "#### 9"}};
  EXPECT_EQ(Gsm8kPrompt(shots, 2, {"Q?", "#### 1"}),
            "Question: Q1?\nAnswer: 1 + 1 = 2\n#### 2\n\nQuestion: Q2?\nAnswer: #### 5\n\nQuestion: Q?\nAnswer:");
  EXPECT_EQ(Gsm8kPrompt(shots, 0, {"Q?", "#### 1"}), "Question: Q?\nAnswer:");
}

TEST(Gsm8kTask, MeanStderrIsSampleSdOverSqrtN) {
  // [1, 0, 1, 1]: mean 0.75, sample sd sqrt((3 * 0.0625 + 0.5625) / 3) = 0.5, / sqrt(4).
  EXPECT_DOUBLE_EQ(MeanStderr({1, 0, 1, 1}), 0.25);
  EXPECT_DOUBLE_EQ(MeanStderr({1, 1}), 0.0);
  EXPECT_TRUE(std::isnan(MeanStderr({1})));
}

TEST(Gsm8kTask, LoadsJsonlAndNamesTheBadLine) {
  const std::string path = ::testing::TempDir() + "gsm8k_task_test.jsonl";
  {
    std::ofstream out(path);
    out << R"({"question": "q1", "answer": "a\n#### 1", "extra": 3})"
        << "\n\n"
        << R"({"question": "q2", "answer": "#### 2"})"
        << "\n";
  }
  auto docs = LoadGsm8kJsonl(path);
  ASSERT_TRUE(docs.ok()) << docs.status().message();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[0].answer, "a\n#### 1");
  EXPECT_EQ((*docs)[1].question, "q2");
  {
    std::ofstream out(path);
    out << R"({"question": "q1", "answer": "#### 1"})"
        << "\n"
        << R"({"question": 5, "answer": "#### 2"})"
        << "\n";
  }
  docs = LoadGsm8kJsonl(path);
  ASSERT_FALSE(docs.ok());
  EXPECT_EQ(docs.status().message(), path + ":2: no string \"question\"");
  {
    std::ofstream out(path);
    out << "{not json\n";
  }
  EXPECT_EQ(LoadGsm8kJsonl(path).status().message(), path + ":1: not JSON");
  EXPECT_FALSE(LoadGsm8kJsonl(path + ".missing").ok());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace latte
