// GGUF block formats (kernels/block_quant.h) and the matmul paths for them and for f16
// weights: dequantization against the formulas written out here from ggml's definitions,
// quantize -> dequantize error bounds, and every path (portable, AVX-512BW, AVX512_VNNI,
// AVX2 integer GEMVs; the chunked oneDNN GEMM; the dispatch; MatmulMany) against
// MatmulReference on random data.
#include "kernels/block_quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/cpu_features.h"
#include "kernels/iq_grids.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"
#include "test_util.h"

namespace latte {
namespace {

using matmul_internal::BlockGemvIsa;
using testing_util::ExpectRowsIndependentOfSplit;
using testing_util::ExpectXRowsIndependentOfBatch;
using testing_util::ScopedPortableKernels;

// Every block format latte reads.
const DType kBlockTypes[] = {DType::kQ8_0,   DType::kQ4_0,    DType::kQ4_K,    DType::kQ5_K, DType::kQ6_K,
                             DType::kQ5_0,   DType::kQ5_1,    DType::kQ3_K,    DType::kQ2_K, DType::kIQ4_NL,
                             DType::kIQ4_XS, DType::kIQ2_XXS, DType::kIQ3_XXS, DType::kIQ1_S};
// ... and f16, which the row dequantizers and the large-m path also take.
const DType kBlockTypesAndF16[] = {DType::kQ8_0,   DType::kQ4_0,  DType::kQ4_K,    DType::kQ5_K,    DType::kQ6_K,
                                   DType::kQ5_0,   DType::kQ5_1,  DType::kQ3_K,    DType::kQ2_K,    DType::kIQ4_NL,
                                   DType::kIQ4_XS, DType::kIQ1_S, DType::kIQ2_XXS, DType::kIQ3_XXS, DType::kF16};

std::string Name(DType dtype) { return std::string(DTypeName(dtype)); }

// A random finite f16 bit pattern (exponent below 31), either sign; `max_exponent`
// bounds the magnitude (15 = values below 2).
uint16_t RandomF16(std::mt19937& rng, int max_exponent = 30) {
  const uint16_t sign = static_cast<uint16_t>((rng() & 1u) << 15);
  const uint16_t exponent = static_cast<uint16_t>(rng() % (max_exponent + 1));
  return static_cast<uint16_t>(sign | (exponent << 10) | (rng() & 0x3ffu));
}

float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// ---- the formulas, written out from ggml-common.h / ggml-quants.c ------------------------

// ggml's get_scale_min_k4 for sub-block j of the 12 packed bytes q.
void TestScaleMin(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] % 64;
    *m = q[j + 4] % 64;
  } else {
    *sc = (q[j + 4] % 16) + (q[j - 4] / 64) * 16;
    *m = (q[j + 4] / 16) + (q[j] / 64) * 16;
  }
}

// Value i of one block, computed element by element in ggml's order of f32 operations.
float FormulaValue(DType dtype, const uint8_t* b, int i) {
  switch (dtype) {
    case DType::kQ8_0: return static_cast<float>(static_cast<int8_t>(b[2 + i])) * F16At(b);
    case DType::kQ4_0: {
      const int q = i < 16 ? b[2 + i] % 16 : b[2 + i - 16] / 16;
      return static_cast<float>(q - 8) * F16At(b);
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const bool five = dtype == DType::kQ5_K;
      const int sub = i / 32;
      const uint8_t byte = b[(five ? 48 : 16) + 32 * (i / 64) + i % 32];
      int q = sub % 2 == 0 ? byte % 16 : byte / 16;
      if (five && (b[16 + i % 32] & (1 << sub)) != 0) q += 16;
      int sc, m;
      TestScaleMin(sub, b + 4, &sc, &m);
      const float d1 = F16At(b) * static_cast<float>(sc);
      const float m1 = F16At(b + 2) * static_cast<float>(m);
      return d1 * static_cast<float>(q) - m1;
    }
    case DType::kQ6_K: {
      const int half = i / 128, within = i % 128, quarter = within / 32, l = within % 32;
      const uint8_t ql = b[64 * half + (quarter % 2 == 1 ? 32 : 0) + l];
      const int low = quarter < 2 ? ql % 16 : ql / 16;
      const int high = (b[128 + 32 * half + l] >> (2 * quarter)) & 3;
      const float d = F16At(b + 208);
      const int8_t sc = static_cast<int8_t>(b[192 + i / 16]);
      return d * static_cast<float>(sc) * static_cast<float>(low + 16 * high - 32);
    }
    case DType::kQ5_0:
    case DType::kQ5_1: {
      // dequantize_row_q5_0 / q5_1: qh copied into a uint32; value j < 16 takes bit j,
      // value j + 16 bit j + 16 (ggml's (qh >> (j + 12)) & 0x10).
      const bool one = dtype == DType::kQ5_1;
      uint32_t qh;
      std::memcpy(&qh, b + (one ? 4 : 2), 4);
      const uint8_t* qs = b + (one ? 8 : 6);
      const int j = i % 16;
      const int x = i < 16 ? ((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) : ((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10));
      return one ? static_cast<float>(x) * F16At(b) + F16At(b + 2) : static_cast<float>(x - 16) * F16At(b);
    }
    case DType::kQ3_K: {
      // dequantize_row_q3_K: the 12 scale bytes as 4 uint32 rearranged (kmask1 0x03030303,
      // kmask2 0x0f0f0f0f) into 16 int8; the high-bit mask m walks 1, 2, 4, ... per 32 values.
      uint32_t aux[4];
      std::memcpy(aux, b + 96, 12);
      const uint32_t tmp = aux[2];
      aux[2] = ((aux[0] >> 4) & 0x0f0f0f0f) | (((tmp >> 4) & 0x03030303) << 4);
      aux[3] = ((aux[1] >> 4) & 0x0f0f0f0f) | (((tmp >> 6) & 0x03030303) << 4);
      aux[0] = (aux[0] & 0x0f0f0f0f) | (((tmp >> 0) & 0x03030303) << 4);
      aux[1] = (aux[1] & 0x0f0f0f0f) | (((tmp >> 2) & 0x03030303) << 4);
      int8_t scales[16];
      std::memcpy(scales, aux, 16);
      const int n = i / 128, shift = 2 * ((i % 128) / 32), l = i % 32;
      const uint8_t mask = static_cast<uint8_t>(1 << (4 * n + shift / 2));
      const int q = ((b[32 + 32 * n + l] >> shift) & 3) - ((b[l] & mask) ? 0 : 4);
      const float dl = F16At(b + 108) * static_cast<float>(scales[i / 16] - 32);
      return dl * static_cast<float>(q);
    }
    case DType::kQ2_K: {
      const int n = i / 128, shift = 2 * ((i % 128) / 32), l = i % 32;
      const uint8_t sc = b[i / 16];
      const float dl = F16At(b + 80) * static_cast<float>(sc & 0xF), ml = F16At(b + 82) * static_cast<float>(sc >> 4);
      return dl * static_cast<float>((b[16 + 32 * n + l] >> shift) & 3) - ml;
    }
    case DType::kIQ4_NL:
    case DType::kIQ4_XS: {
      // dequantize_row_iq4_nl / iq4_xs: kvalues_iq4nl indexed by qs[j] & 0xf (value j) and
      // qs[j] >> 4 (value j + 16) of each 32; IQ4_XS's ls from scales_l's nibble ib % 2 of
      // byte ib / 2 and scales_h's bits 2·ib, 2·ib + 1, dl = d·(ls - 32).
      static constexpr int8_t kValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
      const bool xs = dtype == DType::kIQ4_XS;
      const int ib = i / 32, j = i % 32;
      const uint8_t* qs = xs ? b + 8 + 16 * ib : b + 2;
      const int q = j < 16 ? qs[j] & 0xf : qs[j - 16] >> 4;
      float dl = F16At(b);
      if (xs) {
        const uint16_t scales_h = static_cast<uint16_t>(b[2] | b[3] << 8);
        const int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
        dl = dl * static_cast<float>(ls - 32);
      }
      return dl * static_cast<float>(kValues[q]);
    }
    case DType::kIQ2_XXS:
    case DType::kIQ3_XXS: {
      // dequantize_row_iq2_xxs / iq3_xxs: per 32 values a u32 w (IQ2_XXS: after the group's
      // 4 index bytes; IQ3_XXS: after all 64), db = d·(0.5 + (w >> 28))·0.25 (·0.5), the
      // 8 signs of values 8l .. 8l + 7 ksigns[(w >> 7l) & 127] (bit 7: the parity), the
      // codebook point of 8 (4) values through its index byte.
      const bool two = dtype == DType::kIQ2_XXS;
      const int ib = i / 32, j = i % 32, l = j / 8;
      uint32_t w;
      std::memcpy(&w, two ? b + 2 + 8 * ib + 4 : b + 66 + 4 * ib, 4);
      const float db = F16At(b) * (0.5f + static_cast<float>(w >> 28)) * (two ? 0.25f : 0.5f);
      const uint32_t s7 = (w >> (7 * l)) & 127;
      int signs = static_cast<int>(s7);
      for (int bit = 0; bit < 7; ++bit) signs ^= static_cast<int>((s7 >> bit) & 1) << 7;
      float grid;
      if (two) {
        const uint16_t entry = iq_grids::kIq2xxs[b[2 + 8 * ib + l]];
        grid = static_cast<float>(std::array<int, 3>{8, 25, 43}[(entry >> (2 * (j % 8))) & 3]);
      } else {
        const uint16_t entry = iq_grids::kIq3xxs[b[2 + 8 * ib + j / 4]];
        grid = static_cast<float>(std::array<int, 8>{4, 12, 20, 28, 36, 44, 52, 62}[(entry >> (3 * (j % 4))) & 7]);
      }
      return db * grid * ((signs >> (j % 8)) & 1 ? -1.0f : 1.0f);
    }
    case DType::kIQ1_S: {
      // dequantize_row_iq1_s: qh[ib] (u16 after d and the 32 qs bytes) gives dl = d·(2·((qh
      // >> 12) & 7) + 1) and delta = -/+ 1/8 (bit 15); value j of 8 of index
      // qs[4ib + l] | ((qh >> 3l) & 7) << 8 is dl·(grid[j] + delta), grid in {-1, 0, 1}.
      const int ib = i / 32, l = (i % 32) / 8, j = i % 8;
      uint16_t qh;
      std::memcpy(&qh, b + 34 + 2 * ib, 2);
      const float dl = F16At(b) * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float delta = qh & 0x8000 ? -0.125f : 0.125f;
      const uint16_t entry = iq_grids::kIq1s[b[2 + 4 * ib + l] | ((qh >> (3 * l)) & 7) << 8];
      const int grid = static_cast<int>((entry >> (2 * j)) & 3) - 1;
      return dl * (static_cast<float>(grid) + delta);
    }
    default: return NAN;
  }
}

// A block with random bytes in its quant fields and random finite f16 scales (bounded
// to |v| < 2^8 so the products stay far from f32 overflow).
std::vector<uint8_t> RandomBlocks(DType dtype, int64_t blocks, std::mt19937& rng) {
  const size_t bytes = DTypeBlockBytes(dtype);
  std::vector<uint8_t> out(blocks * bytes);
  for (uint8_t& v : out) v = static_cast<uint8_t>(rng());
  for (int64_t k = 0; k < blocks; ++k) {
    uint8_t* b = out.data() + k * bytes;
    auto put = [&](int offset) {
      const uint16_t h = RandomF16(rng, 22);
      std::memcpy(b + offset, &h, 2);
    };
    switch (dtype) {
      case DType::kQ6_K: put(208); break;
      case DType::kQ3_K: put(108); break;
      case DType::kQ2_K:
        put(80);
        put(82);
        break;
      case DType::kQ4_K:
      case DType::kQ5_K:
      case DType::kQ5_1:
        put(0);
        put(2);
        break;
      default: put(0); break;
    }
  }
  return out;
}

TEST(BlockQuantTest, LayoutSizes) {
  // ggml-common.h's static_asserts: sizeof(block_q8_0) == 34, ... block_q6_K == 210.
  EXPECT_EQ(DTypeBlockBytes(DType::kQ8_0), 34u);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ4_0), 18u);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ4_K), 144u);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ5_K), 176u);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ6_K), 210u);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ5_0), 22u);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ5_1), 24u);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ3_K), 110u);
  EXPECT_EQ(DTypeBlockBytes(DType::kQ2_K), 84u);
  EXPECT_EQ(DTypeBlockBytes(DType::kIQ4_NL), 18u);
  EXPECT_EQ(DTypeBlockBytes(DType::kIQ4_XS), 136u);
}

