// The block-format GEMMs' x layout and their driver (gemm_block_avx512_vnni.cc with tiles
// of 6 x rows, gemm_block_avx2.cc with tiles of 4), written once. It is plain C++ with no
// intrinsics, but it is compiled into translation units with different ISA flags, so
// everything here has internal linkage: each of them keeps its own copy, built for its own
// ISA (an inline function with external linkage could be merged by the linker into one
// copy built with AVX-512 and reached from the AVX2 path).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "base/aligned_buffer.h"
#include "base/parallel.h"
#include "base/scratch.h"
#include "kernels/matmul_internal.h"

namespace latte::matmul_internal {
namespace {

// x as a GEMM kernel reads it: tiles of kTileM rows (the last padded with zero rows, which
// the kernel skips), each tile slot by slot, so that a tile's loop walks one pointer on:
//   codes [kTileM][32] int8 | corr [kTileM][subs] int32 | dx [kTileM] f32 | msum [kTileM][subs] f32
// corr = -zero_point · the sub-block's code sum; msum = dx · the sub-block's code sum
// (formats with mins: per slot, or Q2_K's per 16 values).
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
    g.slot_bytes = kCodesBytes + static_cast<size_t>(kTileM) * (2 * subs + 1) * 4;  // codes, corr, dx, msum
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
            for (int h = 0; h < subs; ++h) corr[r * subs + h] = 0, msum[r * subs + h] = 0.0f;
            dx[r] = 0.0f;
            continue;
          }
          const int8_t* q = x.q + i * x.ldq + 32 * s;
          std::memcpy(codes + 32 * r, q, 32);
          dx[r] = x.scale[i * x.lds + 8 * s];
          for (int h = 0; h < subs; ++h) {
            int32_t sum = 0;
            for (int c = 0; c < sub; ++c) sum += q[h * sub + c];
            corr[r * subs + h] = -zero_point * sum;
            msum[r * subs + h] = dx[r] * static_cast<float>(sum);
          }
        }
      }
    }
  }
};

// y = x · wᵀ by a block GEMM: x quantized in the layout of `x_isa` (the K formats' slot
// order for Q4_K / Q5_K, else in order: Q8_0's layout, no bias lanes, the kernel takes the
// zero points off from the code sums) into per-thread scratch, then laid out in tiles of
// kTileM rows with `slot_cols` values a row (x's row padded as that layout pads it), then
// multiply_rows(tiles, n0, n1) for weight rows [n0, n1) in groups of panel_rows. Each
// thread prepares its share of the tiles, and after a barrier multiplies its rows.
template <int kTileM, class MultiplyRows> void RunBlockGemm(const MatmulProblem& p, bool threaded, BlockGemvIsa x_isa,
                                                            int64_t slot_cols, int zero_point, int64_t panel_rows,
                                                            MultiplyRows multiply_rows) {
  const WeightView& w = p.w;
  const int64_t k = w.cols;
  GemmXTiles<kTileM> g = GemmXTiles<kTileM>::For(p.m, slot_cols, HasSixteenValueScales(w.dtype) ? 2 : 1);
  const bool k_order = w.dtype == DType::kQ4_K || w.dtype == DType::kQ5_K;
  const DType layout = k_order ? w.dtype : DType::kQ8_0;
  const size_t prepared_bytes = PreparedXBytes(x_isa, layout, p.m, k);
  thread_local AlignedBuffer storage;  // grown once per calling thread
  std::byte* scratch = GrowAligned(storage, prepared_bytes + g.Bytes());
  const PreparedX x = PlaceX(x_isa, layout, p.m, k, scratch);
  g.data = scratch + prepared_bytes;
  auto prepare = [&](RowRange tiles) {
    FillX(x, p.x, p.ldx, tiles.begin * kTileM, std::min(p.m, tiles.end * kTileM));
    g.Fill(x, zero_point, tiles.begin, tiles.end);
  };
  const bool parallel = threaded && w.rows >= 2 * panel_rows && omp_get_max_threads() > 1 && !omp_in_parallel();
  if (!parallel) {
    prepare(RowRange{0, g.tiles});
    multiply_rows(g, 0, w.rows);
    return;
  }
#pragma omp parallel
  {
    prepare(ThisThreadRows(g.tiles));
#pragma omp barrier
    const RowRange rows = ThisThreadRows(w.rows, panel_rows);
    multiply_rows(g, rows.begin, rows.end);
  }
}

}  // namespace
}  // namespace latte::matmul_internal
