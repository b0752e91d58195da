#include "model/cost_model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "dist/comm.h"
#include "model/model_weights.h"
#include "model/tensor_parallel.h"
#include "model/tensor_specs.h"

namespace latte {
namespace {

int64_t NumValues(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

bool Contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

using ComponentField = int64_t WeightComponents::*;

// The field of WeightComponents a checkpoint tensor counts toward, by its Hugging Face
// name (the names come from ExpectedTensors, so the two cannot disagree).
ComponentField ComponentOf(const TensorSpec& spec) {
  const std::string_view name = spec.name;
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
    return &WeightComponents::embeddings;
  }
  if (Contains(name, ".self_attn.")) return &WeightComponents::attention;
  if (Contains(name, ".mlp.experts.")) return &WeightComponents::routed_experts;
  if (Contains(name, ".mlp.shared_experts.")) return &WeightComponents::shared_experts;
  if (Contains(name, ".mlp.gate.")) return &WeightComponents::router;
  if (Contains(name, ".mlp.")) return &WeightComponents::dense_mlp;
  return &WeightComponents::norms;  // input/post_attention layernorms, model.norm
}

const StoredTensor* FindStored(const StoredCheckpoint* stored, const std::string& name) {
  if (!stored) return nullptr;
  const auto it = stored->tensors.find(name);
  return it == stored->tensors.end() ? nullptr : &it->second;
}

// Stored bytes of one checkpoint tensor: the file's, or the release's dtypes (see the header).
int64_t StoredBytes(const TensorSpec& spec, const ModelConfig& config, const StoredCheckpoint* stored) {
  if (const StoredTensor* t = FindStored(stored, spec.name)) return t->bytes;
  const int64_t values = NumValues(spec.shape);
  if (spec.kind == TensorKind::kLinear && config.quantization) {
    return values + NumValues(ScaleInvShape(spec.shape, *config.quantization)) * 4;
  }
  // The V3 release keeps the router's correction bias in f32; other vectors are bf16.
  if (spec.kind == TensorKind::kVector && spec.name.ends_with("e_score_correction_bias")) {
    return values * 4;
  }
  return values * kBf16Bytes;
}

// How the loader treats a checkpoint: the dtype it computes in and whether kv_b_proj is
// converted to it (fp8, or a GGUF's block format) rather than used as stored.
struct Holding {
  int64_t value_bytes = kBf16Bytes;  // of the compute dtype, which derived tensors take
  bool kv_b_converted = false;
};

Holding HoldingOf(const ModelConfig& config, const StoredCheckpoint* stored) {
  if (!stored) return {kBf16Bytes, config.quantization.has_value()};
  // The loader computes in f32 only when every linear is stored f32 (ChooseComputeDType).
  DType compute = DType::kF32;
  const StoredTensor* kv_b = nullptr;
  for (const TensorSpec& spec : ExpectedTensors(config)) {
    const StoredTensor* t = FindStored(stored, spec.name);
    if (spec.kind == TensorKind::kLinear && t && t->dtype != DType::kF32) compute = DType::kBF16;
    if (spec.name.ends_with("kv_b_proj.weight") && !kv_b) kv_b = t;
  }
  return {static_cast<int64_t>(DTypeSize(compute)), kv_b && kv_b->dtype != compute};
}

// Adds what latte derives at load in `mode` to one layer's values.
void AddDerived(const ModelConfig& config, MlaMode mode, const Holding& holding, WeightComponents* values) {
  const AttentionWeightCounts counts = CountAttentionWeights(config);
  if (holding.kv_b_converted) values->kv_b_bf16 += counts.kv_b;
  if (mode == MlaMode::kNaive) return;
  values->w_uk_t += counts.w_uk;
  if (mode == MlaMode::kMaterialized) values->materialized += counts.w_q_uk + counts.w_uv_o;
}

WeightComponents DerivedBytes(const WeightComponents& values, const Holding& holding) {
  WeightComponents bytes;
  bytes.kv_b_bf16 = values.kv_b_bf16 * holding.value_bytes;
  bytes.w_uk_t = values.w_uk_t * holding.value_bytes;
  bytes.materialized = values.materialized * holding.value_bytes;
  return bytes;
}

// What the loader holds of one stored matrix other than kv_b_proj and the router: the
// formats the kernels compute on as stored (block formats, a GGUF's f16, fp8 e4m3 with
// its scales widened to f32), a matrix already in the compute dtype; else a conversion.
int64_t HeldMatrixBytes(const StoredTensor& t, int64_t values, const StoredCheckpoint& stored, const Holding& holding) {
  const DType compute = holding.value_bytes == 4 ? DType::kF32 : DType::kBF16;
  if (t.dtype == DType::kF8E4M3) return t.bytes - t.scale_bytes + t.scale_values * 4;
  if (IsBlockQuantized(t.dtype) || (t.dtype == DType::kF16 && stored.gguf) || t.dtype == compute) return t.bytes;
  return values * holding.value_bytes;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

WeightComponents& WeightComponents::operator+=(const WeightComponents& o) {
  attention += o.attention;
  dense_mlp += o.dense_mlp;
  routed_experts += o.routed_experts;
  shared_experts += o.shared_experts;
  router += o.router;
  norms += o.norms;
  embeddings += o.embeddings;
  kv_b_bf16 += o.kv_b_bf16;
  w_uk_t += o.w_uk_t;
  materialized += o.materialized;
  return *this;
}

StoredCheckpoint StoredCheckpointOf(const std::vector<TensorInfo>& tensors, bool gguf) {
  constexpr std::string_view kScaleSuffix = "_scale_inv";
  StoredCheckpoint stored;
  stored.gguf = gguf;
  for (const TensorInfo& t : tensors) {
    if (t.name.ends_with(kScaleSuffix)) continue;
    stored.tensors[t.name] = {t.dtype, static_cast<int64_t>(t.nbytes), 0, 0};
  }
  for (const TensorInfo& t : tensors) {
    if (!t.name.ends_with(kScaleSuffix)) continue;
    const auto weight = stored.tensors.find(t.name.substr(0, t.name.size() - kScaleSuffix.size()));
    if (weight == stored.tensors.end()) continue;
    weight->second.bytes += static_cast<int64_t>(t.nbytes);
    weight->second.scale_bytes += static_cast<int64_t>(t.nbytes);
    weight->second.scale_values += t.NumElements();
  }
  return stored;
}

int64_t HeldWeightBytes(const ModelConfig& config, MlaMode mode, const StoredCheckpoint* stored) {
  const Holding holding = HoldingOf(config, stored);
  int64_t bytes = ComputeWeightCosts(config, mode, stored).model_bytes.Total();
  for (const TensorSpec& spec : ExpectedTensors(config)) {
    const int64_t stored_bytes = StoredBytes(spec, config, stored);
    // The loader reads vectors and the router's gate (a matrix, but used per token in f32) as f32.
    const bool f32 = spec.kind == TensorKind::kVector || ComponentOf(spec) == &WeightComponents::router;
    if (f32) {
      bytes += NumValues(spec.shape) * 4 - stored_bytes;
    } else if (spec.name.ends_with("kv_b_proj.weight")) {
      // Used only in the compute dtype: a converted one is the kv_b_bf16 component.
      if (holding.kv_b_converted) bytes -= stored_bytes;
    } else if (const StoredTensor* t = FindStored(stored, spec.name)) {
      bytes += HeldMatrixBytes(*t, NumValues(spec.shape), *stored, holding) - stored_bytes;
    }
  }
  return bytes;
}

WeightCosts ComputeWeightCosts(const ModelConfig& config, MlaMode mode, const StoredCheckpoint* stored) {
  const Holding holding = HoldingOf(config, stored);
  const auto layers = static_cast<size_t>(config.num_hidden_layers);
  WeightCosts costs;
  costs.mode = mode;
  costs.layer_params.resize(layers);
  costs.layer_bytes.resize(layers);
  for (const TensorSpec& spec : ExpectedTensors(config)) {
    const int64_t layer = LayerOf(spec.name);
    WeightComponents& values = layer < 0 ? costs.other_params : costs.layer_params[layer];
    WeightComponents& bytes = layer < 0 ? costs.other_bytes : costs.layer_bytes[layer];
    const ComponentField field = ComponentOf(spec);
    values.*field += NumValues(spec.shape);
    bytes.*field += StoredBytes(spec, config, stored);
  }
  for (size_t layer = 0; layer < layers; ++layer) {
    WeightComponents derived;
    AddDerived(config, mode, holding, &derived);
    costs.layer_params[layer] += derived;
    costs.layer_bytes[layer] += DerivedBytes(derived, holding);
    costs.model_params += costs.layer_params[layer];
    costs.model_bytes += costs.layer_bytes[layer];
  }
  costs.model_params += costs.other_params;
  costs.model_bytes += costs.other_bytes;
  return costs;
}

AttentionWeightCounts CountAttentionWeights(const ModelConfig& c) {
  const int64_t d = c.hidden_size, H = c.num_attention_heads, d_c = c.kv_lora_rank;
  const int64_t d_in = c.q_lora_rank.value_or(d);
  AttentionWeightCounts counts;
  counts.q_a = c.q_lora_rank ? d_in * d : 0;
  counts.q_b = H * c.QkHeadDim() * d_in;
  counts.q_b_rope = H * c.qk_rope_head_dim * d_in;
  counts.kv_a = c.LatentDim() * d;
  counts.kv_b = H * (c.qk_nope_head_dim + c.v_head_dim) * d_c;
  counts.w_uk = H * c.qk_nope_head_dim * d_c;
  counts.o_proj = d * H * c.v_head_dim;
  counts.w_q_uk = H * d_c * d_in;
  counts.w_uv_o = H * d_c * d;
  return counts;
}

int64_t AttentionWeightCounts::AfterCq(MlaMode mode) const {
  if (mode == MlaMode::kMaterialized) return w_q_uk + q_b_rope + w_uv_o;
  return q_b + kv_b + o_proj;
}

int64_t AttentionWeightCounts::KvbDerived(MlaMode mode) const {
  return mode == MlaMode::kMaterialized ? w_q_uk + w_uv_o : kv_b;
}

int64_t PerGpuBytes(const WeightComponents& bytes, const Parallelism& parallel) {
  const int64_t gpus = std::max<int64_t>(parallel.gpus, 1);
  if (!parallel.dp_attention) return CeilDiv(bytes.Total(), gpus);
  return CeilDiv(bytes.AttentionSide(), std::max<int64_t>(parallel.attention_tp, 1)) +
         CeilDiv(bytes.Total() - bytes.AttentionSide(), gpus);
}

MaterializeExtra ComputeMaterializeExtra(const ModelConfig& c, int64_t gpus, int64_t attention_tp) {
  const AttentionWeightCounts counts = CountAttentionWeights(c);
  MaterializeExtra extra;
  extra.per_layer = (counts.w_q_uk + counts.w_uv_o) * kBf16Bytes;
  extra.whole_model = c.num_hidden_layers * extra.per_layer;
  extra.per_gpu_tp = CeilDiv(extra.whole_model, std::max<int64_t>(gpus, 1));
  extra.per_gpu_dp_attention = CeilDiv(extra.whole_model, std::max<int64_t>(attention_tp, 1));
  return extra;
}

DecodeProjectionFlops ComputeDecodeProjectionFlops(const ModelConfig& c) {
  const AttentionWeightCounts counts = CountAttentionWeights(c);
  DecodeProjectionFlops flops;
  flops.absorbed = 2 * counts.AfterCq(MlaMode::kAbsorbed);
  flops.materialized = 2 * counts.AfterCq(MlaMode::kMaterialized);
  flops.naive_fixed = 2 * (counts.q_b + counts.o_proj);
  flops.naive_per_cached_token = 2 * counts.kv_b;
  return flops;
}

AttentionCoreFlops ComputeAttentionCoreFlops(const ModelConfig& c) {
  const int64_t heads = c.num_attention_heads;
  AttentionCoreFlops flops;
  flops.absorbed = 2 * heads * c.LatentDim() + 2 * heads * c.kv_lora_rank;
  flops.naive = 2 * heads * c.QkHeadDim() + 2 * heads * c.v_head_dim;
  return flops;
}

int64_t DecodeFlopsPerCachedRow(const ModelConfig& c, MlaMode mode) {
  const AttentionCoreFlops core = ComputeAttentionCoreFlops(c);
  if (mode != MlaMode::kNaive) return core.absorbed;
  return ComputeDecodeProjectionFlops(c).naive_per_cached_token + core.naive;
}

int64_t LatentRowBytes(const ModelConfig& c, int64_t value_bytes) { return c.LatentDim() * value_bytes; }

KvCacheBytes ComputeKvCacheBytes(const ModelConfig& c) {
  KvCacheBytes kv;
  kv.latent_per_layer = LatentRowBytes(c, kBf16Bytes);
  kv.latent_model = c.num_hidden_layers * kv.latent_per_layer;
  kv.mha_per_layer = c.num_attention_heads * (c.QkHeadDim() + c.v_head_dim) * kBf16Bytes;
  kv.mha_model = c.num_hidden_layers * kv.mha_per_layer;
  return kv;
}

KvFit FitKvCache(int64_t memory_bytes, int64_t weight_bytes, int64_t kv_bytes_per_token) {
  KvFit fit;
  fit.weight_bytes = weight_bytes;
  fit.free_bytes = memory_bytes - weight_bytes;
  fit.tokens = fit.free_bytes > 0 && kv_bytes_per_token > 0 ? fit.free_bytes / kv_bytes_per_token : 0;
  return fit;
}

AttentionStepCosts ComputeAttentionStepCosts(const ModelConfig& c, MlaMode mode, int64_t batch, int64_t context) {
  const int64_t values = CountAttentionWeights(c).Decode(mode);
  const int64_t rows = context + 1;
  AttentionStepCosts costs;
  costs.weight_bytes = values * kBf16Bytes;
  costs.kv_bytes = batch * rows * LatentRowBytes(c, kBf16Bytes);
  costs.flops = batch * (2 * values + rows * DecodeFlopsPerCachedRow(c, mode));
  return costs;
}

AttentionStepCosts ComputeAttentionCoreStepCosts(const ModelConfig& c, int64_t batch, int64_t context) {
  const int64_t rows = context + 1;
  AttentionStepCosts costs;
  costs.kv_bytes = batch * rows * LatentRowBytes(c, kBf16Bytes);
  costs.flops = batch * rows * ComputeAttentionCoreFlops(c).absorbed;
  return costs;
}

namespace {

constexpr double kF32Bytes = 4;

// Bytes one layer's attention projections read in `mode`: the kv_b-derived values at
// wb.kv_b, the rest at wb.matrices.
double AttentionBytes(const ModelConfig& c, MlaMode mode, const WeightValueBytes& wb) {
  const AttentionWeightCounts counts = CountAttentionWeights(c);
  const auto kv_b = static_cast<double>(counts.KvbDerived(mode));
  return static_cast<double>(counts.Decode(mode) - counts.KvbDerived(mode)) * wb.matrices + kv_b * wb.kv_b;
}

// RMSNorm weights of one layer: input, post-attention, q_a (when q_lora_rank), kv_a.
double LayerNormValues(const ModelConfig& c) {
  return 2.0 * c.hidden_size + (c.q_lora_rank ? *c.q_lora_rank : 0) + c.kv_lora_rank;
}

// Weight values of one expert: gate, up and down, each hidden_size × moe_intermediate_size.
double ExpertValues(const ModelConfig& c) { return 3.0 * c.hidden_size * c.moe_intermediate_size; }

// Router (f32) bytes of one MoE layer, with e_score_correction_bias under noaux_tc.
double RouterBytes(const ModelConfig& c) {
  double values = static_cast<double>(c.n_routed_experts) * c.hidden_size;
  if (c.HasScoreCorrectionBias()) values += c.n_routed_experts;
  return values * kF32Bytes;
}

// MLP / MoE FLOPs of one token in `layer`.
double FfnFlops(const ModelConfig& c, int64_t layer) {
  const double d = c.hidden_size;
  if (!c.IsMoeLayer(layer)) return 2.0 * 3.0 * d * c.intermediate_size;
  return 2.0 * ExpertValues(c) * (c.num_experts_per_tok + c.n_shared_experts) + 2.0 * c.n_routed_experts * d;
}

// FFN weight bytes one forward over `tokens` tokens reads in `layer`.
double FfnBytes(const ModelConfig& c, int64_t layer, int64_t tokens, double wb) {  // wb: matrices
  const double d = c.hidden_size;
  if (!c.IsMoeLayer(layer)) return 3.0 * d * c.intermediate_size * wb;
  const double experts = ExpectedExpertsTouched(c.n_routed_experts, c.num_experts_per_tok, tokens);
  return (experts + c.n_shared_experts) * ExpertValues(c) * wb + RouterBytes(c);
}

// Bytes per value of a view, its fp8 block scales included.
double ValueBytes(const WeightView& w) {
  return static_cast<double>(w.Bytes() + w.ScaleBytes()) / static_cast<double>(w.rows * w.cols);
}

}  // namespace

namespace {

// Bytes per value over every matrix of the "matrices" class (projections, dense MLP,
// routed and shared experts) of every layer: one figure, so a GGUF mix (Q4_K_M: Q4_K
// gate/up, Q6_K down) counts each type for the values it holds.
double MatrixValueBytes(const ModelWeights& weights) {
  double bytes = 0, values = 0;
  const auto add = [&](const WeightView& w) {
    if (w.data == nullptr || w.rows * w.cols == 0) return;
    bytes += static_cast<double>(w.Bytes() + w.ScaleBytes());
    values += static_cast<double>(w.rows * w.cols);
  };
  const auto add_mlp = [&](const MlpWeights& m) {
    add(m.gate_proj);
    add(m.up_proj);
    add(m.down_proj);
  };
  for (const LayerWeights& lw : weights.layers()) {
    if (lw.attn.q_a_proj) add(*lw.attn.q_a_proj);
    add(lw.attn.q_b_proj);
    add(lw.attn.kv_a_proj_with_mqa);
    add(lw.attn.o_proj);
    if (!lw.is_moe) add_mlp(lw.mlp);
    for (const MlpWeights& e : lw.moe.experts) add_mlp(e);
    if (lw.moe.shared) add_mlp(*lw.moe.shared);
  }
  return values > 0 ? bytes / values : 0;
}

}  // namespace

WeightValueBytes MeasureWeightValueBytes(const ModelWeights& weights) {
  const MlaWeights& attn = weights.layers().front().attn;
  WeightValueBytes wb;
  wb.matrices = MatrixValueBytes(weights);
  if (attn.w_q_uk) {
    wb.kv_b = ValueBytes(*attn.w_q_uk);
  } else if (!attn.w_uk_t.empty()) {
    wb.kv_b = ValueBytes(attn.w_uk_t.front());
  } else {
    wb.kv_b = ValueBytes(attn.kv_b_proj);
  }
  wb.embeddings = ValueBytes(weights.embed_tokens());
  wb.lm_head = ValueBytes(weights.lm_head());
  return wb;
}

double ExpectedExpertsTouched(int64_t experts, int64_t per_token, int64_t tokens) {
  if (experts <= 0 || per_token <= 0 || tokens <= 0) return 0;
  if (tokens == 1) return static_cast<double>(per_token);
  const double E = static_cast<double>(experts);
  return E * (1.0 - std::pow(1.0 - static_cast<double>(per_token) / E, static_cast<double>(tokens)));
}

TokenCosts DecodeCostsPerToken(const ModelConfig& c, MlaMode mode, int64_t batch, double context,
                               const WeightValueBytes& wb, int64_t kv_value_bytes) {
  const double d = c.hidden_size;
  const double S = context + 1;  // the new token attends to itself too
  const auto att = static_cast<double>(CountAttentionWeights(c).Decode(mode));
  const auto per_row = static_cast<double>(DecodeFlopsPerCachedRow(c, mode));
  double step_bytes = 0, flops = 0;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    step_bytes += AttentionBytes(c, mode, wb) + LayerNormValues(c) * kF32Bytes + FfnBytes(c, layer, batch, wb.matrices);
    flops += 2.0 * att + FfnFlops(c, layer) + S * per_row;
  }
  step_bytes += d * kF32Bytes + static_cast<double>(c.vocab_size) * d * wb.lm_head;  // final norm, lm_head
  step_bytes += static_cast<double>(batch) * d * wb.embeddings;                      // embedding rows
  flops += 2.0 * c.vocab_size * d;
  TokenCosts t;
  t.weight_bytes = step_bytes / static_cast<double>(batch);
  t.kv_bytes = static_cast<double>(c.num_hidden_layers) * S * static_cast<double>(LatentRowBytes(c, kv_value_bytes));
  t.flops = flops;
  return t;
}

SpeculativeStepBytes SpeculativeStepCosts(const ModelConfig& c, MlaMode mode, int64_t batch, int64_t drafts,
                                          double context, const WeightValueBytes& wb, int64_t kv_value_bytes) {
  SpeculativeStepBytes b;
  const double B = static_cast<double>(batch), d = c.hidden_size, V = static_cast<double>(c.vocab_size);
  b.plain = DecodeCostsPerToken(c, mode, batch, context, wb, kv_value_bytes).Bytes() * B;
  const int64_t rows = batch * (drafts + 1);
  b.verify =
      DecodeCostsPerToken(c, mode, rows, context + 0.5 * static_cast<double>(drafts), wb, kv_value_bytes).Bytes() *
      static_cast<double>(rows);
  // The MTP layer has a MoE layer's shapes (its index L is past first_k_dense_replace).
  const int64_t mtp_layer = c.num_hidden_layers;
  const double pass = AttentionBytes(c, mode, wb) + LayerNormValues(c) * kF32Bytes +
                      FfnBytes(c, mtp_layer, batch, wb.matrices) + 2 * d * d * wb.matrices  // eh_proj
                      + 3 * d * kF32Bytes                                                   // enorm, hnorm, head norm
                      + V * d * wb.lm_head + B * d * wb.embeddings +
                      B * (context + 1) * static_cast<double>(LatentRowBytes(c, kv_value_bytes));
  b.draft = static_cast<double>(drafts) * pass;
  return b;
}

TokenCosts PrefillCostsPerToken(const ModelConfig& c, int64_t prompt, const WeightValueBytes& wb,
                                int64_t kv_value_bytes) {
  const double P = static_cast<double>(prompt);
  const double d = c.hidden_size;
  const auto att =
      static_cast<double>(CountAttentionWeights(c).Decode(MlaMode::kNaive));  // q_a, kv_a, q_b, kv_b, o_proj
  const auto per_key = static_cast<double>(ComputeAttentionCoreFlops(c).naive);
  const double keys = (P + 1) / 2;  // causal: token t sees t + 1 keys
  double bytes = 0, flops = 0;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    bytes += AttentionBytes(c, MlaMode::kNaive, wb) + LayerNormValues(c) * kF32Bytes +
             FfnBytes(c, layer, prompt, wb.matrices);
    flops += 2.0 * att + FfnFlops(c, layer) + keys * per_key;
  }
  bytes += d * kF32Bytes + static_cast<double>(c.vocab_size) * d * wb.lm_head + P * d * wb.embeddings;
  flops += 2.0 * c.vocab_size * d / P;  // logits for the last row only
  TokenCosts t;
  t.weight_bytes = bytes / P;
  t.kv_bytes = static_cast<double>(c.num_hidden_layers) * static_cast<double>(LatentRowBytes(c, kv_value_bytes));
  t.flops = flops;
  return t;
}

namespace {

int64_t MoeLayers(const ModelConfig& c) {
  int64_t moe_layers = 0;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) moe_layers += c.IsMoeLayer(layer);
  return moe_layers;
}

// Data-parallel attention with tensor parallelism inside each replica, as rank 0 runs
// it: replica 0 holds rows / dp of the rows (one more if they do not divide), rank 0
// sends the first 1 / tp of them (rounded down) to the experts, and its replica's ranks
// all-reduce after every sublayer and all-gather lm_head's vocabulary slices.
ForwardCollectives HybridCollectivesOf(const ModelConfig& c, const ParallelLayout& layout, int64_t rows,
                                       int64_t vocab_align) {
  ForwardCollectives f;
  const int64_t P = layout.world_size(), T = layout.tp, d = c.hidden_size, fb = sizeof(float);
  const int64_t moe_layers = MoeLayers(c);
  const int64_t replica_rows = rows / layout.dp + (rows % layout.dp > 0 ? 1 : 0);
  const int64_t mine = replica_rows / T, others = rows - mine;
  const int64_t vocab_rank0 = VocabRanges(c, static_cast<int>(T), vocab_align)[0].count;
  // The MoE row counts, each MoE layer's rows, the logits' vocabulary slices.
  f.all_gather = {2 + moe_layers, (P - 1) * static_cast<int64_t>(sizeof(int64_t)) +
                                      moe_layers * (P - 1) * mine * d * fb + (T - 1) * replica_rows * vocab_rank0 * fb};
  f.reduce_scatter = {moe_layers, moe_layers * others * d * fb};
  f.all_reduce = {2 * c.num_hidden_layers,
                  2 * c.num_hidden_layers * AllReduceBytesSent(replica_rows * d, static_cast<int>(T))};
  return f;
}

}  // namespace