TEST(BlockQuantTest, DequantizeMatchesFormula) {
  std::mt19937 rng(1);
  for (DType dtype : kBlockTypes) {
    SCOPED_TRACE(Name(dtype));
    const int64_t per = DTypeBlockElements(dtype), blocks = 37;
    const std::vector<uint8_t> data = RandomBlocks(dtype, blocks, rng);
    std::vector<float> got(blocks * per);
    std::vector<bf16> got_bf16(blocks * per + 1, 0xdead);
    DequantizeToF32(dtype, data.data(), blocks * per, got.data());
    DequantizeToBf16(dtype, data.data(), blocks * per, got_bf16.data());
    for (int64_t k = 0; k < blocks; ++k) {
      const uint8_t* b = data.data() + k * DTypeBlockBytes(dtype);
      for (int i = 0; i < per; ++i) {
        const float want = FormulaValue(dtype, b, i);
        const int64_t at = k * per + i;
        ASSERT_EQ(got[at], want) << "block " << k << " value " << i;
        ASSERT_EQ(BlockValueAt(dtype, data.data(), at), want) << "block " << k << " value " << i;
        ASSERT_EQ(got_bf16[at], F32ToBf16(want)) << "block " << k << " value " << i;
      }
    }
    EXPECT_EQ(got_bf16.back(), 0xdead) << "wrote past the end";
  }
}

// n random values of `dtype`: random f16 values, or RandomBlocks (n whole blocks).
std::vector<uint8_t> RandomRow(DType dtype, int64_t n, std::mt19937& rng) {
  if (dtype != DType::kF16) return RandomBlocks(dtype, n / DTypeBlockElements(dtype), rng);
  std::vector<uint8_t> data(2 * n);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = RandomF16(rng);
    std::memcpy(data.data() + 2 * i, &h, 2);
  }
  return data;
}

// The AVX-512 row dequantizer (the large-m path's) gives the portable values bit for bit,
// in f32 and rounded to bf16 (integer rounding and vcvtneps2bf16), f16 rows included.
TEST(BlockQuantTest, Avx512DequantizeMatchesPortable) {
  SetPortableKernelsForTesting(false);
  if (!GetCpuFeatures().avx512f) GTEST_SKIP() << "CPU lacks AVX-512";
  std::mt19937 rng(3);
  for (DType dtype : kBlockTypesAndF16) {
    SCOPED_TRACE(Name(dtype));
    const int64_t n = dtype == DType::kF16 ? 1000 : 7 * DTypeBlockElements(dtype);
    const std::vector<uint8_t> data = RandomRow(dtype, n, rng);
    std::vector<float> want(n), got(n + 1, -1.0f);
    std::vector<bf16> want_bf16(n), got_bf16(n + 1, 0xdead);
    DequantizeToF32(dtype, data.data(), n, want.data());
    DequantizeToBf16(dtype, data.data(), n, want_bf16.data());
    matmul_internal::DequantizeRowAvx512(dtype, data.data(), n, got.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << "value " << i;
    EXPECT_EQ(got[n], -1.0f) << "wrote past the end";
    for (bool has_bf16 : {false, true}) {
      if (has_bf16 && !GetCpuFeatures().avx512_bf16) continue;
      matmul_internal::DequantizeRowAvx512(dtype, data.data(), n, got_bf16.data(), has_bf16);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got_bf16[i], want_bf16[i]) << "value " << i << " bf16 " << has_bf16;
      EXPECT_EQ(got_bf16[n], 0xdead) << "wrote past the end";
    }
  }
}

