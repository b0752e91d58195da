// Product with a bf16 weight past the GEMV's rows on CPUs with AVX2 and FMA but not
// AVX-512 (matmul_internal.h, GemmBf16Avx2; a prefill's experts, ~48 rows each): the AVX2
// GEMV's arithmetic (bf16_avx2_inl.h: 16 weights widened in registers with two integer
// ops, x permuted to match, one 8-lane f32 sum per output), blocked so that the operands
// come from cache. The GEMV runs each 4-row x tile over whole weight rows, so past a few
// rows of x its x tiles stream from L2 at every weight row group; here a block of weight
// rows stays in L2 while each x tile's slice of columns, in L1, meets every row of it.
//
// The sums are the GEMV's own: each output's 8 lanes take its columns in the same order
// (one Bf16Step per 16 columns, carried across column blocks in scratch, the zero-padded
// tail last) and the same horizontal sum, so y is bit for bit the GEMV's, whatever m.
// That keeps a row's result independent of the rows beside it in a batch, across the
// GEMV / GEMM switch too.
//
// Compiled with -mavx2 -mfma -mf16c -mbmi2 (see CMakeLists.txt); reached only through
// matmul.cc's dispatch after GetCpuFeatures().avx2 and .fma.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/parallel.h"
#include "base/scratch.h"
#include "kernels/avx2_inl.h"
#include "kernels/bf16_avx2_inl.h"
#include "kernels/matmul_internal.h"
#include "kernels/row_prefetch_inl.h"

