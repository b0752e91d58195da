// The AVX-512 integer GEMV for GGUF block formats (matmul_internal.h: PreparedX, the
// arithmetic), written once for the translation units that build it: gemv_block_avx512.cc
// (AVX-512BW: vpmaddubsw + vpmaddwd), gemv_block_avx512_vnni.cc (vpdpbusd, compiled with
// AVX512_VNNI) and gemv_block_avx512_gfni.cc (Q5_K and Q6_K, AVX512_VNNI and GFNI: the
// qh bits moved by vgf2p8affineqb, HighBits); gemm_block_avx512_vnni.cc takes the
// formats' unpacking from here too. Everything here has internal linkage, so each unit
// keeps its own copy built for its own target. Include only from those files, after the
// headers below.
//
// A step is 64 values: one register of 64 unsigned weight codes against 64 signed x codes.
// vpdpbusd (or its BW emulation) sums them in fours into 16 int32 lanes; lane k holds
// codes 4k .. 4k + 3, so lanes 8j .. 8j + 7 are one 32-value x block (x's scale dx) and,
// in Q6_K, lanes 4j .. 4j + 3 one 16-value weight sub-block. The lane sums start from
// PreparedX::bias (-zero point · the lane's x codes), which takes the weights' zero point
// off exactly. Then, per (x row, weight row):
//   acc += f32(lane sums) · (weight scale per lane · dx per lane)        (16 lanes)
// and for Q4_K / Q5_K, once per 256 values, acc += (-dmin·m per block) · (dx · sum q per
// block). The 16 lanes of acc are added at the end. The K formats form their unit's
// scales times x's in one multiply per (x row, weight row) with PreparedX::block_sum's 16
// lanes (Q4_K / Q5_K: eight d·sc · dx and eight -dmin·m · dx·sum q; Q6_K: sixteen
// d·scales · dx), so a step's scale is one permute, not a multiply.
//
// Weight codes per format and step (each unit is what one weight row is read in):
//   Q8_0: unit = 2 blocks (68 bytes), 1 step: the two blocks' 32 int8 codes in order.
//         VNNI: sign bit flipped (code + 128, bias -128·sum x). BW: |w| times x with w's
//         sign (vpmaddubsw's pairs of 255·127 would saturate int16).
//   Q4_0: unit = 2 blocks (36 bytes), 1 step: per block its 16 low nibbles then its 16
//         high nibbles (values 0..15 and 16..31 in order), bias -8·sum x.
//   Q4_K: unit = 256 values (144 bytes), 4 steps; step 2h (h < 2) = the low nibbles of
//         qs[64h .. 64h + 64): sub-blocks 4h and 4h + 2; step 2h + 1 = the high nibbles:
//         sub-blocks 4h + 1 and 4h + 3. x's blocks are stored in that order (PreparedX).
//   Q5_K: as Q4_K, each nibble with its qh bit (rotated into bit 4, per 256-bit half).
//   Q6_K: unit = 256 values (210 bytes), 4 steps of 64 values in order: step 2h + i
//         takes ql[64h ..] nibble i and qh[32h ..] bit pairs (2i, 2i + 2) into bits 4-5;
//         bias -32·sum x per lane.
//   Q5_0: unit = 2 blocks (44 bytes), 1 step: as Q4_0, qh's bit j on value j's bit 4;
//         bias -16·sum x.
//   Q3_K / Q2_K: unit = 256 values (110 / 84 bytes), 4 steps of 64 values in order: step
//         2h + i takes qs[32h ..] shifted right by 4i (first 32 values) and 4i + 2 (next 32),
//         masked to 2 bits; Q3_K with hmask's bits 4h + 2i, 4h + 2i + 1 onto bit 2, bias
//         -4·sum x per lane; Q2_K's mins per 16 values multiply x's sums per 16 values.
//   IQ4_NL: unit = 2 blocks (36 bytes), 1 step: Q4_0's nibbles as indices, each looked up
//         (vpshufb) into its int8 level; then as Q8_0's codes (VNNI: the table holds level +
//         128, bias -128·sum x; BW: |w| times x with w's sign).
//   IQ4_XS: unit = 256 values (136 bytes), 4 steps of 64 values in order: step S = sub-blocks
//         2S and 2S + 1 (qs[32S ..], each as an IQ4_NL block's), looked up as IQ4_NL's.
//   IQ2_XXS, IQ3_XXS, IQ1_S: unit = 256 values, 4 steps of two 32-value groups; a step's
//         codebook entries loaded from iq_tables.h, IQ2_XXS / IQ3_XXS's signs applied as
//         a 64-bit mask (pdep), IQ1_S's delta added; then as Q8_0's signed codes.
//   Q5_1: none here; it runs on the AVX2 kernel (BlockGemvIsaFor).
// Each weight row's units are read once for every x row of the tile (up to 4 x rows
// against 4 or 2 weight rows), so the matrix is streamed once per call.
//
// Spans at m = 1 (kSpansM1: Q4_K, Q5_K and Q8_0 4, Q6_K 3): a thread's rows are read
// as that many spans side by side, one tile row in each, without the software prefetch,
// so each span is one long sequential stream the hardware prefetcher follows (the row
// groups' adjacent rows are short streams that restart every 1-2 KiB and need the
// prefetch ~32 KiB ahead). Measured on Zen 4 (2 threads, the GEMV alone, old and new
// alternating, GB/s median ratio) against the previous m = 1 paths (Q4_K, Q5_K and Q8_0
// one row at a time with two accumulator banks; Q6_K the 4-row groups):
//   from memory, 128 matrices 1408 x 2048, in the host's slow minutes (~33 GB/s): Q4_K
//     1.04-1.20x as 4 spans (1.07 as 2), Q5_K 1.03-1.11x; Q6_K's lm_head (102400 x 2048)
//     1.13-1.33x as 2 spans, as 4 0.81-1.20; in a fast minute (~55 GB/s) Q6_K 0.89-0.95x;
//   from L3 (4096 x 2048: the arithmetic's rate), Q4_K 1.13-1.32x (a tile of 4 rows loads
//     each x step once for all 4), Q5_K 1.02-1.08x, Q6_K 0.95-0.98x.
// Q4_0 and Q5_0 are bound by their arithmetic even from memory (~28 GB/s) and ran
// 0.97-1.05x and 0.88-0.91x as spans, so they keep the groups. In the model (bench model
// tg64, 4-layer v2-lite GGUF): Q4_K_M 1.01-1.50x (median 1.09).
// Q8_0 read one row at a time (one stream per thread) until the memory's fast minutes
// showed its arithmetic: from L2 (one thread, 256 x 2048) the one-row tile runs 30-37 GB/s,
// 4 spans 1.30x (x's codes, offsets and scales loaded once for 4 rows; 2 spans 1.06x, 3
// 1.15x). From memory (2 threads, pairs alternating, binned by the pair's faster pass): the
// 102400 x 2048 lm_head 1.00x under 40 GB/s, 0.96x at 40-50, 1.10x at 50-60, 1.17x above;
// 128 matrices of 1408 x 2048 0.91x under 50 GB/s, 1.06x at 50-60. In the model (tg128 on
// the 4-layer Q8_0 GGUF, 8 rounds alternating) the decode read 0.87 of the paired probe
// in slow minutes (one row: 0.85) and 0.77-0.78 in fast ones (one row: 0.68).
// Q6_K went from 2 spans to 3 on a measurement that alternates two variants token by
// token inside one decode (the Q4_K_M GGUF, whose lm_head is Q6_K; median time ratio of
// 63 pairs per decode): 4 spans against 2 took 0.979 in fast minutes (15 decodes), 1.003 in
// slow ones (33); 3 against 4 0.993 in fast minutes (5), 0.988 in slower ones (55), 52 of
// the 60 below 1.
//
// Measured (2048 x 7168 from DRAM, 2 threads of a shared Xeon VM with AVX512_VNNI, so
// rough), m = 1: Q8_0 0.68 ms (23 GB/s), Q4_K 0.38 ms (22 GB/s), Q6_K 0.53 ms (23 GB/s),
// against the bf16 GEMV's 1.14 ms (26 GB/s); m = 16: Q4_K 2.4 ms (~97 GMAC/s), Q8_0 4.0,
// Q6_K 3.8 (~60 GMAC/s, bound by the four vector instructions per 64 products and x row
// plus the unpacking), bf16 (vdpbf16ps) 3.2.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/block_quant.h"
#include "kernels/iq4_xs_inl.h"
#include "kernels/iq_tables.h"
#include "kernels/matmul_internal.h"

