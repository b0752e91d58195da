// SseReader against the events a stream was made of, fed in random pieces.
#include "client/sse_reader.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/splitmix64.h"

namespace latte {
namespace {

std::vector<std::string> FeedInPieces(const std::string& stream, uint64_t seed) {
  SseReader reader;
  std::vector<std::string> events;
  SplitMix64 rng(seed);
  for (size_t at = 0; at < stream.size();) {
    const size_t n = 1 + rng.Next() % 7;
    reader.Feed(std::string_view(stream).substr(at, n), events);
    at += n;
  }
  reader.Finish(events);
  return events;
}

TEST(SseReader, EventsWhateverThePieces) {
  const std::vector<std::string> payloads = {R"({"choices":[{"text":"a"}]})", R"({"text":"data: inside"})", "",
                                             "[DONE]"};
  for (const char* eol : {"\n", "\r\n"}) {
    std::string stream = std::string(": a comment") + eol + eol;
    for (const std::string& p : payloads) stream += "data: " + p + eol + eol;
    for (uint64_t seed = 0; seed < 50; ++seed) EXPECT_EQ(FeedInPieces(stream, seed), payloads) << seed;
  }
}

TEST(SseReader, MultiLineDataAndOtherFields) {
  const std::string stream = "event: x\nid: 3\ndata:first\ndata: second\nretry: 5\n\ndata: last";
  // "data:first" has no space to drop; the last event has no blank line before the end.
  EXPECT_EQ(FeedInPieces(stream, 1), (std::vector<std::string>{"first\nsecond", "last"}));
}

}  // namespace
}  // namespace latte
