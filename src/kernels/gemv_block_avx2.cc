// AVX2 integer GEMV for GGUF block formats (vpmaddubsw + vpmaddwd on 256-bit registers)
// and its quantization of x, for CPUs without AVX-512 (Haswell and later, Zen 1-3), and for
// Q5_1 on AVX-512 CPUs too (BlockGemvIsaFor: the AVX-512 kernels lack it): the
// arithmetic of matmul_internal.h's block-format section, the layout of gemv_block_avx512_inl.h.
//
// x is prepared in the AVX-512 layout (PreparedX), which splits into 32-value slots: slot s
// is codes q[32s .. 32s + 32) (one x block, scale dx in scale[8s .. 8s + 8)), and a 64-value
// AVX-512 step is two slots. Here one slot is one 256-bit register: vpmaddubsw multiplies
// the 32 weight codes (unsigned) by the 32 x codes into 16 int16 pair sums, plus pair_bias
// (-zero point · the pair's x codes) where the format has a zero point; vpmaddwd sums the
// pairs into 8 int32 lanes (lane k: codes 4k .. 4k + 3), each pair multiplied by
//   the K formats' integer sub-block scale (Q4_K / Q5_K sc[j] < 64, Q6_K int8 scales[t]),
//   1 for Q8_0 / Q4_0 / Q5_0 / Q5_1 (their scale is an f16 per block).
// Then, per (x row, weight row):
//   Q8_0 / Q4_0 / Q5_0 / Q5_1, per slot:  acc += f32(lane sums) · (d · dx)       (8 lanes)
//   K formats, per slot:    unit += f32(lane sums) · dx; per 256 values acc += unit · d,
// and for Q4_K / Q5_K, once per 256 values, acc += (-dmin·m per block) · (dx · sum q per
// block) (block_sum's lanes 8..15); for Q5_1, per slot, lane 0 of acc += m · (dx · sum q)
// (block_sum in block order). The 8 lanes of acc are added at the end. The integer scale
// saves the K formats a multiply per slot and x row (d · sc · dx in f32). Q4_K and Q6_K at
// m = 1 (TileM1) instead sum a unit's 8 slots' pairs in integers first, one int32 per slot,
// and then per unit acc += f32(slot sums) · (dx per slot) · d: so an x row of theirs alone
// may differ in its last bits from the same row among others (every other format's tiles add
// in one order at every m). The slot sums at m = 2-16 measured 0.91-0.99x of Tile (Q4_K, from
// cache, 2 threads, Zen 4), and the GEMM past the GEMV's rows adds in another order anyway.
//
// Weight codes per format and slot (a unit is what one weight row is read in):
//   Q8_0: unit = 1 block (34 bytes), 1 slot: its 32 int8 codes; |w| times x with w's sign
//         (vpsignb), as llama.cpp does: vpmaddubsw multiplies u8 by s8, and 2 · 128 · 127
//         fits its int16 sums.
//   Q4_0: unit = 1 block (18 bytes), 1 slot: 16 low nibbles then 16 high nibbles, zero point 8.
//   Q4_K: unit = 256 values (144 bytes), 8 slots in the AVX-512 order (x's blocks 0, 2, 1, 3,
//         4, 6, 5, 7 of each 256): slot H reads qs[64h + 32a ..) (h = H / 4, a = H % 2),
//         nibble (H / 2) % 2, sub-block 4h + 2a + (H / 2) % 2.
//   Q5_K: as Q4_K, each nibble with its qh bit shifted onto bit 4.
//   Q6_K: unit = 256 values (210 bytes), 8 slots in order: slot 4h + k reads ql[64h + 32(k % 2) ..]
//         nibble k / 2 and qh[32h ..] bits (2k, 2k + 1) onto bits 4-5; lanes 0-3 take scale
//         2(4h + k), lanes 4-7 the next; zero point 32.
//   Q5_0: unit = 1 block (22 bytes), 1 slot: as Q4_0's, each code with bit j of qh (a
//         little-endian uint32) on bit 4 of code j; zero point 16.
//   Q5_1: unit = 1 block (24 bytes), 1 slot: Q5_0's codes, no zero point; the min m.
//   IQ4_NL: unit = 1 block (18 bytes), 1 slot: Q4_0's nibbles as indices looked up (vpshufb)
//         into the int8 levels, then as Q8_0's codes.
//   IQ4_XS: unit = 256 values (136 bytes), 8 slots in order: slot H = sub-block H's 16 bytes
//         as IQ4_NL's, integer scale ls[H] - 32.
//   Q3_K / Q2_K: unit = 256 values (110 / 84 bytes), 8 slots in order as Q6_K's: slot 4h + j
//         takes bits 2j, 2j + 1 of qs[32h ..]; Q3_K with hmask's bit 4h + j onto bit 2, zero
//         point 4, scales sc - 32; Q2_K's 16 mins a unit (-dmin·m) times x's sums per 16
//         values (block_sum, in order).
// Every sum stays exact: a pair is at most 2 · 63 · 127 (Q8_0: 2 · 128 · 127) plus a pair
// bias of at most 32 · 254, inside int16; a lane at most 2 · 128 · 24130 < 2^24, so its
// f32 conversion is exact too. The integer dot products are the portable ones (K formats:
// times their integer scale); only the order of the f32 sums differs.
//
// Measured (bench/matmul_bench.cc BM_BlockGemv, 1 thread of a 2-vCPU AMD EPYC Zen 4 VM
// shared with other jobs, the AVX2 kernels called directly; medians of runs alternating with
// the previous version): the 102400 x 2048 lm_head at m = 1, Q4_K 19.5 GB/s (was 18.1),
// Q6_K 22.9 (21.5), Q5_0 14.4 (13.3), Q8_0 ~30; at m = 16, Q4_K 53 GMAC/s, Q6_K 43, Q5_0 38.
// The 1408 x 2048 expert (from L3) runs at about the same rates and so do 256-row matrices in
// L2: not memory-bound (the AVX-512 VNNI kernel reads Q4_K at ~21 GB/s on the same thread)
// but, it seems, by the instructions per slot: the time followed their count (~3.5 per
// cycle, of whatever kind) more closely than any one unit's share.
//
// Compiled with -mavx2 -mfma -mf16c -mbmi2 (CMakeLists.txt); reached only through the
// dispatch after GetCpuFeatures().avx2.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/avx2_inl.h"
#include "kernels/block_quant.h"
#include "kernels/gemv_block_avx2_inl.h"
#include "kernels/matmul_internal.h"