namespace latte::matmul_internal {
namespace {

// Weight rows per row group, and x rows per tile.
constexpr int kBlockRows = 4;
constexpr int kBlockMaxM = 4;
// Software prefetch distance along each weight row's stream: its unit about 32 KiB of
// weights ahead, as the fp8 GEMV measured best for DRAM-resident rows (kPrefetchBytes
// in gemv_fp8_avx512.cc), into L2.
constexpr int64_t kBlockPrefetchBytes = int64_t{32} << 10;

inline uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// [a × 8, b × 8] from two f16 values (a in the low half of `two`).
inline __m512 SpreadTwoF16(uint32_t two) {
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(two)));
  return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                               _mm512_castps128_ps512(f));
}

// Lanes [scale[a] × 8, scale[b] × 8] of a 16-float vector.
template <int A, int B> inline __m512 PairLanes(__m512 v) {
  return _mm512_permutexvar_ps(_mm512_set_epi32(B, B, B, B, B, B, B, B, A, A, A, A, A, A, A, A), v);
}

inline __m512i LowNibbles(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
inline __m512i HighNibbles(__m512i v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F)); }

// The 64 4-bit codes of two 32-value blocks whose 16 bytes a and b (Q4_0's, Q5_0's, IQ4_NL's
// qs: code j < 16 the low nibble of byte j, code j + 16 its high nibble) stand in 128-bit
// lanes [a, a, b, b], in order: lanes 1 and 3 shifted by 4, all masked to 4 bits.
inline __m512i PairedLaneNibbles(__m512i t) {
  return LowNibbles(_mm512_srlv_epi64(t, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)));
}

// The same from blocks at a and b; kHalf: only a's (b's codes 0).
template <bool kHalf> inline __m512i TwoBlockNibbles(const uint8_t* a, const uint8_t* b) {
  const __m128i qa = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  const __m128i qb = kHalf ? _mm_setzero_si128() : _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  return PairedLaneNibbles(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_broadcast_i32x4(qa), qb, 2), qb, 3));
}

// IQ4_NL's 16 levels (kIq4Levels) in each 128-bit lane, the table vpshufb looks indices up
// in: the int8 levels, or for vpdpbusd (kVnni) the levels + 128 (sign bit flipped: unsigned,
// 1 .. 241), as Q8_0's codes there.
template <bool kVnni> inline __m512i Iq4LevelTable() {
  __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Levels));
  if constexpr (kVnni) t = _mm_xor_si128(t, _mm_set1_epi8(static_cast<char>(0x80)));
  return _mm512_broadcast_i32x4(t);
}

// One 256-bit half's HighBits as a GFNI bit matrix: result bit o (in kMask) of each byte
// is bit o - R of the same byte (R taken as a rotation of the 64-bit lane, which for the
// formats' moves never crosses a byte), the other bits 0. vgf2p8affineqb takes result
// bit o from row byte 7 - o of the lane's matrix.
template <int R, int kMask> constexpr long long HighBitsMatrix() {
  uint64_t m = 0;
  for (int o = 0; o < 8; ++o) {
    if ((kMask >> o & 1) == 0) continue;
    const int from = R < 32 ? o - R : o + (64 - R);
    if (from < 0 || from > 7) throw "a HighBits move that leaves its byte";  // not constant: a compile error
    m |= (uint64_t{1} << from) << (8 * (7 - o));
  }
  return static_cast<long long>(m);
}

// Bits of `bits` (each 256-bit half rotated left within its 64-bit lanes by R0, R1) that
// land on kMask: how a qh bit (pair) moves onto its code's bit 4 (and 5). kGfni: the
// same bits by one GF(2) affine byte transform (GFNI) in place of a rotate and a mask;
// from L2 on Zen 4 the Q6_K tile runs ~6% faster so.
template <int R0, int R1, int kMask, bool kGfni> inline __m512i HighBits(__m512i bits) {
  if constexpr (kGfni) {
    constexpr long long m0 = HighBitsMatrix<R0, kMask>(), m1 = HighBitsMatrix<R1, kMask>();
    return _mm512_gf2p8affine_epi64_epi8(bits, _mm512_set_epi64(m1, m1, m1, m1, m0, m0, m0, m0), 0);
  } else {
    const __m512i rotated = _mm512_rolv_epi64(bits, _mm512_set_epi64(R1, R1, R1, R1, R0, R0, R0, R0));
    return _mm512_and_si512(rotated, _mm512_set1_epi8(static_cast<char>(kMask)));
  }
}

