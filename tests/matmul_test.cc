// Every matmul path (portable, AVX-512 and AVX2 GEMV, oneDNN, and the dispatching
// Matmul / MatmulBatched) against MatmulReference on random data, for f32, bf16,
// f16 and fp8 e4m3 (block-scaled) weights, over odd shapes and strided views.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/matmul_internal.h"
#include "test_util.h"

namespace latte {
namespace {

using matmul_internal::GemvAvx2;
using matmul_internal::GemvAvx512;
using matmul_internal::GemvFp8Avx512;
using matmul_internal::MatmulOneDnn;
using matmul_internal::MatmulPortable;
using testing_util::ExpectRowsIndependentOfSplit;
using testing_util::ExpectXRowsIndependentOfBatch;

}  // namespace

namespace {

// Tolerances on |y - ref| relative to sum_k |x_k * w_k| (the scale any rounding
// error of the dot product is proportional to):
// f32 arithmetic with f32 x: reordered f32 accumulation, observed ~1e-7, bound
// ~sqrt(k) * 2^-24 for k <= 4096.
constexpr double kF32Tol = 1e-5;
// oneDNN with bf16 weights rounds x to bf16 (8-bit mantissa): each product is
// off by up to 2^-9 relative (3.9e-3 with both roundings), so the sum is off by
// at most ~4e-3 of sum |x w|; 1e-2 leaves room for f32 accumulation.
constexpr double kBf16XTol = 1e-2;
// fp8 weights: the portable GEMV and the AVX-512 f32 GEMV (CPUs without
// AVX512_BF16) use the exact weight values (e4m3 × scale, exact in f32 up to one
// rounding of the product) and f32 x, so kF32Tol holds; the oneDNN path
// dequantizes to bf16 and rounds x to bf16, so kBf16XTol holds.
// The AVX512_BF16 fp8 GEMV (vdpbf16ps) keeps the weights exact (every e4m3 value
// is a bf16 number) but rounds x to bf16 once: bf16 has 8 significant bits, so
// round to nearest even moves each x_k by at most half an ulp, 2^-8 |x_k|. The
// products of bf16 values are exact in f32 (16 significant bits), so y is off
// from the exact sum by at most 2^-8 · sum_k |x_k w_k| from the rounding of x,
// plus the f32 accumulation and block-scale error that kF32Tol covers already.
// (vdpbf16ps flushes f32-subnormal inputs and results; that adds < 2^-126 per
// product, far below ExpectClose's 1e-30 absolute slack times any scale here.)
constexpr double kBf16XGemvTol = 1.0 / 256 + kF32Tol;
// Unwritten-output sentinel: the kernels must not touch y between rows.
constexpr float kSentinel = 12345.0f;

struct Problem {
  int64_t m, n, k;
  int64_t ld, ldx, ldy;
  DType dtype;
  std::vector<float> x;             // [m, ldx]
  std::vector<float> w_f32;         // [n, ld] (f32 weights)
  std::vector<bf16> w_bf16;         // [n, ld] (bf16 weights; f16 weights' bits)
  std::vector<uint8_t> w_fp8 = {};  // [n, ld] e4m3 codes (fp8 weights)
  std::vector<float> scales = {};   // [ceil(n / block_rows), scale_ld] (fp8 weights)
  int64_t block_rows = 128, block_cols = 128, scale_ld = 0;

