// Matmul dispatch and the portable kernel. The paths (matmul_internal.h):
//   m <  kGemmMinRows: GEMV, AVX-512 (gemv_avx512.cc; fp8: gemv_fp8_avx512.cc)
//     or portable (below; fp8: matmul_fp8.cc). bf16 weights on CPUs with
//     AVX512_BF16: vdpbf16ps on the weight as it is (matmul_bf16dot_avx512.cc) up to
//     m = kBf16DotMaxRows.
//   m >= kGemmMinRows (bf16 with AVX512_BF16: > kBf16DotMaxRows): oneDNN
//     (matmul_onednn.cc; fp8 weights dequantized to bf16 a chunk of rows at a
//     time, matmul_fp8.cc). Without AVX-512 oneDNN 2.6
//     has only a scalar reference bf16 matmul, so bf16 weights then go to the AVX2
//     GEMM from kBf16Avx2GemvMaxRows + 1 to kBf16Avx2GemmMaxRows rows
//     (gemm_bf16_avx2.cc: the AVX2 GEMV's sums blocked for cache, the same bits), past
//     it to the packed outer-product GEMM (gemm_bf16_packed_avx2.cc), and on CPUs
//     without AVX2 to oneDNN's sgemm a chunk of rows widened to f32 at a time
//     (matmul_bf16_sgemm.cc); fp8
//     weights take the portable kernel; f32 keeps oneDNN's sgemm (it picks its own
//     ISA from cpuid, so it is safe on any x86-64 CPU).
//   CPUs with AVX2 and FMA but not AVX-512: the GEMV is gemv_avx2.cc's (f32, bf16, f16)
//     or gemv_fp8_avx2.cc's (fp8).
//   f16 and GGUF block formats (matmul_block.cc): f16 as f32 (GEMV below kGemmMinRows,
//     vcvtph2ps on AVX-512; then chunks converted to f32 for sgemm); block formats by
//     the integer GEMV up to kBlockGemvMaxRows (gemv_block_avx512*.cc, gemv_block_avx2.cc,
//     or portable), then chunks dequantized to bf16 for oneDNN's bf16 GEMM (to f32 and
//     sgemm without AVX-512). On CPUs with AVX512_VNNI the block formats go from
//     kVnniGemmMinRows rows to the integer GEMM (gemm_block_avx512_vnni.cc), on CPUs with
//     AVX2 but not AVX-512 from Avx2GemmMinRows rows to its AVX2 twin (gemm_block_avx2.cc).
#include "kernels/matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/check.h"
#include "base/cpu_features.h"
#include "base/parallel.h"
#include "base/scratch.h"
#include "kernels/bf16_round.h"
#include "kernels/matmul_internal.h"