namespace latte::matmul_internal {
namespace {

// Weight rows per row group, and x rows per tile.
constexpr int kBlockRows = 4;
constexpr int kBlockMaxM = 4;
// Software prefetch distance along each weight row's stream, as the AVX-512 kernels
// (kBlockPrefetchBytes in gemv_block_avx512_inl.h): about 32 KiB of weights ahead, into L2.
constexpr int64_t kBlockPrefetchBytes = int64_t{32} << 10;

// acc += the unit's mins · x's sums per 16 values (xm: x row's block_sum at the unit).
template <class F> inline __m256 AddMins16(const typename F::Unit& u, const float* xm, __m256 acc) {
  acc = _mm256_fmadd_ps(u.mn[0], _mm256_load_ps(xm), acc);
  return _mm256_fmadd_ps(u.mn[1], _mm256_load_ps(xm + 8), acc);
}

// y[i][r] = x row i0 + i · weight row r for i < M, r < R. w: row 0 of the tile; row r at
// w + r · row_bytes (adjacent rows, or spans' rows). Each (x row, weight row) adds its units
// and slots in one order whatever M and R are, so an x row gives the same bits alone as among
// others. (Q8_0's m = 1 spans once kept two accumulator banks for alternate units; with 3
// spans' rows per tile one bank runs as fast: 1.00-1.03x from cache, 2 threads, Zen 4.)
template <class F, int M, int R> void Tile(const PreparedX& x, int64_t i0, const uint8_t* w, size_t row_bytes,
                                           int64_t units, int64_t prefetch_bytes, float* y, int64_t ldy) {
  __m256 acc[M][R];
  const int8_t* xq[M];
  const float* xs[M];
  const int16_t* xb[M];
  const float* xm[M];
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
    xq[i] = x.q + (i0 + i) * x.ldq;
    xs[i] = x.scale + (i0 + i) * x.lds;
    xb[i] = F::kBias ? x.pair_bias + (i0 + i) * 2 * x.lds : nullptr;
    xm[i] = F::kHasMin || F::kBlockMin || kMin16<F> ? x.block_sum + (i0 + i) * x.ldb : nullptr;
  }
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t u = 0; u < units; ++u) {
    typename F::Unit wu[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = w + r * row_bytes + u * F::kUnitBytes;
      // Units smaller than a line: one prefetch per line crossed, as the stream advances.
      if (F::kUnitBytes >= 64 || (u * F::kUnitBytes) % 64 < F::kUnitBytes) {
        for (size_t off = 0; off < F::kUnitBytes; off += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(p + prefetch_bytes + off), _MM_HINT_T1);
        }
      }
      wu[r] = F::Load(p);
    }
    __m256 unit[M][R];  // K formats: this unit's sums before d
    if constexpr (F::kIntScale) {
      for (int i = 0; i < M; ++i) {
        for (int r = 0; r < R; ++r) unit[i][r] = _mm256_setzero_ps();
      }
    }
    ForSlots(
        [&]<int H>() {
          const int64_t s = u * F::kSlots + H;  // x's slot
          for (int r = 0; r < R; ++r) {
            __m256i wv;
            typename F::Scale ws;
            F::template Slot<H>(wu[r], wv, ws);
            __m256i aw;  // Q8_0: |w|, and x takes w's sign below
            if constexpr (F::kSignedCodes) aw = _mm256_abs_epi8(wv);
            for (int i = 0; i < M; ++i) {
              const __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(xq[i] + 32 * s));
              const __m256 sv = _mm256_load_ps(xs[i] + 8 * s);
              __m256i pairs;
              if constexpr (F::kSignedCodes) {
                pairs = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv));
              } else {
                pairs = _mm256_maddubs_epi16(wv, xv);
              }
              if constexpr (F::kBias) {
                pairs = _mm256_add_epi16(pairs, _mm256_load_si256(reinterpret_cast<const __m256i*>(xb[i] + 16 * s)));
              }
              if constexpr (F::kIntScale) {
                unit[i][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ws)), sv, unit[i][r]);
              } else {
                const __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones16));
                acc[i][r] = _mm256_fmadd_ps(isum, _mm256_mul_ps(ws, sv), acc[i][r]);
              }
              if constexpr (F::kBlockMin) {  // m · (dx · sum q) into lane 0
                acc[i][r] = _mm256_fmadd_ps(wu[r].mn, _mm256_zextps128_ps256(_mm_load_ss(xm[i] + s)), acc[i][r]);
              }
            }
          }
        },
        std::make_integer_sequence<int, F::kSlots>{});
    if constexpr (F::kIntScale) {
      for (int i = 0; i < M; ++i) {
        for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(unit[i][r], wu[r].d, acc[i][r]);
      }
    }
    if constexpr (F::kHasMin) {
      for (int i = 0; i < M; ++i) {
        const __m256 mv = _mm256_load_ps(xm[i] + 16 * u + 8);
        for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(wu[r].mn, mv, acc[i][r]);
      }
    }
    if constexpr (kMin16<F>) {
      for (int i = 0; i < M; ++i) {
        for (int r = 0; r < R; ++r) acc[i][r] = AddMins16<F>(wu[r], xm[i] + 16 * u, acc[i][r]);
      }
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) y[i * ldy + r] = HorizontalSum(acc[i][r]);
  }
}