  WeightView View() const {
    if (dtype == DType::kF8E4M3) {
      return Fp8WeightView(n, k, ld, w_fp8.data(), scales.data(), scale_ld, block_rows, block_cols);
    }
    const void* data = dtype == DType::kBF16 || dtype == DType::kF16 ? static_cast<const void*>(w_bf16.data())
                                                                     : static_cast<const void*>(w_f32.data());
    return WeightView{dtype, n, k, ld, data};
  }
};

// Every e4m3 code but the NaNs (0x7F, 0xFF): both signs, zero, the subnormals
// 0x01..0x07 (2^-9..7·2^-9) and normals up to 448.
uint8_t RandomFp8(std::mt19937& rng) {
  for (;;) {
    const uint8_t b = static_cast<uint8_t>(rng() & 0xFF);
    if ((b & 0x7F) != 0x7F) return b;
  }
}

void FillFp8(Problem& p, std::mt19937& rng) {
  p.w_fp8.resize(static_cast<size_t>(p.n * p.ld));
  for (uint8_t& b : p.w_fp8) b = RandomFp8(rng);
  // One scale per block, 2^-12 .. 2^-4 times a random mantissa (the release's
  // scale_inv are max|w| / 448, ~1e-4 .. 1e-2): a wrong block reads a wrong scale.
  p.scale_ld = (p.ld + p.block_cols - 1) / p.block_cols;
  p.scales.resize(static_cast<size_t>((p.n + p.block_rows - 1) / p.block_rows * p.scale_ld));
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> exp2(-12, -4);
  for (float& s : p.scales) s = std::ldexp(mant(rng), exp2(rng));
}

Problem MakeProblem(int64_t m, int64_t n, int64_t k, DType dtype, int64_t pad = 0, uint32_t seed = 1,
                    int64_t block_rows = 128, int64_t block_cols = 128) {
  std::mt19937 rng(seed + static_cast<uint32_t>(m * 131 + n * 7 + k));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Problem p{m, n, k, k + pad, k + 2 * pad, n + 3 * pad, dtype, {}, {}, {}};
  p.block_rows = block_rows;
  p.block_cols = block_cols;
  p.x.resize(static_cast<size_t>(std::max<int64_t>(m, 1) * p.ldx));
  for (float& v : p.x) v = dist(rng);
  const size_t wsize = static_cast<size_t>(n * p.ld);
  if (dtype == DType::kF8E4M3) {
    FillFp8(p, rng);
  } else if (dtype == DType::kBF16) {
    p.w_bf16.resize(wsize);
    for (bf16& v : p.w_bf16) v = F32ToBf16(dist(rng));
  } else if (dtype == DType::kF16) {
    p.w_bf16.resize(wsize);
    for (bf16& v : p.w_bf16) v = F32ToF16(dist(rng));
  } else {
    p.w_f32.resize(wsize);
    for (float& v : p.w_f32) v = dist(rng);
  }
  return p;
}

float WeightAt(const WeightView& w, int64_t r, int64_t c) { return w.At(r, c); }

// Checks the y of problem p (run already) against the reference; the ldy padding
// must still hold kSentinel. row_step > 1 checks every row_step-th row of x and the
// last (for big problems, where the double-precision reference dominates the run
// time under ASan).
void ExpectClose(const MatmulProblem& p, double tol, int64_t row_step = 1) {
  const float* x = p.x;
  const float* y = p.y;
  const int64_t m = p.m, ldx = p.ldx, ldy = p.ldy;
  const WeightView& w = p.w;
  std::vector<float> ref(static_cast<size_t>(w.rows));
  int failures = 0;
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < m; i += row_step) rows.push_back(i);
  if ((m - 1) % row_step != 0) rows.push_back(m - 1);
  for (int64_t i : rows) {
    MatmulReference({x + i * ldx, 1, ldx, w, ref.data(), w.rows});
    for (int64_t n = 0; n < ldy; ++n) {
      const float got = y[i * ldy + n];
      if (n >= w.rows) {
        ASSERT_EQ(got, kSentinel) << "wrote padding at row " << i << " col " << n;
        continue;
      }
      double scale = 0;
      for (int64_t k = 0; k < w.cols; ++k) scale += std::fabs(double(x[i * ldx + k]) * WeightAt(w, n, k));
      const double want = ref[static_cast<size_t>(n)];
      const double err = std::fabs(double(got) - want);
      if (!(err <= tol * scale + 1e-30) && ++failures <= 5) {
        ADD_FAILURE() << "y[" << i << "][" << n << "] = " << got << ", want " << want << " (err " << err << ", allowed "
                      << tol * scale << ")";
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

using Path = std::function<void(const MatmulProblem&)>;

// row_step: as ExpectClose's (big problems check every row_step-th row of x).
void CheckPath(const Path& path, const Problem& p, double tol, int64_t row_step = 1) {
  SCOPED_TRACE("m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
               " ld=" + std::to_string(p.ld) + " ldx=" + std::to_string(p.ldx) + " ldy=" + std::to_string(p.ldy) + " " +
               std::string(DTypeName(p.dtype)));
  std::vector<float> y(static_cast<size_t>(p.m * p.ldy), kSentinel);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t n = 0; n < p.n; ++n) y[static_cast<size_t>(i * p.ldy + n)] = NAN;
  }
  const MatmulProblem problem{p.x.data(), p.m, p.ldx, p.View(), y.data(), p.ldy};
  path(problem);
  ExpectClose(problem, tol, row_step);
}

struct Shape {
  int64_t m, n, k, pad;
};

// Odd k (not a multiple of 8/16/32), n = 1, tails of the 4-row tiles, padded strides.
const Shape kShapes[] = {
    {1, 1, 1, 0},     {1, 1, 37, 3},    {1, 7, 5, 0},     {1, 33, 100, 1},    {2, 5, 16, 0},  {3, 17, 129, 2},
    {4, 64, 256, 0},  {5, 13, 255, 5},  {6, 31, 47, 1},   {7, 9, 1000, 0},    {8, 40, 31, 4}, {12, 130, 2048, 0},
    {16, 300, 96, 8}, {20, 70, 513, 1}, {33, 65, 257, 2}, {1, 1030, 1536, 0},
};

void CheckAllShapes(const Path& path, DType dtype, double tol) {
  for (const Shape& s : kShapes) CheckPath(path, MakeProblem(s.m, s.n, s.k, dtype, s.pad), tol);
  // Every m from 1 to 20 on one odd shape: all M-tile remainders.
  for (int64_t m = 1; m <= 20; ++m) CheckPath(path, MakeProblem(m, 23, 77, dtype, 1), tol);
}

const Path kPortable = [](const MatmulProblem& p) { MatmulPortable(p); };
const Path kGemvAvx512 = [](const MatmulProblem& p) { GemvAvx512(p); };
const Path kGemvAvx2 = [](const MatmulProblem& p) { GemvAvx2(p); };
const Path kOneDnn = [](const MatmulProblem& p) { ASSERT_TRUE(MatmulOneDnn(p)) << "oneDNN has no fast primitive"; };
const Path kDispatch = [](const MatmulProblem& p) { Matmul(p); };

bool HasAvx512() {
  SetPortableKernelsForTesting(false);
  return GetCpuFeatures().avx512f;
}

// Tolerance of the fp8 GEMV kernel called directly (see kBf16XGemvTol; without
// AVX-512 the portable kernel, exact x).
double Fp8GemvTol() {
  const CpuFeatures& cpu = GetCpuFeatures();
  return cpu.avx512f && cpu.avx512_bf16 ? kBf16XGemvTol : kF32Tol;
}

// Tolerance of the dispatching Matmul for an m-row problem: bf16 and fp8 weights
// multiply x rounded to bf16 on both sides of kGemmMinRows (so that a row's
// result does not depend on its batch), once on the GEMV side and inside oneDNN
// on the GEMM side; f32 and f16 weights keep f32 x.
double DispatchTol(DType dtype, int64_t m) {
  if (dtype == DType::kF32 || dtype == DType::kF16) return kF32Tol;
  const CpuFeatures& cpu = GetCpuFeatures();
  const bool onednn = cpu.avx512f && m >= matmul_internal::GemmMinRows(dtype, cpu.avx512_bf16);
  return onednn ? kBf16XTol : kBf16XGemvTol;
}

// The largest DispatchTol over the m of CheckAllShapes and CheckFp8Shapes.
double DispatchTolAnyM(DType dtype) { return DispatchTol(dtype, 1 << 20); }

TEST(MatmulPortableTest, F32) { CheckAllShapes(kPortable, DType::kF32, kF32Tol); }
TEST(MatmulPortableTest, Bf16) { CheckAllShapes(kPortable, DType::kBF16, kF32Tol); }

TEST(MatmulGemvAvx512Test, F32) {
  if (!HasAvx512()) GTEST_SKIP() << "CPU lacks AVX-512";
  CheckAllShapes(kGemvAvx512, DType::kF32, kF32Tol);
}
TEST(MatmulGemvAvx512Test, Bf16) {
  if (!HasAvx512()) GTEST_SKIP() << "CPU lacks AVX-512";
  CheckAllShapes(kGemvAvx512, DType::kBF16, kF32Tol);
}

bool HasAvx2() {
  SetPortableKernelsForTesting(false);
  return GetCpuFeatures().avx2 && GetCpuFeatures().fma;
}

// The AVX2 GEMV: every shape and m of CheckAllShapes; a big problem split over the
// threads with tails of the 4-row tiles; every m up to 16 on k that leaves each tail
// of the 8-wide vectors; row-block views (a head's rows of a bigger matrix).
void CheckGemvAvx2(DType dtype) {
  CheckAllShapes(kGemvAvx2, dtype, kF32Tol);
  CheckPath(kGemvAvx2, MakeProblem(3, 2051, 1100, dtype, 0, 77), kF32Tol);
  for (int64_t m = 1; m <= 16; ++m) {
    for (int64_t k : {1, 7, 8, 9, 15, 16, 17, 63, 100})
      CheckPath(kGemvAvx2, MakeProblem(m, 4 * 3 + 3, k, dtype, 1, 6), kF32Tol);
  }
  const Problem all = MakeProblem(1, 96, 61, dtype, 3);
  for (const auto& [first, count] : {std::pair<int64_t, int64_t>{32, 17}, {1, 4}, {5, 1}, {90, 6}}) {
    const WeightView block = all.View().RowBlock(first, count);
    for (int64_t m : {1, 2, 3, 4, 7, 16}) {
      const Problem q = MakeProblem(m, count, 61, DType::kF32, 2, 9);
      std::vector<float> y(static_cast<size_t>(m * q.ldy), kSentinel);
      const MatmulProblem problem{q.x.data(), m, q.ldx, block, y.data(), q.ldy};
      GemvAvx2(problem);
      ExpectClose(problem, kF32Tol);
    }
  }
}

TEST(MatmulGemvAvx2Test, F32) {
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 or FMA";
  CheckGemvAvx2(DType::kF32);
}
TEST(MatmulGemvAvx2Test, Bf16) {
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 or FMA";
  CheckGemvAvx2(DType::kBF16);
}
TEST(MatmulGemvAvx2Test, F16) {
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 or FMA";
  CheckGemvAvx2(DType::kF16);
}

// Every output row is the same sum whichever rows and x rows share its tile: rows
// computed in any split (a thread's share of a MatmulMany batch starts at any row)
// match the whole product bit for bit, and so does each x row alone (one x row reads
// its rows as spans, several as tiles).
void CheckRowsDoNotDependOnTheSplit(void (*gemv)(const MatmulProblem&, bool)) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t m : {1, 3, 7}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " m " + std::to_string(m));
      const Problem p = MakeProblem(m, 61, 300, dtype, 1, 9);
      std::vector<float> whole(static_cast<size_t>(m * p.n));
      gemv({p.x.data(), m, p.ldx, p.View(), whole.data(), p.n}, /*threaded=*/false);
      ExpectRowsIndependentOfSplit(m, p.n, whole, [&](int64_t first, int64_t count, float* y) {
        gemv({p.x.data(), m, p.ldx, p.View().RowBlock(first, count), y + first, p.n}, /*threaded=*/false);
      });
      ExpectXRowsIndependentOfBatch(m, p.n, whole, [&](int64_t i, float* y) {
        gemv({p.x.data() + i * p.ldx, 1, p.ldx, p.View(), y, p.n}, /*threaded=*/false);
      });
    }
  }
}

