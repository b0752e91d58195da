// AppendUtf8 and DecodeUtf8At against literal encodings and each other over every
// Unicode scalar value (the 4-byte range included).
#include "text/utf8.h"

#include <string>

#include <gtest/gtest.h>

namespace latte {
namespace {

std::string Encoded(uint32_t cp) {
  std::string s;
  AppendUtf8(cp, s);
  return s;
}

TEST(Utf8, AppendWritesTheStandardBytes) {
  EXPECT_EQ(Encoded(0x41), "A");
  EXPECT_EQ(Encoded(0xe9), "\xc3\xa9");              // é
  EXPECT_EQ(Encoded(0x20ac), "\xe2\x82\xac");        // €
  EXPECT_EQ(Encoded(0x1f600), "\xf0\x9f\x98\x80");   // 😀
  EXPECT_EQ(Encoded(0x10ffff), "\xf4\x8f\xbf\xbf");  // the last code point
}

TEST(Utf8, EveryScalarValueRoundTrips) {
  for (uint32_t cp = 0; cp <= 0x10ffff; ++cp) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;  // surrogates are not scalar values
    const std::string s = Encoded(cp);
    const size_t expected_length = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    ASSERT_EQ(s.size(), expected_length) << cp;
    ASSERT_TRUE(IsValidUtf8(s)) << cp;
    size_t len = 0;
    ASSERT_EQ(DecodeUtf8At(s, 0, len), cp);
    ASSERT_EQ(len, expected_length) << cp;
  }
}

}  // namespace
}  // namespace latte
