// Every matmul path (portable, AVX-512 GEMV, oneDNN, and the dispatching
// Matmul / MatmulBatched) against MatmulReference on random data, for f32 and
// bf16 weights, over odd shapes and strided views.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/matmul_internal.h"

namespace latte {
namespace {

using matmul_internal::GemvAvx512;
using matmul_internal::MatmulOneDnn;
using matmul_internal::MatmulPortable;

// Tolerances on |y - ref| relative to sum_k |x_k * w_k| (the scale any rounding
// error of the dot product is proportional to):
// f32 arithmetic with f32 x: reordered f32 accumulation, observed ~1e-7, bound
// ~sqrt(k) * 2^-24 for k <= 4096.
constexpr double kF32Tol = 1e-5;
// oneDNN with bf16 weights rounds x to bf16 (8-bit mantissa): each product is
// off by up to 2^-9 relative (3.9e-3 with both roundings), so the sum is off by
// at most ~4e-3 of sum |x w|; 1e-2 leaves room for f32 accumulation.
constexpr double kBf16XTol = 1e-2;
// Unwritten-output sentinel: the kernels must not touch y between rows.
constexpr float kSentinel = 12345.0f;

struct Problem {
  int64_t m, n, k;
  int64_t ld, ldx, ldy;
  DType dtype;
  std::vector<float> x;      // [m, ldx]
  std::vector<float> w_f32;  // [n, ld] (f32 weights)
  std::vector<bf16> w_bf16;  // [n, ld] (bf16 weights)

  WeightView View() const {
    const void* data = dtype == DType::kBF16 ? static_cast<const void*>(w_bf16.data())
                                             : static_cast<const void*>(w_f32.data());
    return WeightView{dtype, n, k, ld, data};
  }
};

Problem MakeProblem(int64_t m, int64_t n, int64_t k, DType dtype, int64_t pad = 0,
                    uint32_t seed = 1) {
  std::mt19937 rng(seed + static_cast<uint32_t>(m * 131 + n * 7 + k));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Problem p{m, n, k, k + pad, k + 2 * pad, n + 3 * pad, dtype, {}, {}, {}};
  p.x.resize(static_cast<size_t>(std::max<int64_t>(m, 1) * p.ldx));
  for (float& v : p.x) v = dist(rng);
  const size_t wsize = static_cast<size_t>(n * p.ld);
  if (dtype == DType::kBF16) {
    p.w_bf16.resize(wsize);
    for (bf16& v : p.w_bf16) v = F32ToBf16(dist(rng));
  } else {
    p.w_f32.resize(wsize);
    for (float& v : p.w_f32) v = dist(rng);
  }
  return p;
}

float WeightAt(const WeightView& w, int64_t r, int64_t c) {
  const size_t i = static_cast<size_t>(r * w.ld + c);
  return w.dtype == DType::kBF16 ? Bf16ToF32(static_cast<const bf16*>(w.data)[i])
                                 : static_cast<const float*>(w.data)[i];
}

// Checks y [m, ldy] against the reference; the ldy padding must still hold kSentinel.
// row_step > 1 checks every row_step-th row of x and the last (for big problems,
// where the double-precision reference dominates the run time under ASan).
void ExpectClose(const float* x, int64_t m, int64_t ldx, const WeightView& w, const float* y,
                 int64_t ldy, double tol, int64_t row_step = 1) {
  std::vector<float> ref(static_cast<size_t>(w.rows));
  int failures = 0;
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < m; i += row_step) rows.push_back(i);
  if ((m - 1) % row_step != 0) rows.push_back(m - 1);
  for (int64_t i : rows) {
    MatmulReference(x + i * ldx, 1, ldx, w, ref.data(), w.rows);
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
        ADD_FAILURE() << "y[" << i << "][" << n << "] = " << got << ", want " << want
                      << " (err " << err << ", allowed " << tol * scale << ")";
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

using Path = std::function<void(const float*, int64_t, int64_t, const WeightView&, float*,
                                int64_t)>;

void CheckPath(const Path& path, const Problem& p, double tol) {
  SCOPED_TRACE("m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" +
               std::to_string(p.k) + " ld=" + std::to_string(p.ld) + " ldx=" +
               std::to_string(p.ldx) + " ldy=" + std::to_string(p.ldy) + " " +
               std::string(DTypeName(p.dtype)));
  std::vector<float> y(static_cast<size_t>(p.m * p.ldy), kSentinel);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t n = 0; n < p.n; ++n) y[static_cast<size_t>(i * p.ldy + n)] = NAN;
  }
  const WeightView w = p.View();
  path(p.x.data(), p.m, p.ldx, w, y.data(), p.ldy);
  ExpectClose(p.x.data(), p.m, p.ldx, w, y.data(), p.ldy, tol);
}

struct Shape {
  int64_t m, n, k, pad;
};

// Odd k (not a multiple of 8/16/32), n = 1, tails of the 4-row tiles, padded strides.
const Shape kShapes[] = {
    {1, 1, 1, 0},     {1, 1, 37, 3},     {1, 7, 5, 0},     {1, 33, 100, 1},
    {2, 5, 16, 0},    {3, 17, 129, 2},   {4, 64, 256, 0},  {5, 13, 255, 5},
    {6, 31, 47, 1},   {7, 9, 1000, 0},   {8, 40, 31, 4},   {12, 130, 2048, 0},
    {16, 300, 96, 8}, {20, 70, 513, 1},  {33, 65, 257, 2}, {1, 1030, 1536, 0},
};

void CheckAllShapes(const Path& path, DType dtype, double tol) {
  for (const Shape& s : kShapes) CheckPath(path, MakeProblem(s.m, s.n, s.k, dtype, s.pad), tol);
  // Every m from 1 to 20 on one odd shape: all M-tile remainders.
  for (int64_t m = 1; m <= 20; ++m) CheckPath(path, MakeProblem(m, 23, 77, dtype, 1), tol);
}

const Path kPortable = [](const float* x, int64_t m, int64_t ldx, const WeightView& w,
                          float* y, int64_t ldy) { MatmulPortable(x, m, ldx, w, y, ldy); };
const Path kGemvAvx512 = [](const float* x, int64_t m, int64_t ldx, const WeightView& w,
                            float* y, int64_t ldy) { GemvAvx512(x, m, ldx, w, y, ldy); };
const Path kOneDnn = [](const float* x, int64_t m, int64_t ldx, const WeightView& w, float* y,
                        int64_t ldy) {
  ASSERT_TRUE(MatmulOneDnn(x, m, ldx, w, y, ldy)) << "oneDNN has no fast primitive";
};
const Path kDispatch = [](const float* x, int64_t m, int64_t ldx, const WeightView& w,
                          float* y, int64_t ldy) { Matmul(x, m, ldx, w, y, ldy); };

bool HasAvx512() {
  SetPortableKernelsForTesting(false);
  return GetCpuFeatures().avx512f;
}

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

TEST(MatmulOneDnnTest, F32) { CheckAllShapes(kOneDnn, DType::kF32, kF32Tol); }
TEST(MatmulOneDnnTest, Bf16) {
  // oneDNN 2.6 has bf16 matmul kernels only from AVX-512 up.
  if (!HasAvx512()) GTEST_SKIP() << "CPU lacks AVX-512";
  CheckAllShapes(kOneDnn, DType::kBF16, kBf16XTol);
}

TEST(MatmulOneDnnTest, RepeatedCallsReuseCachedPrimitive) {
  // Same shape, different data: the cached primitive must read the new pointers.
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    Problem p = MakeProblem(9, 50, 70, DType::kF32, 1, seed);
    CheckPath(kOneDnn, p, kF32Tol);
  }
}

