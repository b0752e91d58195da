// The AVX2 block formats' weight unpacking (gemv_block_avx2.cc's comment: codes, scales and
// zero points per format and 32-value slot), written once for the two translation units
// that read it: gemv_block_avx2.cc (the GEMV and the dequantization) and gemm_block_avx2.cc
// (the GEMM's panel packing). Everything here has internal linkage. Include only from
// files compiled with the AVX2 flags (CMakeLists.txt: -mavx2 -mfma -mf16c -mbmi2).
#pragma once

#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/block_quant.h"
#include "kernels/iq4_xs_inl.h"
#include "kernels/iq_tables.h"

namespace latte::matmul_internal {
namespace {

inline uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline __m256i LoadU256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i LoadU128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// The f16 at p in all 8 lanes.
inline __m256 BroadcastF16(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(Load16(p))));  // vpbroadcastw + vcvtph2ps
}

// The 16 bytes at p, low nibbles then high nibbles: one load into both 128-bit halves and
// a shift of the high half (vpsrlvd), which is one instruction fewer than shifting a copy and
// inserting it (on Haswell, whose vpsrlvd is 3 uops, about even).
inline __m256i Nibbles16(const uint8_t* p) {
  const __m256i q = _mm256_broadcastsi128_si256(LoadU128(p));
  return _mm256_and_si256(_mm256_srlv_epi32(q, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0F));
}

inline __m256i LowNibbles(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
inline __m256i HighNibbles(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }

// Bit B of every byte moved to bit T and masked by `mask` (16-bit shifts: with source and
// target inside [0, 8), bit T of each byte receives bit B of the same byte).
template <int B, int T> inline __m256i MoveBits(__m256i v, int mask) {
  __m256i s = v;
  if constexpr (T > B) s = _mm256_slli_epi16(v, T - B);
  if constexpr (T < B) s = _mm256_srli_epi16(v, B - T);
  return _mm256_and_si256(s, _mm256_set1_epi8(static_cast<char>(mask)));
}

struct FormatQ8_0 {
  static constexpr int kSlots = 1;
  static constexpr int kMaxCode = 128;  // |w|, the unsigned operand of vpmaddubsw
  static constexpr int64_t kUnitValues = 32;
  static constexpr size_t kUnitBytes = 34;
  static constexpr bool kHasMin = false;
  static constexpr bool kBlockMin = false;
  static constexpr bool kSignedCodes = true;
  static constexpr bool kBias = false;
  static constexpr bool kIntScale = false;
  using Scale = __m256;  // f32 per lane
  struct Unit {
    const uint8_t* p;
  };
  static Unit Load(const uint8_t* p) { return {p}; }
  // Slot H's 32 weight codes and the weight scale per lane.
  template <int H> static void Slot(const Unit& u, __m256i& w, __m256& ws) {
    w = LoadU256(u.p + block_layout::kQ8_0Qs);
    ws = BroadcastF16(u.p);
  }
};

struct FormatQ4_0 {
  static constexpr int kSlots = 1;
  static constexpr int kMaxCode = 15;
  static constexpr int64_t kUnitValues = 32;
  static constexpr size_t kUnitBytes = 18;
  static constexpr bool kHasMin = false;
  static constexpr bool kBlockMin = false;
  static constexpr bool kSignedCodes = false;
  static constexpr bool kBias = true;
  static constexpr bool kIntScale = false;
  using Scale = __m256;  // f32 per lane
  struct Unit {
    const uint8_t* p;
  };
  static Unit Load(const uint8_t* p) { return {p}; }
  template <int H> static void Slot(const Unit& u, __m256i& w, __m256& ws) {
    w = Nibbles16(u.p + block_layout::kQ4_0Qs);
    ws = BroadcastF16(u.p);
  }
};

// Q5_0 / Q5_1's fifth bits: bit j of the little-endian uint32 at `qh` onto bit 4 of byte j
// (each byte takes its qh byte, j / 8, and tests bit j % 8 of it).
inline __m256i Q5HighBits(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, sizeof h);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(h)),
                                            _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                                             2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(0x10));
}

