// Study (not in the engine): Q4_K and Q8_0 weights repacked four rows to a unit, against
// the tree's GEMV at m = 1. The question it answers: how much of the tiles' arithmetic and
// reading a row-interleaved layout (ik_llama.cpp's -rtr idea) removes, before anyone builds
// that layout into the loader.
//
// Q4_K unit, 4 rows x 256 values (592 bytes where the file has 4 x 144 = 576): d[4],
//   dmin[4] as f16 (16 bytes); sc[8][4] (32 bytes, sub-block-major, 6-bit values in
//   bytes); m[4][8] (32 bytes, row-major); then for chunk c < 4 and half h < 2 64 bytes:
//   row r's qs[32c + 16h .. + 16) in 128-bit lane r. x quantized per 256 values (as
//   llama.cpp's Q8_K), so each sub-block's int32 sums take its integer sc per row
//   (vpmulld) and add in int32; the mins' integer sum m·(x code sums) comes from one
//   vpmaddwd a unit in the same row lanes; one conversion and two FMAs a unit.
// Q8_0 unit, 4 rows x 64 values (272 bytes, the file's 4 x 68): d[2][4] as f16 (16 bytes,
//   block-major), then for k < 4 64 bytes: row r's codes 16k .. 16k + 16 of the 64, plus
//   128 (unsigned for vpdpbusd), in 128-bit lane r. x per 32 values as the tree's; per
//   block the bias 128·(x's code sum) comes off in int32, then one conversion and one FMA.
// In both one register of 64 code bytes holds 16 values from each of the 4 rows, and
// vpdpbusd against x's 16 codes broadcast to the four lanes puts row r's sums in lanes
// 4r .. 4r + 3.
//
// Build from the repository root after cmake --build build:
//   g++ -std=c++20 -O3 -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512vnni -mf16c -mfma
//     -Isrc docs/data/rows-interleaved-study.cc -o /tmp/x4study
//     build/liblatte_kernels.a build/liblatte_base.a -fopenmp -ldnnl   (one command line)
// Run: /tmp/x4study TYPE ROWS COLS REPS PASSES, TYPE q4_k or q8_0 (e.g. q4_k 256 2048 200 21:
//   L2-resident, one thread; q4_k 229376 2048 1 15 or q8_0 102400 2048 2 15 with
//   OMP_NUM_THREADS=2: from memory. Keep the matrix far above L3: back-to-back calls on
//   one near L3's size leave part of it there for the one-stream reads and less for the
//   tree's spans.)
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
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "kernels/block_quant.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"

using namespace latte;
namespace mi = latte::matmul_internal;

namespace {

// x quantized per `block` values (round half to even): codes, dx per block, and the code
// sums per 32 values (|sum| <= 32 · 127 fits int16).
struct XCodes {
  int64_t block;
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int16_t> sum32;
};

XCodes QuantizeX(const float* x, int64_t cols, int64_t block) {
  XCodes k{block, std::vector<int8_t>(cols), std::vector<float>(cols / block), std::vector<int16_t>(cols / 32)};
  for (int64_t b = 0; b < cols / block; ++b) {
    float amax = 0;
    for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[block * b + i]));
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    k.d[b] = amax / 127.0f;
    for (int64_t i = 0; i < block; ++i) k.q[block * b + i] = static_cast<int8_t>(std::nearbyint(x[block * b + i] * id));
  }
  for (int64_t s = 0; s < cols / 32; ++s) {
    int sum = 0;
    for (int i = 0; i < 32; ++i) sum += k.q[32 * s + i];
    k.sum32[s] = static_cast<int16_t>(sum);
  }
  return k;
}

// Float lanes 4r .. 4r + 3 take element r (+ add).
inline __m512i RowLanes(int add) {
  return _mm512_add_epi32(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), _mm512_set1_epi32(add));
}

// y[0 .. 4) from acc's lanes 4r .. 4r + 3.
inline void StoreRowSums(__m512 acc, float* y) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  for (int r = 0; r < 4; ++r) y[r] = lanes[4 * r] + lanes[4 * r + 1] + lanes[4 * r + 2] + lanes[4 * r + 3];
}

struct Q4K {
  static constexpr DType kType = DType::kQ4_K;
  static constexpr const char* kName = "q4_k";
  static constexpr int64_t kUnitValues = 256;
  static constexpr size_t kUnit4Bytes = 16 + 32 + 32 + 512;
  static constexpr int64_t kXBlock = 256;

