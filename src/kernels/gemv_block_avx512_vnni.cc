// AVX512_VNNI integer GEMV for GGUF block formats: gemv_block_avx512_inl.h's kernels with
// vpdpbusd (64 u8 x s8 products summed in fours into int32, one instruction).
//
// Compiled with -mavx512f/bw/dq/vl/bf16 (see CMakeLists.txt) and, for the kernels below
// the includes, AVX512_VNNI (a target pragma: the dispatcher calls them only where cpuid
// reports it, GetCpuFeatures().avx512_vnni). clang (the fuzz build) spells the region its
// own way.
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
#pragma clang attribute push(__attribute__((target("avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512vnni")
#endif

#include "kernels/gemv_block_avx512_inl.h"

namespace latte::matmul_internal {

void GemvBlockRowsAvx512Vnni(const PreparedX& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  BlockRows</*kVnni=*/true>(x, w, n0, n1, y, ldy);
}

}  // namespace latte::matmul_internal

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
