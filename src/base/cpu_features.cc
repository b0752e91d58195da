#include "base/cpu_features.h"

#include <cstdlib>
#include <cstring>

namespace latte {
namespace {

CpuFeatures Detect() {
  CpuFeatures f;
  __builtin_cpu_init();
  // The *_avx2*.cc kernels are compiled with -mavx2 -mfma -mf16c -mbmi2: every CPU with
  // AVX2 has the other three, but each is checked, as the compiler may use any of them.
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
           __builtin_cpu_supports("bmi2");
  f.avx512f = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  f.avx512_bf16 = f.avx512f && __builtin_cpu_supports("avx512bf16");
  f.avx512_vnni = f.avx512f && __builtin_cpu_supports("avx512vnni");
  f.fma = __builtin_cpu_supports("fma");
  const char* isa = std::getenv("LATTE_ISA");
  if (isa != nullptr && std::strcmp(isa, "portable") == 0) f = CpuFeatures{};
  return f;
}

CpuFeatures& Mutable() {
  static CpuFeatures features = Detect();
  return features;
}

}  // namespace

const CpuFeatures& GetCpuFeatures() { return Mutable(); }

void SetPortableKernelsForTesting(bool portable) { Mutable() = portable ? CpuFeatures{} : Detect(); }

}  // namespace latte
