// /proc/stat's cpu line read into busy and total jiffies, and the busy CPUs between two
// readings: what latte's start-up uses to choose how OpenMP threads wait.
#include "base/cpu_load.h"

#include <gtest/gtest.h>

#include <string>

#include "base/splitmix64.h"

namespace latte {
namespace {

TEST(CpuLoad, ParsesTheCpuLineAgainstASumOfItsFields) {
  SplitMix64 rng(7);
  for (int trial = 0; trial < 100; ++trial) {
    uint64_t f[10];
    for (uint64_t& v : f) v = rng.Next() % 100000000;
    std::string line = "cpu ";
    for (uint64_t v : f) line += " " + std::to_string(v);
    const auto t = ParseProcStatCpu(line);
    ASSERT_TRUE(t.has_value()) << line;
    // user nice system idle iowait irq softirq steal guest guest_nice: guest time is
    // counted in user already, so it is not added again.
    EXPECT_EQ(t->busy, f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) << line;
    EXPECT_EQ(t->total, f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7]) << line;
  }
  // Old kernels write only the first four fields.
  const auto old = ParseProcStatCpu("cpu  10 20 30 40");
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->busy, 60u);
  EXPECT_EQ(old->total, 100u);
}

TEST(CpuLoad, RefusesWhatIsNotTheAggregateLine) {
  EXPECT_FALSE(ParseProcStatCpu("cpu0 1 2 3 4 5 6 7 8").has_value());
  EXPECT_FALSE(ParseProcStatCpu("intr 1 2 3 4").has_value());
  EXPECT_FALSE(ParseProcStatCpu("cpu  1 2 3").has_value());
  EXPECT_FALSE(ParseProcStatCpu("cpu  a b c d").has_value());
  EXPECT_FALSE(ParseProcStatCpu("").has_value());
}

TEST(CpuLoad, BusyCpusIsTheBusyShareTimesTheCpus) {
  // 4 CPUs for 100 jiffies each: 400 total; one CPU busy throughout is 100 busy.
  EXPECT_DOUBLE_EQ(BusyCpus({1000, 5000}, {1100, 5400}, 4), 1.0);
  EXPECT_DOUBLE_EQ(BusyCpus({1000, 5000}, {1000, 5400}, 4), 0.0);
  EXPECT_DOUBLE_EQ(BusyCpus({1000, 5000}, {1300, 5400}, 4), 3.0);
  // No time passed, or a counter that went back: nothing measured.
  EXPECT_DOUBLE_EQ(BusyCpus({1000, 5000}, {1000, 5000}, 4), 0.0);
  EXPECT_DOUBLE_EQ(BusyCpus({1000, 5000}, {900, 5400}, 4), 0.0);
}

TEST(CpuLoad, ReadsThisMachine) {
  const auto t = ReadCpuTimes();
  ASSERT_TRUE(t.has_value());
  EXPECT_GT(t->total, 0u);
  EXPECT_LE(t->busy, t->total);
  const auto busy = OtherBusyCpus(20);
  ASSERT_TRUE(busy.has_value());
  EXPECT_GE(*busy, 0.0);
}

}  // namespace
}  // namespace latte