// ---- Q4_K and Q6_K at m = 1: slot sums reduced across slots before the f32 work ------
//
// With one x row, Tile's per-slot vpshufb (the slot's scale), vpmaddwd, vcvtdq2ps and vfmadd
// are half a slot's instructions, and the kernel runs at about as many instructions per cycle
// whatever their kind. Here a unit's 8 slots' int16 pair sums go through a vpmaddwd (by 1) +
// vpackssdw tree into 8 int32 slot sums times their integer scales, which take one conversion,
// one multiply by the 8 slots' dx and one FMA by d per unit: ~28 instructions per 8 slots
// instead of 33 (Q6_K ~7% faster, Q4_K ~2.5% than Tile at its best, 2 rows; 1 thread).
// Exact: a tree entry sums at most 4 pairs (4 · kPairMax fits int16), and a slot sum is the
// portable integer sum times its scale (< 2^24: its f32 conversion is exact too).
// Q5_K measured no faster this way (0 to -2.5%) and stays with Tile.
// IQ4_XS's signed codes (pairs up to 2 · 127 · 127) leave no room for the tree's int16 sums.
template <class F> constexpr bool kSlotTree = F::kIntScale && !F::kSignedCodes && !std::is_same_v<F, FormatK4K5<true>>;

// The pair sums of a and b added two by two, 4 per 128-bit half of each (vphaddw's layout;
// vphaddw itself measured ~4 times slower than vpmaddwd on Zen 4, and no faster overall).
inline __m256i HaddEpi16(__m256i a, __m256i b) {
  const __m256i ones = _mm256_set1_epi16(1);
  return _mm256_packs_epi32(_mm256_madd_epi16(a, ones), _mm256_madd_epi16(b, ones));
}

// int32 k of the result: slot k's pair sums p[k] added up, each 16-value half times its
// scale in sc (int16 k of each 128-bit half of sc[g]: slot 4g + k / 2's; the low half is its
// bytes 0-15, the high half 16-31, F::GroupScales). Two rounds of HaddEpi16 leave in int16 k
// of each half of q[g] a sum of 4 pairs of slot 4g + k / 2's half.
inline __m256i SlotSums(const __m256i p[8], const __m256i sc[2]) {
  const __m256i q0 = HaddEpi16(HaddEpi16(p[0], p[1]), HaddEpi16(p[2], p[3]));
  const __m256i q1 = HaddEpi16(HaddEpi16(p[4], p[5]), HaddEpi16(p[6], p[7]));
  const __m256i c0 = _mm256_madd_epi16(q0, sc[0]), c1 = _mm256_madd_epi16(q1, sc[1]);
  return _mm256_add_epi32(_mm256_permute2x128_si256(c0, c1, 0x20), _mm256_permute2x128_si256(c0, c1, 0x31));
}