// The AVX2 row dequantizer (the large-m path's f32 chunks on CPUs without AVX-512) gives
// the portable values bit for bit, f16 rows (with a tail of fewer than 8) included.
TEST(BlockQuantTest, Avx2DequantizeMatchesPortable) {
  SetPortableKernelsForTesting(false);
  if (!GetCpuFeatures().avx2) GTEST_SKIP() << "CPU lacks AVX2 (with FMA, F16C, BMI2)";
  std::mt19937 rng(4);
  for (DType dtype : kBlockTypesAndF16) {
    SCOPED_TRACE(Name(dtype));
    const int64_t n = dtype == DType::kF16 ? 1003 : 7 * DTypeBlockElements(dtype);
    const std::vector<uint8_t> data = RandomRow(dtype, n, rng);
    std::vector<float> want(n), got(n + 1, -1.0f);
    DequantizeToF32(dtype, data.data(), n, want.data());
    matmul_internal::DequantizeRowAvx2(dtype, data.data(), n, got.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << "value " << i;
    EXPECT_EQ(got[n], -1.0f) << "wrote past the end";
  }
}

// Hand-packed Q4_K scales: sub-block j's scale j + 1 + 8·(j >= 4)·5 and min 63 - j, packed
// by hand as ggml's quantize_row_q4_K packs them, read back value by value.
TEST(BlockQuantTest, K4ScalePackingByHand) {
  uint8_t b[144] = {};
  const uint16_t one = F32ToF16(1.0f), half = F32ToF16(0.5f);
  std::memcpy(b, &one, 2);
  std::memcpy(b + 2, &half, 2);
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = j < 4 ? j + 1 : 40 + j;  // j >= 4 needs the two high bits
    m[j] = 63 - j;
  }
  uint8_t* s = b + 4;
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
  for (int i = 0; i < 128; ++i) b[16 + i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  float out[256];
  DequantizeToF32(DType::kQ4_K, b, 256, out);
  for (int i = 0; i < 256; ++i) {
    const int sub = i / 32, l = i % 32;
    const int q = sub % 2 == 0 ? l % 16 : 15 - l % 16;
    ASSERT_EQ(out[i], 1.0f * sc[sub] * q - 0.5f * m[sub]) << i;
  }
}

// ---- quantize -> dequantize ------------------------------------------------------------
//
// Bounds on |x - dequantize(quantize(x))| per value, A = max |x| over the value's block
// (Q8_0, Q4_0) or super-block (the K formats). Scales are rounded up to f16 (a factor of
// at most 1 + 2^-10) and, for the K formats, to their integer codes:
//   Q8_0: step d = A / 127; round to nearest: d / 2 = A / 254.
//   Q4_0: d = A / 8 with the extreme at code 0 (as ggml); the far end of the other side
//         rounds into code 15, up to d = A / 8 away.
//   Q4_K / Q5_K (L = 15 / 31 levels): min rounded up to dmin·m (dmin <= A / 63), step
//         s <= (2A + dmin) / L rounded up to d·sc (d <= s_max / 63): error <= d·sc / 2
//         <= (A / L)·(1 + 1/126)·(1 + 1/63)·(1 + 2^-10)^2 < 1.025·A / L.
//   Q6_K: step a / 31 per 16 values (a = their max |x| <= A) rounded up to d·sc
//         (d <= step_max / 127): error <= (A / 62)·(1 + 1/127)·(1 + 2^-10) < 1.01·A / 62.
//   Q3_K: step a / 3 per 16 values rounded up to d·sc (d <= step_max / 31): error
//         <= (A / 6)·(1 + 1/31)·(1 + 2^-10) < 1.035·A / 6.
//   Q2_K: as Q4_K with L = 3 and 4-bit codes (dmin <= A / 15, d <= s_max / 15): error
//         <= (A / 3)·(1 + 1/30)·(1 + 1/15)·(1 + 2^-10)^2 < 1.105·A / 3.
//   IQ4_NL: the extreme at level -127 (d = A / 127: the other side's far end rounds to 113,
//         14·d away) or at 113 (d = A / 113, half-gaps of at most 12 levels): error <=
//         max(14 / 127, 12 / 113)·A·(1 + 2^-10).
//   IQ4_XS: sub-block scale s = a / 127 (a <= A its max |x|), d <= max s / 31 rounded up, s
//         rounded up to d·l: error <= 14·|d·l| <= 14·(A / 127)·(1 + (1 + 2^-10) / 31).
double RoundTripBound(DType dtype, double amax) {
  switch (dtype) {
    case DType::kQ8_0: return amax / 254 * (1 + 1.0 / 1024);
    case DType::kQ4_0: return amax / 8 * (1 + 1.0 / 1024);
    case DType::kQ4_K: return 1.025 * amax / 15;
    case DType::kQ5_K: return 1.025 * amax / 31;
    case DType::kQ6_K: return 1.01 * amax / 62;
    case DType::kQ5_0: return amax / 16 * (1 + 1.0 / 1024);
    case DType::kQ5_1: return 1.01 * amax / 31;  // half a step of (max - min) / 31 <= 2 amax / 31
    case DType::kQ3_K: return 1.035 * amax / 6;
    case DType::kQ2_K: return 1.105 * amax / 3;
    case DType::kIQ4_NL: return std::max(14.0 / 127, 12.0 / 113) * amax * (1 + 1.0 / 1024);
    case DType::kIQ4_XS: return 14.0 / 127 * amax * (1 + (1 + 1.0 / 1024) / 31) * (1 + 1e-6);
    default: return 0;
  }
}

TEST(BlockQuantTest, QuantizeRoundTripWithinBound) {
  std::mt19937 rng(2);
  for (DType dtype : kBlockTypes) {
    if (IsLatticeFormat(dtype)) continue;  // no per-value bound: LatticeQuantizeRoundTrip
    SCOPED_TRACE(Name(dtype));
    const int64_t per = DTypeBlockElements(dtype), blocks = 40;
    std::vector<float> x(blocks * per);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t k = 0; k < blocks; ++k) {
      // Magnitudes 2^-12 .. 2^4, all-positive and all-negative blocks, a zero block and a
      // constant one, and blocks whose sub-blocks differ in scale by up to 2^6.
      const float scale = std::ldexp(1.0f, static_cast<int>(k % 17) - 12);
      for (int64_t i = 0; i < per; ++i) {
        float v = u(rng) * scale;
        if (k % 5 == 1) v = std::fabs(v);
        if (k % 5 == 2) v = -std::fabs(v);
        if (k % 5 == 3) v *= std::ldexp(1.0f, -static_cast<int>((i / 32) % 7));
        if (k == 7) v = 0;
        if (k == 11) v = 0.3f;
        x[k * per + i] = v;
      }
    }
    std::vector<uint8_t> blocks_out(DTypeRowBytes(dtype, blocks * per));
    QuantizeToBlocks(dtype, x.data(), blocks * per, blocks_out.data());
    std::vector<float> back(x.size());
    DequantizeToF32(dtype, blocks_out.data(), blocks * per, back.data());
    double worst = 0;
    for (int64_t k = 0; k < blocks; ++k) {
      double amax = 0;
      for (int64_t i = 0; i < per; ++i) amax = std::max(amax, std::fabs(double(x[k * per + i])));
      const double bound = RoundTripBound(dtype, amax) + 1e-30;
      for (int64_t i = 0; i < per; ++i) {
        const double err = std::fabs(double(back[k * per + i]) - x[k * per + i]);
        worst = std::max(worst, amax > 0 ? err / amax : 0);
        ASSERT_LE(err, bound) << "block " << k << " value " << i << ": " << x[k * per + i] << " -> "
                              << back[k * per + i];
      }
      if (k == 7) {
        for (int64_t i = 0; i < per; ++i) ASSERT_EQ(back[k * per + i], 0.0f) << "zero block, value " << i;
      }
    }
    RecordProperty("worst_relative_error_" + Name(dtype), std::to_string(worst));
  }
}

// The lattice quantizers have no per-value bound (a value goes where its codebook point
// goes): over uniform random blocks their error stays below a fraction of the values'
// RMS (measured 0.33 IQ2_XXS, 0.17 IQ3_XXS, 0.43 IQ1_S; a wrong scale or sign reads ~1),
// and every span of 8 values (4 for
// IQ3_XXS) holds the codebook point nearest x among all the points, for the block's stored
// scale and signs (IQ1_S: delta).
double LatticeRmsBound(DType dtype) {
  switch (dtype) {
    case DType::kIQ2_XXS: return 0.36;
    case DType::kIQ3_XXS: return 0.19;
    case DType::kIQ1_S: return 0.48;
    default: return 0;
  }
}

TEST(BlockQuantTest, LatticeQuantizeRoundTrip) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (DType dtype : kBlockTypes) {
    if (!IsLatticeFormat(dtype)) continue;
    SCOPED_TRACE(Name(dtype));
    const int64_t blocks = 24, n = blocks * 256;
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) {
      // Blocks of magnitude 2^-8 .. 2^3, and groups of 32 that differ by up to 2^4.
      x[i] = u(rng) * std::ldexp(1.0f, static_cast<int>((i / 256) % 12) - 8 - static_cast<int>((i / 32) % 5));
    }
    std::fill_n(x.begin() + 5 * 256, 256, 0.0f);  // a zero block
    std::vector<uint8_t> q(DTypeRowBytes(dtype, n));
    QuantizeToBlocks(dtype, x.data(), n, q.data());
    std::vector<float> back(n);
    DequantizeToF32(dtype, q.data(), n, back.data());
    for (int i = 0; i < 256; ++i) ASSERT_EQ(back[5 * 256 + i], 0.0f) << "zero block, value " << i;
    double err2 = 0, x2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      err2 += (double(back[i]) - x[i]) * (double(back[i]) - x[i]);
      x2 += double(x[i]) * x[i];
    }
    const double rms = std::sqrt(err2 / x2);
    RecordProperty("relative_rms_error_" + Name(dtype), std::to_string(rms));
    EXPECT_LT(rms, LatticeRmsBound(dtype));
    // Nearest point per span: any other codebook entry, in the span's place (same scale and
    // signs), dequantizes no closer to x.
    const int span = dtype == DType::kIQ3_XXS ? 4 : 8;
    const int entries = dtype == DType::kIQ1_S ? 2048 : 256;
    for (int64_t k = 0; k < blocks; ++k) {
      uint8_t* b = q.data() + k * DTypeBlockBytes(dtype);
      for (int s = 0; s < 256 / span; s += 7) {  // every 7th span
        auto span_error = [&] {
          double e = 0;
          for (int j = 0; j < span; ++j) {
            const double d = FormulaValue(dtype, b, s * span + j) - x[k * 256 + s * span + j];
            e += d * d;
          }
          return e;
        };
        // The span's index: IQ2_XXS idx byte s % 4 of group s / 4; IQ3_XXS byte s; IQ1_S
        // qs byte and 3 bits of qh.
        const int g = s * span / 32, l = (s * span % 32) / span;
        uint8_t* idx = dtype == DType::kIQ2_XXS ? b + 2 + 8 * g + l : b + 2 + s;
        uint8_t* qh = b + 34 + 2 * g;
        auto set = [&](int e) {
          *idx = static_cast<uint8_t>(e & 255);
          if (dtype == DType::kIQ1_S) {
            uint16_t h;
            std::memcpy(&h, qh, 2);
            h = static_cast<uint16_t>((h & ~(7u << (3 * l))) | ((e >> 8) << (3 * l)));
            std::memcpy(qh, &h, 2);
          }
        };
        uint16_t h0;
        std::memcpy(&h0, qh, 2);
        const int chosen = *idx | (dtype == DType::kIQ1_S ? ((h0 >> (3 * l)) & 7) << 8 : 0);
        const double best = span_error();
        for (int e = 0; e < entries; ++e) {
          set(e);
          ASSERT_GE(span_error(), best * (1 - 1e-6))
              << "block " << k << " span " << s << ": entry " << e << " is nearer than " << chosen;
        }
        set(chosen);
      }
    }
  }
}

// ---- matmul: weights, references, tolerances --------------------------------------------

constexpr float kSentinel = 12345.0f;
// f32 accumulation of exact products, reordered (the kernels vs MatmulReference's double
// sums): observed ~1e-7 of sum |x w|, bound ~sqrt(k) · 2^-24 for k <= 4096.
constexpr double kF32Tol = 1e-5;
// The bf16 GEMM path rounds x and the dequantized weights to bf16 (8 significant bits):
// each product is off by at most ~2^-8 relative, 1e-2 of sum |x w| leaves room for the sums.
constexpr double kBf16Tol = 1e-2;

// How a path treats x and w, for the tolerance.
enum class Rounding {
  kIntX,  // x quantized to int8 per 32-value block (the integer GEMV)
  kF32,   // exact f32 x and weights
  kBf16,  // x and weights rounded to bf16
};

struct Weights {
  DType dtype;
  int64_t rows, cols, ld;
  std::vector<uint8_t> data;  // [rows, DTypeRowBytes(dtype, ld)]
  std::vector<float> values;  // [rows, cols] the dequantized values

  WeightView View() const { return WeightView{dtype, rows, cols, ld, data.data()}; }
};