ForwardCollectives ForwardCollectivesOf(const ModelConfig& c, const ParallelLayout& layout, int64_t rows,
                                        int64_t vocab_align) {
  ForwardCollectives f;
  const int64_t P = layout.world_size(), d = c.hidden_size, fb = sizeof(float);
  if (P <= 1 || rows <= 0) return f;
  if (layout.dp > 1 && layout.tp > 1) return HybridCollectivesOf(c, layout, rows, vocab_align);
  if (layout.dp > 1) {
    const int64_t moe_layers = MoeLayers(c);
    // Rank q runs rows / dp rows, the first rows % dp ranks one more.
    const int64_t mine = rows / layout.dp + (rows % layout.dp > 0 ? 1 : 0), others = rows - mine;
    const int64_t count_bytes = (P - 1) * static_cast<int64_t>(sizeof(int64_t));
    // Token counts, each MoE layer's rows, then lm_head's: logit-row counts and final rows.
    f.all_gather = {3 + moe_layers, 2 * count_bytes + (moe_layers + 1) * (P - 1) * mine * d * fb};
    f.reduce_scatter = {moe_layers, moe_layers * others * d * fb};  // the others' rows' sums
    const int64_t vocab_rank0 = VocabRanges(c, static_cast<int>(P), vocab_align)[0].count;
    f.all_to_all = {1, others * vocab_rank0 * fb};  // rank 0's slice of the others' logits
    return f;
  }
  f.all_reduce = {2 * c.num_hidden_layers, 2 * c.num_hidden_layers * AllReduceBytesSent(rows * d, static_cast<int>(P))};
  const int64_t vocab_rank0 = VocabRanges(c, static_cast<int>(P), vocab_align)[0].count;
  f.all_gather = {1, (P - 1) * rows * vocab_rank0 * fb};
  return f;
}

}  // namespace latte