namespace latte::matmul_internal {
namespace {

// Tiles of kTileM x rows by kTileR weight rows: 12 sums, the 2 widened weight vectors (the
// even columns, then the odd) and two x vectors fill the 16 ymm registers; a step's 24
// FMAs take 12 cycles on two FMA pipes, longer than each sum's chain of two (latency 5 on
// Zen 2), and load 12 x and 4 weight vectors.
constexpr int kTileM = 6;
constexpr int kTileR = 2;
// The loops, outermost first: blocks of kBlockRows weight rows; within one, spans of
// kSpanCols columns (the block's span, 32 x 2048 bf16 = 128 KiB, stays in L2 beside the
// next span, which RowPrefetch brings in meanwhile: together half the L2 of Zen 2
// and 3); every x tile over the span; within it, kBlockCols columns at a time (a 6-row x
// slice of 512 f32 is 12 KiB, in L1) against every 2-row tile of the block. Between
// column blocks and spans each tile's sums wait in `carry` scratch: [m][32] 8-lane sums
// for a block (m = 255: 255 KiB, loaded and stored once per span of 2048 columns).
// One thread, V2-Lite's expert 1408 x 2048 at m = 48, weights from memory: 64-row blocks
// without the prefetch 79, with it 82, 32-row blocks with it 83 GFLOP/s.
constexpr int64_t kBlockRows = 32;
constexpr int64_t kSpanCols = 2048;
constexpr int64_t kBlockCols = 512;

// The mask that keeps a bf16 pair's odd (high) half, for Bf16Step6x2's vpand.
alignas(32) constexpr uint32_t kHighHalves[8] = {0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u,
                                                 0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u};

// `steps` steps of Bf16Step<6, 2> from xp (row stride ldp) and w (row stride ld), written
// out in assembly: GCC spills the 12 sums of the intrinsics version and reloads them
// through memory every step (measured: 57-73 against 72-86 GFLOP/s). The same FMAs on the
// same values in the same order per sum (an FMA's result does not depend on the order of
// its two factors), so the same bits. The sums stay in locals, in ymm registers the
// compiler picks; ymm12-13 hold the widened weights, ymm14-15 x.
inline void Bf16Steps6x2(const float* xp, int64_t ldp, const bf16* w, int64_t ld, int64_t steps, __m256 (&acc)[6][2]) {
  __m256 a00 = acc[0][0], a01 = acc[0][1], a10 = acc[1][0], a11 = acc[1][1], a20 = acc[2][0], a21 = acc[2][1];
  __m256 a30 = acc[3][0], a31 = acc[3][1], a40 = acc[4][0], a41 = acc[4][1], a50 = acc[5][0], a51 = acc[5][1];
  const float* x3 = xp + 3 * ldp;
  const int64_t ldp4 = ldp * 4, ld2 = ld * 2;
  for (int64_t s = 0; s < steps; ++s, xp += 16, x3 += 16, w += 16) {
    asm("vmovdqu (%[w]), %%ymm12\n\t"
        "vmovdqu (%[w],%[ld2]), %%ymm13\n\t"
        "vpslld $16, %%ymm12, %%ymm12\n\t"
        "vpslld $16, %%ymm13, %%ymm13\n\t"
        "vmovups (%[x]), %%ymm14\n\t"
        "vfmadd231ps %%ymm12, %%ymm14, %t[a00]\n\t"
        "vfmadd231ps %%ymm13, %%ymm14, %t[a01]\n\t"
        "vmovups (%[x],%[ldp4]), %%ymm15\n\t"
        "vfmadd231ps %%ymm12, %%ymm15, %t[a10]\n\t"
        "vfmadd231ps %%ymm13, %%ymm15, %t[a11]\n\t"
        "vmovups (%[x],%[ldp4],2), %%ymm14\n\t"
        "vfmadd231ps %%ymm12, %%ymm14, %t[a20]\n\t"
        "vfmadd231ps %%ymm13, %%ymm14, %t[a21]\n\t"
        "vmovups (%[x3]), %%ymm15\n\t"
        "vfmadd231ps %%ymm12, %%ymm15, %t[a30]\n\t"
        "vfmadd231ps %%ymm13, %%ymm15, %t[a31]\n\t"
        "vmovups (%[x3],%[ldp4]), %%ymm14\n\t"
        "vfmadd231ps %%ymm12, %%ymm14, %t[a40]\n\t"
        "vfmadd231ps %%ymm13, %%ymm14, %t[a41]\n\t"
        "vmovups (%[x3],%[ldp4],2), %%ymm15\n\t"
        "vfmadd231ps %%ymm12, %%ymm15, %t[a50]\n\t"
        "vfmadd231ps %%ymm13, %%ymm15, %t[a51]\n\t"
        "vmovdqu (%[w]), %%ymm12\n\t"
        "vmovdqu (%[w],%[ld2]), %%ymm13\n\t"
        "vpand %[high], %%ymm12, %%ymm12\n\t"
        "vpand %[high], %%ymm13, %%ymm13\n\t"
        "vmovups 32(%[x]), %%ymm14\n\t"
        "vfmadd231ps %%ymm12, %%ymm14, %t[a00]\n\t"
        "vfmadd231ps %%ymm13, %%ymm14, %t[a01]\n\t"
        "vmovups 32(%[x],%[ldp4]), %%ymm15\n\t"
        "vfmadd231ps %%ymm12, %%ymm15, %t[a10]\n\t"
        "vfmadd231ps %%ymm13, %%ymm15, %t[a11]\n\t"
        "vmovups 32(%[x],%[ldp4],2), %%ymm14\n\t"
        "vfmadd231ps %%ymm12, %%ymm14, %t[a20]\n\t"
        "vfmadd231ps %%ymm13, %%ymm14, %t[a21]\n\t"
        "vmovups 32(%[x3]), %%ymm15\n\t"
        "vfmadd231ps %%ymm12, %%ymm15, %t[a30]\n\t"
        "vfmadd231ps %%ymm13, %%ymm15, %t[a31]\n\t"
        "vmovups 32(%[x3],%[ldp4]), %%ymm14\n\t"
        "vfmadd231ps %%ymm12, %%ymm14, %t[a40]\n\t"
        "vfmadd231ps %%ymm13, %%ymm14, %t[a41]\n\t"
        "vmovups 32(%[x3],%[ldp4],2), %%ymm15\n\t"
        "vfmadd231ps %%ymm12, %%ymm15, %t[a50]\n\t"
        "vfmadd231ps %%ymm13, %%ymm15, %t[a51]\n\t"
        : [a00] "+x"(a00), [a01] "+x"(a01), [a10] "+x"(a10), [a11] "+x"(a11), [a20] "+x"(a20), [a21] "+x"(a21),
          [a30] "+x"(a30), [a31] "+x"(a31), [a40] "+x"(a40), [a41] "+x"(a41), [a50] "+x"(a50), [a51] "+x"(a51)
        : [x] "r"(xp), [x3] "r"(x3), [ldp4] "r"(ldp4), [w] "r"(w), [ld2] "r"(ld2), [high] "m"(kHighHalves)
        : "xmm12", "xmm13", "xmm14", "xmm15", "memory");
  }
  acc[0][0] = a00, acc[0][1] = a01, acc[1][0] = a10, acc[1][1] = a11, acc[2][0] = a20, acc[2][1] = a21;
  acc[3][0] = a30, acc[3][1] = a31, acc[4][0] = a40, acc[4][1] = a41, acc[5][0] = a50, acc[5][1] = a51;
}

// Columns [c0, c1) (c0 a multiple of 16; c1 = c0 + a multiple of 16, or ldp for the last
// block) of x rows [0, M) of xp against weight rows [0, R) of w. `first`: the sums start
// at 0, else from `carry` ([M][R] 8-lane sums between column blocks); `last`: they end
// in y, else in `carry`. k: the real columns (the last 16-column group may be partial:
// its weights are read through a zeroed copy, as the GEMV does).
template <int M, int R> void BlockTile(const float* xp, int64_t ldp, const bf16* w, int64_t ld, int64_t k, int64_t c0,
                                       int64_t c1, bool first, bool last, __m256* carry, float* y, int64_t ldy) {
  __m256 acc[M][R];
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = first ? _mm256_setzero_ps() : carry[i * R + r];
  }
  const int64_t whole = std::min(c1, k / 16 * 16);
  int64_t kk = c0;
  if constexpr (M == 6 && R == 2) {
    if (kk < whole) Bf16Steps6x2(xp + kk, ldp, w + kk, ld, (whole - kk) / 16, acc);
    kk = std::max(kk, whole);
  } else {
    for (; kk < whole; kk += 16) Bf16Step<M, R>(xp + kk, ldp, w + kk, ld, acc);
  }
  if (kk < c1) {  // the partial group of the last block
    Bf16TailStep<M, R>(xp + kk, ldp, w + kk, ld, k - kk, acc);
  }
  if (!last) {
    for (int i = 0; i < M; ++i) {
      for (int r = 0; r < R; ++r) carry[i * R + r] = acc[i][r];
    }
    return;
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) y[i * ldy + r] = HorizontalSum(acc[i][r]);
  }
}