// Slot s's int16 pair sums with x's codes (plus the zero point's pair bias).
template <class F, int H>
inline __m256i SlotPairs(const typename F::Unit& u, const int8_t* xq, const int16_t* xb, int64_t s) {
  __m256i w;
  typename F::Scale unused;  // SlotSums applies the scales
  F::template Slot<H>(u, w, unused);
  __m256i pairs = _mm256_maddubs_epi16(w, _mm256_load_si256(reinterpret_cast<const __m256i*>(xq + 32 * s)));
  if constexpr (F::kBias) {
    pairs = _mm256_add_epi16(pairs, _mm256_load_si256(reinterpret_cast<const __m256i*>(xb + 16 * s)));
  }
  return pairs;
}

// x row i's dx per slot, one float each (PreparedX repeats it over 8 lanes), in a buffer of
// the calling thread's that grows once: decode calls this for every product of every step.
const float* CompactSlotScales(const PreparedX& x, int64_t i) {
  const int64_t slots = x.ldq / 32;
  thread_local std::vector<float> dx;
  if (static_cast<int64_t>(dx.size()) < slots) dx.resize(static_cast<size_t>(slots));
  for (int64_t s = 0; s < slots; ++s) dx[s] = x.scale[i * x.lds + 8 * s];
  return dx.data();
}

// y[0] = x row i0 · the weight row at w (m = 1), for kSlotTree formats. dx: x row i0's
// CompactSlotScales.
template <class F> void TileM1(const PreparedX& x, int64_t i0, const float* dx, const uint8_t* w, int64_t units,
                               int64_t prefetch_bytes, float* y) {
  static_assert(F::kSlots == 8 && 4 * F::kPairMax <= 32767);
  const int8_t* xq = x.q + i0 * x.ldq;
  const int16_t* xb = F::kBias ? x.pair_bias + i0 * 2 * x.lds : nullptr;
  const float* xm = F::kHasMin || kMin16<F> ? x.block_sum + i0 * x.ldb : nullptr;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t u = 0; u < units; ++u) {
    const uint8_t* p = w + u * F::kUnitBytes;
    for (size_t off = 0; off < F::kUnitBytes; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(p + prefetch_bytes + off), _MM_HINT_T1);
    }
    const typename F::Unit wu = F::Load(p);
    __m256i pairs[8];
    ForSlots([&]<int H>() { pairs[H] = SlotPairs<F, H>(wu, xq, xb, 8 * u + H); }, std::make_integer_sequence<int, 8>{});
    const __m256i sc[2] = {F::template GroupScales<0>(wu), F::template GroupScales<1>(wu)};
    const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(SlotSums(pairs, sc)), _mm256_loadu_ps(dx + 8 * u));
    acc = _mm256_fmadd_ps(t, wu.d, acc);
    if constexpr (F::kHasMin) acc = _mm256_fmadd_ps(wu.mn, _mm256_load_ps(xm + 16 * u + 8), acc);
    if constexpr (kMin16<F>) acc = AddMins16<F>(wu, xm + 16 * u, acc);
  }
  *y = HorizontalSum(acc);
}

// Weight rows per tile for M rows of x: the M·R accumulators (K formats: twice that), the R
// units' scales and a slot's weights, scales and x codes stay near the 16 registers. (Q4_K and
// Q6_K at M = 1 take TileM1, one row at a time: measured faster than 2 or 4 rows.)
template <class F, int M> constexpr int BlockTileRows() {
  if constexpr (F::kIntScale) return M <= 2 ? 2 : 1;
  return M == 1 ? 4 : 2;
}

struct RowGeometry {
  size_t row_bytes;
  int64_t units;
  int64_t prefetch_bytes;
  const float* dx_m1;  // the last x row's CompactSlotScales where TileM1 takes it
};

// R weight rows (kBlockRows or 1) against every row of x.
template <class F, int R>
void RowGroup(const PreparedX& x, const RowGeometry& g, const uint8_t* w, float* y, int64_t ldy) {
  for (int64_t i = 0; i < x.m; i += kBlockMaxM) {
    float* yi = y + i * ldy;
    auto split = [&]<int M>() {
      constexpr int kSub = BlockTileRows<F, M>() < R ? BlockTileRows<F, M>() : R;
      if constexpr (M == 1 && kSlotTree<F>) {
        for (int r = 0; r < R; ++r) TileM1<F>(x, i, g.dx_m1, w + r * g.row_bytes, g.units, g.prefetch_bytes, yi + r);
      } else {
        for (int r = 0; r < R; r += kSub) {
          Tile<F, M, kSub>(x, i, w + r * g.row_bytes, g.row_bytes, g.units, g.prefetch_bytes, yi + r, ldy);
        }
      }
    };
    switch (std::min<int64_t>(kBlockMaxM, x.m - i)) {
      case 1: split.template operator()<1>(); break;
      case 2: split.template operator()<2>(); break;
      case 3: split.template operator()<3>(); break;
      default: split.template operator()<4>(); break;
    }
  }
}

