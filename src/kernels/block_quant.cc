// ggml's block formats: dequantization (the formulas of block_quant.h, in ggml's order of
// f32 operations), single values, and our round-to-nearest quantizers.
#include "kernels/block_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <limits>

#include "base/check.h"
#include "kernels/iq_grids.h"

namespace latte {
namespace {

using namespace block_layout;

const uint8_t* Bytes(const void* p) { return static_cast<const uint8_t*>(p); }

// ---- dequantization: one block -> f32 ---------------------------------------------

void DequantQ8_0(const uint8_t* b, float* out) {
  const float d = LoadF16(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + kQ8_0Qs);
  for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(qs[j]) * d;
}

void DequantQ4_0(const uint8_t* b, float* out) {
  const float d = LoadF16(b);
  const uint8_t* qs = b + kQ4_0Qs;
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
    out[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q5_0 (`has_min` false: x = d·(q - 16)) and Q5_1 (x = d·q + m), in ggml's order.
void DequantQ5(const uint8_t* b, bool has_min, float* out) {
  const float d = LoadF16(b);
  const uint8_t* qh = b + (has_min ? kQ5_1Qh : kQ5_0Qh);
  const uint8_t* qs = b + (has_min ? kQ5_1Qs : kQ5_0Qs);
  if (has_min) {
    const float m = LoadF16(b + kQ5_1M);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(Q5Code(qh, qs, j)) * d + m;
  } else {
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(Q5Code(qh, qs, j) - 16) * d;
  }
}

// Q4_K and Q5_K: `qh` null for Q4_K.
void DequantK4K5(const uint8_t* b, const uint8_t* qs, const uint8_t* qh, float* out) {
  const float d = LoadF16(b);
  const float dmin = LoadF16(b + kQ4KDmin);
  const uint8_t* scales = b + kQ4KScales;
  for (int c = 0; c < 4; ++c) {
    uint8_t sc, m;
    ScaleMinK4(2 * c, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    ScaleMinK4(2 * c + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    const uint8_t* q = qs + 32 * c;
    float* o = out + 64 * c;
    for (int l = 0; l < 32; ++l) {
      int lo = q[l] & 0xF, hi = q[l] >> 4;
      if (qh != nullptr) {
        lo += ((qh[l] >> (2 * c)) & 1) << 4;
        hi += ((qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      o[l] = d1 * static_cast<float>(lo) - m1;
      o[l + 32] = d2 * static_cast<float>(hi) - m2;
    }
  }
}

// Q6_K's 6-bit code of value i < 256 of block b, in [0, 63].
inline int Q6Code(const uint8_t* b, int i) {
  const int h = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
  const uint8_t ql = b[64 * h + 32 * (quarter & 1) + l];
  const uint8_t qh = b[kQ6KQh + 32 * h + l];
  const int low = quarter < 2 ? (ql & 0xF) : (ql >> 4);
  return low | (((qh >> (2 * quarter)) & 3) << 4);
}

void DequantQ6_K(const uint8_t* b, float* out) {
  const float d = LoadF16(b + kQ6KD);
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + kQ6KScales);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b + 64 * h;
    const uint8_t* qh = b + kQ6KQh + 32 * h;
    float* o = out + 128 * h;
    const int8_t* s = sc + 8 * h;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      o[l] = d * s[is] * static_cast<float>(q1);
      o[l + 32] = d * s[is + 2] * static_cast<float>(q2);
      o[l + 64] = d * s[is + 4] * static_cast<float>(q3);
      o[l + 96] = d * s[is + 6] * static_cast<float>(q4);
    }
  }
}

// Q3_K: (d·(sc - 32))·(q - 4), as ggml's dequantize_row_q3_K.
void DequantQ3_K(const uint8_t* b, float* out) {
  const float d = LoadF16(b + kQ3KD);
  for (int s = 0; s < 16; ++s) {
    const float ds = d * static_cast<float>(Q3KScale(s, b + kQ3KScales) - 32);
    for (int l = 0; l < 16; ++l) out[16 * s + l] = ds * static_cast<float>(Q3KCode(b, 16 * s + l) - 4);
  }
}

// Q2_K: (d·sc)·q - dmin·m, as ggml's dequantize_row_q2_K.
void DequantQ2_K(const uint8_t* b, float* out) {
  const float d = LoadF16(b + kQ2KD), dmin = LoadF16(b + kQ2KDmin);
  for (int s = 0; s < 16; ++s) {
    const float ds = d * static_cast<float>(b[s] & 0xF), ms = dmin * static_cast<float>(b[s] >> 4);
    for (int l = 0; l < 16; ++l) out[16 * s + l] = ds * static_cast<float>(K2Bits(b + kQ2KQs, 16 * s + l)) - ms;
  }
}

// 32 values d·kIq4Levels[index] from 16 bytes of IQ4_NL indices (an IQ4_NL block's qs or an
// IQ4_XS sub-block's), as ggml's dequantize_row_iq4_nl / iq4_xs.
void DequantIq4Values(float d, const uint8_t* qs, float* out) {
  for (int j = 0; j < 16; ++j) {
    out[j] = d * static_cast<float>(kIq4Levels[qs[j] & 0xF]);
    out[j + 16] = d * static_cast<float>(kIq4Levels[qs[j] >> 4]);
  }
}

// IQ4_XS: (d·(ls - 32))·level, per sub-block of 32.
void DequantIQ4_XS(const uint8_t* b, float* out) {
  const float d = LoadF16(b);
  for (int s = 0; s < 8; ++s) {
    DequantIq4Values(d * static_cast<float>(IQ4XSScale(b, s) - 32), b + kIQ4XSQs + 16 * s, out + 32 * s);
  }
}

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The 8 signs of a stored 7-bit sign field: its bits and their parity as bit 7 (an even
// number of negative values; ggml's ksigns_iq2xs).
int SignByte(uint32_t s7) { return static_cast<int>(s7 | (std::popcount(s7) & 1u) << 7); }

void Iq2xxsCodes(const uint8_t* b, int8_t* codes, float* scales) {
  const float d = LoadF16(b);
  for (int g = 0; g < 8; ++g) {
    const uint8_t* q = b + kIQ2XXSQs + 8 * g;
    const uint32_t w = LoadU32(q + 4);
    scales[g] = d * (0.5f + static_cast<float>(w >> 28)) * 0.25f;
    for (int k = 0; k < 4; ++k) {
      const uint16_t entry = iq_grids::kIq2xxs[q[k]];
      const int signs = SignByte((w >> (7 * k)) & 127);
      for (int j = 0; j < 8; ++j) {
        const int v = kIq2Levels[(entry >> (2 * j)) & 3];
        codes[32 * g + 8 * k + j] = static_cast<int8_t>((signs >> j) & 1 ? -v : v);
      }
    }
  }
}

void Iq3xxsCodes(const uint8_t* b, int8_t* codes, float* scales) {
  const float d = LoadF16(b);
  for (int g = 0; g < 8; ++g) {
    const uint32_t w = LoadU32(b + kIQ3XXSW + 4 * g);
    scales[g] = d * (0.5f + static_cast<float>(w >> 28)) * 0.5f;
    for (int k = 0; k < 8; ++k) {
      const uint16_t entry = iq_grids::kIq3xxs[b[kIQ3XXSQs + 8 * g + k]];
      const int signs = SignByte((w >> (7 * (k / 2))) & 127);
      for (int j = 0; j < 4; ++j) {
        const int v = kIq3Levels[(entry >> (3 * j)) & 7];
        codes[32 * g + 4 * k + j] = static_cast<int8_t>((signs >> (4 * (k % 2) + j)) & 1 ? -v : v);
      }
    }
  }
}

void Iq1sCodes(const uint8_t* b, int8_t* codes, float* scales) {
  const float d = LoadF16(b);
  for (int g = 0; g < 8; ++g) {
    const uint16_t qh = LoadU16(b + kIQ1SQh + 2 * g);
    const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
    scales[g] = dl * 0.125f;
    const int delta = qh & 0x8000 ? -1 : 1;
    for (int k = 0; k < 4; ++k) {
      const uint16_t entry = iq_grids::kIq1s[b[kIQ1SQs + 4 * g + k] | ((qh >> (3 * k)) & 7) << 8];
      for (int j = 0; j < 8; ++j) {
        codes[32 * g + 8 * k + j] = static_cast<int8_t>(8 * kIq1Levels[(entry >> (2 * j)) & 3] + delta);
      }
    }
  }
}

void DequantLattice(DType dtype, const uint8_t* b, float* out) {
  int8_t codes[256];
  float scales[8];
  IqCodes(dtype, b, codes, scales);
  for (int i = 0; i < 256; ++i) out[i] = scales[i / 32] * static_cast<float>(codes[i]);
}

void DequantBlock(DType dtype, const uint8_t* b, float* out) {
  switch (dtype) {
    case DType::kQ8_0: DequantQ8_0(b, out); return;
    case DType::kQ4_0: DequantQ4_0(b, out); return;
    case DType::kQ4_K: DequantK4K5(b, b + kQ4KQs, nullptr, out); return;
    case DType::kQ5_K: DequantK4K5(b, b + kQ5KQs, b + kQ5KQh, out); return;
    case DType::kQ6_K: DequantQ6_K(b, out); return;
    case DType::kQ5_0: DequantQ5(b, /*has_min=*/false, out); return;
    case DType::kQ5_1: DequantQ5(b, /*has_min=*/true, out); return;
    case DType::kQ3_K: DequantQ3_K(b, out); return;
    case DType::kQ2_K: DequantQ2_K(b, out); return;
    case DType::kIQ4_NL: DequantIq4Values(LoadF16(b), b + kIQ4NLQs, out); return;
    case DType::kIQ4_XS: DequantIQ4_XS(b, out); return;
    case DType::kIQ2_XXS:
    case DType::kIQ3_XXS:
    case DType::kIQ1_S: DequantLattice(dtype, b, out); return;
    default: LATTE_CHECK(false, "not a block format: ", DTypeName(dtype));
  }
}

void CheckDType(DType dtype, int64_t n, const char* caller) {
  LATTE_CHECK(IsBlockQuantized(dtype) || dtype == DType::kF16, caller, ": dtype ", DTypeName(dtype),
              " (block formats and F16)");
  LATTE_CHECK(n >= 0 && n % DTypeBlockElements(dtype) == 0, caller, ": ", n, " values of ", DTypeName(dtype),
              " are not whole blocks of ", DTypeBlockElements(dtype));
}

// ---- quantization: one block ----------------------------------------------------

// The smallest f16 >= v (v >= 0, finite): a scale rounded up, so the grid it spans
// still covers the values it was computed from.
uint16_t F16AtLeast(float v) {
  uint16_t h = F32ToF16(v);
  if (F16ToF32(h) < v && h < 0x7bff) ++h;  // positive f16 bit patterns order like their values
  return h;
}

void StoreF16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, sizeof h); }

int RoundToInt(float v) { return static_cast<int>(std::nearbyint(v)); }

// Smallest integer k in [0, max] with k·step >= v (v >= 0); 0 when step is 0.
int CeilCode(float v, float step, int max) {
  if (!(step > 0)) return 0;
  return std::clamp(static_cast<int>(std::ceil(v / step)), 0, max);
}

// The value of largest magnitude among x[0, 32), with its sign (the first such; 0 for zeros).
float Extreme32(const float* x) {
  float extreme = 0;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > std::fabs(extreme)) extreme = x[j];
  }
  return extreme;
}

void QuantQ8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const uint16_t h = F16AtLeast(amax / 127);
  StoreF16(b, h);
  const float d = F16ToF32(h);
  const float id = d > 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) {
    b[kQ8_0Qs + j] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(RoundToInt(x[j] * id), -127, 127)));
  }
}