// Q4_K / Q5_K's 8 scales and 8 mins as f32: lanes 0-7 d·sc[j], lanes 8-15 -dmin·m[j]
// (ScaleMinK4 for all j at once: byte shuffles of the 12 packed bytes).
inline __m512 ScalesMinsK4(const uint8_t* block) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + block_layout::kQ4KScales));
  // Low bits: sc[j<4] = b[j] & 63, sc[j>=4] = b[j+4] & 15; m[j<4] = b[j+4] & 63, m[j>=4] = b[j+4] >> 4.
  const __m128i t = _mm_shuffle_epi8(b, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i low = _mm_or_si128(
      _mm_and_si128(t, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0)),
      _mm_and_si128(_mm_srli_epi16(t, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15)));
  // High bits of j >= 4: sc from b[j-4] >> 6, m from b[j] >> 6, onto bits 4-5.
  const __m128i u = _mm_shuffle_epi8(b, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  const __m128i high = _mm_and_si128(_mm_srli_epi16(u, 2), _mm_set1_epi8(0x30));
  const __m512 codes = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_or_si128(low, high)));
  uint32_t dm;
  std::memcpy(&dm, block, sizeof dm);
  __m512 mult = SpreadTwoF16(dm);                                                              // [d × 8, dmin × 8]
  mult = _mm512_mask_sub_ps(mult, static_cast<__mmask16>(0xFF00), _mm512_setzero_ps(), mult);  // -dmin
  return _mm512_mul_ps(codes, mult);
}

struct FormatQ8_0 {
  static constexpr int kSpansM1 = 4;
  static constexpr int kSteps = 1;
  static constexpr int64_t kUnitValues = 64;
  static constexpr size_t kUnitBytes = 68;
  static constexpr bool kHasMin = false;
  static constexpr bool kSignedCodes = true;
  static constexpr bool Bias(bool vnni) { return vnni; }
  struct Unit {
    __m512i w;
    __m512 ws;
  };
  template <bool kVnni, bool kHalf> static Unit Load(const uint8_t* p) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    const __m256i b = kHalf ? _mm256_setzero_si256() : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 36));
    __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
    if constexpr (kVnni) w = _mm512_xor_si512(w, _mm512_set1_epi8(static_cast<char>(0x80)));
    const uint32_t d = Load16(p) | (kHalf ? 0u : uint32_t{Load16(p + 34)} << 16);
    return {w, SpreadTwoF16(d)};
  }
  template <int S> static void Step(const Unit& u, __m512i& w, __m512& ws) {
    w = u.w;
    ws = u.ws;
  }
};

struct FormatQ4_0 {
  static constexpr int kSpansM1 = 0;
  static constexpr int kSteps = 1;
  static constexpr int64_t kUnitValues = 64;
  static constexpr size_t kUnitBytes = 36;
  static constexpr bool kHasMin = false;
  static constexpr bool kSignedCodes = false;
  static constexpr bool Bias(bool) { return true; }
  struct Unit {
    __m512i w;
    __m512 ws;
  };
  template <bool kVnni, bool kHalf> static Unit Load(const uint8_t* p) {
    const __m512i w = TwoBlockNibbles<kHalf>(p + block_layout::kQ4_0Qs, p + 18 + block_layout::kQ4_0Qs);
    const uint32_t d = Load16(p) | (kHalf ? 0u : uint32_t{Load16(p + 18)} << 16);
    return {w, SpreadTwoF16(d)};
  }
  template <int S> static void Step(const Unit& u, __m512i& w, __m512& ws) {
    w = u.w;
    ws = u.ws;
  }
};

// Q4_K (kFive false) and Q5_K; kGfni: Q5_K's qh bits by HighBits' GFNI form.
template <bool kFive, bool kGfni = false> struct FormatK4K5 {
  static constexpr int kSpansM1 = 4;
  static constexpr int kSteps = 4;
  static constexpr int64_t kUnitValues = 256;
  static constexpr size_t kUnitBytes = kFive ? 176 : 144;
  static constexpr bool kHasMin = true;
  static constexpr bool kSignedCodes = false;
  static constexpr bool Bias(bool) { return false; }
  struct Unit {
    const uint8_t* qs;
    __m512i qh;  // Q5_K: the 32 qh bytes in both 256-bit halves
    __m512 sm;   // ScalesMinsK4
  };
  template <bool kVnni, bool kHalf> static Unit Load(const uint8_t* p) {
    Unit u;
    u.sm = ScalesMinsK4(p);
    if constexpr (kFive) {
      u.qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + block_layout::kQ5KQh)));
      u.qs = p + block_layout::kQ5KQs;
    } else {
      u.qh = _mm512_setzero_si512();
      u.qs = p + block_layout::kQ4KQs;
    }
    return u;
  }
  // Step S = 2h + i: nibble i of qs[64h .. 64h + 64), sub-blocks (4h + i, 4h + 2 + i).
  template <int S> static void Step(const Unit& u, __m512i& w, __m512& ws) {
    constexpr int h = S / 2, i = S % 2;
    const __m512i v = _mm512_loadu_si512(u.qs + 64 * h);
    w = i == 0 ? LowNibbles(v) : HighNibbles(v);
    if constexpr (kFive) {  // qh bits 4h + i (first half) and 4h + 2 + i onto bit 4
      w = _mm512_or_si512(w, HighBits<(4 - (4 * h + i)) & 63, (4 - (4 * h + 2 + i)) & 63, 0x10, kGfni>(u.qh));
    }
    ws = StepLanes<S>(u.sm);
  }
  // Lanes [v[a] × 8, v[b] × 8] of a per-sub-block vector for step S's sub-blocks a, b.
  template <int S> static __m512 StepLanes(__m512 v) {
    return PairLanes<4 * (S / 2) + S % 2, 4 * (S / 2) + 2 + S % 2>(v);
  }
  // The unit's scales and mins (Load's sm), for Tile's per-unit product with x's.
  static __m512 SubScales(const Unit& u) { return u.sm; }
};