// Formats whose m = 1 product streams as spans with their own prefetch: Q8_0. One row at a
// time it measured from memory (alternating per call, 2 threads) ~1.06x against four
// adjacent rows with the software prefetch (128 expert matrices of 1408 x 2048), ~1.05x on
// 102400 x 2048, ~1.0x from cache; with its own prefetch (kStreamPrefetchBytes) 28-29 GB/s
// on Zen 2 against 25.5. Now a row of each of kBlockRowStreams spans side by side
// (ForSpanRows).
template <class F> constexpr bool kStreamM1 = std::is_same_v<F, FormatQ8_0>;

// Spans read side by side at m = 1 (Q8_0's Tile; Q4_K / Q6_K's TileM1 take the spans' rows
// in turn, one row at a time), each with the prefetch kStreamPrefetchBytes ahead. tg128 on
// Zen 2, 2 threads: the Q8_0 file 50-52 tok/s as one stream, 68-70 as 2 spans, 70-76 as 3,
// 68-69 as 4, 57-69 as 5 (without the prefetch 63-64 as 3, 70-71 as 5); the Q4_K_M file
// 68 -> 72-73 as 2 or 3 (the K formats' arithmetic bounds them near 27-33 GB/s), 70.6 as 4.
constexpr int kBlockRowStreams = 3;

template <class F>
void FormatRows(const PreparedX& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  RowGeometry g;
  g.row_bytes = DTypeRowBytes(w.dtype, w.ld);
  g.units = w.cols / F::kUnitValues;
  g.prefetch_bytes = std::max<int64_t>(kBlockPrefetchBytes / static_cast<int64_t>(g.row_bytes), kBlockRows) *
                     static_cast<int64_t>(g.row_bytes);
  g.dx_m1 = kSlotTree<F> && x.m % kBlockMaxM == 1 ? CompactSlotScales(x, x.m - 1) : nullptr;
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  if (kStreamM1<F> && x.m == 1) {
    constexpr int S = kBlockRowStreams;
    n0 = ForSpanTiles<1, S>(n0, n1, y, ldy, [&](int64_t row, int64_t span, float* ys) {
      Tile<F, 1, S>(x, 0, base + row * g.row_bytes, span * g.row_bytes, g.units, kStreamPrefetchBytes, ys, S);
    });
    for (int64_t n = n0; n < n1; ++n) {
      Tile<F, 1, 1>(x, 0, base + n * g.row_bytes, g.row_bytes, g.units, kStreamPrefetchBytes, y + n, ldy);
    }
    return;
  }
  if constexpr (kSlotTree<F>) {
    if (x.m == 1) {
      // TileM1 already takes one row at a time (its arithmetic, not the memory, bounds it):
      // here the rows of the spans in turn.
      n0 = ForSpanRows<kBlockRowStreams>(n0, n1, [&](int64_t row, int64_t span) {
        for (int s = 0; s < kBlockRowStreams; ++s) {
          const int64_t n = row + s * span;
          TileM1<F>(x, 0, g.dx_m1, base + n * g.row_bytes, g.units, kStreamPrefetchBytes, y + n);
        }
      });
    }
  }
  int64_t n = n0;
  for (; n + kBlockRows <= n1; n += kBlockRows) RowGroup<F, kBlockRows>(x, g, base + n * g.row_bytes, y + n, ldy);
  for (; n < n1; ++n) RowGroup<F, 1>(x, g, base + n * g.row_bytes, y + n, ldy);
}

// ---- dequantization: the values of block_quant.cc, 8 at a time --------------------------
//
// The large-m path's chunks on CPUs without AVX-512 (DequantizeRowsToF32). The same f32
// operations in the same order (d·sc first, then ·q, then - dmin·m), each rounded once:
// Product() hides the product from GCC, which would otherwise fuse it with the difference
// into an FMA (-ffp-contract=fast, and this file has -mfma), so the values equal the
// portable ones bit for bit.
inline __m256 Product(__m256 a, __m256 b) {
  __m256 p = _mm256_mul_ps(a, b);
  asm("" : "+x"(p));
  return p;
}

// 8 codes (bytes 8G .. 8G + 8 of the 16 in `v`) as f32, minus `offset`; signed or unsigned.
template <int G, bool kSigned> inline __m256 Codes8(__m128i v, int offset) {
  const __m128i b = G == 0 ? v : _mm_srli_si128(v, 8);
  const __m256i c = kSigned ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(c, _mm256_set1_epi32(offset)));
}

inline __m256 Lane(__m256 v, int lane) { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(lane)); }

