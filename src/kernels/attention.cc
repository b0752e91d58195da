#include "kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/check.h"
#include "base/cpu_features.h"
#include "kernels/attention_internal.h"
#include "kernels/bf16_round.h"
#include "kernels/prefill_attention.h"

namespace latte {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline float Dot(const float* a, const float* b, int64_t n) {
  float acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

inline void Axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

inline void Scale(float alpha, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

}  // namespace

void attention_internal::CheckParams(const CausalAttentionParams& p, const char* caller) {
  LATTE_CHECK(p.num_queries >= 0 && p.num_keys >= 0 && p.heads >= 0, caller, ": ", p.num_queries, " queries, ",
              p.num_keys, " keys, ", p.heads, " heads");
  LATTE_CHECK(p.key_dim >= 1 && p.value_dim >= 1, caller, ": key_dim ", p.key_dim, ", value_dim ", p.value_dim);
  LATTE_CHECK(std::isfinite(p.scale), caller, ": scale ", p.scale);
  if (p.num_queries == 0 || p.heads == 0) return;
  LATTE_CHECK(p.q != nullptr && p.out != nullptr, caller, ": null q or out");
  LATTE_CHECK(p.num_keys == 0 || (p.k != nullptr && p.v != nullptr), caller, ": null k or v");
}

void attention_internal::CheckParams(const SharedKeyAttentionParams& p, const char* caller) {
  LATTE_CHECK(p.num_rows >= 0 && p.heads >= 0, caller, ": ", p.num_rows, " rows, ", p.heads, " heads");
  LATTE_CHECK(p.value_dim >= 1 && p.row_dim >= p.value_dim, caller, ": row_dim ", p.row_dim, ", value_dim ",
              p.value_dim, " (the value is a prefix of the row)");
  const DType dtype = p.rows.dtype;
  LATTE_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF8E4M3, caller, ": rows dtype ",
              DTypeName(dtype), " (F32, BF16 or F8_E4M3)");
  LATTE_CHECK(p.rows.row_dim == p.row_dim, caller, ": rows of ", p.rows.row_dim, " values, row_dim ", p.row_dim);
  LATTE_CHECK(std::isfinite(p.scale), caller, ": scale ", p.scale);
  if (p.heads == 0) return;
  LATTE_CHECK(p.q != nullptr && p.out != nullptr, caller, ": null q or out");
  if (p.num_rows == 0) return;
  LATTE_CHECK(p.rows.data != nullptr && p.rows.block_table != nullptr && p.rows.block_rows >= 1, caller,
              ": rows without data, block table or block size");
  LATTE_CHECK(reinterpret_cast<uintptr_t>(p.rows.data) % DTypeSize(dtype) == 0, caller, ": rows not aligned to their ",
              DTypeSize(dtype), "-byte elements");
  LATTE_CHECK(dtype != DType::kF8E4M3 || p.rows.row_scales != nullptr, caller, ": fp8 rows without scales");
}

void CausalAttention(const CausalAttentionParams& p) {
  attention_internal::CheckParams(p, "CausalAttention");
  if (p.num_queries >= kPrefillAttentionMinQueries) {
    PrefillAttention(p);
    return;
  }
  const int64_t key_stride = p.heads * p.key_dim;
  const int64_t value_stride = p.heads * p.value_dim;
#pragma omp parallel
  {
    // scores: [visible keys] of one (query, head); kept per thread so a decode step
    // (the naive mode's one query) does not allocate. Every thread sizes it for the
    // call's longest row before the dynamic loop deals out the rows: which thread gets
    // the longest varies from run to run, and a thread that first meets it later would
    // allocate then.
    thread_local std::vector<float> scores;
    scores.resize(std::max<int64_t>(0, std::min(p.first_position + p.num_queries, p.num_keys)));
#pragma omp for schedule(dynamic, 1) collapse(2)
    for (int64_t i = 0; i < p.num_queries; ++i) {
      for (int64_t h = 0; h < p.heads; ++h) {
        const int64_t visible = std::min(p.first_position + i + 1, p.num_keys);
        float* out = p.out + (i * p.heads + h) * p.value_dim;
        if (visible <= 0) {  // a key block entirely after this query: an empty partial
          std::fill(out, out + p.value_dim, 0.0f);
          if (p.lse) p.lse[i * p.heads + h] = kNegInf;
          continue;
        }
        const float* q = p.q + (i * p.heads + h) * p.key_dim;
        float max_score = kNegInf;
        for (int64_t t = 0; t < visible; ++t) {
          scores[t] = p.scale * Dot(q, p.k + t * key_stride + h * p.key_dim, p.key_dim);
          max_score = std::max(max_score, scores[t]);
        }
        std::fill(out, out + p.value_dim, 0.0f);
        double sum = 0;
        for (int64_t t = 0; t < visible; ++t) {
          const float w = std::exp(scores[t] - max_score);
          sum += w;
          Axpy(w, p.v + t * value_stride + h * p.value_dim, out, p.value_dim);
        }
        Scale(static_cast<float>(1.0 / sum), out, p.value_dim);
        if (p.lse) p.lse[i * p.heads + h] = max_score + static_cast<float>(std::log(sum));
      }
    }
  }
}

namespace attention_internal {

// Portable block kernels: plain loops over the contiguous dimension with independent
// partial sums, which GCC vectorises at the x86-64 baseline.

void SharedKeyScoresPortable(const float* q, int64_t heads, const float* rows, int64_t n, int64_t row_dim, float scale,
                             float* scores, int64_t ld) {
  constexpr int64_t kW = 8;  // partial sums per row
  const int64_t full = row_dim / kW * kW;
  for (int64_t h = 0; h < heads; ++h) {
    const float* qh = q + h * row_dim;
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) {  // 4 rows per pass over q_h
      const float* r0 = rows + t * row_dim;
      const float* r1 = r0 + row_dim;
      const float* r2 = r1 + row_dim;
      const float* r3 = r2 + row_dim;
      float part[4][kW] = {};
      for (int64_t k = 0; k < full; k += kW) {
        for (int64_t j = 0; j < kW; ++j) {
          const float x = qh[k + j];
          part[0][j] += x * r0[k + j];
          part[1][j] += x * r1[k + j];
          part[2][j] += x * r2[k + j];
          part[3][j] += x * r3[k + j];
        }
      }
      const float* rr[4] = {r0, r1, r2, r3};
      for (int r = 0; r < 4; ++r) {
        float acc = 0;
        for (int64_t j = 0; j < kW; ++j) acc += part[r][j];
        for (int64_t k = full; k < row_dim; ++k) acc += qh[k] * rr[r][k];
        scores[h * ld + t + r] = scale * acc;
      }
    }
    for (; t < n; ++t) {
      const float* row = rows + t * row_dim;
      float part[kW] = {};
      for (int64_t k = 0; k < full; k += kW) {
        for (int64_t j = 0; j < kW; ++j) part[j] += qh[k + j] * row[k + j];
      }
      float acc = 0;
      for (int64_t j = 0; j < kW; ++j) acc += part[j];
      for (int64_t k = full; k < row_dim; ++k) acc += qh[k] * row[k];
      scores[h * ld + t] = scale * acc;
    }
  }
}

void SharedKeySoftmaxPortable(float* scores, int64_t ld, int64_t heads, int64_t n, float* max, float* sum,
                              float* rescale) {
  for (int64_t h = 0; h < heads; ++h) {
    float* sc = scores + h * ld;
    float block_max = kNegInf;
    for (int64_t t = 0; t < n; ++t) block_max = std::max(block_max, sc[t]);
    const float new_max = std::max(max[h], block_max);
    const float r = std::exp(max[h] - new_max);  // 0 on the first block
    float block_sum = 0;
    for (int64_t t = 0; t < n; ++t) {
      sc[t] = std::exp(sc[t] - new_max);
      block_sum += sc[t];
    }
    sum[h] = sum[h] * r + block_sum;
    max[h] = new_max;
    rescale[h] = r;
  }
}

namespace {

// One head's columns [c, c + width) of acc, held in a local array (registers when
// kWidth is a compile-time constant) while the block's rows stream past.
template <int64_t kWidth> void AccumulateSlice(const float* p_h, const float* rows, int64_t n, int64_t row_dim,
                                               int64_t c, int64_t width, float rescale, float* out) {
  const int64_t w = kWidth > 0 ? kWidth : width;
  float a[kWidth > 0 ? kWidth : 32];
  for (int64_t j = 0; j < w; ++j) a[j] = out[j] * rescale;
  for (int64_t t = 0; t < n; ++t) {
    const float weight = p_h[t];
    const float* row = rows + t * row_dim + c;
    for (int64_t j = 0; j < w; ++j) a[j] += weight * row[j];
  }
  for (int64_t j = 0; j < w; ++j) out[j] = a[j];
}

}  // namespace

void SharedKeyAccumulatePortable(const float* p, int64_t ld, int64_t heads, const float* rows, int64_t n,
                                 int64_t row_dim, int64_t value_dim, const float* rescale, float* acc) {
  // A 32-column slice of acc[h] stays in registers over the block's rows; column
  // slices are the outer loop so the rows' slice (n x 128 B) stays in L1.
  constexpr int64_t kCols = 32;
  for (int64_t c = 0; c < value_dim; c += kCols) {
    const int64_t width = std::min(kCols, value_dim - c);
    for (int64_t h = 0; h < heads; ++h) {
      float* out = acc + h * value_dim + c;
      const float s = rescale ? rescale[h] : 1.0f;
      if (width == kCols) {
        AccumulateSlice<kCols>(p + h * ld, rows, n, row_dim, c, width, s, out);
      } else {
        AccumulateSlice<0>(p + h * ld, rows, n, row_dim, c, width, s, out);
      }
    }
  }
}

void Bf16ToF32Portable(const bf16* rows, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = Bf16ToF32(rows[i]);
}

}  // namespace attention_internal