TEST(MatmulConvertTest, Bf16RoundingMatchesScalar) {
  if (!HasAvx512()) GTEST_SKIP() << "CPU lacks AVX-512";
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  std::vector<float> x(1000);
  for (float& v : x) v = dist(rng);
  x[3] = NAN;
  x[4] = INFINITY;
  x[5] = 1.0f + 1.0f / 256;  // a tie: rounds to even
  for (bool has_bf16 : {false, true}) {
    if (has_bf16 && !GetCpuFeatures().avx512_bf16) continue;
    std::vector<bf16> out(x.size() + 1, 0xdead);
    matmul_internal::ConvertToBf16Avx512(x.data(), 999, out.data(), has_bf16);
    for (size_t i = 0; i < 999; ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(Bf16ToF32(out[i])));
      } else {
        EXPECT_EQ(out[i], F32ToBf16(x[i])) << i << " has_bf16=" << has_bf16;
      }
    }
    EXPECT_EQ(out[999], 0xdead);  // the masked tail stops at n
  }
}

// The public entry point under both the detected and the forced-portable features.
TEST(MatmulDispatchTest, DetectedFeatures) {
  SetPortableKernelsForTesting(false);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    CheckAllShapes(kDispatch, dtype,
                   dtype == DType::kBF16 && GetCpuFeatures().avx512f ? kBf16XTol : kF32Tol);
  }
}

TEST(MatmulDispatchTest, ForcedPortable) {
  SetPortableKernelsForTesting(true);
  CheckAllShapes(kDispatch, DType::kF32, kF32Tol);
  CheckAllShapes(kDispatch, DType::kBF16, kF32Tol);
  SetPortableKernelsForTesting(false);
}

