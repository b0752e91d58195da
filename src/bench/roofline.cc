#include "bench/roofline.h"

#include <cstdio>

namespace latte {

RooflinePlace PlaceOnRoofline(double bytes, double flops, double tok_s, const RooflinePeaks& peaks) {
  RooflinePlace p;
  const double memory_seconds = bytes / (peaks.read_gbps * 1e9);     // per token, at the read peak
  const double compute_seconds = flops / (peaks.flop_gflops * 1e9);  // per token, at the FLOP peak
  p.memory_fraction = memory_seconds * tok_s;
  p.compute_fraction = compute_seconds * tok_s;
  p.bound = compute_seconds > memory_seconds ? RooflineBound::kCompute : RooflineBound::kMemory;
  p.fraction = p.bound == RooflineBound::kCompute ? p.compute_fraction : p.memory_fraction;
  return p;
}

std::string DescribeRooflinePlace(const RooflinePlace& place, const RooflinePeaks& peaks) {
  const std::string roof = place.bound == RooflineBound::kMemory ? "read BW" : peaks.flop_name + " FLOP/s";
  char text[96];
  std::snprintf(text, sizeof text, "%.1f%% of %s%s", 100.0 * place.fraction, roof.c_str(),
                place.above_roof() ? ": probe below run" : "");
  return text;
}

}  // namespace latte