namespace {

using attention_internal::kSharedKeyBlock;

// `n` elements of v's storage starting at a 64-byte boundary (grown, never shrunk): the
// vdpbf16ps kernels load whole 64-byte rows of q and of the paired rows, and a load
// that straddles two cache lines costs two.
bf16* Aligned64(std::vector<bf16>& v, size_t n) {
  constexpr size_t kSlack = 64 / sizeof(bf16);
  if (v.size() < n + kSlack) v.resize(n + kSlack);
  const uintptr_t address = reinterpret_cast<uintptr_t>(v.data());
  return v.data() + ((64 - address % 64) % 64) / sizeof(bf16);
}

using attention_internal::SharedKeyPath;

SharedKeyPath ChoosePath(DType rows_dtype) {
  const CpuFeatures& cpu = GetCpuFeatures();
  if ((rows_dtype == DType::kBF16 || rows_dtype == DType::kF8E4M3) && cpu.avx512_bf16) {
    return SharedKeyPath::kAvx512Bf16;
  }
  if (cpu.avx512f) return SharedKeyPath::kAvx512;
  return cpu.avx2 ? SharedKeyPath::kAvx2 : SharedKeyPath::kPortable;
}

}  // namespace

double SharedKeyAttentionRelativeRate(DType rows_dtype) {
  switch (ChoosePath(rows_dtype)) {
    case SharedKeyPath::kAvx512Bf16: return 3.5;
    case SharedKeyPath::kAvx512: return 1.6;
    case SharedKeyPath::kAvx2: return 1.7;
    case SharedKeyPath::kPortable: return 0.2;
  }
  return 0.2;
}

