// BuildModelCostReport: the cost model's figures and the memory plan's arithmetic
// gathered for one config; ModelCostReportJson: the report as one JSON object.
#include "bench/model_cost_report.h"

#include "dist/link_model.h"

#include <omp.h>

#include <cmath>
#include <utility>

#include "engine/memory_plan.h"

namespace latte {
namespace {

using nlohmann::json;

// How many layers are dense and how many MoE, and the first of each kind.
void CountLayerKinds(const ModelConfig& config, ModelCostReport& r) {
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    if (config.IsMoeLayer(layer)) {
      if (r.moe_layers++ == 0) r.first_moe = layer;
    } else if (r.dense_layers++ == 0) {
      r.first_dense = layer;
    }
  }
}

// The blocks and tokens latte's engine would hold in `memory_bytes` in every mode,
// beside the weights its loader holds, the scratch of the engine's largest step and
// the decompressed-prefix store, as engine/memory_plan's PlanMemory reserves them.
EngineFit FitEngine(const ModelConfig& config, const ModelCostOptions& options, int64_t memory_bytes) {
  EngineFit e;
  e.threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  e.scratch_bytes = EngineScratchBytes(config, options.scheduler, e.threads);
  e.decompressed_prefix_bytes = DecompressedPrefixBytes(config, memory_bytes, options.decompressed_prefix_gb);
  e.block_bytes = KvCache::BlockBytes(config.num_hidden_layers, config.LatentDim(), options.block_size, DType::kBF16);
  for (MlaMode mode : {MlaMode::kNaive, MlaMode::kAbsorbed, MlaMode::kMaterialized}) {
    const int64_t weights = HeldWeightBytes(config, mode, options.stored ? &*options.stored : nullptr);
    const int64_t blocks =
        KvBlocksInBudget(memory_bytes, weights, e.scratch_bytes + e.decompressed_prefix_bytes, e.block_bytes);
    e.modes.push_back({mode, weights, blocks, blocks * options.block_size});
  }
  return e;
}

json ComponentsJson(const WeightComponents& w) {
  return {{"attention", w.attention},           {"dense_mlp", w.dense_mlp},     {"routed_experts", w.routed_experts},
          {"shared_experts", w.shared_experts}, {"router", w.router},           {"norms", w.norms},
          {"embeddings", w.embeddings},         {"kv_b_bf16", w.kv_b_bf16},     {"w_uk_t", w.w_uk_t},
          {"materialized", w.materialized},     {"checkpoint", w.Checkpoint()}, {"total", w.Total()}};
}

json FitJson(const KvFit& fit) {
  return {{"weight_bytes", fit.weight_bytes}, {"free_bytes", fit.free_bytes}, {"tokens", fit.tokens}};
}

json ShapeJson(const ModelCostReport& r) {
  const ModelConfig& c = r.config;
  return {{"hidden_size", c.hidden_size},
          {"num_attention_heads", c.num_attention_heads},
          {"q_lora_rank", c.q_lora_rank ? json(*c.q_lora_rank) : json(nullptr)},
          {"kv_lora_rank", c.kv_lora_rank},
          {"qk_nope_head_dim", c.qk_nope_head_dim},
          {"qk_rope_head_dim", c.qk_rope_head_dim},
          {"v_head_dim", c.v_head_dim},
          {"num_hidden_layers", c.num_hidden_layers},
          {"dense_layers", r.dense_layers},
          {"moe_layers", r.moe_layers}};
}

json PerLayerParamsJson(const ModelConfig& config) {
  const AttentionWeightCounts counts = CountAttentionWeights(config);
  return {{"attention_projections", counts.Checkpoint()},
          {"kv_b", counts.kv_b},
          {"w_uk_t", counts.w_uk},
          {"w_q_uk", counts.w_q_uk},
          {"w_uv_o", counts.w_uv_o}};
}

// One entry per kind of layer present: its first layer's params and bytes in each mode.
json LayerKindsJson(const ModelCostReport& r) {
  json kinds = json::array();
  auto kind = [&](const char* name, int64_t count, int64_t first) {
    if (count == 0) return;
    json params, bytes;
    for (MlaMode mode : kMlaModesInPrintOrder) {
      params[std::string(MlaModeName(mode))] = ComponentsJson(r.Mode(mode).layer_params[first]);
      bytes[std::string(MlaModeName(mode))] = ComponentsJson(r.Mode(mode).layer_bytes[first]);
    }
    kinds.push_back({{"kind", name}, {"count", count}, {"first_layer", first}, {"params", params}, {"bytes", bytes}});
  };
  kind("dense", r.dense_layers, r.first_dense);
  kind("moe", r.moe_layers, r.first_moe);
  return kinds;
}

// Sets "model" (whole-model params and bytes per mode) and "per_gpu_weight_bytes".
void AddModelWeights(const ModelCostReport& r, json& j) {
  json model_params, model_bytes, per_gpu;
  for (MlaMode mode : kMlaModesInPrintOrder) {
    model_params[std::string(MlaModeName(mode))] = ComponentsJson(r.Mode(mode).model_params);
    model_bytes[std::string(MlaModeName(mode))] = ComponentsJson(r.Mode(mode).model_bytes);
    per_gpu[std::string(MlaModeName(mode))] = r.PerGpu(mode);
  }
  j["model"] = {{"params", model_params}, {"bytes", model_bytes}};
  j["per_gpu_weight_bytes"] = per_gpu;
}

json MaterializeExtraJson(const MaterializeExtra& extra) {
  return {{"per_layer", extra.per_layer},
          {"whole_model", extra.whole_model},
          {"per_gpu_tp", extra.per_gpu_tp},
          {"per_gpu_dp_attention", extra.per_gpu_dp_attention}};
}

json DecodeFlopsJson(const ModelCostReport& r) {
  auto decode = [&](int64_t scale) {
    return json{{"absorbed", r.decode.absorbed * scale},
                {"materialized", r.decode.materialized * scale},
                {"naive_fixed", r.decode.naive_fixed * scale},
                {"naive_per_cached_token", r.decode.naive_per_cached_token * scale},
                {"naive_at_context", r.decode.NaiveAt(r.options.context) * scale}};
  };
  return {{"per_layer", decode(1)}, {"whole_model", decode(r.config.num_hidden_layers)}};
}

json CoreFlopsJson(const ModelCostReport& r) {
  const int64_t layers = r.config.num_hidden_layers;
  return {{"per_layer", {{"absorbed", r.core.absorbed}, {"naive", r.core.naive}}},
          {"whole_model", {{"absorbed", r.core.absorbed * layers}, {"naive", r.core.naive * layers}}}};
}

json KvBytesJson(const KvCacheBytes& kv) {
  return {{"latent_per_layer", kv.latent_per_layer},
          {"latent_whole_model", kv.latent_model},
          {"mha_per_layer", kv.mha_per_layer},
          {"mha_whole_model", kv.mha_model}};
}

json KvFitJson(const ModelCostReport& r) {
  return {{"memory_bytes", *r.memory_bytes},
          {"absorbed", FitJson(r.fit_absorbed)},
          {"materialized", FitJson(r.fit_materialized)},
          {"token_ratio", r.fit_materialized.tokens > 0
                              ? json(static_cast<double>(r.fit_absorbed.tokens) / r.fit_materialized.tokens)
                              : json(nullptr)}};
}

json EngineFitJson(const EngineFit& e, int64_t block_size) {
  json fit = {{"scratch_bytes", e.scratch_bytes},
              {"decompressed_prefix_bytes", e.decompressed_prefix_bytes},
              {"block_bytes", e.block_bytes},
              {"block_size", block_size}};
  for (const EngineFit::Mode& m : e.modes) {
    fit[std::string(MlaModeName(m.mode))] = {
        {"weight_bytes", m.weight_bytes}, {"blocks", m.blocks}, {"tokens", m.tokens}};
  }
  return fit;
}

}  // namespace

