// The block-format GEMMs' x layout (gemm_block_avx512_vnni.cc with tiles of 6 x rows,
// gemm_block_avx2.cc with tiles of 4), written once. It is plain C++ with no intrinsics,
// but it is compiled into translation units with different ISA flags, so everything here
// has internal linkage: each of them keeps its own copy, built for its own ISA (an inline
// function with external linkage could be merged by the linker into one copy built with
// AVX-512 and reached from the AVX2 path).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/matmul_internal.h"

namespace latte::matmul_internal {
namespace {

// x as a GEMM kernel reads it: tiles of kTileM rows (the last padded with zero rows, which
// the kernel skips), each tile slot by slot, so that a tile's loop walks one pointer on:
//   codes [kTileM][32] int8 | corr [kTileM][subs] int32 | dx [kTileM] f32 | msum [kTileM] f32
// corr = -zero_point · the sub-block's code sum; msum = dx · the slot's code sum (formats
// with mins).
template <int kTileM> struct GemmXTiles {
  static constexpr size_t kCodesBytes = static_cast<size_t>(kTileM) * 32;

  int64_t m = 0;
  int64_t tiles = 0;
  int64_t slots = 0;          // cols / 32
  int subs = 1;               // sub-blocks per slot
  size_t slot_bytes = 0;      // one slot of one tile
  std::byte* data = nullptr;  // [tiles][slots][slot_bytes]

  // The layout of m rows of `cols` values (a multiple of 32), `subs` sub-blocks a slot;
  // data is left for the caller to place (Bytes() of it).
  static GemmXTiles For(int64_t m, int64_t cols, int subs) {
    GemmXTiles g;
    g.m = m;
    g.tiles = (m + kTileM - 1) / kTileM;
    g.slots = cols / 32;
    g.subs = subs;
    g.slot_bytes = kCodesBytes + static_cast<size_t>(kTileM) * (subs + 2) * 4;  // codes, corr, dx, msum
    return g;
  }
  size_t Bytes() const { return static_cast<size_t>(tiles * slots) * slot_bytes; }
  std::byte* Slot(int64_t tile, int64_t s) const { return data + static_cast<size_t>(tile * slots + s) * slot_bytes; }

  // A slot's parts past its codes, for `subs` sub-blocks a slot.
  static const int32_t* Corr(const std::byte* slot) { return reinterpret_cast<const int32_t*>(slot + kCodesBytes); }
  static const float* Dx(const std::byte* slot, int subs) {
    return reinterpret_cast<const float*>(Corr(slot) + kTileM * subs);
  }
  static const float* Msum(const std::byte* slot, int subs) { return Dx(slot, subs) + kTileM; }

  // Tiles [t0, t1) from the prepared x (int8 codes per 32-value slot, dx in the 8 scale
  // lanes of each slot: the AVX-512 and AVX2 layouts agree on both).
  void Fill(const PreparedX& x, int zero_point, int64_t t0, int64_t t1) const {
    const int sub = 32 / subs;
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t s = 0; s < slots; ++s) {
        std::byte* slot = Slot(t, s);
        int8_t* codes = reinterpret_cast<int8_t*>(slot);
        int32_t* corr = reinterpret_cast<int32_t*>(slot + kCodesBytes);
        float* dx = reinterpret_cast<float*>(corr + kTileM * subs);
        float* msum = dx + kTileM;
        for (int r = 0; r < kTileM; ++r) {
          const int64_t i = t * kTileM + r;
          if (i >= m) {  // padding rows: zero codes and scales
            std::memset(codes + 32 * r, 0, 32);
            for (int h = 0; h < subs; ++h) corr[r * subs + h] = 0;
            dx[r] = msum[r] = 0.0f;
            continue;
          }
          const int8_t* q = x.q + i * x.ldq + 32 * s;
          std::memcpy(codes + 32 * r, q, 32);
          dx[r] = x.scale[i * x.lds + 8 * s];
          int32_t total = 0;
          for (int h = 0; h < subs; ++h) {
            int32_t sum = 0;
            for (int c = 0; c < sub; ++c) sum += q[h * sub + c];
            corr[r * subs + h] = -zero_point * sum;
            total += sum;
          }
          msum[r] = dx[r] * static_cast<float>(total);
        }
      }
    }
  }
};

}  // namespace
}  // namespace latte::matmul_internal
