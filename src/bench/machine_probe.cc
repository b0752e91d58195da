#include "bench/machine_probe.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/cpu_features.h"
#include "base/parallel.h"

namespace latte {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// 12 independent accumulators per thread cover the instruction latency (4-6 cycles)
// times the issue rate (1-2 per cycle) of the FMA and dot-product units.
constexpr int kAccumulators = 12;

// (_mm512_reduce_add_ps trips GCC 12's -Wuninitialized inside target-attributed code.)
__attribute__((target("avx512f"))) float SumLanes(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float sum = 0;
  for (float x : lanes) sum += x;
  return sum;
}

// FLOPs of one iteration: kAccumulators instructions of 16 lanes; vdpbf16ps does
// 2 multiply-adds per lane (4 FLOPs), vfmadd 1 (2 FLOPs).
__attribute__((target("avx512f,avx512bf16"))) float Bf16Loop(int64_t iterations, float seed) {
  __m512 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(seed * static_cast<float>(i));
  // a, b: bf16 pairs of small values so the sums stay finite.
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // 1.0, 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi32(0x33d633d6);  // ~1e-7, ~1e-7
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < kAccumulators; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return SumLanes(sum);
}

__attribute__((target("avx512f"))) float FmaAvx512Loop(int64_t iterations, float seed) {
  __m512 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(seed * static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f + seed * 1e-9f);
  const __m512 b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < kAccumulators; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return SumLanes(sum);
}

// CPUs without AVX-512: 8-wide FMA (the GEMVs' gemv_avx2.cc), 12 of the 16 registers.
__attribute__((target("avx2,fma"))) float FmaAvx2Loop(int64_t iterations, float seed) {
  __m256 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_set1_ps(seed * static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f + seed * 1e-9f);
  const __m256 b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 sum = acc[0];
  for (int i = 1; i < kAccumulators; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

// Baseline x86-64: the compiler keeps these 4-wide SSE registers (multiply + add).
float FmaPortableLoop(int64_t iterations, float seed) {
  constexpr int kLanes = 4 * kAccumulators;
  float acc[kLanes];
  for (int i = 0; i < kLanes; ++i) acc[i] = seed * static_cast<float>(i);
  const float a = 0.999999f + seed * 1e-9f, b = 1e-7f;
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < kLanes; ++i) acc[i] = acc[i] * a + b;
  }
  float sum = 0;
  for (int i = 0; i < kLanes; ++i) sum += acc[i];
  return sum;
}

// A register-resident loop and how many iterations make one timed pass.
struct ComputeProbe {
  float (*loop)(int64_t, float) = nullptr;
  double flops_per_iteration = 0;
  int64_t iterations = 0;
};

// Grows the iteration count on one thread until a pass takes about `seconds`.
ComputeProbe Calibrate(float (*loop)(int64_t, float), double flops_per_iteration, double seconds) {
  volatile float sink = 0;
  int64_t iterations = 1 << 14;
  for (;;) {
    const auto t0 = Clock::now();
    sink = sink + loop(iterations, 1.0f);
    const double s = Seconds(t0);
    if (s > seconds / 4 || iterations > (int64_t{1} << 40)) {
      iterations = static_cast<int64_t>(iterations * std::max(1.0, seconds / std::max(s, 1e-9)));
      break;
    }
    iterations *= 4;
  }
  return {loop, flops_per_iteration, iterations};
}

// One pass on every thread: GFLOP/s. The pass ends with the slowest thread, so a core
// another job holds for part of it lowers the figure.
double ComputePass(const ComputeProbe& probe) {
  volatile float sink = 0;
  const int threads = omp_get_max_threads();
  float total = 0;
  const auto t0 = Clock::now();
#pragma omp parallel reduction(+ : total)
  total += probe.loop(probe.iterations, 1.0f + static_cast<float>(omp_get_thread_num()) * 1e-3f);
  const double s = Seconds(t0);
  sink = sink + total;
  return probe.flops_per_iteration * static_cast<double>(probe.iterations) * threads / s / 1e9;
}

// The best GFLOP/s of three passes of about seconds / 3 each.
double RunComputeProbe(float (*loop)(int64_t, float), double flops_per_iteration, double seconds) {
  const ComputeProbe probe = Calibrate(loop, flops_per_iteration, seconds / 3);
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) best = std::max(best, ComputePass(probe));
  return best;
}

// The sum of data [n] read as S contiguous spans side by side, 8 independent sums per
// span so that the loads, not the adds' latency, set the pace.
template <int S> float SumSpans(const float* data, int64_t n) {
  const int64_t span = n / S / 8 * 8;
  float acc[S][8] = {};
  for (int64_t i = 0; i < span; i += 8) {
    for (int s = 0; s < S; ++s) {
      for (int l = 0; l < 8; ++l) acc[s][l] += data[s * span + i + l];
    }
  }
  float total = 0;
  for (int64_t i = S * span; i < n; ++i) total += data[i];
  for (const auto& a : acc) {
    for (float v : a) total += v;
  }
  return total;
}

// The read probe's sums, 1, 3, 5 and 7 streams per thread, the best kept: how many a
// core needs in flight to draw what the memory gives differs by CPU. On a Zen 2 (2 threads, 1 GiB, 2 MiB
// pages) one stream per thread read 33-35 GB/s, 3 read 41-45, 5 to 9 52-57 (even counts,
// their spans a power of two apart, read no more than one); a Zen 4 read the most as one
// stream (docs/benchmarks.md, "Decode GEMVs that read the weights as one stream").
constexpr float (*kReadSpans[])(const float*, int64_t) = {&SumSpans<1>, &SumSpans<3>, &SumSpans<5>, &SumSpans<7>};

