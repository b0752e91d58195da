// Matmul for GGUF block-format weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q5_0, Q5_1) and f16 weights,
// the parts that need no AVX-512: x's quantization for the integer GEMV and its layouts,
// the portable integer GEMV, the GEMV driver, the large-m path over chunks of
// dequantized rows, and the portable f16 GEMV. The AVX-512 kernels are in
// gemv_block_avx512*.cc, the AVX2 ones in gemv_block_avx2.cc; matmul_internal.h
// describes the arithmetic.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/check.h"
#include "base/cpu_features.h"
#include "base/parallel.h"
#include "base/scratch.h"
#include "kernels/bf16_round.h"
#include "kernels/block_quant.h"
#include "kernels/matmul_internal.h"

namespace latte {
namespace matmul_internal {
namespace {

using namespace block_layout;

// x's quantization block: 32 values, one f32 scale (llama.cpp's Q8_0 activations).
constexpr int64_t kXBlock = 32;
// Values per AVX-512 step (one 512-bit register of int8 codes).
constexpr int64_t kStep = 64;

int64_t RoundUp(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Formats with a min per 32 values (Q4_K / Q5_K: -dmin·m, Q5_1: m) or per 16 (Q2_K:
// -dmin·m) that multiplies PreparedX::block_sum.
bool HasMins(DType dtype) {
  return dtype == DType::kQ4_K || dtype == DType::kQ5_K || dtype == DType::kQ5_1 || dtype == DType::kQ2_K;
}
// Values per min (and per block_sum entry in the portable layout).
int64_t MinBlock(DType dtype) { return dtype == DType::kQ2_K ? 16 : kXBlock; }

// The zero point the AVX-512 and AVX2 kernels take off in the integers (see
// PreparedX::bias): their weight codes are unsigned (vpdpbusd and vpmaddubsw multiply u8
// by s8). Q8_0's codes (and IQ4_NL / IQ4_XS's levels, the lattice formats' codes) are made
// unsigned by flipping the sign bit (+128) on the VNNI path only: the AVX-512BW and AVX2
// paths multiply |w| by x with w's sign (vpmaddubsw would saturate 255 · 127 · 2).
int ZeroPoint(BlockGemvIsa isa, DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
    case DType::kIQ2_XXS:
    case DType::kIQ3_XXS:
    case DType::kIQ1_S: return isa == BlockGemvIsa::kAvx512Vnni ? 128 : 0;
    case DType::kQ4_0: return 8;
    case DType::kQ5_0: return 16;
    case DType::kQ6_K: return 32;
    case DType::kQ3_K: return 4;
    default: return 0;
  }
}

bool IsAvx512(BlockGemvIsa isa) { return isa == BlockGemvIsa::kAvx512 || isa == BlockGemvIsa::kAvx512Vnni; }

// PreparedX::block_sum: the formats with mins, and in the AVX-512 layouts Q6_K's / Q3_K's
// per-sub-block dx and IQ4_XS's dx per block (its kernel folds them into its scales).
bool HasBlockSums(BlockGemvIsa isa, DType dtype) {
  return HasMins(dtype) ||
         ((dtype == DType::kQ6_K || dtype == DType::kQ3_K || dtype == DType::kIQ4_XS) && IsAvx512(isa));
}

// Where PreparedX's arrays start inside its storage, per x row strides included.
struct XLayout {
  int64_t ldq = 0, lds = 0, ldb = 0;
  size_t q = 0, scale = 0, bias = 0, block_sum = 0, bytes = 0;
};

XLayout Layout(BlockGemvIsa isa, DType dtype, int64_t m, int64_t cols) {
  XLayout l;
  const bool avx = isa != BlockGemvIsa::kPortable;
  const int64_t steps = (cols + kStep - 1) / kStep;
  l.ldq = avx ? steps * kStep : RoundUp(cols, 64);
  l.lds = avx ? steps * 16 : RoundUp(cols / kXBlock, 16);
  // The AVX-512 layout's K-format sums: 16 floats per 256 values; else one per block.
  if (HasBlockSums(isa, dtype)) {
    const int64_t per_unit = dtype == DType::kQ2_K && IsAvx512(isa) ? 32 : 16;  // Q2_K: dx and sums per 16
    l.ldb = avx && dtype != DType::kQ5_1 ? cols / 256 * per_unit : RoundUp(cols / MinBlock(dtype), 16);
  }
  auto take = [&](size_t bytes) {
    const size_t at = l.bytes;
    l.bytes += (bytes + 63) / 64 * 64;
    return at;
  };
  l.q = take(static_cast<size_t>(m * l.ldq));
  l.scale = take(static_cast<size_t>(m * l.lds) * sizeof(float));
  if (avx && ZeroPoint(isa, dtype) != 0) l.bias = take(static_cast<size_t>(m * l.lds) * sizeof(int32_t));
  l.block_sum = take(static_cast<size_t>(m * l.ldb) * sizeof(float));
  return l;
}

// x's codes and scales, portable layout; block_sum (where not null) per `sum_block`
// values (32, or 16 for Q2_K). The rounding is round-half-to-even by the
// 1.5·2^23 trick (exact for |v| < 2^22; GCC vectorises it at the x86-64 baseline),
// the same as the AVX-512 path's vcvtps2dq, so both get the same codes.
void QuantizeXRowPortable(const float* x, int64_t cols, int64_t sum_block, int8_t* q, float* scale, float* block_sum) {
  constexpr float kRound = 12582912.0f;  // 1.5 · 2^23
  for (int64_t b = 0; b < cols / kXBlock; ++b) {
    const float* xb = x + b * kXBlock;
    float amax = 0;
    for (int k = 0; k < kXBlock; ++k) amax = std::max(amax, std::fabs(xb[k]));
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    int sum[2] = {0, 0};  // per 16 values
    for (int k = 0; k < kXBlock; ++k) {
      const int v = static_cast<int>((xb[k] * id + kRound) - kRound);
      q[b * kXBlock + k] = static_cast<int8_t>(v);
      sum[k / 16] += v;
    }
    scale[b] = amax / 127.0f;
    if (block_sum == nullptr) continue;
    if (sum_block == 16) {
      block_sum[2 * b] = scale[b] * static_cast<float>(sum[0]);
      block_sum[2 * b + 1] = scale[b] * static_cast<float>(sum[1]);
    } else {
      block_sum[b] = scale[b] * static_cast<float>(sum[0] + sum[1]);
    }
  }
}

// ---- portable integer GEMV ------------------------------------------------------------

// One weight row unpacked: integer codes with the zero point taken off (`v`, [cols]),
// one f32 scale per sub-block of `sub` values (16 for Q6_K / Q3_K / Q2_K, else 32), and
// for Q4_K / Q5_K -dmin·m per 32 values (Q5_1: m; Q2_K: -dmin·m per 16).
struct UnpackedRow {
  std::vector<int8_t> v;
  std::vector<float> scale;
  std::vector<float> min;
  int sub = 32;
};

void UnpackRow(DType dtype, const uint8_t* row, int64_t cols, UnpackedRow& u) {
  const int64_t per_block = DTypeBlockElements(dtype);
  const size_t block_bytes = DTypeBlockBytes(dtype);
  u.sub = HasSixteenValueScales(dtype) ? 16 : 32;
  int8_t* v = Grow(u.v, cols);
  float* scale = Grow(u.scale, cols / u.sub);
  float* min = HasMins(dtype) ? Grow(u.min, cols / MinBlock(dtype)) : nullptr;
  for (int64_t blk = 0; blk < cols / per_block; ++blk) {
    const uint8_t* b = row + blk * block_bytes;
    int8_t* vb = v + blk * per_block;
    switch (dtype) {
      case DType::kQ8_0: {
        scale[blk] = LoadF16(b);
        std::memcpy(vb, b + kQ8_0Qs, 32);
        break;
      }
      case DType::kQ4_0: {
        scale[blk] = LoadF16(b);
        for (int j = 0; j < 16; ++j) {
          vb[j] = static_cast<int8_t>((b[kQ4_0Qs + j] & 0xF) - 8);
          vb[j + 16] = static_cast<int8_t>((b[kQ4_0Qs + j] >> 4) - 8);
        }
        break;
      }
      case DType::kQ5_0:
      case DType::kQ5_1: {
        const bool one = dtype == DType::kQ5_1;
        scale[blk] = LoadF16(b);
        if (one) min[blk] = LoadF16(b + kQ5_1M);
        const uint8_t* qh = b + (one ? kQ5_1Qh : kQ5_0Qh);
        const uint8_t* qs = b + (one ? kQ5_1Qs : kQ5_0Qs);
        for (int j = 0; j < 32; ++j) vb[j] = static_cast<int8_t>(Q5Code(qh, qs, j) - (one ? 0 : 16));
        break;
      }
      case DType::kQ4_K:
      case DType::kQ5_K: {
        const bool five = dtype == DType::kQ5_K;
        const float d = LoadF16(b), dmin = LoadF16(b + kQ4KDmin);
        const uint8_t* qs = b + (five ? kQ5KQs : kQ4KQs);
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, m;
          ScaleMinK4(j, b + kQ4KScales, &sc, &m);
          scale[blk * 8 + j] = d * sc;
          min[blk * 8 + j] = -(dmin * m);
        }
        for (int c = 0; c < 4; ++c) {
          for (int l = 0; l < 32; ++l) {
            int lo = qs[32 * c + l] & 0xF, hi = qs[32 * c + l] >> 4;
            if (five) {
              lo |= ((b[kQ5KQh + l] >> (2 * c)) & 1) << 4;
              hi |= ((b[kQ5KQh + l] >> (2 * c + 1)) & 1) << 4;
            }
            vb[64 * c + l] = static_cast<int8_t>(lo);
            vb[64 * c + 32 + l] = static_cast<int8_t>(hi);
          }
        }
        break;
      }
      case DType::kQ6_K: {
        const float d = LoadF16(b + kQ6KD);
        for (int s = 0; s < 16; ++s) scale[blk * 16 + s] = d * static_cast<int8_t>(b[kQ6KScales + s]);
        for (int h = 0; h < 2; ++h) {
          const uint8_t* ql = b + 64 * h;
          const uint8_t* qh = b + kQ6KQh + 32 * h;
          int8_t* o = vb + 128 * h;
          for (int l = 0; l < 32; ++l) {
            o[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            o[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            o[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            o[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
          }
        }
        break;
      }
      case DType::kQ3_K: {
        const float d = LoadF16(b + kQ3KD);
        for (int s = 0; s < 16; ++s) scale[blk * 16 + s] = d * static_cast<float>(Q3KScale(s, b + kQ3KScales) - 32);
        for (int i = 0; i < 256; ++i) vb[i] = static_cast<int8_t>(Q3KCode(b, i) - 4);
        break;
      }
      case DType::kQ2_K: {
        const float d = LoadF16(b + kQ2KD), dmin = LoadF16(b + kQ2KDmin);
        for (int s = 0; s < 16; ++s) {
          scale[blk * 16 + s] = d * static_cast<float>(b[s] & 0xF);
          min[blk * 16 + s] = -(dmin * static_cast<float>(b[s] >> 4));
        }
        for (int i = 0; i < 256; ++i) vb[i] = static_cast<int8_t>(K2Bits(b + kQ2KQs, i));
        break;
      }
      case DType::kIQ4_NL: {
        scale[blk] = LoadF16(b);
        for (int j = 0; j < 32; ++j) vb[j] = kIq4Levels[IQ4Index(b + kIQ4NLQs, j)];
        break;
      }
      case DType::kIQ4_XS: {
        const float d = LoadF16(b);
        for (int s = 0; s < 8; ++s) {
          scale[blk * 8 + s] = d * static_cast<float>(IQ4XSScale(b, s) - 32);
          for (int j = 0; j < 32; ++j) vb[32 * s + j] = kIq4Levels[IQ4Index(b + kIQ4XSQs + 16 * s, j)];
        }
        break;
      }
      case DType::kIQ2_XXS:
      case DType::kIQ3_XXS:
      case DType::kIQ1_S: IqCodes(dtype, b, vb, scale + blk * 8); break;
      default: break;
    }
  }
}

template <int kSub> inline int32_t IntDot(const int8_t* a, const int8_t* b) {
  int32_t s = 0;
  for (int k = 0; k < kSub; ++k) s += static_cast<int32_t>(a[k]) * static_cast<int32_t>(b[k]);
  return s;
}

// x row i · the unpacked row: per sub-block the exact integer sum, scaled in f32.
template <int kSub> float RowDot(const UnpackedRow& u, const PreparedX& x, int64_t i) {
  const int8_t* q = x.q + i * x.ldq;
  const float* dx = x.scale + i * x.lds;
  float acc = 0;
  for (int64_t s = 0; s < x.cols / kSub; ++s) {
    const int32_t isum = IntDot<kSub>(u.v.data() + s * kSub, q + s * kSub);
    acc += static_cast<float>(isum) * (u.scale[s] * dx[s * kSub / kXBlock]);
  }
  if (x.block_sum != nullptr) {
    const float* bs = x.block_sum + i * x.ldb;
    for (int64_t b = 0; b < x.cols / MinBlock(x.dtype); ++b) acc += u.min[b] * bs[b];
  }
  return acc;
}

// Rows per parallel work item, as the other GEMVs split them (SplitRows groups).
constexpr int64_t kRowGroup = 4;

template <typename T> T* Scratch(AlignedBuffer& buffer, int64_t count) {
  const size_t bytes = static_cast<size_t>(count) * sizeof(T);
  return GrowAligned<T>(buffer, bytes);
}

const uint8_t* RowData(const WeightView& w, int64_t r) {
  return static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * DTypeRowBytes(w.dtype, w.ld);
}

float DotF32(const float* x, const float* w, int64_t k) {
  constexpr int kLanes = 8;  // independent partial sums: GCC vectorises without -ffast-math
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j] * w[i + j];
  }
  for (; i < k; ++i) acc[0] += x[i] * w[i];
  float s = 0;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

}  // namespace

BlockGemvIsa BestBlockGemvIsa() {
  const CpuFeatures& cpu = GetCpuFeatures();
  if (cpu.avx512f) return cpu.avx512_vnni ? BlockGemvIsa::kAvx512Vnni : BlockGemvIsa::kAvx512;
  return cpu.avx2 ? BlockGemvIsa::kAvx2 : BlockGemvIsa::kPortable;
}

BlockGemvIsa BlockGemvIsaFor(BlockGemvIsa isa, DType dtype) {
  return IsAvx512(isa) && dtype == DType::kQ5_1 ? BlockGemvIsa::kAvx2 : isa;
}

GemvBlockRowsFn GemvBlockRowsFor(BlockGemvIsa isa) {
  switch (isa) {
    case BlockGemvIsa::kAvx512Vnni:
      return GetCpuFeatures().gfni ? GemvBlockRowsAvx512VnniGfni : GemvBlockRowsAvx512Vnni;
    case BlockGemvIsa::kAvx512: return GemvBlockRowsAvx512;
    case BlockGemvIsa::kAvx2: return GemvBlockRowsAvx2;
    default: return GemvBlockRowsPortable;
  }
}

size_t PreparedXBytes(BlockGemvIsa isa, DType dtype, int64_t m, int64_t cols) {
  return Layout(BlockGemvIsaFor(isa, dtype), dtype, m, cols).bytes;
}

PreparedX PlaceX(BlockGemvIsa isa, DType dtype, int64_t m, int64_t cols, std::byte* storage) {
  LATTE_DCHECK(cols % kXBlock == 0, "PlaceX: ", cols, " columns");
  isa = BlockGemvIsaFor(isa, dtype);
  const XLayout l = Layout(isa, dtype, m, cols);
  PreparedX p;
  p.isa = isa;
  p.dtype = dtype;
  p.m = m;
  p.cols = cols;
  p.q = reinterpret_cast<int8_t*>(storage + l.q);
  p.ldq = l.ldq;
  p.scale = reinterpret_cast<float*>(storage + l.scale);
  p.lds = l.lds;
  if (l.bias != 0 && isa == BlockGemvIsa::kAvx2) {
    p.pair_bias = reinterpret_cast<int16_t*>(storage + l.bias);  // 2 int16 per int32 lane
  } else if (l.bias != 0) {
    p.bias = reinterpret_cast<int32_t*>(storage + l.bias);
  }
  p.block_sum = HasBlockSums(isa, dtype) ? reinterpret_cast<float*>(storage + l.block_sum) : nullptr;
  p.ldb = l.ldb;
  return p;
}

void FillX(const PreparedX& p, const float* x, int64_t ldx, int64_t i0, int64_t i1) {
  if (i1 <= i0) return;
  // The same arrays from row i0 on, as a PreparedX of i1 - i0 rows.
  PreparedX rows = p;
  rows.m = i1 - i0;
  rows.q += i0 * p.ldq;
  rows.scale += i0 * p.lds;
  if (rows.bias != nullptr) rows.bias += i0 * p.lds;
  if (rows.pair_bias != nullptr) rows.pair_bias += i0 * 2 * p.lds;
  if (rows.block_sum != nullptr) rows.block_sum += i0 * p.ldb;
  x += i0 * ldx;
  if (p.isa == BlockGemvIsa::kAvx2) {
    PrepareXAvx2(x, ldx, rows);
    return;
  }
  if (p.isa != BlockGemvIsa::kPortable) {
    PrepareXAvx512(x, ldx, rows);
    return;
  }
  for (int64_t i = 0; i < rows.m; ++i) {
    QuantizeXRowPortable(x + i * ldx, p.cols, MinBlock(p.dtype), rows.q + i * p.ldq, rows.scale + i * p.lds,
                         rows.block_sum != nullptr ? rows.block_sum + i * p.ldb : nullptr);
  }
}

PreparedX PrepareX(BlockGemvIsa isa, DType dtype, const float* x, int64_t m, int64_t ldx, int64_t cols,
                   std::byte* storage) {
  const PreparedX p = PlaceX(isa, dtype, m, cols, storage);
  FillX(p, x, ldx, 0, m);
  return p;
}

int BlockZeroPoint(BlockGemvIsa isa, DType dtype) { return ZeroPoint(isa, dtype); }

void GemvBlockRowsPortable(const PreparedX& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  thread_local UnpackedRow u;  // grown once per thread: a decode step allocates nothing
  for (int64_t n = n0; n < n1; ++n) {
    UnpackRow(w.dtype, RowData(w, n), w.cols, u);
    for (int64_t i = 0; i < x.m; ++i) {
      y[i * ldy + n] = u.sub == 16 ? RowDot<16>(u, x, i) : RowDot<32>(u, x, i);
    }
  }
}

void GemvBlock(const MatmulProblem& p, BlockGemvIsa isa, bool threaded) {
  const WeightView& w = p.w;
  if (p.m <= 0 || w.rows <= 0) return;
  thread_local AlignedBuffer storage;  // grown once per thread
  std::byte* bytes = Scratch<std::byte>(storage, static_cast<int64_t>(PreparedXBytes(isa, w.dtype, p.m, w.cols)));
  const PreparedX x = PrepareX(isa, w.dtype, p.x, p.m, p.ldx, w.cols, bytes);
  const GemvBlockRowsFn rows = GemvBlockRowsFor(x.isa);
  const bool parallel = threaded && w.rows >= 2 * kRowGroup && WorthParallel(w.rows * w.cols);
  SplitRowsOverThreads(parallel, w.rows, kRowGroup, [&](RowRange r) { rows(x, w, r.begin, r.end, p.y, p.ldy); });
}

void DequantizeRowsToF32(const WeightView& w, int64_t first, int64_t count, float* out) {
  const int64_t k = w.cols;
  const bool avx512 = GetCpuFeatures().avx512f, avx2 = GetCpuFeatures().avx2;
#pragma omp parallel for schedule(static) if (WorthParallel(count * k) && !omp_in_parallel())
  for (int64_t i = 0; i < count; ++i) {
    if (avx512) {
      DequantizeRowAvx512(w.dtype, RowData(w, first + i), k, out + i * k);
    } else if (avx2) {
      DequantizeRowAvx2(w.dtype, RowData(w, first + i), k, out + i * k);
    } else {
      DequantizeToF32(w.dtype, RowData(w, first + i), k, out + i * k);
    }
  }
}

void DequantizeRowsToBf16(const WeightView& w, int64_t first, int64_t count, bf16* out) {
  const int64_t k = w.cols;
  const CpuFeatures& cpu = GetCpuFeatures();
#pragma omp parallel for schedule(static) if (WorthParallel(count * k) && !omp_in_parallel())
  for (int64_t i = 0; i < count; ++i) {
    if (cpu.avx512f) {
      DequantizeRowAvx512(w.dtype, RowData(w, first + i), k, out + i * k, cpu.avx512_bf16);
    } else {
      DequantizeToBf16(w.dtype, RowData(w, first + i), k, out + i * k);
    }
  }
}

bool MatmulBlockOneDnn(const MatmulProblem& p, bool bf16_gemm) {
  const WeightView& w = p.w;
  if (bf16_gemm && w.dtype != DType::kF16) {
    return MatmulConvertedBf16(
        p, [&](int64_t first, int64_t count, bf16* out) { DequantizeRowsToBf16(w, first, count, out); });
  }
  return MatmulConvertedF32(
      p.x, p.ldx, p, [&](int64_t first, int64_t count, float* out) { DequantizeRowsToF32(w, first, count, out); });
}

void MatmulF16Portable(const MatmulProblem& p, bool threaded) {
  const WeightView& w = p.w;
  if (p.m <= 0 || w.rows <= 0) return;
  constexpr int64_t kBlock = 16;  // output rows per parallel work item
  const int64_t blocks = (w.rows + kBlock - 1) / kBlock;
  const bool parallel = threaded && blocks > 1 && WorthParallel(p.m * w.rows * w.cols);
#pragma omp parallel if (parallel)
  {
    thread_local std::vector<float> row;  // [w.cols], grown once per thread
    float* r = Grow(row, w.cols);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t n = b * kBlock; n < std::min(w.rows, (b + 1) * kBlock); ++n) {
        F16ToF32Row(reinterpret_cast<const uint16_t*>(RowData(w, n)), w.cols, r);
        for (int64_t i = 0; i < p.m; ++i) p.y[i * p.ldy + n] = DotF32(p.x + i * p.ldx, r, w.cols);
      }
    }
  }
}

}  // namespace matmul_internal
}  // namespace latte
