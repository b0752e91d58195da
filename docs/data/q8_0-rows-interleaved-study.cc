// Study (not in the engine): Q8_0 weights repacked four rows to a 64-value unit, against
// the tree's Q8_0 GEMV at m = 1. Q8_0's decode already reads at the tree's plain read, so
// the question is the access: a thread reading one stream of interleaved rows, with less
// arithmetic, against the tree's four spans a thread.
//
// Repacked unit, 4 rows x 64 values (272 bytes, the file's 4 x 68): d[2][4] as f16 (16
// bytes, block-major), then for k < 4 64 bytes: row r's codes 16k .. 16k + 16 of the 64,
// plus 128 (unsigned for vpdpbusd), in 128-bit lane r. vpdpbusd against x's 16 codes
// broadcast leaves row r's sums in lanes 4r .. 4r + 3; per 32-value block the bias
// 128·(x's code sum) comes off in int32, then one conversion and one FMA by d·dx.
//
// Build from the repository root after cmake --build build:
//   g++ -std=c++20 -O3 -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512vnni -mf16c -mfma \
//     -Isrc docs/data/q8_0-rows-interleaved-study.cc -o /tmp/q80x4 \
//     build/liblatte_kernels.a build/liblatte_base.a -fopenmp -ldnnl
// Run: /tmp/q80x4 ROWS COLS REPS PASSES   (256 2048 200 21: L2, one thread; 102400 2048 2 15
//   with OMP_NUM_THREADS=2: from memory, far above L3 as the Q4_K study's header says)
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/block_quant.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"

using namespace latte;
namespace mi = latte::matmul_internal;

namespace {

constexpr size_t kUnit4Bytes = 16 + 256;

void Repack(const uint8_t* q8, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* out) {
  const int64_t units = cols / 64;
  for (int64_t g = 0; g < rows / 4; ++g) {
    for (int64_t u = 0; u < units; ++u) {
      uint8_t* o = out + (g * units + u) * kUnit4Bytes;
      for (int r = 0; r < 4; ++r) {
        for (int j = 0; j < 2; ++j) {
          const uint8_t* b = q8 + (4 * g + r) * row_bytes + (2 * u + j) * 34;
          std::memcpy(o + 8 * j + 2 * r, b, 2);
          for (int h = 0; h < 2; ++h) {
            for (int i = 0; i < 16; ++i) o[16 + 64 * (2 * j + h) + 16 * r + i] = static_cast<uint8_t>(b[2 + 16 * h + i] + 128);
          }
        }
      }
    }
  }
}

// x per 32 values (as the tree's Q8_0 GEMV): codes, dx, and 128 · code sum.
struct X32 {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> bias;
};

X32 QuantizeX32(const float* x, int64_t cols) {
  X32 k{std::vector<int8_t>(cols), std::vector<float>(cols / 32), std::vector<int32_t>(cols / 32)};
  for (int64_t b = 0; b < cols / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    k.d[b] = amax / 127.0f;
    int s = 0;
    for (int i = 0; i < 32; ++i) {
      const int v = static_cast<int>(std::nearbyint(x[32 * b + i] * id));
      k.q[32 * b + i] = static_cast<int8_t>(v);
      s += v;
    }
    k.bias[b] = 128 * s;
  }
  return k;
}

void RowsX4(const uint8_t* packed, int64_t units, const X32& x, int64_t g0, int64_t g1, float* y) {
  const __m512i rows4 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  for (int64_t g = g0; g < g1; ++g) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t u = 0; u < units; ++u) {
      const uint8_t* p = packed + (g * units + u) * kUnit4Bytes;
      const __m512 dd = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
      for (int j = 0; j < 2; ++j) {
        const int64_t b = 2 * u + j;
        __m512i isum = _mm512_set1_epi32(-x.bias[b]);  // a quarter of 128 · sum x in each of a row's 4 lanes
        for (int h = 0; h < 2; ++h) {
          const __m512i w = _mm512_loadu_si512(p + 16 + 64 * (2 * j + h));
          const __m512i xv =
              _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.q.data() + 32 * b + 16 * h)));
          isum = _mm512_dpbusd_epi32(isum, w, xv);
        }
        const __m512 d = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_add_epi32(rows4, _mm512_set1_epi32(4 * j)), dd),
                                       _mm512_set1_ps(x.d[b]));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, acc);
      }
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, acc);
    for (int r = 0; r < 4; ++r) y[4 * g + r] = lanes[4 * r] + lanes[4 * r + 1] + lanes[4 * r + 2] + lanes[4 * r + 3];
  }
}