void DequantQ8_0Row(const uint8_t* row, int64_t blocks, float* out) {
  for (int64_t k = 0; k < blocks; ++k) {
    const uint8_t* b = row + k * 34;
    const __m256 d = BroadcastF16(b);
    for (int g = 0; g < 2; ++g) {
      const __m128i q = LoadU128(b + block_layout::kQ8_0Qs + 16 * g);
      _mm256_storeu_ps(out + 32 * k + 16 * g, _mm256_mul_ps(Codes8<0, true>(q, 0), d));
      _mm256_storeu_ps(out + 32 * k + 16 * g + 8, _mm256_mul_ps(Codes8<1, true>(q, 0), d));
    }
  }
}

void DequantQ4_0Row(const uint8_t* row, int64_t blocks, float* out) {
  for (int64_t k = 0; k < blocks; ++k) {
    const uint8_t* b = row + k * 18;
    const __m256 d = BroadcastF16(b);
    const __m128i qs = LoadU128(b + block_layout::kQ4_0Qs);
    const __m128i nibbles[2] = {_mm_and_si128(qs, _mm_set1_epi8(0x0F)),
                                _mm_and_si128(_mm_srli_epi16(qs, 4), _mm_set1_epi8(0x0F))};
    for (int g = 0; g < 2; ++g) {
      _mm256_storeu_ps(out + 32 * k + 16 * g, _mm256_mul_ps(Codes8<0, false>(nibbles[g], 8), d));
      _mm256_storeu_ps(out + 32 * k + 16 * g + 8, _mm256_mul_ps(Codes8<1, false>(nibbles[g], 8), d));
    }
  }
}

// Q4_K / Q5_K: chunk c's 32 bytes give sub-block 2c (low nibbles) and 2c + 1 (high).
template <bool kFive> void DequantK4K5Row(const uint8_t* row, int64_t blocks, float* out) {
  using F = FormatK4K5<kFive>;
  for (int64_t k = 0; k < blocks; ++k) {
    const uint8_t* b = row + k * F::kUnitBytes;
    const typename F::Unit u = F::Load(b);
    // d·sc[j] and dmin·m[j], each rounded once as the portable d1 and m1.
    const __m128i codes = _mm256_castsi256_si128(u.sc);  // sc[j] in bytes 0-7
    const __m256 d1 = Product(u.d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(codes)));
    const __m256 m1 = _mm256_sub_ps(_mm256_setzero_ps(), u.mn);  // -(-dmin·m) is exact
    float* o = out + 256 * k;
    for (int c = 0; c < 4; ++c) {
      const __m256i q = LoadU256(u.qs + 32 * c);
      __m256i nib[2] = {LowNibbles(q), HighNibbles(q)};
      if constexpr (kFive) {
        const __m256i bits = _mm256_srl_epi16(u.qh, _mm_cvtsi32_si128(2 * c));  // bits 2c, 2c + 1 to 0, 1
        nib[0] = _mm256_or_si256(nib[0], MoveBits<0, 4>(bits, 0x10));
        nib[1] = _mm256_or_si256(nib[1], MoveBits<1, 4>(bits, 0x10));
      }
      for (int s = 0; s < 2; ++s) {
        const __m256 dj = Lane(d1, 2 * c + s), mj = Lane(m1, 2 * c + s);
        const __m128i lo = _mm256_castsi256_si128(nib[s]), hi = _mm256_extracti128_si256(nib[s], 1);
        float* os = o + 64 * c + 32 * s;
        _mm256_storeu_ps(os, _mm256_sub_ps(Product(dj, Codes8<0, false>(lo, 0)), mj));
        _mm256_storeu_ps(os + 8, _mm256_sub_ps(Product(dj, Codes8<1, false>(lo, 0)), mj));
        _mm256_storeu_ps(os + 16, _mm256_sub_ps(Product(dj, Codes8<0, false>(hi, 0)), mj));
        _mm256_storeu_ps(os + 24, _mm256_sub_ps(Product(dj, Codes8<1, false>(hi, 0)), mj));
      }
    }
  }
}

