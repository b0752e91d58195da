// latte calc: memory and FLOPs of an MLA model in its three attention modes
// (docs/mla.md), from a config.json or a released preset. No weights are read.
//
//   latte calc (--config FILE | --preset v2|v2-lite|v3|r1) [--tp N] [--dp-attention]
//              [--memory-gb M] [--context C] [--json]
//
// GB = 1e9 bytes throughout. --json prints one object with these keys (stable):
//   source                  "preset r1" or the config path
//   architecture            config "architectures"[0]
//   checkpoint_dtype        "fp8_e4m3" (quantization_config present) or "bf16"
//   bytes_per_gb            1000000000
//   tp, dp_attention, context, memory_gb (null without --memory-gb)
//   shape                   hidden_size, num_attention_heads, q_lora_rank (null: q_proj),
//                           kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
//                           num_hidden_layers, dense_layers, moe_layers
//   per_layer_params        attention_projections (q_a+q_b|q_proj+kv_a+kv_b+o_proj, no norms),
//                           kv_b, w_uk_t, w_q_uk, w_uv_o
//   layer_kinds             [{kind "dense"|"moe", count, first_layer,
//                             params {naive|absorbed|materialized: components},
//                             bytes  {naive|absorbed|materialized: components}}]
//   model                   {params {mode: components}, bytes {mode: components}}
//     components: attention, dense_mlp, routed_experts, shared_experts, router, norms,
//                 embeddings, kv_b_bf16, w_uk_t, materialized, checkpoint, total
//   per_gpu_weight_bytes    {naive, absorbed, materialized} under tp / dp_attention
//   materialize_extra_bytes {per_layer, whole_model, per_gpu_tp, per_gpu_dp_attention}
//   decode_projection_flops_per_token
//                           {per_layer, whole_model}: {absorbed, materialized, naive_fixed,
//                            naive_per_cached_token, naive_at_context}
//   attention_core_flops_per_cached_token {per_layer, whole_model}: {absorbed, naive}
//   kv_cache_bytes_per_token {latent_per_layer, latent_whole_model, mha_per_layer, mha_whole_model}
//   kv_fit                  null without --memory-gb, else {memory_bytes,
//                           absorbed {weight_bytes, free_bytes, tokens}, materialized {...},
//                           token_ratio (absorbed / materialized tokens; null when 0)}
//   engine_fit              null without --memory-gb, else {scratch_bytes, block_bytes, block_size,
//                           naive|absorbed|materialized {weight_bytes, blocks, tokens}}: what
//                           latte's engine holds in that budget (one process, TP 1)
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "engine/memory_plan.h"
#include "model/config.h"
#include "model/cost_model.h"
#include "model/kv_cache.h"
#include "model/presets.h"

namespace latte::cli {
namespace {

using nlohmann::json;

struct CalcOptions {
  std::string config_path;
  std::string preset;
  int64_t tp = 1;
  bool dp_attention = false;
  std::optional<double> memory_gb;  // set from memory_gb_arg when --memory-gb is given
  double memory_gb_arg = 0;
  int64_t context = 4096;
  // latte's engine on this machine, for the --memory-gb table of what it serves.
  int64_t block_size = kDefaultKvBlockSize;
  SchedulerConfig scheduler;
  int threads = 0;  // 0: every core
  bool json = false;
};

// What `latte serve` / `generate` with the same --memory-gb log at start (one CPU
// process, TP 1): engine/memory_plan's arithmetic on the bytes latte's loader holds.
struct EngineFit {
  int64_t scratch_bytes = 0;
  int64_t block_bytes = 0;  // bf16 latent rows, every layer
  struct Mode {
    MlaMode mode;
    int64_t weight_bytes = 0, blocks = 0, tokens = 0;
  };
  std::vector<Mode> modes;  // naive, absorbed, materialized
};

// Everything calc prints, computed once.
struct CalcReport {
  std::string source;
  ModelConfig config;
  CalcOptions options;
  WeightCosts naive, absorbed, materialized;
  int64_t dense_layers = 0, moe_layers = 0;
  int64_t first_dense = -1, first_moe = -1;
  Parallelism parallel;
  MaterializeExtra extra;
  DecodeProjectionFlops decode;
  AttentionCoreFlops core;
  KvCacheBytes kv;
  int64_t per_gpu_naive = 0, per_gpu_absorbed = 0, per_gpu_materialized = 0;
  std::optional<int64_t> memory_bytes;
  KvFit fit_absorbed, fit_materialized;
  std::optional<EngineFit> engine_fit;  // with --memory-gb

