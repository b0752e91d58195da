// `latte bench machine`: this machine's peaks, measured (never assumed) so every
// speed figure latte prints can stand beside the roofline of the same run:
//   memory read bandwidth with every thread and with one thread, from memory on
//     2 MiB pages (base/huge_pages.h: --huge-pages weights, large buffers), and with
//     every thread from 4 KiB pages (what the default mmap of the checkpoint gives),
//   bf16 dot-product GFLOP/s: a register-resident vdpbf16ps loop on every thread,
//     run only when the CPU has AVX512_BF16 (else reported as absent),
//   f32 FMA GFLOP/s: a register-resident AVX-512 FMA loop, or a portable
//     multiply-add loop on CPUs without AVX-512.
#pragma once

#include <optional>
#include <string>

namespace latte {

struct MachinePeaks {
  int threads = 0;
  double read_gbps = 0;  // every OpenMP thread, 1e9 bytes/s
  double read_gbps_1thread = 0;
  double read_gbps_small_pages = 0;   // every thread, 4 KiB pages
  std::optional<double> bf16_gflops;  // nullopt: no AVX512_BF16 (or LATTE_ISA=portable)
  double f32_gflops = 0;
  std::string f32_kernel;  // "avx512-fma" or "portable"
};

struct MachineProbeOptions {
  size_t read_bytes = size_t{1} << 30;  // all-thread read buffer (1-thread: a quarter of it)
  int read_repeats = 5;
  double compute_seconds = 0.3;  // per compute probe, roughly
};

MachinePeaks ProbeMachine(const MachineProbeOptions& options = {});

// The pieces, for callers that want one.
double MeasureReadBandwidthGBpsThreads(size_t bytes, int repeats, int threads, bool huge_pages = true);
std::optional<double> MeasureBf16DotGflops(double seconds);
double MeasureF32FmaGflops(double seconds, std::string* kernel = nullptr);

}  // namespace latte
