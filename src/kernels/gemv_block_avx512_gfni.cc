// The AVX512_VNNI integer GEMV for Q5_K, Q6_K and Q3_K on CPUs that also have GFNI (Ice
// Lake, Zen 4 and later): gemv_block_avx512_inl.h's kernels with each qh (Q3_K: hmask) bit
// (pair) moved onto its code's bit 4 (and 5; Q3_K: 2) by one vgf2p8affineqb, where the VNNI
// build rotates and masks (HighBits). The same codes, so the same sums in the same order:
// bit for bit the VNNI build's results. Other formats have no such bits and run the VNNI
// build.
//
// Compiled with -mavx512f/bw/dq/vl/bf16 (see CMakeLists.txt) and, for the kernels below
// the includes, AVX512_VNNI and GFNI (a target pragma: matmul_block.cc's dispatch picks
// this only where cpuid reports both, GetCpuFeatures()). clang (the fuzz build) spells
// the region its own way.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/block_quant.h"
#include "kernels/matmul_internal.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512vnni,gfni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512vnni,gfni")
#endif

#include "kernels/gemv_block_avx512_inl.h"

namespace latte::matmul_internal {

void GemvBlockRowsAvx512VnniGfni(const PreparedX& x, const WeightView& w, int64_t n0, int64_t n1, float* y,
                                 int64_t ldy) {
  switch (w.dtype) {
    case DType::kQ5_K: FormatRows<FormatK4K5<true, /*kGfni=*/true>, true>(x, w, n0, n1, y, ldy); break;
    case DType::kQ6_K: FormatRows<FormatQ6_K</*kGfni=*/true>, true>(x, w, n0, n1, y, ldy); break;
    case DType::kQ3_K: FormatRows<FormatK16</*kQ2=*/false, /*kGfni=*/true>, true>(x, w, n0, n1, y, ldy); break;
    default: GemvBlockRowsAvx512Vnni(x, w, n0, n1, y, ldy); break;
  }
}

}  // namespace latte::matmul_internal

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
