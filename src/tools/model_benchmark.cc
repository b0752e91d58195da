#include "tools/model_benchmark.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "base/dtype.h"
#include "engine/greedy_generate.h"
#include "model/deepseek.h"
#include "model/model_weights.h"
#include "tools/attention_benchmark.h"

namespace latte {
namespace {

constexpr double kF32Bytes = 4;

// Values one token multiplies in one layer's attention projections (the mode's decode set).
double AttentionParams(const ModelConfig& c, MlaMode mode) {
  return static_cast<double>(AttentionWeightBytesPerStep(c, mode) / sizeof(bf16));
}

// Of those, the values derived from kv_b_proj at load (held in WeightValueBytes::kv_b):
// W_UK and W_UV (absorbed; kv_b_proj itself in naive), or W_Q_UK and W_UV_O (materialized).
double KvbDerivedParams(const ModelConfig& c, MlaMode mode) {
  const double H = c.num_attention_heads, d_c = c.kv_lora_rank;
  if (mode == MlaMode::kMaterialized) {
    const double d_cq = c.q_lora_rank ? static_cast<double>(*c.q_lora_rank) : static_cast<double>(c.hidden_size);
    return H * d_c * d_cq + static_cast<double>(c.hidden_size) * H * d_c;
  }
  return H * (c.qk_nope_head_dim + c.v_head_dim) * d_c;
}

// Bytes one layer's attention projections read: kv_b-derived values at wb.kv_b, the rest at wb.matrices.
double AttentionBytes(const ModelConfig& c, MlaMode mode, const WeightValueBytes& wb) {
  const double kv_b = KvbDerivedParams(c, mode);
  return (AttentionParams(c, mode) - kv_b) * wb.matrices + kv_b * wb.kv_b;
}

// RMSNorm weights of one layer: input, post-attention, q_a (when q_lora_rank), kv_a.
double LayerNormValues(const ModelConfig& c) {
  return 2.0 * c.hidden_size + (c.q_lora_rank ? *c.q_lora_rank : 0) + c.kv_lora_rank;
}

double ExpertParams(const ModelConfig& c) { return 3.0 * c.hidden_size * c.moe_intermediate_size; }

// Router (f32) bytes of one MoE layer, with e_score_correction_bias under noaux_tc.
double RouterBytes(const ModelConfig& c) {
  double values = static_cast<double>(c.n_routed_experts) * c.hidden_size;
  if (c.topk_method == "noaux_tc") values += c.n_routed_experts;
  return values * kF32Bytes;
}

// MLP / MoE FLOPs of one token in `layer`.
double FfnFlops(const ModelConfig& c, int64_t layer) {
  const double d = c.hidden_size;
  if (!c.IsMoeLayer(layer)) return 2.0 * 3.0 * d * c.intermediate_size;
  return 2.0 * ExpertParams(c) * (c.num_experts_per_tok + c.n_shared_experts) +
         2.0 * c.n_routed_experts * d;
}

// FFN weight bytes one forward over `tokens` tokens reads in `layer`.
double FfnBytes(const ModelConfig& c, int64_t layer, int64_t tokens, double wb) {  // wb: matrices
  const double d = c.hidden_size;
  if (!c.IsMoeLayer(layer)) return 3.0 * d * c.intermediate_size * wb;
  const double experts = ExpectedExpertsTouched(c.n_routed_experts, c.num_experts_per_tok, tokens);
  return (experts + c.n_shared_experts) * ExpertParams(c) * wb + RouterBytes(c);
}

}  // namespace

double ExpectedExpertsTouched(int64_t experts, int64_t per_token, int64_t tokens) {
  if (experts <= 0 || per_token <= 0 || tokens <= 0) return 0;
  if (tokens == 1) return static_cast<double>(per_token);
  const double E = static_cast<double>(experts);
  return E * (1.0 - std::pow(1.0 - static_cast<double>(per_token) / E, static_cast<double>(tokens)));
}

TokenCosts DecodeCostsPerToken(const ModelConfig& c, MlaMode mode, int64_t batch, double context,
                               const WeightValueBytes& wb, int64_t kv_value_bytes) {
  const double d = c.hidden_size, H = c.num_attention_heads, d_c = c.kv_lora_rank;
  const double S = context + 1;  // the new token attends to itself too
  const double att = AttentionParams(c, mode);
  double step_bytes = 0, flops = 0;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    step_bytes += AttentionBytes(c, mode, wb) + LayerNormValues(c) * kF32Bytes + FfnBytes(c, layer, batch, wb.matrices);
    flops += 2.0 * att + FfnFlops(c, layer);
    if (mode == MlaMode::kNaive) {
      const double kv_b = H * (c.qk_nope_head_dim + c.v_head_dim) * d_c;
      flops += 2.0 * S * kv_b + 2.0 * S * H * (c.QkHeadDim() + c.v_head_dim);
    } else {
      flops += 2.0 * S * H * c.LatentDim() + 2.0 * S * H * d_c;  // scores over c_kv|k_r, values over c_kv
    }
  }
  step_bytes += d * kF32Bytes + static_cast<double>(c.vocab_size) * d * wb.embeddings;  // final norm, lm_head
  step_bytes += static_cast<double>(batch) * d * wb.embeddings;                          // embedding rows
  flops += 2.0 * c.vocab_size * d;
  TokenCosts t;
  t.weight_bytes = step_bytes / static_cast<double>(batch);
  t.kv_bytes = static_cast<double>(c.num_hidden_layers) * S * c.LatentDim() * static_cast<double>(kv_value_bytes);
  t.flops = flops;
  return t;
}