  static void RepackUnit(const uint8_t* const (&b)[4], uint8_t* o) {
    for (int r = 0; r < 4; ++r) {
      std::memcpy(o + 2 * r, b[r], 2);                               // d
      std::memcpy(o + 8 + 2 * r, b[r] + block_layout::kQ4KDmin, 2);  // dmin
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        ScaleMinK4(j, b[r] + block_layout::kQ4KScales, &sc, &m);
        o[16 + 4 * j + r] = sc;
        o[48 + 8 * r + j] = m;
      }
      for (int c = 0; c < 4; ++c) {
        for (int h = 0; h < 2; ++h) {
          std::memcpy(o + 80 + 64 * (2 * c + h) + 16 * r, b[r] + block_layout::kQ4KQs + 32 * c + 16 * h, 16);
        }
      }
    }
  }

  // The 4 rows' dot products with one 256-value unit of x, added to acc's row lanes.
  static __m512 Unit(const uint8_t* p, const XCodes& x, int64_t u, __m512 acc) {
    const __m512i nib = _mm512_set1_epi8(0x0F);
    // dword lanes 4r .. 4r + 3 take byte r of a broadcast dword (zero-extended)
    const __m512i spread =
        _mm512_set_epi8(-1, -1, -1, 3, -1, -1, -1, 3, -1, -1, -1, 3, -1, -1, -1, 3, -1, -1, -1, 2, -1, -1, -1, 2, -1,
                        -1, -1, 2, -1, -1, -1, 2, -1, -1, -1, 1, -1, -1, -1, 1, -1, -1, -1, 1, -1, -1, -1, 1, -1, -1,
                        -1, 0, -1, -1, -1, 0, -1, -1, -1, 0, -1, -1, -1, 0);
    const int8_t* xq = x.q.data() + 256 * u;
    __m512i isum[8];
    for (int j = 0; j < 8; ++j) isum[j] = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      for (int h = 0; h < 2; ++h) {
        const __m512i w = _mm512_loadu_si512(p + 80 + 64 * (2 * c + h));
        const __m512i xl =
            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + 64 * c + 16 * h)));
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
      total =
          _mm512_add_epi32(total, _mm512_mullo_epi32(isum[j], _mm512_shuffle_epi8(_mm512_set1_epi32(four), spread)));
    }
    // mins: lanes 4r .. 4r + 3 = pairs of m[r][j] · (x code sum of block j)
    const __m512i m16 = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 48)));
    const __m512i b16 =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.sum32.data() + 8 * u)));
    const __m512i mins = _mm512_madd_epi16(m16, b16);
    const __m512 dd = _mm512_castps256_ps512(
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));  // d0..3, dmin0..3
    const __m512 dx = _mm512_set1_ps(x.d[u]);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(_mm512_permutexvar_ps(RowLanes(0), dd), dx), acc);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(_mm512_permutexvar_ps(RowLanes(4), dd), dx), acc);
  }
};

struct Q8_0 {
  static constexpr DType kType = DType::kQ8_0;
  static constexpr const char* kName = "q8_0";
  static constexpr int64_t kUnitValues = 64;
  static constexpr size_t kUnit4Bytes = 16 + 256;
  static constexpr int64_t kXBlock = 32;

  static void RepackUnit(const uint8_t* const (&b)[4], uint8_t* o) {
    for (int r = 0; r < 4; ++r) {
      for (int j = 0; j < 2; ++j) {
        const uint8_t* blk = b[r] + 34 * j;
        std::memcpy(o + 8 * j + 2 * r, blk, 2);
        for (int h = 0; h < 2; ++h) {
          for (int i = 0; i < 16; ++i) {
            o[16 + 64 * (2 * j + h) + 16 * r + i] = static_cast<uint8_t>(blk[2 + 16 * h + i] + 128);
          }
        }
      }
    }
  }

  static __m512 Unit(const uint8_t* p, const XCodes& x, int64_t u, __m512 acc) {
    const __m512 dd = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    for (int j = 0; j < 2; ++j) {
      const int64_t b = 2 * u + j;
      // 128 · sum x once per row: a quarter in each of the row's 4 lanes
      __m512i isum = _mm512_set1_epi32(-32 * x.sum32[b]);
      for (int h = 0; h < 2; ++h) {
        const __m512i w = _mm512_loadu_si512(p + 16 + 64 * (2 * j + h));
        const __m512i xv =
            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.q.data() + 32 * b + 16 * h)));
        isum = _mm512_dpbusd_epi32(isum, w, xv);
      }
      const __m512 d = _mm512_mul_ps(_mm512_permutexvar_ps(RowLanes(4 * j), dd), _mm512_set1_ps(x.d[b]));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, acc);
    }
    return acc;
  }
};