// kGfni: the qh bit pairs by HighBits' GFNI form.
template <bool kGfni = false> struct FormatQ6_K {
  static constexpr int kSpansM1 = 3;
  static constexpr int kSteps = 4;
  static constexpr int64_t kUnitValues = 256;
  static constexpr size_t kUnitBytes = 210;
  static constexpr bool kHasMin = false;
  static constexpr bool kSignedCodes = false;
  static constexpr bool Bias(bool) { return true; }
  struct Unit {
    const uint8_t* p;
    __m512 s;  // d·scales[s], 16 sub-blocks
  };
  template <bool kVnni, bool kHalf> static Unit Load(const uint8_t* p) {
    const float d = _cvtsh_ss(Load16(p + block_layout::kQ6KD));
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + block_layout::kQ6KScales));
    return {p, _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)))};
  }
  // Step S = 2h + i: values 64S .. 64S + 64 = nibble i of ql[64h ..] with qh[32h ..] bits
  // (4i, 4i + 1) for the first 32 and (4i + 2, 4i + 3) for the second onto bits 4-5.
  template <int S> static void Step(const Unit& u, __m512i& w, __m512& ws) {
    constexpr int h = S / 2, i = S % 2;
    const __m512i ql = _mm512_loadu_si512(u.p + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.p + block_layout::kQ6KQh + 32 * h)));
    const __m512i low = i == 0 ? LowNibbles(ql) : HighNibbles(ql);
    w = _mm512_or_si512(low, HighBits<(4 - 4 * i) & 63, (2 - 4 * i) & 63, 0x30, kGfni>(qh));
    ws = StepLanes<S>(u.s);
  }
  // Lanes [v[4S] × 4, v[4S + 1] × 4, v[4S + 2] × 4, v[4S + 3] × 4] of a per-sub-block vector.
  template <int S> static __m512 StepLanes(__m512 v) {
    constexpr int a = 4 * S;
    return _mm512_permutexvar_ps(_mm512_set_epi32(a + 3, a + 3, a + 3, a + 3, a + 2, a + 2, a + 2, a + 2, a + 1, a + 1,
                                                  a + 1, a + 1, a, a, a, a),
                                 v);
  }
  // The unit's sub-block scales d·scales[j] (Load's s), for Tile's per-unit product with dx.
  static __m512 SubScales(const Unit& u) { return u.s; }
};

// Q3_K (kQ2 false) and Q2_K, in Q6_K's steps: step S = 2h + i (h = S / 2) holds values
// 64S .. 64S + 64, whose 2-bit fields are bits 2j, 2j + 1 of qs[32h ..] with j = 2i in the
// first 32 values and 2i + 1 in the second. Q3_K adds hmask's bit 4h + j onto bit 2, zero
// point 4 (bias -4·sum x per lane), scales d·(sc - 32); Q2_K's scales d·(sc & 15) and mins
// -dmin·(sc >> 4), one per 16 values, multiply x's dx and dx·sum q per 16 values
// (PreparedX::block_sum: 32 floats per 256 values).
template <bool kQ2, bool kGfni = false> struct FormatK16 {
  static constexpr int kSpansM1 = 3;
  static constexpr int kSteps = 4;
  static constexpr int64_t kUnitValues = 256;
  static constexpr size_t kUnitBytes = kQ2 ? 84 : 110;
  static constexpr bool kHasMin = false;  // Q2_K's mins are per 16 values: kMin16<F> below
  static constexpr bool kSignedCodes = false;
  static constexpr bool Bias(bool) { return !kQ2; }
  struct Unit {
    const uint8_t* p;
    __m512 s;   // the 16 sub-blocks' scales
    __m512 mn;  // Q2_K: the 16 sub-blocks' -dmin·m
  };
  // Q3_K's 16 scale codes minus 32, byte s = sub-block s's scale (block_quant.h's Q3KScale).
  static __m128i Q3Scales(const uint8_t* scales) {
    const std::array<uint32_t, 4> w = Q3KScaleWords(scales);
    const __m128i codes =
        _mm_setr_epi32(static_cast<int>(w[0]), static_cast<int>(w[1]), static_cast<int>(w[2]), static_cast<int>(w[3]));
    return _mm_sub_epi8(codes, _mm_set1_epi8(32));
  }
  template <bool kVnni, bool kHalf> static Unit Load(const uint8_t* p) {
    Unit u;
    u.p = p;
    if constexpr (kQ2) {
      const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      const float d = _cvtsh_ss(Load16(p + block_layout::kQ2KD)), dmin = _cvtsh_ss(Load16(p + block_layout::kQ2KDmin));
      u.s = _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_and_si512(bytes, _mm512_set1_epi32(15))));
      u.mn = _mm512_mul_ps(_mm512_set1_ps(-dmin), _mm512_cvtepi32_ps(_mm512_srli_epi32(bytes, 4)));
    } else {
      const float d = _cvtsh_ss(Load16(p + block_layout::kQ3KD));
      u.s = _mm512_mul_ps(_mm512_set1_ps(d),
                          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(Q3Scales(p + block_layout::kQ3KScales))));
      u.mn = _mm512_setzero_ps();
    }
    return u;
  }
  template <int S> static void Step(const Unit& u, __m512i& w, __m512& ws) {
    constexpr int h = S / 2, j = 2 * (S % 2);
    const uint8_t* qs = u.p + (kQ2 ? block_layout::kQ2KQs : block_layout::kQ3KQs);
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * h)));
    w = _mm512_and_si512(
        _mm512_srlv_epi64(v, _mm512_set_epi64(2 * j + 2, 2 * j + 2, 2 * j + 2, 2 * j + 2, 2 * j, 2 * j, 2 * j, 2 * j)),
        _mm512_set1_epi8(3));
    if constexpr (!kQ2) {  // hmask (at 0) bits 4h + j, 4h + j + 1 onto bit 2
      const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.p)));
      w = _mm512_or_si512(w, HighBits<(2 - (4 * h + j)) & 63, (2 - (4 * h + j + 1)) & 63, 0x04, kGfni>(hm));
    }
    ws = StepLanes<S>(u.s);
  }
  template <int S> static __m512 StepLanes(__m512 v) { return FormatQ6_K<>::StepLanes<S>(v); }
  static __m512 SubScales(const Unit& u) { return u.s; }
  static __m512 Mins(const Unit& u) { return u.mn; }
};

