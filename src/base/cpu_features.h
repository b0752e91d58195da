// What the running CPU can do, read once (cpuid). Kernels pick their variant from
// this at run time, so one binary runs on any x86-64 CPU.
#pragma once

namespace latte {

struct CpuFeatures {
  bool avx2 = false;         // with FMA, F16C and BMI2 (Haswell, Zen): the 8-float / 32-byte path
  bool avx512f = false;      // with BW/DQ/VL: the 16-float register path
  bool avx512_bf16 = false;  // vdpbf16ps: bf16 dot products in one instruction
  bool avx512_vnni = false;  // vpdpbusd: u8 x s8 dot products of 4 into int32 in one instruction
  bool gfni = false;         // vgf2p8affineqb: any GF(2) affine map of each byte's bits, one instruction
  bool fma = false;          // vfmadd (implied by avx2 here, which requires it)
};

// The detected features, read once at start-up, less what LATTE_ISA turns off so tests,
// benchmarks and users can run a CPU's fallbacks: "portable" (every SIMD path off),
// "avx2" (AVX-512 and GFNI off: what a CPU with AVX2 but no AVX-512 runs), "avx512"
// (AVX512_BF16, AVX512_VNNI and GFNI off: what an AVX-512 CPU without them, such as
// Skylake-SP, runs) or "nogfni" (GFNI off: a Cascade Lake's AVX512_VNNI kernels).
const CpuFeatures& GetCpuFeatures();

// Forces the portable (no AVX-512, no AVX2) kernels on or off; for tests and benchmarks.
void SetPortableKernelsForTesting(bool portable);

}  // namespace latte