// Both layouts' weights in 2 MiB pages (madvise), as `latte bench model --huge-pages`
// holds them: with 4 KiB pages the tree's four spans a thread pay more TLB misses.
uint8_t* HugeCopy(const std::vector<uint8_t>& v) {
  const size_t huge = size_t{2} << 20, bytes = (v.size() + huge - 1) / huge * huge;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(huge, bytes));
  madvise(p, bytes, MADV_HUGEPAGE);
  std::memcpy(p, v.data(), v.size());
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  const int64_t rows = atoll(argv[1]), cols = atoll(argv[2]);
  const int reps = atoi(argv[3]), passes = atoi(argv[4]);
  const size_t row_bytes = DTypeRowBytes(DType::kQ8_0, cols);
  const int64_t units = cols / 64;
  std::vector<uint8_t> q8(row_bytes * rows);
  std::vector<float> vals(rows * cols);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1, 1);
  {
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = uni(rng) * std::ldexp(1.0f, static_cast<int>(r % 5) - 2);
      QuantizeToBlocks(DType::kQ8_0, row.data(), cols, q8.data() + r * row_bytes);
      DequantizeToF32(DType::kQ8_0, q8.data() + r * row_bytes, cols, vals.data() + r * cols);
    }
  }
  std::vector<uint8_t> packed(rows / 4 * units * kUnit4Bytes);
  Repack(q8.data(), row_bytes, rows, cols, packed.data());
  const uint8_t* wt = HugeCopy(q8);  // the tree's weights
  const uint8_t* px = HugeCopy(packed);  // the repacked ones
  std::vector<float> x(cols);
  for (float& v : x) v = uni(rng);
  X32 xk = QuantizeX32(x.data(), cols);
  // RowsX4 starts every lane at -bias: a row's 4 lanes so take it 4 times; a quarter each.
  for (int32_t& b : xk.bias) b /= 4;  // 128 · sum is a multiple of 4

  std::vector<float> y4(rows), yt(rows);
  RowsX4(px, units, xk, 0, rows / 4, y4.data());
  int bad = 0;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double exact = 0, bound = 0;
    for (int64_t c = 0; c < cols; ++c) {
      exact += double(vals[r * cols + c]) * x[c];
      bound += xk.d[c / 32] / 2 * std::fabs(vals[r * cols + c]);
    }
    worst = std::max(worst, std::fabs(y4[r] - exact) / (bound + 1e-30));
    bad += std::fabs(y4[r] - exact) > bound * 1.001 + 1e-4;
  }
  std::printf("x4 rows outside the x-rounding bound: %d of %lld (worst |err| / bound %.3f)\n", bad, (long long)rows,
              worst);

  const mi::BlockGemvIsa isa = mi::BestBlockGemvIsa();
  const WeightView w{DType::kQ8_0, rows, cols, cols, wt};
  const int threads = omp_get_max_threads();
  auto run = [&](int which) {
    if (which == 0) {
      mi::GemvBlock({x.data(), 1, cols, w, yt.data(), rows}, isa, /*threaded=*/threads > 1);
      return;
    }
    int64_t sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      const int t = omp_get_thread_num(), n = omp_get_num_threads();
      if (which == 1) {
        const int64_t groups = rows / 4;
        RowsX4(px, units, xk, groups * t / n, groups * (t + 1) / n, y4.data());
      } else {
        const int64_t lines = int64_t(packed.size()) / 64;
        __m512i a = _mm512_setzero_si512();
        for (int64_t l = lines * t / n; l < lines * (t + 1) / n; ++l) {
          a = _mm512_add_epi32(a, _mm512_loadu_si512(px + 64 * l));
        }
        sink += _mm512_reduce_add_epi32(a);
      }
    }
    if (sink == 42) std::printf(" ");
  };
  std::vector<double> x4_tree, x4_read, tree_read;
  double time[3] = {0, 0, 0};
  for (int pass = 0; pass < passes; ++pass) {
    double t[3];
    for (int k = 0; k < 3; ++k) {
      const int which = (pass + k) % 3;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) run(which);
      t[which] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      time[which] += t[which];
    }
    x4_tree.push_back(t[1] / t[0]);
    x4_read.push_back(t[1] / t[2]);
    tree_read.push_back(t[0] / t[2]);
  }
  for (auto* v : {&x4_tree, &x4_read, &tree_read}) std::sort(v->begin(), v->end());
  const double bytes = double(row_bytes) * rows * reps * passes;
  std::printf("%lld x %lld, %d thread(s), GB/s: tree %.2f, x4 %.2f, plain read %.2f; time medians x4/tree %.3f "
              "(%.3f .. %.3f), x4/read %.3f, tree/read %.3f\n",
              (long long)rows, (long long)cols, threads, bytes / time[0] / 1e9, bytes / time[1] / 1e9,
              bytes / time[2] / 1e9, x4_tree[passes / 2], x4_tree.front(), x4_tree.back(), x4_read[passes / 2],
              tree_read[passes / 2]);
  return bad == 0 ? 0 : 1;
}
