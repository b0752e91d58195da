// StopMatcher (src/engine/stop_matcher.h) against a reference that reads the whole text at
// once: walk the end positions e = 1..n; the first e at which some stop string ends stops
// the text, the longest stop string ending there wins, and the output is the text before
// it. Every way of splitting the text into pieces must give that output, and while no stop
// has completed, the text released so far must be everything except the longest suffix
// that could still begin a stop string.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/stop_matcher.h"
#include "text/utf8.h"

namespace latte {
namespace {

struct Expected {
  std::string text;
  int stop_index = -1;
};

Expected Reference(const std::string& text, const std::vector<std::string>& stops) {
  for (size_t e = 1; e <= text.size(); ++e) {
    int best = -1;
    for (size_t i = 0; i < stops.size(); ++i) {
      const std::string& s = stops[i];
      if (s.size() <= e && text.compare(e - s.size(), s.size(), s) == 0 &&
          (best < 0 || s.size() > stops[best].size())) {
        best = static_cast<int>(i);
      }
    }
    if (best >= 0) return {text.substr(0, e - stops[best].size()), best};
  }
  return {text, -1};
}

// Bytes of `received` that may still begin a stop string: its longest suffix that is a
// proper prefix of one.
size_t HeldBack(const std::string& received, const std::vector<std::string>& stops) {
  size_t held = 0;
  for (const std::string& s : stops) {
    for (size_t len = 1; len < s.size() && len <= received.size(); ++len) {
      if (received.compare(received.size() - len, len, s, 0, len) == 0) held = std::max(held, len);
    }
  }
  return held;
}

// Streams `pieces` through a fresh matcher, checking every step; returns what was emitted.
Expected Stream(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  auto matcher = StopMatcher::Create(stops, {});
  EXPECT_TRUE(matcher.ok()) << matcher.status().message();
  Expected out;
  std::string received;
  for (const std::string& piece : pieces) {
    const StopStep step = matcher->Push(piece);
    if (out.stop_index >= 0) {  // already stopped: nothing more comes out
      EXPECT_TRUE(step.stopped);
      EXPECT_TRUE(step.text.empty());
      continue;
    }
    received += piece;
    out.text += step.text;
    if (step.stopped) {
      out.stop_index = step.stop_index;
      EXPECT_EQ(matcher->matched_stop(), stops[step.stop_index]);
      continue;
    }
    EXPECT_EQ(out.text.size(), received.size() - HeldBack(received, stops)) << "after \"" << received << "\"";
  }
  if (out.stop_index < 0) {
    EXPECT_FALSE(matcher->stopped());
    out.text += matcher->Flush();
  } else {
    EXPECT_TRUE(matcher->Flush().empty());
  }
  return out;
}

// All 2^(n-1) ways of cutting `text` into non-empty pieces, at byte offsets `cuts` (sorted).
void ForEachSplit(const std::string& text, const std::vector<size_t>& cuts,
                  const std::function<void(const std::vector<std::string>&)>& fn) {
  const size_t m = cuts.size();
  for (uint64_t mask = 0; mask < (uint64_t{1} << m); ++mask) {
    std::vector<std::string> pieces;
    size_t begin = 0;
    for (size_t j = 0; j < m; ++j) {
      if (mask & (uint64_t{1} << j)) {
        pieces.push_back(text.substr(begin, cuts[j] - begin));
        begin = cuts[j];
      }
    }
    pieces.push_back(text.substr(begin));
    fn(pieces);
  }
}

std::vector<size_t> ByteCuts(const std::string& text) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < text.size(); ++i) cuts.push_back(i);
  return cuts;
}