namespace latte {

WeightView WeightView::RowBlock(int64_t first, int64_t count) const {
  LATTE_DCHECK(first >= 0 && count >= 0 && first + count <= rows, "RowBlock [", first, ", ", first + count, ") of ",
               rows, " rows");
  WeightView v = *this;
  v.rows = count;
  v.data = static_cast<const uint8_t*>(data) + static_cast<size_t>(first) * DTypeRowBytes(dtype, ld);
  if (dtype == DType::kF8E4M3) {
    // Re-anchor on the block row that holds the new row 0.
    const int64_t r = scale_row0 + first;
    v.scale = scale + (r / block_rows) * scale_ld;
    v.scale_row0 = r % block_rows;
  }
  return v;
}

void MatmulReference(const MatmulProblem& p) {
  const WeightView& w = p.w;
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t n = 0; n < w.rows; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < w.cols; ++k) acc += double(p.x[i * p.ldx + k]) * w.At(n, k);
      p.y[i * p.ldy + n] = static_cast<float>(acc);
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

template <bool kBf16> inline float LoadW(const void* w, int64_t i) {
  if constexpr (kBf16) {
    return Bf16ToF32(static_cast<const bf16*>(w)[i]);
  } else {
    return static_cast<const float*>(w)[i];
  }
}

template <bool kBf16, int M, int R>
void PortableTile(const float* x, int64_t ldx, const void* w, int64_t ld, int64_t k, float* y, int64_t ldy) {
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

template <bool kBf16, int R> void PortableTileAnyM(const float* x, int64_t m, int64_t ldx, const void* w, int64_t ld,
                                                   int64_t k, float* y, int64_t ldy) {
  int64_t i = 0;
  for (; i + kPMaxM <= m; i += kPMaxM) {
    PortableTile<kBf16, kPMaxM, R>(x + i * ldx, ldx, w, ld, k, y + i * ldy, ldy);
  }
  for (; i < m; ++i) PortableTile<kBf16, 1, R>(x + i * ldx, ldx, w, ld, k, y + i * ldy, ldy);
}

template <bool kBf16> void PortableBlock(const float* x, int64_t m, int64_t ldx, const WeightView& w, int64_t n0,
                                         int64_t n1, float* y, int64_t ldy) {
  const size_t esize = kBf16 ? 2 : 4;
  const char* base = static_cast<const char*>(w.data);
  int64_t n = n0;
  for (; n + kPRows <= n1; n += kPRows) {
    PortableTileAnyM<kBf16, kPRows>(x, m, ldx, base + static_cast<size_t>(n * w.ld) * esize, w.ld, w.cols, y + n, ldy);
  }
  for (; n < n1; ++n) {
    PortableTileAnyM<kBf16, 1>(x, m, ldx, base + static_cast<size_t>(n * w.ld) * esize, w.ld, w.cols, y + n, ldy);
  }
}

template <bool kBf16> void Portable(const MatmulProblem& p, bool threaded) {
  const WeightView& w = p.w;
  const int64_t blocks = (w.rows + kPBlock - 1) / kPBlock;
  const bool parallel = threaded && blocks > 1 && WorthParallel(p.m * w.rows * w.cols);
  // schedule(static): each thread gets one contiguous run of blocks to stream.
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    PortableBlock<kBf16>(p.x, p.m, p.ldx, w, b * kPBlock, std::min(w.rows, (b + 1) * kPBlock), p.y, p.ldy);
  }
}

}  // namespace

void MatmulPortable(const MatmulProblem& p, bool threaded) {
  if (IsBlockQuantized(p.w.dtype)) {
    GemvBlock(p, BlockGemvIsa::kPortable, threaded);
  } else if (p.w.dtype == DType::kF16) {
    MatmulF16Portable(p, threaded);
  } else if (p.w.dtype == DType::kF8E4M3) {
    MatmulFp8Portable(p, threaded);
  } else if (p.w.dtype == DType::kBF16) {
    Portable<true>(p, threaded);
  } else {
    Portable<false>(p, threaded);
  }
}

}  // namespace matmul_internal

