// L2-resident Q4_K / Q5_K / Q6_K GEMV rows, one thread: GemvBlockRowsAvx512Vnni against
// GemvBlockRowsAvx512VnniGfni alternating (ABBA), median time ratio over the passes.
// Build from the repository root after cmake --build build:
//   g++ -std=c++20 -O2 -Isrc docs/data/gemv-rows-gfni-driver.cc -o /tmp/gfdrv \
//     build/liblatte_kernels.a build/liblatte_base.a -fopenmp -ldnnl
// Run: /tmp/gfdrv q6_k 160 2048 200 21 [m]   (type rows cols reps passes [x rows])
#include <algorithm>
#include <chrono>
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
int main(int argc, char** argv) {
  DType dtype = std::string(argv[1]) == "q6_k"   ? DType::kQ6_K
                : std::string(argv[1]) == "q4_k" ? DType::kQ4_K
                                                 : DType::kQ5_K;
  int64_t rows = atoll(argv[2]), cols = atoll(argv[3]);
  int reps = atoi(argv[4]);
  int passes = atoi(argv[5]);
  int m = argc > 6 ? atoi(argv[6]) : 1;
  size_t rb = DTypeRowBytes(dtype, cols), bytes = rb * rows;
  std::vector<uint8_t> buf(bytes);
  std::mt19937 rng(1);
  std::vector<float> row(cols);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = u(rng);
    QuantizeToBlocks(dtype, row.data(), cols, buf.data() + r * rb);
  }
  std::vector<float> x(cols * m), y(rows * m);
  for (auto& v : x) v = u(rng);
  AlignedBuffer st(mi::PreparedXBytes(mi::BlockGemvIsa::kAvx512Vnni, dtype, m, cols));
  auto px = mi::PrepareX(mi::BlockGemvIsa::kAvx512Vnni, dtype, x.data(), m, cols, cols, st.data());
  WeightView w{dtype, rows, cols, cols, buf.data()};
  std::vector<double> r;
  double ta = 0, tb = 0;
  for (int p = 0; p < passes; ++p) {
    double t[2];
    for (int k = 0; k < 2; ++k) {
      const int ph = (p % 2) ? 1 - k : k;
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i)
        (ph ? mi::GemvBlockRowsAvx512VnniGfni : mi::GemvBlockRowsAvx512Vnni)(px, w, 0, rows, y.data(), rows);
      t[ph] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    r.push_back(t[1] / t[0]);
    ta += t[0];
    tb += t[1];
  }
  std::sort(r.begin(), r.end());
  printf("%s m=%d vnni %.2f GB/s gfni %.2f GB/s  gfni/vnni time median %.4f (min %.4f max %.4f)\n", argv[1], m,
         bytes * reps * passes / ta / 1e9, bytes * reps * passes / tb / 1e9, r[r.size() / 2], r[0], r.back());
}
