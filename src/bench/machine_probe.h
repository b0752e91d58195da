// `latte bench machine`: this machine's peaks, measured (never assumed) so every
// speed figure latte prints can stand beside the roofline of the same run:
//   memory read bandwidth with every thread and with one thread, from memory on
//     2 MiB pages (base/huge_pages.h: --huge-pages weights, large buffers), and with
//     every thread from 4 KiB pages (what the default mmap of the checkpoint gives);
//     each the best of reading every thread's share as 1, 3, 5 and 7 streams side by
//     side (CPUs differ in how many a core needs in flight to draw the memory's rate),
//   bf16 dot-product GFLOP/s: a register-resident vdpbf16ps loop on every thread,
//     run only when the CPU has AVX512_BF16 (else reported as absent),
//   f32 FMA GFLOP/s: a register-resident AVX-512 FMA loop, or a portable
//     multiply-add loop on CPUs without AVX-512.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"

namespace latte {

struct MachinePeaks {
  int threads = 0;
  double read_gbps = 0;  // every OpenMP thread, 1e9 bytes/s
  double read_gbps_1thread = 0;
  double read_gbps_small_pages = 0;   // every thread, 4 KiB pages
  std::optional<double> bf16_gflops;  // nullopt: no AVX512_BF16 (or LATTE_ISA=portable)
  double f32_gflops = 0;
  std::string f32_kernel;  // "avx512-fma", "avx2-fma" or "portable"
};

struct MachineProbeOptions {
  size_t read_bytes = size_t{1} << 30;  // all-thread read buffer (1-thread: a quarter of it)
  int read_repeats = 5;
  double compute_seconds = 0.3;  // per compute probe, roughly
};

MachinePeaks ProbeMachine(const MachineProbeOptions& options = {});

// The samples of one probe repeated: the largest is the peak (a probe that shares the
// cores or the memory with another job reads low; none reads above what the machine
// can do), the smallest and the median say how much the load moved it.
struct ProbeSpread {
  double min = 0;
  double median = 0;
  double max = 0;
  int samples = 0;
};
ProbeSpread SpreadOf(const std::vector<double>& samples);

// `latte bench model`'s probe, taken once per process before the tests: `rounds`
// rounds of (an all-thread read of read_bytes from 2 MiB pages, best of read_passes
// times the 4 stream counts; one all-thread pass of the bf16 dot loop; one of the f32
// FMA loop), each compute pass about compute_seconds long. Interleaved, so a burst of
// another job's load lowers a round rather than every sample of one probe. About rounds
// · (2 · compute_seconds + 4 · read_passes · read time) plus the buffer's first touch
// and the calibration: ~4 s with the defaults on a 2-core, 55 GB/s machine.
struct PeakSamplingOptions {
  int rounds = 6;
  size_t read_bytes = size_t{1} << 30;
  int read_passes = 2;
  double compute_seconds = 0.15;
};
struct SampledPeaks {
  int threads = 0;
  ProbeSpread read_gbps;                   // 1e9 bytes/s, every thread, 2 MiB pages
  std::optional<ProbeSpread> bf16_gflops;  // nullopt: no AVX512_BF16 (or LATTE_ISA=portable)
  ProbeSpread f32_gflops;
  std::string f32_kernel;  // "avx512-fma", "avx2-fma" or "portable"
};
SampledPeaks SampleMachinePeaks(const PeakSamplingOptions& options = {});

// A read probe to take beside each timed run, so a run's GB/s can be set against what
// the memory gave within the same few seconds (on a host whose bandwidth moves minute
// to minute, a probe taken once before the tests says little about a run a minute
// later). A sample: every thread reads its share of the probe's own buffer (2 MiB
// pages, touched at construction) once per stream count of the read probe, `repeats`
// times, the best kept: 4 reads of `bytes` a repeat, ~40 ms for 256 MiB at 30 GB/s.
class ReadProbe {
 public:
  static constexpr size_t kDefaultBytes = size_t{256} << 20;
  explicit ReadProbe(size_t bytes = kDefaultBytes);
  double SampleGbps(int repeats = 1) const;  // 1e9 bytes/s, every OpenMP thread

 private:
  AlignedBuffer buffer_;
};

// The pieces, for callers that want one.
double MeasureReadBandwidthGBpsThreads(size_t bytes, int repeats, int threads, bool huge_pages = true);
std::optional<double> MeasureBf16DotGflops(double seconds);
double MeasureF32FmaGflops(double seconds, std::string* kernel = nullptr);

}  // namespace latte