namespace {

using namespace matmul_internal;

// x rows for MatmulBf16DotAvx512 are laid 4 cache lines (128 bf16) further apart than
// their width. A 2048-wide row is 4 KiB, so unpadded every x row of a tile (and every
// weight row) lands in the same L1 set at each step, and the m = 16 tiles ran from L2
// (64 x 2048 at m = 16, one thread: 184 -> 247 GFLOP/s with one line of padding). One
// line still left the 4 x rows of a tile in 4 adjacent sets beside the 8 weight rows of
// its group; 4 lines apart they read faster (Zen 4, 2 threads, m = 16: 2560 x 2048 from
// L3 354 -> 385 GFLOP/s, the 102400 x 2048 lm_head from memory 294 -> 325; 1408-, 2816-,
// 7168- and 512-wide rows within 1% either way).
constexpr int64_t kBf16DotXPad = 128;

// oneDNN only where it has a fast kernel for the dtype on this CPU (see top): f16,
// bf16 and block formats reach it as f32 where the CPU lacks AVX-512 (bf16 on AVX2
// CPUs: the GEMM side from kBf16Avx2GemvMaxRows + 1 rows is the AVX2 GEMMs').
bool UseOneDnn(const CpuFeatures& cpu, int64_t m, DType dtype) {
  if (dtype == DType::kBF16 && !cpu.avx512f) {
    return m > (cpu.avx2 && cpu.fma ? kBf16Avx2GemvMaxRows : kGemmMinRows - 1);
  }
  return m >= GemmMinRows(dtype, cpu.avx512f && cpu.avx512_bf16, cpu.avx512f && cpu.avx512_vnni,
                          !cpu.avx512f && cpu.avx2) &&
         (cpu.avx512f || dtype == DType::kF32 || dtype == DType::kF16 || IsBlockQuantized(dtype));
}

// The GEMV-side kernel for the view's dtype.
//
// bf16 and fp8 weights multiply x rounded to bf16 here too, as the GEMM path does
// (oneDNN's bf16 GEMM; fp8 dequantized to bf16 for it): otherwise a row's result would
// depend on how many rows share its matmul (m < kGemmMinRows or not), and a request
// would decode differently beside others than alone. With x rounded the two paths
// multiply the same exact products and differ only in f32 summation order.
// f16 weights keep f32 x on both sides (their GEMM is f32). Block formats quantize x to
// int8 for the GEMV (llama.cpp's choice: integer dot products are what make it fast), so
// there a row's result does change, within that rounding, with the batch's size.
void Gemv(const CpuFeatures& cpu, const MatmulProblem& p, bool threaded) {
  if (IsBlockQuantized(p.w.dtype)) {
    GemvBlock(p, BestBlockGemvIsa(), threaded);
    return;
  }
  // AVX2 + FMA kernels where the CPU has them but not AVX-512.
  const bool avx2 = !cpu.avx512f && cpu.avx2 && cpu.fma;
  if (p.w.dtype == DType::kF16) {
    if (cpu.avx512f) {
      GemvAvx512(p, threaded);
    } else if (avx2) {
      GemvAvx2(p, threaded);
    } else {
      MatmulF16Portable(p, threaded);
    }
    return;
  }
  MatmulProblem q = p;
  if (p.w.dtype == DType::kBF16 && cpu.avx512f && cpu.avx512_bf16) {
    // x rounded once (row by row, no parallel region); vdpbf16ps multiplies it as bf16.
    // Its rows start on cache lines (64-byte aligned buffer, ldr a multiple of 32): a
    // vector split over two lines costs a second L1 access on every load of it.
    thread_local AlignedBuffer rounded;
    const int64_t k = p.w.cols;
    const int64_t ldr = (k + 31) / 32 * 32 + kBf16DotXPad;
    bf16* r = GrowAligned<bf16>(rounded, static_cast<size_t>(p.m * ldr) * sizeof(bf16));  // x: [m, ldr] in bf16
    for (int64_t i = 0; i < p.m; ++i) {
      bf16_internal::RoundToBf16Avx512(p.x + i * p.ldx, k, r + i * ldr, /*has_bf16=*/true);
    }
    MatmulBf16DotAvx512({r, p.m, ldr, p.w, p.y, p.ldy}, threaded);
    return;
  }
  if (p.w.dtype != DType::kF32) {
    q.x = XRoundedToBf16(p);
    q.ldx = p.w.cols;
  }
  if (avx2) {
    if (q.w.dtype == DType::kF8E4M3) {
      const bool sgemm = q.m > kFp8Avx2GemvMaxRows && q.w.block_cols % 8 == 0;
      if (!sgemm || !MatmulFp8SgemmAvx2(q)) GemvFp8Avx2(q, threaded);
    } else {
      GemvAvx2(q, threaded);
    }
  } else if (!cpu.avx512f) {
    MatmulPortable(q, threaded);
  } else if (q.w.dtype == DType::kF8E4M3) {
    GemvFp8Avx512(q, threaded);
  } else {
    GemvAvx512(q, threaded);
  }
}

}  // namespace