// Q6_K's, Q3_K's and Q2_K's scales are per 16 values (the others' per 32 or per block).
template <class F> constexpr bool kSixteenValueScales = false;
template <bool kGfni> constexpr bool kSixteenValueScales<FormatQ6_K<kGfni>> = true;
template <bool kQ2, bool kGfni> constexpr bool kSixteenValueScales<FormatK16<kQ2, kGfni>> = true;
// Formats whose scales Tile multiplies by x's dx once per 256 values (PreparedX::block_sum),
// a step then taking its lanes (StepLanes): the K formats and IQ4_XS.
template <class F> constexpr bool kFoldDx = requires(const typename F::Unit& u) { F::SubScales(u); };
// Formats with a min per 16 values (Q2_K): block_sum holds 32 floats per 256 values.
template <class F> constexpr bool kMin16 = false;
template <bool kGfni> constexpr bool kMin16<FormatK16<true, kGfni>> = true;

// Q5_0 (kMin false: x = d·(q - 16), bias -16·sum x) and Q5_1 (x = d·q + m; only the GEMM,
// gemm_block_avx512_vnni.cc, takes it): a unit is two 32-value blocks as for Q4_0, each
// nibble with its qh bit on bit 4.
template <bool kMin> struct FormatQ5 {
  static constexpr int kSpansM1 = 0;
  static constexpr int kSteps = 1;
  static constexpr int64_t kUnitValues = 64;
  static constexpr size_t kBlockBytes = kMin ? 24 : 22;
  static constexpr size_t kUnitBytes = 2 * kBlockBytes;
  static constexpr bool kHasMin = kMin;
  static constexpr bool kSignedCodes = false;
  static constexpr bool Bias(bool) { return !kMin; }
  static constexpr int kQh = kMin ? block_layout::kQ5_1Qh : block_layout::kQ5_0Qh;
  static constexpr int kQs = kMin ? block_layout::kQ5_1Qs : block_layout::kQ5_0Qs;
  struct Unit {
    __m512i w;
    __m512 ws;
    __m512 sm;  // Q5_1: lanes 8 and 9 the two blocks' m (as K formats keep -dmin·m in lanes 8..15)
  };
  template <bool kVnni, bool kHalf> static Unit Load(const uint8_t* p) {
    const uint8_t* b = p + kBlockBytes;
    const __m512i low = TwoBlockNibbles<kHalf>(p + kQs, b + kQs);
    uint32_t ha, hb = 0;
    std::memcpy(&ha, p + kQh, sizeof ha);
    if (!kHalf) std::memcpy(&hb, b + kQh, sizeof hb);
    const __mmask64 high = _cvtu64_mask64(uint64_t{ha} | uint64_t{hb} << 32);  // bit j: value j's fifth bit
    const __m512i w = _mm512_or_si512(low, _mm512_maskz_mov_epi8(high, _mm512_set1_epi8(0x10)));
    const uint32_t d = Load16(p) | (kHalf ? 0u : uint32_t{Load16(b)} << 16);
    __m512 sm = _mm512_setzero_ps();
    if constexpr (kMin) {
      const uint32_t m =
          Load16(p + block_layout::kQ5_1M) | (kHalf ? 0u : uint32_t{Load16(b + block_layout::kQ5_1M)} << 16);
      sm = _mm512_insertf32x4(_mm512_setzero_ps(), _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(m))), 2);
    }
    return {w, SpreadTwoF16(d), sm};
  }
  template <int S> static void Step(const Unit& u, __m512i& w, __m512& ws) {
    w = u.w;
    ws = u.ws;
  }
};

// IQ4_NL: a block laid out as Q4_0's (d, then 16 bytes of nibbles), the nibbles indices
// looked up (vpshufb) into their levels: signed codes as Q8_0's (VNNI: + 128, bias
// -128·sum x).
static_assert(block_layout::kIQ4NLQs == block_layout::kQ4_0Qs);
struct FormatIQ4_NL : FormatQ4_0 {
  static constexpr bool kSignedCodes = true;
  static constexpr bool Bias(bool vnni) { return vnni; }
  template <bool kVnni, bool kHalf> static Unit Load(const uint8_t* p) {
    Unit u = FormatQ4_0::Load<kVnni, kHalf>(p);
    u.w = _mm512_shuffle_epi8(Iq4LevelTable<kVnni>(), u.w);
    return u;
  }
};

// IQ4_XS's 8 sub-block scales d·(ls[s] - 32) in lanes 0..7.
inline __m256 IQ4XSScales(const uint8_t* p) {
  return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(Load16(p))), _mm256_cvtepi32_ps(IQ4XSScaleCodes(p)));
}

// IQ4_XS: unit = 256 values, 4 steps of 64 in order; step S is sub-blocks 2S and 2S + 1,
// each laid out as an IQ4_NL block's indices (qs[32S ..]), looked up as IQ4_NL's.
struct FormatIQ4_XS {
  static constexpr int kSpansM1 = 4;
  static constexpr int kSteps = 4;
  static constexpr int64_t kUnitValues = 256;
  static constexpr size_t kUnitBytes = 136;
  static constexpr bool kHasMin = false;
  static constexpr bool kSignedCodes = true;
  static constexpr bool Bias(bool vnni) { return vnni; }
  struct Unit {
    const uint8_t* qs;
    __m512 s;  // lanes 0..7: the sub-blocks' scales
    __m512i table;
  };
  template <bool kVnni, bool kHalf> static Unit Load(const uint8_t* p) {
    return {p + block_layout::kIQ4XSQs, _mm512_zextps256_ps512(IQ4XSScales(p)), Iq4LevelTable<kVnni>()};
  }
  // The sub-block scales (lanes 0..7; 8..15 zero), for Tile's per-unit product with x's dx
  // per block (PreparedX::block_sum's K layout).
  static __m512 SubScales(const Unit& u) { return u.s; }
  template <int S> static __m512 StepLanes(__m512 v) { return PairLanes<2 * S, 2 * S + 1>(v); }
  // The step's 32 contiguous bytes: one load into both 256-bit halves, then [a, a, b, b] by
  // one vshufi64x2 (TwoBlockNibbles' two loads and two inserts measured no faster).
  template <int S> static void Step(const Unit& u, __m512i& w, __m512& ws) {
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.qs + 32 * S)));
    w = _mm512_shuffle_epi8(u.table, PairedLaneNibbles(_mm512_shuffle_i64x2(v, v, 0x50)));
    ws = StepLanes<S>(u.s);
  }
};