// Rows of random values quantized into `dtype` (or f16), row stride ld >= cols.
Weights MakeWeights(DType dtype, int64_t rows, int64_t cols, int64_t ld, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Weights w{dtype, rows, cols, ld, std::vector<uint8_t>(rows * DTypeRowBytes(dtype, ld), 0xA5), {}};
  w.values.resize(rows * cols);
  std::vector<float> row(ld);
  const size_t row_bytes = DTypeRowBytes(dtype, ld);
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::ldexp(1.0f, static_cast<int>(r % 5) - 2);  // rows of different magnitude
    // ... and 16-value sub-blocks of different magnitude, so that their scale codes differ.
    for (int64_t c = 0; c < ld; ++c) row[c] = u(rng) * scale * std::ldexp(1.0f, -static_cast<int>((c / 16 + r) % 4));
    uint8_t* out = w.data.data() + r * row_bytes;
    if (dtype == DType::kF16) {
      for (int64_t c = 0; c < ld; ++c) {
        const uint16_t h = F32ToF16(row[c]);
        std::memcpy(out + 2 * c, &h, 2);
      }
    } else {
      QuantizeToBlocks(dtype, row.data(), ld, out);  // the padding columns hold blocks too
    }
    if (dtype == DType::kQ3_K) {
      // Our quantizer writes scale codes 32-63 (sc - 32 >= 0); the format's negative scales
      // (codes 0-31, which llama.cpp's quantizer writes) come from flipping code bit 5 of the
      // odd sub-blocks: bit 2·(s / 4) + 1 of scale byte 8 + s % 4.
      for (int64_t b = 0; b < ld / 256; ++b) {
        uint8_t* scales = out + b * 110 + block_layout::kQ3KScales;
        for (int sb = 1; sb < 16; sb += 2) scales[8 + sb % 4] ^= static_cast<uint8_t>(1 << (2 * (sb / 4) + 1));
      }
    }
    if (dtype == DType::kQ6_K) {
      // The same for Q6_K's int8 scales (our quantizer's are positive): every third sub-block's
      // negated (first and second halves of the 32-value slots alike).
      for (int64_t b = 0; b < ld / 256; ++b) {
        int8_t* scales = reinterpret_cast<int8_t*>(out + b * 210 + block_layout::kQ6KScales);
        for (int sb = 1; sb < 16; sb += 3) scales[sb] = static_cast<int8_t>(-scales[sb]);
      }
    }
    DequantizeToF32(dtype, out, cols, w.values.data() + r * cols);
  }
  return w;
}

struct Operands {
  int64_t m, ldx, ldy;
  std::vector<float> x;  // [m, ldx]
};

Operands MakeX(int64_t m, int64_t cols, int64_t rows, uint32_t seed, int64_t pad = 5) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Operands o{m, cols + pad, rows + 3, {}};
  o.x.resize(std::max<int64_t>(m, 1) * o.ldx);
  for (float& v : o.x) v = u(rng);
  for (int64_t i = 0; i < m; ++i) {
    // x rows of different magnitude, and blocks with one large value among small ones.
    for (int64_t c = 0; c < cols; ++c) o.x[i * o.ldx + c] *= std::ldexp(1.0f, static_cast<int>((i + c / 32) % 4) - 1);
    if (cols > 40) o.x[i * o.ldx + 40] = 8.0f;
  }
  return o;
}

// The allowed |y - ref| for x row i, weight row n. kIntX: x's rounding moves each value by
// at most dx / 2 = amax / 254 (amax: its 32-value block's max |x|), so the sum moves by at
// most sum over blocks of amax / 254 · sum |w| over the block; plus kF32Tol for the f32
// sums and scale products.
double Tolerance(Rounding rounding, const float* x, const Weights& w, int64_t n) {
  double scale = 0;
  for (int64_t c = 0; c < w.cols; ++c) scale += std::fabs(double(x[c]) * w.values[n * w.cols + c]);
  if (rounding == Rounding::kF32) return kF32Tol * scale + 1e-30;
  if (rounding == Rounding::kBf16) return kBf16Tol * scale + 1e-30;
  double x_rounding = 0;
  for (int64_t c0 = 0; c0 < w.cols; c0 += 32) {
    double amax = 0, wsum = 0;
    for (int64_t c = c0; c < c0 + 32; ++c) {
      amax = std::max(amax, std::fabs(double(x[c])));
      wsum += std::fabs(double(w.values[n * w.cols + c]));
    }
    x_rounding += amax / 254 * wsum;
  }
  return x_rounding * (1 + 1e-3) + kF32Tol * scale + 1e-30;
}

using Path = std::function<void(const MatmulProblem&)>;

std::string Trace(const Weights& w, int64_t m) {
  return Name(w.dtype) + " m=" + std::to_string(m) + " rows=" + std::to_string(w.rows) +
         " cols=" + std::to_string(w.cols) + " ld=" + std::to_string(w.ld);
}