TEST(StopMatcherTest, EverySplitGivesTheReferenceOutput) {
  const std::vector<std::vector<std::string>> stop_sets = {
      {"abc"},       {"ab", "b"},
      {"aab", "ab"}, {"abab", "ba"},
      {"bc", "abc"}, {"aaaa", "acb", "bcb", "cc"},
      {"a"},         {"abcab", "cabc", "bca"},
  };
  std::mt19937_64 rng(2024);
  int stopped = 0, total = 0;
  for (const auto& stops : stop_sets) {
    for (int trial = 0; trial < 60; ++trial) {
      const size_t n = 1 + rng() % 11;
      std::string text;
      for (size_t i = 0; i < n; ++i) text += static_cast<char>('a' + rng() % 3);
      const Expected want = Reference(text, stops);
      stopped += want.stop_index >= 0;
      ForEachSplit(text, ByteCuts(text), [&](const std::vector<std::string>& pieces) {
        ++total;
        const Expected got = Stream(stops, pieces);
        ASSERT_EQ(got.text, want.text) << "text \"" << text << "\", " << pieces.size() << " pieces";
        ASSERT_EQ(got.stop_index, want.stop_index) << "text \"" << text << "\"";
      });
    }
  }
  // The random texts exercise both outcomes.
  EXPECT_GT(stopped, 100);
  EXPECT_GT(total, 10000);
}

TEST(StopMatcherTest, NoStopEmitsEverythingInOrder) {
  const std::vector<std::string> pieces = {"Hello", ",", " wor", "ld", "! <", "/", "s", ">", " end"};
  std::string input;
  for (const auto& p : pieces) input += p;
  // No stop strings: every piece comes straight out.
  StopMatcher none;
  for (const auto& p : pieces) {
    const StopStep step = none.Push(p);
    EXPECT_EQ(step.text, p);
    EXPECT_FALSE(step.stopped);
  }
  // Stop strings that never complete: some text is held back for a while, all of it in order.
  const Expected got = Stream({"</think>", "world?", "xyz"}, pieces);
  EXPECT_EQ(got.stop_index, -1);
  EXPECT_EQ(got.text, input);
}

TEST(StopMatcherTest, HoldsBackOnlyWhatCouldStartAStop) {
  auto m = StopMatcher::Create({"hello world"}, {});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->Push("say hello").text, "say ");
  EXPECT_EQ(m->Push(" wor").text, "");
  const StopStep step = m->Push("ld! more");
  EXPECT_TRUE(step.stopped);
  EXPECT_EQ(step.text, "");
  EXPECT_EQ(step.stop_index, 0);
  EXPECT_EQ(m->matched_stop(), "hello world");
  // After the stop nothing more is emitted.
  const StopStep after = m->Push("anything");
  EXPECT_TRUE(after.stopped);
  EXPECT_EQ(after.text, "");

  auto n = StopMatcher::Create({"hello world"}, {});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->Push("say hello").text, "say ");
  EXPECT_EQ(n->Push(" there").text, "hello there");
  EXPECT_EQ(n->Push(" hel").text, " ");
  EXPECT_EQ(n->Flush(), "hel");  // generation ended (EOS, max_tokens): release it
  EXPECT_FALSE(n->stopped());
}

TEST(StopMatcherTest, OverlappingStopStrings) {
  // The stop that ends first wins, even if another started earlier.
  Expected got = Stream({"abcd", "bc"}, {"xab", "cd"});
  EXPECT_EQ(got.text, "xa");
  EXPECT_EQ(got.stop_index, 1);
  // Two ending at the same byte: the longer one.
  got = Stream({"bc", "abc"}, {"xa", "bc"});
  EXPECT_EQ(got.text, "x");
  EXPECT_EQ(got.stop_index, 1);
  // A shorter stop inside a longer held-back prefix.
  got = Stream({"<|im_end|>", "|im"}, {"ok <", "|im_end|>"});
  EXPECT_EQ(got.text, "ok <");
  EXPECT_EQ(got.stop_index, 1);
  // In one piece, all at once.
  got = Stream({"abc", "b"}, {"xabcx"});
  EXPECT_EQ(got.text, "xa");
  EXPECT_EQ(got.stop_index, 1);
}

