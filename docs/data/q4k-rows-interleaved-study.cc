// Study (not in the engine): Q4_K weights repacked four rows to a unit, against the tree's
// Q4_K GEMV at m = 1. The question it answers: how much of the Q4_K tile's arithmetic a
// row-interleaved layout (ik_llama.cpp's -rtr idea) with x quantized per 256 values (as
// llama.cpp's Q8_K) removes, before anyone builds that layout into the loader.
//
// Repacked unit, 4 rows x 256 values (592 bytes where the file has 4 x 144 = 576):
//   d[4], dmin[4] as f16 (16 bytes); sc[8][4] (32 bytes, sub-block-major, 6-bit values in
//   bytes); m[4][8] (32 bytes, row-major); then for chunk c < 4 and half h < 2 64 bytes:
//   row r's qs[32c + 16h .. + 16) in 128-bit lane r.
// One register of 64 code bytes so holds 16 values of sub-block 2c (low nibbles) and of
// 2c + 1 (high nibbles) for each of the 4 rows; vpdpbusd against x's 16 codes broadcast
// to the four lanes puts row r's sums in lanes 4r .. 4r + 3. Each sub-block's int32 sums
// are scaled by its integer sc per row (vpmulld) and added in int32 (x has one dx per 256
// values, so nothing else differs per sub-block); the mins' integer sum m·(x code sums)
// comes from one vpmaddwd a unit in the same row lanes; one conversion and two FMAs a unit.
//
// Build from the repository root after cmake --build build:
//   g++ -std=c++20 -O3 -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512vnni -mf16c -mfma \
//     -Isrc docs/data/q4k-rows-interleaved-study.cc -o /tmp/q4kx4 \
//     build/liblatte_kernels.a build/liblatte_base.a -fopenmp -ldnnl
// Run: /tmp/q4kx4 ROWS COLS REPS PASSES   (e.g. 256 2048 200 21: L2-resident, one thread;
//   229376 2048 1 15 with OMP_NUM_THREADS=2: from memory. Keep the matrix far above L3:
//   back-to-back calls on one near L3's size leave part of it there for the one-stream
//   reads and less for the tree's spans.)
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

#include "base/aligned_buffer.h"
#include "kernels/block_quant.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"

using namespace latte;
namespace mi = latte::matmul_internal;

namespace {

constexpr size_t kUnit4Bytes = 16 + 32 + 32 + 512;

// rows [4g, 4g + 4) of a Q4_K matrix -> repacked units, cols / 256 of them.
void Repack(const uint8_t* q4k, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* out) {
  const int64_t units = cols / 256;
  for (int64_t g = 0; g < rows / 4; ++g) {
    for (int64_t u = 0; u < units; ++u) {
      uint8_t* o = out + (g * units + u) * kUnit4Bytes;
      for (int r = 0; r < 4; ++r) {
        const uint8_t* b = q4k + (4 * g + r) * row_bytes + u * 144;
        std::memcpy(o + 2 * r, b, 2);                                   // d
        std::memcpy(o + 8 + 2 * r, b + block_layout::kQ4KDmin, 2);      // dmin
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, m;
          ScaleMinK4(j, b + block_layout::kQ4KScales, &sc, &m);
          o[16 + 4 * j + r] = sc;
          o[48 + 8 * r + j] = m;
        }
        for (int c = 0; c < 4; ++c) {
          for (int h = 0; h < 2; ++h) {
            std::memcpy(o + 80 + 64 * (2 * c + h) + 16 * r, b + block_layout::kQ4KQs + 32 * c + 16 * h, 16);
          }
        }
      }
    }
  }
}

// x quantized per 256 values: codes, dx, and per 32-value block the code sums (int16).
struct XK {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int16_t> bsum;
};