// Runs `path` on x [m, ldx] · w (view `view`: w itself or rows of it) and checks y against
// MatmulReference, and that the ldy padding still holds kSentinel.
void CheckPath(const Path& path, const Weights& w, const WeightView& view, int64_t first_row, int64_t m,
               Rounding rounding, uint32_t seed = 7) {
  SCOPED_TRACE(Trace(w, m) + " view rows [" + std::to_string(first_row) + ", " + std::to_string(first_row + view.rows) +
               ")");
  const Operands o = MakeX(m, w.cols, view.rows, seed + static_cast<uint32_t>(m));
  std::vector<float> y(m * o.ldy, kSentinel);
  for (int64_t i = 0; i < m; ++i) std::fill_n(y.begin() + i * o.ldy, view.rows, NAN);
  const MatmulProblem p{o.x.data(), m, o.ldx, view, y.data(), o.ldy};
  path(p);
  std::vector<float> ref(m * view.rows);
  MatmulReference({o.x.data(), m, o.ldx, view, ref.data(), view.rows});
  int failures = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t n = 0; n < o.ldy; ++n) {
      const float got = y[i * o.ldy + n];
      if (n >= view.rows) {
        ASSERT_EQ(got, kSentinel) << "wrote padding at row " << i << " col " << n;
        continue;
      }
      const double want = ref[i * view.rows + n];
      const double tol = Tolerance(rounding, o.x.data() + i * o.ldx, w, first_row + n);
      if (!(std::fabs(got - want) <= tol) && ++failures <= 5) {
        ADD_FAILURE() << "y[" << i << "][" << n << "] = " << got << ", want " << want << " (allowed " << tol << ")";
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

void CheckPath(const Path& path, const Weights& w, int64_t m, Rounding rounding) {
  CheckPath(path, w, w.View(), 0, m, rounding);
}

const int64_t kMs[] = {1, 2, 3, 5, 8, 16, 17, 64};

// Shapes per format: columns several blocks (Q8_0 / Q4_0: odd block counts, whose last
// 64-value step is half a step), rows that leave 1..3-row tails of the 4-row groups, a
// padded row stride, and one big enough to split over threads (unevenly).
struct Shape {
  int64_t rows, cols, ld;
};
std::vector<Shape> ShapesFor(DType dtype) {
  if (dtype == DType::kF16) return {{7, 40, 43}, {33, 300, 300}, {301, 520, 520}};
  const int64_t b = DTypeBlockElements(dtype);
  if (b == 32) return {{1, 32, 32}, {7, 7 * 32, 8 * 32}, {33, 9 * 32, 9 * 32}, {301, 18 * 32, 19 * 32}};
  return {{1, 256, 256}, {6, 3 * 256, 4 * 256}, {33, 2 * 256, 2 * 256}, {301, 5 * 256, 5 * 256}};
}

void CheckGemv(const Path& path, DType dtype, Rounding rounding) {
  uint32_t seed = 100;
  for (const Shape& s : ShapesFor(dtype)) {
    const Weights w = MakeWeights(dtype, s.rows, s.cols, s.ld, seed++);
    for (int64_t m : kMs) {
      if (s.rows > 100 && m > 17) continue;  // the reference's cost
      CheckPath(path, w, m, rounding);
    }
  }
}

bool HasAvx512() {
  SetPortableKernelsForTesting(false);
  return GetCpuFeatures().avx512f;
}

bool HasAvx2() {
  SetPortableKernelsForTesting(false);
  return GetCpuFeatures().avx2;
}

// Every block-GEMV ISA this CPU runs, portable first.
std::vector<BlockGemvIsa> BlockIsas() {
  std::vector<BlockGemvIsa> isas = {BlockGemvIsa::kPortable};
  if (HasAvx2()) isas.push_back(BlockGemvIsa::kAvx2);
  if (HasAvx512()) {
    isas.push_back(BlockGemvIsa::kAvx512);
    if (GetCpuFeatures().avx512_vnni) isas.push_back(BlockGemvIsa::kAvx512Vnni);
  }
  return isas;
}

std::string IsaName(BlockGemvIsa isa) {
  switch (isa) {
    case BlockGemvIsa::kPortable: return "portable";
    case BlockGemvIsa::kAvx512: return "avx512bw";
    case BlockGemvIsa::kAvx512Vnni: return "avx512vnni";
    case BlockGemvIsa::kAvx2: return "avx2";
  }
  return "?";
}

Path BlockGemv(BlockGemvIsa isa) {
  return [isa](const MatmulProblem& p) { matmul_internal::GemvBlock(p, isa); };
}

TEST(BlockQuantMatmulTest, PortableGemv) {
  for (DType dtype : kBlockTypes) CheckGemv(BlockGemv(BlockGemvIsa::kPortable), dtype, Rounding::kIntX);
}

TEST(BlockQuantMatmulTest, Avx512Gemv) {
  if (!HasAvx512()) GTEST_SKIP() << "CPU lacks AVX-512";
  for (DType dtype : kBlockTypes) CheckGemv(BlockGemv(BlockGemvIsa::kAvx512), dtype, Rounding::kIntX);
}

TEST(BlockQuantMatmulTest, Avx512VnniGemv) {
  if (!HasAvx512() || !GetCpuFeatures().avx512_vnni) GTEST_SKIP() << "CPU lacks AVX512_VNNI";
  for (DType dtype : kBlockTypes) CheckGemv(BlockGemv(BlockGemvIsa::kAvx512Vnni), dtype, Rounding::kIntX);
}

TEST(BlockQuantMatmulTest, Avx2Gemv) {
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 (with FMA, F16C, BMI2)";
  for (DType dtype : kBlockTypes) CheckGemv(BlockGemv(BlockGemvIsa::kAvx2), dtype, Rounding::kIntX);
}

// Every m of a batched decode step (1..16: every 4-row x tile and its 1..3-row tail) on a
// view of rows that starts mid-matrix at an odd row and leaves a 1-row tail of the 4-row
// groups; 32-value formats with an odd number of blocks per row.
TEST(BlockQuantMatmulTest, Avx2GemvEveryMOnRowBlock) {
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 (with FMA, F16C, BMI2)";
  for (DType dtype : kBlockTypes) {
    const int64_t b = DTypeBlockElements(dtype);
    const int64_t cols = b == 32 ? 11 * 32 : 3 * 256;
    const Weights w = MakeWeights(dtype, 61, cols, cols + b, 81);  // padded row stride
    const WeightView view = w.View().RowBlock(33, 21);
    for (int64_t m = 1; m <= 16; ++m) CheckPath(BlockGemv(BlockGemvIsa::kAvx2), w, view, 33, m, Rounding::kIntX);
  }
}

bool HasVnniGemm() { return HasAvx512() && GetCpuFeatures().avx512_vnni; }

const Path kVnniGemm = [](const MatmulProblem& p) { matmul_internal::GemmBlockAvx512Vnni(p); };

// The VNNI GEMM against the reference on every format it takes: rows that leave partial
// 16-row panels (1, 7, 33, 301 rows), m covering every x tile (6 rows) and its 1..5-row
// tails, and a view of rows starting mid-matrix, split over the threads and not.
TEST(BlockQuantMatmulTest, Avx512VnniGemm) {
  if (!HasVnniGemm()) GTEST_SKIP() << "CPU lacks AVX512_VNNI";
  uint32_t seed = 300;
  for (DType dtype : kBlockTypes) {
    if (!matmul_internal::HasBlockGemm(dtype)) continue;  // the lattice formats: dequantized chunks
    for (const Shape& s : ShapesFor(dtype)) {
      const Weights w = MakeWeights(dtype, s.rows, s.cols, s.ld, seed++);
      for (int64_t m : {1, 5, 6, 7, 13, 17, 40}) {
        if (s.rows > 100 && m > 17) continue;  // the reference's cost
        CheckPath(kVnniGemm, w, m, Rounding::kIntX);
      }
    }
    const int64_t b = DTypeBlockElements(dtype);
    const Weights w = MakeWeights(dtype, 83, 4 * std::max<int64_t>(b, 64), 5 * std::max<int64_t>(b, 64), seed++);
    const WeightView view = w.View().RowBlock(5, 71);
    CheckPath(kVnniGemm, w, view, 5, 23, Rounding::kIntX);
    testing_util::ScopedOmpThreads one(1);
    CheckPath(kVnniGemm, w, view, 5, 19, Rounding::kIntX);
  }
}

// Every output row of a block GEMV is the same sum whichever rows share its call: rows
// computed in any split (a thread's share of a MatmulMany batch starts at any row) match
// the whole product bit for bit, on every ISA; and, but on AVX2, whichever x rows share it.
TEST(BlockQuantMatmulTest, GemvRowsDoNotDependOnTheSplit) {
  uint32_t seed = 700;
  for (BlockGemvIsa isa : BlockIsas()) {
    for (DType dtype : kBlockTypes) {
      SCOPED_TRACE(Name(dtype) + " " + IsaName(isa));
      const int64_t rows = 61, cols = DTypeBlockElements(dtype) == 32 ? 7 * 32 : 512;
      const Weights w = MakeWeights(dtype, rows, cols, cols, seed++);
      for (int64_t m : {1, 3, 6}) {
        SCOPED_TRACE("m " + std::to_string(m));
        const Operands o = MakeX(m, cols, rows, seed++);
        std::vector<float> whole(m * rows);
        matmul_internal::GemvBlock({o.x.data(), m, o.ldx, w.View(), whole.data(), rows}, isa, /*threaded=*/false);
        ExpectRowsIndependentOfSplit(m, rows, whole, [&](int64_t first, int64_t count, float* y) {
          matmul_internal::GemvBlock({o.x.data(), m, o.ldx, w.View().RowBlock(first, count), y + first, rows}, isa,
                                     /*threaded=*/false);
        });
        // Each x row alone gives what it gives among others (one x row reads its rows as
        // spans, several as tiles: the same sums in the same order). Not for AVX2's Q4_K,
        // Q6_K, Q3_K and Q2_K, whose m = 1 kernel (TileM1) adds a unit's slots in integers
        // first, so there a row alone may differ in its last bits.
        const bool slot_tree =
            dtype == DType::kQ4_K || dtype == DType::kQ6_K || dtype == DType::kQ3_K || dtype == DType::kQ2_K;
        if (matmul_internal::BlockGemvIsaFor(isa, dtype) == BlockGemvIsa::kAvx2 && slot_tree) continue;
        ExpectXRowsIndependentOfBatch(m, rows, whole, [&](int64_t i, float* y) {
          matmul_internal::GemvBlock({o.x.data() + i * o.ldx, 1, o.ldx, w.View(), y, rows}, isa, /*threaded=*/false);
        });
      }
    }
  }
}

// On CPUs with GFNI the VNNI GEMV moves Q5_K's and Q6_K's qh bits by a GF(2) affine byte
// transform instead of a rotate and a mask: the same codes, so bit for bit the plain VNNI
// rows, for every m (spans at m = 1, tiles of 1-4 x rows) and a view of rows that starts
// mid-matrix, padded row stride. (The GFNI rows also run every GEMV test above: the
// dispatch picks them.)
TEST(BlockQuantMatmulTest, GfniRowsEqualTheVnniRows) {
  if (!HasAvx512() || !GetCpuFeatures().avx512_vnni || !GetCpuFeatures().gfni) {
    GTEST_SKIP() << "CPU lacks AVX512_VNNI or GFNI";
  }
  uint32_t seed = 800;
  for (DType dtype : {DType::kQ5_K, DType::kQ6_K, DType::kQ3_K, DType::kQ4_K}) {
    SCOPED_TRACE(Name(dtype));
    const Weights w = MakeWeights(dtype, 75, 3 * 256, 4 * 256, seed++);
    const WeightView view = w.View().RowBlock(3, 67);
    for (int64_t m = 1; m <= 6; ++m) {
      SCOPED_TRACE("m " + std::to_string(m));
      const Operands o = MakeX(m, w.cols, view.rows, seed++);
      AlignedBuffer storage(matmul_internal::PreparedXBytes(BlockGemvIsa::kAvx512Vnni, dtype, m, w.cols));
      const auto x =
          matmul_internal::PrepareX(BlockGemvIsa::kAvx512Vnni, dtype, o.x.data(), m, o.ldx, w.cols, storage.data());
      std::vector<float> vnni(m * o.ldy, NAN), gfni(m * o.ldy, NAN);
      matmul_internal::GemvBlockRowsAvx512Vnni(x, view, 0, view.rows, vnni.data(), o.ldy);
      matmul_internal::GemvBlockRowsAvx512VnniGfni(x, view, 0, view.rows, gfni.data(), o.ldy);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t n = 0; n < view.rows; ++n) {
          ASSERT_EQ(gfni[i * o.ldy + n], vnni[i * o.ldy + n]) << "y[" << i << "][" << n << "]";
          ASSERT_FALSE(std::isnan(gfni[i * o.ldy + n]));
        }
      }
    }
  }
}

// The GEMM sums the GEMV's integers on the GEMV's x codes: the two agree far closer than
// either does to the exact product (only the order of the f32 sums differs).
TEST(BlockQuantMatmulTest, Avx512VnniGemmMatchesTheGemv) {
  if (!HasVnniGemm()) GTEST_SKIP() << "CPU lacks AVX512_VNNI";
  uint32_t seed = 400;
  for (DType dtype : kBlockTypes) {
    if (!matmul_internal::HasBlockGemm(dtype)) continue;  // the lattice formats: dequantized chunks
    SCOPED_TRACE(Name(dtype));
    const Weights w = MakeWeights(dtype, 37, 4 * 256, 4 * 256, seed++);
    const Operands o = MakeX(9, w.cols, w.rows, seed++);
    std::vector<float> gemm(9 * o.ldy), gemv(9 * o.ldy);
    matmul_internal::GemmBlockAvx512Vnni({o.x.data(), 9, o.ldx, w.View(), gemm.data(), o.ldy});
    matmul_internal::GemvBlock({o.x.data(), 9, o.ldx, w.View(), gemv.data(), o.ldy}, BlockGemvIsa::kAvx512Vnni);
    for (int64_t i = 0; i < 9; ++i) {
      for (int64_t n = 0; n < w.rows; ++n) {
        const double tol = Tolerance(Rounding::kF32, o.x.data() + i * o.ldx, w, n);
        ASSERT_NEAR(gemm[i * o.ldy + n], gemv[i * o.ldy + n], tol) << "y[" << i << "][" << n << "]";
      }
    }
  }
}

const Path kAvx2Gemm = [](const MatmulProblem& p) { matmul_internal::GemmBlockAvx2(p); };

