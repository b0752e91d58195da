#include "base/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>

namespace latte {
namespace {

// F16C from CPUID leaf 1, ECX bit 29: clang's __builtin_cpu_supports has no "f16c".
bool CpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & bit_F16C) != 0;
}

// GFNI from CPUID leaf 7 (sub-leaf 0), ECX bit 8, read directly as F16C is.
bool CpuHasGfni() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & bit_GFNI) != 0;
}

CpuFeatures Detect() {
  CpuFeatures f;
  __builtin_cpu_init();
  // The *_avx2*.cc kernels are compiled with -mavx2 -mfma -mf16c -mbmi2: every CPU with
  // AVX2 has the other three, but each is checked, as the compiler may use any of them.
  f.avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && CpuHasF16c() && __builtin_cpu_supports("bmi2");
  // The *_avx512*.cc kernels add -mbmi2 (the lattice formats' sign masks use pdep): every
  // AVX-512 CPU has it, checked as for AVX2.
  f.avx512f = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
              __builtin_cpu_supports("bmi2");
  f.avx512_bf16 = f.avx512f && __builtin_cpu_supports("avx512bf16");
  f.avx512_vnni = f.avx512f && __builtin_cpu_supports("avx512vnni");
  f.gfni = f.avx512f && CpuHasGfni();  // used only by AVX-512 kernels
  f.fma = __builtin_cpu_supports("fma");
  const char* isa = std::getenv("LATTE_ISA");
  if (isa != nullptr && std::strcmp(isa, "portable") == 0) f = CpuFeatures{};
  // A CPU with AVX-512 runs the kernels of one without it: the AVX2 path, where the CPU
  // has AVX2, else the portable one.
  if (isa != nullptr && std::strcmp(isa, "avx2") == 0) {
    f.avx512f = f.avx512_bf16 = f.avx512_vnni = f.gfni = false;
  }
  // ... or those of an AVX-512 CPU without AVX512_BF16 and AVX512_VNNI (Skylake-SP):
  // AVX-512F/BW/DQ/VL only.
  if (isa != nullptr && std::strcmp(isa, "avx512") == 0) {
    f.avx512_bf16 = f.avx512_vnni = f.gfni = false;
  }
  if (isa != nullptr && std::strcmp(isa, "nogfni") == 0) f.gfni = false;
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