TEST(MatmulGemvAvx2Test, RowsDoNotDependOnTheSplit) {
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 or FMA";
  CheckRowsDoNotDependOnTheSplit(GemvAvx2);
}

TEST(MatmulGemvAvx512Test, RowsDoNotDependOnTheSplit) {
  if (!HasAvx512()) GTEST_SKIP() << "CPU lacks AVX-512";
  CheckRowsDoNotDependOnTheSplit(GemvAvx512);
}

bool HasAvx512Bf16() { return HasAvx512() && GetCpuFeatures().avx512_bf16; }

// MatmulBf16DotAvx512 on x rounded to bf16 and stored with the problem's row stride.
const Path kBf16Dot = [](const MatmulProblem& p) {
  std::vector<bf16> xb(static_cast<size_t>(std::max<int64_t>(p.m, 1) * p.ldx), F32ToBf16(NAN));
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t c = 0; c < p.w.cols; ++c) xb[i * p.ldx + c] = F32ToBf16(p.x[i * p.ldx + c]);
  }
  matmul_internal::MatmulBf16DotAvx512({xb.data(), p.m, p.ldx, p.w, p.y, p.ldy});
};

TEST(MatmulBf16DotTest, Bf16) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "CPU lacks AVX512_BF16";
  CheckAllShapes(kBf16Dot, DType::kBF16, kBf16XGemvTol);
  // The batch-16 shapes of a decode step (k = 2048 and an expert's 1408; 10944 rows
  // on all threads), and every m up to kBf16DotMaxRows on row counts that leave
  // 4-row and single-row tails of the 8-row groups.
  for (int64_t m : {1, 4, 16}) CheckPath(kBf16Dot, MakeProblem(m, 10944, 2048, DType::kBF16, 0, 3), kBf16XGemvTol);
  CheckPath(kBf16Dot, MakeProblem(16, 2048, 1408, DType::kBF16, 0, 4), kBf16XGemvTol);
  for (int64_t m = 1; m <= matmul_internal::kBf16DotMaxRows; ++m) {
    CheckPath(kBf16Dot, MakeProblem(m, 8 * 5 + 4 + 3, 100, DType::kBF16, 2, 5), kBf16XGemvTol);
  }
}

// Every output row is the same sum whichever rows share its call: rows computed in
// any split (a thread's share of a MatmulMany batch starts at any row) match the
// whole product bit for bit.
TEST(MatmulBf16DotTest, RowsDoNotDependOnTheSplit) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "CPU lacks AVX512_BF16";
  for (int64_t m : {1, 2, 3, 6, 16}) {
    SCOPED_TRACE("m " + std::to_string(m));
    // 300 rows at m = 16: shares of 128 rows and more run as blocks of row groups
    const Problem p = MakeProblem(m, m == 16 ? 300 : 61, 300, DType::kBF16, 1, 9);
    std::vector<bf16> xb(static_cast<size_t>(m * p.k));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t c = 0; c < p.k; ++c) xb[i * p.k + c] = F32ToBf16(p.x[i * p.ldx + c]);
    }
    std::vector<float> whole(static_cast<size_t>(m * p.n));
    matmul_internal::MatmulBf16DotAvx512({xb.data(), m, p.k, p.View(), whole.data(), p.n}, /*threaded=*/false);
    ExpectRowsIndependentOfSplit(m, p.n, whole, [&](int64_t first, int64_t count, float* y) {
      matmul_internal::MatmulBf16DotAvx512({xb.data(), m, p.k, p.View().RowBlock(first, count), y + first, p.n},
                                           /*threaded=*/false);
    });
  }
}

TEST(MatmulOneDnnTest, F32) { CheckAllShapes(kOneDnn, DType::kF32, kF32Tol); }
TEST(MatmulOneDnnTest, Bf16) {
  // oneDNN 2.6 has bf16 matmul kernels only from AVX-512 up.
  if (!HasAvx512()) GTEST_SKIP() << "CPU lacks AVX-512";
  CheckAllShapes(kOneDnn, DType::kBF16, kBf16XTol);
}

// bf16 weights widened to f32 a chunk of rows at a time for oneDNN's sgemm (CPUs
// without AVX-512), x rounded to bf16: the products are exact, so only x's rounding
// and the f32 sums err (kBf16XGemvTol).
TEST(MatmulOneDnnTest, Bf16ViaSgemm) {
  const Path sgemm = [](const MatmulProblem& p) { ASSERT_TRUE(matmul_internal::MatmulBf16Sgemm(p)); };
  CheckAllShapes(sgemm, DType::kBF16, kBf16XGemvTol);
  // 8 MiB chunks of 2900-wide f32 rows are 720 rows: three chunks, the last short.
  CheckPath(sgemm, MakeProblem(7, 1500, 2900, DType::kBF16, 1, 3), kBf16XGemvTol, /*row_step=*/3);
}

// The AVX2 bf16 GEMM (CPUs without AVX-512 from kBf16Avx2GemvMaxRows + 1 rows), x
// rounded to bf16 inside: against the reference on every shape, and on a problem of
// several L2 blocks of rows and column blocks, split over the threads.
const Path kGemmBf16Avx2 = [](const MatmulProblem& p) { matmul_internal::GemmBf16Avx2(p); };

TEST(MatmulGemmBf16Avx2Test, Bf16) {
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 or FMA";
  CheckAllShapes(kGemmBf16Avx2, DType::kBF16, kBf16XGemvTol);
  // No columns: every output is an empty sum, 0, in both GEMMs.
  const Path packed = [](const MatmulProblem& p) { matmul_internal::GemmBf16PackedAvx2(p); };
  CheckPath(kGemmBf16Avx2, MakeProblem(20, 9, 0, DType::kBF16, 2), kBf16XGemvTol);
  CheckPath(packed, MakeProblem(20, 9, 0, DType::kBF16, 2), kBf16XGemvTol);
  CheckPath(kGemmBf16Avx2, MakeProblem(45, 301, 2900, DType::kBF16, 1, 3), kBf16XGemvTol, /*row_step=*/4);
}

// The packed outer-product GEMM (from kBf16Avx2GemmMaxRows + 1 rows on the same CPUs):
// every shape (tails of the 6-row tiles, of the 16-row panels and of the 8-column
// transposes); a problem of several row blocks and column blocks split over the threads.
TEST(MatmulGemmBf16Avx2Test, Packed) {
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 or FMA";
  const Path packed = [](const MatmulProblem& p) { matmul_internal::GemmBf16PackedAvx2(p); };
  CheckAllShapes(packed, DType::kBF16, kBf16XGemvTol);
  CheckPath(packed, MakeProblem(45, 301, 700, DType::kBF16, 1, 3), kBf16XGemvTol, /*row_step=*/4);
}