json CollectivesJson(const ModelCostReport& r) {
  if (r.layout.world_size() <= 1) return nullptr;
  const ForwardCollectives& f = r.collectives;
  const auto cost = [](const CollectiveCost& c) { return json{{"calls", c.calls}, {"bytes_sent", c.bytes_sent}}; };
  json seconds;
  for (const LinkModel& link : LinkPresets()) {
    seconds[std::string(link.name)] = CollectiveSeconds(link, f.calls(), f.bytes_sent(), r.layout.world_size());
  }
  return {{"layout", LayoutName(r.layout)},   {"ranks", r.layout.world_size()},
          {"batch", r.options.batch},         {"all_reduce", cost(f.all_reduce)},
          {"all_gather", cost(f.all_gather)}, {"reduce_scatter", cost(f.reduce_scatter)},
          {"all_to_all", cost(f.all_to_all)}, {"seconds", seconds}};
}

ModelCostReport BuildModelCostReport(std::string source, const ModelConfig& config, const ModelCostOptions& options) {
  ModelCostReport r;
  r.source = std::move(source);
  r.config = config;
  r.options = options;
  const StoredCheckpoint* stored = options.stored ? &*options.stored : nullptr;
  r.naive = ComputeWeightCosts(config, MlaMode::kNaive, stored);
  r.absorbed = ComputeWeightCosts(config, MlaMode::kAbsorbed, stored);
  r.materialized = ComputeWeightCosts(config, MlaMode::kMaterialized, stored);
  CountLayerKinds(config, r);
  const int64_t attention_tp = options.dp_attention ? options.attention_tp : 1;
  r.parallel = {.gpus = options.tp, .dp_attention = options.dp_attention, .attention_tp = attention_tp};
  r.extra = ComputeMaterializeExtra(config, options.tp, attention_tp);
  r.decode = ComputeDecodeProjectionFlops(config);
  r.core = ComputeAttentionCoreFlops(config);
  r.kv = ComputeKvCacheBytes(config);
  r.per_gpu_naive = PerGpuBytes(r.naive.model_bytes, r.parallel);
  r.per_gpu_absorbed = PerGpuBytes(r.absorbed.model_bytes, r.parallel);
  r.per_gpu_materialized = PerGpuBytes(r.materialized.model_bytes, r.parallel);
  if (options.memory_gb) {
    r.memory_bytes = std::llround(*options.memory_gb * static_cast<double>(kBytesPerGB));
    r.fit_absorbed = FitKvCache(*r.memory_bytes, r.per_gpu_absorbed, r.kv.latent_model);
    r.fit_materialized = FitKvCache(*r.memory_bytes, r.per_gpu_materialized, r.kv.latent_model);
    r.engine_fit = FitEngine(config, options, *r.memory_bytes);
  }
  const int ranks = static_cast<int>(options.tp);
  r.layout = options.dp_attention ? ParallelLayout{static_cast<int>(attention_tp),
                                                   ranks / static_cast<int>(attention_tp), static_cast<int>(options.ep)}
                                  : ParallelLayout{ranks, 1, static_cast<int>(options.ep)};
  r.collectives = ForwardCollectivesOf(config, r.layout, options.batch);
  if (options.speculative_tokens > 0) {
    SpeculativeProjection& p = r.speculative.emplace();
    p.drafts = options.speculative_tokens;
    // fp8 releases: 1-byte linears (+ block scales, ~0.01%), kv_b_proj dequantized to
    // bf16, embeddings and lm_head bf16 (the loader's kKeep).
    WeightValueBytes wb = WeightValueBytes::Uniform(2);
    if (config.quantization) wb.matrices = 1;
    p.bytes = SpeculativeStepCosts(config, MlaMode::kAbsorbed, options.batch, p.drafts,
                                   static_cast<double>(options.context), wb, 2);
    for (int64_t j = 0; j < p.drafts && j < static_cast<int64_t>(options.acceptance.size()); ++j) {
      p.tokens_per_step += options.acceptance[j];
    }
    p.speedup = p.bytes.Speedup(p.tokens_per_step);
  }
  return r;
}