// rows [4g, 4g + 4) of a matrix in F's format -> repacked units, cols / kUnitValues a group.
template <class F> void Repack(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* out) {
  const int64_t units = cols / F::kUnitValues;
  const size_t unit_bytes = row_bytes / units;
  for (int64_t g = 0; g < rows / 4; ++g) {
    for (int64_t u = 0; u < units; ++u) {
      const uint8_t* b[4];
      for (int r = 0; r < 4; ++r) b[r] = w + (4 * g + r) * row_bytes + u * unit_bytes;
      F::RepackUnit(b, out + (g * units + u) * F::kUnit4Bytes);
    }
  }
}

// y[4g + r] for the 4-row groups [g0, g1).
template <class F>
void RowsX4(const uint8_t* packed, int64_t units, const XCodes& x, int64_t g0, int64_t g1, float* y) {
  for (int64_t g = g0; g < g1; ++g) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t u = 0; u < units; ++u) acc = F::Unit(packed + (g * units + u) * F::kUnit4Bytes, x, u, acc);
    StoreRowSums(acc, y + 4 * g);
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

template <class F> int Study(int64_t rows, int64_t cols, int reps, int passes) {
  const size_t row_bytes = DTypeRowBytes(F::kType, cols);
  const int64_t units = cols / F::kUnitValues;
  std::vector<uint8_t> wq(row_bytes * rows);
  std::vector<float> vals(rows * cols);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1, 1);
  {
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = uni(rng) * std::ldexp(1.0f, static_cast<int>(r % 5) - 2);
      QuantizeToBlocks(F::kType, row.data(), cols, wq.data() + r * row_bytes);
      DequantizeToF32(F::kType, wq.data() + r * row_bytes, cols, vals.data() + r * cols);
    }
  }
  std::vector<uint8_t> packed(rows / 4 * units * F::kUnit4Bytes);
  Repack<F>(wq.data(), row_bytes, rows, cols, packed.data());
  const uint8_t* wt = HugeCopy(wq);      // the tree's weights
  const uint8_t* px = HugeCopy(packed);  // the repacked ones
  std::vector<float> x(cols);
  for (float& v : x) v = uni(rng);
  const XCodes xk = QuantizeX(x.data(), cols, F::kXBlock);

  // Correctness: against the exact product with the stored weights; x's rounding moves
  // each product by at most dx / 2 · |w|.
  std::vector<float> y4(rows), yt(rows);
  RowsX4<F>(px, units, xk, 0, rows / 4, y4.data());
  int bad = 0;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double exact = 0, bound = 0;
    for (int64_t c = 0; c < cols; ++c) {
      exact += double(vals[r * cols + c]) * x[c];
      bound += xk.d[c / xk.block] / 2 * std::fabs(vals[r * cols + c]);
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
  const WeightView w{F::kType, rows, cols, cols, wt};
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
        RowsX4<F>(px, units, xk, groups * t / n, groups * (t + 1) / n, y4.data());
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
  // the read's bytes are the repacked ones: its time scaled to the file's bytes
  const double read_scale = double(row_bytes * rows) / double(packed.size());
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
    x4_read.push_back(t[1] / (t[2] * read_scale));
    tree_read.push_back(t[0] / (t[2] * read_scale));
  }
  for (auto* v : {&x4_tree, &x4_read, &tree_read}) std::sort(v->begin(), v->end());
  AlignedBuffer storage(mi::PreparedXBytes(isa, F::kType, 1, cols));
  const auto p0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) mi::PrepareX(isa, F::kType, x.data(), 1, cols, cols, storage.data());
  const double prep_us = std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count() * 1e3;
  const double bytes = double(row_bytes) * rows * reps * passes;
  std::printf(
      "%s %lld x %lld, %d thread(s), GB/s of the file's bytes: tree %.2f, x4 %.2f, plain read %.2f; time "
      "medians x4/tree %.3f (%.3f .. %.3f), x4/read %.3f, tree/read %.3f; tree's PrepareX %.2f us of its "
      "%.2f us\n",
      F::kName, (long long)rows, (long long)cols, threads, bytes / time[0] / 1e9, bytes / time[1] / 1e9,
      bytes / (time[2] * read_scale) / 1e9, x4_tree[passes / 2], x4_tree.front(), x4_tree.back(), x4_read[passes / 2],
      tree_read[passes / 2], prep_us, time[0] / (reps * passes) * 1e6);
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) return 2;
  const std::string type = argv[1];
  const int64_t rows = atoll(argv[2]), cols = atoll(argv[3]);
  const int reps = atoi(argv[4]), passes = atoi(argv[5]);
  if (type == "q4_k") return Study<Q4K>(rows, cols, reps, passes);
  if (type == "q8_0") return Study<Q8_0>(rows, cols, reps, passes);
  return 2;
}