TokenCosts PrefillCostsPerToken(const ModelConfig& c, int64_t prompt, const WeightValueBytes& wb,
                                int64_t kv_value_bytes) {
  const double P = static_cast<double>(prompt);
  const double d = c.hidden_size, H = c.num_attention_heads;
  const double att = AttentionParams(c, MlaMode::kNaive);  // q_a, kv_a, q_b, kv_b, o_proj
  const double keys = (P + 1) / 2;                          // causal: token t sees t + 1 keys
  double bytes = 0, flops = 0;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    bytes += AttentionBytes(c, MlaMode::kNaive, wb) + LayerNormValues(c) * kF32Bytes +
             FfnBytes(c, layer, prompt, wb.matrices);
    flops += 2.0 * att + FfnFlops(c, layer) + keys * (2.0 * H * c.QkHeadDim() + 2.0 * H * c.v_head_dim);
  }
  bytes += d * kF32Bytes + static_cast<double>(c.vocab_size) * d * wb.embeddings + P * d * wb.embeddings;
  flops += 2.0 * c.vocab_size * d / P;  // logits for the last row only
  TokenCosts t;
  t.weight_bytes = bytes / P;
  t.kv_bytes = static_cast<double>(c.num_hidden_layers) * c.LatentDim() * static_cast<double>(kv_value_bytes);
  t.flops = flops;
  return t;
}

namespace {

// Bytes per value of a view, its fp8 block scales included.
double ValueBytes(const WeightView& w) {
  return static_cast<double>(w.Bytes() + w.ScaleBytes()) / static_cast<double>(w.rows * w.cols);
}

}  // namespace

WeightValueBytes MeasureWeightValueBytes(const ModelWeights& weights) {
  const MlaWeights& attn = weights.layers().front().attn;
  WeightValueBytes wb;
  wb.matrices = ValueBytes(attn.kv_a_proj_with_mqa);
  if (attn.w_q_uk) {
    wb.kv_b = ValueBytes(*attn.w_q_uk);
  } else if (!attn.w_uk_t.empty()) {
    wb.kv_b = ValueBytes(attn.w_uk_t.front());
  } else {
    wb.kv_b = ValueBytes(attn.kv_b_proj);
  }
  wb.embeddings = ValueBytes(weights.lm_head());
  return wb;
}