// The AVX2 GEMM against the reference on every format it takes: rows that leave partial
// 8-row panels (1, 7, 33, 301 rows), m covering every x tile (4 rows) and its 1..3-row
// tails from below the dispatch's threshold to past 64, and a view of rows starting
// mid-matrix, split over the threads and not.
TEST(BlockQuantMatmulTest, Avx2Gemm) {
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 (with FMA, F16C, BMI2)";
  uint32_t seed = 500;
  for (DType dtype : kBlockTypes) {
    if (!matmul_internal::HasBlockGemm(dtype)) continue;  // the lattice formats: dequantized chunks
    for (const Shape& s : ShapesFor(dtype)) {
      const Weights w = MakeWeights(dtype, s.rows, s.cols, s.ld, seed++);
      for (int64_t m : {1, 2, 3, 5, 6, 7, 13, 17, 40, 67}) {
        if (s.rows > 100 && m > 17) continue;  // the reference's cost
        CheckPath(kAvx2Gemm, w, m, Rounding::kIntX);
      }
    }
    const int64_t b = DTypeBlockElements(dtype);
    const Weights w = MakeWeights(dtype, 83, 4 * std::max<int64_t>(b, 64), 5 * std::max<int64_t>(b, 64), seed++);
    const WeightView view = w.View().RowBlock(5, 71);
    CheckPath(kAvx2Gemm, w, view, 5, 23, Rounding::kIntX);
    CheckPath(kAvx2Gemm, w, view, 5, 65, Rounding::kIntX);
    testing_util::ScopedOmpThreads one(1);
    CheckPath(kAvx2Gemm, w, view, 5, 19, Rounding::kIntX);
    CheckPath(kAvx2Gemm, w, view, 5, 6, Rounding::kIntX);
  }
}

// The GEMM sums the AVX2 GEMV's integers on the GEMV's x codes: the two agree far closer
// than either does to the exact product (only the f32 arithmetic differs).
TEST(BlockQuantMatmulTest, Avx2GemmMatchesTheGemv) {
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 (with FMA, F16C, BMI2)";
  uint32_t seed = 600;
  for (DType dtype : kBlockTypes) {
    if (!matmul_internal::HasBlockGemm(dtype)) continue;  // the lattice formats: dequantized chunks
    SCOPED_TRACE(Name(dtype));
    const Weights w = MakeWeights(dtype, 37, 4 * 256, 4 * 256, seed++);
    const Operands o = MakeX(9, w.cols, w.rows, seed++);
    std::vector<float> gemm(9 * o.ldy), gemv(9 * o.ldy);
    matmul_internal::GemmBlockAvx2({o.x.data(), 9, o.ldx, w.View(), gemm.data(), o.ldy});
    matmul_internal::GemvBlock({o.x.data(), 9, o.ldx, w.View(), gemv.data(), o.ldy}, BlockGemvIsa::kAvx2);
    for (int64_t i = 0; i < 9; ++i) {
      for (int64_t n = 0; n < w.rows; ++n) {
        const double tol = Tolerance(Rounding::kF32, o.x.data() + i * o.ldx, w, n);
        ASSERT_NEAR(gemm[i * o.ldy + n], gemv[i * o.ldy + n], tol) << "y[" << i << "][" << n << "]";
      }
    }
  }
}

// The byte ranges of one block that hold codes, which MaxCodes fills with the pattern of
// the largest code vpmaddubsw sees (Q8_0: -128, whose |w| is 128; IQ4_NL / IQ4_XS: index 0,
// level -127; the others all ones).
struct CodeBytes {
  int begin, end;
};
std::vector<CodeBytes> CodeRanges(DType dtype) {
  namespace bl = block_layout;
  switch (dtype) {
    case DType::kQ8_0: return {{bl::kQ8_0Qs, 34}};
    case DType::kQ4_0: return {{bl::kQ4_0Qs, 18}};
    case DType::kQ4_K: return {{bl::kQ4KQs, 144}};
    case DType::kQ5_K: return {{bl::kQ5KQh, 176}};
    case DType::kQ6_K: return {{0, bl::kQ6KScales}};
    case DType::kQ5_0: return {{bl::kQ5_0Qh, 22}};
    case DType::kQ5_1: return {{bl::kQ5_1Qh, 24}};
    case DType::kQ3_K: return {{0, bl::kQ3KScales}};
    case DType::kQ2_K: return {{bl::kQ2KQs, bl::kQ2KD}};
    case DType::kIQ4_NL: return {{bl::kIQ4NLQs, 18}};
    case DType::kIQ4_XS: return {{bl::kIQ4XSQs, 136}};
    default: return {};
  }
}

// Every weight code at its largest against x codes of +-127 (x = +-1): the int16 sums the
// GEMM adds before widening are at their bound, where one more term would saturate.
TEST(BlockQuantMatmulTest, Avx2GemmMaxCodesStayExact) {
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 (with FMA, F16C, BMI2)";
  for (DType dtype : kBlockTypes) {
    if (!matmul_internal::HasBlockGemm(dtype)) continue;  // the lattice formats: dequantized chunks
    SCOPED_TRACE(Name(dtype));
    Weights w = MakeWeights(dtype, 19, 2 * 256, 2 * 256, 700);
    const int64_t block_bytes = static_cast<int64_t>(DTypeRowBytes(dtype, DTypeBlockElements(dtype)));
    const uint8_t fill = dtype == DType::kQ8_0                                ? 0x80
                         : dtype == DType::kIQ4_NL || dtype == DType::kIQ4_XS ? 0x00
                                                                              : 0xFF;
    for (int64_t b = 0; b < static_cast<int64_t>(w.data.size()) / block_bytes; ++b) {
      for (const CodeBytes& r : CodeRanges(dtype))
        std::memset(w.data.data() + b * block_bytes + r.begin, fill, r.end - r.begin);
    }
    const size_t row_bytes = DTypeRowBytes(dtype, w.ld);
    for (int64_t r = 0; r < w.rows; ++r)
      DequantizeToF32(dtype, w.data.data() + r * row_bytes, w.cols, w.values.data() + r * w.cols);
    const int64_t m = 7;
    std::vector<float> x(m * w.cols);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t c = 0; c < w.cols; ++c)
        x[i * w.cols + c] = i % 3 == 0 ? 1.0f : i % 3 == 1 ? -1.0f : (c % 2 ? 1.0f : -1.0f);
    }
    std::vector<float> ref(m * w.rows);
    MatmulReference({x.data(), m, w.cols, w.View(), ref.data(), w.rows});
    // The GEMM, and the AVX2 GEMV at m = 7 (4 + 3 x rows) and 1 (TileM1's integer slot
    // sums), whose int16 pair sums meet the same bound.
    const std::vector<std::pair<std::string, Path>> paths = {
        {"gemv", [](const MatmulProblem& p) { matmul_internal::GemvBlock(p, BlockGemvIsa::kAvx2); }},
        {"gemm", [](const MatmulProblem& p) { matmul_internal::GemmBlockAvx2(p); }}};
    for (const auto& [name, path] : paths) {
      for (int64_t rows_of_x : {m, int64_t{1}}) {
        SCOPED_TRACE(name + " m " + std::to_string(rows_of_x));
        std::vector<float> y(m * w.rows);
        path({x.data(), rows_of_x, w.cols, w.View(), y.data(), w.rows});
        for (int64_t i = 0; i < rows_of_x; ++i) {
          for (int64_t n = 0; n < w.rows; ++n) {
            const double tol = Tolerance(Rounding::kF32, x.data() + i * w.cols, w, n);
            ASSERT_NEAR(y[i * w.rows + n], ref[i * w.rows + n], tol) << "y[" << i << "][" << n << "]";
          }
        }
      }
    }
  }
}

// Q5_1 asked of the AVX-512 ISAs runs on the AVX2 kernel (BlockGemvIsaFor), with x in its
// layout: testable on any AVX2 CPU. (Q5_0, Q3_K and Q2_K have their AVX-512 kernels:
// Avx512Gemv and Avx512VnniGemv test them.)
TEST(BlockQuantMatmulTest, Q5_1OnAvx512RunsTheAvx2Kernel) {
  using matmul_internal::BlockGemvIsaFor;
  for (BlockGemvIsa isa : {BlockGemvIsa::kAvx512, BlockGemvIsa::kAvx512Vnni}) {
    EXPECT_EQ(IsaName(BlockGemvIsaFor(isa, DType::kQ5_1)), "avx2");
    for (DType dtype : {DType::kQ5_0, DType::kQ4_0, DType::kQ4_K, DType::kQ3_K, DType::kQ2_K}) {
      EXPECT_EQ(IsaName(BlockGemvIsaFor(isa, dtype)), IsaName(isa));
    }
  }
  for (BlockGemvIsa isa : {BlockGemvIsa::kPortable, BlockGemvIsa::kAvx2}) {
    EXPECT_EQ(IsaName(BlockGemvIsaFor(isa, DType::kQ5_0)), IsaName(isa));
    EXPECT_EQ(IsaName(BlockGemvIsaFor(isa, DType::kQ5_1)), IsaName(isa));
  }
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 (with FMA, F16C, BMI2)";
  CheckGemv(BlockGemv(BlockGemvIsa::kAvx512), DType::kQ5_1, Rounding::kIntX);
  CheckGemv(BlockGemv(BlockGemvIsa::kAvx512Vnni), DType::kQ5_1, Rounding::kIntX);
}

// The paths multiply the same integer codes (x quantized the same way, zero points taken
// off exactly), so they differ only in the order of their f32 sums.
TEST(BlockQuantMatmulTest, IsaPathsAgree) {
  const std::vector<BlockGemvIsa> isas = BlockIsas();
  if (isas.size() < 2) GTEST_SKIP() << "CPU lacks AVX2 and AVX-512: only the portable path";
  for (DType dtype : kBlockTypes) {
    const Weights w = MakeWeights(dtype, 37, DTypeBlockElements(dtype) * 9, DTypeBlockElements(dtype) * 9, 11);
    for (int64_t m : {1, 5, 16}) {
      SCOPED_TRACE(Trace(w, m));
      const Operands o = MakeX(m, w.cols, w.rows, 12);
      std::vector<std::vector<float>> ys;
      for (BlockGemvIsa isa : isas) {
        ys.emplace_back(m * o.ldy, 0.0f);
        matmul_internal::GemvBlock({o.x.data(), m, o.ldx, w.View(), ys.back().data(), o.ldy}, isa);
      }
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t n = 0; n < w.rows; ++n) {
          double scale = 0;
          for (int64_t c = 0; c < w.cols; ++c)
            scale += std::fabs(double(o.x[i * o.ldx + c]) * w.values[n * w.cols + c]);
          for (size_t k = 1; k < ys.size(); ++k) {
            ASSERT_NEAR(ys[k][i * o.ldy + n], ys[0][i * o.ldy + n], kF32Tol * scale)
                << IsaName(isas[k]) << " vs portable, y[" << i << "][" << n << "]";
          }
        }
      }
    }
  }
}