namespace {

// Online-softmax state of all heads over one split of the rows.
struct SharedKeySplit {
  std::vector<float> acc;       // acc: [heads, value_dim], unnormalised
  std::vector<float> max;       // max: [heads]
  std::vector<float> sum;       // sum: [heads]
  std::vector<float> rescale;   // rescale: [heads], of the latest block
  std::vector<float> scores;    // scores: [heads, kSharedKeyBlock]
  std::vector<float> rows_f32;  // rows_f32: [kSharedKeyBlock, row_dim], bf16 / fp8 rows widened
  std::vector<bf16> rows_bf16;  // rows_bf16: [kSharedKeyBlock, row_dim], fp8 rows as bf16 (vdpbf16ps path)
  std::vector<bf16> p;          // storage of the bf16 weights (vdpbf16ps path), see RunSplit
  std::vector<bf16> pairs;      // storage of the paired rows (vdpbf16ps path), see RunSplit
  std::vector<float> out;       // out: [heads, value_dim], acc normalised (several splits only)
  std::vector<float> lse;       // lse: [heads] (several splits only)
};

// The split's result as a partial that MergeAttentionPartials takes: out_h = acc_h / sum_h,
// lse_h = max_h + log(sum_h); a head that saw no row gets out 0 and lse -inf. lse may be null.
void Normalize(const SharedKeySplit& s, int64_t heads, int64_t value_dim, float* out, float* lse) {
  for (int64_t h = 0; h < heads; ++h) {
    float* o = out + h * value_dim;
    const double sum = s.sum[h];
    if (sum == 0) {
      std::fill(o, o + value_dim, 0.0f);
      if (lse) lse[h] = kNegInf;
      continue;
    }
    const float inv = static_cast<float>(1.0 / sum);
    const float* acc = s.acc.data() + h * value_dim;
    for (int64_t j = 0; j < value_dim; ++j) o[j] = acc[j] * inv;
    if (lse) lse[h] = s.max[h] + static_cast<float>(std::log(sum));
  }
}

// Rows are taken in blocks so the scores of one block for all heads stay in L1/L2
// (128 heads × 64 rows × 4 B = 32 KiB) while each row is read once for every head:
// the block kernels (attention_internal.h) compute the block's scores of all heads,
// the online-softmax step, then rescale acc and add the block's weighted rows to it.
// q_bf16: q rounded to bf16 ([heads, row_dim]), used on the vdpbf16ps path only.
// fp8 rows [t, t + n) as `Out` (float or bf16): e4m3 · the row's scale.
template <typename Out> void WidenFp8Rows(const PagedRows& rows, int64_t t, int64_t n, Out* out) {
  const uint8_t* src = static_cast<const uint8_t*>(rows.Row(t));
  for (int64_t r = 0; r < n; ++r) {
    const float scale = rows.Scale(t + r);
    for (int64_t j = 0; j < rows.row_dim; ++j) {
      const float v = Fp8E4M3ToF32(src[r * rows.row_dim + j]) * scale;
      if constexpr (std::is_same_v<Out, bf16>) {
        out[r * rows.row_dim + j] = F32ToBf16(v);
      } else {
        out[r * rows.row_dim + j] = v;
      }
    }
  }
}

// The rows of run [t, t + n) in the dtype the path computes on: bf16 for the vdpbf16ps
// path (fp8 converted into s.rows_bf16), f32 otherwise (bf16 / fp8 widened into
// s.rows_f32). Returns a pointer to n · row_dim values.
const void* RunRows(const SharedKeyAttentionParams& p, int64_t t, int64_t n, SharedKeyPath path, SharedKeySplit& s) {
  namespace ai = attention_internal;
  const PagedRows& rows = p.rows;
  if (path == SharedKeyPath::kAvx512Bf16) {
    if (rows.dtype == DType::kBF16) return rows.Row(t);
    WidenFp8Rows(rows, t, n, s.rows_bf16.data());
    return s.rows_bf16.data();
  }
  switch (rows.dtype) {
    case DType::kBF16:
      if (path == SharedKeyPath::kAvx512) {
        ai::Bf16ToF32Avx512(static_cast<const bf16*>(rows.Row(t)), n * p.row_dim, s.rows_f32.data());
      } else if (path == SharedKeyPath::kAvx2) {
        ai::Bf16ToF32Avx2(static_cast<const bf16*>(rows.Row(t)), n * p.row_dim, s.rows_f32.data());
      } else {
        ai::Bf16ToF32Portable(static_cast<const bf16*>(rows.Row(t)), n * p.row_dim, s.rows_f32.data());
      }
      return s.rows_f32.data();
    case DType::kF8E4M3:
      if (path == SharedKeyPath::kAvx2) {
        const uint8_t* codes = static_cast<const uint8_t*>(rows.Row(t));
        for (int64_t r = 0; r < n; ++r) {
          ai::Fp8ToF32Avx2(codes + r * p.row_dim, p.row_dim, rows.Scale(t + r), s.rows_f32.data() + r * p.row_dim);
        }
      } else {
        WidenFp8Rows(rows, t, n, s.rows_f32.data());
      }
      return s.rows_f32.data();
    default: return rows.Row(t);
  }
}

// Rows are taken in runs of at most kSharedKeyBlock rows inside one cache block, so the
// scores of one run for all heads stay in L1/L2 (128 heads × 64 rows × 4 B = 32 KiB)
// while each row is read once for every head: the block kernels (attention_internal.h)
// compute the run's scores of all heads, the online-softmax step, then rescale acc and
// add the run's weighted rows to it.
// q_bf16: q rounded to bf16 ([heads, row_dim]), used on the vdpbf16ps path only.
void RunSplit(const SharedKeyAttentionParams& p, const bf16* q_bf16, int64_t begin, int64_t end, SharedKeyPath path,
              SharedKeySplit& s) {
  namespace ai = attention_internal;
  s.acc.assign(p.heads * p.value_dim, 0.0f);
  s.max.assign(p.heads, kNegInf);
  s.sum.assign(p.heads, 0.0f);
  s.rescale.resize(p.heads);
  s.scores.resize(p.heads * kSharedKeyBlock);
  const DType dtype = p.rows.dtype;
  bf16* weights = nullptr;  // [heads, kSharedKeyBlock] (vdpbf16ps path)
  bf16* pairs = nullptr;    // [kSharedKeyBlock / 2, value_dim, 2] (vdpbf16ps path)
  if (path == SharedKeyPath::kAvx512Bf16) {
    weights = Aligned64(s.p, p.heads * kSharedKeyBlock);
    pairs = Aligned64(s.pairs, kSharedKeyBlock * p.value_dim);
    if (dtype == DType::kF8E4M3) s.rows_bf16.resize(kSharedKeyBlock * p.row_dim);
  } else if (dtype != DType::kF32) {
    s.rows_f32.resize(kSharedKeyBlock * p.row_dim);
  }
  // The run starting at row t: up to kSharedKeyBlock rows, not past `end` or its block.
  const auto run_length = [&](int64_t t) { return std::min({kSharedKeyBlock, end - t, p.rows.RunLength(t)}); };
  for (int64_t t = begin; t < end;) {
    const int64_t n = run_length(t);
    if (path == SharedKeyPath::kAvx512Bf16) {
      const bf16* rows = static_cast<const bf16*>(RunRows(p, t, n, path, s));
      // The next run's rows are prefetched meanwhile (bf16 rows only: fp8 ones are
      // converted into L1 anyway).
      const int64_t next_n = t + n < end && dtype == DType::kBF16 ? run_length(t + n) : 0;
      const bf16* next = next_n > 0 ? static_cast<const bf16*>(p.rows.Row(t + n)) : nullptr;
      ai::SharedKeyScoresBf16Dp(q_bf16, p.heads, rows, n, p.row_dim, p.scale, s.scores.data(), kSharedKeyBlock, next,
                                next_n);
      ai::SharedKeySoftmaxBf16Avx512(s.scores.data(), kSharedKeyBlock, p.heads, n, s.max.data(), s.sum.data(),
                                     s.rescale.data(), weights, kSharedKeyBlock);
      ai::SharedKeyPairRowsAvx512(rows, n, p.row_dim, p.value_dim, pairs);
      ai::SharedKeyAccumulateBf16Dp(weights, kSharedKeyBlock, p.heads, pairs, n, p.value_dim, s.rescale.data(),
                                    s.acc.data());
      t += n;
      continue;
    }
    const float* rows = static_cast<const float*>(RunRows(p, t, n, path, s));  // rows: [n, row_dim] f32
    if (path == SharedKeyPath::kAvx512) {
      ai::SharedKeyScoresAvx512(p.q, p.heads, rows, n, p.row_dim, p.scale, s.scores.data(), kSharedKeyBlock);
      ai::SharedKeySoftmaxAvx512(s.scores.data(), kSharedKeyBlock, p.heads, n, s.max.data(), s.sum.data(),
                                 s.rescale.data());
      ai::SharedKeyAccumulateAvx512(s.scores.data(), kSharedKeyBlock, p.heads, rows, n, p.row_dim, p.value_dim,
                                    s.rescale.data(), s.acc.data());
    } else if (path == SharedKeyPath::kAvx2) {
      ai::SharedKeyScoresAvx2(p.q, p.heads, rows, n, p.row_dim, p.scale, s.scores.data(), kSharedKeyBlock);
      ai::SharedKeySoftmaxAvx2(s.scores.data(), kSharedKeyBlock, p.heads, n, s.max.data(), s.sum.data(),
                               s.rescale.data());
      ai::SharedKeyAccumulateAvx2(s.scores.data(), kSharedKeyBlock, p.heads, rows, n, p.row_dim, p.value_dim,
                                  s.rescale.data(), s.acc.data());
    } else {
      ai::SharedKeyScoresPortable(p.q, p.heads, rows, n, p.row_dim, p.scale, s.scores.data(), kSharedKeyBlock);
      ai::SharedKeySoftmaxPortable(s.scores.data(), kSharedKeyBlock, p.heads, n, s.max.data(), s.sum.data(),
                                   s.rescale.data());
      ai::SharedKeyAccumulatePortable(s.scores.data(), kSharedKeyBlock, p.heads, rows, n, p.row_dim, p.value_dim,
                                      s.rescale.data(), s.acc.data());
    }
    t += n;
  }
}

}  // namespace