// The value of largest magnitude maps to code 0 (q - 8 = -8), as ggml's Q4_0 does: the
// grid d·[-8, 7] then covers [-|d|·8, |d|·7] on the other side, so the far end of that side
// rounds to 7 (error up to |d|, not |d|/2).
void QuantQ4_0(const float* x, uint8_t* b) {
  const float extreme = Extreme32(x);
  uint16_t h = F16AtLeast(std::fabs(extreme) / 8);
  if (extreme > 0) h |= 0x8000;  // d = extreme / -8
  StoreF16(b, h);
  const float d = F16ToF32(h);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  uint8_t* qs = b + kQ4_0Qs;
  for (int j = 0; j < 16; ++j) {
    const int lo = std::clamp(RoundToInt(x[j] * id) + 8, 0, 15);
    const int hi = std::clamp(RoundToInt(x[j + 16] * id) + 8, 0, 15);
    qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// Writes Q5_0 / Q5_1's 32 codes in [0, 31] into their qh and qs fields.
void StoreQ5Codes(const int* q, uint8_t* qh, uint8_t* qs) {
  uint32_t h = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
    h |= static_cast<uint32_t>(q[j] >> 4) << j;
    h |= static_cast<uint32_t>(q[j + 16] >> 4) << (j + 16);
  }
  std::memcpy(qh, &h, sizeof h);
}

// Q5_0 as Q4_0 with 16 levels a side: the value of largest magnitude maps to code 0
// (q - 16 = -16), the far end of the other side to 15.
void QuantQ5_0(const float* x, uint8_t* b) {
  const float extreme = Extreme32(x);
  uint16_t h = F16AtLeast(std::fabs(extreme) / 16);
  if (extreme > 0) h |= 0x8000;  // d = extreme / -16
  StoreF16(b, h);
  const float d = F16ToF32(h);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = std::clamp(RoundToInt(x[j] * id) + 16, 0, 31);
  StoreQ5Codes(q, b + kQ5_0Qh, b + kQ5_0Qs);
}

// Q5_1: m = min x rounded down to f16 (so m <= every value), then the step to reach max x
// from there rounded up: every value lies in [m, m + 31·d] and rounds to within d / 2
// (plus m's f16 rounding, below d / 2 when m is small against the range).
void QuantQ5_1(const float* x, uint8_t* b) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  uint16_t m_h = F32ToF16(lo);
  if (F16ToF32(m_h) > lo) m_h = static_cast<uint16_t>(lo < 0 ? m_h + 1 : m_h - 1);  // one f16 step down
  const float m = F16ToF32(m_h);
  const uint16_t d_h = F16AtLeast((hi - m) / 31);
  const float d = F16ToF32(d_h);
  StoreF16(b, d_h);
  StoreF16(b + kQ5_1M, m_h);
  const float id = d > 0 ? 1.0f / d : 0.0f;
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = std::clamp(RoundToInt((x[j] - m) * id), 0, 31);
  StoreQ5Codes(q, b + kQ5_1Qh, b + kQ5_1Qs);
}

