// Large-m product with a bf16 weight on CPUs with AVX2 and FMA but not AVX-512
// (matmul_internal.h, GemmBf16PackedAvx2; past kBf16Avx2GemmMaxRows rows: a prefill's
// 512-row products): the outer-product GEMM. Per thread, blocks of kBlockRows weight rows by kBlockCols columns are
// widened to f32 and transposed once into panels of 16 rows ([columns][16], L2-resident), and 6-row x tiles run over
// each panel: per column, two weight vectors and a broadcast of each x row's value, 12 FMAs into a 6 x 16 tile of sums
// held in registers, added into y after each block of columns. x is rounded to bf16 (as every bf16 path multiplies it)
// and widened back, so every product is exact in f32; the sums differ from the GEMV's only in order. The 6-row tile's
// 12 sums are named locals and the panel's two vectors pass an empty asm: GCC stored an array of sums to the stack
// every step and folded each panel load into every FMA (40 -> 75-83 GFLOP/s, one thread).
//
// Compiled with -mavx2 -mfma -mf16c -mbmi2 (see CMakeLists.txt); reached only through
// matmul.cc's dispatch after GetCpuFeatures().avx2 and .fma.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "base/aligned_buffer.h"
#include "base/parallel.h"
#include "base/scratch.h"
#include "kernels/matmul_internal.h"

