// GGUF's block-quantized weight formats, byte for byte as ggml defines them
// (ggml-common.h: block_q8_0, block_q4_0, block_q4_K, block_q5_K, block_q6_K; values as
// ggml-quants.c's dequantize_row_* computes them). A row of n values is n / B blocks
// laid end to end (B = DTypeBlockElements: 32 or 256), no padding, fields unaligned.
// f16 fields are IEEE half precision, little-endian.
//
//   Q8_0 (34 bytes, 32 values):  d f16 | qs int8[32]
//       x[j] = d·qs[j]
//   Q4_0 (18 bytes, 32 values):  d f16 | qs u8[16]
//       x[j] = d·((qs[j] & 15) - 8),  x[j + 16] = d·((qs[j] >> 4) - 8)        j < 16
//   Q4_K (144 bytes, 256 values): d f16 | dmin f16 | scales u8[12] | qs u8[128]
//       8 sub-blocks of 32, each with a 6-bit scale sc and a 6-bit min m packed in
//       `scales` (ScaleMinK4 below). Chunk c < 4 (64 values) reads qs[32c .. 32c + 32):
//       x[64c + l]      = d·sc[2c]·(qs[32c + l] & 15) - dmin·m[2c]             l < 32
//       x[64c + 32 + l] = d·sc[2c+1]·(qs[32c + l] >> 4) - dmin·m[2c+1]
//   Q5_K (176 bytes, 256 values): d f16 | dmin f16 | scales u8[12] | qh u8[32] | qs u8[128]
//       as Q4_K with a fifth bit: q[64c + l] += 16·bit 2c of qh[l], q[64c + 32 + l]
//       += 16·bit 2c+1 of qh[l]
//   Q6_K (210 bytes, 256 values): ql u8[128] | qh u8[64] | scales int8[16] | d f16
//       16 sub-blocks of 16 (sub-block s = values 16s .. 16s + 16, scale scales[s]).
//       Half h < 2 (128 values) reads ql[64h ..], qh[32h ..]; for l < 32:
//       q[128h + l]      = (ql[64h + l] & 15)      | ((qh[32h + l] >> 0) & 3) << 4
//       q[128h + 32 + l] = (ql[64h + 32 + l] & 15) | ((qh[32h + l] >> 2) & 3) << 4
//       q[128h + 64 + l] = (ql[64h + l] >> 4)      | ((qh[32h + l] >> 4) & 3) << 4
//       q[128h + 96 + l] = (ql[64h + 32 + l] >> 4) | ((qh[32h + l] >> 6) & 3) << 4
//       x[i] = d·scales[i / 16]·(q[i] - 32)
//   Q5_0 (22 bytes, 32 values):  d f16 | qh u8[4] | qs u8[16]
//       h = qh as a little-endian uint32; for j < 16:
//       q[j] = (qs[j] & 15) | (bit j of h) << 4,  q[j + 16] = (qs[j] >> 4) | (bit j + 16 of h) << 4
//       x[j] = d·(q[j] - 16)
//   Q5_1 (24 bytes, 32 values):  d f16 | m f16 | qh u8[4] | qs u8[16]
//       q as Q5_0's, x[j] = d·q[j] + m
//   Q3_K (110 bytes, 256 values): hmask u8[32] | qs u8[64] | scales u8[12] | d f16
//       16 sub-blocks of 16 (sub-block s = values 16s .. 16s + 16), each with a 6-bit
//       scale sc[s] packed in `scales` (Q3KScale below). Value i, with h = i / 128,
//       j = (i % 128) / 32, l = i % 32, has the code
//       q[i] = ((qs[32h + l] >> 2j) & 3) | ((hmask[l] >> (4h + j)) & 1) << 2   in [0, 7]
//       x[i] = d·(sc[i / 16] - 32)·(q[i] - 4)
//   Q2_K (84 bytes, 256 values): scales u8[16] | qs u8[64] | d f16 | dmin f16
//       16 sub-blocks of 16, sub-block s with scale scales[s] & 15 and min scales[s] >> 4;
//       value i (h, j, l as Q3_K's) has q[i] = (qs[32h + l] >> 2j) & 3 and
//       x[i] = d·(scales[i / 16] & 15)·q[i] - dmin·(scales[i / 16] >> 4)
//
//   IQ4_NL (18 bytes, 32 values): d f16 | qs u8[16]
//       x[j] = d·kIq4Levels[qs[j] & 15],  x[j + 16] = d·kIq4Levels[qs[j] >> 4]        j < 16
//   IQ4_XS (136 bytes, 256 values): d f16 | scales_h u16 | scales_l u8[4] | qs u8[128]
//       8 sub-blocks of 32, sub-block s with the 6-bit scale code
//       ls[s] = ((scales_l[s / 2] >> 4·(s % 2)) & 15) | ((scales_h >> 2s) & 3) << 4 and its
//       16 bytes qs[16s ..] laid out as an IQ4_NL block's: x[32s + j] = (d·(ls[s] - 32))·
//       kIq4Levels[qs[16s + j] & 15], x[32s + 16 + j] = ... kIq4Levels[qs[16s + j] >> 4]
//
// The lattice formats: per 32 values (group g < 8) an f32 scale and 32 int8 codes (IqCodes),
// x[32g + j] = scale[g]·code[32g + j]; codebooks in iq_grids.h, signs[s] = the 7 bits s and
// their parity as bit 7 (ggml's ksigns_iq2xs), bit j set: value j of 8 negative.
//   IQ2_XXS (66 bytes): d f16 | per group 8 bytes: idx u8[4] | w u32 (little-endian)
//       ls = w >> 28, scale = d·(0.5 + ls)·0.25; values 8k .. 8k + 7 (k < 4) are
//       kIq2Levels of kIq2xxs[idx[k]] with the signs of signs[(w >> 7k) & 127]
//   IQ3_XXS (98 bytes): d f16 | idx u8[64] | w u32[8], group g: idx[8g ..], w[g]
//       ls = w >> 28, scale = d·(0.5 + ls)·0.5; values 4k .. 4k + 3 (k < 8) are kIq3Levels
//       of kIq3xxs[idx[8g + k]], the signs of values 8h .. 8h + 7 signs[(w >> 7h) & 127]
//   IQ1_S (50 bytes): d f16 | qs u8[32] | qh u16[8], group g: qs[4g ..], qh[g]
//       dl = d·(2·((qh >> 12) & 7) + 1), delta = qh bit 15 ? -1/8 : 1/8; values 8k .. 8k + 7
//       are dl·(grid + delta) over kIq1s[qs[4g + k] | ((qh >> 3k) & 7) << 8]; as codes
//       8·grid ± 1 with scale dl / 8 (the same products: dl / 8 is exact)
//
// Products are rounded as ggml rounds them: (d·sc) first, then ·q, then - (dmin·m).
//
// The quantizers are our own round-to-nearest: one scale per block (Q8_0, Q4_0, IQ4_NL), and for
// the K formats per-sub-block scales (and mins) rounded up to their 6- or 8-bit codes, so
// every value of a sub-block lies inside its quantization grid. They do not reproduce
// llama.cpp's quantizer bit for bit (which searches for error-minimising scales); they
// write valid blocks whose dequantized values are within half a grid step of the input
// (the bounds are stated per type in tests/block_quant_test.cc).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "base/dtype.h"