// The K formats with mins, 256 values as `subs` sub-blocks (Q4_K / Q5_K: 8 of 32 with 6-bit
// codes, code_max 63; Q2_K: 16 of 16 with 4-bit codes). Per sub-block the min is rounded up
// to its code (dmin·m >= -min x), then the step needed to reach max x from there over
// `levels`, rounded up to its code (d·sc >= step): every value lies in [-dmin·m, -dmin·m +
// levels·d·sc] and rounds to within half a step, d·sc / 2. q: the 256 codes in value order.
struct MinGrid {
  uint16_t d_h = 0, dmin_h = 0;
  int sc[16] = {}, m[16] = {};
};
MinGrid QuantizeWithMins(const float* x, int subs, int levels, int code_max, uint8_t* q) {
  const int sub = 256 / subs;
  float neg_min[16], top[16];
  float max_neg_min = 0;
  for (int j = 0; j < subs; ++j) {
    float lo = 0, hi = x[sub * j];
    for (int l = 0; l < sub; ++l) {
      lo = std::min(lo, x[sub * j + l]);
      hi = std::max(hi, x[sub * j + l]);
    }
    neg_min[j] = -lo;
    top[j] = hi;
    max_neg_min = std::max(max_neg_min, neg_min[j]);
  }
  MinGrid g;
  g.dmin_h = F16AtLeast(max_neg_min / static_cast<float>(code_max));
  const float dmin = F16ToF32(g.dmin_h);
  float offset[16], step[16];
  float max_step = 0;
  for (int j = 0; j < subs; ++j) {
    g.m[j] = CeilCode(neg_min[j], dmin, code_max);
    offset[j] = dmin * static_cast<float>(g.m[j]);
    step[j] = std::max(top[j] + offset[j], 0.0f) / static_cast<float>(levels);
    max_step = std::max(max_step, step[j]);
  }
  g.d_h = F16AtLeast(max_step / static_cast<float>(code_max));
  const float d = F16ToF32(g.d_h);
  for (int j = 0; j < subs; ++j) {
    g.sc[j] = CeilCode(step[j], d, code_max);
    const float ds = d * static_cast<float>(g.sc[j]);
    const float inv = ds > 0 ? 1.0f / ds : 0.0f;
    for (int l = 0; l < sub; ++l) {
      q[sub * j + l] = static_cast<uint8_t>(std::clamp(RoundToInt((x[sub * j + l] + offset[j]) * inv), 0, levels));
    }
  }
  return g;
}