// Q5_0 (kMin false: zero point 16) and Q5_1 (kMin: x = d·q + m).
template <bool kMin> struct FormatQ5 {
  static constexpr int kSlots = 1;
  static constexpr int kMaxCode = 31;
  static constexpr int64_t kUnitValues = 32;
  static constexpr size_t kUnitBytes = kMin ? 24 : 22;
  static constexpr bool kHasMin = false;
  static constexpr bool kBlockMin = kMin;
  static constexpr bool kSignedCodes = false;
  static constexpr bool kBias = !kMin;
  static constexpr bool kIntScale = false;
  static constexpr int kQh = kMin ? block_layout::kQ5_1Qh : block_layout::kQ5_0Qh;
  static constexpr int kQs = kMin ? block_layout::kQ5_1Qs : block_layout::kQ5_0Qs;
  using Scale = __m256;  // f32 per lane
  struct Unit {
    const uint8_t* p;
    __m256 mn;  // Q5_1: m in every lane
  };
  static Unit Load(const uint8_t* p) {
    return {p, kMin ? BroadcastF16(p + block_layout::kQ5_1M) : _mm256_setzero_ps()};
  }
  template <int H> static void Slot(const Unit& u, __m256i& w, __m256& ws) {
    w = _mm256_or_si256(Nibbles16(u.p + kQs), Q5HighBits(u.p + kQh));
    ws = BroadcastF16(u.p);
  }
};

// Q4_K (kFive false) and Q5_K.
template <bool kFive> struct FormatK4K5 {
  static constexpr int kSlots = 8;
  static constexpr int kMaxCode = kFive ? 31 : 15;
  static constexpr int kPairMax = 2 * kMaxCode * 127;  // |a vpmaddubsw pair sum|
  static constexpr int64_t kUnitValues = 256;
  static constexpr size_t kUnitBytes = kFive ? 176 : 144;
  static constexpr bool kHasMin = true;
  static constexpr bool kBlockMin = false;
  static constexpr bool kSignedCodes = false;
  static constexpr bool kBias = false;
  static constexpr bool kIntScale = true;
  using Scale = __m256i;  // int16 pairs per lane
  struct Unit {
    const uint8_t* qs;
    __m256i qh;  // Q5_K: the 32 qh bytes
    __m256i sc;  // bytes j, 8 + j of each 128-bit half: sc[j], m[j]
    __m256 d;    // d in every lane
    __m256 mn;   // lane j: -dmin·m[j]
  };
  // ScaleMinK4 for all 8 sub-blocks at once, bytes sc[0..8) then m[0..8), on general-purpose
  // registers: the slots keep the vector units busy (byte shuffles of the 12 bytes cost ~10
  // vector instructions per unit and weight row).
  static __m128i ScaleMinCodes(const uint8_t* scales) {
    uint32_t a, b, c;
    std::memcpy(&a, scales, 4);
    std::memcpy(&b, scales + 4, 4);
    std::memcpy(&c, scales + 8, 4);
    const uint32_t sc_hi = (c & 0x0F0F0F0F) | ((a >> 2) & 0x30303030);  // j >= 4: low bits, bits 6-7 of j - 4
    const uint32_t m_hi = ((c >> 4) & 0x0F0F0F0F) | ((b >> 2) & 0x30303030);
    uint64_t sc = (a & 0x3F3F3F3F) | uint64_t{sc_hi} << 32;
    uint64_t m = (b & 0x3F3F3F3F) | uint64_t{m_hi} << 32;
    asm("" : "+r"(sc), "+r"(m));  // keeps GCC's vectorizer from moving this onto vector registers
    return _mm_insert_epi64(_mm_cvtsi64_si128(static_cast<long long>(sc)), static_cast<long long>(m), 1);
  }
  static Unit Load(const uint8_t* p) {
    const __m128i codes = ScaleMinCodes(p + block_layout::kQ4KScales);
    Unit w;
    w.sc = _mm256_broadcastsi128_si256(codes);
    w.d = BroadcastF16(p);
    // Lane j: m[j] (byte 8 + j; the high half reads the same bytes as the low one).
    const __m256i m =
        _mm256_shuffle_epi8(w.sc, _mm256_setr_epi8(8, -1, -1, -1, 9, -1, -1, -1, 10, -1, -1, -1, 11, -1, -1, -1, 12, -1,
                                                   -1, -1, 13, -1, -1, -1, 14, -1, -1, -1, 15, -1, -1, -1));
    w.mn = _mm256_mul_ps(_mm256_cvtepi32_ps(m),
                         _mm256_sub_ps(_mm256_setzero_ps(), BroadcastF16(p + block_layout::kQ4KDmin)));
    if constexpr (kFive) {
      w.qh = LoadU256(p + block_layout::kQ5KQh);
      w.qs = p + block_layout::kQ5KQs;
    } else {
      w.qh = _mm256_setzero_si256();
      w.qs = p + block_layout::kQ4KQs;
    }
    return w;
  }
  // Slot H's 32 weight codes and the integer scale per lane (as int16 pairs).
  // The sub-block slot H reads: chunk 2h + a, nibble i.
  static constexpr int SubBlock(int H) { return 4 * (H / 4) + 2 * (H % 2) + (H / 2) % 2; }
  template <int H> static void Slot(const Unit& u, __m256i& w, __m256i& sc) {
    constexpr int h = H / 4, a = H % 2, i = (H / 2) % 2;
    constexpr int j = SubBlock(H);
    const __m256i v = LoadU256(u.qs + 64 * h + 32 * a);
    w = i == 0 ? LowNibbles(v) : HighNibbles(v);
    if constexpr (kFive) w = _mm256_or_si256(w, MoveBits<j, 4>(u.qh, 0x10));
    sc = _mm256_shuffle_epi8(u.sc, _mm256_set1_epi16(static_cast<int16_t>(0x8000 + j)));  // sc[j], zero-extended
  }
  // Slots 4G .. 4G + 3's scales in the layout of gemv_block_avx2.cc's SlotSums: int16 k of
  // each 128-bit half scales slot 4G + k / 2 (one sub-block, both halves).
  template <int G> static __m256i GroupScales(const Unit& u) {
    constexpr auto b = [](int k) { return static_cast<char>(k % 2 == 0 ? SubBlock(4 * G + k / 4) : -1); };
    const __m256i index = _mm256_setr_epi8(b(0), b(1), b(2), b(3), b(4), b(5), b(6), b(7), b(8), b(9), b(10), b(11),
                                           b(12), b(13), b(14), b(15), b(0), b(1), b(2), b(3), b(4), b(5), b(6), b(7),
                                           b(8), b(9), b(10), b(11), b(12), b(13), b(14), b(15));
    return _mm256_shuffle_epi8(u.sc, index);
  }
};

