// AVX-512BW integer GEMV for GGUF block formats (vpmaddubsw + vpmaddwd; the kernels are in
// gemv_block_avx512_inl.h), the AVX-512 quantization of x into PreparedX's layout, and the
// AVX-512 dequantization of whole rows (the large-m path's chunks). The VNNI build of the
// same kernels is gemv_block_avx512_vnni.cc.
//
// Compiled with -mavx512f/bw/dq/vl/bf16 (see CMakeLists.txt); reached only through
// matmul.cc's dispatch after GetCpuFeatures().avx512f.
// GCC 12's AVX-512 headers build some intrinsics (reduce_add, maskz loads) from
// _mm512_undefined_*, which trips -Wuninitialized under -Werror: a false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/avx512_inl.h"
#include "kernels/block_quant.h"
#include "kernels/gemv_block_avx512_inl.h"
#include "kernels/matmul_internal.h"

namespace latte::matmul_internal {
namespace {

// ---- dequantization: the values of block_quant.cc, 16 at a time ------------------------
//
// The same f32 operations in the same order (d·sc first, then ·q, then - dmin·m), each
// rounded once: the _round forms are builtins GCC never fuses into an FMA (plain vector
// products and sums it may contract under -ffp-contract=fast), so the values equal the
// portable ones bit for bit.
constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
inline __m512 Mul(__m512 a, __m512 b) { return _mm512_mul_round_ps(a, b, kNearest); }
inline __m512 Add(__m512 a, __m512 b) { return _mm512_add_round_ps(a, b, kNearest); }

template <typename Out> inline void Store16(Out* out, __m512 v, bool has_bf16) {
  if constexpr (std::is_same_v<Out, float>) {
    _mm512_storeu_ps(out, v);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), RoundToBf16x16(v, has_bf16));
  }
}

// Codes G·16 .. G·16 + 16 of 64 unsigned codes as f32, minus `offset`.
template <int G> inline __m512 Codes16(__m512i w, int offset) {
  const __m512i c = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(w, G));
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(c, _mm512_set1_epi32(offset)));
}

inline __m512 Lane(__m512 v, int lane) { return _mm512_permutexvar_ps(_mm512_set1_epi32(lane), v); }

template <typename Out> void DequantQ8_0Row(const uint8_t* row, int64_t blocks, Out* out, bool has_bf16) {
  for (int64_t k = 0; k < blocks; ++k) {
    const uint8_t* b = row + k * 34;
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(Load16(b)));
    for (int g = 0; g < 2; ++g) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * g));
      Store16(out + 32 * k + 16 * g, Mul(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d), has_bf16);
    }
  }
}

template <typename Out> void DequantQ4_0Row(const uint8_t* row, int64_t blocks, Out* out, bool has_bf16) {
  const __m128i low = _mm_set1_epi8(0x0F);
  for (int64_t k = 0; k < blocks; ++k) {
    const uint8_t* b = row + k * 18;
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(Load16(b)));
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m128i nibbles[2] = {_mm_and_si128(qs, low), _mm_and_si128(_mm_srli_epi16(qs, 4), low)};
    for (int g = 0; g < 2; ++g) {
      const __m512i q = _mm512_sub_epi32(_mm512_cvtepu8_epi32(nibbles[g]), _mm512_set1_epi32(8));
      Store16(out + 32 * k + 16 * g, Mul(_mm512_cvtepi32_ps(q), d), has_bf16);
    }
  }
}

// Q4_K / Q5_K: the GEMV's steps give sub-blocks (4h + i, 4h + 2 + i) per step 2h + i.
template <bool kFive, typename Out> void DequantK4K5Row(const uint8_t* row, int64_t blocks, Out* out, bool has_bf16) {
  using F = FormatK4K5<kFive>;
  for (int64_t k = 0; k < blocks; ++k) {
    const typename F::Unit u = F::template Load<false, false>(row + k * F::kUnitBytes);
    Out* o = out + 256 * k;
    ForSteps(
        [&]<int S>() {
          __m512i w;
          __m512 unused;
          F::template Step<S>(u, w, unused);
          constexpr int a = 4 * (S / 2) + S % 2, b = a + 2;
          const __m512 da = Lane(u.sm, a), ma = Lane(u.sm, 8 + a), db = Lane(u.sm, b), mb = Lane(u.sm, 8 + b);
          Store16(o + 32 * a, Add(Mul(da, Codes16<0>(w, 0)), ma), has_bf16);
          Store16(o + 32 * a + 16, Add(Mul(da, Codes16<1>(w, 0)), ma), has_bf16);
          Store16(o + 32 * b, Add(Mul(db, Codes16<2>(w, 0)), mb), has_bf16);
          Store16(o + 32 * b + 16, Add(Mul(db, Codes16<3>(w, 0)), mb), has_bf16);
        },
        std::make_integer_sequence<int, 4>{});
  }
}