// Q4_K (levels 15) or Q5_K (levels 31): QuantizeWithMins, packed.
void QuantK4K5(const float* x, int levels, uint8_t* b) {
  uint8_t q[256];
  const MinGrid g = QuantizeWithMins(x, 8, levels, 63, q);
  StoreF16(b, g.d_h);
  StoreF16(b + kQ4KDmin, g.dmin_h);
  uint8_t* scales = b + kQ4KScales;
  std::fill(scales, scales + 12, 0);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = static_cast<uint8_t>(g.sc[j]);
      scales[j + 4] = static_cast<uint8_t>(g.m[j]);
    } else {
      scales[j + 4] = static_cast<uint8_t>((g.sc[j] & 0xF) | ((g.m[j] & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((g.sc[j] >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((g.m[j] >> 4) << 6);
    }
  }
  const bool five = levels == 31;
  uint8_t* qs = b + (five ? kQ5KQs : kQ4KQs);
  if (five) std::fill(b + kQ5KQh, b + kQ5KQh + 32, 0);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
      qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      if (five) b[kQ5KQh + l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
  }
}

// The K formats without mins (Q6_K, Q3_K), 16 sub-blocks of 16: per sub-block the step
// max|x| / half_levels rounded up to its scale code (non-negative here, though the formats
// allow negative scales; at most code_max), codes round(x / (d·sc)) in [-half_levels - 1,
// half_levels] plus the zero point half_levels + 1 into q (value order): every value rounds
// to within half a step.
struct SymmetricGrid {
  uint16_t d_h = 0;
  int sc[16] = {};
};
SymmetricGrid QuantizeSymmetric(const float* x, int half_levels, int code_max, uint8_t* q) {
  float step[16];
  float max_step = 0;
  for (int s = 0; s < 16; ++s) {
    float amax = 0;
    for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * s + l]));
    step[s] = amax / static_cast<float>(half_levels);
    max_step = std::max(max_step, step[s]);
  }
  SymmetricGrid g;
  g.d_h = F16AtLeast(max_step / static_cast<float>(code_max));
  const float d = F16ToF32(g.d_h);
  const int zero_point = half_levels + 1;
  for (int s = 0; s < 16; ++s) {
    g.sc[s] = CeilCode(step[s], d, code_max);
    const float ds = d * static_cast<float>(g.sc[s]);
    const float inv = ds > 0 ? 1.0f / ds : 0.0f;
    for (int l = 0; l < 16; ++l) {
      q[16 * s + l] =
          static_cast<uint8_t>(std::clamp(RoundToInt(x[16 * s + l] * inv), -zero_point, half_levels) + zero_point);
    }
  }
  return g;
}

// Q6_K: QuantizeSymmetric with codes q - 32 in [-31, 31] and 8-bit scales, packed.
void QuantQ6_K(const float* x, uint8_t* b) {
  uint8_t q[256];
  const SymmetricGrid g = QuantizeSymmetric(x, 31, 127, q);
  StoreF16(b + kQ6KD, g.d_h);
  std::fill(b, b + kQ6KScales, 0);
  for (int s = 0; s < 16; ++s) b[kQ6KScales + s] = static_cast<uint8_t>(g.sc[s]);
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
    uint8_t& ql = b[64 * h + 32 * (quarter & 1) + l];
    ql |= static_cast<uint8_t>(quarter < 2 ? (q[i] & 0xF) : (q[i] & 0xF) << 4);
    b[kQ6KQh + 32 * h + l] |= static_cast<uint8_t>((q[i] >> 4) << (2 * quarter));
  }
}

// Writes value i's 2-bit field q[i] into a Q2_K / Q3_K qs (zeroed first).
void StoreK2Bits(const uint8_t* q, uint8_t* qs) {
  std::fill(qs, qs + 64, 0);
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, j = (i % 128) / 32, l = i % 32;
    qs[32 * h + l] |= static_cast<uint8_t>((q[i] & 3) << (2 * j));
  }
}

