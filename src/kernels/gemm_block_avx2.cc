// AVX2 integer GEMM for GGUF block formats (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q5_0, Q5_1, Q3_K,
// Q2_K, IQ4_NL, IQ4_XS) on
// CPUs without AVX-512: the products of a prefill or of a batched step with
// Avx2GemmMinRows x rows or more. The scheme of gemm_block_avx512_vnni.cc on 256-bit
// registers, with vpmaddubsw + vpmaddwd in place of vpdpbusd.
//
// The GEMV (gemv_block_avx2.cc) keeps each weight row's codes along a register, so every
// 32 products of an (x row, weight row) pair cost vpmaddubsw, the bias add, vpmaddwd,
// a conversion and an FMA, and the 8 lane sums are added at the end. Here a panel of 8
// weight rows is first transposed into 4-byte groups, one 32-bit lane per weight row, in
// per-thread scratch (the file stays as stored):
//   codes:  [slot][c < 8] one register = codes 4c .. 4c + 3 of the slot's 32 values, for
//           each of the 8 rows (lane r = row r); unsigned, except Q8_0's and IQ4_NL /
//           IQ4_XS's levels: their 8 registers of |w| and then their 8 of signed codes
//   scales: [slot · subs + h][8 rows] f32, the weight scale of sub-block h (Q6_K, Q3_K and
//           Q2_K have two 16-value sub-blocks per 32-value slot, the others one; K formats: d · sc)
//   mins:   [slot][8 rows] f32, Q4_K / Q5_K's -dmin·m, Q5_1's m ([slot · 2 + h][8 rows]:
//           Q2_K's per 16 values)
// so one x row's 32 codes, broadcast four bytes at a time, meet the 8 rows in 8 vpmaddubsw
// whose lanes are already the 8 outputs. vpmaddubsw's int16 pair sums saturate, so each
// format adds as many of them in int16 as stay exact before one vpmaddwd (by ones) widens
// them: a pair is at most 2 · kMaxCode · 127, and kGroup of them fit in 32767 (Q4_0 / Q4_K:
// 8 registers per vpmaddwd, Q5_*: 4, Q6_K: 2, Q8_0 and the IQ4 levels: 1; Q3_K / Q2_K: a
// 16-value sub-block's 4). Q8_0 multiplies |w| by x with w's
// sign (vpsignb), as the GEMV does: its codes + 128 would make pairs of 2 · 255 · 127.
// Per slot a tile of 4 x rows (Q4_0 / Q4_K: 3, against two panels: kPairedPanels) then
// spends, for each x row, 8 vpmaddubsw, the int16 adds, 1-8 vpmaddwd and 3-4 f32
// instructions on 256 products (the GEMV: ~40).
//
// x is quantized exactly as for the AVX2 GEMV (PrepareX for BlockGemvIsa::kAvx2: int8 codes
// per 32 values with dx = amax / 127, Q4_K / Q5_K's slots in the GEMV's order, which the
// panels follow), so the integer sums are the GEMV's and a row's result does not depend on
// which of the two ran beyond the f32 arithmetic. Per (x row, slot) the kernel adds
//   f32(sum over the slot's code products + corr) · (weight scale · dx)  [+ min · msum]
// where corr = -zero point · the sum of the sub-block's x codes (Q4_0's 8, Q5_0's 16,
// Q6_K's 32), taken off in int32 (it does not fit the int16 pairs), and msum = dx · the sum
// of the slot's x codes.
//
// Compiled with -mavx2 -mfma -mf16c -mbmi2 (CMakeLists.txt); reached only through the
// dispatch after GetCpuFeatures().avx2.
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
#include "kernels/avx2_inl.h"
#include "kernels/block_quant.h"
#include "kernels/gemm_block_x_inl.h"
#include "kernels/gemv_block_avx2_inl.h"
#include "kernels/matmul_internal.h"
#include "kernels/row_prefetch_inl.h"