json ModelCostReportJson(const ModelCostReport& r) {
  const ModelConfig& c = r.config;
  json j;
  j["source"] = r.source;
  j["architecture"] = c.architecture;
  if (r.options.stored) {
    // The files' own types: bytes stored in each.
    json types = json::object();
    for (const auto& [name, t] : r.options.stored->tensors) {
      json& bytes = types[std::string(DTypeName(t.dtype))];
      bytes = (bytes.is_null() ? 0 : bytes.get<int64_t>()) + t.bytes;
    }
    j["checkpoint_dtype"] = "as_stored";
    j["stored_bytes_by_type"] = types;
  } else {
    j["checkpoint_dtype"] = c.quantization ? "fp8_e4m3" : "bf16";
  }
  j["bytes_per_gb"] = kBytesPerGB;
  j["tp"] = r.options.tp;
  j["dp_attention"] = r.options.dp_attention;
  j["attention_tp"] = r.options.dp_attention ? r.options.attention_tp : 1;
  j["context"] = r.options.context;
  j["memory_gb"] = r.options.memory_gb ? json(*r.options.memory_gb) : json(nullptr);
  j["collectives_per_decode_step"] = CollectivesJson(r);
  j["shape"] = ShapeJson(r);
  j["per_layer_params"] = PerLayerParamsJson(c);
  j["layer_kinds"] = LayerKindsJson(r);
  AddModelWeights(r, j);
  j["materialize_extra_bytes"] = MaterializeExtraJson(r.extra);
  j["decode_projection_flops_per_token"] = DecodeFlopsJson(r);
  j["attention_core_flops_per_cached_token"] = CoreFlopsJson(r);
  j["kv_cache_bytes_per_token"] = KvBytesJson(r.kv);
  j["kv_fit"] = r.memory_bytes ? KvFitJson(r) : json(nullptr);
  j["engine_fit"] = r.engine_fit ? EngineFitJson(*r.engine_fit, r.options.block_size) : json(nullptr);
  if (r.speculative) {
    const SpeculativeProjection& p = *r.speculative;
    j["speculative"] = {{"drafts", p.drafts},
                        {"batch", r.options.batch},
                        {"context", r.options.context},
                        {"acceptance", r.options.acceptance},
                        {"plain_step_bytes", p.bytes.plain},
                        {"verify_step_bytes", p.bytes.verify},
                        {"draft_bytes", p.bytes.draft},
                        {"tokens_per_step", p.tokens_per_step},
                        {"speedup", p.speedup}};
  } else {
    j["speculative"] = nullptr;
  }
  return j;
}

}  // namespace latte