// Q3_K: QuantizeSymmetric with codes q - 4 in [-3, 3] (the format's -4 unused) and 6-bit
// scale codes sc + 32, packed.
void QuantQ3_K(const float* x, uint8_t* b) {
  uint8_t q[256];
  const SymmetricGrid g = QuantizeSymmetric(x, 3, 31, q);
  StoreF16(b + kQ3KD, g.d_h);
  std::fill(b, b + kQ3KQs, 0);  // hmask
  uint8_t* scales = b + kQ3KScales;
  std::fill(scales, scales + 12, 0);
  for (int s = 0; s < 16; ++s) {
    const int code = g.sc[s] + 32;
    scales[s % 8] |= static_cast<uint8_t>((code & 0xF) << (s < 8 ? 0 : 4));
    scales[8 + s % 4] |= static_cast<uint8_t>((code >> 4) << (2 * (s / 4)));
  }
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, j = (i % 128) / 32;
    b[i % 32] |= static_cast<uint8_t>((q[i] >> 2) << (4 * h + j));
  }
  StoreK2Bits(q, b + kQ3KQs);
}

// Q2_K: QuantizeWithMins with 4 levels and 4-bit codes per sub-block of 16, packed.
void QuantQ2_K(const float* x, uint8_t* b) {
  uint8_t q[256];
  const MinGrid g = QuantizeWithMins(x, 16, 3, 15, q);
  StoreF16(b + kQ2KD, g.d_h);
  StoreF16(b + kQ2KDmin, g.dmin_h);
  for (int s = 0; s < 16; ++s) b[s] = static_cast<uint8_t>(g.sc[s] | (g.m[s] << 4));
  StoreK2Bits(q, b + kQ2KQs);
}

// The index of the level nearest v (in units of the scale; ties to the lower level).
int NearestIq4Index(float v) {
  const int8_t* above = std::lower_bound(std::begin(kIq4Levels), std::end(kIq4Levels), v,
                                         [](int8_t level, float value) { return static_cast<float>(level) < value; });
  if (above == std::begin(kIq4Levels)) return 0;
  if (above == std::end(kIq4Levels)) return 15;
  const int k = static_cast<int>(above - std::begin(kIq4Levels));
  return v - static_cast<float>(kIq4Levels[k - 1]) <= static_cast<float>(kIq4Levels[k]) - v ? k - 1 : k;
}

// 32 values as the indices nearest x / d, into 16 bytes laid out as IQ4_NL's qs; returns
// the sum of squared errors.
double QuantIq4Values(const float* x, float d, uint8_t* qs) {
  const float id = d != 0 ? 1.0f / d : 0.0f;
  double sse = 0;
  int q[32];
  for (int j = 0; j < 32; ++j) {
    q[j] = NearestIq4Index(x[j] * id);
    const double e = double(x[j]) - double(d) * kIq4Levels[q[j]];
    sse += e * e;
  }
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
  return sse;
}

// IQ4_NL: the value of largest magnitude A goes to one end of the levels, either the -127
// end (d = A / -127 in its sign: the other side's far end, up to 127 steps out, rounds to
// 113) or the 113 end (d = A / 113: the other side ends at -113, inside the levels); of the
// two, the one with the smaller squared error. Every value then rounds to within
// max(14·A / 127, 12·A / 113) (the widest half-gap between levels is 12, the -127 case's
// top 14), d rounded up to f16 first.
void QuantIQ4_NL(const float* x, uint8_t* b) {
  const float extreme = Extreme32(x);
  double best_sse = INFINITY;
  for (int end : {-127, 113}) {
    uint16_t h = F16AtLeast(std::fabs(extreme) / static_cast<float>(std::abs(end)));
    if ((extreme > 0) != (end > 0) && extreme != 0) h |= 0x8000;  // d = extreme / end
    uint8_t qs[16];
    const double sse = QuantIq4Values(x, F16ToF32(h), qs);
    if (sse < best_sse) {
      best_sse = sse;
      StoreF16(b, h);
      std::memcpy(b + kIQ4NLQs, qs, 16);
    }
  }
}

// IQ4_XS: per sub-block of 32 the scale s = (its value of largest magnitude) / -127, then
// the super-block's d = max |s| / 31 rounded up to f16 and each sub-block's integer scale
// l = s / d rounded away from zero (|l| <= 31, code l + 32): |d·l| >= |s|, so every value
// lies inside the levels' range and rounds to within 14·|d·l| <= 14·(|s| + d).
void QuantIQ4_XS(const float* x, uint8_t* b) {
  float s[8];
  float max_s = 0;
  for (int k = 0; k < 8; ++k) {
    s[k] = Extreme32(x + 32 * k) / -127.0f;
    max_s = std::max(max_s, std::fabs(s[k]));
  }
  const uint16_t d_h = F16AtLeast(max_s / 31);
  const float d = F16ToF32(d_h);
  StoreF16(b, d_h);
  uint16_t scales_h = 0;
  std::fill(b + kIQ4XSScalesL, b + kIQ4XSScalesL + 4, 0);
  for (int k = 0; k < 8; ++k) {
    const int magnitude = CeilCode(std::fabs(s[k]), d, 31);
    const int l = s[k] < 0 ? -magnitude : magnitude;
    const int code = l + 32;
    b[kIQ4XSScalesL + k / 2] |= static_cast<uint8_t>((code & 0xF) << (4 * (k % 2)));
    scales_h |= static_cast<uint16_t>((code >> 4) << (2 * k));
    QuantIq4Values(x + 32 * k, d * static_cast<float>(l), b + kIQ4XSQs + 16 * k);
  }
  std::memcpy(b + kIQ4XSScalesH, &scales_h, sizeof scales_h);
}