// The formats with a scale per 16 values, in the GEMV's steps: Q6_K (x = (d·sc)·(q - 32)),
// Q3_K ((d·(sc - 32))·(q - 4)) and Q2_K ((d·sc)·q - dmin·m).
template <class F, int kZeroPoint, typename Out>
void DequantSixteenValueRow(const uint8_t* row, int64_t blocks, Out* out, bool has_bf16) {
  for (int64_t k = 0; k < blocks; ++k) {
    const typename F::Unit u = F::template Load<false, false>(row + k * F::kUnitBytes);
    Out* o = out + 256 * k;
    ForSteps(
        [&]<int S>() {
          __m512i w;
          __m512 unused;
          F::template Step<S>(u, w, unused);
          auto value = [&]<int G>() {
            const __m512 v = Mul(Lane(u.s, 4 * S + G), Codes16<G>(w, kZeroPoint));
            if constexpr (kMin16<F>) return Add(v, Lane(F::Mins(u), 4 * S + G));  // -(dmin·m): the difference
            return v;
          };
          Store16(o + 64 * S, value.template operator()<0>(), has_bf16);
          Store16(o + 64 * S + 16, value.template operator()<1>(), has_bf16);
          Store16(o + 64 * S + 32, value.template operator()<2>(), has_bf16);
          Store16(o + 64 * S + 48, value.template operator()<3>(), has_bf16);
        },
        std::make_integer_sequence<int, 4>{});
  }
}

// 32 values d·level from 16 bytes of IQ4_NL indices (an IQ4_NL block's qs, an IQ4_XS
// sub-block's).
template <typename Out> void DequantIq4Values(const uint8_t* qs, float d, Out* out, bool has_bf16) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Levels));
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i index[2] = {_mm_and_si128(q, _mm_set1_epi8(0x0F)),
                            _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0F))};
  for (int g = 0; g < 2; ++g) {
    const __m512 level = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(table, index[g])));
    Store16(out + 16 * g, Mul(_mm512_set1_ps(d), level), has_bf16);
  }
}

template <typename Out> void DequantIQ4_NLRow(const uint8_t* row, int64_t blocks, Out* out, bool has_bf16) {
  for (int64_t k = 0; k < blocks; ++k) {
    const uint8_t* b = row + k * 18;
    DequantIq4Values(b + block_layout::kIQ4NLQs, _cvtsh_ss(Load16(b)), out + 32 * k, has_bf16);
  }
}

// IQ4_XS: (d·(ls - 32))·level, the sub-block's scale one f32 product as ggml's.
template <typename Out> void DequantIQ4_XSRow(const uint8_t* row, int64_t blocks, Out* out, bool has_bf16) {
  for (int64_t k = 0; k < blocks; ++k) {
    const uint8_t* b = row + k * 136;
    alignas(32) float scales[8];
    _mm256_store_ps(scales, IQ4XSScales(b));
    for (int s = 0; s < 8; ++s) {
      DequantIq4Values(b + block_layout::kIQ4XSQs + 16 * s, scales[s], out + 256 * k + 32 * s, has_bf16);
    }
  }
}

template <typename Out> void DequantF16Row(const uint8_t* row, int64_t n, Out* out, bool has_bf16) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(row);
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 mask = TailMask16(std::min<int64_t>(16, n - c));
    const __m512 v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, h + c));
    if constexpr (std::is_same_v<Out, float>) {
      _mm512_mask_storeu_ps(out + c, mask, v);
    } else {
      _mm256_mask_storeu_epi16(out + c, mask, RoundToBf16x16(v, has_bf16));
    }
  }
}

template <typename Out> void DequantRow(DType dtype, const uint8_t* row, int64_t n, Out* out, bool has_bf16) {
  switch (dtype) {
    case DType::kQ8_0: DequantQ8_0Row(row, n / 32, out, has_bf16); break;
    case DType::kQ4_0: DequantQ4_0Row(row, n / 32, out, has_bf16); break;
    case DType::kQ4_K: DequantK4K5Row<false>(row, n / 256, out, has_bf16); break;
    case DType::kQ5_K: DequantK4K5Row<true>(row, n / 256, out, has_bf16); break;
    case DType::kQ6_K: DequantSixteenValueRow<FormatQ6_K<>, 32>(row, n / 256, out, has_bf16); break;
    case DType::kF16: DequantF16Row(row, n, out, has_bf16); break;
    case DType::kQ3_K: DequantSixteenValueRow<FormatK16<false>, 4>(row, n / 256, out, has_bf16); break;
    case DType::kQ2_K: DequantSixteenValueRow<FormatK16<true>, 0>(row, n / 256, out, has_bf16); break;
    case DType::kIQ4_NL: DequantIQ4_NLRow(row, n / 32, out, has_bf16); break;
    case DType::kIQ4_XS: DequantIQ4_XSRow(row, n / 256, out, has_bf16); break;
    case DType::kQ5_0:
    case DType::kQ5_1:  // the portable loops: a few tensors of a file (BlockGemvIsaFor)
    case DType::kIQ2_XXS:
    case DType::kIQ3_XXS:
    case DType::kIQ1_S:
      if constexpr (std::is_same_v<Out, float>) {
        DequantizeToF32(dtype, row, n, out);
      } else {
        DequantizeToBf16(dtype, row, n, out);
      }
      break;
    default: break;
  }
}

}  // namespace

