// Matmul dispatch and the portable kernel. The paths (matmul_internal.h):
//   m <  kGemmMinRows: GEMV, AVX-512 (gemv_avx512.cc; fp8: gemv_fp8_avx512.cc)
//     or portable (below; fp8: matmul_fp8.cc).
//   m >= kGemmMinRows: oneDNN (matmul_onednn.cc; fp8 weights dequantized to bf16
//     a chunk of rows at a time, matmul_fp8.cc). Without AVX-512 oneDNN 2.6
//     has only a scalar reference bf16 matmul, so bf16 and fp8 weights then take
//     the portable kernel; f32 keeps oneDNN's sgemm (it picks its own ISA from
//     cpuid, so it is safe on any x86-64 CPU).
#include "kernels/matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/matmul_internal.h"

namespace latte {

WeightView WeightView::RowBlock(int64_t first, int64_t count) const {
  WeightView v = *this;
  v.rows = count;
  v.data = static_cast<const uint8_t*>(data) + static_cast<size_t>(first * ld) * DTypeSize(dtype);
  if (dtype == DType::kF8E4M3) {
    // Re-anchor on the block row that holds the new row 0.
    const int64_t r = scale_row0 + first;
    v.scale = scale + (r / block_rows) * scale_ld;
    v.scale_row0 = r % block_rows;
  }
  return v;
}

void MatmulReference(const float* x, int64_t m, int64_t ldx, const WeightView& w, float* y,
                     int64_t ldy) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t n = 0; n < w.rows; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < w.cols; ++k) acc += double(x[i * ldx + k]) * w.At(n, k);
      y[i * ldy + n] = static_cast<float>(acc);
    }
  }
}

namespace matmul_internal {
namespace {

// Portable kernel. A tile is kPRows weight rows x up to kPMaxM rows of x, with
// kLanes independent partial sums per output: written as plain arrays so GCC
// turns the lane loops into SSE2 (baseline) vectors without -ffast-math, and
// the 4 independent accumulator vectors hide the add latency.
constexpr int kLanes = 8;
constexpr int kPRows = 2;
constexpr int kPMaxM = 2;
// Output rows per parallel work item: 16 rows of a 10944-wide bf16 matrix are
// 350 KiB, so the block stays in L2 while every row of x passes over it.
constexpr int64_t kPBlock = 16;

template <bool kBf16>
inline float LoadW(const void* w, int64_t i) {
  if constexpr (kBf16) {
    return Bf16ToF32(static_cast<const bf16*>(w)[i]);
  } else {
    return static_cast<const float*>(w)[i];
  }
}

template <bool kBf16, int M, int R>
void PortableTile(const float* x, int64_t ldx, const void* w, int64_t ld, int64_t k, float* y,
                  int64_t ldy) {
  const size_t esize = kBf16 ? 2 : 4;
  const void* wr[R];
  for (int r = 0; r < R; ++r) {
    wr[r] = static_cast<const char*>(w) + static_cast<size_t>(r * ld) * esize;
  }
  float acc[M][R][kLanes] = {};
  int64_t kk = 0;
  for (; kk + kLanes <= k; kk += kLanes) {
    float wv[R][kLanes];
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < kLanes; ++j) wv[r][j] = LoadW<kBf16>(wr[r], kk + j);
    }
    for (int i = 0; i < M; ++i) {
      const float* xi = x + i * ldx + kk;
      for (int r = 0; r < R; ++r) {
        for (int j = 0; j < kLanes; ++j) acc[i][r][j] += xi[j] * wv[r][j];
      }
    }
  }
  for (; kk < k; ++kk) {
    for (int i = 0; i < M; ++i) {
      for (int r = 0; r < R; ++r) acc[i][r][0] += x[i * ldx + kk] * LoadW<kBf16>(wr[r], kk);
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) {
      float s = 0;
      for (int j = 0; j < kLanes; ++j) s += acc[i][r][j];
      y[i * ldy + r] = s;
    }
  }
}

template <bool kBf16, int R>
void PortableTileAnyM(const float* x, int64_t m, int64_t ldx, const void* w, int64_t ld,
                      int64_t k, float* y, int64_t ldy) {
  int64_t i = 0;
  for (; i + kPMaxM <= m; i += kPMaxM) {
    PortableTile<kBf16, kPMaxM, R>(x + i * ldx, ldx, w, ld, k, y + i * ldy, ldy);
  }
  for (; i < m; ++i) PortableTile<kBf16, 1, R>(x + i * ldx, ldx, w, ld, k, y + i * ldy, ldy);
}

