// DeepSeek's fp8 block quantization (kernels/fp8_quantize.h) against a plain reference:
// per block max |w| / 448 as the scale (1 for a zero block), each value divided by it
// in f32 and rounded to the nearest e4m3 value by exhaustive search (ties to the even
// code), on random data of several dtypes, shapes with partial blocks, and block sizes.
#include "kernels/fp8_quantize.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "base/dtype.h"
#include "test_util.h"

namespace latte {
namespace {

using testing_util::ScopedOmpThreads;

// The nearest e4m3 code of f by exhaustive search over the finite codes, ties to the
// even code, saturating at +-448.
uint8_t NearestE4m3(float f) {
  const double a = std::fabs(static_cast<double>(f));
  int best = 0;
  double best_err = INFINITY;
  for (int code = 0; code < 0x7f; ++code) {
    const double err = std::fabs(static_cast<double>(Fp8E4M3ToF32(static_cast<uint8_t>(code))) - a);
    if (err < best_err || (err == best_err && (code & 1) == 0)) {
      best = code;
      best_err = err;
    }
  }
  return static_cast<uint8_t>((std::signbit(f) ? 0x80 : 0) | best);
}

// A source matrix [rows, cols] in `dtype`, and its values as f32.
struct Source {
  DType dtype;
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

// Random values whose magnitude changes by row and column (one scale of 2^-12..2^4
// per 37 rows and 53 columns), so neighbouring blocks get different scales; a few
// exact zeros and one all-zero 3x3 corner.
Source RandomSource(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 4);
  std::vector<int> row_exp(rows / 37 + 1), col_exp(cols / 53 + 1);
  for (int& e : row_exp) e = exponent(rng);
  for (int& e : col_exp) e = exponent(rng) / 2;
  Source s{dtype, std::vector<uint8_t>(static_cast<size_t>(rows * cols) * DTypeSize(dtype)),
           std::vector<float>(static_cast<size_t>(rows * cols))};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float v = std::ldexp(unit(rng), row_exp[r / 37] + col_exp[c / 53]);
      if (rng() % 50 == 0 || (r < 3 && c < 3)) v = 0.0f;
      const size_t i = static_cast<size_t>(r * cols + c);
      if (dtype == DType::kBF16) {
        const bf16 b = F32ToBf16(v);
        std::memcpy(&s.bytes[2 * i], &b, 2);
        v = Bf16ToF32(b);
      } else if (dtype == DType::kF16) {
        const uint16_t h = F32ToF16(v);
        std::memcpy(&s.bytes[2 * i], &h, 2);
        v = F16ToF32(h);
      } else {
        std::memcpy(&s.bytes[4 * i], &v, 4);
      }
      s.values[i] = v;
    }
  }
  return s;
}

struct Quantized {
  std::vector<uint8_t> codes;  // [rows, cols]
  std::vector<float> scales;   // [ceil(rows / br), ceil(cols / bc)]
};

// The reference: block by block, in the plainest loops.
Quantized ReferenceQuantize(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t br, int64_t bc) {
  const int64_t grid_rows = (rows + br - 1) / br, grid_cols = (cols + bc - 1) / bc;
  Quantized q{std::vector<uint8_t>(w.size()), std::vector<float>(static_cast<size_t>(grid_rows * grid_cols))};
  for (int64_t gi = 0; gi < grid_rows; ++gi) {
    for (int64_t gj = 0; gj < grid_cols; ++gj) {
      double amax = 0;
      for (int64_t r = gi * br; r < std::min(rows, (gi + 1) * br); ++r) {
        for (int64_t c = gj * bc; c < std::min(cols, (gj + 1) * bc); ++c) {
          amax = std::max(amax, std::fabs(static_cast<double>(w[r * cols + c])));
        }
      }
      // amax / 448 rounded once to f32 (1/7 has no finite binary expansion, so the
      // double quotient never sits on an f32 midpoint: the same as an f32 division).
      const float scale = amax > 0 ? static_cast<float>(amax / 448.0) : 1.0f;
      q.scales[gi * grid_cols + gj] = scale;
      for (int64_t r = gi * br; r < std::min(rows, (gi + 1) * br); ++r) {
        for (int64_t c = gj * bc; c < std::min(cols, (gj + 1) * bc); ++c) {
          const float x = w[r * cols + c] / scale;  // the f32 quotient the format defines
          q.codes[r * cols + c] = NearestE4m3(x);
        }
      }
    }
  }
  return q;
}

Quantized RunQuantizer(const Source& s, int64_t rows, int64_t cols, int64_t br, int64_t bc) {
  Quantized q{std::vector<uint8_t>(static_cast<size_t>(rows * cols), 0xff),
              std::vector<float>(static_cast<size_t>(((rows + br - 1) / br) * ((cols + bc - 1) / bc)), -1.0f)};
  QuantizeToFp8({s.dtype, s.bytes.data(), rows, cols, br, bc, q.codes.data(), q.scales.data()});
  return q;
}

