#include "bench/attention_benchmark.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <optional>
#include <random>

#include "base/aligned_buffer.h"
#include "kernels/attention.h"
#include "model/cost_model.h"
#include "model/kv_cache.h"
#include "model/mla.h"
#include "model/mla_preparation.h"

namespace latte {
namespace {

// A random bf16 matrix [rows, cols], std 1/sqrt(cols) so projections keep RMS ~1.
WeightView RandomMatrix(int64_t rows, int64_t cols, std::mt19937_64& rng, std::vector<AlignedBuffer>& owned) {
  owned.emplace_back(static_cast<size_t>(rows * cols) * sizeof(bf16));
  bf16* data = owned.back().as<bf16>();
  const float bound = std::sqrt(3.0f / static_cast<float>(cols));
  // One draw per 64 values, spread by a cheap hash: filling 187M values with a full
  // PRNG call each would dominate the benchmark's start-up.
  for (int64_t i = 0; i < rows * cols; i += 64) {
    uint64_t state = rng();
    for (int64_t j = i; j < std::min(i + 64, rows * cols); ++j) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const float u = static_cast<float>(state >> 40) / static_cast<float>(1ull << 24);
      data[j] = F32ToBf16((2.0f * u - 1.0f) * bound);
    }
  }
  return WeightView{DType::kBF16, rows, cols, cols, data};
}

std::vector<float> Ones(int64_t n) { return std::vector<float>(n, 1.0f); }

struct BenchLayer {
  std::vector<AlignedBuffer> owned;
  MlaWeights w;
  WeightMemory memory;
};

std::unique_ptr<BenchLayer> MakeLayer(const ModelConfig& c, MlaMode mode, uint64_t seed) {
  auto layer = std::make_unique<BenchLayer>();
  std::mt19937_64 rng(seed);
  const int64_t d = c.hidden_size, H = c.num_attention_heads;
  MlaWeights& w = layer->w;
  int64_t d_in = d;
  if (c.q_lora_rank) {
    d_in = *c.q_lora_rank;
    w.q_a_proj = RandomMatrix(d_in, d, rng, layer->owned);
    w.q_a_layernorm = Ones(d_in);
  }
  w.q_b_proj = RandomMatrix(H * c.QkHeadDim(), d_in, rng, layer->owned);
  w.kv_a_proj_with_mqa = RandomMatrix(c.LatentDim(), d, rng, layer->owned);
  w.kv_a_layernorm = Ones(c.kv_lora_rank);
  w.kv_b_proj = RandomMatrix(H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank, rng, layer->owned);
  w.o_proj = RandomMatrix(d, H * c.v_head_dim, rng, layer->owned);
  PrepareMlaWeights(c, mode, DType::kBF16, w, layer->owned, layer->memory);
  return layer;
}

using Clock = std::chrono::steady_clock;

struct StepTiming {
  int64_t steps = 0;
  double seconds = 0;  // all `steps` together
};

// Runs `step` once to warm up, then times it until `min_seconds` have passed (at
// least one step, at most `max_steps`).
template <typename Step> StepTiming TimeSteps(const Step& step, double min_seconds, int64_t max_steps) {
  step();
  StepTiming t;
  const auto t0 = Clock::now();
  while (t.steps < max_steps && (t.steps == 0 || t.seconds < min_seconds)) {
    step();
    ++t.steps;
    t.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return t;
}

// Two steps timed alternately, A B B A ..., after one warm-up step each, until both have
// run `min_seconds` (at least one step each, at most `max_steps`).
template <typename StepA, typename StepB>
std::pair<StepTiming, StepTiming> TimeAlternateSteps(const StepA& a, const StepB& b, double min_seconds,
                                                     int64_t max_steps) {
  a();
  b();
  StepTiming ta, tb;
  const auto timed = [](const auto& step, StepTiming& t) {
    const auto t0 = Clock::now();
    step();
    t.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    ++t.steps;
  };
  while (ta.steps < max_steps && (ta.steps == 0 || std::min(ta.seconds, tb.seconds) < min_seconds)) {
    if (ta.steps % 2 == 0) {
      timed(a, ta);
      timed(b, tb);
    } else {
      timed(b, tb);
      timed(a, ta);
    }
  }
  return {ta, tb};
}

// A one-layer bf16 cache (as a bf16 model's) of `batch` sequences, each holding
// `context` random latent rows (normalised scale ~1) and room for the step's own row:
// in blocks of `block_size` tokens, shuffled over the pool (0: one block per sequence).
struct RandomCaches {
  std::unique_ptr<KvCache> cache;
  std::vector<std::vector<int32_t>> tables;  // [batch]
};

RandomCaches MakeRandomCaches(const ModelConfig& c, int64_t batch, int64_t context, int64_t block_size,
                              std::mt19937& rng) {
  const int64_t d_l = c.LatentDim(), tokens = context + 1;
  const int64_t size = block_size > 0 ? block_size : tokens;
  const int64_t per_sequence = (tokens + size - 1) / size;
  RandomCaches r;
  r.cache = std::make_unique<KvCache>(1, d_l, batch * per_sequence, size, DType::kBF16);
  std::vector<int32_t> blocks(static_cast<size_t>(batch * per_sequence));
  std::iota(blocks.begin(), blocks.end(), 0);
  if (block_size > 0) std::shuffle(blocks.begin(), blocks.end(), rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(d_l);
  for (int64_t b = 0; b < batch; ++b) {
    r.tables.emplace_back(blocks.begin() + b * per_sequence, blocks.begin() + (b + 1) * per_sequence);
    for (int64_t t = 0; t <= context; ++t) {
      for (float& v : row) v = normal(rng);
      r.cache->Write(0, r.tables.back(), t, row.data());
    }
  }
  return r;
}

}  // namespace

Status RunAttentionCoreBenchmark(const ModelConfig& c, const AttentionBenchOptions& options,
                                 void (*report)(const AttentionCorePoint&, void*), void* user) {
  const int64_t H = c.num_attention_heads, L = c.LatentDim(), d_c = c.kv_lora_rank;
  std::mt19937 rng(static_cast<uint32_t>(options.seed));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t batch : options.batches) {
    for (int64_t context : options.contexts) {
      const RandomCaches caches = MakeRandomCaches(c, batch, context, options.block_size, rng);
      std::vector<float> q(batch * H * L), out(batch * H * d_c);  // q: [B, H, L]; out: [B, H, d_c]
      for (float& v : q) v = normal(rng);
      const float scale = static_cast<float>(c.SoftmaxScale());
      const auto step = [&] {
        for (int64_t b = 0; b < batch; ++b) {
          SharedKeyAttentionParams p;
          p.q = q.data() + b * H * L;
          p.rows = caches.cache->Rows(0, caches.tables[b]);
          p.out = out.data() + b * H * d_c;
          p.num_rows = context + 1;
          p.heads = H;
          p.row_dim = L;
          p.value_dim = d_c;
          p.scale = scale;
          SharedKeyAttention(p);
        }
      };
      const StepTiming t = TimeSteps(step, options.min_seconds, 50 * options.max_steps);
      const double seconds_per_step = t.seconds / t.steps;
      AttentionCorePoint p;
      p.batch = batch;
      p.context = context;
      p.steps = t.steps;
      p.ms_per_step = seconds_per_step * 1e3;
      const AttentionStepCosts costs = ComputeAttentionCoreStepCosts(c, batch, context);
      p.kv_bytes = costs.kv_bytes;
      p.flops = costs.flops;
      p.achieved_gbps = p.kv_bytes / seconds_per_step / 1e9;
      p.achieved_gflops = p.flops / seconds_per_step / 1e9;
      report(p, user);
    }
  }
  return Status::Ok();
}

Status RunAttentionBenchmark(const ModelConfig& c, const AttentionBenchOptions& options,
                             void (*report)(const AttentionBenchPoint&, void*), void* user) {
  const int64_t d = c.hidden_size;
  std::mt19937 rng(static_cast<uint32_t>(options.seed));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (MlaMode mode : options.modes) {
    const std::unique_ptr<BenchLayer> layer = MakeLayer(c, mode, options.seed);
    // A one-layer config: MlaLayer reads only attention fields.
    MlaLayer mla(c, mode);
    MlaScratch scratch;
    for (int64_t batch : options.batches) {
      for (int64_t context : options.contexts) {
        RandomCaches caches = MakeRandomCaches(c, batch, context, options.block_size, rng);
        std::vector<float> x(batch * d), out(batch * d);
        for (float& v : x) v = normal(rng);
        const auto step_over = [&](RandomCaches& over) {
          std::vector<SequenceSpan> spans;
          for (int64_t b = 0; b < batch; ++b) spans.push_back(SequenceSpan{over.tables[b], context, 1});
          return [&over, spans = std::move(spans), &layer, &mla, &x, &out, &scratch] {
            mla.Forward(layer->w, 0, x.data(), spans, *over.cache, out.data(), scratch);
          };
        };
        const auto step = step_over(caches);
        StepTiming t;
        std::optional<double> compared_seconds_per_step;
        if (options.compare_block_size) {
          RandomCaches compared = MakeRandomCaches(c, batch, context, *options.compare_block_size, rng);
          const auto [ta, tb] = TimeAlternateSteps(step, step_over(compared), options.min_seconds, options.max_steps);
          t = ta;
          compared_seconds_per_step = tb.seconds / tb.steps;
        } else {
          t = TimeSteps(step, options.min_seconds, options.max_steps);
        }
        const double seconds_per_step = t.seconds / t.steps;
        AttentionBenchPoint p;
        if (compared_seconds_per_step) p.compared_ms_per_step = *compared_seconds_per_step * 1e3;
        p.mode = mode;
        p.batch = batch;
        p.context = context;
        p.steps = t.steps;
        p.ms_per_step = seconds_per_step * 1e3;
        const AttentionStepCosts costs = ComputeAttentionStepCosts(c, mode, batch, context);
        p.weight_bytes = costs.weight_bytes;
        p.kv_bytes = costs.kv_bytes;
        p.flops = costs.flops;
        p.achieved_gbps = (p.weight_bytes + p.kv_bytes) / seconds_per_step / 1e9;
        p.achieved_gflops = p.flops / seconds_per_step / 1e9;
        report(p, user);
      }
    }
  }
  return Status::Ok();
}

}  // namespace latte