TEST(StopMatcherTest, StopAtTheVeryStart) {
  Expected got = Stream({"<|end|>"}, {"<|end|>rest"});
  EXPECT_EQ(got.text, "");
  EXPECT_EQ(got.stop_index, 0);
  got = Stream({"<|end|>"}, {"<|", "end", "|>", "rest"});
  EXPECT_EQ(got.text, "");
  EXPECT_EQ(got.stop_index, 0);
}

TEST(StopMatcherTest, UnicodeStopStrings) {
  const std::vector<std::string> stops = {"世界", "é", "🙂!"};
  const std::vector<std::string> texts = {
      "café au lait",        // stops at é
      "naïve è 世 界 done",  // è shares é's lead byte; 世 alone does not stop
      "hello 世界 again",   "smile 🙂 🙂! end", "plain ascii",
  };
  for (const std::string& text : texts) {
    SCOPED_TRACE(text);
    ASSERT_TRUE(IsValidUtf8(text));
    const Expected want = Reference(text, stops);
    // Pieces on character boundaries (as the streaming detokenizer gives): every emitted
    // chunk is valid UTF-8 too.
    std::vector<size_t> char_cuts;
    for (size_t i = 1; i < text.size(); ++i) {
      if (Utf8SequenceLength(static_cast<unsigned char>(text[i])) != 0) char_cuts.push_back(i);
    }
    ASSERT_LE(char_cuts.size(), 20u);
    ForEachSplit(text, char_cuts, [&](const std::vector<std::string>& pieces) {
      auto m = StopMatcher::Create(stops, {});
      ASSERT_TRUE(m.ok());
      std::string out;
      for (const auto& p : pieces) {
        const StopStep step = m->Push(p);
        ASSERT_TRUE(IsValidUtf8(step.text)) << "\"" << step.text << "\"";
        out += step.text;
      }
      const std::string rest = m->Flush();
      ASSERT_TRUE(IsValidUtf8(rest));
      out += rest;
      ASSERT_EQ(out, want.text);
      ASSERT_EQ(m->stopped() ? m->matched_stop() : "", want.stop_index >= 0 ? stops[want.stop_index] : "");
    });
  }
  EXPECT_EQ(Reference("café au lait", stops).text, "caf");
  EXPECT_EQ(Reference("naïve è 世 界 done", stops).stop_index, -1);
  EXPECT_EQ(Reference("smile 🙂 🙂! end", stops).text, "smile 🙂 ");
  // Byte-level splits (a character cut in two) still give the same text.
  const std::string text = "ab 世界";
  ForEachSplit(text, ByteCuts(text), [&](const std::vector<std::string>& pieces) {
    const Expected got = Stream(stops, pieces);
    ASSERT_EQ(got.text, "ab ");
    ASSERT_EQ(got.stop_index, 0);
  });
}

TEST(StopMatcherTest, CreateRejectsBadStops) {
  EXPECT_TRUE(StopMatcher::Create({"a", "b", "c", "d"}, {}).ok());
  const auto too_many = StopMatcher::Create({"a", "b", "c", "d", "e"}, {});
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("at most 4"), std::string::npos) << too_many.status().message();
  EXPECT_FALSE(StopMatcher::Create({"ok", ""}, {}).ok());
  EXPECT_FALSE(StopMatcher::Create({"\xff"}, {}).ok());
  EXPECT_FALSE(StopMatcher::Create({"\xe4\xb8"}, {}).ok());  // 世 cut short
}

TEST(StopMatcherTest, StopTokens) {
  auto m = StopMatcher::Create({}, {1, 100001});
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->IsStopToken(1));
  EXPECT_TRUE(m->IsStopToken(100001));
  EXPECT_FALSE(m->IsStopToken(0));
  EXPECT_FALSE(m->IsStopToken(2));
  EXPECT_FALSE(StopMatcher().IsStopToken(1));
  // No stop strings: text passes straight through.
  EXPECT_EQ(m->Push("abc").text, "abc");
}

}  // namespace
}  // namespace latte