  const WeightCosts& Mode(MlaMode mode) const {
    return mode == MlaMode::kNaive ? naive : mode == MlaMode::kAbsorbed ? absorbed : materialized;
  }
  int64_t PerGpu(MlaMode mode) const {
    return mode == MlaMode::kNaive      ? per_gpu_naive
           : mode == MlaMode::kAbsorbed ? per_gpu_absorbed
                                        : per_gpu_materialized;
  }
};

CalcReport BuildReport(std::string source, const ModelConfig& config, const CalcOptions& options) {
  CalcReport r;
  r.source = std::move(source);
  r.config = config;
  r.options = options;
  r.naive = ComputeWeightCosts(config, MlaMode::kNaive);
  r.absorbed = ComputeWeightCosts(config, MlaMode::kAbsorbed);
  r.materialized = ComputeWeightCosts(config, MlaMode::kMaterialized);
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    if (config.IsMoeLayer(layer)) {
      if (r.moe_layers++ == 0) r.first_moe = layer;
    } else if (r.dense_layers++ == 0) {
      r.first_dense = layer;
    }
  }
  r.parallel = {.gpus = options.tp, .dp_attention = options.dp_attention};
  r.extra = ComputeMaterializeExtra(config, options.tp);
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
    EngineFit e;
    e.scratch_bytes =
        EngineScratchBytes(config, options.scheduler, options.threads > 0 ? options.threads : omp_get_max_threads());
    e.block_bytes = KvCache::BlockBytes(config.num_hidden_layers, config.LatentDim(), options.block_size, DType::kBF16);
    for (MlaMode mode : {MlaMode::kNaive, MlaMode::kAbsorbed, MlaMode::kMaterialized}) {
      const int64_t weights = HeldWeightBytes(config, mode);
      const int64_t blocks = KvBlocksInBudget(*r.memory_bytes, weights, e.scratch_bytes, e.block_bytes);
      e.modes.push_back({mode, weights, blocks, blocks * options.block_size});
    }
    r.engine_fit = e;
  }
  return r;
}

// ---- human-readable output ----

std::string Commas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string Gb(int64_t bytes) { return Fixed(static_cast<double>(bytes) / kBytesPerGB, 2) + " GB"; }

std::string Flop(int64_t flops) {
  const double v = static_cast<double>(flops);
  if (std::abs(v) >= 1e12) return Fixed(v / 1e12, 2) + " TFLOP";
  if (std::abs(v) >= 1e9) return Fixed(v / 1e9, 2) + " GFLOP";
  if (std::abs(v) >= 1e6) return Fixed(v / 1e6, 1) + " MFLOP";
  return Fixed(v / 1e3, 1) + " kFLOP";
}

