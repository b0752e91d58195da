// Matmul throughput: GEMV (m=1, memory-bound) in GB/s of weights read (fp8:
// the e4m3 bytes plus the f32 block scales), GEMM
// (m=512, compute-bound) in GFLOP/s, each for the portable and the fast
// (dispatched) path, beside the machine's read bandwidth measured in the same
// run (BM_ReadBandwidth). Rates use wall time: the kernels run on all OpenMP
// threads. Run: ./latte_microbench --benchmark_filter=Matmul|Read
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/cpu_features.h"
#include "base/dtype.h"
#include "kernels/bf16_round.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"

namespace latte {
namespace {

// Deterministic values in [-1, 1) (xorshift: filling 400 MiB with <random> is slow).
float Random(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return static_cast<float>(static_cast<int64_t>(s >> 40) - (int64_t{1} << 23)) / static_cast<float>(int64_t{1} << 23);
}

struct Operands {
  AlignedBuffer w;      // [n, k]
  AlignedBuffer scale;  // fp8: [ceil(n / 128), ceil(k / 128)] f32 block scales
  std::vector<float> x, y;
  WeightView view;
};

Operands MakeOperands(int64_t m, int64_t n, int64_t k, DType dtype) {
  Operands o;
  o.w = AlignedBuffer(static_cast<size_t>(n * k) * DTypeSize(dtype));
#pragma omp parallel
  {
    uint64_t s = 0x9e3779b97f4a7c15ull * (omp_get_thread_num() + 1);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n * k; ++i) {
      if (dtype == DType::kF8E4M3) {
        // Any code but the NaNs (0x7F, 0xFF): |value| <= 448, both signs.
        o.w.as<uint8_t>()[i] = F32ToFp8E4M3(448.0f * Random(s));
      } else if (dtype == DType::kBF16) {
        o.w.as<bf16>()[i] = F32ToBf16(Random(s));
      } else {
        o.w.as<float>()[i] = Random(s);
      }
    }
  }
  uint64_t s = 12345;
  o.x.resize(static_cast<size_t>(m * k));
  for (float& v : o.x) v = Random(s);
  o.y.resize(static_cast<size_t>(m * n));
  o.view = WeightView{dtype, n, k, k, o.w.data()};
  if (dtype == DType::kF8E4M3) {
    const int64_t scale_rows = (n + 127) / 128, scale_cols = (k + 127) / 128;
    o.scale = AlignedBuffer(static_cast<size_t>(scale_rows * scale_cols) * sizeof(float));
    for (int64_t i = 0; i < scale_rows * scale_cols; ++i) o.scale.as<float>()[i] = 1.0f / 448;
    o.view = Fp8WeightView(n, k, k, o.w.as<uint8_t>(), o.scale.as<float>(), scale_cols);
  }
  return o;
}

enum class Path {
  kPortable,
  kFast,
  kGemvAvx512,
  kOneDnn,
  kGemvFp8Avx512,
  kFp8OneDnn,
  kBf16Dot,
  kGemvAvx2,
  kGemvFp8Avx2,
  kBf16Sgemm,
  kGemmBf16Avx2,
  kGemmBf16PackedAvx2,
  kFp8SgemmAvx2
};

void Run(Path path, const float* x, int64_t m, const WeightView& w, float* y) {
  const MatmulProblem p{x, m, w.cols, w, y, w.rows};
  switch (path) {
    case Path::kPortable: matmul_internal::MatmulPortable(p); break;
    case Path::kFast: Matmul(p); break;
    case Path::kGemvAvx512: matmul_internal::GemvAvx512(p); break;
    case Path::kGemvAvx2: matmul_internal::GemvAvx2(p); break;
    case Path::kGemvFp8Avx2: matmul_internal::GemvFp8Avx2(p); break;
    case Path::kBf16Sgemm: matmul_internal::MatmulBf16Sgemm(p); break;
    case Path::kGemmBf16Avx2: matmul_internal::GemmBf16Avx2(p); break;
    case Path::kGemmBf16PackedAvx2: matmul_internal::GemmBf16PackedAvx2(p); break;
    case Path::kFp8SgemmAvx2: matmul_internal::MatmulFp8SgemmAvx2(p); break;
    case Path::kOneDnn: matmul_internal::MatmulOneDnn(p); break;
    case Path::kGemvFp8Avx512: matmul_internal::GemvFp8Avx512(p); break;
    case Path::kFp8OneDnn: matmul_internal::MatmulFp8OneDnn(p); break;
    case Path::kBf16Dot: {
      // x rounded to bf16 inside the timing, as the dispatch does it.
      thread_local std::vector<bf16> xb;
      const int64_t ldr = w.cols + 32;  // one line of padding, as the dispatch does
      xb.resize(static_cast<size_t>(m * ldr));
      for (int64_t i = 0; i < m; ++i) RoundToBf16(x + i * w.cols, 1, w.cols, w.cols, xb.data() + i * ldr);
      matmul_internal::MatmulBf16DotAvx512({xb.data(), m, ldr, w, y, w.rows});
      break;
    }
  }
}

bool Unsupported(benchmark::State& state, Path path) {
  if ((path == Path::kGemvAvx512 || path == Path::kGemvFp8Avx512) && !GetCpuFeatures().avx512f) {
    state.SkipWithError("CPU lacks AVX-512");
    return true;
  }
  if ((path == Path::kGemvAvx2 || path == Path::kGemvFp8Avx2 || path == Path::kGemmBf16Avx2 ||
       path == Path::kFp8SgemmAvx2 || path == Path::kGemmBf16PackedAvx2) &&
      !(GetCpuFeatures().avx2 && GetCpuFeatures().fma)) {
    state.SkipWithError("CPU lacks AVX2 or FMA");
    return true;
  }
  if (path == Path::kBf16Dot && !(GetCpuFeatures().avx512f && GetCpuFeatures().avx512_bf16)) {
    state.SkipWithError("CPU lacks AVX512_BF16");
    return true;
  }
  return false;
}

// STREAM-like read of 1 GiB on all threads: the roofline for the GEMV numbers.
void BM_ReadBandwidth(benchmark::State& state) {
  const int64_t count = (int64_t{1} << 30) / 8;
  AlignedBuffer buf(static_cast<size_t>(count) * 8);
  const uint64_t* p = buf.as<uint64_t>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) buf.as<uint64_t>()[i] = static_cast<uint64_t>(i);
  for (auto _ : state) {
    uint64_t total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int64_t i = 0; i < count; ++i) total += p[i];
    benchmark::DoNotOptimize(total);
  }
  state.counters["GB/s"] = benchmark::Counter(count * 8 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ReadBandwidth)->UseRealTime()->Unit(benchmark::kMillisecond);