struct Operands {
  const float* xp;  // x permuted: [m, ldp], columns [0, cols) of each row
  int64_t m;
  int64_t cols;
  int64_t ldp;
  const WeightView& w;
  float* y;
  int64_t ldy;
};

// x rows [i, i + M) against weight rows [n0, n1) (one block), columns [c0, c1) (one span);
// `carry`: [n1 - n0][M] 8-lane sums of this x tile and block.
template <int M> void XTile(const Operands& o, int64_t i, int64_t n0, int64_t n1, int64_t c0, int64_t c1, __m256* carry,
                            RowPrefetch& prefetch) {
  const bf16* w = static_cast<const bf16*>(o.w.data);
  const int64_t k = o.w.cols;
  const float* xi = o.xp + i * o.ldp;
  float* yi = o.y + i * o.ldy;
  for (int64_t b0 = c0; b0 < c1; b0 += kBlockCols) {
    const int64_t b1 = std::min(c1, b0 + kBlockCols);
    const bool first = b0 == 0, last = b1 == o.cols;
    int64_t n = n0;
    for (; n + kTileR <= n1; n += kTileR) {
      prefetch.Next();
      BlockTile<M, kTileR>(xi, o.ldp, w + n * o.w.ld, o.w.ld, k, b0, b1, first, last, carry + (n - n0) * M, yi + n,
                           o.ldy);
    }
    for (; n < n1; ++n) {
      BlockTile<M, 1>(xi, o.ldp, w + n * o.w.ld, o.w.ld, k, b0, b1, first, last, carry + (n - n0) * M, yi + n, o.ldy);
    }
  }
}