// The AVX-512 layout (filled by `isa`'s PrepareX) holds the portable quantizer's codes and
// scales (in its own order; the K formats' dx also in block_sum), and zeros in the padding
// of its last 64-value step.
void CheckXCodesMatchPortable(BlockGemvIsa isa) {
  for (DType dtype : kBlockTypes) {
    if (matmul_internal::BlockGemvIsaFor(isa, dtype) == BlockGemvIsa::kPortable) continue;  // the lattice formats
    SCOPED_TRACE(Name(dtype) + " " + IsaName(isa));
    const int64_t m = 3, cols = DTypeBlockElements(dtype) == 32 ? 7 * 32 : 512;
    const Operands o = MakeX(m, cols, 1, 13);
    AlignedBuffer pb(matmul_internal::PreparedXBytes(BlockGemvIsa::kPortable, dtype, m, cols));
    AlignedBuffer ab(matmul_internal::PreparedXBytes(isa, dtype, m, cols));
    const auto p = matmul_internal::PrepareX(BlockGemvIsa::kPortable, dtype, o.x.data(), m, o.ldx, cols, pb.data());
    const auto a = matmul_internal::PrepareX(isa, dtype, o.x.data(), m, o.ldx, cols, ab.data());
    const bool permuted = dtype == DType::kQ4_K || dtype == DType::kQ5_K;
    // The ISA whose layout PrepareX wrote (AVX2's for Q5_0 / Q5_1 asked of AVX-512).
    ASSERT_EQ(IsaName(a.isa), IsaName(matmul_internal::BlockGemvIsaFor(isa, dtype)));
    const int zp = matmul_internal::BlockZeroPoint(a.isa, dtype);
    const bool avx512 = a.isa != BlockGemvIsa::kAvx2;
    const bool q6_dx = (dtype == DType::kQ6_K || dtype == DType::kQ3_K) && avx512;  // the AVX-512 layouts
    const bool k_sums = permuted || (dtype == DType::kIQ4_XS && avx512);            // 16 floats per 256 values
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t b = 0; b < cols / 32; ++b) {
        const int64_t j = b % 8;
        const int64_t slot = permuted ? b - j + (j == 1 || j == 5 ? j + 1 : j == 2 || j == 6 ? j - 1 : j) : b;
        for (int k = 0; k < 32; ++k) {
          ASSERT_EQ(a.q[i * a.ldq + 32 * slot + k], p.q[i * p.ldq + 32 * b + k]) << i << " " << b << " " << k;
        }
        for (int k = 0; k < 8; ++k) {
          ASSERT_EQ(a.scale[i * a.lds + 8 * slot + k], p.scale[i * p.lds + b]);
          if (zp != 0 && a.bias != nullptr) {
            int sum = 0;
            for (int t = 0; t < 4; ++t) sum += p.q[i * p.ldq + 32 * b + 4 * k + t];
            ASSERT_EQ(a.bias[i * a.lds + 8 * slot + k], -zp * sum);
          }
          if (zp != 0 && a.pair_bias != nullptr) {  // AVX2: per pair of codes
            for (int t = 0; t < 2; ++t) {
              const int sum = p.q[i * p.ldq + 32 * b + 4 * k + 2 * t] + p.q[i * p.ldq + 32 * b + 4 * k + 2 * t + 1];
              ASSERT_EQ(a.pair_bias[i * 2 * a.lds + 16 * slot + 2 * k + t], -zp * sum);
            }
          }
        }
        if (k_sums) {        // per 256 values: the blocks' dx, then their dx · code sums
          int code_sum = 0;  // the portable layout keeps no sums for IQ4_XS
          for (int k = 0; k < 32; ++k) code_sum += p.q[i * p.ldq + 32 * b + k];
          const float dx_sum = permuted ? p.block_sum[i * p.ldb + b] : p.scale[i * p.lds + b] * float(code_sum);
          ASSERT_EQ(a.block_sum[i * a.ldb + 16 * (b / 8) + j], p.scale[i * p.lds + b]);
          ASSERT_EQ(a.block_sum[i * a.ldb + 16 * (b / 8) + 8 + j], dx_sum);
        }
        if (q6_dx) {  // dx per 16-value sub-block
          ASSERT_EQ(a.block_sum[i * a.ldb + 2 * b], p.scale[i * p.lds + b]);
          ASSERT_EQ(a.block_sum[i * a.ldb + 2 * b + 1], p.scale[i * p.lds + b]);
        }
        if (dtype == DType::kQ5_1) {  // one per block, in order
          ASSERT_EQ(a.block_sum[i * a.ldb + b], p.block_sum[i * p.ldb + b]);
        }
        for (int t = 0; t < 2 && dtype == DType::kQ2_K; ++t) {  // one per 16 values, in order
          if (avx512) {                                         // per 256 values: dx per 16 values, then the sums
            ASSERT_EQ(a.block_sum[i * a.ldb + 32 * (b / 8) + 2 * j + t], p.scale[i * p.lds + b]);
            ASSERT_EQ(a.block_sum[i * a.ldb + 32 * (b / 8) + 16 + 2 * j + t], p.block_sum[i * p.ldb + 2 * b + t]);
          } else {
            ASSERT_EQ(a.block_sum[i * a.ldb + 2 * b + t], p.block_sum[i * p.ldb + 2 * b + t]);
          }
        }
      }
      for (int64_t c = cols; c < a.ldq; ++c) ASSERT_EQ(a.q[i * a.ldq + c], 0) << "padding " << c;
      for (int64_t k = cols / 4; k < a.lds; ++k) {
        ASSERT_EQ(a.scale[i * a.lds + k], 0.0f) << "padding " << k;
        if (a.bias != nullptr) {
          ASSERT_EQ(a.bias[i * a.lds + k], 0) << "padding " << k;
        }
        if (a.pair_bias != nullptr) {
          ASSERT_EQ(a.pair_bias[i * 2 * a.lds + 2 * k], 0) << "padding " << k;
          ASSERT_EQ(a.pair_bias[i * 2 * a.lds + 2 * k + 1], 0) << "padding " << k;
        }
      }
      // The zero-point formats carry exactly one of the two biases.
      ASSERT_EQ(zp != 0, (a.bias != nullptr) != (a.pair_bias != nullptr));
      ASSERT_EQ(a.pair_bias != nullptr, zp != 0 && a.isa == BlockGemvIsa::kAvx2);
      ASSERT_EQ(a.block_sum != nullptr, k_sums || dtype == DType::kQ5_1 || dtype == DType::kQ2_K || q6_dx);
    }
  }
}

TEST(BlockQuantMatmulTest, Avx512XCodesMatchPortable) {
  if (!HasAvx512()) GTEST_SKIP() << "CPU lacks AVX-512";
  CheckXCodesMatchPortable(BlockGemvIsa::kAvx512);
  CheckXCodesMatchPortable(BlockGemvIsa::kAvx512Vnni);
}

// kAvx2's PrepareX fills the same layout without AVX-512 instructions.
TEST(BlockQuantMatmulTest, Avx2XCodesMatchPortable) {
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 (with FMA, F16C, BMI2)";
  CheckXCodesMatchPortable(BlockGemvIsa::kAvx2);
}

// One-hot x rows pick out single weights: a misplaced code, scale or min shows as a wrong
// value at that column. x = 1 is code 127 with dx = 1 / 127, exact up to f32 rounding of
// the terms (d·sc·q and dmin·m, each below 3 max |w| of the row).
TEST(BlockQuantMatmulTest, OneHotEveryColumn) {
  const std::vector<BlockGemvIsa> isas = BlockIsas();
  for (DType dtype : kBlockTypes) {
    const int64_t cols = DTypeBlockElements(dtype) == 32 ? 5 * 32 : 2 * 256;
    const Weights w = MakeWeights(dtype, 6, cols, cols, 21);
    for (BlockGemvIsa isa : isas) {
      SCOPED_TRACE(Name(dtype) + " " + IsaName(isa));
      for (int64_t j = 0; j < cols; ++j) {
        std::vector<float> x(cols, 0.0f), y(w.rows, NAN);
        x[j] = 1.0f;
        matmul_internal::GemvBlock({x.data(), 1, cols, w.View(), y.data(), w.rows}, isa, /*threaded=*/false);
        for (int64_t n = 0; n < w.rows; ++n) {
          double row_max = 0;
          for (int64_t c = 0; c < cols; ++c) row_max = std::max(row_max, std::fabs(double(w.values[n * cols + c])));
          ASSERT_NEAR(y[n], w.values[n * cols + j], 3e-6 * row_max) << "column " << j << " row " << n;
        }
      }
    }
  }
}

TEST(BlockQuantMatmulTest, F16Gemv) {
  CheckGemv([](const MatmulProblem& p) { matmul_internal::MatmulF16Portable(p, true); }, DType::kF16, Rounding::kF32);
  if (!HasAvx512()) GTEST_SKIP() << "CPU lacks AVX-512";
  CheckGemv([](const MatmulProblem& p) { matmul_internal::GemvAvx512(p); }, DType::kF16, Rounding::kF32);
}