const float* matmul_internal::XRoundedToBf16(const MatmulProblem& p) {
  thread_local std::vector<bf16> rounded;
  thread_local std::vector<float> widened;
  const int64_t k = p.w.cols;
  bf16* r = Grow(rounded, p.m * k);
  float* x = Grow(widened, p.m * k);
  RoundToBf16(p.x, p.m, p.ldx, k, r);
  for (int64_t i = 0; i < p.m * k; ++i) x[i] = Bf16ToF32(r[i]);
  return x;
}

namespace {

// One problem; `threaded` false when the caller already runs one per thread.
void MatmulOne(const MatmulProblem& p, bool threaded) {
  if (p.m <= 0 || p.w.rows <= 0) return;
  const CpuFeatures& cpu = GetCpuFeatures();
  // oneDNN inside an OpenMP region runs single-threaded on its own.
  if (UseOneDnn(cpu, p.m, p.w.dtype)) {
    bool done;
    if (p.w.dtype == DType::kF8E4M3) {
      done = MatmulFp8OneDnn(p);
    } else if (cpu.avx512f && cpu.avx512_vnni && HasBlockGemm(p.w.dtype)) {
      GemmBlockAvx512Vnni(p, threaded);
      done = true;
    } else if (!cpu.avx512f && cpu.avx2 && HasBlockGemm(p.w.dtype)) {
      GemmBlockAvx2(p, threaded);
      done = true;
    } else if (p.w.dtype == DType::kF16 || IsBlockQuantized(p.w.dtype)) {
      done = MatmulBlockOneDnn(p, /*bf16_gemm=*/cpu.avx512f);
    } else if (p.w.dtype == DType::kBF16 && !cpu.avx512f && cpu.avx2 && cpu.fma) {
      if (p.m <= kBf16Avx2GemmMaxRows) {
        GemmBf16Avx2(p, threaded);
      } else {
        GemmBf16PackedAvx2(p, threaded);
      }
      done = true;
    } else if (p.w.dtype == DType::kBF16 && !cpu.avx512f) {
      done = MatmulBf16Sgemm(p);
    } else {
      done = MatmulOneDnn(p);
    }
    if (done) return;
  }
  Gemv(cpu, p, threaded);
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
  if (gemms.size() == 1 || omp_get_max_threads() == 1) {
    for (int64_t i : gemms) MatmulOne(p[i], /*threaded=*/true);
    return;
  }
  auto cost = [p](int64_t i) { return p[i].m * p[i].w.rows * p[i].w.cols; };
  // Ties in input order; std::sort, not stable_sort, which allocates a temporary buffer.
  std::sort(gemms.begin(), gemms.end(),
            [&](int64_t a, int64_t b) { return cost(a) > cost(b) || (cost(a) == cost(b) && a < b); });
  const int64_t n = static_cast<int64_t>(gemms.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t j = 0; j < n; ++j) MatmulOne(p[gemms[j]], /*threaded=*/false);
}

// What every kernel assumes of a weight view (see WeightView).
void CheckWeightView(const WeightView& w, const char* caller) {
  LATTE_CHECK(w.rows >= 0 && w.cols >= 0 && w.ld >= w.cols, caller, ": weight [", w.rows, ", ", w.cols,
              "] with row stride ", w.ld);
  if (IsBlockQuantized(w.dtype)) {
    const int64_t block = DTypeBlockElements(w.dtype);
    LATTE_CHECK(w.cols % block == 0 && w.ld % block == 0, caller, ": ", DTypeName(w.dtype), " weight [", w.rows, ", ",
                w.cols, "] with row stride ", w.ld, ": columns and stride must be whole blocks of ", block);
    LATTE_CHECK(w.rows == 0 || w.cols == 0 || w.data != nullptr, caller, ": null weight data");
    return;
  }
  LATTE_CHECK(w.dtype == DType::kF32 || w.dtype == DType::kBF16 || w.dtype == DType::kF16 || w.dtype == DType::kF8E4M3,
              caller, ": weight dtype ", DTypeName(w.dtype), " (kernels take F32, BF16, F16, F8_E4M3, GGUF blocks)");
  if (w.rows == 0 || w.cols == 0) return;
  LATTE_CHECK(w.data != nullptr, caller, ": null weight data");
  LATTE_CHECK(reinterpret_cast<uintptr_t>(w.data) % DTypeSize(w.dtype) == 0, caller,
              ": weight data not aligned to its ", DTypeSize(w.dtype), "-byte elements");
  if (w.dtype != DType::kF8E4M3) return;
  LATTE_CHECK(w.block_rows > 0 && w.block_cols > 0, caller, ": fp8 blocks ", w.block_rows, "x", w.block_cols);
  LATTE_CHECK(w.scale != nullptr && reinterpret_cast<uintptr_t>(w.scale) % alignof(float) == 0, caller,
              ": fp8 scales null or not 4-byte aligned");
  LATTE_CHECK(w.scale_ld >= (w.cols + w.block_cols - 1) / w.block_cols, caller, ": fp8 scale_ld ", w.scale_ld, " < ",
              (w.cols + w.block_cols - 1) / w.block_cols, " column blocks");
  LATTE_CHECK(w.scale_row0 >= 0 && w.scale_row0 < w.block_rows, caller, ": fp8 scale_row0 ", w.scale_row0,
              " outside [0, ", w.block_rows, ")");
}

void CheckProblem(const MatmulProblem& p, const char* caller) {
  CheckWeightView(p.w, caller);
  LATTE_CHECK(p.m >= 0, caller, ": m = ", p.m);
  LATTE_CHECK(p.ldx >= p.w.cols && p.ldy >= p.w.rows, caller, ": ldx ", p.ldx, " (w.cols ", p.w.cols, "), ldy ", p.ldy,
              " (w.rows ", p.w.rows, ")");
  if (p.m == 0) return;
  LATTE_CHECK(p.x != nullptr && p.y != nullptr, caller, ": null x or y");
}

// The quantized x of a MatmulMany batch's block-format GEMVs, one per distinct x: a
// problem whose x, m, ldx, cols and format equal an earlier one's (a token's gate and up
// projections, every expert of a batch-1 step) reads that one's.
struct BlockXs {
  BlockGemvIsa isa = BlockGemvIsa::kPortable;  // asked for; each x holds the one its format runs on
  std::vector<int64_t> source;                 // [count]: the problem whose x problem i reads
  std::vector<int64_t> to_prepare;             // problems whose x is quantized
  std::vector<size_t> offset;                  // [count]: their storage offsets
  std::vector<PreparedX> x;                    // [count]
  AlignedBuffer storage;