// ---- the lattice formats (IQ2_XXS, IQ3_XXS, IQ1_S) ----------------------------------------
// A unit is one 256-value block, 4 steps of 64 values (groups 2S and 2S + 1 of 32). A step's
// codes are its codebook entries' bytes (iq_tables.h) by scalar loads (on Zen 5 1.25x
// IQ2_XXS's and 1.2x IQ1_S's GEMV with a vpgatherqq, IQ3_XXS's level), signed by a
// 64-bit mask (IQ2_XXS, IQ3_XXS) or offset by the group's delta (IQ1_S); then as Q8_0's
// signed codes (VNNI: + 128, bias -128·sum x). The 8 group scales are formed once per unit
// in the portable path's order of f32 operations.

// The 64 signs of two groups whose sign words are wa, wb (4 fields of 7 bits each, at bits
// 7k): byte 4g + k of the mask is field k of group g with its parity as bit 7. pdep spreads
// the 8 fields into the bytes' low 7 bits; three shift-xors leave each byte's parity in its
// bit 0 (the bits shifted in from the next byte land above bit 3, then 1, then 0).
inline __mmask64 LatticeSigns(uint32_t wa, uint32_t wb) {
  const uint64_t fields = (uint64_t{wa} & 0x0FFFFFFF) | (uint64_t{wb} & 0x0FFFFFFF) << 28;
  const uint64_t bytes = _pdep_u64(fields, 0x7F7F7F7F7F7F7F7Full);
  uint64_t p = bytes ^ (bytes >> 4);
  p ^= p >> 2;
  p ^= p >> 1;
  return _cvtu64_mask64(bytes | (p & 0x0101010101010101ull) << 7);
}

// What a step's signed codes are xor-ed with: for vpdpbusd (kVnni) 128 (the sign bit
// flipped: + 128), else 0.
template <bool kVnni> inline __m512i LatticeFlip() { return _mm512_set1_epi8(static_cast<char>(kVnni ? 0x80 : 0)); }

// The groups' scales d·(0.5 + (w >> 28))·step from the 8 words w (as Iq2xxsCodes / Iq3xxsCodes).
inline __m512 LatticeScales(const uint8_t* p, __m256i w, float step) {
  const __m256 ls = _mm256_cvtepi32_ps(_mm256_srli_epi32(w, 28));
  const __m256 s =
      _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(Load16(p))), _mm256_add_ps(_mm256_set1_ps(0.5f), ls)),
                    _mm256_set1_ps(step));
  return _mm512_zextps256_ps512(s);
}

struct FormatLatticeBase {
  static constexpr int kSpansM1 = 4;
  static constexpr int kSteps = 4;
  static constexpr int64_t kUnitValues = 256;
  static constexpr bool kHasMin = false;
  static constexpr bool kSignedCodes = true;
  static constexpr bool Bias(bool vnni) { return vnni; }
  struct Unit {
    const uint8_t* p;
    __m512 s;      // lanes 0..7: the groups' scales
    __m512i flip;  // LatticeFlip
  };
  template <int S> static __m512 StepLanes(__m512 v) { return PairLanes<2 * S, 2 * S + 1>(v); }
};

// IQ2_XXS: per group 8 bytes (4 entry indices, then the sign and scale word).
struct FormatIQ2_XXS : FormatLatticeBase {
  static constexpr size_t kUnitBytes = 66;
  template <bool kVnni, bool kHalf> static Unit Load(const uint8_t* p) {
    // The words: odd dwords of the 64 bytes after d.
    const __m512i all = _mm512_loadu_si512(p + block_layout::kIQ2XXSQs);
    const __m256i w = _mm512_castsi512_si256(
        _mm512_permutexvar_epi32(_mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0), all));
    return {p, LatticeScales(p, w, 0.25f), LatticeFlip<kVnni>()};
  }
  template <int S> static void Step(const Unit& u, __m512i& w, __m512& ws) {
    const uint8_t* q = u.p + block_layout::kIQ2XXSQs + 16 * S;  // groups 2S, 2S + 1
    uint32_t wa, wb;
    std::memcpy(&wa, q + 4, 4);
    std::memcpy(&wb, q + 12, 4);
    const long long* t = reinterpret_cast<const long long*>(iq_tables::kIq2xxsBytes.data());
    const __m512i mag = _mm512_setr_epi64(t[q[0]], t[q[1]], t[q[2]], t[q[3]], t[q[8]], t[q[9]], t[q[10]], t[q[11]]);
    const __m512i codes = _mm512_mask_sub_epi8(mag, LatticeSigns(wa, wb), _mm512_setzero_si512(), mag);
    w = _mm512_xor_si512(codes, u.flip);
    ws = StepLanes<S>(u.s);
  }
};

// IQ3_XXS: 64 entry index bytes (8 a group), then the 8 sign and scale words.
struct FormatIQ3_XXS : FormatLatticeBase {
  static constexpr size_t kUnitBytes = 98;
  template <bool kVnni, bool kHalf> static Unit Load(const uint8_t* p) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + block_layout::kIQ3XXSW));
    return {p, LatticeScales(p, w, 0.5f), LatticeFlip<kVnni>()};
  }
  template <int S> static void Step(const Unit& u, __m512i& w, __m512& ws) {
    const uint8_t* q = u.p + block_layout::kIQ3XXSQs + 16 * S;
    const int* t = reinterpret_cast<const int*>(iq_tables::kIq3xxsBytes.data());
    const __m512i mag = _mm512_setr_epi32(t[q[0]], t[q[1]], t[q[2]], t[q[3]], t[q[4]], t[q[5]], t[q[6]], t[q[7]],
                                          t[q[8]], t[q[9]], t[q[10]], t[q[11]], t[q[12]], t[q[13]], t[q[14]], t[q[15]]);
    uint32_t wa, wb;
    std::memcpy(&wa, u.p + block_layout::kIQ3XXSW + 8 * S, 4);
    std::memcpy(&wb, u.p + block_layout::kIQ3XXSW + 8 * S + 4, 4);
    const __m512i codes = _mm512_mask_sub_epi8(mag, LatticeSigns(wa, wb), _mm512_setzero_si512(), mag);
    w = _mm512_xor_si512(codes, u.flip);
    ws = StepLanes<S>(u.s);
  }
};