// The large-m path: chunks of rows converted to f32 (sgemm) or bf16 (oneDNN's bf16 GEMM).
TEST(BlockQuantMatmulTest, OneDnnChunks) {
  const Path f32 = [](const MatmulProblem& p) { ASSERT_TRUE(matmul_internal::MatmulBlockOneDnn(p, false)); };
  const Path bf16 = [](const MatmulProblem& p) { ASSERT_TRUE(matmul_internal::MatmulBlockOneDnn(p, true)); };
  for (DType dtype : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kQ5_0, DType::kQ5_1, DType::kQ3_K, DType::kQ2_K,
                      DType::kIQ4_NL, DType::kIQ4_XS, DType::kF16}) {
    const int64_t b = DTypeBlockElements(dtype);
    const Weights w =
        MakeWeights(dtype, 45, b == 1 ? 200 : 3 * std::max<int64_t>(b, 64), 4 * std::max<int64_t>(b, 64), 31);
    for (int64_t m : {17, 64}) {
      CheckPath(f32, w, m, Rounding::kF32);
      if (HasAvx512() && dtype != DType::kF16) CheckPath(bf16, w, m, Rounding::kBf16);
    }
  }
  // 8 MiB chunks of 2048-wide f32 rows are 1024 rows: two chunks, the second short.
  const Weights big = MakeWeights(DType::kQ4_0, 1100, 2048, 2048, 32);
  CheckPath(f32, big, 17, Rounding::kF32);
}

// Tolerance of the dispatching Matmul for m rows of a dtype on this CPU.
Rounding DispatchRounding(DType dtype, int64_t m) {
  if (dtype == DType::kF16) return Rounding::kF32;
  if (m <= matmul_internal::kBlockGemvMaxRows) return Rounding::kIntX;
  if (HasVnniGemm() && IsBlockQuantized(dtype)) return Rounding::kIntX;  // from kVnniGemmMinRows
  if (!GetCpuFeatures().avx512f && GetCpuFeatures().avx2 && IsBlockQuantized(dtype)) {
    return Rounding::kIntX;  // from Avx2GemmMinRows
  }
  return GetCpuFeatures().avx512f ? Rounding::kBf16 : Rounding::kF32;
}

const Path kMatmul = [](const MatmulProblem& p) { Matmul(p); };

TEST(BlockQuantMatmulTest, DispatchDetectedAndPortable) {
  for (bool portable : {false, true}) {
    ScopedPortableKernels scoped(portable);
    for (DType dtype : kBlockTypesAndF16) {
      SCOPED_TRACE(portable ? "portable" : "detected");
      const int64_t b = std::max<int64_t>(DTypeBlockElements(dtype), 64);
      const Weights w = MakeWeights(dtype, 21, 3 * b, 3 * b, 41);
      for (int64_t m : kMs) CheckPath(kMatmul, w, m, DispatchRounding(dtype, m));
    }
  }
}

// The dispatch takes the fastest block GEMV the CPU has (AVX2 where it lacks AVX-512), and
// the portable one under LATTE_ISA=portable.
TEST(BlockQuantMatmulTest, BestIsaFollowsCpu) {
  for (bool portable : {false, true}) {
    ScopedPortableKernels scoped(portable);
    const CpuFeatures& cpu = GetCpuFeatures();
    BlockGemvIsa want = BlockGemvIsa::kPortable;
    if (cpu.avx512f) {
      want = cpu.avx512_vnni ? BlockGemvIsa::kAvx512Vnni : BlockGemvIsa::kAvx512;
    } else if (cpu.avx2) {
      want = BlockGemvIsa::kAvx2;
    }
    EXPECT_EQ(IsaName(matmul_internal::BestBlockGemvIsa()), IsaName(want));
    if (portable) {
      EXPECT_EQ(IsaName(matmul_internal::BestBlockGemvIsa()), "portable");
    }
  }
}

TEST(BlockQuantMatmulTest, RowBlockView) {
  for (DType dtype : kBlockTypesAndF16) {
    const int64_t b = std::max<int64_t>(DTypeBlockElements(dtype), 64);
    const Weights w = MakeWeights(dtype, 96, 2 * b, 3 * b, 51);  // padded row stride
    const WeightView all = w.View();
    const WeightView block = all.RowBlock(32, 17);
    EXPECT_EQ(block.data, w.data.data() + 32 * DTypeRowBytes(dtype, w.ld));
    EXPECT_EQ(block.Bytes(), 17 * DTypeRowBytes(dtype, w.cols));
    for (int64_t c = 0; c < w.cols; c += 7) ASSERT_EQ(block.At(3, c), w.values[35 * w.cols + c]);
    for (int64_t m : {1, 3, 11, 17}) CheckPath(kMatmul, w, block, 32, m, DispatchRounding(dtype, m));
  }
}

// MatmulMany gives what Matmul gives on each problem, bit for bit: mixed formats and m
// (1-3 x rows split between threads by bytes, 4-16 problem by problem), problems sharing
// one x (quantized once for all of them), GEMM-sized ones among them.
TEST(BlockQuantMatmulTest, MatmulManyMatchesMatmul) {
  for (bool portable : {false, true}) {
    ScopedPortableKernels scoped(portable);
    SCOPED_TRACE(portable ? "portable" : "detected");
    struct Spec {
      DType dtype;
      int64_t rows, blocks, m;
      int x;  // which x: problems with the same x and shape share it
    };
    const Spec specs[] = {{DType::kQ4_K, 301, 2, 1, 0}, {DType::kQ4_K, 130, 2, 1, 0},  {DType::kQ8_0, 77, 16, 1, 0},
                          {DType::kQ6_K, 40, 1, 3, 1},  {DType::kQ5_K, 9, 1, 3, 1},    {DType::kQ4_0, 260, 9, 2, 2},
                          {DType::kF16, 50, 2, 2, 3},   {DType::kQ8_0, 33, 8, 20, 4},  {DType::kQ6_K, 513, 1, 1, 5},
                          {DType::kQ5_0, 90, 11, 1, 0}, {DType::kQ5_1, 44, 5, 3, 1},   {DType::kQ5_0, 30, 11, 1, 0},
                          {DType::kQ4_K, 90, 4, 5, 5},  {DType::kQ8_0, 70, 12, 16, 2}, {DType::kQ6_K, 37, 2, 4, 3}};
    std::vector<Weights> ws;
    std::vector<Operands> xs;
    for (int k = 0; k < 6; ++k) xs.push_back(MakeX(20, 1024, 1, 60 + k, 3));
    std::vector<MatmulProblem> batch, one;
    std::vector<std::vector<float>> y, y_one;
    uint32_t seed = 70;
    for (const Spec& s : specs) {
      const int64_t cols = s.dtype == DType::kF16 ? 64 * s.blocks : DTypeBlockElements(s.dtype) * s.blocks;
      ws.push_back(MakeWeights(s.dtype, s.rows, cols, cols, seed++));
    }
    for (size_t i = 0; i < std::size(specs); ++i) {
      const Operands& o = xs[specs[i].x];
      y.emplace_back(specs[i].m * ws[i].rows, NAN);
      y_one.emplace_back(specs[i].m * ws[i].rows, NAN);
      batch.push_back({o.x.data(), specs[i].m, o.ldx, ws[i].View(), y.back().data(), ws[i].rows});
      one.push_back({o.x.data(), specs[i].m, o.ldx, ws[i].View(), y_one.back().data(), ws[i].rows});
    }
    MatmulMany(batch.data(), static_cast<int64_t>(batch.size()));
    for (size_t i = 0; i < batch.size(); ++i) {
      Matmul(one[i]);
      for (size_t j = 0; j < y[i].size(); ++j) ASSERT_EQ(y[i][j], y_one[i][j]) << "problem " << i << " value " << j;
    }
    // And on one thread (the sequential branch; oneDNN's sums depend on its thread count,
    // so Matmul runs on one thread too).
    testing_util::ScopedOmpThreads single(1);
    for (auto& v : y) std::fill(v.begin(), v.end(), NAN);
    MatmulMany(batch.data(), static_cast<int64_t>(batch.size()));
    for (size_t i = 0; i < batch.size(); ++i) {
      Matmul(one[i]);
      for (size_t j = 0; j < y[i].size(); ++j) ASSERT_EQ(y[i][j], y_one[i][j]) << "problem " << i << " value " << j;
    }
  }
}

// Per-head row blocks of one block-format matrix (materialized mode's rope rows of a GGUF
// q_b_proj): MatmulBatched gives each head what Matmul gives it.
TEST(BlockQuant, MatmulBatchedRunsEachHeadAsMatmul) {
  const Weights w = MakeWeights(DType::kQ4_K, 12, 512, 512, 3);
  const std::vector<WeightView> heads = {w.View().RowBlock(0, 4), w.View().RowBlock(4, 4), w.View().RowBlock(8, 4)};
  std::vector<float> x(3 * 512);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  std::vector<float> y(3 * 12, NAN), want(3 * 12, NAN);
  MatmulBatched(
      {.x = x.data(), .x_stride = 0, .ldx = 512, .m = 3, .w = heads, .y = y.data(), .y_stride = 4, .ldy = 12});
  for (int h = 0; h < 3; ++h) {
    Matmul({.x = x.data(), .m = 3, .ldx = 512, .w = heads[h], .y = want.data() + 4 * h, .ldy = 12});
  }
  EXPECT_EQ(y, want);
}

TEST(BlockQuantDeathTest, BadViewsAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Weights w = MakeWeights(DType::kQ4_K, 4, 256, 256, 1);
  std::vector<float> x(256 * 2, 1.0f), y(16);
  WeightView partial = w.View();
  partial.cols = 200;
  EXPECT_DEATH(Matmul(x.data(), 1, partial, y.data()), "columns and stride must be whole blocks of 256");
  EXPECT_DEATH(QuantizeToBlocks(DType::kQ8_0, x.data(), 40, y.data()), "are not whole blocks of 32");
}

}  // namespace
}  // namespace latte