namespace latte {

// Field offsets inside one block (ggml-common.h).
namespace block_layout {
inline constexpr int kQ8_0Qs = 2;       // after d
inline constexpr int kQ4_0Qs = 2;       // after d
inline constexpr int kQ4KDmin = 2;      // d at 0
inline constexpr int kQ4KScales = 4;    // 12 bytes
inline constexpr int kQ4KQs = 16;       // 128 bytes
inline constexpr int kQ5KQh = 16;       // 32 bytes
inline constexpr int kQ5KQs = 48;       // 128 bytes
inline constexpr int kQ6KQh = 128;      // ql at 0, 128 bytes; qh 64 bytes
inline constexpr int kQ6KScales = 192;  // 16 int8
inline constexpr int kQ6KD = 208;
inline constexpr int kQ5_0Qh = 2;  // after d; 4 bytes, then qs
inline constexpr int kQ5_0Qs = 6;
inline constexpr int kQ5_1M = 2;  // d at 0
inline constexpr int kQ5_1Qh = 4;
inline constexpr int kQ5_1Qs = 8;
inline constexpr int kQ3KQs = 32;  // hmask at 0, 32 bytes; qs 64 bytes
inline constexpr int kQ3KScales = 96;
inline constexpr int kQ3KD = 108;
inline constexpr int kQ2KQs = 16;  // scales at 0, 16 bytes; qs 64 bytes
inline constexpr int kQ2KD = 80;
inline constexpr int kQ2KDmin = 82;
inline constexpr int kIQ4NLQs = 2;       // after d
inline constexpr int kIQ4XSScalesH = 2;  // after d; a little-endian u16
inline constexpr int kIQ4XSScalesL = 4;  // 4 bytes
inline constexpr int kIQ4XSQs = 8;       // 128 bytes
inline constexpr int kIQ2XXSQs = 2;      // after d; 8 bytes a group
inline constexpr int kIQ3XXSQs = 2;      // after d; 64 bytes
inline constexpr int kIQ3XXSW = 66;      // 8 little-endian u32
inline constexpr int kIQ1SQs = 2;        // after d; 32 bytes
inline constexpr int kIQ1SQh = 34;       // 8 little-endian u16
}  // namespace block_layout

// The lattice formats (IQ2_XXS, IQ3_XXS, IQ1_S): the ones whose values come from a codebook.
inline bool IsLatticeFormat(DType dtype) {
  return dtype == DType::kIQ2_XXS || dtype == DType::kIQ3_XXS || dtype == DType::kIQ1_S;
}

// Block b (256 values) of a lattice format as 256 int8 codes and 8 f32 scales, one per 32
// values: value i = scale[i / 32]·codes[i], rounded as ggml's dequantize_row_iq* rounds it.
void IqCodes(DType dtype, const uint8_t* b, int8_t* codes, float* scales);

// IQ4_NL's and IQ4_XS's 16 levels (ggml's kvalues_iq4nl): a 4-bit index q stands for the
// value kIq4Levels[q] (times the block's scale), denser near zero than a uniform grid.
inline constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The lattice codebooks' levels (iq_grids.h holds indices into them): IQ2_XXS's magnitudes,
// IQ3_XXS's, IQ1_S's values.
inline constexpr int8_t kIq2Levels[3] = {8, 25, 43};
inline constexpr int8_t kIq3Levels[8] = {4, 12, 20, 28, 36, 44, 52, 62};
inline constexpr int8_t kIq1Levels[3] = {-1, 0, 1};

// IQ4_XS sub-block s < 8's 6-bit scale code (the scale is d·(code - 32)) from a block.
inline int IQ4XSScale(const uint8_t* b, int s) {
  const int high = (b[block_layout::kIQ4XSScalesH + s / 4] >> (2 * (s % 4))) & 3;  // bits 2s, 2s + 1 of the u16
  return ((b[block_layout::kIQ4XSScalesL + s / 2] >> (4 * (s % 2))) & 15) | high << 4;
}

// Index j < 32 of an IQ4_NL block's qs (or an IQ4_XS sub-block's 16 bytes), in [0, 15].
inline int IQ4Index(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

// Sub-block j < 8's 6-bit scale and min from the 12 packed bytes of a Q4_K / Q5_K block
// (ggml's get_scale_min_k4): j < 4 in the low 6 bits of bytes j and j + 4; j >= 4 split
// into a low nibble in byte j + 4 and two high bits on top of bytes j - 4 and j.
inline void ScaleMinK4(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// A Q3_K block's 16 sub-block scale codes (the scale is code - 32) from its 12 packed
// bytes, code s in byte s % 4 of word s / 4 (ggml's rearrangement as 32-bit words): the
// low nibble of byte s (s < 8) or the high nibble of byte s - 8, and two high bits from
// byte 8 + s % 4, bits 2·(s / 4) and up. The vector kernels load the words as one register.
inline std::array<uint32_t, 4> Q3KScaleWords(const uint8_t* scales) {
  uint32_t a, b, c;
  std::memcpy(&a, scales, 4);
  std::memcpy(&b, scales + 4, 4);
  std::memcpy(&c, scales + 8, 4);
  constexpr uint32_t k4 = 0x0F0F0F0F, k2 = 0x03030303;
  return {(a & k4) | (c & k2) << 4, (b & k4) | ((c >> 2) & k2) << 4, ((a >> 4) & k4) | ((c >> 4) & k2) << 4,
          ((b >> 4) & k4) | ((c >> 6) & k2) << 4};
}

// Sub-block s < 16's scale code from the 12 packed bytes (Q3KScaleWords' byte s).
inline int Q3KScale(int s, const uint8_t* scales) {
  return static_cast<int>((Q3KScaleWords(scales)[s / 4] >> (8 * (s % 4))) & 0xFF);
}

// Value i < 256's 2-bit field of a Q2_K / Q3_K block's qs: (qs[32h + l] >> 2j) & 3.
inline int K2Bits(const uint8_t* qs, int i) {
  const int h = i / 128, j = (i % 128) / 32, l = i % 32;
  return (qs[32 * h + l] >> (2 * j)) & 3;
}

// Q3_K's code of value i < 256, in [0, 7] (the value is code - 4).
inline int Q3KCode(const uint8_t* b, int i) {
  const int h = i / 128, j = (i % 128) / 32, l = i % 32;
  return K2Bits(b + block_layout::kQ3KQs, i) | ((b[l] >> (4 * h + j)) & 1) << 2;
}

// Code j < 32 of a Q5_0 / Q5_1 block, in [0, 31], from its qh and qs fields.
inline int Q5Code(const uint8_t* qh, const uint8_t* qs, int j) {
  uint32_t h;
  std::memcpy(&h, qh, sizeof h);
  const int low = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
  return low | static_cast<int>(((h >> j) & 1u) << 4);
}

// The f16 field at `p` (unaligned) as f32.
inline float LoadF16(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return F16ToF32(h);
}

// out[0, n) = the n values held by `data` in `dtype`: a block format (n a whole number of
// blocks) or kF16 (n values). One thread.
void DequantizeToF32(DType dtype, const void* data, int64_t n, float* out);
// The same values rounded once to bf16 (round to nearest even).
void DequantizeToBf16(DType dtype, const void* data, int64_t n, bf16* out);

// Value i of the row that starts at `row` (a block format or kF16). For set-up code and
// references (WeightView::At), not hot loops.
float BlockValueAt(DType dtype, const void* row, int64_t i);

// out = x[0, n) quantized into n / DTypeBlockElements(dtype) blocks of a block format
// (n a whole number of blocks). Writes DTypeRowBytes(dtype, n) bytes. One thread.
void QuantizeToBlocks(DType dtype, const float* x, int64_t n, void* out);

// n f16 values -> f32, exactly (NaN stays NaN). Vectorisable; the portable F16 paths use it.
void F16ToF32Row(const uint16_t* in, int64_t n, float* out);

}  // namespace latte