// IQ1_S: 32 index bytes (4 a group), then 8 u16 qh (3 high index bits per entry, the scale,
// the delta's sign); codes 8·grid ± 1, scale dl / 8.
struct FormatIQ1_S : FormatLatticeBase {
  static constexpr size_t kUnitBytes = 50;
  template <bool kVnni, bool kHalf> static Unit Load(const uint8_t* p) {
    const __m256i qh =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + block_layout::kIQ1SQh)));
    const __m256i mult = _mm256_add_epi32(
        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(qh, 12), _mm256_set1_epi32(7)), 1), _mm256_set1_epi32(1));
    const __m256 dl = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(Load16(p))), _mm256_cvtepi32_ps(mult));
    return {p, _mm512_zextps256_ps512(_mm256_mul_ps(dl, _mm256_set1_ps(0.125f))), LatticeFlip<kVnni>()};
  }
  template <int S> static void Step(const Unit& u, __m512i& w, __m512& ws) {
    const uint8_t* q = u.p + block_layout::kIQ1SQs + 8 * S;
    const uint32_t ha = Load16(u.p + block_layout::kIQ1SQh + 4 * S),
                   hb = Load16(u.p + block_layout::kIQ1SQh + 4 * S + 2);
    const long long* t = reinterpret_cast<const long long*>(iq_tables::kIq1sBytes.data());
    auto entry = [&](int k, uint32_t h) { return t[q[k] | ((h >> (3 * (k % 4))) & 7) << 8]; };
    const __m512i grid = _mm512_setr_epi64(entry(0, ha), entry(1, ha), entry(2, ha), entry(3, ha), entry(4, hb),
                                           entry(5, hb), entry(6, hb), entry(7, hb));
    // delta: +1, or -1 where the group's qh bit 15 is set (bytes 0..31 group a, 32..63 b).
    const __mmask64 negative = (ha & 0x8000 ? 0xFFFFFFFFull : 0) | (hb & 0x8000 ? 0xFFFFFFFF00000000ull : 0);
    const __m512i delta = _mm512_mask_mov_epi8(_mm512_set1_epi8(1), _cvtu64_mask64(negative), _mm512_set1_epi8(-1));
    const __m512i codes = _mm512_add_epi8(grid, delta);
    w = _mm512_xor_si512(codes, u.flip);
    ws = StepLanes<S>(u.s);
  }
};

// acc + the 16 lane sums of 64 unsigned weight codes times 64 signed x codes.
template <bool kVnni> inline __m512i DotU8S8(__m512i acc, __m512i w, __m512i x) {
  if constexpr (kVnni) {
    return _mm512_dpbusd_epi32(acc, w, x);
  } else {  // pairs of u8·s8 into int16 (no saturation: codes <= 63, |x| <= 127), then fours
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w, x), _mm512_set1_epi16(1)));
  }
}

// The same for signed weight codes (Q8_0 without VNNI): |w| times x with w's sign.
inline __m512i DotS8S8(__m512i acc, __m512i w, __m512i x) {
  const __m512i sx = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_abs_epi8(w), sx), _mm512_set1_epi16(1)));
}

template <typename Fn, int... S> inline void ForSteps(Fn&& fn, std::integer_sequence<int, S...>) {
  (fn.template operator()<S>(), ...);
}

// y[i][r] = x row i0 + i · weight row r for i < M, r < R. w: row 0 of the tile; row r at
// w + r · row_stride (adjacent rows, or spans' rows). kPrefetch: issue the software
// prefetch prefetch_bytes ahead of each row (the row groups'; spans go without).
template <class F, bool kVnni, int M, int R, bool kPrefetch = true>
void Tile(const PreparedX& x, int64_t i0, const uint8_t* w, size_t row_stride, int64_t units, bool half_unit,
          int64_t prefetch_bytes, float* y, int64_t ldy) {
  constexpr bool kBias = F::Bias(kVnni);
  constexpr int64_t kSumsPerUnit = kMin16<F> ? 32 : 16;  // its floats per 256 values
  __m512 acc[M][R];
  const int8_t* xq[M];
  const float* xs[M];
  const int32_t* xb[M];
  const float* xm[M];
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
    xq[i] = x.q + (i0 + i) * x.ldq;
    xs[i] = x.scale + (i0 + i) * x.lds;
    xb[i] = kBias ? x.bias + (i0 + i) * x.lds : nullptr;
    xm[i] = kFoldDx<F> ? x.block_sum + (i0 + i) * x.ldb : nullptr;
  }
  auto unit = [&]<bool kHalf>(int64_t u) {
    typename F::Unit wu[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = w + r * row_stride + u * F::kUnitBytes;
      if constexpr (kPrefetch) {
        for (size_t off = 0; off < F::kUnitBytes; off += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(p + prefetch_bytes + off), _MM_HINT_T1);
        }
      }
      wu[r] = F::template Load<kVnni, kHalf>(p);
    }
    // The K formats: the unit's scales times x's, per (x row, weight row), and a step's FMA
    // takes its sub-blocks' lanes. Q4_K / Q5_K: lanes 0..7 d·sc[j]·dx[j], lanes 8..15 the
    // mins -dmin·m[j] · (dx · sum q)[j]; Q6_K: lane j d·scales[j]·dx of sub-block j.
    __m512 wsx[kFoldDx<F> ? M : 1][kFoldDx<F> ? R : 1];
    if constexpr (kFoldDx<F>) {
      for (int i = 0; i < M; ++i) {
        const __m512 xv = _mm512_load_ps(xm[i] + kSumsPerUnit * u);
        for (int r = 0; r < R; ++r) wsx[i][r] = _mm512_mul_ps(F::SubScales(wu[r]), xv);
      }
    }
    if constexpr (kMin16<F>) {  // -dmin·m per 16 values · dx · sum q per 16 values
      for (int i = 0; i < M; ++i) {
        const __m512 sums = _mm512_load_ps(xm[i] + kSumsPerUnit * u + 16);
        for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(F::Mins(wu[r]), sums, acc[i][r]);
      }
    }
    ForSteps(
        [&]<int S>() {
          const int64_t t = u * F::kSteps + S;
          __m512i wv[R];
          __m512 ws[R];
          for (int r = 0; r < R; ++r) F::template Step<S>(wu[r], wv[r], ws[r]);
          for (int i = 0; i < M; ++i) {
            const __m512i xv = _mm512_load_si512(xq[i] + 64 * t);
            const __m512i bv = kBias ? _mm512_load_si512(xb[i] + 16 * t) : _mm512_setzero_si512();
            const __m512 sv = kFoldDx<F> ? _mm512_setzero_ps() : _mm512_load_ps(xs[i] + 16 * t);
            for (int r = 0; r < R; ++r) {
              __m512i isum;
              if constexpr (F::kSignedCodes && !kVnni) {
                isum = DotS8S8(bv, wv[r], xv);
              } else {
                isum = DotU8S8<kVnni>(bv, wv[r], xv);
              }
              __m512 scale;
              if constexpr (kFoldDx<F>) {
                scale = F::template StepLanes<S>(wsx[i][r]);
              } else {
                scale = _mm512_mul_ps(ws[r], sv);
              }
              acc[i][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[i][r]);
            }
          }
        },
        std::make_integer_sequence<int, F::kSteps>{});
    if constexpr (F::kHasMin) {  // lanes 8..15: -dmin·m[j] · dx · sum q per block
      for (int i = 0; i < M; ++i) {
        for (int r = 0; r < R; ++r) acc[i][r] = _mm512_mask_add_ps(acc[i][r], 0xFF00, acc[i][r], wsx[i][r]);
      }
    }
  };
  for (int64_t u = 0; u < units; ++u) unit.template operator()<false>(u);
  if (half_unit) unit.template operator()<true>(units);
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) y[i * ldy + r] = _mm512_reduce_add_ps(acc[i][r]);
  }
}

