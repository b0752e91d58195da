// Prefill attention throughput (kernels/prefill_attention.h) at V2-Lite's head shapes
// (16 heads, keys 192 wide, values 128): a chunk of `queries` prompt rows at the end of
// `keys` positions, as a chunked prefill's step runs it, in GFLOP/s of the causal
// products (Q·Kᵀ and P·V over the keys each query sees). Wall time: the kernel runs on
// all OpenMP threads. Run: ./latte_microbench --benchmark_filter=PrefillAttention
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

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
  // Query i sees keys - queries + i + 1 keys.
  const double visible = static_cast<double>(queries) * (keys - queries) + queries * (queries + 1) / 2.0;
  const double flops = visible * kHeads * (kKeyDim + kValueDim) * 2;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_PrefillAttention)
    ->Args({512, 512})
    ->Args({512, 4096})
    ->Args({512, 16384})
    ->Args({2048, 16384})
    ->Args({4096, 4096})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace latte