void SharedKeyAttention(const SharedKeyAttentionParams& p) {
  attention_internal::SharedKeyAttentionOnPath(p, ChoosePath(p.rows.dtype));
}

void attention_internal::SharedKeyAttentionOnPath(const SharedKeyAttentionParams& p, SharedKeyPath path) {
  CheckParams(p, "SharedKeyAttention");
  if (p.heads == 0) return;
  // Short contexts are not worth a split: below 256 rows per thread, one split.
  const int64_t max_splits = std::max<int64_t>(1, p.num_rows / 256);
  const int64_t splits = std::min<int64_t>(omp_get_max_threads(), max_splits);
  thread_local std::vector<SharedKeySplit> states;
  thread_local std::vector<bf16> q_storage;           // holds q_rounded
  thread_local std::vector<const float*> outs, lses;  // [splits]: the partials to merge
  if (static_cast<int64_t>(states.size()) < splits) states.resize(splits);
  std::vector<SharedKeySplit>& st = states;
  bf16* q_rounded = nullptr;  // q_rounded: [heads, row_dim], the vdpbf16ps path's q
  if (path == SharedKeyPath::kAvx512Bf16) {
    q_rounded = Aligned64(q_storage, p.heads * p.row_dim);
    bf16_internal::RoundToBf16Avx512(p.q, p.heads * p.row_dim, q_rounded, /*has_bf16=*/true);
  }
  // One split writes its result straight to p.out and p.lse; several each leave a
  // normalised partial, on their own thread, for the merge.
#pragma omp parallel for num_threads(splits) schedule(static, 1) if (splits > 1)
  for (int64_t i = 0; i < splits; ++i) {
    // Split boundaries on multiples of kSharedKeyBlock, so that with cache blocks of
    // kSharedKeyBlock rows (or a multiple) every run is a whole block.
    const auto boundary = [&](int64_t j) {
      return j == splits ? p.num_rows : p.num_rows * j / splits / kSharedKeyBlock * kSharedKeyBlock;
    };
    SharedKeySplit& s = st[i];
    RunSplit(p, q_rounded, boundary(i), boundary(i + 1), path, s);
    if (splits == 1) {
      Normalize(s, p.heads, p.value_dim, p.out, p.lse);
    } else {
      s.out.resize(p.heads * p.value_dim);
      s.lse.resize(p.heads);
      Normalize(s, p.heads, p.value_dim, s.out.data(), s.lse.data());
    }
  }
  if (splits == 1) return;
  outs.resize(splits);
  lses.resize(splits);
  for (int64_t i = 0; i < splits; ++i) {
    outs[i] = st[i].out.data();
    lses[i] = st[i].lse.data();
  }
  MergeAttentionPartials(outs.data(), lses.data(), splits, p.heads, p.value_dim, p.out, p.lse);
}

