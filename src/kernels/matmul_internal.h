// The matmul paths behind Matmul()'s run-time dispatch, exposed so tests and the
// benchmark can force each one. Not part of the kernel API: callers use matmul.h.
//
// Every entry point computes y: [m, w.rows] (row stride ldy) = x: [m, w.cols]
// (row stride ldx) · wᵀ, with f32 accumulation, for w.dtype kF32 or kBF16 (and
// kF8E4M3, kF16 or the block formats where a comment says so).
#pragma once

#include <algorithm>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "kernels/block_quant.h"
#include "kernels/matmul.h"

namespace latte::matmul_internal {

// Below this many rows of x the product is memory-bound (the weight is read once
// and each weight byte feeds few FMAs), so the GEMV that streams the weight and
// keeps x in f32 wins or ties; from here on oneDNN's blocked GEMM is faster.
// Measured (bench/matmul_bench.cc, 7168x1536 bf16, 1 thread, on a loaded
// 2-core Zen 4 VM, so rough): m=4 GEMV 2.01 ms vs oneDNN 1.96 ms; m=6 2.61 vs
// 2.10; m=8 2.96 vs 2.29; m=16 4.64 vs 3.31. Ties go to the GEMV (exact f32 x).
inline constexpr int64_t kGemmMinRows = 6;

// bf16 weights on CPUs with AVX512_BF16 take MatmulBf16DotAvx512 up to this many rows
// of x (oneDNN from kBf16DotMaxRows + 1): a batched decode step's m = 16 products sit at
// the ridge point (16 FLOP per weight byte against ~15 on the 2-vCPU Zen 5 VM), where
// streaming the weight once in its own layout beats oneDNN, which packs each weight
// block first. See GemmMinRows. On the half-rate-bf16 Zen 4 VM the kernel also matched or
// beat oneDNN from 17 to 48 rows (matmul_bench's LATTE_LM_HEAD_BY_M: lm_head at m = 32,
// 350 against 297 GFLOP/s), but 48 here moves prompts of 17-48 tokens onto another kernel
// alone than in a batch, and batched requests parted from their alone runs more often
// (engine_test's near ties: 5-9 of 32 against 1-2), so the switch stays at 16.
inline constexpr int64_t kBf16DotMaxRows = 16;

// bf16 weights on CPUs with AVX2 and FMA but not AVX-512 take the AVX2 GEMV (gemv_avx2.cc)
// up to kBf16Avx2GemvMaxRows rows of x, the AVX2 GEMM (GemmBf16Avx2: the same sums, so
// the same bits, blocked for cache) up to kBf16Avx2GemmMaxRows, then the packed
// outer-product GEMM (GemmBf16PackedAvx2), ~10% ahead of the first at 512 rows.
// Measured (bench/matmul_bench.cc LATTE_AVX2_BF16_BY_M, one and two threads of a 2-vCPU
// Zen 2 VM, GFLOP/s; single pairs move by +-5%): a prefill's expert at 48 rows (1408 x
// 2048) 69-77 (blocked) vs 69 (packed) vs 54-59 (oneDNN's sgemm on widened chunks, the
// path before both) on one thread; 96-256 rows blocked 77-84 vs sgemm 73-76 on one,
// 142-161 vs 115-133 on two; 512 rows on the V2-Lite shapes blocked 70-81, packed 75-83,
// sgemm 67-85 on one. In a pp512 the blocked GEMM for every m was 0.90x the split.
// From 9 rows the GEMM's 6-row x tiles beat the GEMV's 4-row ones, whose x rows come from
// L2 again for every group of weight rows (BM_MatmulGemvColdWeights, 1408 x 2048 from
// memory, 2 threads, GFLOP/s GEMM / GEMV: m = 8 104 / 109, 9 115 / 108, 11 133 / 105,
// 12 140 / 122, 16 131-140 / 125): a batched decode's lm_head, attention and shared
// experts at 16 sequences run there (bench model --batch 16, bf16: 1.09-1.15x).
inline constexpr int64_t kBf16Avx2GemvMaxRows = 8;
inline constexpr int64_t kBf16Avx2GemmMaxRows = 255;

// Block-format weights (Q8_0 ... Q6_K, Q5_0, Q5_1) take the integer GEMV up to this many
// rows of x (see the block-format section below): a batched decode step (16 sequences) stays on it,
// reading each weight byte once, where the GEMM path dequantizes every weight first.
// Measured (2048 x 7168, 2 threads of a shared Xeon VM with AVX512_VNNI, so rough): GEMV
// at m = 16 vs the chunked bf16 GEMM at m = 17: Q4_K 2.4 vs 3.1 ms, Q8_0 4.0 vs 3.8,
// Q6_K 3.8 vs 4.1; at m = 32 the GEMM wins for all (Q4_K 4.9 vs 3.3 ms).
inline constexpr int64_t kBlockGemvMaxRows = 16;

// How far ahead a GEMV that reads one weight row at a time as a single stream (the AVX2
// Q8_0 tile at m = 1, the AVX2 fp8 GEMV up to 3 x rows) prefetches along it into L2, a few
// rows ahead: on Zen 2 (2 threads, weights from memory) the hardware prefetcher alone kept
// Q8_0 at ~23 GB/s where the bf16 GEMV reads ~31; a prefetch 2-12 KiB ahead gave 28-30 (flat
// across that range), 32 KiB 26-28, 128 KiB 26-27 (1408 x 2048 experts; the 102400 x 2048
// lm_head alike). A Q8_0 file's decode (tg128, 2 threads) went from 40.3-40.9 to 47.3-48.1
// tok/s, an fp8 one from 40.4-40.9 to 47.9-48.0.
inline constexpr int64_t kStreamPrefetchBytes = int64_t{8} << 10;

// GEMVs with 1-3 x rows (AVX2's; on AVX-512 the bf16 and fp8 ones that use vdpbf16ps, and
// with one x row the f32 / f16 / bf16 one and the block formats') read several weight rows
// side by side, one from each of S contiguous spans of a thread's rows, so that each core
// keeps S long sequential streams in flight. One row at a time is a single stream, and a
// tile of adjacent rows is a few short ones that end every row; on Zen 2 either leaves the
// memory idle part of the time. A read-only loop over 1 GiB there
// (2 threads, 2 MiB pages, 8 independent sums per stream) read 33-35 GB/s as 1 stream per
// thread, 33 as 2, 41-45 as 3, 34 as 4, 52-57 as 5 to 9 (even counts, their streams a
// power of two apart, clash). Each kernel's S is what it measured best (kBlockRowStreams in
// gemv_block_avx2.cc, kBf16RowStreams and kBf16SmallMRowStreams in gemv_avx2.cc; on Zen 4
// 2, kRowStreams in matmul_bf16dot_avx512.cc, gemv_fp8_avx512.cc and gemv_avx512.cc, and
// per format FormatX::kSpansM1 in gemv_block_avx512_inl.h).

// Rows [n0, n1) as S spans of span = (n1 - n0) / S rows: tile(row, span) for each row in
// [n0, n0 + span), the tile taking rows row + s · span for s < S. Returns the first row no
// span holds (fewer than S are left, for the caller's one-row path).
template <int S, class Tile> int64_t ForSpanRows(int64_t n0, int64_t n1, Tile&& tile) {
  const int64_t span = (n1 - n0) / S;
  for (int64_t row = n0; row < n0 + span; ++row) tile(row, span);
  return n0 + S * span;
}

// ForSpanRows for tiles of M x rows by the S spans' rows: tile(row, span, ys) fills ys
// [M][S] (row stride S), which lands in y[i · ldy + row + s · span].
template <int M, int S, class Tile> int64_t ForSpanTiles(int64_t n0, int64_t n1, float* y, int64_t ldy, Tile&& tile) {
  return ForSpanRows<S>(n0, n1, [&](int64_t row, int64_t span) {
    float ys[M][S];
    tile(row, span, &ys[0][0]);
    for (int i = 0; i < M; ++i) {
      for (int s = 0; s < S; ++s) y[i * ldy + row + s * span] = ys[i][s];
    }
  });
}

// Formats with a scale per 16 values (Q6_K, Q3_K, Q2_K): the portable GEMV's sub-blocks,
// and in the block GEMMs two 16-value sub-blocks a 32-value slot (two scales, two
// corrections, two code sums).
inline constexpr bool HasSixteenValueScales(DType dtype) {
  return dtype == DType::kQ6_K || dtype == DType::kQ3_K || dtype == DType::kQ2_K;
}

// On CPUs with AVX512_VNNI those formats go to the GEMM from this many rows of x: its
// 16-row panels are transposed once per call and then serve every x row, 8 vpdpbusd per
// 512 products where the GEMV spends 32 instructions, so from a few rows on the
// transposition pays. Measured (bench/matmul_bench.cc BM_BlockLargeM, 1408 x 2048, 2
// threads of a 2-vCPU AVX-512 EPYC VM, GMAC/s, GEMM vs GEMV): m = 4 Q8_0 96 vs 90, Q4_K
// 100 vs 121, Q6_K 93 vs 100; m = 6 145 vs 96, 130 vs 117, 123 vs 99; m = 16 221 vs 85,
// 199 vs 118, 194 vs 97; m = 512 against the bf16 chunks for oneDNN 327 vs 212, 295 vs
// 212, 281 vs 214.
inline constexpr int64_t kVnniGemmMinRows = 6;

// On CPUs with AVX2 but not AVX-512 those formats go to the AVX2 GEMM from this many rows
// of x, where its panels' transposition has paid off against the GEMV (whose 4-row tiles
// run m = 6 as 4 + 2). Measured (bench/matmul_bench.cc BM_BlockLargeM, 1408 x 2048,
// 1 thread of a 2-vCPU AVX-512 EPYC VM shared with another
// job's builds, oneDNN limited to AVX2 by ONEDNN_MAX_CPU_ISA=AVX2, so rough; GMAC/s, GEMM
// vs GEMV): m = 4 Q8_0 35 vs 38, Q4_K 44 vs 55, Q6_K 31 vs 45; m = 6 38 vs 35, 52 vs 47,
// 39 vs 36; m = 16 44 vs 37, 71 vs 52, 57 vs 43; m = 512 against the f32 chunks for
// oneDNN's sgemm 46 vs 44, 91 vs 50, 77 vs 49.
inline constexpr int64_t kAvx2GemmMinRows = 6;
// Except Q2_K, whose mins per 16 values cost the GEMM two more FMAs per slot and x row: it
// measured below the GEMV up to ~16 rows (1408 x 2048, 2 threads of a Zen 5 VM, GMAC/s, GEMM
// vs GEMV: m = 6 108 vs 129, m = 16 141 vs 135; Q3_K 113 vs 110, 170 vs 114), so it takes
// the GEMM only in the dequantized chunks' place, from kBlockGemvMaxRows + 1 (m = 512: 197
// against the chunks' 124).
inline constexpr int64_t Avx2GemmMinRows(DType dtype) {
  return dtype == DType::kQ2_K ? kBlockGemvMaxRows + 1 : kAvx2GemmMinRows;
}

// The block formats the integer GEMMs (gemm_block_avx512_vnni.cc, gemm_block_avx2.cc) take:
// all but the lattice formats, whose large-m products go through dequantized chunks.
inline bool HasBlockGemm(DType dtype) { return IsBlockQuantized(dtype) && !IsLatticeFormat(dtype); }

// The first m that goes to the GEMM side (oneDNN, or a block GEMM) for this dtype on a CPU
// with (or without) AVX512_BF16 and AVX512_VNNI, or with AVX2 but not AVX-512 (block
// formats: from kBlockGemvMaxRows + 1, or with a block GEMM kVnniGemmMinRows with VNNI,
// Avx2GemmMinRows on AVX2 alone).
inline int64_t GemmMinRows(DType dtype, bool avx512_bf16, bool avx512_vnni = false, bool avx2_only = false) {
  if (HasBlockGemm(dtype)) {
    return avx512_vnni ? kVnniGemmMinRows : avx2_only ? Avx2GemmMinRows(dtype) : kBlockGemvMaxRows + 1;
  }
  if (IsBlockQuantized(dtype)) return kBlockGemvMaxRows + 1;  // the lattice formats
  return dtype == DType::kBF16 && avx512_bf16 ? kBf16DotMaxRows + 1 : kGemmMinRows;
}

// Plain C++ for any m and every dtype including fp8 (GCC vectorises it at the
// x86-64 baseline). `threaded`: spread output rows over the OpenMP team; false when
// the caller already runs one problem per thread (MatmulBatched).
void MatmulPortable(const MatmulProblem& p, bool threaded = true);

// AVX-512 GEMV for f32, bf16 and f16 weights, any m (meant for m < kGemmMinRows).
// Streams each weight row once for all m rows of x; x stays f32 (bf16 weights are
// widened in registers, f16 ones converted with vcvtph2ps).
// Call only when GetCpuFeatures().avx512f.
void GemvAvx512(const MatmulProblem& p, bool threaded = true);

// The same GEMV on AVX2 + FMA + F16C (8-float registers) for CPUs without AVX-512
// (gemv_avx2.cc): f32, bf16 and f16 weights, any m, f32 x and accumulation.
// Call only when GetCpuFeatures() has avx2 and fma.
void GemvAvx2(const MatmulProblem& p, bool threaded = true);

// A MatmulProblem whose x is already rounded to bf16.
struct Bf16XProblem {
  const bf16* x = nullptr;  // x: [m, w.cols], row stride ldx
  int64_t m = 0;
  int64_t ldx = 0;
  WeightView w;        // kBF16
  float* y = nullptr;  // y: [m, w.rows], row stride ldy
  int64_t ldy = 0;
};

// AVX512_BF16 product for bf16 weights, any m (meant for m <= kBf16DotMaxRows): each
// weight row is streamed once in its own layout and multiplied with vdpbf16ps against
// every row of x (matmul_bf16dot_avx512.cc). Error: x's bf16 rounding (done by the
// caller) plus f32 accumulation. Call only when GetCpuFeatures() has avx512f and
// avx512_bf16.
void MatmulBf16DotAvx512(const Bf16XProblem& p, bool threaded = true);

// The portable fp8 kernel MatmulPortable runs for kF8E4M3 views (matmul_fp8.cc).
void MatmulFp8Portable(const MatmulProblem& p, bool threaded);

// AVX-512 GEMV for fp8 e4m3 weights with block scales, any m (meant for m <
// kGemmMinRows): streams the e4m3 bytes once, converts them in registers exactly
// and applies each block's scale once per row and block (gemv_fp8_avx512.cc).
// Views whose block_cols is not a multiple of 16 go to MatmulPortable.
// Call only when GetCpuFeatures().avx512f.
void GemvFp8Avx512(const MatmulProblem& p, bool threaded = true);
// Its f32 path alone (e4m3 -> f16 -> f32, FMA): what AVX-512 CPUs without
// AVX512_BF16 or VBMI run; GemvFp8Avx512 takes the bf16 table path where it can.
void GemvFp8Avx512F32(const MatmulProblem& p, bool threaded);
// The same f32 path on AVX2 + FMA + F16C (gemv_fp8_avx2.cc), for CPUs without
// AVX-512; views whose block_cols is not a multiple of 8 go to MatmulPortable. Call only
// when GetCpuFeatures() has avx2 and fma.
void GemvFp8Avx2(const MatmulProblem& p, bool threaded = true);

// The loops behind DequantizeFp8ToBf16 (matmul.h), exposed for tests: the portable
// one (matmul_fp8.cc) and the AVX-512 one (gemv_fp8_avx512.cc; vcvtneps2bf16 when
// `has_bf16`; call only when GetCpuFeatures().avx512f). Same contract.
void DequantizeFp8ToBf16Portable(const WeightView& w, int64_t first, int64_t count, bf16* out);
void DequantizeFp8ToBf16Avx512(const WeightView& w, int64_t first, int64_t count, bf16* out, bool has_bf16);
// The AVX2 one (gemv_fp8_avx2.cc; call only when GetCpuFeatures() has avx2 and fma).
void DequantizeFp8ToBf16Avx2(const WeightView& w, int64_t first, int64_t count, bf16* out);

// Large-m product with an fp8 weight (matmul_fp8.cc): x is rounded to bf16 once,
// then a bounded chunk of weight rows at a time (8 MiB of bf16, matmul_fp8.cc) is
// dequantized into per-thread scratch and multiplied by oneDNN's bf16 GEMM, so a
// 129280 x 7168 matrix is never dequantized whole. Same contract as MatmulOneDnn.
bool MatmulFp8OneDnn(const MatmulProblem& p);

// fp8 weights past kFp8Avx2GemvMaxRows rows of x on CPUs with AVX2 and FMA but not AVX-512
// (matmul_fp8.cc): chunks of weight rows (8 MiB of f32) dequantized exactly to f32 (e4m3 ×
// scale, one rounding, DequantizeFp8ToF32Avx2) for oneDNN's sgemm, against x as the caller
// gives it (the dispatch: rounded to bf16, as for every fp8 product). The weights stay the
// GEMV's, so a row's result differs from the GEMV's only in the order of f32 sums, not by a
// bf16 rounding of each weight (which, beside the GEMV's exact weights, moved the logits
// of a batched engine run enough to flip a sampled token's distribution). The fp8 GEMV
// widens every weight once per 3 x rows; on a pp512 most rows reach the sgemm. Returns
// false where oneDNN fails (the caller then runs the GEMV). block_cols a multiple of 8.
bool MatmulFp8SgemmAvx2(const MatmulProblem& p);
void DequantizeFp8ToF32Avx2(const WeightView& w, int64_t first, int64_t count, float* out);
inline constexpr int64_t kFp8Avx2GemvMaxRows = 63;
// From this many rows of x GemvFp8Avx2 runs its tiles blocked for cache (gemv_fp8_avx2.cc):
// the same sums to the bit, the weights widened once per 6 x rows instead of 3.
inline constexpr int64_t kFp8Avx2BlockedMinRows = 8;

// Large-m product with a bf16 weight on CPUs without AVX-512, where oneDNN 2.6 has no
// fast bf16 GEMM (matmul_bf16_sgemm.cc): x rounded to bf16 (as on every bf16 path) and
// widened to f32 once, then a bounded chunk of weight rows at a time (8 MiB of f32)
// widened to f32 (exact) for oneDNN's sgemm. Same products as the bf16 GEMV; only the
// order of the f32 sums differs. Same contract as MatmulOneDnn.
bool MatmulBf16Sgemm(const MatmulProblem& p);

// p.x rounded to bf16 (as every bf16 and fp8 path multiplies it) and widened back:
// [p.m, p.w.cols] f32, in per-thread scratch that this thread's next call reuses.
const float* XRoundedToBf16(const MatmulProblem& p);

// y = 0 for p's m x rows and p.w.rows outputs: a product over k = 0 columns, where a
// kernel's column blocks would not run (the GEMV's empty sums give 0).
inline void ZeroY(const MatmulProblem& p) {
  for (int64_t i = 0; i < p.m; ++i) std::fill(p.y + i * p.ldy, p.y + i * p.ldy + p.w.rows, 0.0f);
}

// f.template operator()<M>() with M = rows, for 0 < rows <= kMax (else nothing): a tile
// of a run-time number of x rows handed to code that takes it as a template argument.
template <int kMax, class F> void WithTileRows(int64_t rows, F&& f) {
  if constexpr (kMax > 0) {
    if (rows == kMax) {
      f.template operator()<kMax>();
    } else {
      WithTileRows<kMax - 1>(rows, f);
    }
  }
}

// Product with a bf16 weight past the GEMV's rows on CPUs with AVX2 and FMA
// (gemm_bf16_avx2.cc): the AVX2 GEMV's arithmetic blocked for cache, y bit for bit the
// GEMV's (GemvAvx2 on x rounded to bf16). Requires GetCpuFeatures().avx2 and .fma.
void GemmBf16Avx2(const MatmulProblem& p, bool threaded = true);

// The outer-product GEMM for bf16 weights on CPUs with AVX2 and FMA, past
// kBf16Avx2GemmMaxRows rows (gemm_bf16_packed_avx2.cc): blocks of weight rows widened
// and transposed into f32 panels, 6 x 16 tiles. Requires GetCpuFeatures().avx2 and .fma.
void GemmBf16PackedAvx2(const MatmulProblem& p, bool threaded = true);

// oneDNN matmul (bf16 weights: x rounded to bf16, bf16 x bf16 -> f32; f32 weights:
// sgemm). Primitives are cached per thread by shape. Returns false (and writes
// nothing) when oneDNN cannot build an optimised primitive for the shape/CPU, so
// the caller falls back; the tests treat false as a failure on AVX-512 CPUs.
bool MatmulOneDnn(const MatmulProblem& p);

// oneDNN bf16 x bf16 -> f32 with x already rounded to bf16; w.dtype must be kBF16.
// Same contract as MatmulOneDnn.
bool MatmulOneDnnBf16X(const Bf16XProblem& p);

// y = x · b (f32, no transpose): x [m, k] (row stride ldx), b [k, n] (row stride ldb),
// y [m, n] (row stride ldy). Attention's P · V reads the values where they lie,
// [keys, heads, value_dim], with it. Same contract as MatmulOneDnn.
bool MatmulOneDnnF32KN(const float* x, int64_t m, int64_t ldx, const float* b, int64_t k, int64_t n, int64_t ldb,
                       float* y, int64_t ldy);

// MatmulBatched with x_stride 0 on the oneDNN path: x is rounded to bf16 once for
// all heads. Same contract as MatmulOneDnn.
bool MatmulOneDnnSharedX(const BatchedMatmulParams& p);

// The large-m paths that hand oneDNN converted weights (fp8, block formats, bf16 on AVX2)
// convert a bounded chunk of weight rows at a time into per-thread scratch:
// ConvertedChunkRows(w, bytes per converted value) rows, 8 MiB of converted values in whole
// 16-row GEMM tiles (matmul_onednn.cc), so a 129280 x 7168 matrix goes 576 rows of bf16 at a
// time (8 MiB of scratch per thread, not 1.85 GB) while matrices up to 2048 x 2048 in bf16 are
// one chunk and one GEMM (1408 x 2048 fp8 experts split in two cost ~25% more GEMM time in a
// 64-token prefill).
int64_t ConvertedChunkRows(const WeightView& w, int64_t value_bytes);
// Fills out ([count, w.cols], row stride w.cols) with weight rows [first, first + count).
template <class T> using ConvertRows = std::function<void(int64_t first, int64_t count, T* out)>;
// y = x · w by oneDNN's sgemm on chunks of w's rows that `convert` turns into f32; x: [p.m,
// p.w.cols] at row stride ldx (p.x itself, or a conversion of it). Same contract as
// MatmulOneDnn.
bool MatmulConvertedF32(const float* x, int64_t ldx, const MatmulProblem& p, const ConvertRows<float>& convert);
// The same by oneDNN's bf16 GEMM, p.x rounded to bf16 once for every chunk.
bool MatmulConvertedBf16(const MatmulProblem& p, const ConvertRows<bf16>& convert);

// ---- GGUF block formats (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q5_0, Q5_1) and f16 weights --
//
// Block formats (matmul_block.cc, gemv_block_avx512*.cc, gemv_block_avx2.cc): up to
// kBlockGemvMaxRows rows of x the GEMV multiplies integers, as llama.cpp's vec_dot kernels do. Each x row is
// quantized once per call into 32-value blocks (int8 codes q = round(x · 127 / amax),
// scale dx = amax / 127, amax = the block's max |x|), then every weight sub-block's
// integer codes are dotted with x's codes in int32 (exact) and the sum is scaled by
// (weight sub-block scale · dx) in f32. Zero points (Q4_0's 8, Q5_0's 16, Q6_K's 32, the
// +128 that makes Q8_0's codes unsigned for vpdpbusd) are taken off in the integers;
// Q4_K / Q5_K's mins (-dmin·m) and Q5_1's (m) multiply dx · sum(q) per 32-value block in
// f32. Every path computes the same integer sums from the same x codes; they differ only
// in the order of the f32 sums. Error against the exact product with the weight as
// stored: x's rounding, |x - dx·q| <= dx / 2 per value, so at most sum over x blocks of
// amax / 254 · sum |w| over the block, plus f32 rounding.
// From kBlockGemvMaxRows + 1 rows: a bounded chunk of weight rows at a time dequantized
// to bf16 for oneDNN's bf16 GEMM (AVX-512 CPUs; x rounded to bf16), or to f32 for its
// sgemm (other CPUs: oneDNN 2.6 has no fast bf16 GEMM there); except that CPUs with
// AVX512_VNNI, or with AVX2 but not AVX-512, run an integer GEMM on the GEMV's x codes
// from kVnniGemmMinRows / Avx2GemmMinRows rows.
//
// f16 weights keep f32 x: GEMV up to kGemmMinRows - 1 rows (vcvtph2ps in registers, or
// F16ToF32Row per row), then chunks converted to f32 for oneDNN's sgemm (f16 -> bf16
// would drop 3 mantissa bits).

// How the block-format GEMV runs: plain C++, AVX-512BW (vpmaddubsw + vpmaddwd), AVX512_VNNI
// (vpdpbusd), or AVX2 (vpmaddubsw + vpmaddwd on 256-bit registers, for CPUs without AVX-512).
// The GEMV runs up to kBlockGemvMaxRows rows of x.
enum class BlockGemvIsa { kPortable, kAvx512, kAvx512Vnni, kAvx2 };

// The ISA GetCpuFeatures() allows: AVX-512 (VNNI where present), else AVX2, else portable.
BlockGemvIsa BestBlockGemvIsa();

// The ISA whose kernel runs `dtype` when `isa` is asked for: `isa` itself, except that the
// AVX-512 GEMV has no Q5_1 code (a few tensors of a Q5_K_M file: 1408-wide or
// 10944-wide ffn_down), so it runs on AVX2 there, which every AVX-512 CPU has.
// PreparedXBytes, PrepareX and GemvBlock apply it; PreparedX::isa holds the result.
BlockGemvIsa BlockGemvIsaFor(BlockGemvIsa isa, DType dtype);

// x quantized for one weight format and ISA (PrepareX). All arrays are per x row i:
//   q + i·ldq: the int8 codes. Portable: [cols] in order. AVX-512 (and AVX2, which reads
//     each step as two 32-value halves): [steps · 64], steps = ceil(cols / 64), in the order
//     the AVX-512 kernel unpacks the weights (Q4_K / Q5_K: 32-value blocks 0, 2, 1, 3, 4, 6,
//     5, 7 of each 256; else in order), zero-padded.
//   scale + i·lds: portable: dx per 32-value block [cols / 32]; AVX-512: dx spread over
//     the 16 int32 lanes of each 64-value step (8 lanes per block), [steps · 16].
//   bias + i·lds (AVX-512, zero-point formats; else null): per lane -zero_point · the
//     sum of the lane's 4 codes, [steps · 16].
//   pair_bias + i·2·lds (AVX2, zero-point formats; else null; in bias's place and size):
//     per pair of codes -zero_point · their sum, int16, [steps · 32]. AVX2 adds it to
//     vpmaddubsw's int16 pairs, so a per-lane weight scale can multiply both in vpmaddwd.
//   block_sum + i·ldb (Q4_K / Q5_K / Q5_1 / Q2_K, and Q6_K / Q3_K in the AVX-512 layout;
//     else null): dx · sum of codes per 32-value block (Q2_K: per 16 values). Portable (and
//     Q5_1 in the AVX2 layout): [cols / 32] in order (Q2_K [cols / 16]); AVX-512 and AVX2
//     (Q4_K / Q5_K): per 256 values 16 floats, blocks in lanes 8..15 and the blocks' dx in
//     lanes 0..7 (both in block order, not the codes' slot order); AVX-512 Q6_K / Q3_K: no
//     sums, dx per 16-value sub-block, [cols / 16]; Q2_K per 256 values: AVX2 the 16 sums
//     per 16 values, AVX-512 32 floats, dx per 16 values then the 16 sums.
struct PreparedX {
  BlockGemvIsa isa = BlockGemvIsa::kPortable;
  DType dtype = DType::kQ8_0;  // the weight format the layout is for
  int64_t m = 0;
  int64_t cols = 0;
  int8_t* q = nullptr;
  int64_t ldq = 0;
  float* scale = nullptr;
  int32_t* bias = nullptr;
  int16_t* pair_bias = nullptr;
  int64_t lds = 0;
  float* block_sum = nullptr;
  int64_t ldb = 0;
};

// The zero point the AVX-512 / AVX2 layouts' biases take off (Q4_0 8, Q5_0 16, Q6_K 32,
// Q8_0 on VNNI 128).
int BlockZeroPoint(BlockGemvIsa isa, DType dtype);

// Bytes of storage PrepareX needs (a multiple of 64).
size_t PreparedXBytes(BlockGemvIsa isa, DType dtype, int64_t m, int64_t cols);
// Quantizes x: [m, cols] (row stride ldx) for `dtype` weights into `storage` (64-byte
// aligned, PreparedXBytes long), in the layout of BlockGemvIsaFor(isa, dtype). One thread.
PreparedX PrepareX(BlockGemvIsa isa, DType dtype, const float* x, int64_t m, int64_t ldx, int64_t cols,
                   std::byte* storage);
// PrepareX in two parts: the arrays placed in `storage` for m rows (nothing written), and
// rows [i0, i1) of x quantized into them (threads may fill disjoint ranges).
PreparedX PlaceX(BlockGemvIsa isa, DType dtype, int64_t m, int64_t cols, std::byte* storage);
void FillX(const PreparedX& p, const float* x, int64_t ldx, int64_t i0, int64_t i1);
// The AVX-512 layout's filling (gemv_block_avx512.cc): `out`'s arrays placed by PrepareX.
void PrepareXAvx512(const float* x, int64_t ldx, const PreparedX& out);
// The same layout filled with AVX2 only (gemv_block_avx2.cc), for kAvx2.
void PrepareXAvx2(const float* x, int64_t ldx, const PreparedX& out);

// y[i][n] for output rows n in [n0, n1) of the block-format weight w (y: [x.m, ...],
// row stride ldy), x prepared for w.dtype and the kernel's ISA (x.isa). One thread.
// Portable (matmul_block.cc), AVX-512BW and AVX512_VNNI (gemv_block_avx512*.cc; not Q5_0 /
// Q5_1, see BlockGemvIsaFor), AVX2 (gemv_block_avx2.cc; call each only where the CPU has it).
void GemvBlockRowsPortable(const PreparedX& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy);
void GemvBlockRowsAvx512(const PreparedX& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy);
void GemvBlockRowsAvx512Vnni(const PreparedX& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy);
// The VNNI GEMV with Q5_K's and Q6_K's qh bits (Q3_K's hmask bits) moved by GFNI (gemv_block_avx512_gfni.cc):
// bit for bit GemvBlockRowsAvx512Vnni's results; other formats run that. Call only where
// the CPU has AVX512_VNNI and GFNI.
void GemvBlockRowsAvx512VnniGfni(const PreparedX& x, const WeightView& w, int64_t n0, int64_t n1, float* y,
                                 int64_t ldy);
void GemvBlockRowsAvx2(const PreparedX& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy);
// The row kernel for `isa` (kAvx512Vnni: the GFNI one where the CPU has GFNI).
using GemvBlockRowsFn = void (*)(const PreparedX&, const WeightView&, int64_t, int64_t, float*, int64_t);
GemvBlockRowsFn GemvBlockRowsFor(BlockGemvIsa isa);

// The AVX512_VNNI GEMM for block formats (gemm_block_avx512_vnni.cc): x quantized as for
// the GEMV (the same codes and scales), then 16 weight rows at a time transposed into
// 4-byte groups (one lane per weight row) in per-thread scratch and multiplied with every
// x row by vpdpbusd. Meant for m >= kVnniGemmMinRows; every block format. Same
// integer sums as the GEMV on the same x codes; only the order of the f32 sums differs.
// Call only when GetCpuFeatures() has avx512f and avx512_vnni.
void GemmBlockAvx512Vnni(const MatmulProblem& p, bool threaded = true);

// The AVX2 GEMM for block formats (gemm_block_avx2.cc), for CPUs without AVX-512: x
// quantized as for the AVX2 GEMV (the same codes and scales), then 8 weight rows at a time
// transposed into 4-byte groups (one 32-bit lane per weight row) in per-thread scratch and
// multiplied with every x row by vpmaddubsw, added in int16 as far as stays exact, then
// vpmaddwd. Meant for m >= Avx2GemmMinRows; every block format. Same integer
// sums as the AVX2 GEMV on the same x codes; only the f32 arithmetic differs.
// Call only when GetCpuFeatures().avx2.
void GemmBlockAvx2(const MatmulProblem& p, bool threaded = true);

// The whole GEMV on one ISA: x prepared once (per-thread scratch), then the output rows
// split over the OpenMP team as the other GEMVs split them (`threaded`).
void GemvBlock(const MatmulProblem& p, BlockGemvIsa isa, bool threaded = true);

// Large m for block formats and f16: chunks of weight rows (8 MiB of converted values)
// dequantized (parallel over rows unless already in a parallel region), each multiplied
// by oneDNN: block formats in bf16 with x rounded to bf16 where `bf16_gemm`, else (and
// for f16) in f32. Same contract as MatmulOneDnn.
bool MatmulBlockOneDnn(const MatmulProblem& p, bool bf16_gemm);

// Rows [first, first + count) of a block-format or f16 view as f32 / bf16: out
// [count, w.cols], the values of block_quant.h's DequantizeToF32 / DequantizeToBf16 (AVX-512
// where the CPU has it; f32 on AVX2 where it has only that). Threads over rows unless
// already in a parallel region.
void DequantizeRowsToF32(const WeightView& w, int64_t first, int64_t count, float* out);
void DequantizeRowsToBf16(const WeightView& w, int64_t first, int64_t count, bf16* out);
// One row of n values (whole blocks) on AVX-512 (gemv_block_avx512.cc): the same values bit
// for bit; bf16 by vcvtneps2bf16 where `has_bf16` (AVX512_BF16); Q5_0 / Q5_1 by the portable
// loops. Call only when GetCpuFeatures().avx512f.
void DequantizeRowAvx512(DType dtype, const void* row, int64_t n, float* out);
void DequantizeRowAvx512(DType dtype, const void* row, int64_t n, bf16* out, bool has_bf16);
// The same f32 values on AVX2 (gemv_block_avx2.cc), for CPUs without AVX-512. Call only
// when GetCpuFeatures().avx2.
void DequantizeRowAvx2(DType dtype, const void* row, int64_t n, float* out);

// The portable f16 GEMV (each weight row converted once, dotted with every x row).
void MatmulF16Portable(const MatmulProblem& p, bool threaded);

}  // namespace latte::matmul_internal