  void Prepare(const MatmulProblem* p, int64_t i) {
    x[i] = PrepareX(isa, p[i].w.dtype, p[i].x, p[i].m, p[i].ldx, p[i].w.cols, storage.data() + offset[i]);
  }
};

// A weight row's cost in MatmulMany's split: its bytes (at least 1).
int64_t RowCost(const WeightView& w) {
  return std::max<int64_t>(static_cast<int64_t>(DTypeRowBytes(w.dtype, std::max<int64_t>(w.cols, 1))), 1);
}

// MatmulMany splits its GEMV-sized problems between threads by weight bytes, which is
// each row's cost when one x row reads it. With 4 or more x rows a row costs its
// arithmetic too (a batch-16 step's shared expert, m = 16, beside routed experts of 1-3
// rows: ~1.7x the time per byte on bf16), so the thread holding such a problem ran
// late: in `bench model --batch 16` on bf16 (Zen 4, 2 threads) the second thread waited
// 12% of MatmulMany's time at the join. Each of those problems now goes to the threads
// in equal parts (whole groups of kEvenSplitRowGroup rows), the rest by bytes as before:
// the wait fell to ~3% and the step ran ~1.03x as fast when the memory was quick,
// level when slow (one thread streams the memory nearly alone while the other computes).
// Which thread computes a row does not change its bits.
constexpr int64_t kEvenSplitMinRows = 4;
constexpr int64_t kEvenSplitRowGroup = 8;
bool SplitEvenly(const MatmulProblem& q) { return q.m >= kEvenSplitMinRows; }

bool SameX(const MatmulProblem& a, const MatmulProblem& b) {
  return a.x == b.x && a.m == b.m && a.ldx == b.ldx && a.w.cols == b.w.cols && a.w.dtype == b.w.dtype;
}

// Plans (does not fill) the quantized x of p's GEMV-sized block-format problems.
// Per-thread and grown only: a decode step allocates nothing once warm.
BlockXs& PlanBlockXs(const CpuFeatures& cpu, const MatmulProblem* p, int64_t count) {
  thread_local BlockXs b;
  b.isa = BestBlockGemvIsa();
  b.to_prepare.clear();
  b.source.assign(static_cast<size_t>(count), -1);
  b.offset.assign(static_cast<size_t>(count), 0);
  if (b.x.size() < static_cast<size_t>(count)) b.x.resize(static_cast<size_t>(count));
  size_t bytes = 0;
  for (int64_t i = 0; i < count; ++i) {
    const MatmulProblem& q = p[i];
    if (!IsBlockQuantized(q.w.dtype) || q.m <= 0 || q.w.rows <= 0 || UseOneDnn(cpu, q.m, q.w.dtype)) continue;
    for (int64_t j : b.to_prepare) {
      if (SameX(p[j], q)) {
        b.source[i] = j;
        break;
      }
    }
    if (b.source[i] >= 0) continue;
    b.source[i] = i;
    b.to_prepare.push_back(i);
    b.offset[i] = bytes;
    bytes += PreparedXBytes(b.isa, q.w.dtype, q.m, q.w.cols);
  }
  if (b.storage.size() < bytes) b.storage = AlignedBuffer(bytes + bytes / 2);
  return b;
}

}  // namespace