namespace latte::matmul_internal {
namespace {

constexpr int kTileM = 6;            // x rows per tile
constexpr int kPanelRows = 16;       // weight rows per panel: two 8-lane vectors
constexpr int64_t kBlockRows = 128;  // 8 panels
constexpr int64_t kBlockCols = 256;  // a block's panels: 128 x 256 f32 = 128 KiB

// 8 bf16 -> 8 f32, exactly.
inline __m256 Widen8(const bf16* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

// r[0..7] (8 rows of 8 values) transposed in place: r[j][i] = old r[i][j].
inline void Transpose8x8(__m256 (&r)[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// panel[c][r] = w[r][c0 + c] as f32 for r < rows (0 for rows..15), c < cols.
void PackPanel(const bf16* w, int64_t ld, int64_t rows, int64_t c0, int64_t cols, float* panel) {
  if (rows == kPanelRows) {
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
      for (int half = 0; half < 2; ++half) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) r[i] = Widen8(w + (half * 8 + i) * ld + c0 + c);
        Transpose8x8(r);
        for (int j = 0; j < 8; ++j) _mm256_storeu_ps(panel + (c + j) * kPanelRows + half * 8, r[j]);
      }
    }
    for (; c < cols; ++c) {
      for (int r = 0; r < kPanelRows; ++r) panel[c * kPanelRows + r] = Bf16ToF32(w[r * ld + c0 + c]);
    }
    return;
  }
  for (int64_t c = 0; c < cols; ++c) {
    for (int r = 0; r < kPanelRows; ++r) panel[c * kPanelRows + r] = r < rows ? Bf16ToF32(w[r * ld + c0 + c]) : 0.0f;
  }
}

// y[i][0..rows) (+)= x[i][0..cols) · panel for i < M: `add` false on a row block's first
// block of columns.
template <int M> void PanelTile(const float* x, int64_t ldx, const float* panel, int64_t cols, float* y, int64_t ldy,
                                int64_t rows, bool add) {
  __m256 acc[M][2];
  for (int i = 0; i < M; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  if constexpr (M == 6) {
    // Named locals: GCC keeps an array of 12 sums in memory, storing each every step.
    __m256 a00 = acc[0][0], a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
    __m256 a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
    const float* x3 = x + 3 * ldx;
    for (int64_t c = 0; c < cols; ++c) {
      __m256 w0 = _mm256_load_ps(panel + c * kPanelRows);
      __m256 w1 = _mm256_load_ps(panel + c * kPanelRows + 8);
      asm("" : "+x"(w0), "+x"(w1));
      __m256 xb = _mm256_broadcast_ss(x + c);
      a00 = _mm256_fmadd_ps(xb, w0, a00), a01 = _mm256_fmadd_ps(xb, w1, a01);
      xb = _mm256_broadcast_ss(x + ldx + c);
      a10 = _mm256_fmadd_ps(xb, w0, a10), a11 = _mm256_fmadd_ps(xb, w1, a11);
      xb = _mm256_broadcast_ss(x + 2 * ldx + c);
      a20 = _mm256_fmadd_ps(xb, w0, a20), a21 = _mm256_fmadd_ps(xb, w1, a21);
      xb = _mm256_broadcast_ss(x3 + c);
      a30 = _mm256_fmadd_ps(xb, w0, a30), a31 = _mm256_fmadd_ps(xb, w1, a31);
      xb = _mm256_broadcast_ss(x3 + ldx + c);
      a40 = _mm256_fmadd_ps(xb, w0, a40), a41 = _mm256_fmadd_ps(xb, w1, a41);
      xb = _mm256_broadcast_ss(x3 + 2 * ldx + c);
      a50 = _mm256_fmadd_ps(xb, w0, a50), a51 = _mm256_fmadd_ps(xb, w1, a51);
    }
    acc[0][0] = a00, acc[0][1] = a01, acc[1][0] = a10, acc[1][1] = a11, acc[2][0] = a20, acc[2][1] = a21;
    acc[3][0] = a30, acc[3][1] = a31, acc[4][0] = a40, acc[4][1] = a41, acc[5][0] = a50, acc[5][1] = a51;
  } else {
    for (int64_t c = 0; c < cols; ++c) {
      __m256 w0 = _mm256_load_ps(panel + c * kPanelRows);
      __m256 w1 = _mm256_load_ps(panel + c * kPanelRows + 8);
      asm("" : "+x"(w0), "+x"(w1));  // loaded once, not folded into each FMA
      for (int i = 0; i < M; ++i) {
        const __m256 xb = _mm256_broadcast_ss(x + i * ldx + c);
        acc[i][0] = _mm256_fmadd_ps(xb, w0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(xb, w1, acc[i][1]);
      }
    }
  }
  for (int i = 0; i < M; ++i) {
    float* yi = y + i * ldy;
    if (rows == kPanelRows) {
      if (add) {
        acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_loadu_ps(yi));
        acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_loadu_ps(yi + 8));
      }
      _mm256_storeu_ps(yi, acc[i][0]);
      _mm256_storeu_ps(yi + 8, acc[i][1]);
    } else {
      alignas(32) float sums[kPanelRows];
      _mm256_store_ps(sums, acc[i][0]);
      _mm256_store_ps(sums + 8, acc[i][1]);
      for (int64_t r = 0; r < rows; ++r) yi[r] = add ? yi[r] + sums[r] : sums[r];
    }
  }
}

struct Operands {
  const float* x;  // [m, k] rounded to bf16, as f32
  int64_t m;
  const WeightView& w;
  float* y;
  int64_t ldy;
};

// Weight rows [n0, n1).
void Rows(const Operands& o, int64_t n0, int64_t n1) {
  const int64_t k = o.w.cols;
  const bf16* w = static_cast<const bf16*>(o.w.data);
  thread_local AlignedBuffer packed;  // [kBlockRows / 16][kBlockCols][16] f32; grown only
  const size_t bytes = static_cast<size_t>(kBlockRows * kBlockCols) * sizeof(float);
  float* panels = GrowAligned<float>(packed, bytes);
  for (int64_t r0 = n0; r0 < n1; r0 += kBlockRows) {
    const int64_t r1 = std::min(n1, r0 + kBlockRows);
    for (int64_t c0 = 0; c0 < k; c0 += kBlockCols) {
      const int64_t cols = std::min(kBlockCols, k - c0);
      int64_t count = 0;
      for (int64_t p = r0; p < r1; p += kPanelRows, ++count) {
        PackPanel(w + p * o.w.ld, o.w.ld, std::min<int64_t>(kPanelRows, r1 - p), c0, cols,
                  panels + count * kBlockCols * kPanelRows);
      }
      const bool add = c0 > 0;
      int64_t i = 0;
      for (; i < o.m; i += kTileM) {
        const int64_t tm = std::min<int64_t>(kTileM, o.m - i);
        for (int64_t p = 0; p < count; ++p) {
          const int64_t row = r0 + p * kPanelRows;
          const int64_t rows = std::min<int64_t>(kPanelRows, r1 - row);
          const float* xi = o.x + i * k + c0;
          float* yi = o.y + i * o.ldy + row;
          const float* panel = panels + p * kBlockCols * kPanelRows;
          WithTileRows<kTileM>(tm, [&]<int M>() { PanelTile<M>(xi, k, panel, cols, yi, o.ldy, rows, add); });
        }
      }
    }
  }
}

}  // namespace

void GemmBf16PackedAvx2(const MatmulProblem& p, bool threaded) {
  const WeightView& w = p.w;
  if (p.m <= 0 || w.rows <= 0) return;
  const int64_t k = w.cols;
  if (k == 0) {
    ZeroY(p);
    return;
  }
  // x: [m, k] rounded to bf16, widened back; filled by the calling thread before the
  // team reads it.
  const float* xf = XRoundedToBf16(p);
  const Operands o{xf, p.m, w, p.y, p.ldy};
  const bool parallel = threaded && w.rows >= 2 * kPanelRows && WorthParallel(p.m * w.rows * k);
  SplitRowsOverThreads(parallel, w.rows, kPanelRows, [&](RowRange rows) { Rows(o, rows.begin, rows.end); });
}

}  // namespace latte::matmul_internal