template <Path kPath, DType kDType> void BM_MatmulGemv(benchmark::State& state) {
  if (Unsupported(state, kPath)) return;
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  Operands o = MakeOperands(m, n, k, kDType);
  for (auto _ : state) {
    Run(kPath, o.x.data(), m, o.view, o.y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(o.view.Bytes() + o.view.ScaleBytes()) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// Copies of a weight, enough (64 MiB and more in all) that taking the next one each call
// reads the weights from memory, not from the last call's cache: a prefill meets each
// expert's weights once. (fp8 block scales are shared, not copied.)
class ColdWeights {
 public:
  explicit ColdWeights(const WeightView& w) : view_(w) {
    const size_t bytes = w.Bytes();
    const size_t copies = std::max<size_t>(2, (size_t{64} << 20) / std::max<size_t>(bytes, 1) + 1);
    for (size_t c = 0; c < copies; ++c) {
      copies_.emplace_back(bytes);
      std::memcpy(copies_.back().data(), w.data, bytes);
    }
  }
  WeightView Next() {
    WeightView v = view_;
    v.data = copies_[next_].data();
    next_ = (next_ + 1) % copies_.size();
    return v;
  }

 private:
  WeightView view_;
  std::vector<AlignedBuffer> copies_;
  size_t next_ = 0;
};

// BM_MatmulGemv with the weights from memory.
template <Path kPath, DType kDType> void BM_MatmulGemvColdWeights(benchmark::State& state) {
  if (Unsupported(state, kPath)) return;
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  Operands o = MakeOperands(m, n, k, kDType);
  ColdWeights weights(o.view);
  for (auto _ : state) {
    Run(kPath, o.x.data(), m, weights.Next(), o.y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(o.view.Bytes() + o.view.ScaleBytes()) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

template <Path kPath, DType kDType> void BM_MatmulGemm(benchmark::State& state) {
  if (Unsupported(state, kPath)) return;
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  Operands o = MakeOperands(m, n, k, kDType);
  for (auto _ : state) {
    Run(kPath, o.x.data(), m, o.view, o.y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// {n, k, m}: q_a-ish 2048x2048, 7168x1536 (o_proj-like), q_b at R1 size, lm_head.
#define LATTE_GEMV_SHAPES(b)    \
  b->Args({2048, 2048, 1})      \
      ->Args({7168, 1536, 1})   \
      ->Args({24576, 1536, 1})  \
      ->Args({102400, 2048, 1}) \
      ->UseRealTime()           \
      ->Unit(benchmark::kMicrosecond)
LATTE_GEMV_SHAPES(BENCHMARK(BM_MatmulGemv<Path::kFast, DType::kBF16>));
LATTE_GEMV_SHAPES(BENCHMARK(BM_MatmulGemv<Path::kPortable, DType::kBF16>));
BENCHMARK(BM_MatmulGemv<Path::kFast, DType::kF32>)->Args({7168, 1536, 1})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MatmulGemv<Path::kPortable, DType::kF32>)
    ->Args({7168, 1536, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// fp8 e4m3 with 128x128 block scales (1 byte a weight): the dense MLP's
// 10944x2048 / 2048x10944, q_b at R1 size, the V2 lm_head.
#define LATTE_GEMV_FP8_SHAPES(b) \
  b->Args({2048, 2048, 1})       \
      ->Args({10944, 2048, 1})   \
      ->Args({2048, 10944, 1})   \
      ->Args({24576, 1536, 1})   \
      ->Args({102400, 2048, 1})  \
      ->UseRealTime()            \
      ->Unit(benchmark::kMicrosecond)
LATTE_GEMV_FP8_SHAPES(BENCHMARK(BM_MatmulGemv<Path::kFast, DType::kF8E4M3>));
LATTE_GEMV_FP8_SHAPES(BENCHMARK(BM_MatmulGemv<Path::kPortable, DType::kF8E4M3>));

// GEMV vs oneDNN by m, to place kGemmMinRows.
BENCHMARK(BM_MatmulGemv<Path::kGemvAvx512, DType::kBF16>)
    ->ArgsProduct({{7168}, {1536}, {1, 2, 3, 4, 5, 6, 8, 12, 16}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MatmulGemv<Path::kOneDnn, DType::kBF16>)
    ->ArgsProduct({{7168}, {1536}, {1, 2, 3, 4, 5, 6, 8, 12, 16}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_MatmulGemv<Path::kBf16Dot, DType::kBF16>)
    ->ArgsProduct({{7168}, {1536}, {1, 2, 3, 4, 5, 6, 8, 12, 16}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// A batched decode step's products at the V2 lm_head's size (419 MB, from memory):
// the f32 GEMV, the vdpbf16ps kernel and oneDNN by m, to place kBf16DotMaxRows.
// Past 16 rows: a speculative step's verify rows (16 sequences × 2-3 rows) and a prefill's
// experts (~48 rows each), on the lm_head, the dense MLP's up/gate and one expert's.
#define LATTE_LM_HEAD_BY_M(b)                                       \
  b->ArgsProduct({{102400}, {2048}, {1, 4, 8, 16, 24, 32, 48, 64}}) \
      ->ArgsProduct({{10944, 1408}, {2048}, {16, 24, 32, 48, 64}})  \
      ->UseRealTime()                                               \
      ->Unit(benchmark::kMicrosecond)
LATTE_LM_HEAD_BY_M(BENCHMARK(BM_MatmulGemv<Path::kGemvAvx512, DType::kBF16>));
LATTE_LM_HEAD_BY_M(BENCHMARK(BM_MatmulGemv<Path::kBf16Dot, DType::kBF16>));
LATTE_LM_HEAD_BY_M(BENCHMARK(BM_MatmulGemv<Path::kOneDnn, DType::kBF16>));
// The same products on a weight that stays in L2 (256 KiB): the kernels' arithmetic
// rate without the memory.
#define LATTE_IN_CACHE_BY_M(b) b->ArgsProduct({{64}, {2048}, {1, 4, 16}})->UseRealTime()->Unit(benchmark::kMicrosecond)
LATTE_IN_CACHE_BY_M(BENCHMARK(BM_MatmulGemv<Path::kGemvAvx512, DType::kBF16>));
LATTE_IN_CACHE_BY_M(BENCHMARK(BM_MatmulGemv<Path::kBf16Dot, DType::kBF16>));
LATTE_IN_CACHE_BY_M(BENCHMARK(BM_MatmulGemv<Path::kOneDnn, DType::kBF16>));

// The same for fp8: the in-register GEMV against chunks dequantized for oneDNN.
BENCHMARK(BM_MatmulGemv<Path::kGemvFp8Avx512, DType::kF8E4M3>)
    ->ArgsProduct({{7168}, {1536}, {1, 2, 4, 6, 8, 12, 16}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MatmulGemv<Path::kFp8OneDnn, DType::kF8E4M3>)
    ->ArgsProduct({{7168}, {1536}, {1, 2, 4, 6, 8, 12, 16}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// GGUF block formats: the integer GEMV on one ISA (matmul_internal.h's block section),
// x quantized inside the timing as the dispatch does it. Weights: random bytes with small
// finite f16 scales (every code pattern, no quantizer run over 100+ MB). GB/s counts the
// block bytes read.
Operands MakeBlockOperands(int64_t m, int64_t n, int64_t k, DType dtype) {
  Operands o;
  const size_t row_bytes = DTypeRowBytes(dtype, k), block_bytes = DTypeBlockBytes(dtype);
  o.w = AlignedBuffer(static_cast<size_t>(n) * row_bytes);
  const uint16_t scale = F32ToF16(1.0f / 64);
  const int64_t blocks = n * k / DTypeBlockElements(dtype);
#pragma omp parallel
  {
    uint64_t s = 0x9e3779b97f4a7c15ull * (omp_get_thread_num() + 1);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* p = o.w.as<uint8_t>() + b * block_bytes;
      for (size_t i = 0; i < block_bytes; ++i) {
        Random(s);  // steps s
        p[i] = static_cast<uint8_t>(s >> 40);
      }
      // The f16 fields: d (and Q4_K / Q5_K's dmin, Q5_1's m at 2; Q6_K's d at 208, Q3_K's at
      // 108, Q2_K's d and dmin at 80 and 82).
      const size_t d = dtype == DType::kQ6_K ? 208 : dtype == DType::kQ3_K ? 108 : dtype == DType::kQ2_K ? 80 : 0;
      std::memcpy(p + d, &scale, 2);
      if (dtype == DType::kQ4_K || dtype == DType::kQ5_K || dtype == DType::kQ5_1 || dtype == DType::kQ2_K) {
        std::memcpy(p + d + 2, &scale, 2);
      }
    }
  }
  uint64_t s = 12345;
  o.x.resize(static_cast<size_t>(m * k));
  for (float& v : o.x) v = Random(s);
  o.y.resize(static_cast<size_t>(m * n));
  o.view = WeightView{dtype, n, k, k, o.w.data()};
  return o;
}

template <matmul_internal::BlockGemvIsa kIsa, DType kDType> void BM_BlockGemv(benchmark::State& state) {
  using matmul_internal::BlockGemvIsa;
  const CpuFeatures& cpu = GetCpuFeatures();
  if ((kIsa == BlockGemvIsa::kAvx2 && !cpu.avx2) || (kIsa == BlockGemvIsa::kAvx512 && !cpu.avx512f) ||
      (kIsa == BlockGemvIsa::kAvx512Vnni && !cpu.avx512_vnni)) {
    state.SkipWithError("CPU lacks the ISA");
    return;
  }
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  Operands o = MakeBlockOperands(m, n, k, kDType);
  for (auto _ : state) {
    matmul_internal::GemvBlock({o.x.data(), m, k, o.view, o.y.data(), n}, kIsa);
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(o.view.Bytes()) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GMAC/s"] = benchmark::Counter(1.0 * m * n * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// A block-format product on the AVX2 kernels with the weights from memory: `product` runs
// on the next copy each iteration (a decode step, or a prefill, meets each expert once).
template <DType kDType, class Product> void BlockColdWeights(benchmark::State& state, Product product) {
  if (!GetCpuFeatures().avx2) {
    state.SkipWithError("CPU lacks AVX2");
    return;
  }
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  Operands o = MakeBlockOperands(m, n, k, kDType);
  ColdWeights weights(o.view);
  for (auto _ : state) {
    product(MatmulProblem{o.x.data(), m, k, weights.Next(), o.y.data(), n});
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(o.view.Bytes()) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GMAC/s"] = benchmark::Counter(1.0 * m * n * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// The AVX2 block GEMV (a decode step's products) with the weights from memory.
template <DType kDType> void BM_BlockGemvAvx2ColdWeights(benchmark::State& state) {
  BlockColdWeights<kDType>(
      state, [](const MatmulProblem& p) { matmul_internal::GemvBlock(p, matmul_internal::BlockGemvIsa::kAvx2); });
}

// {n, k, m}: a decode step's V2-Lite expert gate/up product, one x row.
#define LATTE_EXPERT_DECODE_SHAPE(b) b->Args({1408, 2048, 1})->UseRealTime()->Unit(benchmark::kMicrosecond)
LATTE_EXPERT_DECODE_SHAPE(BENCHMARK(BM_BlockGemvAvx2ColdWeights<DType::kQ8_0>));
LATTE_EXPERT_DECODE_SHAPE(BENCHMARK(BM_BlockGemvAvx2ColdWeights<DType::kQ4_K>));
LATTE_EXPERT_DECODE_SHAPE(BENCHMARK(BM_BlockGemvAvx2ColdWeights<DType::kQ6_K>));
LATTE_EXPERT_DECODE_SHAPE(BENCHMARK(BM_BlockGemvAvx2ColdWeights<DType::kQ5_0>))->Args({2048, 1408, 1});

// A decode step's routed experts as the MoE runs them: `count` expert matrices of n x k
// (weights from memory, the next copies each call) against one x row in one MatmulMany.
template <DType kDType> void BM_MatmulManyColdExperts(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), count = state.range(2);
  Operands o = IsBlockQuantized(kDType) ? MakeBlockOperands(1, n, k, kDType) : MakeOperands(1, n, k, kDType);
  ColdWeights weights(o.view);
  std::vector<float> y(static_cast<size_t>(n * count));
  std::vector<MatmulProblem> problems(static_cast<size_t>(count));
  for (auto _ : state) {
    for (int64_t e = 0; e < count; ++e) problems[e] = {o.x.data(), 1, k, weights.Next(), y.data() + e * n, n};
    MatmulMany(problems.data(), count);
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(count * (o.view.Bytes() + o.view.ScaleBytes())) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MatmulManyColdExperts<DType::kF8E4M3>)
    ->Args({1408, 2048, 8})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MatmulManyColdExperts<DType::kQ8_0>)->Args({1408, 2048, 8})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MatmulManyColdExperts<DType::kBF16>)->Args({1408, 2048, 8})->UseRealTime()->Unit(benchmark::kMicrosecond);

// {n, k, m}: a V2-Lite expert's gate/up (1408 x 2048, 1.5-3 MB: partly cache-resident) and
// the V2 lm_head (102400 x 2048, 118-223 MB from memory), at a decode step's m = 1 and a
// batched step's m = 16.
#define LATTE_BLOCK_GEMV_SHAPES(b)               \
  b->ArgsProduct({{1408}, {2048}, {1, 16}})      \
      ->ArgsProduct({{102400}, {2048}, {1, 16}}) \
      ->UseRealTime()                            \
      ->Unit(benchmark::kMicrosecond)
#define LATTE_BLOCK_GEMV_ISAS(dtype)                                                                 \
  LATTE_BLOCK_GEMV_SHAPES(BENCHMARK(BM_BlockGemv<matmul_internal::BlockGemvIsa::kPortable, dtype>)); \
  LATTE_BLOCK_GEMV_SHAPES(BENCHMARK(BM_BlockGemv<matmul_internal::BlockGemvIsa::kAvx2, dtype>));     \
  LATTE_BLOCK_GEMV_SHAPES(BENCHMARK(BM_BlockGemv<matmul_internal::BlockGemvIsa::kAvx512, dtype>));   \
  LATTE_BLOCK_GEMV_SHAPES(BENCHMARK(BM_BlockGemv<matmul_internal::BlockGemvIsa::kAvx512Vnni, dtype>))
LATTE_BLOCK_GEMV_ISAS(DType::kQ8_0);
LATTE_BLOCK_GEMV_ISAS(DType::kQ4_K);
LATTE_BLOCK_GEMV_ISAS(DType::kQ6_K);
LATTE_BLOCK_GEMV_ISAS(DType::kQ5_0);
// Q5_1: the AVX-512 ISAs run the AVX2 kernel (BlockGemvIsaFor).
LATTE_BLOCK_GEMV_ISAS(DType::kQ5_1);
LATTE_BLOCK_GEMV_ISAS(DType::kQ3_K);
LATTE_BLOCK_GEMV_ISAS(DType::kQ2_K);
LATTE_BLOCK_GEMV_ISAS(DType::kIQ4_NL);
LATTE_BLOCK_GEMV_ISAS(DType::kIQ4_XS);
LATTE_BLOCK_GEMV_ISAS(DType::kIQ2_XXS);
LATTE_BLOCK_GEMV_ISAS(DType::kIQ3_XXS);
LATTE_BLOCK_GEMV_ISAS(DType::kIQ1_S);

// Prefill-sized products with block weights through the dispatch (from kBlockGemvMaxRows + 1
// rows: chunks of rows dequantized for oneDNN), with the CPU's kernels (kFast) or the
// portable dequantizer (kPortable: features forced off; oneDNN keeps its own ISA).
template <Path kPath, DType kDType> void BM_BlockMatmul(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  Operands o = MakeBlockOperands(m, n, k, kDType);
  SetPortableKernelsForTesting(kPath == Path::kPortable);
  for (auto _ : state) {
    Matmul({o.x.data(), m, k, o.view, o.y.data(), n});
    benchmark::ClobberMemory();
  }
  SetPortableKernelsForTesting(false);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
#define LATTE_BLOCK_MATMUL_SHAPES(b) \
  b->ArgsProduct({{1408}, {2048}, {16, 17, 32, 64, 512}})->UseRealTime()->Unit(benchmark::kMicrosecond)
LATTE_BLOCK_MATMUL_SHAPES(BENCHMARK(BM_BlockMatmul<Path::kFast, DType::kQ4_K>));
LATTE_BLOCK_MATMUL_SHAPES(BENCHMARK(BM_BlockMatmul<Path::kPortable, DType::kQ4_K>));
LATTE_BLOCK_MATMUL_SHAPES(BENCHMARK(BM_BlockMatmul<Path::kFast, DType::kQ6_K>));
LATTE_BLOCK_MATMUL_SHAPES(BENCHMARK(BM_BlockMatmul<Path::kPortable, DType::kQ6_K>));
// The large-m kernels for block weights side by side, each called directly: the VNNI
// integer GEMM (16-row panels transposed in scratch), the chunks dequantized to bf16 for
// oneDNN (what AVX-512 CPUs without VNNI run), and the integer GEMV (the m <= 16 path);
// and their counterparts on CPUs without AVX-512: the AVX2 integer GEMM (8-row panels),
// the chunks dequantized to f32 for oneDNN's sgemm, and the AVX2 GEMV.
enum class BlockLargeM { kVnniGemm, kOneDnnBf16, kVnniGemv, kAvx2Gemm, kOneDnnF32, kAvx2Gemv };
template <BlockLargeM kPath, DType kDType> void BM_BlockLargeM(benchmark::State& state) {
  const bool avx2_path =
      kPath == BlockLargeM::kAvx2Gemm || kPath == BlockLargeM::kOneDnnF32 || kPath == BlockLargeM::kAvx2Gemv;
  if (avx2_path ? !GetCpuFeatures().avx2 : !GetCpuFeatures().avx512_vnni) {
    state.SkipWithError(avx2_path ? "CPU lacks AVX2" : "CPU lacks AVX512_VNNI");
    return;
  }
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  Operands o = MakeBlockOperands(m, n, k, kDType);
  const MatmulProblem p{o.x.data(), m, k, o.view, o.y.data(), n};
  for (auto _ : state) {
    if (kPath == BlockLargeM::kVnniGemm) matmul_internal::GemmBlockAvx512Vnni(p);
    if (kPath == BlockLargeM::kOneDnnBf16) matmul_internal::MatmulBlockOneDnn(p, /*bf16_gemm=*/true);
    if (kPath == BlockLargeM::kVnniGemv) matmul_internal::GemvBlock(p, matmul_internal::BlockGemvIsa::kAvx512Vnni);
    if (kPath == BlockLargeM::kAvx2Gemm) matmul_internal::GemmBlockAvx2(p);
    if (kPath == BlockLargeM::kOneDnnF32) matmul_internal::MatmulBlockOneDnn(p, /*bf16_gemm=*/false);
    if (kPath == BlockLargeM::kAvx2Gemv) matmul_internal::GemvBlock(p, matmul_internal::BlockGemvIsa::kAvx2);
    benchmark::ClobberMemory();
  }
  state.counters["GMAC/s"] = benchmark::Counter(1.0 * m * n * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
#define LATTE_BLOCK_LARGE_M_SHAPES(b)                            \
  b->ArgsProduct({{1408}, {2048}, {2, 3, 4, 6, 8, 16, 48, 512}}) \
      ->Args({2048, 2048, 512})                                  \
      ->UseRealTime()                                            \
      ->Unit(benchmark::kMicrosecond)
#define LATTE_BLOCK_LARGE_M_PATHS(dtype)                                                  \
  LATTE_BLOCK_LARGE_M_SHAPES(BENCHMARK(BM_BlockLargeM<BlockLargeM::kVnniGemm, dtype>));   \
  LATTE_BLOCK_LARGE_M_SHAPES(BENCHMARK(BM_BlockLargeM<BlockLargeM::kOneDnnBf16, dtype>)); \
  LATTE_BLOCK_LARGE_M_SHAPES(BENCHMARK(BM_BlockLargeM<BlockLargeM::kVnniGemv, dtype>))
LATTE_BLOCK_LARGE_M_PATHS(DType::kQ8_0);
LATTE_BLOCK_LARGE_M_PATHS(DType::kQ4_K);
LATTE_BLOCK_LARGE_M_PATHS(DType::kQ6_K);
LATTE_BLOCK_LARGE_M_PATHS(DType::kQ3_K);
LATTE_BLOCK_LARGE_M_PATHS(DType::kQ2_K);
LATTE_BLOCK_LARGE_M_PATHS(DType::kIQ4_XS);
#define LATTE_BLOCK_LARGE_M_AVX2_PATHS(dtype)                                            \
  LATTE_BLOCK_LARGE_M_SHAPES(BENCHMARK(BM_BlockLargeM<BlockLargeM::kAvx2Gemm, dtype>));  \
  LATTE_BLOCK_LARGE_M_SHAPES(BENCHMARK(BM_BlockLargeM<BlockLargeM::kOneDnnF32, dtype>)); \
  LATTE_BLOCK_LARGE_M_SHAPES(BENCHMARK(BM_BlockLargeM<BlockLargeM::kAvx2Gemv, dtype>))
LATTE_BLOCK_LARGE_M_AVX2_PATHS(DType::kQ8_0);
LATTE_BLOCK_LARGE_M_AVX2_PATHS(DType::kQ4_K);
LATTE_BLOCK_LARGE_M_AVX2_PATHS(DType::kQ6_K);
LATTE_BLOCK_LARGE_M_AVX2_PATHS(DType::kQ5_0);
LATTE_BLOCK_LARGE_M_AVX2_PATHS(DType::kIQ4_XS);
LATTE_BLOCK_LARGE_M_AVX2_PATHS(DType::kQ3_K);
LATTE_BLOCK_LARGE_M_AVX2_PATHS(DType::kQ2_K);
// The AVX2 GEMM on a prefill's expert products with the weights from memory.
template <DType kDType> void BM_BlockGemmAvx2ColdWeights(benchmark::State& state) {
  BlockColdWeights<kDType>(state, [](const MatmulProblem& p) { matmul_internal::GemmBlockAvx2(p); });
}
// Gate/up (k = 2048); the down projection's k = 1408 is no whole number of K-quant
// super-blocks, so a Q4_K_M file stores it as Q5_0 (or Q8_0 / Q6_K).
#define LATTE_BLOCK_COLD_SHAPES(b) b->Args({1408, 2048, 48})->UseRealTime()->Unit(benchmark::kMicrosecond)
LATTE_BLOCK_COLD_SHAPES(BENCHMARK(BM_BlockGemmAvx2ColdWeights<DType::kQ8_0>))->Args({2048, 1408, 48});
LATTE_BLOCK_COLD_SHAPES(BENCHMARK(BM_BlockGemmAvx2ColdWeights<DType::kQ4_K>));
LATTE_BLOCK_COLD_SHAPES(BENCHMARK(BM_BlockGemmAvx2ColdWeights<DType::kQ5_0>))->Args({2048, 1408, 48});

// The AVX2 GEMV (CPUs without AVX-512) against the portable loop it replaces there:
// bf16 at an expert's 2048 x 1408 (in L3) and the V2 lm_head (from memory), m = 1 (decode)
// and 16 (a batched decode step); f32 and f16 at m = 1.
#define LATTE_AVX2_GEMV_SHAPES(b)              \
  b->ArgsProduct({{2048}, {1408}, {1, 4, 16}}) \
      ->Args({102400, 2048, 1})                \
      ->Args({102400, 2048, 16})               \
      ->UseRealTime()                          \
      ->Unit(benchmark::kMicrosecond)
LATTE_AVX2_GEMV_SHAPES(BENCHMARK(BM_MatmulGemv<Path::kGemvAvx2, DType::kBF16>));
LATTE_AVX2_GEMV_SHAPES(BENCHMARK(BM_MatmulGemv<Path::kPortable, DType::kBF16>));
BENCHMARK(BM_MatmulGemv<Path::kGemvAvx2, DType::kF32>)
    ->Args({7168, 1536, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MatmulGemv<Path::kGemvAvx2, DType::kF16>)
    ->Args({7168, 1536, 1})
    ->Args({102400, 2048, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MatmulGemv<Path::kPortable, DType::kF16>)
    ->Args({7168, 1536, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
LATTE_GEMV_FP8_SHAPES(BENCHMARK(BM_MatmulGemv<Path::kGemvFp8Avx2, DType::kF8E4M3>));
// A decode step's expert products (m = 1) with the weights from memory, fp8 and bf16.
// fp8 past the GEMV's rows on AVX2: chunks dequantized to f32 for oneDNN's sgemm, against
// the GEMV (a prefill's expert at 48 rows; a batched decode at 16).
BENCHMARK(BM_MatmulGemvColdWeights<Path::kFp8SgemmAvx2, DType::kF8E4M3>)
    ->ArgsProduct({{1408}, {2048}, {16, 24, 32, 48}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MatmulGemvColdWeights<Path::kGemvFp8Avx2, DType::kF8E4M3>)
    ->ArgsProduct({{1408}, {2048}, {24, 32, 48}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
LATTE_EXPERT_DECODE_SHAPE(BENCHMARK(BM_MatmulGemvColdWeights<Path::kGemvFp8Avx2, DType::kF8E4M3>))
    ->Args({1408, 2048, 2})
    ->Args({1408, 2048, 3})
    ->Args({1408, 2048, 4})
    ->Args({1408, 2048, 16});
LATTE_EXPERT_DECODE_SHAPE(BENCHMARK(BM_MatmulGemvColdWeights<Path::kGemvAvx2, DType::kBF16>))
    ->Args({1408, 2048, 2})
    ->Args({1408, 2048, 3})
    ->Args({1408, 2048, 4})
    ->Args({1408, 2048, 8})
    ->Args({1408, 2048, 12})
    ->Args({1408, 2048, 16});
// The GEMM at a batched decode's 8-16 x rows, against the GEMV just above.
BENCHMARK(BM_MatmulGemvColdWeights<Path::kGemmBf16Avx2, DType::kBF16>)
    ->Args({1408, 2048, 8})
    ->Args({1408, 2048, 12})
    ->Args({1408, 2048, 16})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
// Large m with bf16 weights where oneDNN has no fast bf16 GEMM (no AVX-512): the AVX2
// GEMV, chunks widened to f32 for sgemm, the AVX2 GEMM (the GEMV's sums blocked for
// cache), and the portable loop, to place the switches. A V2-Lite expert's down and
// gate/up projections by m (a prefill's experts take ~48 rows each), then the other
// V2-Lite shapes at a prefill's 512 rows: q_b, kv_a, kv_b, the dense MLP's up and down,
// the shared experts' up.
#define LATTE_AVX2_BF16_BY_M(b)                                     \
  b->ArgsProduct({{2048}, {1408}, {6, 8, 16, 32, 64, 512}})         \
      ->ArgsProduct({{1408}, {2048}, {48, 96, 128, 192, 256, 512}}) \
      ->ArgsProduct({{3072, 576, 10944, 2816}, {2048}, {512}})      \
      ->ArgsProduct({{4096}, {512}, {512}})                         \
      ->Args({2048, 10944, 512})                                    \
      ->UseRealTime()                                               \
      ->Unit(benchmark::kMicrosecond)
LATTE_AVX2_BF16_BY_M(BENCHMARK(BM_MatmulGemv<Path::kGemvAvx2, DType::kBF16>));
LATTE_AVX2_BF16_BY_M(BENCHMARK(BM_MatmulGemv<Path::kBf16Sgemm, DType::kBF16>));
LATTE_AVX2_BF16_BY_M(BENCHMARK(BM_MatmulGemv<Path::kGemmBf16Avx2, DType::kBF16>));
LATTE_AVX2_BF16_BY_M(BENCHMARK(BM_MatmulGemv<Path::kGemmBf16PackedAvx2, DType::kBF16>));
// A prefill's expert products with the weights from memory.
#define LATTE_AVX2_BF16_COLD(b)             \
  b->ArgsProduct({{1408}, {2048}, {48}})    \
      ->ArgsProduct({{2048}, {1408}, {48}}) \
      ->UseRealTime()                       \
      ->Unit(benchmark::kMicrosecond)
LATTE_AVX2_BF16_COLD(BENCHMARK(BM_MatmulGemvColdWeights<Path::kGemmBf16Avx2, DType::kBF16>));
LATTE_AVX2_BF16_COLD(BENCHMARK(BM_MatmulGemvColdWeights<Path::kGemmBf16PackedAvx2, DType::kBF16>));
BENCHMARK(BM_MatmulGemv<Path::kPortable, DType::kBF16>)
    ->ArgsProduct({{2048}, {1408}, {64, 512}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// {n, k, m}: the dense MLP up/gate (10944x2048) and down (2048x10944) at m=512.
#define LATTE_GEMM_SHAPES(b) \
  b->Args({10944, 2048, 512})->Args({2048, 10944, 512})->UseRealTime()->Unit(benchmark::kMillisecond)
LATTE_GEMM_SHAPES(BENCHMARK(BM_MatmulGemm<Path::kFast, DType::kBF16>));
LATTE_GEMM_SHAPES(BENCHMARK(BM_MatmulGemm<Path::kPortable, DType::kBF16>));
LATTE_GEMM_SHAPES(BENCHMARK(BM_MatmulGemm<Path::kFast, DType::kF32>));
LATTE_GEMM_SHAPES(BENCHMARK(BM_MatmulGemm<Path::kFast, DType::kF8E4M3>));

// MLA's per-head products: 128 heads x [n, k] with m tokens, shared x (W_UK^T-like
// [512 x 128]) and per-head x (W_UV-like [128 x 512]).
void BM_MatmulBatched(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  const bool shared = state.range(3) != 0;
  const int64_t heads = 128;
  Operands o = MakeOperands(1, heads * n, k, DType::kBF16);
  std::vector<WeightView> w;
  for (int64_t b = 0; b < heads; ++b) w.push_back(o.view.RowBlock(b * n, n));
  const int64_t x_stride = shared ? 0 : m * k;
  std::vector<float> x(static_cast<size_t>(m * k * (shared ? 1 : heads)), 0.5f);
  std::vector<float> y(static_cast<size_t>(m * n * heads));
  for (auto _ : state) {
    MatmulBatched(
        {.x = x.data(), .x_stride = x_stride, .ldx = k, .m = m, .w = w, .y = y.data(), .y_stride = m * n, .ldy = n});
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * heads * m * n * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] = benchmark::Counter(heads * n * k * 2 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MatmulBatched)
    ->ArgsProduct({{512}, {128}, {1, 4, 16, 64, 512}, {1}})
    ->ArgsProduct({{128}, {512}, {1, 4, 16, 64, 512}, {0}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace latte

BENCHMARK_MAIN();

namespace latte {
namespace {
// The vdpbf16ps kernel alone (x rounded before the timing), x rows padded by range(3) bf16.
void BM_Bf16DotKernel(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2), pad = state.range(3);
  Operands o = MakeOperands(m, n, k, DType::kBF16);
  const int64_t ldr = k + pad;
  std::vector<bf16> xb(static_cast<size_t>(m * ldr));
  for (int64_t i = 0; i < m; ++i) RoundToBf16(o.x.data() + i * k, 1, k, k, xb.data() + i * ldr);
  for (auto _ : state) {
    matmul_internal::MatmulBf16DotAvx512({xb.data(), m, ldr, o.view, o.y.data(), n});
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Bf16DotKernel)
    ->ArgsProduct({{64, 102400}, {2048}, {4, 16}, {0, 32, 128}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
}  // namespace
}  // namespace latte
