// SiluMul against a plain double-precision computation written here, on fixed-seed
// random inputs with saturated tails; in place; and the checked boundary.
#include "kernels/silu_mul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/parallel.h"
#include "test_util.h"

namespace latte {
namespace {

using testing_util::ExpectAllNear;
using testing_util::RandomVector;

// f32 exp (~1 ulp), one add, one divide, one multiply: ~4 roundings of 2^-24 ≈ 2.4e-7
// relative; 2e-6 relative, plus a tiny absolute floor for results near zero (g << 0,
// where exp(-g) overflows f32 to inf and the kernel returns -0).
constexpr double kSiluRelTol = 2e-6;
constexpr double kSiluAbsTol = 1e-30;

std::vector<double> SiluMulDouble(const std::vector<float>& g, const std::vector<float>& u) {
  std::vector<double> out(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    out[i] = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * double(u[i]);
  }
  return out;
}

// Every path: the dispatched one (AVX-512 where the CPU has it), the AVX2 one where the
// CPU has AVX2, and the portable one.
TEST(SiluMul, MatchesDouble) {
  enum class Path { kDetected, kAvx2, kPortable };
  for (Path path : {Path::kDetected, Path::kAvx2, Path::kPortable}) {
    if (path == Path::kAvx2 && !GetCpuFeatures().avx2) continue;
    testing_util::ScopedPortableKernels scoped(path == Path::kPortable);
    SCOPED_TRACE(path == Path::kPortable ? "portable" : path == Path::kAvx2 ? "avx2" : "detected");
    std::mt19937 rng(31);
    // The last count is past kMinParallelWork: the OpenMP-parallel path.
    for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{1000}, kMinParallelWork + 4464}) {
      SCOPED_TRACE("count=" + std::to_string(count));
      std::vector<float> g = RandomVector(count, rng, -8.0f, 8.0f);
      const std::vector<float> u = RandomVector(count, rng, -2.0f, 2.0f);
      if (count >= 7) {  // saturated tails: silu(g) → g for g >> 0, → 0 for g << 0
        g[1] = 30.0f;
        g[2] = -30.0f;
        g[3] = -100.0f;  // exp(100) overflows f32
        g[4] = 100.0f;
      }
      std::vector<float> out(count, NAN);
      if (path == Path::kAvx2) {
        silu_internal::SiluMulAvx2(g.data(), u.data(), count, out.data());
      } else {
        SiluMul(g.data(), u.data(), count, out.data());
      }
      ExpectAllNear(out, SiluMulDouble(g, u), kSiluAbsTol, kSiluRelTol, "silu_mul");
    }
  }
}

TEST(SiluMul, InPlace) {
  std::mt19937 rng(32);
  const int64_t count = 513;
  const std::vector<float> g = RandomVector(count, rng, -8.0f, 8.0f);
  const std::vector<float> u = RandomVector(count, rng, -2.0f, 2.0f);
  const std::vector<double> want = SiluMulDouble(g, u);
  std::vector<float> into_gate = g;  // out aliases gate, as MlpForward calls it
  SiluMul(into_gate.data(), u.data(), count, into_gate.data());
  ExpectAllNear(into_gate, want, kSiluAbsTol, kSiluRelTol, "out = gate");
  std::vector<float> into_up = u;
  SiluMul(g.data(), into_up.data(), count, into_up.data());
  ExpectAllNear(into_up, want, kSiluAbsTol, kSiluRelTol, "out = up");
}

TEST(SiluMulDeathTest, BadArgumentsAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> g(8, 1.0f);
  EXPECT_DEATH(SiluMul(g.data(), nullptr, 8, g.data()), "SiluMul: null gate, up or out");
  EXPECT_DEATH(SiluMul(g.data(), g.data(), -1, g.data()), "SiluMul: count -1");
}

}  // namespace
}  // namespace latte