namespace {

using Clock = std::chrono::steady_clock;

std::vector<int32_t> PromptIds(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(n);
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int32_t& id : ids) {
    state += 0x9e3779b97f4a7c15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    id = static_cast<int32_t>((z ^ (z >> 31)) % static_cast<uint64_t>(vocab));
  }
  return ids;
}

Result<double> RunPrefill(DeepSeekModel& model, int64_t P, uint64_t seed) {
  const std::vector<int32_t> tokens = PromptIds(P, model.config().vocab_size, seed);
  auto cache = model.NewCache(P);
  std::vector<float> logits;
  const auto t0 = Clock::now();
  LATTE_RETURN_IF_ERROR(model.Forward(tokens, {SequenceSpan{cache.get(), 0, P}}, LogitRows::kLastOfSpan, logits));
  return static_cast<double>(P) / std::chrono::duration<double>(Clock::now() - t0).count();
}

// B sequences with `prompt` tokens each in their caches (room for `steps` more), and
// each one's first decode token (the argmax after its prompt). RunDecode restarts from
// here every run.
struct DecodeStart {
  std::vector<std::unique_ptr<LatentCache>> caches;  // one per sequence
  std::vector<int32_t> first;                        // [B]
  int64_t prompt = 0;
};

// Fills a DecodeStart by prefill in chunks of `chunk` tokens (untimed). `model` may run
// its prefill spans through the latent path (MlaSettings::decompress_prefill = false):
// for deep fills its attention is the shared-key kernel, where the decompress path
// re-decompresses the whole context for every chunk (minutes at 8k on two cores).
Result<DecodeStart> FillCaches(DeepSeekModel& model, int64_t prompt, int64_t chunk, int64_t steps,
                               int64_t batch, uint64_t seed) {
  const int64_t vocab = model.config().vocab_size;
  DecodeStart start;
  start.prompt = prompt;
  std::vector<float> logits;
  for (int64_t b = 0; b < batch; ++b) {  // one sequence at a time
    start.caches.push_back(model.NewCache(prompt + steps));
    LatentCache* cache = start.caches.back().get();
    const std::vector<int32_t> ids = PromptIds(prompt, vocab, seed * 1000 + b);
    for (int64_t k0 = 0; k0 < prompt; k0 += chunk) {
      const int64_t count = std::min(chunk, prompt - k0);
      const std::vector<int32_t> part(ids.begin() + k0, ids.begin() + k0 + count);
      LATTE_RETURN_IF_ERROR(
          model.Forward(part, {SequenceSpan{cache, k0, count}}, LogitRows::kLastOfSpan, logits));
    }
    start.first.push_back(ArgMax(logits.data(), vocab));
  }
  return start;
}

// `steps` timed decode steps of all B sequences from `start` (whose caches are rewound
// to `start.prompt` tokens first: the rows past it are rewritten by the steps).
Result<double> RunDecode(DeepSeekModel& model, DecodeStart& start, int64_t steps) {
  const int64_t vocab = model.config().vocab_size;
  const int64_t batch = static_cast<int64_t>(start.caches.size());
  for (auto& cache : start.caches) cache->set_length(start.prompt);
  std::vector<int32_t> next = start.first;
  std::vector<float> logits;
  std::vector<SequenceSpan> spans(batch);
  const auto t0 = Clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    for (int64_t b = 0; b < batch; ++b) spans[b] = SequenceSpan{start.caches[b].get(), start.prompt + step, 1};
    LATTE_RETURN_IF_ERROR(model.Forward(next, spans, LogitRows::kLastOfSpan, logits));
    for (int64_t b = 0; b < batch; ++b) next[b] = ArgMax(logits.data() + b * vocab, vocab);
  }
  return static_cast<double>(batch * steps) / std::chrono::duration<double>(Clock::now() - t0).count();
}