// Formats with a scale per 16 values (Q6_K, Q3_K, Q2_K) read 32-value slots whose low
// 128-bit half takes one scale and the high half the next. sc[g] holds the unit's int16
// scales 8g .. 8g + 8 in both 128-bit halves.
inline void SixteenValueScales(__m128i scales_int8, __m256i sc[2]) {
  const __m256i s = _mm256_cvtepi8_epi16(scales_int8);
  sc[0] = _mm256_permute4x64_epi64(s, 0x44);
  sc[1] = _mm256_permute4x64_epi64(s, 0xEE);
}
// Slot sub-block pair t, t + 1 of sc[h] (t even): scale t in the low half's int16 pairs, t + 1
// in the high half's.
template <int t> inline __m256i SixteenValueSlotScale(__m256i sc_h) {
  constexpr int16_t a = static_cast<int16_t>(0x0100 + 0x0202 * t), b = static_cast<int16_t>(a + 0x0202);
  return _mm256_shuffle_epi8(sc_h, _mm256_setr_epi16(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b));
}
// Slots 4G .. 4G + 3's scales in the layout of gemv_block_avx2.cc's SlotSums: int16 k of
// the low 128-bit half scales slot 4G + k / 2's first 16 values (sc[G]'s scale 2(k / 2)),
// of the high half its last 16 (the next scale).
inline __m256i SixteenValueGroupScales(__m256i sc_g) {
  constexpr auto b = [](int k, int half) { return static_cast<char>(2 * (2 * (k / 4) + half) + k % 2); };
  const __m256i index = _mm256_setr_epi8(b(0, 0), b(1, 0), b(2, 0), b(3, 0), b(4, 0), b(5, 0), b(6, 0), b(7, 0),
                                         b(8, 0), b(9, 0), b(10, 0), b(11, 0), b(12, 0), b(13, 0), b(14, 0), b(15, 0),
                                         b(0, 1), b(1, 1), b(2, 1), b(3, 1), b(4, 1), b(5, 1), b(6, 1), b(7, 1),
                                         b(8, 1), b(9, 1), b(10, 1), b(11, 1), b(12, 1), b(13, 1), b(14, 1), b(15, 1));
  return _mm256_shuffle_epi8(sc_g, index);
}

