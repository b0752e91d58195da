// The matmul paths behind Matmul()'s run-time dispatch, exposed so tests and the
// benchmark can force each one. Not part of the kernel API: callers use matmul.h.
//
// Every entry point computes y: [m, w.rows] (row stride ldy) = x: [m, w.cols]
// (row stride ldx) · wᵀ, with f32 accumulation, for w.dtype kF32 or kBF16 (and
// kF8E4M3 where a comment says so).
#pragma once

#include <cstdint>

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
// block first. See GemmMinRows.
inline constexpr int64_t kBf16DotMaxRows = 16;

// The first m that goes to oneDNN for this dtype on a CPU with (or without) AVX512_BF16.
inline constexpr int64_t GemmMinRows(DType dtype, bool avx512_bf16) {
  return dtype == DType::kBF16 && avx512_bf16 ? kBf16DotMaxRows + 1 : kGemmMinRows;
}

// Plain C++ for any m and every dtype including fp8 (GCC vectorises it at the
// x86-64 baseline). `threaded`: spread output rows over the OpenMP team; false when
// the caller already runs one problem per thread (MatmulBatched).
void MatmulPortable(const MatmulProblem& p, bool threaded = true);

// AVX-512 GEMV, any m (meant for m < kGemmMinRows). Streams each weight row once
// for all m rows of x; x stays f32 (bf16 weights are widened in registers).
// Call only when GetCpuFeatures().avx512f.
void GemvAvx512(const MatmulProblem& p, bool threaded = true);

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

// The loops behind DequantizeFp8ToBf16 (matmul.h), exposed for tests: the portable
// one (matmul_fp8.cc) and the AVX-512 one (gemv_fp8_avx512.cc; vcvtneps2bf16 when
// `has_bf16`; call only when GetCpuFeatures().avx512f). Same contract.
void DequantizeFp8ToBf16Portable(const WeightView& w, int64_t first, int64_t count, bf16* out);
void DequantizeFp8ToBf16Avx512(const WeightView& w, int64_t first, int64_t count, bf16* out, bool has_bf16);

// Large-m product with an fp8 weight (matmul_fp8.cc): x is rounded to bf16 once,
// then a bounded chunk of weight rows at a time (8 MiB of bf16, matmul_fp8.cc) is
// dequantized into per-thread scratch and multiplied by oneDNN's bf16 GEMM, so a
// 129280 x 7168 matrix is never dequantized whole. Same contract as MatmulOneDnn.
bool MatmulFp8OneDnn(const MatmulProblem& p);

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

}  // namespace latte::matmul_internal