template <bool kBf16>
void PortableBlock(const float* x, int64_t m, int64_t ldx, const WeightView& w, int64_t n0,
                   int64_t n1, float* y, int64_t ldy) {
  const size_t esize = kBf16 ? 2 : 4;
  const char* base = static_cast<const char*>(w.data);
  int64_t n = n0;
  for (; n + kPRows <= n1; n += kPRows) {
    PortableTileAnyM<kBf16, kPRows>(x, m, ldx, base + static_cast<size_t>(n * w.ld) * esize,
                                    w.ld, w.cols, y + n, ldy);
  }
  for (; n < n1; ++n) {
    PortableTileAnyM<kBf16, 1>(x, m, ldx, base + static_cast<size_t>(n * w.ld) * esize, w.ld,
                               w.cols, y + n, ldy);
  }
}

template <bool kBf16>
void Portable(const float* x, int64_t m, int64_t ldx, const WeightView& w, float* y,
              int64_t ldy, bool threaded) {
  const int64_t blocks = (w.rows + kPBlock - 1) / kPBlock;
  // Below ~64K multiply-adds a fork/join (~1-2 us) costs more than it saves.
  const bool parallel = threaded && blocks > 1 && m * w.rows * w.cols >= (int64_t{1} << 16);
  // schedule(static): each thread gets one contiguous run of blocks to stream.
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    PortableBlock<kBf16>(x, m, ldx, w, b * kPBlock, std::min(w.rows, (b + 1) * kPBlock), y,
                         ldy);
  }
}

}  // namespace

void MatmulPortable(const float* x, int64_t m, int64_t ldx, const WeightView& w, float* y,
                    int64_t ldy, bool threaded) {
  if (w.dtype == DType::kF8E4M3) {
    MatmulFp8Portable(x, m, ldx, w, y, ldy, threaded);
  } else if (w.dtype == DType::kBF16) {
    Portable<true>(x, m, ldx, w, y, ldy, threaded);
  } else {
    Portable<false>(x, m, ldx, w, y, ldy, threaded);
  }
}

}  // namespace matmul_internal

namespace {

using namespace matmul_internal;

// oneDNN only where it has a fast kernel for the dtype on this CPU (see top).
bool UseOneDnn(const CpuFeatures& cpu, int64_t m, DType dtype) {
  return m >= kGemmMinRows && (cpu.avx512f || dtype == DType::kF32);
}

// The GEMV-side kernel for the view's dtype.
void Gemv(const CpuFeatures& cpu, const float* x, int64_t m, int64_t ldx, const WeightView& w,
          float* y, int64_t ldy, bool threaded) {
  if (!cpu.avx512f) {
    MatmulPortable(x, m, ldx, w, y, ldy, threaded);
  } else if (w.dtype == DType::kF8E4M3) {
    GemvFp8Avx512(x, m, ldx, w, y, ldy, threaded);
  } else {
    GemvAvx512(x, m, ldx, w, y, ldy, threaded);
  }
}

// One problem; `threaded` false when the caller already runs one per thread.
void MatmulOne(const float* x, int64_t m, int64_t ldx, const WeightView& w, float* y,
               int64_t ldy, bool threaded) {
  if (m <= 0 || w.rows <= 0) return;
  const CpuFeatures& cpu = GetCpuFeatures();
  // oneDNN inside an OpenMP region runs single-threaded on its own.
  if (UseOneDnn(cpu, m, w.dtype)) {
    const bool done = w.dtype == DType::kF8E4M3 ? MatmulFp8OneDnn(x, m, ldx, w, y, ldy)
                                                : MatmulOneDnn(x, m, ldx, w, y, ldy);
    if (done) return;
  }
  Gemv(cpu, x, m, ldx, w, y, ldy, threaded);
}

// MatmulBatched splits over heads (one whole problem per thread) when each
// problem is too small to split well: GEMV-sized m, or under this many
// multiply-adds (128 heads x [128 x 512] at m=512 is 33.5M each: a per-head
// fork/join and per-call x conversion would be paid 128 times). Not yet tuned:
// the bench machine was too loaded to separate the two strategies.
constexpr int64_t kBatchSplitMaxMacs = int64_t{1} << 26;

// The GEMM-sized problems of a MatmulMany batch. Several of them (a prefill's MoE
// experts, ~50 rows each at pp512 on V2-Lite) run one per thread, largest first
// (dynamic schedule): each GEMM is too small to split well over both cores, and a
// whole GEMM per thread pays no per-GEMM fork/join. A single one gets every thread.
void RunGemms(const MatmulProblem* p, std::vector<int64_t>& gemms) {
  if (gemms.empty()) return;
  auto run = [p](int64_t i, bool threaded) {
    MatmulOne(p[i].x, p[i].m, p[i].ldx, p[i].w, p[i].y, p[i].ldy, threaded);
  };
  if (gemms.size() == 1 || omp_get_max_threads() == 1) {
    for (int64_t i : gemms) run(i, /*threaded=*/true);
    return;
  }
  auto cost = [p](int64_t i) { return p[i].m * p[i].w.rows * p[i].w.cols; };
  // Ties in input order; std::sort, not stable_sort, which allocates a temporary buffer.
  std::sort(gemms.begin(), gemms.end(),
            [&](int64_t a, int64_t b) { return cost(a) > cost(b) || (cost(a) == cost(b) && a < b); });
  const int64_t n = static_cast<int64_t>(gemms.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t j = 0; j < n; ++j) run(gemms[j], /*threaded=*/false);
}

}  // namespace