struct FormatQ6_K {
  static constexpr int kSlots = 8;
  static constexpr int kMaxCode = 63;
  static constexpr int kPairMax = 2 * 32 * 127;  // |a pair sum| with the bias: |q - 32| <= 32
  static constexpr int64_t kUnitValues = 256;
  static constexpr size_t kUnitBytes = 210;
  static constexpr bool kHasMin = false;
  static constexpr bool kBlockMin = false;
  static constexpr bool kSignedCodes = false;
  static constexpr bool kBias = true;
  static constexpr bool kIntScale = true;
  using Scale = __m256i;  // int16 pairs per lane
  struct Unit {
    const uint8_t* p;
    __m256i sc[2];  // int16 t of each 128-bit half of sc[h]: scales[8h + t]
    __m256 d;
  };
  static Unit Load(const uint8_t* p) {
    Unit u{p, {}, BroadcastF16(p + block_layout::kQ6KD)};
    SixteenValueScales(LoadU128(p + block_layout::kQ6KScales), u.sc);
    return u;
  }
  template <int H> static void Slot(const Unit& u, __m256i& w, __m256i& sc) {
    constexpr int h = H / 4, k = H % 4;
    const __m256i ql = LoadU256(u.p + 64 * h + 32 * (k % 2));
    const __m256i qh = LoadU256(u.p + block_layout::kQ6KQh + 32 * h);
    const __m256i low = k / 2 == 0 ? LowNibbles(ql) : HighNibbles(ql);
    w = _mm256_or_si256(low, MoveBits<2 * k, 4>(qh, 0x30));
    sc = SixteenValueSlotScale<2 * k>(u.sc[h]);  // sub-blocks 2H, 2H + 1 = scales 2k, 2k + 1 of sc[h]
  }
  template <int G> static __m256i GroupScales(const Unit& u) { return SixteenValueGroupScales(u.sc[G]); }
};

// Q3_K (kQ2 false) and Q2_K: 16 sub-blocks of 16 with integer scales, in Q6_K's slots (slot
// H = values 32H .. 32H + 32; lanes 0-3 take scale 2H, lanes 4-7 the next). Slot H's 2-bit
// fields are bits 2j, 2j + 1 of qs[32h ..] (h = H / 4, j = H % 4); Q3_K adds hmask's bit
// 4h + j as bit 2 and has zero point 4 (scales sc - 32, signed); Q2_K's mins (-dmin·m per 16
// values, mn) multiply x's sums per 16 values (PreparedX::block_sum, 16 per 256 values).
template <bool kQ2> struct FormatK16 {
  static constexpr int kSlots = 8;
  static constexpr int kMaxCode = kQ2 ? 3 : 7;
  static constexpr int kPairMax = kQ2 ? 2 * 3 * 127 : 2 * 4 * 127;  // Q3_K with the bias: |q - 4| <= 4
  static constexpr int64_t kUnitValues = 256;
  static constexpr size_t kUnitBytes = kQ2 ? 84 : 110;
  static constexpr bool kHasMin = false;
  static constexpr bool kBlockMin = false;
  static constexpr bool kSignedCodes = false;
  static constexpr bool kBias = !kQ2;
  static constexpr bool kIntScale = true;
  using Scale = __m256i;  // int16 pairs per lane
  struct Unit {
    const uint8_t* p;
    __m256i sc[2];
    __m256 d;
    __m256 mn[2];  // Q2_K: lane t of mn[g] = -dmin·m[8g + t]
  };
  // Q3_K's 16 scale codes minus 32, byte s = sub-block s's scale (block_quant.h's Q3KScale).
  static __m128i Q3Scales(const uint8_t* scales) {
    const std::array<uint32_t, 4> w = Q3KScaleWords(scales);
    const __m128i codes =
        _mm_setr_epi32(static_cast<int>(w[0]), static_cast<int>(w[1]), static_cast<int>(w[2]), static_cast<int>(w[3]));
    return _mm_sub_epi8(codes, _mm_set1_epi8(32));
  }
  static Unit Load(const uint8_t* p) {
    Unit u;
    u.p = p;
    if constexpr (kQ2) {
      const __m128i bytes = LoadU128(p);
      SixteenValueScales(_mm_and_si128(bytes, _mm_set1_epi8(0x0F)), u.sc);
      const __m128i m = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0F));
      const __m256 neg_dmin = _mm256_sub_ps(_mm256_setzero_ps(), BroadcastF16(p + block_layout::kQ2KDmin));
      u.mn[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m)), neg_dmin);
      u.mn[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(m, 8))), neg_dmin);
      u.d = BroadcastF16(p + block_layout::kQ2KD);
    } else {
      SixteenValueScales(Q3Scales(p + block_layout::kQ3KScales), u.sc);
      u.mn[0] = u.mn[1] = _mm256_setzero_ps();
      u.d = BroadcastF16(p + block_layout::kQ3KD);
    }
    return u;
  }
  template <int H> static void Slot(const Unit& u, __m256i& w, __m256i& sc) {
    constexpr int h = H / 4, j = H % 4;
    const uint8_t* qs = u.p + (kQ2 ? block_layout::kQ2KQs : block_layout::kQ3KQs);
    w = _mm256_and_si256(_mm256_srli_epi16(LoadU256(qs + 32 * h), 2 * j), _mm256_set1_epi8(3));
    if constexpr (!kQ2) w = _mm256_or_si256(w, MoveBits<4 * h + j, 2>(LoadU256(u.p), 0x04));  // hmask at 0
    sc = SixteenValueSlotScale<2 * j>(u.sc[h]);
  }
  template <int G> static __m256i GroupScales(const Unit& u) { return SixteenValueGroupScales(u.sc[G]); }
};