void Matmul(const MatmulProblem& p) {
  CheckProblem(p, "Matmul");
  MatmulOne(p, /*threaded=*/true);
}

void MatmulMany(const MatmulProblem* p, int64_t count) {
  LATTE_CHECK(count >= 0 && (count == 0 || p != nullptr), "MatmulMany: ", count, " problems");
  const CpuFeatures& cpu = GetCpuFeatures();
  // Rows of the GEMV-sized problems split by bytes (not SplitEvenly's), end to end; cost of
  // a row = its weight bytes (the GEMVs stream them: a Q6_K down projection beside Q4_K
  // gate/up ones splits by what each thread reads). `elements` (every GEMV-sized problem's)
  // decides whether the batch is worth a parallel region.
  int64_t total = 0;
  int64_t elements = 0;
  int64_t small = 0;
  thread_local std::vector<int64_t> gemms;  // indices of the GEMM-sized problems
  gemms.clear();
  for (int64_t i = 0; i < count; ++i) {
    CheckProblem(p[i], "MatmulMany");
    if (p[i].m <= 0 || p[i].w.rows <= 0) continue;
    if (UseOneDnn(cpu, p[i].m, p[i].w.dtype)) {
      gemms.push_back(i);
    } else {
      if (!SplitEvenly(p[i])) total += p[i].w.rows * RowCost(p[i].w);
      elements += p[i].w.rows * std::max<int64_t>(p[i].w.cols, 1);
      ++small;
    }
  }
  RunGemms(p, gemms);
  if (small == 0) return;
  BlockXs& block_xs = PlanBlockXs(cpu, p, count);
  auto gemv_sized = [&](const MatmulProblem& q) { return q.m > 0 && q.w.rows > 0 && !UseOneDnn(cpu, q.m, q.w.dtype); };
  auto run_rows = [&](int64_t i, int64_t r0, int64_t r1) {
    if (r1 <= r0) return;
    const MatmulProblem& q = p[i];
    if (IsBlockQuantized(q.w.dtype)) {  // x already quantized, once for all its rows
      const PreparedX& x = block_xs.x[block_xs.source[i]];
      GemvBlockRowsFor(x.isa)(x, q.w, r0, r1, q.y, q.ldy);
      return;
    }
    MatmulProblem rows = q;
    rows.w = q.w.RowBlock(r0, r1 - r0);
    rows.y = q.y + r0;
    Gemv(cpu, rows, /*threaded=*/false);
  };
  // Same fork/join threshold as the single-problem GEMV.
  const bool parallel = omp_get_max_threads() > 1 && WorthParallel(elements);
  if (!parallel) {
    for (int64_t k : block_xs.to_prepare) block_xs.Prepare(p, k);
    for (int64_t i = 0; i < count; ++i) {
      if (gemv_sized(p[i])) run_rows(i, 0, p[i].w.rows);
    }
    return;
  }
#pragma omp parallel
  {
    // Block formats' x first, spread over the team (the for's barrier ends it).
    const int64_t to_prepare = static_cast<int64_t>(block_xs.to_prepare.size());
    if (to_prepare > 0) {
#pragma omp for schedule(static)
      for (int64_t k = 0; k < to_prepare; ++k) block_xs.Prepare(p, block_xs.to_prepare[k]);
    }
    // This thread's rows of each problem split evenly.
    for (int64_t i = 0; i < count; ++i) {
      const MatmulProblem& q = p[i];
      if (!gemv_sized(q) || !SplitEvenly(q)) continue;
      const RowRange rows = ThisThreadRows(q.w.rows, kEvenSplitRowGroup);
      run_rows(i, rows.begin, rows.end);
    }
    // This thread's share of the other problems' weight bytes, [share.begin, share.end).
    const RowRange share = ThisThreadRows(total);
    // A row belongs to the thread whose share holds the row's first byte.
    int64_t off = 0;
    for (int64_t i = 0; i < count && off < share.end; ++i) {
      const MatmulProblem& q = p[i];
      if (!gemv_sized(q) || SplitEvenly(q)) continue;
      const int64_t row_cost = RowCost(q.w);
      const int64_t cost = q.w.rows * row_cost;
      if (off + cost > share.begin) {
        auto first_row_at = [&](int64_t pos) {
          return std::clamp<int64_t>((pos - off + row_cost - 1) / row_cost, 0, q.w.rows);
        };
        run_rows(i, share.begin > off ? first_row_at(share.begin) : 0, first_row_at(share.end));
      }
      off += cost;
    }
  }
}