// ---- the lattice formats' quantizers ----------------------------------------------
// Our own and plain: per group of 32 a scale from its largest magnitude (so it maps to the
// largest level), the block's d the largest of them over the largest scale code, rounded
// up; then per codebook point's span the entry nearest in squared error, searched over the
// whole codebook. Signs are x's, except that an odd count of negative values flips the
// one of least magnitude (the formats store an even count).

// Index of the codebook entry (n values each, levels[(word >> bits·j) & mask]) nearest
// target[0, n) in squared error.
int NearestEntry(const uint16_t* book, int entries, int n, int bits, const int8_t* levels, int level_count,
                 const float* target) {
  float err[8][8];  // [value j][level]
  for (int j = 0; j < n; ++j) {
    for (int l = 0; l < level_count; ++l) err[j][l] = (target[j] - levels[l]) * (target[j] - levels[l]);
  }
  const int mask = (1 << bits) - 1;
  int best = 0;
  float best_err = std::numeric_limits<float>::infinity();
  for (int e = 0; e < entries; ++e) {
    float sum = 0;
    for (int j = 0; j < n; ++j) sum += err[j][(book[e] >> (bits * j)) & mask];
    if (sum < best_err) {
      best_err = sum;
      best = e;
    }
  }
  return best;
}

// Signs of x[0, 8) as 7 stored bits, the count of negatives made even by flipping the one
// of least magnitude; target[j] = x[j] / scale with the stored sign taken off (negative
// for a flipped value).
uint32_t SignedTargets(const float* x, float scale, float* target) {
  int bits = 0, smallest = 0;
  for (int j = 0; j < 8; ++j) {
    if (x[j] < 0) bits |= 1 << j;
    if (std::fabs(x[j]) < std::fabs(x[smallest])) smallest = j;
  }
  if (std::popcount(static_cast<unsigned>(bits)) % 2 != 0) bits ^= 1 << smallest;
  const float inv = scale > 0 ? 1.0f / scale : 0.0f;
  for (int j = 0; j < 8; ++j) target[j] = ((bits >> j) & 1 ? -x[j] : x[j]) * inv;
  return static_cast<uint32_t>(bits & 127);
}

// Per group of 32 values the scale that maps its largest magnitude to `top`, the block's d
// (stored) and each group's scale code ls in [0, 15] with scale = d·(0.5 + ls)·step.
void SymmetricLatticeScales(const float* x, float top, float step, uint8_t* b, int* ls) {
  float want[8];
  float max_want = 0;
  for (int g = 0; g < 8; ++g) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * g + j]));
    want[g] = amax / top;
    max_want = std::max(max_want, want[g]);
  }
  const uint16_t d_h = F16AtLeast(max_want / (15.5f * step));
  StoreF16(b, d_h);
  const float d = F16ToF32(d_h);
  for (int g = 0; g < 8; ++g) {
    ls[g] = d > 0 ? std::clamp(RoundToInt(want[g] / (d * step) - 0.5f), 0, 15) : 0;
  }
}

void QuantIQ2_XXS(const float* x, uint8_t* b) {
  int ls[8];
  SymmetricLatticeScales(x, 43, 0.25f, b, ls);
  const float d = LoadF16(b);
  for (int g = 0; g < 8; ++g) {
    const float scale = d * (0.5f + static_cast<float>(ls[g])) * 0.25f;
    uint8_t* q = b + kIQ2XXSQs + 8 * g;
    uint32_t w = static_cast<uint32_t>(ls[g]) << 28;
    for (int k = 0; k < 4; ++k) {
      float target[8];
      w |= SignedTargets(x + 32 * g + 8 * k, scale, target) << (7 * k);
      q[k] = static_cast<uint8_t>(NearestEntry(iq_grids::kIq2xxs, 256, 8, 2, kIq2Levels, 3, target));
    }
    std::memcpy(q + 4, &w, sizeof w);
  }
}

void QuantIQ3_XXS(const float* x, uint8_t* b) {
  int ls[8];
  SymmetricLatticeScales(x, 62, 0.5f, b, ls);
  const float d = LoadF16(b);
  for (int g = 0; g < 8; ++g) {
    const float scale = d * (0.5f + static_cast<float>(ls[g])) * 0.5f;
    uint32_t w = static_cast<uint32_t>(ls[g]) << 28;
    for (int h = 0; h < 4; ++h) {
      float target[8];
      w |= SignedTargets(x + 32 * g + 8 * h, scale, target) << (7 * h);
      for (int half = 0; half < 2; ++half) {
        b[kIQ3XXSQs + 8 * g + 2 * h + half] =
            static_cast<uint8_t>(NearestEntry(iq_grids::kIq3xxs, 256, 4, 3, kIq3Levels, 8, target + 4 * half));
      }
    }
    std::memcpy(b + kIQ3XXSW + 4 * g, &w, sizeof w);
  }
}