// The GEMM's sums are the GEMV's, blocked: y bit for bit the AVX2 GEMV's on x rounded to
// bf16, for m across the 6-row tiles' tails, rows across the 2-row tiles' and the L2
// blocks' tails (2900 columns: blocks of 44 rows), columns across the 512-column blocks
// and the 16-column tail, on one thread and split over all. Through the dispatch, so a
// row's result is the same alone (GEMV) as in any batch (GEMM).
TEST(MatmulGemmBf16Avx2Test, SameBitsAsTheGemv) {
  if (!HasAvx2() || HasAvx512()) GTEST_SKIP() << "the AVX2 bf16 paths run on CPUs with AVX2 and FMA, without AVX-512";
  struct Case {
    int64_t n, k;
  };
  for (const Case c : {Case{7, 16}, Case{9, 513}, Case{45, 1100}, Case{101, 2900}}) {
    for (int64_t m : {1, 2, 5, 6, 7, 11, 12, 13, 17, 31, 48, 100}) {
      const Problem p = MakeProblem(m, c.n, c.k, DType::kBF16, 1, 11);
      std::vector<float> rounded(p.x.size());
      for (size_t i = 0; i < p.x.size(); ++i) rounded[i] = Bf16ToF32(F32ToBf16(p.x[i]));
      std::vector<float> gemv(static_cast<size_t>(m * p.n)), gemm(gemv.size()), split(gemv.size());
      GemvAvx2({rounded.data(), m, p.ldx, p.View(), gemv.data(), p.n}, /*threaded=*/false);
      matmul_internal::GemmBf16Avx2({p.x.data(), m, p.ldx, p.View(), gemm.data(), p.n}, /*threaded=*/false);
      matmul_internal::GemmBf16Avx2({p.x.data(), m, p.ldx, p.View(), split.data(), p.n}, /*threaded=*/true);
      for (size_t i = 0; i < gemv.size(); ++i) {
        ASSERT_EQ(gemm[i], gemv[i]) << "n " << c.n << " k " << c.k << " m " << m << " at " << i;
        ASSERT_EQ(split[i], gemv[i]) << "threaded: n " << c.n << " k " << c.k << " m " << m << " at " << i;
      }
      std::vector<float> batch(gemv.size()), alone(static_cast<size_t>(p.n));
      Matmul({p.x.data(), m, p.ldx, p.View(), batch.data(), p.n});
      for (int64_t i = 0; i < m; ++i) {
        Matmul({p.x.data() + i * p.ldx, 1, p.ldx, p.View(), alone.data(), p.n});
        for (int64_t r = 0; r < p.n; ++r) {
          ASSERT_EQ(batch[i * p.n + r], alone[r]) << "dispatch: m " << m << " x row " << i << " row " << r;
        }
      }
    }
  }
}

TEST(MatmulOneDnnTest, RepeatedCallsReuseCachedPrimitive) {
  // Same shape, different data: the cached primitive must read the new pointers.
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    Problem p = MakeProblem(9, 50, 70, DType::kF32, 1, seed);
    CheckPath(kOneDnn, p, kF32Tol);
  }
}

// y = x · b with b [k, n] as it lies (row stride ldb), against a double loop; the same
// m, n, k and stride through MatmulOneDnn ([n, k] weights) first, so a primitive
// cached for one layout is not reused for the other.
TEST(MatmulOneDnnTest, F32KNReadsTheOperandUntransposed) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t m = 37, n = 24, k = 61, ldx = 70, ldb = 96, ldy = 30;
  std::vector<float> x(m * ldx), b(std::max(k, n) * ldb);
  for (float& v : x) v = u(rng);
  for (float& v : b) v = u(rng);
  std::vector<float> y_nk(m * ldy, kSentinel), y_kn(m * ldy, kSentinel);
  ASSERT_TRUE(MatmulOneDnn({x.data(), m, ldx, WeightView{DType::kF32, n, k, ldb, b.data()}, y_nk.data(), ldy}));
  ASSERT_TRUE(matmul_internal::MatmulOneDnnF32KN(x.data(), m, ldx, b.data(), k, n, ldb, y_kn.data(), ldy));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldy; ++j) {
      if (j >= n) {
        EXPECT_EQ(y_kn[i * ldy + j], kSentinel) << "wrote past column n at row " << i;
        continue;
      }
      double want_kn = 0, want_nk = 0, scale = 0;
      for (int64_t t = 0; t < k; ++t) {
        want_kn += double(x[i * ldx + t]) * b[t * ldb + j];
        want_nk += double(x[i * ldx + t]) * b[j * ldb + t];
        scale += std::abs(double(x[i * ldx + t]) * b[t * ldb + j]);
      }
      EXPECT_NEAR(y_kn[i * ldy + j], want_kn, kF32Tol * scale) << i << "," << j;
      EXPECT_NEAR(y_nk[i * ldy + j], want_nk, 1e-3) << i << "," << j;
    }
  }
}

// The public entry point under both the detected and the forced-portable features.
TEST(MatmulDispatchTest, DetectedFeatures) {
  SetPortableKernelsForTesting(false);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    CheckAllShapes(kDispatch, dtype, DispatchTolAnyM(dtype));
  }
}

TEST(MatmulDispatchTest, ForcedPortable) {
  SetPortableKernelsForTesting(true);
  CheckAllShapes(kDispatch, DType::kF32, DispatchTolAnyM(DType::kF32));
  CheckAllShapes(kDispatch, DType::kBF16, DispatchTolAnyM(DType::kBF16));
  CheckAllShapes(kDispatch, DType::kF16, DispatchTolAnyM(DType::kF16));
  SetPortableKernelsForTesting(false);
}

TEST(MatmulDispatchTest, RowBlockView) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const double tol = DispatchTolAnyM(dtype);
    Problem p = MakeProblem(1, 96, 61, dtype, 3);
    const WeightView block = p.View().RowBlock(32, 17);  // rows [32, 49)
    for (int64_t m : {1, 3, 11}) {
      Problem q = MakeProblem(m, 17, 61, dtype, 2, 9);
      std::vector<float> y(static_cast<size_t>(m * q.ldy), kSentinel);
      const MatmulProblem problem{q.x.data(), m, q.ldx, block, y.data(), q.ldy};
      Matmul(problem);
      ExpectClose(problem, tol);
    }
  }
}

