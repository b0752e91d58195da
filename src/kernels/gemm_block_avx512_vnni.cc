// AVX512_VNNI integer GEMM for GGUF block formats (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q5_0,
// Q5_1, Q3_K, Q2_K, IQ4_NL, IQ4_XS): the products of a prefill or of a batched step with kVnniGemmMinRows x rows
// or more.
//
// The GEMV (gemv_block_avx512_inl.h) keeps each weight row's codes along a register, so
// every 64 products of an (x row, weight row) pair cost a vpdpbusd and then three more
// instructions to scale the 16 lane sums (convert, scale product, FMA): the scales change
// every 32 values. Here a panel of 16 weight rows is first transposed into 4-byte groups,
// one lane per weight row (as a GEMM packs its B operand; llama.cpp-derived engines
// repack whole files at load into such "row-interleaved" layouts, this repacks 16 rows at
// a time into per-thread scratch and keeps the file as stored):
//   codes:  [slot][c < 8] one register = codes 4c .. 4c + 3 of the slot's 32 values, for
//           each of the 16 rows (lane r = row r)
//   scales: [slot · subs + h][16 rows] f32, the weight scale of sub-block h (Q6_K and Q3_K
//           have two 16-value sub-blocks per 32-value slot, the others one)
//   mins:   [slot][16 rows] f32, Q4_K / Q5_K's -dmin·m ([slot · 2 + h][16 rows]: Q2_K's
//           per 16 values)
// so one x row's 32 codes, broadcast four bytes at a time, meet the 16 rows in 8 vpdpbusd
// whose lanes are already the 16 outputs: 512 products for 8 vpdpbusd and 3-4
// instructions of scaling, and no horizontal sums (y's 16 values are one store).
//
// x is quantized exactly as for the GEMV (PrepareX's AVX-512 layout: int8 codes per 32
// values with dx = amax / 127, Q4_K / Q5_K's slots in the GEMV's step order, which the
// panels follow), so the integer sums are the GEMV's and only the order of the f32 sums
// differs. Per (x row, slot) the kernel adds
//   f32(sum over the slot's code products + corr) · (weight scale · dx)  [+ min · msum]
// where corr = -zero point · the sum of the x codes (Q8_0's and the IQ4 levels' +128, Q4_0's 8, Q5_0's 16,
// Q6_K's 32, Q3_K's 4), min = Q4_K / Q5_K's -dmin·m or Q5_1's m, and msum = dx · the sum
// of the codes (Q2_K: both per 16 values).
//
// Compiled with -mavx512f/bw/dq/vl/bf16 (see CMakeLists.txt) and AVX512_VNNI for the code
// below the includes (a target pragma; the dispatcher calls it only where cpuid reports
// VNNI).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "base/aligned_buffer.h"
#include "base/check.h"
#include "base/parallel.h"
#include "base/scratch.h"
#include "kernels/block_quant.h"
#include "kernels/matmul_internal.h"
#include "kernels/row_prefetch_inl.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512vnni")
#endif

#include "kernels/gemm_block_x_inl.h"
#include "kernels/gemv_block_avx512_inl.h"