// Weight rows per tile for M rows of x: M·R accumulators plus R units' registers stay
// within the 32 registers.
template <int M> constexpr int BlockTileRows() { return M <= 2 ? 4 : 2; }

struct RowGeometry {
  size_t row_bytes;
  int64_t units;
  bool half_unit;
  int64_t prefetch_bytes;
};

// R weight rows (kBlockRows or 1) against every row of x.
template <class F, bool kVnni, int R>
void RowGroup(const PreparedX& x, const RowGeometry& g, const uint8_t* w, float* y, int64_t ldy) {
  for (int64_t i = 0; i < x.m; i += kBlockMaxM) {
    float* yi = y + i * ldy;
    auto split = [&]<int M>() {
      constexpr int kSub = BlockTileRows<M>() < R ? BlockTileRows<M>() : R;
      for (int r = 0; r < R; r += kSub) {
        Tile<F, kVnni, M, kSub>(x, i, w + r * g.row_bytes, g.row_bytes, g.units, g.half_unit, g.prefetch_bytes, yi + r,
                                ldy);
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

// One row of x against rows [n0, n1) as F::kSpansM1 spans side by side (ForSpanTiles,
// matmul_internal.h), without the software prefetch; returns the first row no span holds.
template <class F, bool kVnni> int64_t SpanRows(const PreparedX& x, const RowGeometry& g, const uint8_t* base,
                                                int64_t n0, int64_t n1, float* y, int64_t ldy) {
  constexpr int S = F::kSpansM1;
  return ForSpanTiles<1, S>(n0, n1, y, ldy, [&](int64_t row, int64_t span, float* ys) {
    Tile<F, kVnni, 1, S, /*kPrefetch=*/false>(x, 0, base + row * g.row_bytes, span * g.row_bytes, g.units, g.half_unit,
                                              0, ys, S);
  });
}

template <class F, bool kVnni>
void FormatRows(const PreparedX& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  RowGeometry g;
  g.row_bytes = DTypeRowBytes(w.dtype, w.ld);
  g.units = w.cols / F::kUnitValues;
  g.half_unit = w.cols % F::kUnitValues != 0;  // Q8_0 / Q4_0: an odd number of blocks
  g.prefetch_bytes = std::max<int64_t>(kBlockPrefetchBytes / static_cast<int64_t>(g.row_bytes), kBlockRows) *
                     static_cast<int64_t>(g.row_bytes);
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  int64_t n = n0;
  if constexpr (F::kSpansM1 > 0) {
    if (x.m == 1) n = SpanRows<F, kVnni>(x, g, base, n0, n1, y, ldy);
  }
  for (; n + kBlockRows <= n1; n += kBlockRows) {
    RowGroup<F, kVnni, kBlockRows>(x, g, base + n * g.row_bytes, y + n, ldy);
  }
  for (; n < n1; ++n) RowGroup<F, kVnni, 1>(x, g, base + n * g.row_bytes, y + n, ldy);
}

template <bool kVnni>
void BlockRows(const PreparedX& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (w.dtype) {
    case DType::kQ8_0: FormatRows<FormatQ8_0, kVnni>(x, w, n0, n1, y, ldy); break;
    case DType::kQ4_0: FormatRows<FormatQ4_0, kVnni>(x, w, n0, n1, y, ldy); break;
    case DType::kQ4_K: FormatRows<FormatK4K5<false>, kVnni>(x, w, n0, n1, y, ldy); break;
    case DType::kQ5_K: FormatRows<FormatK4K5<true>, kVnni>(x, w, n0, n1, y, ldy); break;
    case DType::kQ6_K: FormatRows<FormatQ6_K<>, kVnni>(x, w, n0, n1, y, ldy); break;
    case DType::kQ5_0: FormatRows<FormatQ5<false>, kVnni>(x, w, n0, n1, y, ldy); break;
    case DType::kQ3_K: FormatRows<FormatK16<false>, kVnni>(x, w, n0, n1, y, ldy); break;
    case DType::kQ2_K: FormatRows<FormatK16<true>, kVnni>(x, w, n0, n1, y, ldy); break;
    case DType::kIQ4_NL: FormatRows<FormatIQ4_NL, kVnni>(x, w, n0, n1, y, ldy); break;
    case DType::kIQ4_XS: FormatRows<FormatIQ4_XS, kVnni>(x, w, n0, n1, y, ldy); break;
    case DType::kIQ2_XXS: FormatRows<FormatIQ2_XXS, kVnni>(x, w, n0, n1, y, ldy); break;
    case DType::kIQ3_XXS: FormatRows<FormatIQ3_XXS, kVnni>(x, w, n0, n1, y, ldy); break;
    case DType::kIQ1_S: FormatRows<FormatIQ1_S, kVnni>(x, w, n0, n1, y, ldy); break;
    // No AVX-512 kernel: PrepareX lays x out for AVX2 (BlockGemvIsaFor), whose kernel runs.
    case DType::kQ5_1: GemvBlockRowsAvx2(x, w, n0, n1, y, ldy); break;
    default: break;
  }
}

}  // namespace
}  // namespace latte::matmul_internal