// Rows of cells; the first column left-aligned, the rest right-aligned. A row with
// one cell is a heading or note printed as is.
class Table {
 public:
  void Row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  void Print() const {
    std::vector<size_t> width;
    for (const auto& row : rows_) {
      if (row.size() < 2) continue;
      width.resize(std::max(width.size(), row.size()), 0);
      for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    }
    for (const auto& row : rows_) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) {
        if (row.size() < 2) {
          line = row[i];
          break;
        }
        const std::string pad(width[i] - row[i].size(), ' ');
        line += i == 0 ? row[i] + pad : "  " + pad + row[i];
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      std::printf("%s\n", line.c_str());
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

void PrintWeights(const CalcReport& r) {
  const WeightCosts& naive = r.Mode(MlaMode::kNaive);
  const WeightCosts& absorbed = r.Mode(MlaMode::kAbsorbed);
  const WeightCosts& mat = r.Mode(MlaMode::kMaterialized);
  struct Column {
    std::string title;
    int64_t layer;  // -1: whole model
  };
  std::vector<Column> columns;
  if (r.dense_layers > 0) {
    columns.push_back({"dense layer (x" + std::to_string(r.dense_layers) + ")", r.first_dense});
  }
  if (r.moe_layers > 0) {
    columns.push_back({"MoE layer (x" + std::to_string(r.moe_layers) + ")", r.first_moe});
  }
  columns.push_back({"whole model", -1});

  Table t;
  std::vector<std::string> header = {"Weight bytes"};
  for (const Column& c : columns) header.push_back(c.title);
  header.push_back("whole-model params");
  t.Row(header);
  // One row: the field of `costs` in every column, bytes then whole-model values.
  auto row = [&](const std::string& label, const WeightCosts& costs, auto field, bool per_layer) {
    std::vector<std::string> cells = {label};
    for (const Column& c : columns) {
      if (c.layer < 0) {
        cells.push_back(Commas(field(costs.model_bytes)));
      } else {
        cells.push_back(per_layer ? Commas(field(costs.layer_bytes[c.layer])) : "-");
      }
    }
    cells.push_back(Commas(field(costs.model_params)));
    t.Row(cells);
  };
  auto get = [](int64_t WeightComponents::*f) { return [f](const WeightComponents& w) { return w.*f; }; };
  row("  attention (checkpoint)", naive, get(&WeightComponents::attention), true);
  row("  dense MLP", naive, get(&WeightComponents::dense_mlp), true);
  row("  routed experts", naive, get(&WeightComponents::routed_experts), true);
  row("  shared experts", naive, get(&WeightComponents::shared_experts), true);
  row("  router", naive, get(&WeightComponents::router), true);
  row("  norms", naive, get(&WeightComponents::norms), true);
  row("  embeddings + lm_head", naive, get(&WeightComponents::embeddings), false);
  row(
      "  checkpoint total", naive, [](const WeightComponents& w) { return w.Checkpoint(); }, true);
  row("  + kv_b_proj as bf16 (fp8 only; all modes)", naive, get(&WeightComponents::kv_b_bf16), true);
  row("  + W_UK^T bf16 copy (absorbed, materialized)", absorbed, get(&WeightComponents::w_uk_t), true);
  row("  + W_Q_UK + W_UV_O bf16 (materialized)", mat, get(&WeightComponents::materialized), true);
  auto total = [](const WeightComponents& w) { return w.Total(); };
  row("naive total", naive, total, true);
  row("absorbed total", absorbed, total, true);
  row("materialized total", mat, total, true);
  t.Print();

  const char* layout = r.options.dp_attention ? " with DP attention (attention replicated)" : "";
  Table g;
  g.Row({"Weight bytes per GPU, TP " + std::to_string(r.options.tp) + layout, "bytes", "GB"});
  for (MlaMode mode : kMlaModesInPrintOrder) {
    const int64_t bytes = r.PerGpu(mode);
    g.Row({"  " + std::string(MlaModeName(mode)), Commas(bytes), Gb(bytes)});
  }
  std::printf("\n");
  g.Print();
}

void PrintMaterializeExtra(const CalcReport& r) {
  const std::string tp = std::to_string(r.options.tp);
  Table t;
  t.Row({"Extra bytes of materializing (W_Q_UK + W_UV_O, bf16)", "bytes", "GB"});
  t.Row({"  per layer", Commas(r.extra.per_layer), Gb(r.extra.per_layer)});
  t.Row({"  whole model", Commas(r.extra.whole_model), Gb(r.extra.whole_model)});
  t.Row({"  per GPU, TP " + tp + " (heads sharded: / " + tp + ")", Commas(r.extra.per_gpu_tp), Gb(r.extra.per_gpu_tp)});
  t.Row({"  per GPU, DP attention (replicated: x 1 per replica)", Commas(r.extra.per_gpu_dp_attention),
         Gb(r.extra.per_gpu_dp_attention)});
  t.Print();
}

void PrintFlops(const CalcReport& r) {
  const int64_t layers = r.config.num_hidden_layers;
  const int64_t context = r.options.context;
  const std::string c = std::to_string(context);
  Table t;
  t.Row({"Decode FLOPs per token, attention projections (after c_q, before residual)", "per layer", "whole model", ""});
  auto row = [&](const std::string& label, int64_t per_layer) {
    t.Row({label, Commas(per_layer), Commas(per_layer * layers), Flop(per_layer * layers)});
  };
  row("  absorbed: 2(q_b + W_UK bmm + W_UV bmm + o_proj)", r.decode.absorbed);
  row("  materialized: 2(W_Q_UK + q_b rope rows + W_UV_O)", r.decode.materialized);
  row("  naive at context C=" + c + ": 2(q_b + o_proj) + 2C*H(d_n+d_v)d_c", r.decode.NaiveAt(context));
  row("    of which 2(q_b + o_proj)", r.decode.naive_fixed);
  row("    of which kv_b decompression, per cached token", r.decode.naive_per_cached_token);
  if (r.decode.absorbed > 0) {
    t.Row({"  materialized / absorbed: " + Fixed(static_cast<double>(r.decode.materialized) / r.decode.absorbed, 2) +
           "x"});
  }
  t.Row({""});
  t.Row(
      {"Attention-core FLOPs per token (scores + weighted sum)", "per cached token, layer", "whole model, C=" + c, ""});
  auto core = [&](const std::string& label, int64_t per_cached) {
    const int64_t at_c = per_cached * layers * context;
    t.Row({label, Commas(per_cached), Commas(at_c), Flop(at_c)});
  };
  core("  absorbed/materialized: 2H(d_c+d_r) + 2H*d_c", r.core.absorbed);
  core("  naive: 2H(d_n+d_r) + 2H*d_v (after decompression)", r.core.naive);
  t.Print();
}

void PrintKv(const CalcReport& r) {
  Table t;
  t.Row({"KV cache bytes per token (bf16)", "per layer", "whole model"});
  t.Row({"  latent MLA cache: (d_c+d_r)*2", Commas(r.kv.latent_per_layer), Commas(r.kv.latent_model)});
  t.Row({"  plain MHA cache, for comparison: H(d_n+d_r+d_v)*2", Commas(r.kv.mha_per_layer), Commas(r.kv.mha_model)});
  t.Print();
  if (r.kv.latent_model > 0) {
    std::printf("  MHA / latent: %sx\n", Fixed(static_cast<double>(r.kv.mha_model) / r.kv.latent_model, 1).c_str());
  }
}

void PrintFit(const CalcReport& r) {
  std::string layout = "TP " + std::to_string(r.options.tp);
  if (r.options.dp_attention) layout += ", DP attention";
  Table t;
  t.Row({"KV tokens per GPU in " + Fixed(*r.options.memory_gb, 2) + " GB (" + layout + ")", "weight bytes",
         "free bytes", "tokens"});
  t.Row({"  absorbed", Commas(r.fit_absorbed.weight_bytes), Commas(r.fit_absorbed.free_bytes),
         Commas(r.fit_absorbed.tokens)});
  t.Row({"  materialized", Commas(r.fit_materialized.weight_bytes), Commas(r.fit_materialized.free_bytes),
         Commas(r.fit_materialized.tokens)});
  t.Print();
  if (r.fit_absorbed.free_bytes <= 0) {
    std::printf("  the weights alone exceed %s GB per GPU in both modes: raise --tp or --memory-gb\n",
                Fixed(*r.options.memory_gb, 2).c_str());
  } else if (r.fit_materialized.tokens == 0) {
    std::printf("  absorbed / materialized tokens: materialized fits no KV cache\n");
  } else {
    std::printf("  absorbed / materialized tokens: %sx\n",
                Fixed(static_cast<double>(r.fit_absorbed.tokens) / r.fit_materialized.tokens, 2).c_str());
  }
}

void PrintEngineFit(const CalcReport& r) {
  const EngineFit& e = *r.engine_fit;
  Table t;
  t.Row({"latte's engine in " + Fixed(*r.options.memory_gb, 2) + " GB (one process; scratch " +
             Commas(e.scratch_bytes) + ", blocks of " + std::to_string(r.options.block_size) + " tokens)",
         "weight bytes", "KV blocks", "tokens"});
  for (const EngineFit::Mode& m : e.modes) {
    t.Row({"  " + std::string(MlaModeName(m.mode)), Commas(m.weight_bytes), Commas(m.blocks), Commas(m.tokens)});
  }
  t.Print();
  std::printf(
      "  (scratch for --max-num-batched-tokens %lld, --max-num-seqs %lld, %d threads: what `latte serve` "
      "logs at start)\n",
      static_cast<long long>(r.options.scheduler.max_num_batched_tokens),
      static_cast<long long>(r.options.scheduler.max_num_seqs),
      r.options.threads > 0 ? r.options.threads : omp_get_max_threads());
}

void PrintHuman(const CalcReport& r) {
  const ModelConfig& c = r.config;
  std::printf("latte calc: %s (%s)\n", r.source.c_str(), c.architecture.c_str());
  std::printf(
      "  d=%lld H=%lld d_cq=%s d_c=%lld d_n=%lld d_r=%lld d_v=%lld L=%lld "
      "(%lld dense + %lld MoE layers), %lld routed + %lld shared experts\n",
      static_cast<long long>(c.hidden_size), static_cast<long long>(c.num_attention_heads),
      c.q_lora_rank ? std::to_string(*c.q_lora_rank).c_str() : "null", static_cast<long long>(c.kv_lora_rank),
      static_cast<long long>(c.qk_nope_head_dim), static_cast<long long>(c.qk_rope_head_dim),
      static_cast<long long>(c.v_head_dim), static_cast<long long>(c.num_hidden_layers),
      static_cast<long long>(r.dense_layers), static_cast<long long>(r.moe_layers),
      static_cast<long long>(c.n_routed_experts), static_cast<long long>(c.n_shared_experts));
  if (c.quantization) {
    std::printf(
        "  checkpoint: fp8 e4m3 linears (1 B) + f32 scale_inv per %lldx%lld block; "
        "embeddings, router, norms bf16\n",
        static_cast<long long>(c.quantization->block_rows), static_cast<long long>(c.quantization->block_cols));
  } else {
    std::printf("  checkpoint: bf16 (no quantization_config)\n");
  }
  std::printf(
      "  derived at load, bf16: %sa transposed copy of W_UK (W_UK^T, H*d_n*d_c per layer)\n"
      "  in absorbed and materialized; W_Q_UK and W_UV_O in materialized\n",
      c.quantization ? "kv_b_proj dequantized for the bmm (every mode);\n  " : "");
  std::printf("  GB = 1e9 bytes\n\n");
  PrintWeights(r);
  std::printf("\n");
  PrintMaterializeExtra(r);
  std::printf("\n");
  PrintFlops(r);
  std::printf("\n");
  PrintKv(r);
  if (r.memory_bytes) {
    std::printf("\n");
    PrintFit(r);
    std::printf("\n");
    PrintEngineFit(r);
  }
}

// ---- JSON output ----

json ComponentsJson(const WeightComponents& w) {
  return {{"attention", w.attention},           {"dense_mlp", w.dense_mlp},     {"routed_experts", w.routed_experts},
          {"shared_experts", w.shared_experts}, {"router", w.router},           {"norms", w.norms},
          {"embeddings", w.embeddings},         {"kv_b_bf16", w.kv_b_bf16},     {"w_uk_t", w.w_uk_t},
          {"materialized", w.materialized},     {"checkpoint", w.Checkpoint()}, {"total", w.Total()}};
}

json FitJson(const KvFit& fit) {
  return {{"weight_bytes", fit.weight_bytes}, {"free_bytes", fit.free_bytes}, {"tokens", fit.tokens}};
}

json ReportJson(const CalcReport& r) {
  const ModelConfig& c = r.config;
  const int64_t layers = c.num_hidden_layers;
  json j;
  j["source"] = r.source;
  j["architecture"] = c.architecture;
  j["checkpoint_dtype"] = c.quantization ? "fp8_e4m3" : "bf16";
  j["bytes_per_gb"] = kBytesPerGB;
  j["tp"] = r.options.tp;
  j["dp_attention"] = r.options.dp_attention;
  j["context"] = r.options.context;
  j["memory_gb"] = r.options.memory_gb ? json(*r.options.memory_gb) : json(nullptr);
  j["shape"] = {{"hidden_size", c.hidden_size},
                {"num_attention_heads", c.num_attention_heads},
                {"q_lora_rank", c.q_lora_rank ? json(*c.q_lora_rank) : json(nullptr)},
                {"kv_lora_rank", c.kv_lora_rank},
                {"qk_nope_head_dim", c.qk_nope_head_dim},
                {"qk_rope_head_dim", c.qk_rope_head_dim},
                {"v_head_dim", c.v_head_dim},
                {"num_hidden_layers", layers},
                {"dense_layers", r.dense_layers},
                {"moe_layers", r.moe_layers}};
  const AttentionParams p = ComputeAttentionParams(c);
  j["per_layer_params"] = {{"attention_projections", p.Checkpoint()},
                           {"kv_b", p.kv_b},
                           {"w_uk_t", p.w_uk},
                           {"w_q_uk", p.w_q_uk},
                           {"w_uv_o", p.w_uv_o}};
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
  j["layer_kinds"] = kinds;
  json model_params, model_bytes, per_gpu;
  for (MlaMode mode : kMlaModesInPrintOrder) {
    model_params[std::string(MlaModeName(mode))] = ComponentsJson(r.Mode(mode).model_params);
    model_bytes[std::string(MlaModeName(mode))] = ComponentsJson(r.Mode(mode).model_bytes);
    per_gpu[std::string(MlaModeName(mode))] = r.PerGpu(mode);
  }
  j["model"] = {{"params", model_params}, {"bytes", model_bytes}};
  j["per_gpu_weight_bytes"] = per_gpu;
  j["materialize_extra_bytes"] = {{"per_layer", r.extra.per_layer},
                                  {"whole_model", r.extra.whole_model},
                                  {"per_gpu_tp", r.extra.per_gpu_tp},
                                  {"per_gpu_dp_attention", r.extra.per_gpu_dp_attention}};
  auto decode = [&](int64_t scale) {
    return json{{"absorbed", r.decode.absorbed * scale},
                {"materialized", r.decode.materialized * scale},
                {"naive_fixed", r.decode.naive_fixed * scale},
                {"naive_per_cached_token", r.decode.naive_per_cached_token * scale},
                {"naive_at_context", r.decode.NaiveAt(r.options.context) * scale}};
  };
  j["decode_projection_flops_per_token"] = {{"per_layer", decode(1)}, {"whole_model", decode(layers)}};
  j["attention_core_flops_per_cached_token"] = {
      {"per_layer", {{"absorbed", r.core.absorbed}, {"naive", r.core.naive}}},
      {"whole_model", {{"absorbed", r.core.absorbed * layers}, {"naive", r.core.naive * layers}}}};
  j["kv_cache_bytes_per_token"] = {{"latent_per_layer", r.kv.latent_per_layer},
                                   {"latent_whole_model", r.kv.latent_model},
                                   {"mha_per_layer", r.kv.mha_per_layer},
                                   {"mha_whole_model", r.kv.mha_model}};
  if (r.memory_bytes) {
    j["kv_fit"] = {{"memory_bytes", *r.memory_bytes},
                   {"absorbed", FitJson(r.fit_absorbed)},
                   {"materialized", FitJson(r.fit_materialized)},
                   {"token_ratio", r.fit_materialized.tokens > 0
                                       ? json(static_cast<double>(r.fit_absorbed.tokens) / r.fit_materialized.tokens)
                                       : json(nullptr)}};
    const EngineFit& e = *r.engine_fit;
    json fit = {
        {"scratch_bytes", e.scratch_bytes}, {"block_bytes", e.block_bytes}, {"block_size", r.options.block_size}};
    for (const EngineFit::Mode& m : e.modes) {
      fit[std::string(MlaModeName(m.mode))] = {
          {"weight_bytes", m.weight_bytes}, {"blocks", m.blocks}, {"tokens", m.tokens}};
    }
    j["engine_fit"] = fit;
  } else {
    j["kv_fit"] = nullptr;
    j["engine_fit"] = nullptr;
  }
  return j;
}

void Fail(const std::string& message) { ExitOnError("calc", Status::InvalidArgument(message)); }

void RunCalc(const CalcOptions& options, const CLI::App& cmd) {
  if (options.config_path.empty() == options.preset.empty()) {
    Fail("give exactly one of --config FILE or --preset " + PresetList());
    return;
  }
  if (Status s = RefuseUnless(cmd, options.memory_gb.has_value(),
                              {"--block-size", "--max-num-batched-tokens", "--max-num-seqs", "--threads"},
                              "without --memory-gb (it sizes the engine table)");
      !s.ok()) {
    return Fail(s.message());
  }
  if (options.tp < 1) return Fail("--tp must be at least 1, got " + std::to_string(options.tp));
  if (options.context < 0) {
    return Fail("--context must be >= 0, got " + std::to_string(options.context));
  }
  if (options.memory_gb && !(*options.memory_gb > 0)) {
    return Fail("--memory-gb must be > 0, got " + Fixed(*options.memory_gb, 2));
  }
  Result<ModelConfig> config =
      options.preset.empty() ? ModelConfig::FromFile(options.config_path) : ReleasedConfig(options.preset);
  if (!config.ok()) return Fail(config.status().message());
  const std::string source = options.preset.empty() ? options.config_path : "preset " + options.preset;
  const CalcReport report = BuildReport(source, *config, options);
  if (options.json) {
    std::printf("%s\n", ReportJson(report).dump(2).c_str());
  } else {
    PrintHuman(report);
  }
}

}  // namespace

void AddCalcCommand(CLI::App& app) {
  auto options = std::make_shared<CalcOptions>();
  CLI::App* calc =
      app.add_subcommand("calc", "Memory and FLOPs of an MLA model in its naive, absorbed and materialized modes");
  calc->add_option("--config", options->config_path, "config.json of a checkpoint");
  calc->add_option("--preset", options->preset, "released shapes: " + PresetList())->check(OneOf(PresetNames()));
  calc->add_option("--tp", options->tp, "tensor-parallel GPUs (weights split N ways)")
      ->check(IntIn(1, 1 << 16))
      ->capture_default_str();
  calc->add_flag("--dp-attention", options->dp_attention,
                 "attention replicated on every GPU (only MoE/MLP/embeddings split)");
  CLI::Option* memory_gb = calc->add_option("--memory-gb", options->memory_gb_arg,
                                            "GPU memory in GB (1e9 bytes): how many KV tokens fit per GPU")
                               ->check(NumberIn(0, 1e9, /*lo_open=*/true));
  calc->add_option("--context", options->context, "cached tokens for the naive-mode FLOPs")
      ->check(IntIn(0, 1 << 30))
      ->capture_default_str();
  calc->add_option("--block-size", options->block_size, "latte's KV blocks, for the --memory-gb engine table")
      ->check(IntIn(1, 4096))
      ->capture_default_str();
  calc->add_option("--max-num-batched-tokens", options->scheduler.max_num_batched_tokens,
                   "latte's engine step, for the --memory-gb engine table's scratch")
      ->check(IntIn(1, 1 << 24))
      ->capture_default_str();
  calc->add_option("--max-num-seqs", options->scheduler.max_num_seqs,
                   "latte's running sequences, for the --memory-gb engine table's scratch")
      ->check(IntIn(1, 1 << 20))
      ->capture_default_str();
  AddThreadsOption(*calc, options->threads)
      ->description("threads, for the --memory-gb engine table's scratch (default: every core)");
  calc->add_flag("--json", options->json, "print one JSON object instead of tables");
  calc->callback([options, memory_gb, calc] {
    if (memory_gb->count() > 0) options->memory_gb = options->memory_gb_arg;
    RunCalc(*options, *calc);
  });
}

}  // namespace latte::cli