void Matmul(const float* x, int64_t m, int64_t ldx, const WeightView& w, float* y, int64_t ldy) {
  MatmulOne(x, m, ldx, w, y, ldy, /*threaded=*/true);
}

void MatmulMany(const MatmulProblem* p, int64_t count) {
  const CpuFeatures& cpu = GetCpuFeatures();
  // Rows of the GEMV-sized problems, end to end; cost of a row = its weight elements.
  int64_t total = 0;
  int64_t small = 0;
  thread_local std::vector<int64_t> gemms;  // indices of the GEMM-sized problems
  gemms.clear();
  for (int64_t i = 0; i < count; ++i) {
    if (p[i].m <= 0 || p[i].w.rows <= 0) continue;
    if (UseOneDnn(cpu, p[i].m, p[i].w.dtype)) {
      gemms.push_back(i);
    } else {
      total += p[i].w.rows * std::max<int64_t>(p[i].w.cols, 1);
      ++small;
    }
  }
  RunGemms(p, gemms);
  if (small == 0) return;
  auto run_rows = [&](const MatmulProblem& q, int64_t r0, int64_t r1) {
    if (r1 <= r0) return;
    Gemv(cpu, q.x, q.m, q.ldx, q.w.RowBlock(r0, r1 - r0), q.y + r0, q.ldy, /*threaded=*/false);
  };
  // Same fork/join threshold as the single-problem GEMV.
  const bool parallel = omp_get_max_threads() > 1 && total >= (int64_t{1} << 16);
  if (!parallel) {
    for (int64_t i = 0; i < count; ++i) {
      if (p[i].m > 0 && p[i].w.rows > 0 && !UseOneDnn(cpu, p[i].m, p[i].w.dtype)) {
        run_rows(p[i], 0, p[i].w.rows);
      }
    }
    return;
  }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads();
    const int64_t t = omp_get_thread_num();
    const int64_t lo = total * t / nt;
    const int64_t hi = total * (t + 1) / nt;
    // A row belongs to the thread whose [lo, hi) holds the row's first element.
    int64_t off = 0;
    for (int64_t i = 0; i < count && off < hi; ++i) {
      const MatmulProblem& q = p[i];
      if (q.m <= 0 || q.w.rows <= 0 || UseOneDnn(cpu, q.m, q.w.dtype)) continue;
      const int64_t cols = std::max<int64_t>(q.w.cols, 1);
      const int64_t cost = q.w.rows * cols;
      if (off + cost > lo) {
        auto first_row_at = [&](int64_t pos) {
          return std::clamp<int64_t>((pos - off + cols - 1) / cols, 0, q.w.rows);
        };
        run_rows(q, lo > off ? first_row_at(lo) : 0, first_row_at(hi));
      }
      off += cost;
    }
  }
}

void MatmulBatched(const float* x, int64_t x_stride, int64_t m, const WeightView* w,
                   int64_t batch, float* y, int64_t y_stride) {
  if (batch <= 0 || m <= 0) return;
  const int64_t macs = m * w[0].rows * w[0].cols;
  const bool over_heads = batch > 1 && omp_get_max_threads() > 1 &&
                          (m < kGemmMinRows || macs < kBatchSplitMaxMacs);
  if (over_heads) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < batch; ++b) {
      MatmulOne(x + b * x_stride, m, w[b].cols, w[b], y + b * y_stride, w[b].rows,
                /*threaded=*/false);
    }
    return;
  }
  // Big problems: heads in turn, each on all threads. With a shared x the
  // bf16 rounding of x is done once for all heads (not for fp8 weights: their
  // chunked path rounds x per call).
  const CpuFeatures& cpu = GetCpuFeatures();
  if (x_stride == 0 && w[0].dtype != DType::kF8E4M3 && UseOneDnn(cpu, m, w[0].dtype) &&
      MatmulOneDnnSharedX(x, m, w, batch, y, y_stride)) {
    return;
  }
  for (int64_t b = 0; b < batch; ++b) {
    MatmulOne(x + b * x_stride, m, w[b].cols, w[b], y + b * y_stride, w[b].rows,
              /*threaded=*/true);
  }
}

}  // namespace latte