// MatmulBatched: heads of one bigger matrix, shared (x_stride 0) or per-head x,
// for m on the GEMV side, the oneDNN side, and a size that runs heads in turn.
// `interleaved`: the heads' x and y are column slices of [m, batch, width] rows
// (x_stride = k, ldx = batch · k; y_stride = n, ldy = batch · n + 2), as MLA's
// per-head products read and write them; else each head's x and y are contiguous.
void CheckBatched(int64_t m, int64_t n, int64_t k, int64_t batch, bool shared_x, DType dtype,
                  bool interleaved = false) {
  SCOPED_TRACE("batched m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
               " batch=" + std::to_string(batch) + (shared_x ? " shared x " : " own x ") +
               std::string(DTypeName(dtype)) + (interleaved ? " interleaved" : ""));
  const double tol = DispatchTol(dtype, m);
  Problem all = MakeProblem(1, n * batch, k, dtype, 0, 3);  // [batch * n, k]
  std::vector<WeightView> w;
  for (int64_t b = 0; b < batch; ++b) w.push_back(all.View().RowBlock(b * n, n));
  BatchedMatmulParams p{.m = m, .w = w};
  if (interleaved) {
    p.x_stride = shared_x ? 0 : k;
    p.ldx = shared_x ? k + 1 : batch * k + 1;
    p.y_stride = n;
    p.ldy = batch * n + 2;
  } else {
    p.x_stride = shared_x ? 0 : m * k + 5;
    p.ldx = k;
    p.y_stride = m * n + 3;
    p.ldy = n;
  }
  const int64_t x_size = shared_x ? m * p.ldx : interleaved ? m * p.ldx : p.x_stride * batch;
  const int64_t y_size = interleaved ? m * p.ldy : p.y_stride * batch;
  Problem xs = MakeProblem(1, 1, x_size, DType::kF32, 0, 4);
  std::vector<float> y(static_cast<size_t>(y_size), kSentinel);
  p.x = xs.x.data();
  p.y = y.data();
  MatmulBatched(p);
  std::vector<bool> written(y.size(), false);
  for (int64_t b = 0; b < batch; ++b) {
    const MatmulProblem head{p.x + b * p.x_stride, m, p.ldx, w[static_cast<size_t>(b)], p.y + b * p.y_stride, p.ldy};
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) written[(head.y - p.y) + i * p.ldy + j] = true;
    }
    // ExpectClose's padding check reads [n, ldy) of each row: other heads' columns
    // when interleaved, so check only this head's n columns there.
    std::vector<float> own(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) own[i * n + j] = head.y[i * p.ldy + j];
    }
    ExpectClose({head.x, m, p.ldx, head.w, own.data(), n}, tol, /*row_step=*/m > 64 ? 37 : 1);
  }
  for (size_t i = 0; i < y.size(); ++i) {
    if (!written[i]) {
      ASSERT_EQ(y[i], kSentinel) << "wrote outside every head's output, at " << i;
    }
  }
}

TEST(MatmulBatchedTest, SmallProblemsSplitOverHeads) {
  for (bool portable : {false, true}) {
    SetPortableKernelsForTesting(portable);
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
      for (bool shared : {true, false}) {
        for (int64_t m : {1, 3, 8, 16}) {
          CheckBatched(m, 24, 40, 7, shared, dtype);
          CheckBatched(m, 24, 40, 7, shared, dtype, /*interleaved=*/true);
        }
        CheckBatched(2, 1, 33, 3, shared, dtype);
      }
    }
  }
  SetPortableKernelsForTesting(false);
}

TEST(MatmulBatchedTest, LargeProblemsRunHeadsInTurn) {
  // 512 * 128 * 1024 = 2^26 multiply-adds per head: at the split threshold.
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    for (bool shared : {true, false}) {
      CheckBatched(512, 128, 1024, 2, shared, dtype);
      CheckBatched(512, 128, 1024, 2, shared, dtype, /*interleaved=*/true);
    }
  }
}

// Reading x and writing y through row strides changes no sum: MLA's per-head products
// on [m, heads, width] rows (x_stride = width, ldx = heads · width, and the same for y)
// give bit for bit what the same products give on packed [heads, m, width] copies. The
// decode logits depend on it (they must not change with the layout).
TEST(MatmulBatchedTest, InterleavedEqualsPackedBitForBit) {
  const int64_t n = 24, k = 40, batch = 7;
  for (bool portable : {false, true}) {
    SetPortableKernelsForTesting(portable);
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
      const Problem all = MakeProblem(1, n * batch, k, dtype, 0, 5);
      std::vector<WeightView> w;
      for (int64_t b = 0; b < batch; ++b) w.push_back(all.View().RowBlock(b * n, n));
      for (bool shared : {true, false}) {
        for (int64_t m : {1, 3, 6, 8, 64, 300}) {
          SCOPED_TRACE(std::string(DTypeName(dtype)) + (portable ? " portable" : "") +
                       (shared ? " shared x" : " own x") + " m=" + std::to_string(m));
          const int64_t x_heads = shared ? 1 : batch;
          // x: [m, x_heads, k] interleaved; packed: [x_heads, m, k].
          const Problem xs = MakeProblem(1, 1, m * x_heads * k, DType::kF32, 0, 6);
          std::vector<float> packed_x(xs.x.size());
          for (int64_t b = 0; b < x_heads; ++b) {
            for (int64_t i = 0; i < m; ++i) {
              std::copy_n(&xs.x[(i * x_heads + b) * k], k, &packed_x[(b * m + i) * k]);
            }
          }
          std::vector<float> y(static_cast<size_t>(m * batch * n), NAN);  // [m, batch, n]
          std::vector<float> packed_y(y.size(), NAN);                     // [batch, m, n]
          MatmulBatched({.x = xs.x.data(),
                         .x_stride = shared ? 0 : k,
                         .ldx = x_heads * k,
                         .m = m,
                         .w = w,
                         .y = y.data(),
                         .y_stride = n,
                         .ldy = batch * n});
          MatmulBatched({.x = packed_x.data(),
                         .x_stride = shared ? 0 : m * k,
                         .ldx = k,
                         .m = m,
                         .w = w,
                         .y = packed_y.data(),
                         .y_stride = m * n,
                         .ldy = n});
          for (int64_t b = 0; b < batch; ++b) {
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n; ++j) {
                ASSERT_EQ(y[(i * batch + b) * n + j], packed_y[(b * m + i) * n + j])
                    << "head " << b << " row " << i << " col " << j;
              }
            }
          }
        }
      }
    }
  }
  SetPortableKernelsForTesting(false);
}

// MatmulMany: mixed shapes and m in one batch, big enough to run in parallel;
// each product must equal Matmul() on it alone (bit for bit: every output row is
// the same dot product whichever thread computes it).
TEST(MatmulManyTest, MatchesMatmulOnEach) {
  for (bool portable : {false, true}) {
    SetPortableKernelsForTesting(portable);
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
      SCOPED_TRACE(std::string(portable ? "portable " : "fast ") + std::string(DTypeName(dtype)));
      const int64_t shapes[][3] = {{1, 301, 257}, {1, 7, 33},  {3, 130, 512}, {1, 1, 1},     {2, 260, 129},
                                   {8, 40, 64},   {5, 77, 96}, {1, 513, 128}, {16, 150, 256}};
      std::vector<Problem> ps;
      uint32_t seed = 20;
      for (const auto& sh : shapes) ps.push_back(MakeProblem(sh[0], sh[1], sh[2], dtype, 1, seed++));
      std::vector<std::vector<float>> y, y_one;
      std::vector<MatmulProblem> batch;
      for (const Problem& p : ps) {
        y.emplace_back(static_cast<size_t>(p.m * p.ldy), kSentinel);
        y_one.emplace_back(static_cast<size_t>(p.m * p.ldy), kSentinel);
      }
      for (size_t i = 0; i < ps.size(); ++i) {
        batch.push_back({ps[i].x.data(), ps[i].m, ps[i].ldx, ps[i].View(), y[i].data(), ps[i].ldy});
      }
      MatmulMany(batch.data(), static_cast<int64_t>(batch.size()));
      for (size_t i = 0; i < ps.size(); ++i) {
        const Problem& p = ps[i];
        Matmul({p.x.data(), p.m, p.ldx, p.View(), y_one[i].data(), p.ldy});
        ExpectClose(batch[i], DispatchTol(dtype, p.m));
        for (size_t j = 0; j < y[i].size(); ++j) ASSERT_EQ(y[i][j], y_one[i][j]) << i << " " << j;
      }
    }
  }
  SetPortableKernelsForTesting(false);
}

// ---- fp8 e4m3 weights with block scales ----------------------------------------