TEST(MatmulDispatchTest, RowBlockView) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const double tol = dtype == DType::kBF16 ? kBf16XTol : kF32Tol;
    Problem p = MakeProblem(1, 96, 61, dtype, 3);
    const WeightView block = p.View().RowBlock(32, 17);  // rows [32, 49)
    for (int64_t m : {1, 3, 11}) {
      Problem q = MakeProblem(m, 17, 61, dtype, 2, 9);
      std::vector<float> y(static_cast<size_t>(m * q.ldy), kSentinel);
      Matmul(q.x.data(), m, q.ldx, block, y.data(), q.ldy);
      ExpectClose(q.x.data(), m, q.ldx, block, y.data(), q.ldy, tol);
    }
  }
}

// MatmulBatched: heads of one bigger matrix, shared (x_stride 0) or per-head x,
// for m on the GEMV side, the oneDNN side, and a size that runs heads in turn.
void CheckBatched(int64_t m, int64_t n, int64_t k, int64_t batch, bool shared_x, DType dtype) {
  SCOPED_TRACE("batched m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" +
               std::to_string(k) + " batch=" + std::to_string(batch) +
               (shared_x ? " shared x " : " own x ") + std::string(DTypeName(dtype)));
  const bool onednn_bf16 = dtype == DType::kBF16 && GetCpuFeatures().avx512f &&
                           m >= matmul_internal::kGemmMinRows;
  const double tol = onednn_bf16 ? kBf16XTol : kF32Tol;
  Problem all = MakeProblem(1, n * batch, k, dtype, 0, 3);  // [batch * n, k]
  std::vector<WeightView> w;
  for (int64_t b = 0; b < batch; ++b) w.push_back(all.View().RowBlock(b * n, n));
  const int64_t x_stride = shared_x ? 0 : m * k + 5;
  const int64_t y_stride = m * n + 3;
  Problem xs = MakeProblem(1, 1, x_stride == 0 ? m * k : x_stride * batch, DType::kF32, 0, 4);
  std::vector<float> y(static_cast<size_t>(y_stride * batch), kSentinel);
  MatmulBatched(xs.x.data(), x_stride, m, w.data(), batch, y.data(), y_stride);
  for (int64_t b = 0; b < batch; ++b) {
    ExpectClose(xs.x.data() + b * x_stride, m, k, w[static_cast<size_t>(b)],
                y.data() + b * y_stride, n, tol, /*row_step=*/m > 64 ? 37 : 1);
    for (int64_t i = m * n; i < y_stride; ++i) {
      ASSERT_EQ(y[static_cast<size_t>(b * y_stride + i)], kSentinel);
    }
  }
}

TEST(MatmulBatchedTest, SmallProblemsSplitOverHeads) {
  for (bool portable : {false, true}) {
    SetPortableKernelsForTesting(portable);
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (bool shared : {true, false}) {
        for (int64_t m : {1, 3, 8, 16}) CheckBatched(m, 24, 40, 7, shared, dtype);
        CheckBatched(2, 1, 33, 3, shared, dtype);
      }
    }
  }
  SetPortableKernelsForTesting(false);
}

TEST(MatmulBatchedTest, LargeProblemsRunHeadsInTurn) {
  // 512 * 128 * 1024 = 2^26 multiply-adds per head: at the split threshold.
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool shared : {true, false}) CheckBatched(512, 128, 1024, 2, shared, dtype);
  }
}

// MatmulMany: mixed shapes and m in one batch, big enough to run in parallel;
// each product must equal Matmul() on it alone (bit for bit: every output row is
// the same dot product whichever thread computes it).
TEST(MatmulManyTest, MatchesMatmulOnEach) {
  for (bool portable : {false, true}) {
    SetPortableKernelsForTesting(portable);
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(std::string(portable ? "portable " : "fast ") + std::string(DTypeName(dtype)));
      const int64_t shapes[][3] = {{1, 301, 257}, {1, 7, 33}, {3, 130, 512}, {1, 1, 1},
                                   {2, 260, 129}, {8, 40, 64}, {1, 513, 128}};
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
        batch.push_back({ps[i].x.data(), ps[i].m, ps[i].ldx, ps[i].View(), y[i].data(),
                         ps[i].ldy});
      }
      MatmulMany(batch.data(), static_cast<int64_t>(batch.size()));
      for (size_t i = 0; i < ps.size(); ++i) {
        const Problem& p = ps[i];
        Matmul(p.x.data(), p.m, p.ldx, p.View(), y_one[i].data(), p.ldy);
        const bool onednn_bf16 = dtype == DType::kBF16 && !portable &&
                                 GetCpuFeatures().avx512f && p.m >= matmul_internal::kGemmMinRows;
        ExpectClose(p.x.data(), p.m, p.ldx, p.View(), y[i].data(), p.ldy,
                    onednn_bf16 ? kBf16XTol : kF32Tol);
        for (size_t j = 0; j < y[i].size(); ++j) ASSERT_EQ(y[i][j], y_one[i][j]) << i << " " << j;
      }
    }
  }
  SetPortableKernelsForTesting(false);
}

}  // namespace
}  // namespace latte