namespace {

// MatmulBatched on operands as they are: one problem per thread, or heads in turn.
void RunBatched(const BatchedMatmulParams& p) {
  const WeightView& w0 = p.w[0];
  const int64_t batch = static_cast<int64_t>(p.w.size());
  auto problem = [&p](int64_t b) {
    return MatmulProblem{p.x + b * p.x_stride, p.m, p.ldx, p.w[b], p.y + b * p.y_stride, p.ldy};
  };
  const int64_t macs = p.m * w0.rows * w0.cols;
  const bool gemv_sized = !UseOneDnn(GetCpuFeatures(), p.m, w0.dtype);
  const bool over_heads = batch > 1 && omp_get_max_threads() > 1 && (gemv_sized || macs < kBatchSplitMaxMacs);
  if (over_heads) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < batch; ++b) MatmulOne(problem(b), /*threaded=*/false);
    return;
  }
  // Big problems: heads in turn, each on all threads. With a shared x the
  // bf16 rounding of x is done once for all heads (not for fp8 weights, nor bf16 ones
  // without AVX-512: their chunked paths round x per call).
  const CpuFeatures& cpu = GetCpuFeatures();
  const bool chunked = w0.dtype == DType::kF8E4M3 || (w0.dtype == DType::kBF16 && !cpu.avx512f);
  if (p.x_stride == 0 && !chunked && UseOneDnn(cpu, p.m, w0.dtype) && MatmulOneDnnSharedX(p)) {
    return;
  }
  for (int64_t b = 0; b < batch; ++b) MatmulOne(problem(b), /*threaded=*/true);
}