// Shapes for fp8: rows and cols not multiples of 16 or of the block, several
// blocks each way, m on both sides of kGemmMinRows.
struct Fp8Shape {
  int64_t m, n, k, pad, block_rows, block_cols;
};
const Fp8Shape kFp8Shapes[] = {
    {1, 300, 300, 0, 128, 128}, {2, 261, 1000, 3, 128, 128}, {3, 129, 257, 1, 128, 128}, {4, 37, 131, 0, 16, 32},
    {5, 70, 77, 2, 16, 16},     {1, 45, 100, 0, 32, 48},     {6, 300, 300, 1, 128, 128}, {11, 133, 700, 0, 128, 128},
    {3, 50, 90, 0, 16, 24},     {7, 40, 70, 0, 8, 24},       {1, 1, 1, 0, 128, 128},     {2, 9, 17, 0, 128, 128},
};

void CheckFp8Shapes(const Path& path, double tol) {
  CheckAllShapes(path, DType::kF8E4M3, tol);
  uint32_t seed = 40;
  for (const Fp8Shape& s : kFp8Shapes) {
    SCOPED_TRACE("blocks " + std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols));
    CheckPath(path, MakeProblem(s.m, s.n, s.k, DType::kF8E4M3, s.pad, seed++, s.block_rows, s.block_cols), tol);
  }
}

TEST(MatmulFp8Test, ViewAtBytesAndRowBlocks) {
  const Problem p = MakeProblem(1, 300, 200, DType::kF8E4M3, 3, 5);
  const WeightView w = p.View();
  EXPECT_EQ(w.Bytes(), size_t{300 * 200});
  EXPECT_EQ(w.ScaleBytes(), size_t{3 * 2 * 4});  // [ceil(300/128), ceil(200/128)] f32
  for (int64_t r : {0, 127, 128, 299}) {
    for (int64_t c : {0, 127, 128, 199}) {
      const float want = Fp8E4M3ToF32(p.w_fp8[r * p.ld + c]) * p.scales[(r / 128) * p.scale_ld + c / 128];
      EXPECT_EQ(w.At(r, c), want) << r << " " << c;
    }
  }
  // Blocks that start mid-block (like q_b_proj's rope rows at h·192 + 128), and
  // a block of a block: every element reads its own block's scale.
  for (const auto& [first, n] : {std::pair<int64_t, int64_t>{160, 40}, {100, 60}, {128, 64}, {255, 2}, {0, 300}}) {
    const WeightView b = w.RowBlock(first, n);
    const WeightView bb = b.RowBlock(n / 2, n - n / 2);
    EXPECT_LT(b.scale_row0, 128);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < 200; c += 7) {
        ASSERT_EQ(b.At(r, c), w.At(first + r, c)) << first << "+" << r << " " << c;
        if (r >= n / 2) {
          ASSERT_EQ(bb.At(r - n / 2, c), w.At(first + r, c));
        }
      }
    }
  }
  const WeightView mid = w.RowBlock(100, 60);  // rows 100..159: two block rows
  EXPECT_EQ(mid.Bytes(), size_t{60 * 200});
  EXPECT_EQ(mid.ScaleBytes(), size_t{2 * 2 * 4});
}

TEST(MatmulFp8Test, Portable) { CheckFp8Shapes(kPortable, kF32Tol); }

TEST(MatmulFp8Test, GemvAvx512) {
  if (!HasAvx512()) GTEST_SKIP() << "CPU lacks AVX-512";
  const Path gemv = [](const MatmulProblem& p) { GemvFp8Avx512(p); };
  CheckFp8Shapes(gemv, Fp8GemvTol());
  // A big one, split over threads, with tails of the 4-row groups.
  CheckPath(gemv, MakeProblem(1, 2051, 1100, DType::kF8E4M3, 0, 77), Fp8GemvTol());
}

// The f32 fp8 GEMV (what AVX-512 CPUs without AVX512_BF16 or VBMI run): exact x.
TEST(MatmulFp8Test, GemvAvx512F32) {
  if (!HasAvx512()) GTEST_SKIP() << "CPU lacks AVX-512";
  const Path gemv = [](const MatmulProblem& p) { matmul_internal::GemvFp8Avx512F32(p, /*threaded=*/true); };
  CheckFp8Shapes(gemv, kF32Tol);
  CheckPath(gemv, MakeProblem(1, 2051, 1100, DType::kF8E4M3, 0, 77), kF32Tol);
}

// The AVX2 fp8 GEMV (CPUs without AVX-512): exact x, as the AVX-512 f32 path.
TEST(MatmulFp8Test, GemvAvx2) {
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 or FMA";
  const Path gemv = [](const MatmulProblem& p) { matmul_internal::GemvFp8Avx2(p); };
  CheckFp8Shapes(gemv, kF32Tol);
  CheckPath(gemv, MakeProblem(1, 2051, 1100, DType::kF8E4M3, 0, 77), kF32Tol);
  for (int64_t m = 1; m <= 16; ++m) {
    CheckPath(gemv, MakeProblem(m, 4 * 3 + 3, 100, DType::kF8E4M3, 1, 6, 16, 24), kF32Tol);
    CheckPath(gemv, MakeProblem(m, 4 * 3 + 3, 77, DType::kF8E4M3, 1, 6, 16, 16), kF32Tol);
  }
}

// From kFp8Avx2BlockedMinRows rows of x the AVX2 fp8 GEMV runs its tiles blocked for cache;
// every output keeps the tiles' bits, so a row's result does not depend on the rows beside
// it. Against the same rows in runs of 4-7 (the tiles): several 32-row weight blocks and an
// odd last row, column spans of several scale blocks, scale blocks of 3 rows (a row pair
// across two), k not a multiple of 8, every x tile size, a padded row stride, 1 and 2
// threads.
TEST(MatmulFp8Test, GemvAvx2BlockedMatchesTiles) {
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 or FMA";
  static_assert(matmul_internal::kFp8Avx2BlockedMinRows == 8, "the runs of 4-7 rows below take the tiles");
  const Fp8Shape shapes[] = {{37, 75, 300, 1, 128, 128}, {8, 64, 2048, 0, 128, 128}, {13, 33, 200, 2, 16, 16},
                             {50, 70, 1030, 0, 32, 48},  {63, 9, 520, 3, 128, 128},  {21, 40, 260, 0, 3, 32}};
  uint32_t seed = 130;
  for (const Fp8Shape& s : shapes) {
    SCOPED_TRACE(testing::Message() << "m " << s.m << " n " << s.n << " k " << s.k);
    const Problem p = MakeProblem(s.m, s.n, s.k, DType::kF8E4M3, s.pad, seed++, s.block_rows, s.block_cols);
    for (int threads : {1, 2}) {
      testing_util::ScopedOmpThreads team(threads);
      std::vector<float> blocked(static_cast<size_t>(p.m * p.ldy)), tiles(blocked.size());
      matmul_internal::GemvFp8Avx2({p.x.data(), p.m, p.ldx, p.View(), blocked.data(), p.ldy});
      for (int64_t i = 0; i < p.m;) {
        const int64_t rows = p.m - i >= 8 ? 4 : p.m - i;  // 4-7: the tiles
        matmul_internal::GemvFp8Avx2({p.x.data() + i * p.ldx, rows, p.ldx, p.View(), tiles.data() + i * p.ldy, p.ldy});
        i += rows;
      }
      for (int64_t i = 0; i < p.m; ++i) {
        for (int64_t n = 0; n < p.n; ++n) {
          ASSERT_EQ(blocked[i * p.ldy + n], tiles[i * p.ldy + n]) << "y[" << i << "][" << n << "], " << threads;
        }
      }
    }
  }
  // k = 0: every output is the empty sum.
  const Problem empty = MakeProblem(9, 5, 0, DType::kF8E4M3, 1);
  std::vector<float> y(static_cast<size_t>(empty.m * empty.ldy), std::nanf(""));
  matmul_internal::GemvFp8Avx2({empty.x.data(), empty.m, empty.ldx, empty.View(), y.data(), empty.ldy});
  for (int64_t i = 0; i < empty.m; ++i) {
    for (int64_t n = 0; n < empty.n; ++n) ASSERT_EQ(y[i * empty.ldy + n], 0.0f) << "y[" << i << "][" << n << "]";
  }
}