// IQ1_S: per group dl = d·(2·ls + 1) maps its largest magnitude to 1 + 1/8, the delta's sign
// the one with the smaller squared error over the group.
void QuantIQ1_S(const float* x, uint8_t* b) {
  float want[8];
  float max_want = 0;
  for (int g = 0; g < 8; ++g) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * g + j]));
    want[g] = amax / 1.125f;
    max_want = std::max(max_want, want[g]);
  }
  const uint16_t d_h = F16AtLeast(max_want / 15);
  StoreF16(b, d_h);
  const float d = F16ToF32(d_h);
  for (int g = 0; g < 8; ++g) {
    const int ls = d > 0 ? std::clamp(RoundToInt((want[g] / d - 1) / 2), 0, 7) : 0;
    const float dl = d * static_cast<float>(2 * ls + 1);
    const float inv = dl > 0 ? 1.0f / dl : 0.0f;
    int best_idx[2][4];
    float best_err[2] = {0, 0};
    for (int s = 0; s < 2; ++s) {  // delta +1/8, -1/8
      const float delta = s == 0 ? 0.125f : -0.125f;
      for (int k = 0; k < 4; ++k) {
        float target[8];
        for (int j = 0; j < 8; ++j) target[j] = x[32 * g + 8 * k + j] * inv - delta;
        best_idx[s][k] = NearestEntry(iq_grids::kIq1s, 2048, 8, 2, kIq1Levels, 3, target);
        const uint16_t entry = iq_grids::kIq1s[best_idx[s][k]];
        for (int j = 0; j < 8; ++j) {
          const float e = target[j] - kIq1Levels[(entry >> (2 * j)) & 3];
          best_err[s] += e * e;
        }
      }
    }
    const int s = best_err[1] < best_err[0] ? 1 : 0;
    uint16_t qh = static_cast<uint16_t>(ls << 12 | s << 15);
    for (int k = 0; k < 4; ++k) {
      b[kIQ1SQs + 4 * g + k] = static_cast<uint8_t>(best_idx[s][k] & 255);
      qh = static_cast<uint16_t>(qh | (best_idx[s][k] >> 8) << (3 * k));
    }
    std::memcpy(b + kIQ1SQh + 2 * g, &qh, sizeof qh);
  }
}

}  // namespace

void IqCodes(DType dtype, const uint8_t* b, int8_t* codes, float* scales) {
  switch (dtype) {
    case DType::kIQ2_XXS: Iq2xxsCodes(b, codes, scales); return;
    case DType::kIQ3_XXS: Iq3xxsCodes(b, codes, scales); return;
    case DType::kIQ1_S: Iq1sCodes(b, codes, scales); return;
    default: LATTE_CHECK(false, "IqCodes: not a lattice format: ", DTypeName(dtype));
  }
}

void F16ToF32Row(const uint16_t* in, int64_t n, float* out) {
  // Widen the exponent and mantissa into f32's fields, rebias the exponent (+112), and
  // fix the two ends: f16 Inf/NaN (exponent 31) get f32's all-ones exponent, and
  // subnormals (exponent 0) are renormalised by a float subtraction (exact).
  constexpr uint32_t kExpMask = 0x7c00u << 13;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t h = in[i];
    uint32_t bits = (h & 0x7fffu) << 13;
    const uint32_t exponent = bits & kExpMask;
    bits += (127 - 15) << 23;
    float f;
    if (exponent == kExpMask) {
      bits += (128 - 16) << 23;
      std::memcpy(&f, &bits, sizeof f);
    } else if (exponent == 0) {
      bits += 1u << 23;
      std::memcpy(&f, &bits, sizeof f);
      f -= 6.103515625e-05f;  // 2^-14
    } else {
      std::memcpy(&f, &bits, sizeof f);
    }
    uint32_t out_bits;
    std::memcpy(&out_bits, &f, sizeof f);
    out_bits |= (h & 0x8000u) << 16;
    std::memcpy(&out[i], &out_bits, sizeof f);
  }
}

void DequantizeToF32(DType dtype, const void* data, int64_t n, float* out) {
  CheckDType(dtype, n, "DequantizeToF32");
  if (dtype == DType::kF16) {
    F16ToF32Row(static_cast<const uint16_t*>(data), n, out);
    return;
  }
  const int64_t per_block = DTypeBlockElements(dtype);
  const size_t block_bytes = DTypeBlockBytes(dtype);
  for (int64_t b = 0; b < n / per_block; ++b) DequantBlock(dtype, Bytes(data) + b * block_bytes, out + b * per_block);
}

void DequantizeToBf16(DType dtype, const void* data, int64_t n, bf16* out) {
  CheckDType(dtype, n, "DequantizeToBf16");
  float values[256];
  const int64_t per = dtype == DType::kF16 ? 256 : DTypeBlockElements(dtype);
  const size_t bytes = DTypeRowBytes(dtype, per);
  for (int64_t i = 0; i < n; i += per) {
    const int64_t count = std::min(per, n - i);
    DequantizeToF32(dtype, Bytes(data) + (i / per) * bytes, count, values);
    for (int64_t j = 0; j < count; ++j) out[i + j] = F32ToBf16(values[j]);
  }
}

