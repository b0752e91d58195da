// Which roof binds a run, and its share of it (bench/roofline.h): from the bytes and
// FLOPs per token and the probed peaks, never from the test's name. No timing here:
// the figures are made up to sit on either side of the ridge point.
#include "bench/roofline.h"

#include <gtest/gtest.h>

namespace latte {
namespace {

// A machine of 40 GB/s and 400 bf16 GFLOP/s: the ridge is at 10 FLOPs per byte.
RooflinePeaks Machine() { return {40, 400, "bf16"}; }

// Batch-1 decode: ~2 FLOPs per weight byte read, far below the ridge.
TEST(Roofline, DecodeAtTwoFlopsPerByteIsMemoryBound) {
  const double bytes = 1e9, flops = 2e9;  // per token
  const RooflinePlace p = PlaceOnRoofline(bytes, flops, 30, Machine());
  EXPECT_EQ(p.bound, RooflineBound::kMemory);
  EXPECT_DOUBLE_EQ(p.memory_fraction, 30 * 1e9 / 40e9);  // 30 GB/s of 40
  EXPECT_DOUBLE_EQ(p.compute_fraction, 30 * 2e9 / 400e9);
  EXPECT_DOUBLE_EQ(p.fraction, p.memory_fraction);
  EXPECT_FALSE(p.above_roof());
  EXPECT_EQ(DescribeRooflinePlace(p, Machine()), "75.0% of read BW");
}

// Batch-16 decode: the weights of a step are shared by 16 tokens, so each token's bytes
// drop 16x while its FLOPs stay: 32 FLOPs per byte, past the ridge, compute-bound.
TEST(Roofline, BatchedDecodePastTheRidgeIsComputeBound) {
  const double bytes = 1e9 / 16, flops = 2e9;
  const RooflinePlace p = PlaceOnRoofline(bytes, flops, 100, Machine());
  EXPECT_EQ(p.bound, RooflineBound::kCompute);
  EXPECT_DOUBLE_EQ(p.fraction, 100 * 2e9 / 400e9);  // 200 GFLOP/s of 400
  EXPECT_DOUBLE_EQ(p.memory_fraction, 100 * (1e9 / 16) / 40e9);
  EXPECT_EQ(DescribeRooflinePlace(p, Machine()), "50.0% of bf16 FLOP/s");
  RooflinePeaks f32 = Machine();
  f32.flop_name = "f32";
  EXPECT_EQ(DescribeRooflinePlace(p, f32), "50.0% of f32 FLOP/s");
}

// The ridge moves with the probe: a slower memory makes the same run memory-bound.
TEST(Roofline, TheBindingRoofFollowsTheProbes) {
  const double bytes = 1e8, flops = 2e9;  // 20 FLOPs per byte
  EXPECT_EQ(PlaceOnRoofline(bytes, flops, 10, {40, 400, "bf16"}).bound, RooflineBound::kCompute);
  EXPECT_EQ(PlaceOnRoofline(bytes, flops, 10, {10, 400, "bf16"}).bound, RooflineBound::kMemory);  // ridge 40
  // Exactly on the ridge both roofs give the same time: reported against memory.
  const RooflinePlace ridge = PlaceOnRoofline(bytes, flops, 10, {20, 400, "bf16"});
  EXPECT_EQ(ridge.bound, RooflineBound::kMemory);
  EXPECT_DOUBLE_EQ(ridge.memory_fraction, ridge.compute_fraction);
}

// A run faster than its roof means the probe read low; said so, not printed as a plain
// share above 100%.
TEST(Roofline, AboveTheRoofSaysTheProbeReadLow) {
  const RooflinePlace p = PlaceOnRoofline(1e9, 2e9, 42, Machine());  // 42 GB/s against a 40 GB/s probe
  EXPECT_TRUE(p.above_roof());
  EXPECT_DOUBLE_EQ(p.fraction, 42.0 / 40.0);
  EXPECT_EQ(DescribeRooflinePlace(p, Machine()), "105.0% of read BW: probe below run");
}

}  // namespace
}  // namespace latte