// Past kFp8Avx2GemvMaxRows rows of x, AVX2 CPUs multiply fp8 weights dequantized to f32
// (exactly the GEMV's weights) with oneDNN's sgemm: against the reference loop, column
// blocks of 128, 32 and 48, k not a multiple of 8, a padded row stride, directly and
// through the dispatch.
TEST(MatmulFp8Test, SgemmAvx2) {
  if (!HasAvx2() || HasAvx512()) GTEST_SKIP() << "the AVX2 path runs on CPUs with AVX2 and without AVX-512";
  const Path sgemm = [](const MatmulProblem& p) { ASSERT_TRUE(matmul_internal::MatmulFp8SgemmAvx2(p)); };
  const Fp8Shape shapes[] = {{64, 261, 257, 3, 128, 128}, {100, 37, 131, 0, 16, 32}, {70, 45, 100, 1, 32, 48}};
  uint32_t seed = 90;
  for (const Fp8Shape& s : shapes) {
    const Problem p = MakeProblem(s.m, s.n, s.k, DType::kF8E4M3, s.pad, seed++, s.block_rows, s.block_cols);
    CheckPath(sgemm, p, kF32Tol);
    CheckPath(kDispatch, p, DispatchTolAnyM(DType::kF8E4M3));
  }
}

// The AVX2 fp8 GEMV scales x by 2^64 so that its products with e4m3 values placed at
// 2^-120 stay normal f32: then scaling x by a power of two scales y by it exactly, also
// for x far from 1 (2^-40: without the scaling, products with the smallest e4m3 values
// would fall below f32's normal range and lose bits) and for large x (2^30).
TEST(MatmulFp8Test, GemvAvx2ScalesExactlyWithX) {
  if (!HasAvx2()) GTEST_SKIP() << "CPU lacks AVX2 or FMA";
  for (int64_t m : {1, 3}) {  // one x row streams each weight row; several take the tiles
    const Problem p = MakeProblem(m, 37, 300, DType::kF8E4M3, 1, 21, 16, 32);
    std::vector<float> base(static_cast<size_t>(p.m * p.n));
    matmul_internal::GemvFp8Avx2({p.x.data(), p.m, p.ldx, p.View(), base.data(), p.n});
    for (int e : {-40, 30}) {
      std::vector<float> x(p.x.size()), y(base.size());
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(p.x[i], e);
      matmul_internal::GemvFp8Avx2({x.data(), p.m, p.ldx, p.View(), y.data(), p.n});
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_EQ(y[i], std::ldexp(base[i], e)) << "m " << m << " x * 2^" << e << " at " << i;
      }
    }
  }
}

// The fp8 GEMV's decode and x layout at every column position: a one-hot x
// (exact in bf16) picks out one weight per row, which must come out as exactly
// e4m3 × scale, for every code but the NaNs, in full and partial 64-wide steps,
// 128- and 48-wide column blocks, m = 1..5 (x row i scaled by 2^-i, exact). The
// AVX-512 GEMV and the AVX2 one, where the CPU has them.
TEST(MatmulFp8Test, GemvOneHotEveryPositionExact) {
  std::vector<std::pair<const char*, Path>> gemvs;
  if (HasAvx512()) gemvs.emplace_back("avx512", [](const MatmulProblem& p) { GemvFp8Avx512(p); });
  if (HasAvx2()) gemvs.emplace_back("avx2", [](const MatmulProblem& p) { matmul_internal::GemvFp8Avx2(p); });
  if (gemvs.empty()) GTEST_SKIP() << "CPU lacks AVX-512 and AVX2";
  std::vector<uint8_t> codes;
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) != 0x7F) codes.push_back(static_cast<uint8_t>(b));
  }
  for (int64_t block_cols : {128, 48}) {
    const int64_t n = 11, k = 300, ld = 303;
    std::vector<uint8_t> w(static_cast<size_t>(n * ld));
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < ld; ++c) w[r * ld + c] = codes[(r * 37 + c * 5) % codes.size()];
    }
    const int64_t scale_ld = (k + block_cols - 1) / block_cols;
    std::vector<float> scales(static_cast<size_t>(scale_ld));
    for (int64_t b = 0; b < scale_ld; ++b) scales[b] = std::ldexp(1.0f + 0.125f * b, -7);
    const WeightView view = Fp8WeightView(n, k, ld, w.data(), scales.data(), scale_ld,
                                          /*block_rows=*/128, block_cols);
    for (int64_t m = 1; m <= 5; m += 2) {
      for (int64_t j = 0; j < k; ++j) {
        std::vector<float> x(static_cast<size_t>(m * k), 0.0f);
        for (int64_t i = 0; i < m; ++i) x[i * k + j] = std::ldexp(1.0f, -static_cast<int>(i));
        for (const auto& [name, gemv] : gemvs) {
          std::vector<float> y(static_cast<size_t>(m * n), NAN);
          gemv({x.data(), m, k, view, y.data(), n});
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t r = 0; r < n; ++r) {
              const float want =
                  Fp8E4M3ToF32(w[r * ld + j]) * scales[j / block_cols] * std::ldexp(1.0f, -static_cast<int>(i));
              ASSERT_EQ(y[i * n + r], want) << name << " block_cols " << block_cols << " m " << m << " x row " << i
                                            << " w row " << r << " col " << j;
            }
          }
        }
      }
    }
  }
}

// The e4m3 -> f16 bit trick is exact for every code: one weight of each value.
TEST(MatmulFp8Test, EveryCodeDecodesExactly) {
  for (bool portable : {false, true}) {
    SetPortableKernelsForTesting(portable);
    std::vector<uint8_t> codes;
    for (int b = 0; b < 256; ++b) {
      if ((b & 0x7F) != 0x7F) codes.push_back(static_cast<uint8_t>(b));
    }
    const int64_t n = static_cast<int64_t>(codes.size());
    const float scale = 0.375f;
    const WeightView w = Fp8WeightView(n, 1, 1, codes.data(), &scale, 1, 1 << 20, 128);
    const float x = 1.0f;
    std::vector<float> y(static_cast<size_t>(n));
    Matmul(&x, 1, w, y.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(y[i], Fp8E4M3ToF32(codes[i]) * scale) << "code " << int(codes[i]);
    }
  }
  SetPortableKernelsForTesting(false);
}

