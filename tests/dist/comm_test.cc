// The collectives themselves, run under mpirun (tests/dist/mpi_test_main.cc joins the
// job): every rank knows every rank's random inputs (seeded by rank), so each checks
// the result against a plain loop over them. Sums must be bit-identical to the loop
// that adds rank 0's value, then rank 1's, ... on every rank.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "dist/comm.h"
#include "dist/runtime.h"

namespace latte {
namespace {

std::vector<float> RankData(int rank, int64_t count, uint64_t salt) {
  std::mt19937_64 rng(rank * 7919 + salt);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng) * std::exp2(static_cast<float>(rng() % 20) - 10);  // many magnitudes
  return v;
}

TEST(Comm, RunsUnderMpirunWithSeveralRanks) { EXPECT_GE(WorldComm().size(), 2) << "run under mpirun -np 2 or more"; }

TEST(Comm, AllReduceSumIsTheRankOrderSumOnEveryRank) {
  Comm& world = WorldComm();
  const int P = world.size();
  // Small (all-gather path) and large (exchange path: > 64 KiB, not a multiple of P).
  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{2048}, int64_t{100003}}) {
    std::vector<float> data = RankData(world.rank(), count, count);
    world.AllReduceSum(data.data(), count);
    // The whole vector against one pass over all ranks' data.
    std::vector<std::vector<float>> all;
    for (int r = 0; r < P; ++r) all.push_back(RankData(r, count, count));
    for (int64_t i = 0; i < count; ++i) {
      float sum = all[0][i];
      for (int r = 1; r < P; ++r) sum += all[r][i];
      ASSERT_EQ(std::memcmp(&data[i], &sum, sizeof(float)), 0) << "count " << count << " i " << i;
    }
    // Every rank holds the same bits.
    std::vector<float> every(static_cast<size_t>(P * count));
    world.AllGatherBytes(data.data(), count * sizeof(float), every.data());
    for (int r = 0; r < P; ++r) {
      ASSERT_EQ(std::memcmp(every.data() + r * count, data.data(), count * sizeof(float)), 0) << "rank " << r;
    }
  }
}

TEST(Comm, AllGatherVPlacesEachRanksRowsInRankOrder) {
  Comm& world = WorldComm();
  const int P = world.size();
  std::vector<int64_t> counts;
  for (int r = 0; r < P; ++r) counts.push_back(r == 1 ? 0 : 3 * r + 5);  // rank 1 sends nothing
  const std::vector<float> mine = RankData(world.rank(), counts[world.rank()], 99);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  std::vector<float> out(total, -1.0f);
  world.AllGatherV(mine.data(), counts, out.data());
  int64_t offset = 0;
  for (int r = 0; r < P; ++r) {
    const std::vector<float> want = RankData(r, counts[r], 99);
    for (int64_t i = 0; i < counts[r]; ++i) ASSERT_EQ(out[offset + i], want[i]) << "rank " << r;
    offset += counts[r];
  }
}

TEST(Comm, BroadcastCarriesAnyLengthAndCountsItsBytes) {
  Comm& world = WorldComm();
  world.ResetStats();
  for (size_t length : {size_t{0}, size_t{1}, size_t{100000}}) {
    for (bool idle : {false, true}) {
      std::vector<uint8_t> bytes;
      if (world.rank() == 1) {
        for (size_t i = 0; i < length; ++i) bytes.push_back(static_cast<uint8_t>(i * 31 + length));
      }
      world.Broadcast(bytes, 1, idle);
      ASSERT_EQ(bytes.size(), length);
      for (size_t i = 0; i < length; ++i) ASSERT_EQ(bytes[i], static_cast<uint8_t>(i * 31 + length));
    }
  }
  EXPECT_EQ(world.stats()[CollectiveKind::kBroadcast].calls, 6);
  const int64_t sent = world.stats()[CollectiveKind::kBroadcast].bytes_sent;
  EXPECT_EQ(sent, world.rank() == 1 ? (world.size() - 1) * (6 * 8 + 2 * 100001) : 0);
}

TEST(LocalComm, IsAWorldOfOne) {
  LocalComm local;
  std::vector<float> v = {1.5f, -2.0f};
  local.AllReduceSum(v.data(), 2);
  EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f}));
  std::vector<float> out(2);
  const int64_t counts[] = {2};
  local.AllGatherV(v.data(), counts, out.data());
  EXPECT_EQ(out, v);
}

}  // namespace
}  // namespace latte