// oneDNN picks its kernel, and with it the order of its sums, from the operands'
// strides (a strided f32 output measured other last bits than a packed one), while
// MatmulBatched gives the bits of packed operands whatever the strides. So for
// oneDNN-sized m, a strided y, or a strided x that oneDNN reads as it is (f32 weights;
// bf16 and fp8 weights read x through a packed bf16 copy anyway), goes through packed
// per-thread copies. The GEMV (m < kGemmMinRows: decode) reads and writes the strides
// directly.
bool NeedsPackedOperands(const BatchedMatmulParams& p) {
  const WeightView& w0 = p.w[0];
  return UseOneDnn(GetCpuFeatures(), p.m, w0.dtype) &&
         (p.ldy != w0.rows || (w0.dtype == DType::kF32 && p.ldx != w0.cols));
}

void RunBatchedPacked(const BatchedMatmulParams& p) {
  const int64_t batch = static_cast<int64_t>(p.w.size());
  const int64_t m = p.m, k = p.w[0].cols, n = p.w[0].rows;
  thread_local std::vector<float> x_storage, y_storage;
  BatchedMatmulParams packed = p;
  if (p.w[0].dtype == DType::kF32 && p.ldx != k) {
    const int64_t x_batch = p.x_stride == 0 ? 1 : batch;
    float* x = Grow(x_storage, x_batch * m * k);  // x: [x_batch, m, k]
    for (int64_t b = 0; b < x_batch; ++b) {
      for (int64_t i = 0; i < m; ++i) {
        std::memcpy(x + (b * m + i) * k, p.x + b * p.x_stride + i * p.ldx, k * sizeof(float));
      }
    }
    packed.x = x;
    packed.x_stride = p.x_stride == 0 ? 0 : m * k;
    packed.ldx = k;
  }
  if (p.ldy != n) {
    packed.y = Grow(y_storage, batch * m * n);  // y: [batch, m, n]
    packed.y_stride = m * n;
    packed.ldy = n;
  }
  RunBatched(packed);
  if (packed.y == p.y) return;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(p.y + b * p.y_stride + i * p.ldy, packed.y + (b * m + i) * n, n * sizeof(float));
    }
  }
}

}  // namespace

void MatmulBatched(const BatchedMatmulParams& p) {
  if (p.w.empty()) return;
  const WeightView& w0 = p.w[0];
  CheckProblem(MatmulProblem{p.x, p.m, p.ldx, w0, p.y, p.ldy}, "MatmulBatched");
  for (const WeightView& w : p.w) {
    CheckWeightView(w, "MatmulBatched");
    LATTE_CHECK(w.rows == w0.rows && w.cols == w0.cols && w.dtype == w0.dtype, "MatmulBatched: weight [", w.rows, ", ",
                w.cols, "] ", DTypeName(w.dtype), " differs from the first, [", w0.rows, ", ", w0.cols, "] ",
                DTypeName(w0.dtype));
  }
  LATTE_CHECK(p.x_stride >= 0 && p.y_stride >= 0, "MatmulBatched: x_stride ", p.x_stride, ", y_stride ", p.y_stride);
  if (p.m <= 0) return;
  if (IsBlockQuantized(w0.dtype) || w0.dtype == DType::kF16) {
    // Per-head views of a GGUF weight (materialized mode's rope rows of q_b_proj): one
    // product at a time, each through Matmul's paths for the format.
    for (size_t b = 0; b < p.w.size(); ++b) {
      const int64_t i = static_cast<int64_t>(b);
      Matmul({.x = p.x + i * p.x_stride, .m = p.m, .ldx = p.ldx, .w = p.w[b], .y = p.y + i * p.y_stride, .ldy = p.ldy});
    }
    return;
  }
  if (NeedsPackedOperands(p)) {
    RunBatchedPacked(p);
  } else {
    RunBatched(p);
  }
}

}  // namespace latte