// Weight rows [n0, n1): block by block, span by span, every x tile over each.
void Rows(const Operands& o, int64_t n0, int64_t n1) {
  thread_local AlignedBuffer carry;  // [m][kBlockRows] 8-lane sums; grown only
  const size_t carry_bytes = static_cast<size_t>(o.m * kBlockRows) * sizeof(__m256);
  __m256* sums = GrowAligned<__m256>(carry, carry_bytes);
  const bf16* w = static_cast<const bf16*>(o.w.data);
  const int64_t k = o.w.cols;
  for (int64_t r0 = n0; r0 < n1; r0 += kBlockRows) {
    const int64_t r1 = std::min(n1, r0 + kBlockRows);
    for (int64_t c0 = 0; c0 < o.cols; c0 += kSpanCols) {
      const int64_t c1 = std::min(o.cols, c0 + kSpanCols);
      // The next span: this block's next columns, else the next block's first.
      const bool more_cols = c1 < o.cols;
      const int64_t pr0 = more_cols ? r0 : r1, pr1 = more_cols ? r1 : std::min(n1, r1 + kBlockRows);
      const int64_t pc0 = more_cols ? c1 : 0, pc1 = std::min(k, pc0 + kSpanCols);
      // Spread over this span's calls of Next (one per row pair, x tile and column block).
      const int64_t calls =
          (o.m + kTileM - 1) / kTileM * ((r1 - r0) / kTileR) * ((c1 - c0 + kBlockCols - 1) / kBlockCols);
      constexpr int64_t kBytes = sizeof(bf16);
      RowPrefetch prefetch;
      if (pr1 > pr0 && pc1 > pc0) {
        prefetch = RowPrefetch(w + pr0 * o.w.ld + pc0, o.w.ld * kBytes, pr1 - pr0, (pc1 - pc0) * kBytes, calls);
      }
      int64_t i = 0;
      for (; i + kTileM <= o.m; i += kTileM) XTile<kTileM>(o, i, r0, r1, c0, c1, sums + i * kBlockRows, prefetch);
      WithTileRows<kTileM - 1>(o.m - i,
                               [&]<int M>() { XTile<M>(o, i, r0, r1, c0, c1, sums + i * kBlockRows, prefetch); });
    }
  }
}

}  // namespace

void GemmBf16Avx2(const MatmulProblem& p, bool threaded) {
  const WeightView& w = p.w;
  if (p.m <= 0 || w.rows <= 0) return;
  const int64_t k = w.cols;
  if (k == 0) {
    ZeroY(p);
    return;
  }
  // x rounded to bf16 (as every bf16 path multiplies it), widened back and permuted.
  // Per-thread, grown only; filled by the calling thread before the team reads it.
  thread_local AlignedBuffer permuted;  // 64-byte aligned: no x load splits a cache line
  const float* xf = XRoundedToBf16(p);
  // Rows one cache line more than a power of two apart share fewer L1 sets.
  const int64_t cols = PermutedXStride(k), ldp = cols + 16;
  const size_t x_bytes = static_cast<size_t>(p.m * ldp) * sizeof(float);
  float* xp = GrowAligned<float>(permuted, x_bytes);
  PermuteX(xf, p.m, k, k, xp, ldp);
  const Operands o{xp, p.m, cols, ldp, w, p.y, p.ldy};
  const bool parallel = threaded && w.rows >= 2 * kTileR && WorthParallel(p.m * w.rows * k);
  SplitRowsOverThreads(parallel, w.rows, kTileR, [&](RowRange rows) { Rows(o, rows.begin, rows.end); });
}

}  // namespace latte::matmul_internal