// Q6_K: values 32H .. 32H + 32 are the GEMV's slot H; x[i] = (d·scales[i / 16])·(q - 32).
void DequantQ6_KRow(const uint8_t* row, int64_t blocks, float* out) {
  for (int64_t k = 0; k < blocks; ++k) {
    const uint8_t* b = row + k * FormatQ6_K::kUnitBytes;
    const __m256 d = BroadcastF16(b + block_layout::kQ6KD);
    const __m128i sc = LoadU128(b + block_layout::kQ6KScales);
    const __m256 ds[2] = {Product(d, Codes8<0, true>(sc, 0)), Product(d, Codes8<1, true>(sc, 0))};
    float* o = out + 256 * k;
    ForSlots(
        [&]<int H>() {
          constexpr int h = H / 4, k4 = H % 4;
          const __m256i ql = LoadU256(b + 64 * h + 32 * (k4 % 2));
          const __m256i qh = LoadU256(b + block_layout::kQ6KQh + 32 * h);
          const __m256i q =
              _mm256_or_si256(k4 / 2 == 0 ? LowNibbles(ql) : HighNibbles(ql), MoveBits<2 * k4, 4>(qh, 0x30));
          const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
          const __m256 s0 = Lane(ds[h], 2 * k4), s1 = Lane(ds[h], 2 * k4 + 1);
          _mm256_storeu_ps(o + 32 * H, _mm256_mul_ps(s0, Codes8<0, false>(lo, 32)));
          _mm256_storeu_ps(o + 32 * H + 8, _mm256_mul_ps(s0, Codes8<1, false>(lo, 32)));
          _mm256_storeu_ps(o + 32 * H + 16, _mm256_mul_ps(s1, Codes8<0, false>(hi, 32)));
          _mm256_storeu_ps(o + 32 * H + 24, _mm256_mul_ps(s1, Codes8<1, false>(hi, 32)));
        },
        std::make_integer_sequence<int, 8>{});
  }
}

// Q5_0: x = (q - 16)·d; Q5_1: x = q·d + m, the product rounded first (block_quant.cc's order).
template <bool kMin> void DequantQ5Row(const uint8_t* row, int64_t blocks, float* out) {
  using F = FormatQ5<kMin>;
  for (int64_t k = 0; k < blocks; ++k) {
    const typename F::Unit u = F::Load(row + k * F::kUnitBytes);
    __m256i q;
    __m256 d;
    F::template Slot<0>(u, q, d);
    const __m128i halves[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
    for (int g = 0; g < 2; ++g) {
      const __m256 c[2] = {Codes8<0, false>(halves[g], kMin ? 0 : 16), Codes8<1, false>(halves[g], kMin ? 0 : 16)};
      for (int t = 0; t < 2; ++t) {
        const __m256 v = kMin ? _mm256_add_ps(Product(c[t], d), u.mn) : _mm256_mul_ps(c[t], d);
        _mm256_storeu_ps(out + 32 * k + 16 * g + 8 * t, v);
      }
    }
  }
}

int HorizontalSumI32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

void DequantF16Row(const uint8_t* row, int64_t n, float* out) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(row);
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    _mm256_storeu_ps(out + c, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + c))));
  }
  if (c < n) F16ToF32Row(h + c, n - c, out + c);
}

}  // namespace

// The codes and scales as the portable quantizer computes them (QuantizeXRowPortable in
// matmul_block.cc: amax, id = 127 / amax, round half to even (vcvtps2dq), dx = amax / 127),
// so the integer sums match it; laid out as PrepareXAvx512 lays them, with pair_bias in
// bias's place (PreparedX).
void PrepareXAvx2(const float* x, int64_t ldx, const PreparedX& p) {
  const bool permuted = p.dtype == DType::kQ4_K || p.dtype == DType::kQ5_K;
  const int zero_point = BlockZeroPoint(p.isa, p.dtype);
  const int64_t blocks = p.cols / 32;
  const int64_t slots = p.ldq / 32;  // zero-padded to whole 64-value steps
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  // vpackssdw / vpacksswb interleave the two 128-bit halves: this puts the dwords back in order.
  const __m256i unshuffle = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t i = 0; i < p.m; ++i) {
    const float* xi = x + i * ldx;
    int8_t* q = p.q + i * p.ldq;
    float* scale = p.scale + i * p.lds;
    int16_t* bias = p.pair_bias != nullptr ? p.pair_bias + i * 2 * p.lds : nullptr;
    float* sums = p.block_sum != nullptr ? p.block_sum + i * p.ldb : nullptr;
    for (int64_t b = 0; b < blocks; ++b) {
      __m256 v[4];
      for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(xi + 32 * b + 8 * k);
      const __m256 m01 = _mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask));
      const __m256 m23 = _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask));
      __m128 m = _mm_max_ps(_mm256_castps256_ps128(_mm256_max_ps(m01, m23)),
                            _mm256_extractf128_ps(_mm256_max_ps(m01, m23), 1));
      m = _mm_max_ps(m, _mm_movehl_ps(m, m));
      m = _mm_max_ss(m, _mm_movehdup_ps(m));
      const float amax = _mm_cvtss_f32(m);
      const float id = amax > 0 ? 127.0f / amax : 0.0f;
      const float dx = amax / 127.0f;
      __m256i c[4];
      for (int k = 0; k < 4; ++k) c[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], _mm256_set1_ps(id)));
      const __m256i codes = _mm256_permutevar8x32_epi32(
          _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3])), unshuffle);
      // Q4_K / Q5_K: block j of each 256 goes to slot 0, 2, 1, 3, 4, 6, 5, 7 (the AVX-512 map).
      const int64_t j = b % 8;
      const int64_t slot = permuted ? b - j + (j == 1 || j == 5 ? j + 1 : j == 2 || j == 6 ? j - 1 : j) : b;
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32 * slot), codes);
      _mm256_store_ps(scale + 8 * slot, _mm256_set1_ps(dx));
      if (bias != nullptr) {
        const __m256i pairs = _mm256_maddubs_epi16(ones8, codes);
        _mm256_store_si256(reinterpret_cast<__m256i*>(bias + 16 * slot),
                           _mm256_mullo_epi16(pairs, _mm256_set1_epi16(static_cast<int16_t>(-zero_point))));
      }
      if (sums != nullptr) {
        const __m256i h01 = _mm256_add_epi32(c[0], c[1]), h23 = _mm256_add_epi32(c[2], c[3]);
        const float sum = dx * static_cast<float>(HorizontalSumI32(_mm256_add_epi32(h01, h23)));
        if (p.dtype == DType::kQ5_1) {  // one per block, in order
          sums[b] = sum;
        } else if (p.dtype == DType::kQ2_K) {  // one per 16 values, in order
          sums[2 * b] = dx * static_cast<float>(HorizontalSumI32(h01));
          sums[2 * b + 1] = dx * static_cast<float>(HorizontalSumI32(h23));
        } else {  // K formats: 16 per 256 values, blocks in lanes 8..15, dx in 0..7
          float* group = sums + 16 * (b / 8);
          group[j] = dx;
          group[8 + j] = sum;
        }
      }
    }
    for (int64_t s = blocks; s < slots; ++s) {  // padding: zero codes, scales and bias
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32 * s), _mm256_setzero_si256());
      _mm256_store_ps(scale + 8 * s, _mm256_setzero_ps());
      if (bias != nullptr) _mm256_store_si256(reinterpret_cast<__m256i*>(bias + 16 * s), _mm256_setzero_si256());
    }
  }
}