XK QuantizeXK(const float* x, int64_t cols) {
  XK k{std::vector<int8_t>(cols), std::vector<float>(cols / 256), std::vector<int16_t>(cols / 32)};
  for (int64_t u = 0; u < cols / 256; ++u) {
    float amax = 0;
    for (int i = 0; i < 256; ++i) amax = std::max(amax, std::fabs(x[256 * u + i]));
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    k.d[u] = amax / 127.0f;
    for (int b = 0; b < 8; ++b) {
      int s = 0;
      for (int i = 0; i < 32; ++i) {
        const int v = static_cast<int>(std::nearbyint(x[256 * u + 32 * b + i] * id));
        k.q[256 * u + 32 * b + i] = static_cast<int8_t>(v);
        s += v;
      }
      k.bsum[8 * u + b] = static_cast<int16_t>(s);
    }
  }
  return k;
}

// y[4g + r] for the 4-row groups [g0, g1).
void RowsX4(const uint8_t* packed, int64_t units, const XK& x, int64_t g0, int64_t g1, float* y) {
  const __m512i nib = _mm512_set1_epi8(0x0F);
  // dword lanes 4r .. 4r + 3 take byte r of a broadcast dword (zero-extended)
  const __m512i spread = _mm512_set_epi8(-1, -1, -1, 3, -1, -1, -1, 3, -1, -1, -1, 3, -1, -1, -1, 3, -1, -1, -1, 2, -1,
                                         -1, -1, 2, -1, -1, -1, 2, -1, -1, -1, 2, -1, -1, -1, 1, -1, -1, -1, 1, -1, -1,
                                         -1, 1, -1, -1, -1, 1, -1, -1, -1, 0, -1, -1, -1, 0, -1, -1, -1, 0, -1, -1, -1, 0);
  // float lanes 4r .. 4r + 3 take element r
  const __m512i rows4 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  for (int64_t g = g0; g < g1; ++g) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t u = 0; u < units; ++u) {
      const uint8_t* p = packed + (g * units + u) * kUnit4Bytes;
      const int8_t* xq = x.q.data() + 256 * u;
      __m512i isum[8];
      for (int j = 0; j < 8; ++j) isum[j] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        for (int h = 0; h < 2; ++h) {
          const __m512i w = _mm512_loadu_si512(p + 80 + 64 * (2 * c + h));
          const __m512i xl = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + 64 * c + 16 * h)));
          const __m512i xh =
              _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + 64 * c + 32 + 16 * h)));
          isum[2 * c] = _mm512_dpbusd_epi32(isum[2 * c], _mm512_and_si512(w, nib), xl);
          isum[2 * c + 1] = _mm512_dpbusd_epi32(isum[2 * c + 1], _mm512_and_si512(_mm512_srli_epi16(w, 4), nib), xh);
        }
      }
      __m512i total = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j) {
        int32_t four;
        std::memcpy(&four, p + 16 + 4 * j, 4);
        const __m512i sc = _mm512_shuffle_epi8(_mm512_set1_epi32(four), spread);
        total = _mm512_add_epi32(total, _mm512_mullo_epi32(isum[j], sc));
      }
      // mins: lanes 4r .. 4r + 3 = pairs of m[r][j] · bsum[j]
      const __m512i m16 = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 48)));
      const __m512i b16 = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.bsum.data() + 8 * u)));
      const __m512i mins = _mm512_madd_epi16(m16, b16);
      const __m512 dd = _mm512_castps256_ps512(
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));  // d0..3, dmin0..3
      const __m512 dx = _mm512_set1_ps(x.d[u]);
      const __m512 dv = _mm512_mul_ps(_mm512_permutexvar_ps(rows4, dd), dx);
      const __m512 dmv = _mm512_mul_ps(
          _mm512_permutexvar_ps(_mm512_add_epi32(rows4, _mm512_set1_epi32(4)), dd), dx);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), dv, acc);
      acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), dmv, acc);
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
  const size_t row_bytes = DTypeRowBytes(DType::kQ4_K, cols);
  const int64_t units = cols / 256;
  std::vector<uint8_t> q4k(row_bytes * rows);
  std::vector<float> vals(rows * cols);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1, 1);
  {
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = uni(rng) * std::ldexp(1.0f, static_cast<int>(r % 5) - 2);
      QuantizeToBlocks(DType::kQ4_K, row.data(), cols, q4k.data() + r * row_bytes);
      DequantizeToF32(DType::kQ4_K, q4k.data() + r * row_bytes, cols, vals.data() + r * cols);
    }
  }
  std::vector<uint8_t> packed(rows / 4 * units * kUnit4Bytes);
  Repack(q4k.data(), row_bytes, rows, cols, packed.data());
  const uint8_t* wt = HugeCopy(q4k);  // the tree's weights
  const uint8_t* px = HugeCopy(packed);  // the repacked ones
  std::vector<float> x(cols);
  for (float& v : x) v = uni(rng);
  const XK xk = QuantizeXK(x.data(), cols);

  // Correctness: against the exact product with the stored weights; x's rounding per 256
  // values moves each product by at most amax / 254 · |w|.
  std::vector<float> y4(rows), yt(rows);
  RowsX4(px, units, xk, 0, rows / 4, y4.data());
  int bad = 0;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double exact = 0, bound = 0;
    for (int64_t c = 0; c < cols; ++c) {
      exact += double(vals[r * cols + c]) * x[c];
      bound += xk.d[c / 256] / 2 * std::fabs(vals[r * cols + c]);
    }
    worst = std::max(worst, std::fabs(y4[r] - exact) / (bound + 1e-30));
    bad += std::fabs(y4[r] - exact) > bound * 1.001 + 1e-4;
  }
  std::printf("x4 rows outside the x-rounding bound: %d of %lld (worst |err| / bound %.3f)\n", bad, (long long)rows,
              worst);

  // Timing: the tree's GEMV (GemvBlock, threads over rows), RowsX4 over the same threads
  // (x quantized once outside: this study's quantizer is scalar; the tree's time includes
  // its vectorized PrepareX, timed alone below), and a plain read of the repacked bytes
  // (one stream a thread: the rate the memory gives this access with no arithmetic), in
  // rotating order pass by pass.
  const mi::BlockGemvIsa isa = mi::BestBlockGemvIsa();
  const WeightView w{DType::kQ4_K, rows, cols, cols, wt};
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
  std::vector<double> x4_tree, x4_read;
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
    // the read's bytes are the repacked ones: its time scaled to the file's bytes
    x4_tree.push_back(t[1] / t[0]);
    x4_read.push_back(t[1] / (t[2] * double(row_bytes * rows) / double(packed.size())));
  }
  std::sort(x4_tree.begin(), x4_tree.end());
  std::sort(x4_read.begin(), x4_read.end());
  AlignedBuffer storage(mi::PreparedXBytes(isa, DType::kQ4_K, 1, cols));
  const auto p0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) mi::PrepareX(isa, DType::kQ4_K, x.data(), 1, cols, cols, storage.data());
  const double prep_us = std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count() * 1e3;
  const double bytes = double(row_bytes) * rows * reps * passes;
  std::printf("%lld x %lld, %d thread(s), GB/s of the file's bytes: tree %.2f, x4 %.2f, plain read %.2f; time x4/tree "
              "median %.3f (%.3f .. %.3f), x4/read %.3f (%.3f .. %.3f); tree's PrepareX %.2f us of its %.2f us\n",
              (long long)rows, (long long)cols, threads, bytes / time[0] / 1e9, bytes / time[1] / 1e9,
              bytes / time[2] / 1e9, x4_tree[passes / 2], x4_tree.front(), x4_tree.back(), x4_read[passes / 2],
              x4_read.front(), x4_read.back(), prep_us, time[0] / (reps * passes) * 1e6);
  return bad == 0 ? 0 : 1;
}