float BlockValueAt(DType dtype, const void* row, int64_t i) {
  if (dtype == DType::kF16) return LoadF16(Bytes(row) + 2 * i);
  const int64_t per_block = DTypeBlockElements(dtype);
  const uint8_t* b = Bytes(row) + static_cast<size_t>(i / per_block) * DTypeBlockBytes(dtype);
  const int j = static_cast<int>(i % per_block);
  switch (dtype) {
    case DType::kQ8_0: return static_cast<float>(static_cast<int8_t>(b[kQ8_0Qs + j])) * LoadF16(b);
    case DType::kQ4_0: {
      const uint8_t q = b[kQ4_0Qs + j % 16];
      return static_cast<float>((j < 16 ? (q & 0xF) : (q >> 4)) - 8) * LoadF16(b);
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const int sub = j / 32, c = j / 64, l = j % 32;
      const bool five = dtype == DType::kQ5_K;
      const uint8_t byte = b[(five ? kQ5KQs : kQ4KQs) + 32 * c + l];
      int q = sub % 2 == 0 ? (byte & 0xF) : (byte >> 4);
      if (five) q += ((b[kQ5KQh + l] >> sub) & 1) << 4;
      uint8_t sc, m;
      ScaleMinK4(sub, b + kQ4KScales, &sc, &m);
      return LoadF16(b) * sc * static_cast<float>(q) - LoadF16(b + kQ4KDmin) * m;
    }
    case DType::kQ6_K: {
      const int8_t sc = static_cast<int8_t>(b[kQ6KScales + j / 16]);
      return LoadF16(b + kQ6KD) * sc * static_cast<float>(Q6Code(b, j) - 32);
    }
    case DType::kQ5_0: return static_cast<float>(Q5Code(b + kQ5_0Qh, b + kQ5_0Qs, j) - 16) * LoadF16(b);
    case DType::kQ5_1:
      return static_cast<float>(Q5Code(b + kQ5_1Qh, b + kQ5_1Qs, j)) * LoadF16(b) + LoadF16(b + kQ5_1M);
    case DType::kQ3_K:
      return LoadF16(b + kQ3KD) * static_cast<float>(Q3KScale(j / 16, b + kQ3KScales) - 32) *
             static_cast<float>(Q3KCode(b, j) - 4);
    case DType::kQ2_K: {
      const uint8_t sc = b[j / 16];
      return LoadF16(b + kQ2KD) * static_cast<float>(sc & 0xF) * static_cast<float>(K2Bits(b + kQ2KQs, j)) -
             LoadF16(b + kQ2KDmin) * static_cast<float>(sc >> 4);
    }
    case DType::kIQ4_NL: return LoadF16(b) * static_cast<float>(kIq4Levels[IQ4Index(b + kIQ4NLQs, j)]);
    case DType::kIQ4_XS: {
      const int sub = j / 32;
      const float dl = LoadF16(b) * static_cast<float>(IQ4XSScale(b, sub) - 32);
      return dl * static_cast<float>(kIq4Levels[IQ4Index(b + kIQ4XSQs + 16 * sub, j % 32)]);
    }
    case DType::kIQ2_XXS:
    case DType::kIQ3_XXS:
    case DType::kIQ1_S: {
      int8_t codes[256];
      float scales[8];
      IqCodes(dtype, b, codes, scales);
      return scales[j / 32] * static_cast<float>(codes[j]);
    }
    default: LATTE_CHECK(false, "BlockValueAt: not a block format: ", DTypeName(dtype));
  }
  return 0;
}

void QuantizeToBlocks(DType dtype, const float* x, int64_t n, void* out) {
  LATTE_CHECK(IsBlockQuantized(dtype), "QuantizeToBlocks: dtype ", DTypeName(dtype), " is not a block format");
  CheckDType(dtype, n, "QuantizeToBlocks");
  const int64_t per_block = DTypeBlockElements(dtype);
  const size_t block_bytes = DTypeBlockBytes(dtype);
  for (int64_t i = 0; i < n / per_block; ++i) {
    const float* xb = x + i * per_block;
    uint8_t* b = static_cast<uint8_t*>(out) + i * block_bytes;
    switch (dtype) {
      case DType::kQ8_0: QuantQ8_0(xb, b); break;
      case DType::kQ4_0: QuantQ4_0(xb, b); break;
      case DType::kQ4_K: QuantK4K5(xb, 15, b); break;
      case DType::kQ5_K: QuantK4K5(xb, 31, b); break;
      case DType::kQ6_K: QuantQ6_K(xb, b); break;
      case DType::kQ5_0: QuantQ5_0(xb, b); break;
      case DType::kQ5_1: QuantQ5_1(xb, b); break;
      case DType::kQ3_K: QuantQ3_K(xb, b); break;
      case DType::kQ2_K: QuantQ2_K(xb, b); break;
      case DType::kIQ4_NL: QuantIQ4_NL(xb, b); break;
      case DType::kIQ4_XS: QuantIQ4_XS(xb, b); break;
      case DType::kIQ2_XXS: QuantIQ2_XXS(xb, b); break;
      case DType::kIQ3_XXS: QuantIQ3_XXS(xb, b); break;
      case DType::kIQ1_S: QuantIQ1_S(xb, b); break;
      default: break;
    }
  }
}

}  // namespace latte