namespace latte::matmul_internal {
namespace {

// Weight rows per panel (one per 32-bit lane), x rows per tile: the tile's 4 accumulators,
// a slot's 8 weight registers and the temporaries fill the 16 registers.
constexpr int kPanelRows = 8;
constexpr int kGemmTileM = 4;

// Q4_0 and Q4_K (8 vpmaddubsw summed in int16 per vpmaddwd) take two panels at a time, 16
// weight rows, against tiles of 3 x rows (PanelPairTile): each broadcast of x's codes then
// feeds two vpmaddubsw and each slot's dx and msum serve 16 rows, where the one-panel tile
// spends a broadcast per vpmaddubsw. On Zen 2, whose vpmaddubsw and vpmaddwd share one
// pipe and which ran the one-panel tile at ~2.2 vector instructions a cycle, a stand-alone
// copy of both loops measured 65 (8 rows x 4) against 76 (16 x 4) and 80 GMAC/s (16 x 3).
constexpr int kPairTileM = 3;

// 32-byte code registers per slot of a panel: 8 (codes 4c .. 4c + 3 of the 8 rows), or for
// Q8_0 16: the 8 of |w|, then the 8 of w (DotQ8Rows).
template <class F> constexpr int kCodeRegs = F::kSignedCodes ? 16 : 8;

// vpmaddubsw results added in int16 before vpmaddwd widens them: the most (a power of two,
// dividing 4) whose sum stays within int16 with pairs of at most 2 · kMaxCode · 127.
template <class F> constexpr int Group() {
  int g = 8;
  while (g > 1 && g * 2 * F::kMaxCode * 127 > 32767) g /= 2;
  return g;
}
static_assert(Group<FormatQ4_0>() == 8 && Group<FormatQ5<false>>() == 4 && Group<FormatQ6_K>() == 2 &&
              Group<FormatQ8_0>() == 1);

template <class F> constexpr bool kPairedPanels = !F::kSignedCodes && !kTwoSubBlocks<F> && Group<F>() == 8;
static_assert(kPairedPanels<FormatQ4_0> && kPairedPanels<FormatK4K5<false>> && !kPairedPanels<FormatK4K5<true>>);

// x in tiles of kGemmTileM rows (kPairTileM for the paired panels), slot by slot
// (gemm_block_x_inl.h).
template <class F> constexpr int kTileM = kPairedPanels<F> ? kPairTileM : kGemmTileM;
template <class F> using GemmX = GemmXTiles<kTileM<F>>;

// Dwords: out[j] lane r = in[r] lane j (8 x 8).
inline void Transpose8x8(__m256i r[8]) {
  __m256i t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // s[4q + e]: 128-bit lane L holds dword 4L + e of rows 4q .. 4q + 3.
  __m256i s[8];
  for (int q = 0; q < 2; ++q) {
    s[4 * q] = _mm256_unpacklo_epi64(t[4 * q], t[4 * q + 2]);
    s[4 * q + 1] = _mm256_unpackhi_epi64(t[4 * q], t[4 * q + 2]);
    s[4 * q + 2] = _mm256_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    s[4 * q + 3] = _mm256_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
  for (int e = 0; e < 4; ++e) {
    r[e] = _mm256_permute2x128_si256(s[e], s[4 + e], 0x20);
    r[4 + e] = _mm256_permute2x128_si256(s[e], s[4 + e], 0x31);
  }
}

// One panel's packed weights (see the top): codes [slots · kCodeRegs][32 bytes], scales
// [slots · subs][8], mins [slots][8].
struct Panel {
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  float* mins = nullptr;
};

// The first `valid` (1 .. kPanelRows) lanes of v to y.
inline void StoreRow(float* y, __m256 v, int valid) {
  if (valid == kPanelRows) {
    _mm256_storeu_ps(y, v);
  } else {
    _mm256_maskstore_ps(y, TailMask8(valid), v);
  }
}

// Slot H of one weight row's unit: its 32 codes into `codes`, its sub-block scales into
// scales[0] (and scales[8]: the second 16 values' of Q6_K, Q3_K, Q2_K), its min into *min
// (formats with one; Q2_K's two, per 16 values, into min[0] and min[8]).
template <class F, int H> void UnpackSlot(const typename F::Unit& unit, uint8_t* codes, float* scales, float* min) {
  __m256i wv;
  typename F::Scale ws;
  F::template Slot<H>(unit, wv, ws);
  _mm256_store_si256(reinterpret_cast<__m256i*>(codes), wv);
  if constexpr (kTwoSubBlocks<F>) {  // integer scales as int16, one per 16 values
    const float d = _mm256_cvtss_f32(unit.d);
    scales[0] = d * static_cast<float>(static_cast<int16_t>(_mm256_extract_epi16(ws, 0)));
    scales[8] = d * static_cast<float>(static_cast<int16_t>(_mm256_extract_epi16(ws, 8)));
    if constexpr (kMin16<F>) {  // -dmin·m of sub-blocks 2H, 2H + 1
      alignas(32) float mn[8];
      _mm256_store_ps(mn, unit.mn[H / 4]);
      min[0] = mn[2 * H % 8];
      min[8] = mn[2 * H % 8 + 1];
    }
  } else if constexpr (F::kIntScale) {  // Q4_K / Q5_K / IQ4_XS: d · sc; Q4_K / Q5_K's min -dmin·m
    scales[0] = _mm256_cvtss_f32(unit.d) * static_cast<float>(static_cast<int16_t>(_mm256_extract_epi16(ws, 0)));
    if constexpr (F::kHasMin) {
      alignas(32) float mn[8];
      _mm256_store_ps(mn, unit.mn);
      *min = mn[F::SubBlock(H)];
    }
  } else {
    scales[0] = _mm256_cvtss_f32(ws);
    if constexpr (F::kBlockMin) *min = _mm256_cvtss_f32(unit.mn);
  }
}

// Packs weight rows [n0, n0 + 8) (rows at or past n1 as zeros) of w into `panel`.
template <class F> void PackPanel(const WeightView& w, int64_t n0, int64_t n1, const Panel& panel) {
  constexpr int kSubs = kTwoSubBlocks<F> ? 2 : 1;
  constexpr bool kMins = F::kHasMin || F::kBlockMin || kMin16<F>;
  constexpr int kMinsPerSlot = kMin16<F> ? 2 : 1;
  const size_t row_bytes = DTypeRowBytes(w.dtype, w.ld);
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  const int64_t units = w.cols / F::kUnitValues;
  alignas(32) uint8_t codes[F::kSlots][kPanelRows][32];
  for (int64_t u = 0; u < units; ++u) {
    float* scales = panel.scales + u * F::kSlots * kSubs * kPanelRows;     // [kSlots · kSubs][8]
    float* mins = panel.mins + u * F::kSlots * kMinsPerSlot * kPanelRows;  // [kSlots · kMinsPerSlot][8]
    for (int r = 0; r < kPanelRows; ++r) {
      if (n0 + r >= n1) {
        for (int H = 0; H < F::kSlots; ++H) {
          std::memset(codes[H][r], 0, 32);
          for (int h = 0; h < kSubs; ++h) scales[(H * kSubs + h) * kPanelRows + r] = 0.0f;
          if constexpr (kMins) {
            for (int h = 0; h < kMinsPerSlot; ++h) mins[(H * kMinsPerSlot + h) * kPanelRows + r] = 0.0f;
          }
        }
        continue;
      }
      const typename F::Unit unit = F::Load(base + (n0 + r) * row_bytes + u * F::kUnitBytes);
      ForSlots(
          [&]<int H>() {
            UnpackSlot<F, H>(unit, codes[H][r], scales + H * kSubs * kPanelRows + r,
                             kMins ? mins + H * kMinsPerSlot * kPanelRows + r : nullptr);
          },
          std::make_integer_sequence<int, F::kSlots>{});
    }
    for (int H = 0; H < F::kSlots; ++H) {
      __m256i v[kPanelRows];
      for (int r = 0; r < kPanelRows; ++r) v[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes[H][r]));
      Transpose8x8(v);
      __m256i* out = reinterpret_cast<__m256i*>(panel.codes) + (u * F::kSlots + H) * kCodeRegs<F>;
      for (int c = 0; c < 8; ++c) {
        if constexpr (F::kSignedCodes) {
          _mm256_store_si256(out + c, _mm256_abs_epi8(v[c]));
          _mm256_store_si256(out + 8 + c, v[c]);
        } else {
          _mm256_store_si256(out + c, v[c]);
        }
      }
    }
  }
}

// The start of a sub-block's int32 sums: its corr where the format has a zero point.
template <class F> inline __m256i Start(int32_t corr) {
  return F::kBias ? _mm256_set1_epi32(corr) : _mm256_setzero_si256();
}

// PanelTile's sums start at the bits of 1.5 · 2^23 (kSumBias) on top: while |sum| < 2^22 the
// lanes then hold the f32 bits of 1.5 · 2^23 + sum, and one f32 subtraction gives the sum
// as a float, exactly as vcvtdq2ps does. On Zen 2 the subtraction (an FP add pipe) in place of
// the conversion ran the Q8_0 GEMM ~3% faster (Q6_K, Q5_0 ~1%); PanelPairTile, whose sums
// start at zero, lost 3% with it, so it keeps vcvtdq2ps. A slot's sum is at most 32 products of
// kMaxCode · 127 plus the zero point's correction, far inside 2^22.
constexpr int32_t kSumBias = 0x4B400000;  // 12582912.0f
template <class F> inline __m256i BiasedStart(int32_t corr) {
  static_assert(2 * 32 * F::kMaxCode * 127 < (1 << 22));
  return _mm256_add_epi32(Start<F>(corr), _mm256_set1_epi32(kSumBias));
}

// The f32 value of a sum that started at BiasedStart.
inline __m256 BiasedSumToFloat(__m256i sum) {
  return _mm256_sub_ps(_mm256_castsi256_ps(sum), _mm256_castsi256_ps(_mm256_set1_epi32(kSumBias)));
}

// start + the int32 lane sums (lane r: weight row r) of registers [C0, C0 + N) of a slot
// against one x row's codes q (4 per int32): vpmaddubsw per register, kGroup of them added
// in int16, then vpmaddwd by ones. Unsigned codes only (Q8_0: DotQ8Rows).
template <class F, int C0, int N>
inline __m256i DotRegisters(const __m256i* w, const int32_t* q, __m256i ones, __m256i start) {
  constexpr int kGroup = Group<F>() < N ? Group<F>() : N;  // a 16-value sub-block's 4 registers at most
  __m256i total = start;
  for (int c0 = C0; c0 < C0 + N; c0 += kGroup) {
    __m256i pairs = _mm256_maddubs_epi16(w[c0], _mm256_set1_epi32(q[c0]));
    for (int c = c0 + 1; c < c0 + kGroup; ++c) {
      pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(w[c], _mm256_set1_epi32(q[c])));
    }
    total = _mm256_add_epi32(total, _mm256_madd_epi16(pairs, ones));
  }
  return total;
}

// Q8_0: the int32 lane sums of a slot (kCodeRegs: registers 0-7 |w|, 8-15 w) against each
// of the M x rows' codes (q + 8i), added to total[i]: per register and x row, vpmaddubsw of
// |w| by x with w's sign (vpsignb), then vpmaddwd by ones (two pairs would overflow int16).
// The weight register is the outer loop, kept rolled: unrolled, GCC reassociated the sums
// across registers and spilled them, and with the x rows outside it kept the weights on the
// stack. So each register is loaded once per tile and the live set (M sums, |w|, w, ones, a
// broadcast) stays within the 16 registers.
template <int M> inline void DotQ8Rows(const __m256i* codes, const int32_t* q, __m256i total[M]) {
  const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 1
  for (int c = 0; c < 8; ++c) {
    const __m256i absw = _mm256_load_si256(codes + c);
    const __m256i w = _mm256_load_si256(codes + 8 + c);
    for (int i = 0; i < M; ++i) {
      const __m256i xq = _mm256_sign_epi8(_mm256_set1_epi32(q[8 * i + c]), w);
      total[i] = _mm256_add_epi32(total[i], _mm256_madd_epi16(_mm256_maddubs_epi16(absw, xq), ones));
    }
  }
}

// acc + one slot of a row against 8 weight rows: sum (its int32 sums, exactly as f32) ·
// (their scales · dx), plus their mins · msum where the format has mins. PanelTile and
// PanelPairTile both take this step, so a row's result does not depend on which of them ran.
template <class F> inline __m256 AddSlot(__m256 acc, __m256 sum, __m256 sc, __m256 dx, __m256 mn, __m256 msum) {
  acc = _mm256_fmadd_ps(sum, _mm256_mul_ps(sc, dx), acc);
  if constexpr (F::kHasMin || F::kBlockMin) acc = _mm256_fmadd_ps(mn, msum, acc);
  return acc;
}

// y[row][0 .. valid) = x row · the panel's rows for the first M rows of the tile (the last
// tile: only its real rows, M = m % kTileM; the layout keeps kTileM).
template <class F, int M>
void PanelTile(const GemmX<F>& x, int64_t tile, const Panel& panel, float* y, int64_t ldy, int valid) {
  constexpr int kSubs = kTwoSubBlocks<F> ? 2 : 1;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i* codes = reinterpret_cast<const __m256i*>(panel.codes);
  const std::byte* slot = x.Slot(tile, 0);
  for (int64_t s = 0; s < x.slots; ++s, slot += x.slot_bytes) {
    const int32_t* q = reinterpret_cast<const int32_t*>(slot);  // [M][8] groups of 4 codes
    const int32_t* corr = GemmX<F>::Corr(slot);
    const float* dx = GemmX<F>::Dx(slot, kSubs);
    const float* msum = GemmX<F>::Msum(slot, kSubs);
    if constexpr (F::kSignedCodes) {  // Q8_0, IQ4_NL, IQ4_XS
      __m256i total[M];
      for (int i = 0; i < M; ++i) total[i] = BiasedStart<F>(0);
      DotQ8Rows<M>(codes + kCodeRegs<F> * s, q, total);
      const __m256 sc = _mm256_load_ps(panel.scales + s * kPanelRows);
      for (int i = 0; i < M; ++i) {
        acc[i] = _mm256_fmadd_ps(BiasedSumToFloat(total[i]), _mm256_mul_ps(sc, _mm256_set1_ps(dx[i])), acc[i]);
      }
      continue;
    }
    __m256i w[8];
    for (int c = 0; c < 8; ++c) w[c] = _mm256_load_si256(codes + 8 * s + c);
    if constexpr (kSubs == 2) {
      const __m256 s0 = _mm256_load_ps(panel.scales + (2 * s) * kPanelRows);
      const __m256 s1 = _mm256_load_ps(panel.scales + (2 * s + 1) * kPanelRows);
      for (int i = 0; i < M; ++i) {
        const __m256i a = DotRegisters<F, 0, 4>(w, q + 8 * i, ones, BiasedStart<F>(corr[2 * i]));
        const __m256i b = DotRegisters<F, 4, 4>(w, q + 8 * i, ones, BiasedStart<F>(corr[2 * i + 1]));
        const __m256 t = _mm256_fmadd_ps(BiasedSumToFloat(b), s1, _mm256_mul_ps(BiasedSumToFloat(a), s0));
        acc[i] = _mm256_fmadd_ps(t, _mm256_set1_ps(dx[i]), acc[i]);
        if constexpr (kMin16<F>) {  // Q2_K: -dmin·m per 16 values · dx · their code sum
          acc[i] =
              _mm256_fmadd_ps(_mm256_load_ps(panel.mins + (2 * s) * kPanelRows), _mm256_set1_ps(msum[2 * i]), acc[i]);
          acc[i] = _mm256_fmadd_ps(_mm256_load_ps(panel.mins + (2 * s + 1) * kPanelRows),
                                   _mm256_set1_ps(msum[2 * i + 1]), acc[i]);
        }
      }
    } else {
      const __m256 sc = _mm256_load_ps(panel.scales + s * kPanelRows);
      constexpr bool kMins = F::kHasMin || F::kBlockMin;
      const __m256 mn = kMins ? _mm256_load_ps(panel.mins + s * kPanelRows) : _mm256_setzero_ps();
      for (int i = 0; i < M; ++i) {
        const __m256i sum = DotRegisters<F, 0, 8>(w, q + 8 * i, ones, BiasedStart<F>(corr[i]));
        acc[i] = AddSlot<F>(acc[i], BiasedSumToFloat(sum), sc, _mm256_set1_ps(dx[i]), mn, _mm256_set1_ps(msum[i]));
      }
    }
  }
  for (int i = 0; i < M; ++i) {
    StoreRow(y + (tile * kTileM<F> + i) * ldy, acc[i], valid);
  }
}

// The tile's real rows against the panel.
template <class F>
void PanelTileRows(const GemmX<F>& x, int64_t tile, const Panel& panel, float* y, int64_t ldy, int valid) {
  switch (std::min<int64_t>(kTileM<F>, x.m - tile * kTileM<F>)) {
    case 1: PanelTile<F, 1>(x, tile, panel, y, ldy, valid); break;
    case 2: PanelTile<F, 2>(x, tile, panel, y, ldy, valid); break;
    case 3: PanelTile<F, 3>(x, tile, panel, y, ldy, valid); break;
    default: PanelTile<F, kTileM<F>>(x, tile, panel, y, ldy, valid); break;
  }
}

// y[row][0 .. valid) = x row · two panels' 16 rows (lo: rows 0-7, hi: 8-15; valid > 8) for
// the first M rows of the tile, formats with kPairedPanels: per slot and register one
// broadcast of each x row's 4 codes into a vpmaddubsw with each panel, the 8 registers'
// pairs added in int16, then PanelTile's vpmaddwd and f32 steps for each half, in the same
// order, so the results are PanelTile's to the bit.
template <class F, int M> void PanelPairTile(const GemmX<F>& x, int64_t tile, const Panel& lo, const Panel& hi,
                                             float* y, int64_t ldy, int valid) {
  static_assert(kPairedPanels<F>);
  constexpr bool kMins = F::kHasMin || F::kBlockMin;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[M][2];
  for (int i = 0; i < M; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const __m256i* codes[2] = {reinterpret_cast<const __m256i*>(lo.codes), reinterpret_cast<const __m256i*>(hi.codes)};
  const Panel* halves[2] = {&lo, &hi};
  const std::byte* slot = x.Slot(tile, 0);
  for (int64_t s = 0; s < x.slots; ++s, slot += x.slot_bytes) {
    const int32_t* q = reinterpret_cast<const int32_t*>(slot);  // [M][8] groups of 4 codes
    __m256i pairs[M][2];
    for (int i = 0; i < M; ++i) {
      const __m256i b = _mm256_set1_epi32(q[8 * i]);
      for (int h = 0; h < 2; ++h) pairs[i][h] = _mm256_maddubs_epi16(_mm256_load_si256(codes[h] + 8 * s), b);
    }
#pragma GCC unroll 1
    for (int c = 1; c < 8; ++c) {  // rolled: unrolled, GCC spills the pairs
      const __m256i wl = _mm256_load_si256(codes[0] + 8 * s + c), wh = _mm256_load_si256(codes[1] + 8 * s + c);
      for (int i = 0; i < M; ++i) {
        const __m256i b = _mm256_set1_epi32(q[8 * i + c]);
        pairs[i][0] = _mm256_add_epi16(pairs[i][0], _mm256_maddubs_epi16(wl, b));
        pairs[i][1] = _mm256_add_epi16(pairs[i][1], _mm256_maddubs_epi16(wh, b));
      }
    }
    const int32_t* corr = GemmX<F>::Corr(slot);
    const float* dx = GemmX<F>::Dx(slot, 1);
    const float* msum = GemmX<F>::Msum(slot, 1);
    for (int i = 0; i < M; ++i) {
      const __m256 dxv = _mm256_set1_ps(dx[i]);
      const __m256 msv = kMins ? _mm256_set1_ps(msum[i]) : _mm256_setzero_ps();
      for (int h = 0; h < 2; ++h) {
        const __m256i sum = _mm256_add_epi32(Start<F>(corr[i]), _mm256_madd_epi16(pairs[i][h], ones));
        const __m256 sc = _mm256_load_ps(halves[h]->scales + s * kPanelRows);
        const __m256 mn = kMins ? _mm256_load_ps(halves[h]->mins + s * kPanelRows) : _mm256_setzero_ps();
        acc[i][h] = AddSlot<F>(acc[i][h], _mm256_cvtepi32_ps(sum), sc, dxv, mn, msv);
      }
    }
  }
  for (int i = 0; i < M; ++i) {
    float* yi = y + (tile * kTileM<F> + i) * ldy;
    StoreRow(yi, acc[i][0], kPanelRows);
    StoreRow(yi + kPanelRows, acc[i][1], valid - kPanelRows);
  }
}

// The tile's real rows against two panels.
template <class F> void PanelPairTileRows(const GemmX<F>& x, int64_t tile, const Panel& lo, const Panel& hi, float* y,
                                          int64_t ldy, int valid) {
  switch (std::min<int64_t>(kTileM<F>, x.m - tile * kTileM<F>)) {
    case 1: PanelPairTile<F, 1>(x, tile, lo, hi, y, ldy, valid); break;
    case 2: PanelPairTile<F, 2>(x, tile, lo, hi, y, ldy, valid); break;
    default: PanelPairTile<F, kTileM<F>>(x, tile, lo, hi, y, ldy, valid); break;
  }
}

// Output rows [n0, n1) (n0 a multiple of 8): kGroupPanels panels packed at a time, then
// every x tile against each of them (a tile's codes stay in L1 across the group; the
// group's packed weights, 64 KiB at 2048 columns, in L2).
constexpr int kGroupPanels = 4;

template <class F>
void GemmRows(const GemmX<F>& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  constexpr int kSubs = kTwoSubBlocks<F> ? 2 : 1;
  thread_local AlignedBuffer storage;  // grown once per thread
  const size_t code_bytes = static_cast<size_t>(x.slots) * kCodeRegs<F> * 32;
  const size_t scale_bytes = static_cast<size_t>(x.slots) * kSubs * kPanelRows * sizeof(float);
  const size_t min_bytes = static_cast<size_t>(x.slots) * (kMin16<F> ? 2 : 1) * kPanelRows * sizeof(float);
  const size_t panel_bytes = code_bytes + scale_bytes + min_bytes;  // each a multiple of 32
  uint8_t* packed = GrowAligned<uint8_t>(storage, kGroupPanels * panel_bytes);
  Panel panels[kGroupPanels];
  for (int g = 0; g < kGroupPanels; ++g) {
    panels[g].codes = packed + g * panel_bytes;
    panels[g].scales = reinterpret_cast<float*>(panels[g].codes + code_bytes);
    panels[g].mins = reinterpret_cast<float*>(panels[g].codes + code_bytes + scale_bytes);
  }
  const int64_t stride = static_cast<int64_t>(DTypeRowBytes(w.dtype, w.ld));
  const int64_t row_bytes = static_cast<int64_t>(DTypeRowBytes(w.dtype, w.cols));
  for (int64_t n = n0; n < n1; n += kGroupPanels * kPanelRows) {
    const int count = static_cast<int>(std::min<int64_t>(kGroupPanels, (n1 - n + kPanelRows - 1) / kPanelRows));
    for (int g = 0; g < count; ++g) PackPanel<F>(w, n + g * kPanelRows, n1, panels[g]);
    // The next group's weights into L2 while this one computes, over its tiles' calls.
    const int64_t next = n + kGroupPanels * kPanelRows;
    RowPrefetch prefetch;
    if (next < n1) {
      prefetch = RowPrefetch(static_cast<const std::byte*>(w.data) + next * stride, stride,
                             std::min<int64_t>(kGroupPanels * kPanelRows, n1 - next), row_bytes, x.tiles * count);
    }
    for (int64_t t = 0; t < x.tiles; ++t) {
      int g = 0;
      if constexpr (kPairedPanels<F>) {  // pairs of panels while the second holds rows
        for (; g + 1 < count; g += 2) {
          prefetch.Next();
          prefetch.Next();
          const int64_t first = n + g * kPanelRows;
          const int valid = static_cast<int>(std::min<int64_t>(2 * kPanelRows, n1 - first));
          PanelPairTileRows<F>(x, t, panels[g], panels[g + 1], y + first, ldy, valid);
        }
      }
      for (; g < count; ++g) {
        prefetch.Next();
        const int64_t first = n + g * kPanelRows;
        const int valid = static_cast<int>(std::min<int64_t>(kPanelRows, n1 - first));
        PanelTileRows<F>(x, t, panels[g], y + first, ldy, valid);
      }
    }
  }
}

// The product for format F: x laid out in its tiles, then its panels.
template <class F> void GemmFormat(const MatmulProblem& p, bool threaded) {
  const WeightView& w = p.w;
  // The panels' codes are the AVX2 GEMV's (FormatX::Slot: Q4_0's zero point 8, Q5_0's 16,
  // Q6_K's 32; Q8_0 signed).
  RunBlockGemm<kTileM<F>>(p, threaded, BlockGemvIsa::kAvx2, w.cols, BlockZeroPoint(BlockGemvIsa::kAvx2, w.dtype),
                          kPairedPanels<F> ? 2 * kPanelRows : kPanelRows,
                          [&](const GemmX<F>& g, int64_t n0, int64_t n1) { GemmRows<F>(g, w, n0, n1, p.y, p.ldy); });
}

}  // namespace

void GemmBlockAvx2(const MatmulProblem& p, bool threaded) {
  const WeightView& w = p.w;
  if (p.m <= 0 || w.rows <= 0) return;
  LATTE_DCHECK(HasBlockGemm(w.dtype), "GemmBlockAvx2: ", DTypeName(w.dtype));
  switch (w.dtype) {
    case DType::kQ8_0: GemmFormat<FormatQ8_0>(p, threaded); break;
    case DType::kQ4_0: GemmFormat<FormatQ4_0>(p, threaded); break;
    case DType::kQ4_K: GemmFormat<FormatK4K5<false>>(p, threaded); break;
    case DType::kQ5_K: GemmFormat<FormatK4K5<true>>(p, threaded); break;
    case DType::kQ6_K: GemmFormat<FormatQ6_K>(p, threaded); break;
    case DType::kQ5_0: GemmFormat<FormatQ5<false>>(p, threaded); break;
    case DType::kQ5_1: GemmFormat<FormatQ5<true>>(p, threaded); break;
    case DType::kQ3_K: GemmFormat<FormatK16</*kQ2=*/false>>(p, threaded); break;
    case DType::kQ2_K: GemmFormat<FormatK16</*kQ2=*/true>>(p, threaded); break;
    case DType::kIQ4_NL: GemmFormat<FormatIQ4_NL>(p, threaded); break;
    case DType::kIQ4_XS: GemmFormat<FormatIQ4_XS>(p, threaded); break;
    default: break;
  }
}

}  // namespace latte::matmul_internal