void DequantizeRowAvx512(DType dtype, const void* row, int64_t n, float* out) {
  DequantRow(dtype, static_cast<const uint8_t*>(row), n, out, false);
}

void DequantizeRowAvx512(DType dtype, const void* row, int64_t n, bf16* out, bool has_bf16) {
  DequantRow(dtype, static_cast<const uint8_t*>(row), n, out, has_bf16);
}

// The codes and scales as the portable quantizer computes them (QuantizeXRowPortable in
// matmul_block.cc: amax, id = 127 / amax, round half to even, dx = amax / 127), so the
// integer sums match it; laid out for the kernels (PreparedX).
void PrepareXAvx512(const float* x, int64_t ldx, const PreparedX& p) {
  const bool permuted = p.dtype == DType::kQ4_K || p.dtype == DType::kQ5_K;
  const int zero_point = BlockZeroPoint(p.isa, p.dtype);
  const int64_t blocks = p.cols / 32;
  const int64_t slots = p.ldq / 32;  // zero-padded to whole 64-value steps
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < p.m; ++i) {
    const float* xi = x + i * ldx;
    int8_t* q = p.q + i * p.ldq;
    float* scale = p.scale + i * p.lds;
    int32_t* bias = p.bias != nullptr ? p.bias + i * p.lds : nullptr;
    float* sums = p.block_sum != nullptr ? p.block_sum + i * p.ldb : nullptr;
    for (int64_t b = 0; b < blocks; ++b) {
      const __m512 v0 = _mm512_loadu_ps(xi + 32 * b);
      const __m512 v1 = _mm512_loadu_ps(xi + 32 * b + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      const float id = amax > 0 ? 127.0f / amax : 0.0f;
      const float dx = amax / 127.0f;
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
      // Q4_K / Q5_K: block j of each 256 goes to slot 0, 2, 1, 3, 4, 6, 5, 7 (the same map).
      const int64_t j = b % 8;
      const int64_t slot = permuted ? b - j + (j == 1 || j == 5 ? j + 1 : j == 2 || j == 6 ? j - 1 : j) : b;
      const __m256i codes =
          _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(q0)), _mm512_cvtepi32_epi8(q1), 1);
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32 * slot), codes);
      _mm256_store_ps(scale + 8 * slot, _mm256_set1_ps(dx));
      if (bias != nullptr) {
        const __m256i fours = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, codes), ones16);
        _mm256_store_si256(reinterpret_cast<__m256i*>(bias + 8 * slot),
                           _mm256_mullo_epi32(fours, _mm256_set1_epi32(-zero_point)));
      }
      if (sums != nullptr && (p.dtype == DType::kQ6_K || p.dtype == DType::kQ3_K)) {  // dx per 16-value sub-block
        sums[2 * b] = sums[2 * b + 1] = dx;
      } else if (sums != nullptr && p.dtype == DType::kQ2_K) {  // per 256 values: dx, then dx · sum q, per 16
        float* group = sums + 32 * (b / 8);
        group[2 * j] = group[2 * j + 1] = dx;
        group[16 + 2 * j] = dx * static_cast<float>(_mm512_reduce_add_epi32(q0));
        group[16 + 2 * j + 1] = dx * static_cast<float>(_mm512_reduce_add_epi32(q1));
      } else if (sums != nullptr) {
        const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        float* group = sums + 16 * (b / 8);
        group[j] = dx;
        group[8 + j] = dx * static_cast<float>(sum);
      }
    }
    for (int64_t s = blocks; s < slots; ++s) {  // padding: zero codes, scales and bias
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32 * s), _mm256_setzero_si256());
      _mm256_store_ps(scale + 8 * s, _mm256_setzero_ps());
      if (bias != nullptr) _mm256_store_si256(reinterpret_cast<__m256i*>(bias + 8 * s), _mm256_setzero_si256());
    }
  }
}

void GemvBlockRowsAvx512(const PreparedX& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  BlockRows</*kVnni=*/false>(x, w, n0, n1, y, ldy);
}

}  // namespace latte::matmul_internal
