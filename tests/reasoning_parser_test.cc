// --reasoning-parser deepseek_r1: the split of "<think>...</think>" output into
// reasoning_content and content does not depend on how the text arrives in pieces.
#include "server/reasoning_parser.h"

#include <gtest/gtest.h>

namespace latte::server {
namespace {

ReasoningDelta Feed(const std::vector<std::string>& pieces) {
  ReasoningParser p;
  ReasoningDelta all;
  for (const std::string& piece : pieces) {
    ReasoningDelta d = p.Push(piece);
    all.reasoning += d.reasoning;
    all.content += d.content;
  }
  ReasoningDelta d = p.Flush();
  all.reasoning += d.reasoning;
  all.content += d.content;
  return all;
}

TEST(ReasoningParser, SplitsAtTheEndMarker) {
  const ReasoningDelta d = Feed({"Let me think.</think>The answer is 4."});
  EXPECT_EQ(d.reasoning, "Let me think.");
  EXPECT_EQ(d.content, "The answer is 4.");
}

TEST(ReasoningParser, DropsALeadingStartMarker) {
  const ReasoningDelta d = Feed({"<think>hmm</think>ok"});
  EXPECT_EQ(d.reasoning, "hmm");
  EXPECT_EQ(d.content, "ok");
}

TEST(ReasoningParser, NoEndMarkerIsAllReasoning) {
  const ReasoningDelta d = Feed({"still thinking </thi"});
  EXPECT_EQ(d.reasoning, "still thinking </thi");
  EXPECT_EQ(d.content, "");
}

TEST(ReasoningParser, EverySplitPointGivesTheSameResult) {
  for (const std::string text :
       {"<think>ab</think>cd", "x</think>y</think>z", "<thin", "<think></think>", "a<think>b"}) {
    const ReasoningDelta whole = Feed({text});
    for (size_t i = 0; i <= text.size(); ++i) {
      for (size_t j = i; j <= text.size(); ++j) {
        const ReasoningDelta d = Feed({text.substr(0, i), text.substr(i, j - i), text.substr(j)});
        EXPECT_EQ(d.reasoning, whole.reasoning) << text << " split at " << i << "," << j;
        EXPECT_EQ(d.content, whole.content) << text << " split at " << i << "," << j;
      }
    }
  }
  EXPECT_EQ(Feed({"x</think>y</think>z"}).content, "y</think>z");
  EXPECT_EQ(Feed({"a<think>b"}).reasoning, "a<think>b");
}

}  // namespace
}  // namespace latte::server