void MergeAttentionPartials(const float* const* outs, const float* const* lses, int64_t parts, int64_t n, int64_t dim,
                            float* out, float* lse) {
  LATTE_CHECK(parts >= 1 && n >= 0 && dim >= 1, "MergeAttentionPartials: ", parts, " parts of [", n, ", ", dim, "]");
  LATTE_CHECK(outs != nullptr && lses != nullptr && out != nullptr, "MergeAttentionPartials: null outs, lses or out");
  for (int64_t r = 0; r < n; ++r) {
    float max_lse = kNegInf;
    for (int64_t i = 0; i < parts; ++i) max_lse = std::max(max_lse, lses[i][r]);
    // e^{lse_i - max}: the part's weight (recomputed below rather than stored: parts are few).
    auto weight = [&](int64_t i) { return std::exp(lses[i][r] - max_lse); };
    double total = 0;
    for (int64_t i = 0; i < parts; ++i) {
      if (lses[i][r] != kNegInf) total += weight(i);
    }
    float* o = out + r * dim;
    if (total == 0) {  // no part saw a key
      std::fill(o, o + dim, 0.0f);
      if (lse) lse[r] = kNegInf;
      continue;
    }
    // o = Σ_i weight_i · out_i in part order, a sum from +0. The first term is written
    // (0 + w·x), not added to o, so out may alias outs[0] (a part before it with no keys
    // adds nothing and is never read).
    bool first = true;
    for (int64_t i = 0; i < parts; ++i) {
      if (lses[i][r] == kNegInf) continue;
      const float w = weight(i);
      const float* src = outs[i] + r * dim;
      if (first) {
        for (int64_t j = 0; j < dim; ++j) o[j] = 0.0f + w * src[j];
        first = false;
      } else {
        Axpy(w, src, o, dim);
      }
    }
    for (int64_t j = 0; j < dim; ++j) o[j] = static_cast<float>(o[j] / total);
    if (lse) lse[r] = max_lse + static_cast<float>(std::log(total));
  }
}

}  // namespace latte
