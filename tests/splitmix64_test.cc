// splitmix64 against the reference implementation's outputs (Vigna's splitmix64.c,
// seeded with 0), and the counter form random checkpoints draw from.
#include "base/splitmix64.h"

#include <gtest/gtest.h>

namespace latte {
namespace {

TEST(SplitMix64, MatchesTheReferenceSequence) {
  SplitMix64 rng(0);
  EXPECT_EQ(rng.Next(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(rng.Next(), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(rng.Next(), 0x06c45d188009454full);
}

TEST(SplitMix64, OutputIIsTheMixOfTheIthCounter) {
  const uint64_t seed = 0x0123456789abcdefull;
  SplitMix64 rng(seed);
  for (uint64_t i = 1; i <= 100; ++i) EXPECT_EQ(rng.Next(), SplitMix64Mix(seed + i * kSplitMix64Gamma)) << i;
}

}  // namespace
}  // namespace latte
