// LATTE_CHECK and LATTE_DCHECK (base/check.h): what a failed check prints, that a
// passing one evaluates no message, and that LATTE_DCHECK follows the build type.
#include "base/check.h"

#include <gtest/gtest.h>

namespace latte {
namespace {

TEST(CheckDeathTest, FailurePrintsFileLineConditionAndMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int width = 42;
  EXPECT_DEATH(LATTE_CHECK(width + 1 == 3, "width ", width, " of ", 1.5, " blocks"),
               "check_test\\.cc:[0-9]+: check failed: width \\+ 1 == 3: width 42 of 1\\.5 blocks");
  EXPECT_DEATH(LATTE_CHECK(width < 0), "check_test\\.cc:[0-9]+: check failed: width < 0");
}

TEST(Check, PassingCheckEvaluatesNoMessage) {
  int evaluated = 0;
  auto piece = [&evaluated] { return ++evaluated; };
  LATTE_CHECK(evaluated == 0, "piece ", piece());
  EXPECT_EQ(evaluated, 0);
}

TEST(CheckDeathTest, DcheckRunsOnlyInDebugAndSanitizerBuilds) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int evaluated = 0;
  LATTE_DCHECK(++evaluated > 0, "counted");
  EXPECT_EQ(evaluated, LATTE_DCHECK_IS_ON ? 1 : 0);
#if LATTE_DCHECK_IS_ON
  EXPECT_DEATH(LATTE_DCHECK(evaluated < 0, "evaluated ", evaluated), "check failed: evaluated < 0: evaluated 1");
#else
  LATTE_DCHECK(evaluated < 0, "never evaluated");
#endif
}

}  // namespace
}  // namespace latte
