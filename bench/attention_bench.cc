// Prefill attention throughput (kernels/prefill_attention.h) at V2-Lite's head shapes
// (16 heads, keys 192 wide, values 128): a chunk of `queries` prompt rows at the end of
// `keys` positions, as a chunked prefill's step runs it, in GFLOP/s of the causal
// products (Q·Kᵀ and P·V over the keys each query sees), and the same rows attending in
// latent form (16 heads over 576-value bf16 rows, values their first 512), as the rows of
// a prompt deeper than its kept decompressed prefix do with the keys past it: the time of
// a query-key pair in each, whose ratio the scheduler's latent_key_pair_cost stands for.
// Wall time: the kernels run on all OpenMP threads.
// Run: ./latte_microbench --benchmark_filter=Attention
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "kernels/attention.h"

namespace latte {
namespace {

constexpr int64_t kHeads = 16, kKeyDim = 192, kValueDim = 128;

void Fill(std::vector<float>& v, uint64_t seed) {
  for (float& x : v) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<int64_t>(seed >> 40) - (int64_t{1} << 23)) / static_cast<float>(1 << 23);
  }
}

// GFLOP/s and ns per query-key pair of `queries` rows at the end of `keys` positions
// (query i sees keys - queries + i + 1 keys), each pair 2 · (score + value widths) FLOP a head.
void SetPairCounters(benchmark::State& state, int64_t queries, int64_t keys, int64_t widths) {
  const double visible = static_cast<double>(queries) * (keys - queries) + queries * (queries + 1) / 2.0;
  const double flops = visible * kHeads * widths * 2;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ns/pair"] =
      benchmark::Counter(visible * 1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_PrefillAttention(benchmark::State& state) {
  const int64_t queries = state.range(0), keys = state.range(1);
  std::vector<float> q(queries * kHeads * kKeyDim), k(keys * kHeads * kKeyDim), v(keys * kHeads * kValueDim);
  std::vector<float> out(queries * kHeads * kValueDim), lse(queries * kHeads);
  Fill(q, 1);
  Fill(k, 2);
  Fill(v, 3);
  const CausalAttentionParams p{.q = q.data(),
                                .k = k.data(),
                                .v = v.data(),
                                .out = out.data(),
                                .lse = lse.data(),
                                .num_queries = queries,
                                .num_keys = keys,
                                .first_position = keys - queries,
                                .heads = kHeads,
                                .key_dim = kKeyDim,
                                .value_dim = kValueDim,
                                .scale = 0.07f};
  for (auto _ : state) {
    CausalAttention(p);
    benchmark::DoNotOptimize(out.data());
  }
  SetPairCounters(state, queries, keys, kKeyDim + kValueDim);
}

constexpr int64_t kLatentDim = 576, kLatentValueDim = 512;

// Arguments: queries, keys, and the rows' dtype (0: bf16, 1: f32: an f32 checkpoint's
// cache, and the path a CPU without AVX512_BF16 takes).
void BM_LatentKeyAttention(benchmark::State& state) {
  const int64_t queries = state.range(0), keys = state.range(1);
  const bool f32_rows = state.range(2) == 1;
  std::vector<float> q(queries * kHeads * kLatentDim), rows_f32(keys * kLatentDim);
  std::vector<float> out(queries * kHeads * kLatentValueDim), lse(queries * kHeads);
  Fill(q, 1);
  Fill(rows_f32, 2);
  std::vector<bf16> rows(rows_f32.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = F32ToBf16(rows_f32[i]);
  const PagedRows paged = f32_rows ? PagedRows::Contiguous(rows_f32.data(), DType::kF32, kLatentDim, keys)
                                   : PagedRows::Contiguous(rows.data(), DType::kBF16, kLatentDim, keys);
  for (auto _ : state) {
    for (int64_t i = 0; i < queries; ++i) {  // query i sees keys - queries + i + 1 rows
      SharedKeyAttention({.q = q.data() + i * kHeads * kLatentDim,
                          .rows = paged,
                          .out = out.data() + i * kHeads * kLatentValueDim,
                          .lse = lse.data() + i * kHeads,
                          .num_rows = keys - queries + i + 1,
                          .heads = kHeads,
                          .row_dim = kLatentDim,
                          .value_dim = kLatentValueDim,
                          .scale = 0.07f});
    }
    benchmark::DoNotOptimize(out.data());
  }
  SetPairCounters(state, queries, keys, kLatentDim + kLatentValueDim);
}

BENCHMARK(BM_PrefillAttention)
    ->Args({512, 512})
    ->Args({512, 4096})
    ->Args({512, 16384})
    ->Args({2048, 16384})
    ->Args({4096, 4096})
    ->Args({16, 16384})
    ->Args({64, 16384})
    ->Args({16, 65536})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_LatentKeyAttention)
    ->Args({16, 16384, 0})
    ->Args({64, 16384, 0})
    ->Args({16, 65536, 0})
    ->Args({512, 16384, 0})
    ->Args({16, 16384, 1})
    ->Args({64, 16384, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace latte