void ExpectSame(const Quantized& got, const Quantized& want, const std::string& what) {
  ASSERT_EQ(got.scales.size(), want.scales.size()) << what;
  for (size_t i = 0; i < want.scales.size(); ++i) ASSERT_EQ(got.scales[i], want.scales[i]) << what << " scale " << i;
  ASSERT_EQ(got.codes.size(), want.codes.size()) << what;
  for (size_t i = 0; i < want.codes.size(); ++i) {
    ASSERT_EQ(got.codes[i], want.codes[i]) << what << " value " << i;
  }
}

struct Shape {
  int64_t rows, cols, block_rows, block_cols;
};

// 128x128 (the release), a shape of whole blocks, partial blocks on both edges, and
// other block sizes (an fp8 checkpoint's weight_block_size is read from its config).
const Shape kShapes[] = {
    {256, 384, 128, 128}, {300, 260, 128, 128}, {129, 127, 128, 128}, {70, 200, 64, 32}, {5, 1000, 128, 128}};

TEST(Fp8Quantize, MatchesTheReferenceForEveryDtypeAndShape) {
  uint32_t seed = 1;
  for (DType dtype : {DType::kBF16, DType::kF32, DType::kF16}) {
    for (const Shape& sh : kShapes) {
      const std::string what = std::string(DTypeName(dtype)) + " [" + std::to_string(sh.rows) + ", " +
                               std::to_string(sh.cols) + "] in " + std::to_string(sh.block_rows) + "x" +
                               std::to_string(sh.block_cols);
      const Source s = RandomSource(dtype, sh.rows, sh.cols, seed++);
      const Quantized want = ReferenceQuantize(s.values, sh.rows, sh.cols, sh.block_rows, sh.block_cols);
      ExpectSame(RunQuantizer(s, sh.rows, sh.cols, sh.block_rows, sh.block_cols), want, what);
    }
  }
}

// w ≈ q · scale_inv: every value within half an e4m3 step (2^-4 relative, 2^-10 of the
// scale below 2^-6 · scale), each block's largest value exactly ±448 · scale, a zero
// block scale 1 and codes 0.
TEST(Fp8Quantize, DequantizesWithinHalfAStep) {
  const int64_t rows = 300, cols = 260;
  const Source s = RandomSource(DType::kBF16, rows, cols, 99);
  const Quantized q = RunQuantizer(s, rows, cols, 128, 128);
  const int64_t grid_cols = 3;
  std::vector<float> block_max(q.scales.size(), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t b = (r / 128) * grid_cols + c / 128;
      const float scale = q.scales[b];
      const float got = Fp8E4M3ToF32(q.codes[r * cols + c]) * scale;
      const float want = s.values[r * cols + c];
      ASSERT_LE(std::fabs(got - want), std::fabs(want) / 16 + scale / 1024) << "[" << r << ", " << c << "]";
      block_max[b] = std::max(block_max[b], std::fabs(got));
    }
  }
  for (size_t b = 0; b < q.scales.size(); ++b) EXPECT_EQ(block_max[b], 448.0f * q.scales[b]) << "block " << b;

  std::vector<float> zeros(130 * 140, 0.0f);
  Source z{DType::kF32, std::vector<uint8_t>(zeros.size() * 4, 0), zeros};
  const Quantized zq = RunQuantizer(z, 130, 140, 128, 128);
  for (float scale : zq.scales) EXPECT_EQ(scale, 1.0f);
  for (uint8_t code : zq.codes) ASSERT_EQ(code, 0);
}

// Threads split the block rows; the bytes do not depend on how many there are.
TEST(Fp8Quantize, SameBytesOnOneThreadAndOnTwo) {
  const Source s = RandomSource(DType::kBF16, 1000, 384, 7);
  Quantized one, two;
  {
    ScopedOmpThreads threads(1);
    one = RunQuantizer(s, 1000, 384, 128, 128);
  }
  {
    ScopedOmpThreads threads(2);
    two = RunQuantizer(s, 1000, 384, 128, 128);
  }
  ExpectSame(two, one, "2 threads vs 1");
}

// The block-row pieces make-model's writer calls: the same bytes as the whole-matrix
// call over the same f32 values (one implementation for both producers).
TEST(Fp8Quantize, BlockRowPiecesEqualTheWholeMatrix) {
  const int64_t rows = 200, cols = 300;
  const Source s = RandomSource(DType::kF32, rows, cols, 11);
  const Quantized whole = RunQuantizer(s, rows, cols, 128, 128);
  Quantized pieces{std::vector<uint8_t>(static_cast<size_t>(rows * cols)), std::vector<float>(2 * 3)};
  for (int64_t br = 0; br < 2; ++br) {
    const int64_t r0 = br * 128, n = std::min<int64_t>(128, rows - r0);
    Fp8BlockRowScales(s.values.data() + r0 * cols, n, cols, cols, 128, pieces.scales.data() + br * 3);
    QuantizeFp8BlockRow(s.values.data() + r0 * cols, n, cols, cols, 128, pieces.scales.data() + br * 3,
                        pieces.codes.data() + r0 * cols);
  }
  ExpectSame(pieces, whole, "block rows vs whole");
}

}  // namespace
}  // namespace latte