// The dequantization (the load's, and the GEMM path's per chunk) gives
// bf16(e4m3 × scale), round to nearest even: the portable and AVX-512 loops and the
// dispatching DequantizeFp8ToBf16 alike.
TEST(MatmulFp8Test, DequantizeRowsMatchesScalar) {
  const Problem p = MakeProblem(1, 300, 203, DType::kF8E4M3, 5, 21);
  const WeightView w = p.View().RowBlock(37, 250);  // starts mid-block
  const int64_t first = 90, count = 131;            // crosses a block row
  std::vector<bf16> want(static_cast<size_t>(count * w.cols));
  for (int64_t r = 0; r < count; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) want[r * w.cols + c] = F32ToBf16(w.At(first + r, c));
  }
  auto expect_equal = [&](const std::vector<bf16>& got, const std::string& what) {
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << what << ": element " << i << " (row " << i / w.cols << ", col " << i % w.cols
                                 << ")";
    }
    EXPECT_EQ(got.back(), 0xdead) << what << " wrote past the end";
  };
  std::vector<bf16> got(want.size() + 1, 0xdead);
  matmul_internal::DequantizeFp8ToBf16Portable(w, first, count, got.data());
  expect_equal(got, "portable");
  std::fill(got.begin(), got.end(), bf16{0xdead});
  DequantizeFp8ToBf16(w, first, count, got.data());
  expect_equal(got, "dispatched");
  if (HasAvx2()) {
    std::fill(got.begin(), got.end(), bf16{0xdead});
    matmul_internal::DequantizeFp8ToBf16Avx2(w, first, count, got.data());
    expect_equal(got, "avx2");
    // The f32 values the AVX2 sgemm path multiplies: e4m3 × scale, rounded once.
    std::vector<float> f32(static_cast<size_t>(count * w.cols) + 1, -1.0f);
    matmul_internal::DequantizeFp8ToF32Avx2(w, first, count, f32.data());
    for (int64_t r = 0; r < count; ++r) {
      for (int64_t c = 0; c < w.cols; ++c) ASSERT_EQ(f32[r * w.cols + c], w.At(first + r, c)) << r << " " << c;
    }
    EXPECT_EQ(f32.back(), -1.0f) << "f32: wrote past the end";
  }
  if (!HasAvx512()) GTEST_SKIP() << "CPU lacks AVX-512";
  for (bool has_bf16 : {false, true}) {
    if (has_bf16 && !GetCpuFeatures().avx512_bf16) continue;
    std::fill(got.begin(), got.end(), bf16{0xdead});
    matmul_internal::DequantizeFp8ToBf16Avx512(w, first, count, got.data(), has_bf16);
    expect_equal(got, has_bf16 ? "avx512 vcvtneps2bf16" : "avx512 integer rounding");
  }
}

TEST(MatmulFp8Test, OneDnnChunks) {
  if (!HasAvx512()) GTEST_SKIP() << "CPU lacks AVX-512";
  const Path chunked = [](const MatmulProblem& p) { ASSERT_TRUE(matmul_internal::MatmulFp8OneDnn(p)); };
  for (int64_t m : {6, 9, 33}) CheckPath(chunked, MakeProblem(m, 300, 300, DType::kF8E4M3, 1), kBf16XTol);
  // 8 MiB chunks of 2900-wide bf16 rows are 1440 rows: three chunks, the last short.
  CheckPath(chunked, MakeProblem(7, 3000, 2900, DType::kF8E4M3, 0, 3), kBf16XTol, /*row_step=*/3);
}

TEST(MatmulFp8Test, DispatchDetectedAndPortable) {
  SetPortableKernelsForTesting(false);
  CheckFp8Shapes(kDispatch, DispatchTolAnyM(DType::kF8E4M3));
  SetPortableKernelsForTesting(true);
  CheckFp8Shapes(kDispatch, DispatchTolAnyM(DType::kF8E4M3));
  SetPortableKernelsForTesting(false);
}

// Per-head row blocks that start mid-block, as q_b_proj's rope rows do (rows
// h·24 + 16 .. h·24 + 24 of a matrix in 32-row blocks), through MatmulBatched
// with a shared x and through Matmul on each, for m on both sides of the GEMM.
TEST(MatmulFp8Test, MidBlockRowBlocksBatched) {
  for (bool portable : {false, true}) {
    SetPortableKernelsForTesting(portable);
    const int64_t H = 9, k = 83;
    const Problem all = MakeProblem(1, H * 24, k, DType::kF8E4M3, 0, 11, 32, 32);
    std::vector<WeightView> heads;
    for (int64_t h = 0; h < H; ++h) heads.push_back(all.View().RowBlock(h * 24 + 16, 8));
    for (int64_t m : {1, 2, 3, 4, 5, 6, 13}) {
      SCOPED_TRACE("m=" + std::to_string(m) + (portable ? " portable" : ""));
      const double tol = DispatchTol(DType::kF8E4M3, m);
      const Problem xs = MakeProblem(m, 1, k, DType::kF32, 0, 12);
      std::vector<float> y(static_cast<size_t>(H * m * 8), NAN);
      MatmulBatched(
          {.x = xs.x.data(), .x_stride = 0, .ldx = k, .m = m, .w = heads, .y = y.data(), .y_stride = m * 8, .ldy = 8});
      for (int64_t h = 0; h < H; ++h) {
        ExpectClose({xs.x.data(), m, k, heads[h], y.data() + h * m * 8, 8}, tol);
        std::vector<float> one(static_cast<size_t>(m * 8));
        Matmul(xs.x.data(), m, heads[h], one.data());
        ExpectClose({xs.x.data(), m, k, heads[h], one.data(), 8}, tol);
      }
    }
  }
  SetPortableKernelsForTesting(false);
}

// ---- checked boundaries ----------------------------------------------------------

TEST(MatmulDeathTest, BadProblemsAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Problem p = MakeProblem(2, 8, 16, DType::kF32);
  std::vector<float> y(64);
  EXPECT_DEATH(Matmul({p.x.data(), 2, /*ldx=*/8, p.View(), y.data(), 8}),
               "Matmul: ldx 8 \\(w.cols 16\\), ldy 8 \\(w.rows 8\\)");
  EXPECT_DEATH(Matmul({nullptr, 2, 16, p.View(), y.data(), 8}), "Matmul: null x or y");
  WeightView q8 = p.View();
  q8.dtype = DType::kQ8_0;  // 16 columns: half a block
  EXPECT_DEATH(Matmul(p.x.data(), 2, q8, y.data()), "columns and stride must be whole blocks of 32");
  WeightView misaligned = p.View();
  misaligned.data = reinterpret_cast<const char*>(misaligned.data) + 2;
  EXPECT_DEATH(Matmul(p.x.data(), 2, misaligned, y.data()), "not aligned to its 4-byte elements");

  const Problem fp8 = MakeProblem(2, 8, 16, DType::kF8E4M3);
  WeightView no_scales = fp8.View();
  no_scales.scale = nullptr;
  EXPECT_DEATH(Matmul(fp8.x.data(), 2, no_scales, y.data()), "fp8 scales null");
  WeightView narrow_scales = fp8.View();
  narrow_scales.block_cols = 8;  // 16 columns are 2 blocks, scale_ld is 1
  EXPECT_DEATH(Matmul(fp8.x.data(), 2, narrow_scales, y.data()), "fp8 scale_ld 1 < 2");
  EXPECT_DEATH(DequantizeFp8ToBf16(p.View(), 0, 8, nullptr), "DequantizeFp8ToBf16: dtype F32");
  std::vector<bf16> out(8 * 16);
  EXPECT_DEATH(DequantizeFp8ToBf16(fp8.View(), 4, 5, out.data()), "rows \\[4, 9\\) of 8");

  const Problem other = MakeProblem(1, 4, 16, DType::kF32);
  const std::vector<WeightView> mixed = {p.View(), other.View()};
  EXPECT_DEATH(MatmulBatched({.x = p.x.data(), .ldx = 16, .m = 2, .w = mixed, .y = y.data(), .y_stride = 16, .ldy = 8}),
               "weight \\[4, 16\\] F32 differs from the first, \\[8, 16\\] F32");
}

}  // namespace
}  // namespace latte