void GemvBlockRowsAvx2(const PreparedX& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (w.dtype) {
    case DType::kQ8_0: FormatRows<FormatQ8_0>(x, w, n0, n1, y, ldy); break;
    case DType::kQ4_0: FormatRows<FormatQ4_0>(x, w, n0, n1, y, ldy); break;
    case DType::kQ4_K: FormatRows<FormatK4K5<false>>(x, w, n0, n1, y, ldy); break;
    case DType::kQ5_K: FormatRows<FormatK4K5<true>>(x, w, n0, n1, y, ldy); break;
    case DType::kQ6_K: FormatRows<FormatQ6_K>(x, w, n0, n1, y, ldy); break;
    case DType::kQ5_0: FormatRows<FormatQ5<false>>(x, w, n0, n1, y, ldy); break;
    case DType::kQ5_1: FormatRows<FormatQ5<true>>(x, w, n0, n1, y, ldy); break;
    case DType::kQ3_K: FormatRows<FormatK16<false>>(x, w, n0, n1, y, ldy); break;
    case DType::kQ2_K: FormatRows<FormatK16<true>>(x, w, n0, n1, y, ldy); break;
    case DType::kIQ4_NL: FormatRows<FormatIQ4_NL>(x, w, n0, n1, y, ldy); break;
    case DType::kIQ4_XS: FormatRows<FormatIQ4_XS>(x, w, n0, n1, y, ldy); break;
    case DType::kIQ2_XXS: FormatRows<FormatIQ2_XXS>(x, w, n0, n1, y, ldy); break;
    case DType::kIQ3_XXS: FormatRows<FormatIQ3_XXS>(x, w, n0, n1, y, ldy); break;
    case DType::kIQ1_S: FormatRows<FormatIQ1_S>(x, w, n0, n1, y, ldy); break;
    default: break;
  }
}

void DequantizeRowAvx2(DType dtype, const void* row, int64_t n, float* out) {
  const uint8_t* p = static_cast<const uint8_t*>(row);
  switch (dtype) {
    case DType::kQ8_0: DequantQ8_0Row(p, n / 32, out); break;
    case DType::kQ4_0: DequantQ4_0Row(p, n / 32, out); break;
    case DType::kQ4_K: DequantK4K5Row<false>(p, n / 256, out); break;
    case DType::kQ5_K: DequantK4K5Row<true>(p, n / 256, out); break;
    case DType::kQ6_K: DequantQ6_KRow(p, n / 256, out); break;
    case DType::kQ5_0: DequantQ5Row<false>(p, n / 32, out); break;
    case DType::kQ5_1: DequantQ5Row<true>(p, n / 32, out); break;
    case DType::kF16: DequantF16Row(p, n, out); break;
    default: DequantizeToF32(dtype, row, n, out); break;  // Q3_K, Q2_K, the IQ formats: the portable loops
  }
}

}  // namespace latte::matmul_internal