void Summarize(ModelBenchResult& r) {
  const double n = static_cast<double>(r.tok_s.size());
  double sum = 0;
  for (double v : r.tok_s) sum += v;
  r.tok_s_mean = sum / n;
  double sq = 0;
  for (double v : r.tok_s) sq += (v - r.tok_s_mean) * (v - r.tok_s_mean);
  r.tok_s_sd = r.tok_s.size() > 1 ? std::sqrt(sq / (n - 1)) : 0.0;
  r.achieved_gbps = r.costs.Bytes() * r.tok_s_mean / 1e9;
  r.achieved_gflops = r.costs.flops * r.tok_s_mean / 1e9;
}

}  // namespace

Status RunModelBenchmark(const ModelBenchOptions& o,
                         void (*report)(const ModelBenchResult&, const ModelConfig&, void*), void* user) {
  if (o.prompt < 0 || o.gen < 0) return Status::Error("-p and -n must be >= 0");
  if (o.repetitions < 1) return Status::Error("-r must be at least 1");
  if (o.batch < 1 || o.batch > 1024) return Status::Error("--batch must be in [1, 1024]");
  if (o.tg_prompt < 1) return Status::Error("the tg prompt needs at least one token");
  if (o.depth < 0) return Status::Error("-d must be >= 0");
  if (o.depth_chunk < 1) return Status::Error("the depth fill needs chunks of at least one token");
  LoadOptions load;
  load.mode = o.mode;
  load.progress = o.progress;
  load.fp8 = o.fp8;
  load.residency = o.residency;
  LATTE_ASSIGN_OR_RETURN(std::unique_ptr<ModelWeights> weights, ModelWeights::Load(o.model_dir, load));
  const ModelConfig& c = weights->config();
  const WeightValueBytes wb = MeasureWeightValueBytes(*weights);
  DeepSeekModel model(*weights);
  // The latent cache holds rows in the compute dtype (DeepSeekModel::NewCache).
  const int64_t kvb = static_cast<int64_t>(DTypeSize(weights->compute_dtype()));

  if (o.prompt > 0) {
    ModelBenchResult r;
    r.test = "pp" + std::to_string(o.prompt);
    r.batch = 1;
    r.tokens_per_run = o.prompt;
    r.costs = PrefillCostsPerToken(c, o.prompt, wb, kvb);
    for (int64_t run = 0; run <= o.repetitions; ++run) {  // run 0: warm-up
      LATTE_ASSIGN_OR_RETURN(double tok_s, RunPrefill(model, o.prompt, static_cast<uint64_t>(run) + 1));
      if (run > 0) r.tok_s.push_back(tok_s);
    }
    Summarize(r);
    report(r, c, user);
  }
  if (o.gen > 0) {
    ModelBenchResult r;
    const int64_t prompt = o.depth > 0 ? o.depth : o.tg_prompt;
    r.test = "tg" + std::to_string(o.gen) + (o.depth > 0 ? "@d" + std::to_string(o.depth) : "");
    r.batch = o.batch;
    r.tokens_per_run = o.gen * o.batch;
    const double average_context = static_cast<double>(prompt) + static_cast<double>(o.gen - 1) / 2;
    r.costs = DecodeCostsPerToken(c, o.mode, o.batch, average_context, wb, kvb);
    // Deep fills prefill through the latent path (naive mode has none: it decompresses).
    MlaSettings fill_settings;
    fill_settings.decompress_prefill = o.depth == 0 || o.mode == MlaMode::kNaive;
    DeepSeekModel filler(*weights, fill_settings);
    LATTE_ASSIGN_OR_RETURN(DecodeStart start, FillCaches(filler, prompt, o.depth_chunk, o.gen, o.batch, 1));
    for (int64_t run = 0; run <= o.repetitions; ++run) {  // run 0: warm-up
      LATTE_ASSIGN_OR_RETURN(double tok_s, RunDecode(model, start, o.gen));
      if (run > 0) r.tok_s.push_back(tok_s);
    }
    Summarize(r);
    report(r, c, user);
  }
  return Status::Ok();
}

}  // namespace latte
