// Where a measured run sits on the machine's roofline. A run that moves `bytes` and
// does `flops` per token cannot go faster than the slower of its two roofs:
//   memory:  bytes / read bandwidth      (seconds per token at the read peak)
//   compute: flops / FLOP peak           (seconds per token at the arithmetic peak)
// The larger of the two binds; the run's share of that roof is the bound time over the
// measured time. Batch-1 decode is memory-bound (each weight byte feeds 2 FLOPs per
// token), prefill and batched decode (a weight read serves many tokens) usually
// compute-bound; which one is decided here from the cost model's counts, never assumed
// from the name of the test. A share above 1 means the probe read below what the run
// achieved (another job slowed the probe, or the probe is too short): it is printed
// as such, never as a plain percentage over 100.
#pragma once

#include <string>

namespace latte {

// The roofs, as measured (bench/machine_probe.h).
struct RooflinePeaks {
  double read_gbps = 0;    // 1e9 bytes/s
  double flop_gflops = 0;  // the arithmetic roof the kernels run on
  std::string flop_name;   // what flop_gflops measured: "bf16" or "f32"
};

enum class RooflineBound { kMemory, kCompute };

struct RooflinePlace {
  RooflineBound bound = RooflineBound::kMemory;
  double fraction = 0;          // the binding roof's time at peak / the measured time
  double memory_fraction = 0;   // achieved GB/s / read peak
  double compute_fraction = 0;  // achieved GFLOP/s / FLOP peak
  bool above_roof() const { return fraction > 1; }
};

// bytes and flops per token (the cost model's), tok_s measured. Peaks must be > 0.
RooflinePlace PlaceOnRoofline(double bytes, double flops, double tok_s, const RooflinePeaks& peaks);

// "61.3% of read BW", "48.0% of bf16 FLOP/s"; above the roof:
// "104.2% of read BW: probe below run".
std::string DescribeRooflinePlace(const RooflinePlace& place, const RooflinePeaks& peaks);

}  // namespace latte