namespace latte::matmul_internal {
namespace {

// Weight rows per panel (one per f32 lane), x rows per tile.
constexpr int kPanelRows = 16;
constexpr int kGemmTileM = 6;

// Two sub-blocks per 32-value slot: the 16-value scales of Q6_K and Q3_K (gemv_block_avx512_inl.h).
template <class F> constexpr bool kTwoSubBlocks = kSixteenValueScales<F>;

// Step S's two 32-value blocks' mins (f32 lanes of Unit::sm): for Q4_K / Q5_K -dmin·m of
// blocks a = 4·(S / 2) + S % 2 and a + 2, in lanes 8 + a and 10 + a; for Q5_1 lanes 8, 9.
template <class F, int S> void StepMins(const float* sm, float* out) {
  if constexpr (std::is_same_v<F, FormatQ5<true>>) {
    out[0] = sm[8];
    out[1] = sm[9];
  } else {
    constexpr int a = 4 * (S / 2) + S % 2;
    out[0] = sm[8 + a];
    out[1] = sm[8 + a + 2];
  }
}

// x in tiles of kGemmTileM rows, slot by slot (gemm_block_x_inl.h).
using GemmX = GemmXTiles<kGemmTileM>;

// Dwords: out[j] lane r = in[r] lane j (16 x 16).
inline void Transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // s[q][e]: 128-bit lane L holds dword 4L + e of rows 4q .. 4q + 3.
  __m512i s[4][4];
  for (int q = 0; q < 4; ++q) {
    s[q][0] = _mm512_unpacklo_epi64(t[4 * q], t[4 * q + 2]);
    s[q][1] = _mm512_unpackhi_epi64(t[4 * q], t[4 * q + 2]);
    s[q][2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    s[q][3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
  // out[4L + e] 128-bit lane q = s[q][e] lane L: a 4 x 4 transpose of 128-bit lanes.
  for (int e = 0; e < 4; ++e) {
    const __m512i a = _mm512_shuffle_i32x4(s[0][e], s[1][e], 0x44);
    const __m512i b = _mm512_shuffle_i32x4(s[0][e], s[1][e], 0xEE);
    const __m512i c = _mm512_shuffle_i32x4(s[2][e], s[3][e], 0x44);
    const __m512i d = _mm512_shuffle_i32x4(s[2][e], s[3][e], 0xEE);
    r[e] = _mm512_shuffle_i32x4(a, c, 0x88);
    r[4 + e] = _mm512_shuffle_i32x4(a, c, 0xDD);
    r[8 + e] = _mm512_shuffle_i32x4(b, d, 0x88);
    r[12 + e] = _mm512_shuffle_i32x4(b, d, 0xDD);
  }
}

// One panel's packed weights (see the top): codes [slots · 8][64 bytes], scales
// [slots · subs][16], mins [slots][16].
struct Panel {
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  float* mins = nullptr;
};

// Packs weight rows [n0, n0 + 16) (rows at or past n1 as zeros) of w into `panel`.
template <class F> void PackPanel(const WeightView& w, int64_t n0, int64_t n1, int64_t slots, const Panel& panel) {
  constexpr int kSubs = kTwoSubBlocks<F> ? 2 : 1;
  const size_t row_bytes = DTypeRowBytes(w.dtype, w.ld);
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  const int64_t steps = slots / 2;
  const int64_t units = (steps + F::kSteps - 1) / F::kSteps;
  const bool half_last = w.cols % F::kUnitValues != 0;  // Q8_0 / Q4_0: an odd number of blocks
  alignas(64) uint8_t codes[F::kSteps][kPanelRows][64];
  alignas(64) float lanes[16];  // Unit::sm, for the mins
  for (int64_t u = 0; u < units; ++u) {
    const bool half = half_last && u == units - 1;
    for (int r = 0; r < kPanelRows; ++r) {
      const int64_t n = n0 + r;
      if (n >= n1) {
        for (int S = 0; S < F::kSteps; ++S) std::memset(codes[S][r], 0, 64);
        for (int64_t t = u * F::kSteps; t < std::min(steps, (u + 1) * F::kSteps); ++t) {
          for (int h = 0; h < 2 * kSubs; ++h) panel.scales[(2 * t * kSubs + h) * 16 + r] = 0.0f;
          if (F::kHasMin) panel.mins[(2 * t) * 16 + r] = panel.mins[(2 * t + 1) * 16 + r] = 0.0f;
          if (kMin16<F>) {
            for (int h = 0; h < 4; ++h) panel.mins[(4 * t + h) * 16 + r] = 0.0f;
          }
        }
        continue;
      }
      const uint8_t* p = base + n * row_bytes + u * F::kUnitBytes;
      const typename F::Unit unit = half ? F::template Load<true, true>(p) : F::template Load<true, false>(p);
      ForSteps(
          [&]<int S>() {
            const int64_t t = u * F::kSteps + S;
            if (t >= steps) return;
            __m512i wv;
            __m512 ws;
            F::template Step<S>(unit, wv, ws);
            _mm512_store_si512(codes[S][r], wv);
            // Lanes 8j .. 8j + 7 (Q6_K, Q3_K: 4j .. 4j + 3) share sub-block j's scale: the
            // first lane of 128-bit lanes 0 and 2 (Q6_K, Q3_K: 0, 1, 2 and 3).
            float* scales = panel.scales + 2 * t * kSubs * 16 + r;
            scales[0] = _mm512_cvtss_f32(ws);
            if constexpr (kSubs == 2) {
              scales[16] = _mm_cvtss_f32(_mm512_extractf32x4_ps(ws, 1));
              scales[32] = _mm_cvtss_f32(_mm512_extractf32x4_ps(ws, 2));
              scales[48] = _mm_cvtss_f32(_mm512_extractf32x4_ps(ws, 3));
            } else {
              scales[16] = _mm_cvtss_f32(_mm512_extractf32x4_ps(ws, 2));
            }
            if constexpr (kMin16<F>) {  // the step's 4 sub-blocks' -dmin·m
              _mm512_store_ps(lanes, F::Mins(unit));
              for (int h = 0; h < 4; ++h) panel.mins[(4 * t + h) * 16 + r] = lanes[4 * S + h];
            }
            if constexpr (F::kHasMin) {
              _mm512_store_ps(lanes, unit.sm);
              float mins[2];
              StepMins<F, S>(lanes, mins);
              panel.mins[(2 * t) * 16 + r] = mins[0];
              panel.mins[(2 * t + 1) * 16 + r] = mins[1];
            }
          },
          std::make_integer_sequence<int, F::kSteps>{});
    }
    for (int S = 0; S < F::kSteps; ++S) {
      const int64_t t = u * F::kSteps + S;
      if (t >= steps) break;
      __m512i v[16];
      for (int r = 0; r < kPanelRows; ++r) v[r] = _mm512_load_si512(codes[S][r]);
      Transpose16x16(v);
      for (int j = 0; j < 16; ++j) _mm512_store_si512(panel.codes + (16 * t + j) * 64, v[j]);
    }
  }
}

// y[row][0 .. valid) = x row · the panel's rows for the first M rows of the tile (the
// last tile: only its real rows, M = m % kGemmTileM; the layout keeps kGemmTileM).
template <class F, int M> void PanelTile(const GemmX& x, int64_t tile, const Panel& panel, float* y, int64_t ldy,
                                         __mmask16 valid, RowPrefetch& ahead) {
  constexpr int kSubs = kTwoSubBlocks<F> ? 2 : 1;
  __m512 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
  const __m512i* codes = reinterpret_cast<const __m512i*>(panel.codes);
  const std::byte* slot = x.Slot(tile, 0);
  for (int64_t s = 0; s < x.slots; ++s, slot += x.slot_bytes) {
    ahead.Next();
    const int32_t* q = reinterpret_cast<const int32_t*>(slot);  // [M][8] groups of 4 codes
    const int32_t* corr = GemmX::Corr(slot);
    const float* dx = GemmX::Dx(slot, kSubs);
    const float* msum = GemmX::Msum(slot, kSubs);
    __m512i w[8];
    for (int c = 0; c < 8; ++c) w[c] = _mm512_load_si512(codes + 8 * s + c);
    if constexpr (kSubs == 2) {
      const __m512 s0 = _mm512_load_ps(panel.scales + (2 * s) * 16);
      const __m512 s1 = _mm512_load_ps(panel.scales + (2 * s + 1) * 16);
      for (int i = 0; i < M; ++i) {
        __m512i a = _mm512_set1_epi32(corr[2 * i]);
        __m512i b = _mm512_set1_epi32(corr[2 * i + 1]);
        for (int c = 0; c < 4; ++c) {
          a = _mm512_dpbusd_epi32(a, w[c], _mm512_set1_epi32(q[8 * i + c]));
          b = _mm512_dpbusd_epi32(b, w[4 + c], _mm512_set1_epi32(q[8 * i + 4 + c]));
        }
        const __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(b), s1, _mm512_mul_ps(_mm512_cvtepi32_ps(a), s0));
        acc[i] = _mm512_fmadd_ps(t, _mm512_set1_ps(dx[i]), acc[i]);
        if constexpr (kMin16<F>) {  // Q2_K: -dmin·m per 16 values · dx · their code sum
          acc[i] = _mm512_fmadd_ps(_mm512_load_ps(panel.mins + (2 * s) * 16), _mm512_set1_ps(msum[2 * i]), acc[i]);
          acc[i] =
              _mm512_fmadd_ps(_mm512_load_ps(panel.mins + (2 * s + 1) * 16), _mm512_set1_ps(msum[2 * i + 1]), acc[i]);
        }
      }
    } else {
      const __m512 sc = _mm512_load_ps(panel.scales + s * 16);
      const __m512 mn = F::kHasMin ? _mm512_load_ps(panel.mins + s * 16) : _mm512_setzero_ps();
      for (int i = 0; i < M; ++i) {
        // Two chains of four, so the dot products' latency overlaps.
        __m512i a = _mm512_set1_epi32(corr[i]);
        __m512i b = _mm512_setzero_si512();
        for (int c = 0; c < 4; ++c) {
          a = _mm512_dpbusd_epi32(a, w[c], _mm512_set1_epi32(q[8 * i + c]));
          b = _mm512_dpbusd_epi32(b, w[4 + c], _mm512_set1_epi32(q[8 * i + 4 + c]));
        }
        const __m512 sum = _mm512_cvtepi32_ps(_mm512_add_epi32(a, b));
        acc[i] = _mm512_fmadd_ps(sum, _mm512_mul_ps(sc, _mm512_set1_ps(dx[i])), acc[i]);
        if constexpr (F::kHasMin) acc[i] = _mm512_fmadd_ps(mn, _mm512_set1_ps(msum[i]), acc[i]);
      }
    }
  }
  for (int i = 0; i < M; ++i) _mm512_mask_storeu_ps(y + (tile * kGemmTileM + i) * ldy, valid, acc[i]);
}

// The tile's real rows against the panel.
template <class F> void PanelTileRows(const GemmX& x, int64_t tile, const Panel& panel, float* y, int64_t ldy,
                                      __mmask16 valid, RowPrefetch& ahead) {
  switch (std::min<int64_t>(kGemmTileM, x.m - tile * kGemmTileM)) {
    case 1: PanelTile<F, 1>(x, tile, panel, y, ldy, valid, ahead); break;
    case 2: PanelTile<F, 2>(x, tile, panel, y, ldy, valid, ahead); break;
    case 3: PanelTile<F, 3>(x, tile, panel, y, ldy, valid, ahead); break;
    case 4: PanelTile<F, 4>(x, tile, panel, y, ldy, valid, ahead); break;
    case 5: PanelTile<F, 5>(x, tile, panel, y, ldy, valid, ahead); break;
    default: PanelTile<F, kGemmTileM>(x, tile, panel, y, ldy, valid, ahead); break;
  }
}

// Output rows [n0, n1) (n0 a multiple of 16): kGroupPanels panels packed at a time, then
// every x tile against each of them (a tile's codes stay in L1 across the group; the
// group's packed weights, ~150 KiB at 2048 columns, in L2).
constexpr int kGroupPanels = 4;

template <class F> void GemmRows(const GemmX& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  constexpr int kSubs = kTwoSubBlocks<F> ? 2 : 1;
  thread_local AlignedBuffer storage;  // grown once per thread
  const size_t code_bytes = static_cast<size_t>(x.slots) * 8 * 64;
  const size_t scale_bytes = static_cast<size_t>(x.slots) * kSubs * 16 * sizeof(float);
  const size_t min_bytes = F::kHasMin || kMin16<F> ? static_cast<size_t>(x.slots) * kSubs * 16 * sizeof(float) : 0;
  const size_t panel_bytes = code_bytes + scale_bytes + min_bytes;
  uint8_t* packed = GrowAligned<uint8_t>(storage, kGroupPanels * panel_bytes);
  Panel panels[kGroupPanels];
  for (int g = 0; g < kGroupPanels; ++g) {
    panels[g].codes = packed + g * panel_bytes;
    panels[g].scales = reinterpret_cast<float*>(panels[g].codes + code_bytes);
    panels[g].mins = reinterpret_cast<float*>(panels[g].codes + code_bytes + scale_bytes);
  }
  const size_t row_bytes = DTypeRowBytes(w.dtype, w.ld);
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  for (int64_t n = n0; n < n1; n += kGroupPanels * kPanelRows) {
    const int count = static_cast<int>(std::min<int64_t>(kGroupPanels, (n1 - n + kPanelRows - 1) / kPanelRows));
    for (int g = 0; g < count; ++g) PackPanel<F>(w, n + g * kPanelRows, n1, x.slots, panels[g]);
    // The next group's rows (contiguous) are requested into L2 during this group's
    // arithmetic, so that reading them from memory does not stall the next packing.
    const int64_t next = std::min(n1, n + kGroupPanels * kPanelRows);
    const int64_t next_rows = std::min<int64_t>(n1 - next, kGroupPanels * kPanelRows);
    const int64_t stride = static_cast<int64_t>(row_bytes);
    RowPrefetch ahead(base + next * row_bytes, stride, next_rows, stride, x.tiles * count * x.slots);
    for (int64_t t = 0; t < x.tiles; ++t) {
      for (int g = 0; g < count; ++g) {
        const int64_t first = n + g * kPanelRows;
        const int valid = static_cast<int>(std::min<int64_t>(kPanelRows, n1 - first));
        PanelTileRows<F>(x, t, panels[g], y + first, ldy, static_cast<__mmask16>((1u << valid) - 1), ahead);
      }
    }
  }
}

void GemmRowsFor(const GemmX& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (w.dtype) {
    case DType::kQ8_0: GemmRows<FormatQ8_0>(x, w, n0, n1, y, ldy); break;
    case DType::kQ4_0: GemmRows<FormatQ4_0>(x, w, n0, n1, y, ldy); break;
    case DType::kQ4_K: GemmRows<FormatK4K5<false>>(x, w, n0, n1, y, ldy); break;
    case DType::kQ5_K: GemmRows<FormatK4K5<true>>(x, w, n0, n1, y, ldy); break;
    case DType::kQ6_K: GemmRows<FormatQ6_K<>>(x, w, n0, n1, y, ldy); break;
    case DType::kQ3_K: GemmRows<FormatK16</*kQ2=*/false>>(x, w, n0, n1, y, ldy); break;
    case DType::kQ2_K: GemmRows<FormatK16</*kQ2=*/true>>(x, w, n0, n1, y, ldy); break;
    case DType::kQ5_0: GemmRows<FormatQ5<false>>(x, w, n0, n1, y, ldy); break;
    case DType::kQ5_1: GemmRows<FormatQ5<true>>(x, w, n0, n1, y, ldy); break;
    case DType::kIQ4_NL: GemmRows<FormatIQ4_NL>(x, w, n0, n1, y, ldy); break;
    case DType::kIQ4_XS: GemmRows<FormatIQ4_XS>(x, w, n0, n1, y, ldy); break;
    default: break;
  }
}

}  // namespace

void GemmBlockAvx512Vnni(const MatmulProblem& p, bool threaded) {
  const WeightView& w = p.w;
  if (p.m <= 0 || w.rows <= 0) return;
  LATTE_DCHECK(HasBlockGemm(w.dtype), "GemmBlockAvx512Vnni: ", DTypeName(w.dtype));
  // x in the AVX-512 layout, whose rows are padded to 64 values; the panels' codes carry
  // the VNNI GEMV's zero points (FormatX::Load<true, ...>: Q8_0's sign bit flipped, Q4_0's
  // 8, Q5_0's 16, Q6_K's 32).
  RunBlockGemm<kGemmTileM>(p, threaded, BlockGemvIsa::kAvx512, 64 * ((w.cols + 63) / 64),
                           BlockZeroPoint(BlockGemvIsa::kAvx512Vnni, w.dtype), kPanelRows,
                           [&](const GemmX& g, int64_t n0, int64_t n1) { GemmRowsFor(g, w, n0, n1, p.y, p.ldy); });
}

}  // namespace latte::matmul_internal

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