// The best GB/s of `repeats` reads of data [n] on `threads` threads, each repeat once
// per stream count of kReadSpans, each thread summing its contiguous share.
double ReadPasses(const float* data, size_t n, int repeats, int threads) {
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < repeats; ++r) {
    for (auto sum_spans : kReadSpans) {
      const auto t0 = Clock::now();
      float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
      {
        const RowRange share = ThisThreadRows(static_cast<int64_t>(n), 16);  // 64-byte aligned shares
        total += sum_spans(data + share.begin, share.size());
      }
      const double seconds = Seconds(t0);
      sink = sink + total;
      best = std::max(best, static_cast<double>(n * sizeof(float)) / seconds / 1e9);
    }
  }
  return best;
}

// The loop of the f32 probe on this CPU.
ComputeProbe CalibrateF32(double seconds, std::string* kernel) {
  if (GetCpuFeatures().avx512f) {
    if (kernel) *kernel = "avx512-fma";
    return Calibrate(&FmaAvx512Loop, kAccumulators * 16.0 * 2.0, seconds);
  }
  if (GetCpuFeatures().avx2 && GetCpuFeatures().fma) {
    if (kernel) *kernel = "avx2-fma";
    return Calibrate(&FmaAvx2Loop, kAccumulators * 8.0 * 2.0, seconds);
  }
  if (kernel) *kernel = "portable";
  return Calibrate(&FmaPortableLoop, kAccumulators * 4.0 * 2.0, seconds);
}

}  // namespace

double MeasureReadBandwidthGBpsThreads(size_t bytes, int repeats, int threads, bool huge_pages) {
  const size_t n = bytes / sizeof(float);
  // AlignedBuffer takes 2 MiB pages for a buffer this size; the small-page variant
  // is plain heap memory (4 KiB pages where THP is on request only), touched here.
  AlignedBuffer huge;
  std::vector<float> small;
  const float* data = nullptr;
  if (huge_pages) {
    huge = AlignedBuffer(n * sizeof(float));  // zero-filled: every page touched
    data = huge.as<float>();
  } else {
    small.assign(n, 0.0f);
    data = small.data();
  }
  return ReadPasses(data, n, repeats, threads);
}

std::optional<double> MeasureBf16DotGflops(double seconds) {
  if (!GetCpuFeatures().avx512_bf16) return std::nullopt;
  return RunComputeProbe(&Bf16Loop, kAccumulators * 16.0 * 4.0, seconds);
}

double MeasureF32FmaGflops(double seconds, std::string* kernel) {
  const ComputeProbe probe = CalibrateF32(seconds / 3, kernel);
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) best = std::max(best, ComputePass(probe));
  return best;
}

ReadProbe::ReadProbe(size_t bytes) : buffer_(bytes) {}

double ReadProbe::SampleGbps(int repeats) const {
  return ReadPasses(buffer_.as<float>(), buffer_.size() / sizeof(float), repeats, omp_get_max_threads());
}

ProbeSpread SpreadOf(const std::vector<double>& samples) {
  ProbeSpread spread;
  if (samples.empty()) return spread;
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  spread.min = sorted.front();
  spread.max = sorted.back();
  spread.median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  spread.samples = static_cast<int>(n);
  return spread;
}

SampledPeaks SampleMachinePeaks(const PeakSamplingOptions& options) {
  SampledPeaks s;
  const int threads = omp_get_max_threads();
  s.threads = threads;
  const AlignedBuffer buffer(options.read_bytes);  // 2 MiB pages, zero-filled: every page touched
  const size_t n = options.read_bytes / sizeof(float);
  const bool bf16 = GetCpuFeatures().avx512_bf16;
  ComputeProbe dot_probe;
  if (bf16) dot_probe = Calibrate(&Bf16Loop, kAccumulators * 16.0 * 4.0, options.compute_seconds);
  const ComputeProbe fma_probe = CalibrateF32(options.compute_seconds, &s.f32_kernel);
  std::vector<double> read, dot, fma;  // one sample per round each
  for (int round = 0; round < options.rounds; ++round) {
    read.push_back(ReadPasses(buffer.as<float>(), n, options.read_passes, threads));
    if (bf16) dot.push_back(ComputePass(dot_probe));
    fma.push_back(ComputePass(fma_probe));
  }
  s.read_gbps = SpreadOf(read);
  if (bf16) s.bf16_gflops = SpreadOf(dot);
  s.f32_gflops = SpreadOf(fma);
  return s;
}

MachinePeaks ProbeMachine(const MachineProbeOptions& options) {
  MachinePeaks p;
  p.threads = omp_get_max_threads();
  p.read_gbps = MeasureReadBandwidthGBpsThreads(options.read_bytes, options.read_repeats, p.threads);
  p.read_gbps_1thread = MeasureReadBandwidthGBpsThreads(options.read_bytes / 4, options.read_repeats, 1);
  p.read_gbps_small_pages =
      MeasureReadBandwidthGBpsThreads(options.read_bytes, options.read_repeats, p.threads, /*huge_pages=*/false);
  p.bf16_gflops = MeasureBf16DotGflops(options.compute_seconds);
  p.f32_gflops = MeasureF32FmaGflops(options.compute_seconds, &p.f32_kernel);
  return p;
}

}  // namespace latte
