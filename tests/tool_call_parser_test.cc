// The DeepSeek tool-call parsers (server/tool_call_parser.h): whole texts in both
// formats, malformed ones returned as content, and streaming over random splits of the
// text giving exactly what the whole-text parse gives.
#include "server/tool_call_parser.h"

#include <gtest/gtest.h>

#include <random>

namespace latte::server {
namespace {

const std::string kBegin = "<｜tool▁calls▁begin｜>";
const std::string kEnd = "<｜tool▁calls▁end｜>";

std::string V3Call(const std::string& name, const std::string& args) {
  return "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name + "\n```json\n" + args + "\n```<｜tool▁call▁end｜>";
}
std::string V31Call(const std::string& name, const std::string& args) {
  return "<｜tool▁call▁begin｜>" + name + "<｜tool▁sep｜>" + args + "<｜tool▁call▁end｜>";
}

TEST(ToolCallParser, ReadsBothFormats) {
  const std::string v3 = "Let me look." + kBegin + V3Call("get_weather", R"({"city": "Paris"})") + "\n" +
                         V3Call("add", R"({"a":1,"b":[2,3]})") + kEnd;
  ParsedToolCalls p = ToolCallParser::Parse(ToolCallFormat::kDeepSeekV3, v3);
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.content, "Let me look.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city": "Paris"})");
  EXPECT_EQ(p.calls[1].name, "add");
  EXPECT_EQ(p.calls[1].arguments, R"({"a":1,"b":[2,3]})");

  const std::string v31 = kBegin + V31Call("search", R"({"q":"a<b"})") + V31Call("f", "{}") + kEnd;
  p = ToolCallParser::Parse(ToolCallFormat::kDeepSeekV31, v31);
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].arguments, R"({"q":"a<b"})");
  EXPECT_EQ(p.calls[1].name, "f");
  // Without the closing marker (the model stopped after its last call) it still reads.
  p = ToolCallParser::Parse(ToolCallFormat::kDeepSeekV31, kBegin + V31Call("f", "{}"));
  EXPECT_TRUE(p.ok);
}

TEST(ToolCallParser, TextWithoutCallsIsContent) {
  ParsedToolCalls p = ToolCallParser::Parse(ToolCallFormat::kDeepSeekV3, "Just text, <｜tool but not a marker.");
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.content, "Just text, <｜tool but not a marker.");
}

TEST(ToolCallParser, AMalformedCallIsAllContent) {
  const std::vector<std::string> bad = {
      kBegin + "<｜tool▁call▁begin｜>function get_weather\n```json\n{}\n```<｜tool▁call▁end｜>" + kEnd,  // no sep
      kBegin + V3Call("get_weather", "{city: Paris}") + kEnd,                                            // not JSON
      kBegin + V3Call("get_weather", R"({"city": "Par)"),                                                // cut short
      kBegin + "<｜tool▁call▁begin｜>method<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜>" +
          kEnd,                          // not function
      kBegin + V3Call("", "{}") + kEnd,  // no name
      kBegin + "some words" + kEnd,
      kBegin,
  };
  for (const std::string& text : bad) {
    ParsedToolCalls p = ToolCallParser::Parse(ToolCallFormat::kDeepSeekV3, "Hi " + text);
    EXPECT_FALSE(p.ok) << text;
    EXPECT_EQ(p.content, "Hi " + text);
    EXPECT_TRUE(p.calls.empty());
  }
}

// Streams `text` in random pieces and rebuilds content and calls from the deltas.
ParsedToolCalls Streamed(ToolCallFormat format, const std::string& text, std::mt19937_64& rng) {
  ToolCallParser parser(format);
  ParsedToolCalls got;
  auto take = [&](const ToolCallDelta& d) {
    got.content += d.content;
    for (const ToolCallPiece& piece : d.calls) {
      if (piece.first) {
        EXPECT_EQ(piece.index, static_cast<int>(got.calls.size()));
        EXPECT_TRUE(piece.arguments.empty());
        got.calls.push_back({piece.name, ""});
      } else {
        EXPECT_EQ(piece.index, static_cast<int>(got.calls.size()) - 1);
      }
      got.calls.back().arguments += piece.arguments;
    }
  };
  for (size_t at = 0; at < text.size();) {
    const size_t n = std::min(text.size() - at, static_cast<size_t>(1 + rng() % 9));
    take(parser.Push(std::string_view(text).substr(at, n)));
    at += n;
  }
  take(parser.Flush());
  return got;
}

TEST(ToolCallParser, StreamingOverRandomSplitsEqualsTheWholeParse) {
  std::mt19937_64 rng(42);
  const std::vector<std::pair<ToolCallFormat, std::string>> texts = {
      {ToolCallFormat::kDeepSeekV3, "Checking <｜weather｜>." + kBegin +
                                        V3Call("get_weather", R"({"city": "Zürich"})") + "\n" +
                                        V3Call("t", R"([1, "\n```"])") + kEnd},
      {ToolCallFormat::kDeepSeekV31, kBegin + V31Call("a_b-c", R"({"x": "<｜tool"})") + V31Call("n", "null") + kEnd},
      {ToolCallFormat::kDeepSeekV3, "no calls at all, only <｜ and ▁ and `"},
  };
  for (const auto& [format, text] : texts) {
    const ParsedToolCalls whole = ToolCallParser::Parse(format, text);
    for (int trial = 0; trial < 200; ++trial) {
      const ParsedToolCalls got = Streamed(format, text, rng);
      EXPECT_EQ(got.content, whole.content) << text;
      ASSERT_EQ(got.calls.size(), whole.calls.size()) << text;
      for (size_t i = 0; i < got.calls.size(); ++i) {
        EXPECT_EQ(got.calls[i].name, whole.calls[i].name);
        EXPECT_EQ(got.calls[i].arguments, whole.calls[i].arguments);
      }
    }
  }
}

TEST(ToolCallParser, StreamingTurnsTheRestIntoContentWhereTheFormatBreaks) {
  std::mt19937_64 rng(7);
  const std::string broken = "x" + kBegin + V3Call("f", "{}") + "\n<｜tool▁call▁begin｜>oops";
  const ParsedToolCalls got = Streamed(ToolCallFormat::kDeepSeekV3, broken, rng);
  ASSERT_EQ(got.calls.size(), 1u);  // the first call was whole and went out as a call
  EXPECT_EQ(got.calls[0].name, "f");
  EXPECT_EQ(got.content, "xoops");
  EXPECT_FALSE(ToolCallParser::Parse(ToolCallFormat::kDeepSeekV3, broken).ok);
}

}  // namespace
}  // namespace latte::server