// IQ4_NL's 16 levels (kIq4Levels) in both 128-bit halves: the table vpshufb looks indices up in.
inline __m256i Iq4LevelTable() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Levels)));
}

// IQ4_NL: a block laid out as Q4_0's, its nibbles indices into the 16 int8 levels, then as
// Q8_0's signed codes (|w| times x with w's sign).
static_assert(block_layout::kIQ4NLQs == block_layout::kQ4_0Qs);
struct FormatIQ4_NL : FormatQ4_0 {
  static constexpr int kMaxCode = 127;  // |w|
  static constexpr bool kSignedCodes = true;
  static constexpr bool kBias = false;
  template <int H> static void Slot(const Unit& u, __m256i& w, __m256& ws) {
    FormatQ4_0::Slot<H>(u, w, ws);
    w = _mm256_shuffle_epi8(Iq4LevelTable(), w);
  }
};

// IQ4_XS: 8 sub-blocks of 32, slot H = sub-block H (qs[16H ..], as an IQ4_NL block's
// indices, looked up as IQ4_NL's), integer scale ls[H] - 32 in [-32, 31].
struct FormatIQ4_XS {
  static constexpr int kSlots = 8;
  static constexpr int kMaxCode = 127;
  static constexpr int kPairMax = 2 * 127 * 127;
  static constexpr int64_t kUnitValues = 256;
  static constexpr size_t kUnitBytes = 136;
  static constexpr bool kHasMin = false;
  static constexpr bool kBlockMin = false;
  static constexpr bool kSignedCodes = true;
  static constexpr bool kBias = false;
  static constexpr bool kIntScale = true;
  using Scale = __m256i;  // int16 pairs per lane
  struct Unit {
    const uint8_t* p;
    __m256i sc;  // int32 lane s: ls[s] - 32 in both of its int16 halves
    __m256 d;
  };
  static Unit Load(const uint8_t* p) {
    const __m256i s = IQ4XSScaleCodes(p);
    return {p, _mm256_or_si256(_mm256_and_si256(s, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(s, 16)),
            BroadcastF16(p)};
  }
  template <int H> static void Slot(const Unit& u, __m256i& w, __m256i& sc) {
    w = _mm256_shuffle_epi8(Iq4LevelTable(), Nibbles16(u.p + block_layout::kIQ4XSQs + 16 * H));
    sc = _mm256_permutevar8x32_epi32(u.sc, _mm256_set1_epi32(H));
  }
};

// ---- the lattice formats (IQ2_XXS, IQ3_XXS, IQ1_S) ----------------------------------------
// Slot H = group H of 32 values of the 256-value block: its codebook entries' bytes
// (iq_tables.h) by scalar loads, IQ2_XXS / IQ3_XXS's signs applied (a 32-bit mask made by
// pdep with each field's parity, expanded to bytes), IQ1_S's delta added; then Q8_0's
// signed codes (|w| times x with w's sign) and an f32 scale per slot, formed in the
// portable path's order of operations.

// The 32 signs of a group's word w (4 fields of 7 bits at 7k, each with its parity as the
// 8th sign) as bytes 0 / -1.
inline __m256i LatticeSignBytes(uint32_t w) {
  const uint32_t bytes = _pdep_u32(w & 0x0FFFFFFF, 0x7F7F7F7Fu);
  uint32_t p = bytes ^ (bytes >> 4);
  p ^= p >> 2;
  p ^= p >> 1;
  const __m256i v = _mm256_set1_epi32(static_cast<int>(bytes | (p & 0x01010101u) << 7));
  const __m256i spread = _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                                                 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// mag negated where sign is -1.
inline __m256i ApplySigns(__m256i mag, __m256i sign) { return _mm256_sub_epi8(_mm256_xor_si256(mag, sign), sign); }

struct FormatLatticeBase {
  static constexpr int kSlots = 8;
  static constexpr int64_t kUnitValues = 256;
  static constexpr bool kHasMin = false;
  static constexpr bool kBlockMin = false;
  static constexpr bool kSignedCodes = true;
  static constexpr bool kBias = false;
  static constexpr bool kIntScale = false;
  using Scale = __m256;
  struct Unit {
    const uint8_t* p;
    float d;
  };
  static Unit Load(const uint8_t* p) { return {p, _cvtsh_ss(Load16(p))}; }
};

inline uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

struct FormatIQ2_XXS : FormatLatticeBase {
  static constexpr int kMaxCode = 43;
  static constexpr size_t kUnitBytes = 66;
  template <int H> static void Slot(const Unit& u, __m256i& w, __m256& ws) {
    const uint8_t* q = u.p + block_layout::kIQ2XXSQs + 8 * H;
    const uint32_t word = LoadU32(q + 4);
    const uint64_t* t = iq_tables::kIq2xxsBytes.data();
    const __m256i mag = _mm256_setr_epi64x(static_cast<long long>(t[q[0]]), static_cast<long long>(t[q[1]]),
                                           static_cast<long long>(t[q[2]]), static_cast<long long>(t[q[3]]));
    w = ApplySigns(mag, LatticeSignBytes(word));
    ws = _mm256_set1_ps(u.d * (0.5f + static_cast<float>(word >> 28)) * 0.25f);
  }
};

struct FormatIQ3_XXS : FormatLatticeBase {
  static constexpr int kMaxCode = 62;
  static constexpr size_t kUnitBytes = 98;
  template <int H> static void Slot(const Unit& u, __m256i& w, __m256& ws) {
    const uint8_t* q = u.p + block_layout::kIQ3XXSQs + 8 * H;
    const uint32_t word = LoadU32(u.p + block_layout::kIQ3XXSW + 4 * H);
    const uint32_t* t = iq_tables::kIq3xxsBytes.data();
    const __m256i mag = _mm256_setr_epi32(
        static_cast<int>(t[q[0]]), static_cast<int>(t[q[1]]), static_cast<int>(t[q[2]]), static_cast<int>(t[q[3]]),
        static_cast<int>(t[q[4]]), static_cast<int>(t[q[5]]), static_cast<int>(t[q[6]]), static_cast<int>(t[q[7]]));
    w = ApplySigns(mag, LatticeSignBytes(word));
    ws = _mm256_set1_ps(u.d * (0.5f + static_cast<float>(word >> 28)) * 0.5f);
  }
};

struct FormatIQ1_S : FormatLatticeBase {
  static constexpr int kMaxCode = 9;
  static constexpr size_t kUnitBytes = 50;
  template <int H> static void Slot(const Unit& u, __m256i& w, __m256& ws) {
    const uint8_t* q = u.p + block_layout::kIQ1SQs + 4 * H;
    const uint32_t qh = Load16(u.p + block_layout::kIQ1SQh + 2 * H);
    const uint64_t* t = iq_tables::kIq1sBytes.data();
    auto entry = [&](int k) { return static_cast<long long>(t[q[k] | ((qh >> (3 * k)) & 7) << 8]); };
    const __m256i grid = _mm256_setr_epi64x(entry(0), entry(1), entry(2), entry(3));
    w = _mm256_add_epi8(grid, _mm256_set1_epi8(qh & 0x8000 ? -1 : 1));
    const float dl = u.d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
    ws = _mm256_set1_ps(dl * 0.125f);
  }
};

// Q2_K's mins: one per 16 values, 16 lanes a unit (FormatK16<true>::Unit::mn).
template <class F> constexpr bool kMin16 = std::is_same_v<F, FormatK16<true>>;
// Two 16-value sub-blocks, each with its own scale, per 32-value slot: Q6_K, Q3_K, Q2_K.
template <class F> constexpr bool kTwoSubBlocks =
    std::is_same_v<F, FormatQ6_K> || std::is_same_v<F, FormatK16<false>> || kMin16<F>;

template <typename Fn, int... S> inline void ForSlots(Fn&& fn, std::integer_sequence<int, S...>) {
  (fn.template operator()<S>(), ...);
}

}  // namespace
}  // namespace latte::matmul_internal
