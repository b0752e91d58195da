// latte calc: memory and FLOPs of an MLA model in its three attention modes
// (docs/mla.md), from a config.json or a released preset. No weights are read. The
// figures are bench/model_cost_report.h's report; this file checks the flags, builds the
// report and prints it as tables, or as the report's JSON (its keys are listed there).
//
//   latte calc (--config FILE | --preset tiny|v2|v2-lite|v3|r1) [--tp N] [--dp-attention]
//              [--memory-gb M] [--context C] [--json]
//
// GB = 1e9 bytes throughout.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/model_cost_report.h"
#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "dist/link_model.h"
#include "engine/model_files.h"
#include "model/config.h"
#include "model/cost_model.h"
#include "model/presets.h"

namespace latte::cli {
namespace {

// The flags: where the config comes from, the report's options, the output's form.
struct CalcArgs {
  std::string model_path;
  std::string config_path;
  std::string preset;
  ModelCostOptions report;  // report.memory_gb set from memory_gb_arg when --memory-gb is given
  double memory_gb_arg = 0;
  int64_t dp = 1;  // --dp N: data-parallel attention over N ranks
  bool json = false;
};

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

void PrintWeights(const ModelCostReport& r) {
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
  row("  + kv_b_proj dequantized (fp8, GGUF; all modes)", naive, get(&WeightComponents::kv_b_bf16), true);
  row("  + W_UK^T bf16 copy (absorbed, materialized)", absorbed, get(&WeightComponents::w_uk_t), true);
  row("  + W_Q_UK + W_UV_O bf16 (materialized)", mat, get(&WeightComponents::materialized), true);
  auto total = [](const WeightComponents& w) { return w.Total(); };
  row("naive total", naive, total, true);
  row("absorbed total", absorbed, total, true);
  row("materialized total", mat, total, true);
  t.Print();

  const std::string layout =
      !r.options.dp_attention ? ""
      : r.options.attention_tp == 1
          ? " with DP attention (attention replicated)"
          : " with DP attention (attention split " + std::to_string(r.options.attention_tp) + " ways in each replica)";
  Table g;
  g.Row({"Weight bytes per GPU, TP " + std::to_string(r.options.tp) + layout, "bytes", "GB"});
  for (MlaMode mode : kMlaModesInPrintOrder) {
    const int64_t bytes = r.PerGpu(mode);
    g.Row({"  " + std::string(MlaModeName(mode)), Commas(bytes), Gb(bytes)});
  }
  std::printf("\n");
  g.Print();
}

void PrintMaterializeExtra(const ModelCostReport& r) {
  const std::string tp = std::to_string(r.options.tp);
  Table t;
  t.Row({"Extra bytes of materializing (W_Q_UK + W_UV_O, bf16)", "bytes", "GB"});
  t.Row({"  per layer", Commas(r.extra.per_layer), Gb(r.extra.per_layer)});
  t.Row({"  whole model", Commas(r.extra.whole_model), Gb(r.extra.whole_model)});
  t.Row({"  per GPU, TP " + tp + " (heads sharded: / " + tp + ")", Commas(r.extra.per_gpu_tp), Gb(r.extra.per_gpu_tp)});
  t.Row({"  per GPU, DP attention (x 1 per replica / " + std::to_string(r.parallel.attention_tp) + " ranks in it)",
         Commas(r.extra.per_gpu_dp_attention), Gb(r.extra.per_gpu_dp_attention)});
  t.Print();
}

void PrintFlops(const ModelCostReport& r) {
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

void PrintKv(const ModelCostReport& r) {
  Table t;
  t.Row({"KV cache bytes per token (bf16)", "per layer", "whole model"});
  t.Row({"  latent MLA cache: (d_c+d_r)*2", Commas(r.kv.latent_per_layer), Commas(r.kv.latent_model)});
  t.Row({"  plain MHA cache, for comparison: H(d_n+d_r+d_v)*2", Commas(r.kv.mha_per_layer), Commas(r.kv.mha_model)});
  t.Print();
  if (r.kv.latent_model > 0) {
    std::printf("  MHA / latent: %sx\n", Fixed(static_cast<double>(r.kv.mha_model) / r.kv.latent_model, 1).c_str());
  }
}

void PrintFit(const ModelCostReport& r) {
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

void PrintCollectives(const ModelCostReport& r) {
  const ForwardCollectives& f = r.collectives;
  const int ranks = r.layout.world_size();
  Table t;
  t.Row({"Collectives per decode step, " + LayoutName(r.layout) + ", batch " + std::to_string(r.options.batch) +
             " (rank 0 sends)",
         "calls", "bytes"});
  const auto row = [&](const char* name, const CollectiveCost& c) {
    if (c.calls > 0) t.Row({std::string("  ") + name, Commas(c.calls), Commas(c.bytes_sent)});
  };
  row("all-reduce (after attention and FFN)", f.all_reduce);
  row(r.layout.dp > 1 && r.layout.tp > 1 ? "all-gather (counts, MoE rows, logits)"
      : r.layout.dp > 1                  ? "all-gather (counts, MoE rows, final rows)"
                                         : "all-gather (logits)",
      f.all_gather);
  row("reduce-scatter (MoE sums)", f.reduce_scatter);
  row("all-to-all (logits of each rank's rows)", f.all_to_all);
  t.Print();
  Table links;
  links.Row({"  projected time in them per step", "link", "ms"});
  for (const LinkModel& link : LinkPresets()) {
    links.Row({"  " + std::string(link.describe), std::string(link.name),
               Fixed(1e3 * CollectiveSeconds(link, f.calls(), f.bytes_sent(), ranks), 3)});
  }
  links.Print();
}

void PrintEngineFit(const ModelCostReport& r) {
  const EngineFit& e = *r.engine_fit;
  Table t;
  t.Row({"latte's engine in " + Fixed(*r.options.memory_gb, 2) + " GB (one process; scratch " +
             Commas(e.scratch_bytes) + ", decompressed prefix " + Commas(e.decompressed_prefix_bytes) + ", blocks of " +
             std::to_string(r.options.block_size) + " tokens)",
         "weight bytes", "KV blocks", "tokens"});
  for (const EngineFit::Mode& m : e.modes) {
    t.Row({"  " + std::string(MlaModeName(m.mode)), Commas(m.weight_bytes), Commas(m.blocks), Commas(m.tokens)});
  }
  t.Print();
  std::printf(
      "  (scratch for --max-num-batched-tokens %lld, --max-num-seqs %lld, %d threads: what `latte serve` "
      "logs at start)\n",
      static_cast<long long>(r.options.scheduler.max_num_batched_tokens),
      static_cast<long long>(r.options.scheduler.max_num_seqs), e.threads);
}

// " Q4_K 1.20 GB, Q6_K 0.31 GB, F32 0.01 GB": the stored bytes by type, most first.
std::string StoredTypes(const StoredCheckpoint& stored) {
  std::map<DType, int64_t> by_type;
  for (const auto& [name, t] : stored.tensors) by_type[t.dtype] += t.bytes;
  std::vector<std::pair<DType, int64_t>> sorted(by_type.begin(), by_type.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (const auto& [dtype, bytes] : sorted)
    out += (out.empty() ? " " : ", ") + std::string(DTypeName(dtype)) + " " + Gb(bytes);
  return out;
}

void PrintSpeculative(const ModelCostReport& r) {
  const SpeculativeProjection& p = *r.speculative;
  std::printf("Speculative decoding with the MTP layer, %lld draft%s, absorbed, batch %lld, context %lld\n",
              static_cast<long long>(p.drafts), p.drafts == 1 ? "" : "s", static_cast<long long>(r.options.batch),
              static_cast<long long>(r.options.context));
  std::printf("  bytes read per step: plain decode %s, verify (batch x %lld rows) %s = %sx, drafts %s\n",
              Gb(std::llround(p.bytes.plain)).c_str(), static_cast<long long>(p.drafts + 1),
              Gb(std::llround(p.bytes.verify)).c_str(), Fixed(p.bytes.verify / p.bytes.plain, 3).c_str(),
              Gb(std::llround(p.bytes.draft)).c_str());
  std::printf("  tokens per sequence step %s (acceptance by position:", Fixed(p.tokens_per_step, 3).c_str());
  for (double a : r.options.acceptance) std::printf(" %s", Fixed(a, 3).c_str());
  std::printf("): %sx the plain decode's tok/s when bandwidth-bound\n", Fixed(p.speedup, 2).c_str());
}

void PrintHuman(const ModelCostReport& r) {
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
  if (r.options.stored) {
    std::printf("  checkpoint: as its files store it:%s\n", StoredTypes(*r.options.stored).c_str());
  } else if (c.quantization) {
    std::printf(
        "  checkpoint: fp8 e4m3 linears (1 B) + f32 scale_inv per %lldx%lld block; "
        "embeddings, router, norms bf16\n",
        static_cast<long long>(c.quantization->block_rows), static_cast<long long>(c.quantization->block_cols));
  } else {
    std::printf("  checkpoint: bf16 (no quantization_config)\n");
  }
  const WeightComponents& derived = r.absorbed.model_params;
  const bool f32 = derived.w_uk_t > 0 && r.absorbed.model_bytes.w_uk_t == 4 * derived.w_uk_t;
  std::printf(
      "  derived at load, %s: %sa transposed copy of W_UK (W_UK^T, H*d_n*d_c per layer)\n"
      "  in absorbed and materialized; W_Q_UK and W_UV_O in materialized\n",
      f32 ? "f32" : "bf16", derived.kv_b_bf16 > 0 ? "kv_b_proj dequantized for the bmm (every mode);\n  " : "");
  std::printf("  GB = 1e9 bytes\n\n");
  PrintWeights(r);
  std::printf("\n");
  PrintMaterializeExtra(r);
  std::printf("\n");
  PrintFlops(r);
  std::printf("\n");
  PrintKv(r);
  if (r.layout.world_size() > 1) {
    std::printf("\n");
    PrintCollectives(r);
  }
  if (r.memory_bytes) {
    std::printf("\n");
    PrintFit(r);
    std::printf("\n");
    PrintEngineFit(r);
  }
  if (r.speculative) {
    std::printf("\n");
    PrintSpeculative(r);
  }
}

void Fail(const std::string& message) { ExitOnError("calc", Status::InvalidArgument(message)); }

void RunCalc(const CalcArgs& args, const CLI::App& cmd) {
  if (args.config_path.empty() + args.preset.empty() + args.model_path.empty() != 2) {
    Fail("give exactly one of --model PATH, --config FILE or --preset " + PresetList());
    return;
  }
  if (Status s = RefuseUnless(
          cmd, args.report.memory_gb.has_value(),
          {"--block-size", "--max-num-batched-tokens", "--max-num-seqs", "--threads", "--decompressed-prefix-gb"},
          "without --memory-gb (it sizes the engine table)");
      !s.ok()) {
    return Fail(s.message());
  }
  if (args.report.tp < 1) return Fail("--tp must be at least 1, got " + std::to_string(args.report.tp));
  CalcArgs resolved = args;
  if (args.dp > 1) {  // dp replicas of tp ranks each
    resolved.report.attention_tp = args.report.tp;
    resolved.report.tp = args.dp * args.report.tp;
    resolved.report.dp_attention = true;
  }
  const int64_t ranks = resolved.report.tp;
  if (args.report.ep != 1 && args.report.ep != ranks) {
    return Fail("--ep " + std::to_string(args.report.ep) + " must be 1 or the number of ranks, " +
                std::to_string(ranks));
  }
  if (args.report.context < 0) {
    return Fail("--context must be >= 0, got " + std::to_string(args.report.context));
  }
  if (args.report.memory_gb && !(*args.report.memory_gb > 0)) {
    return Fail("--memory-gb must be > 0, got " + Fixed(*args.report.memory_gb, 2));
  }
  std::string source = args.config_path;
  Result<ModelConfig> config = [&]() -> Result<ModelConfig> {
    if (!args.preset.empty()) {
      source = "preset " + args.preset;
      return ReleasedConfig(args.preset);
    }
    if (args.model_path.empty()) return ModelConfig::FromFile(args.config_path);
    source = args.model_path;
    LATTE_ASSIGN_OR_RETURN(const ModelFiles files, ModelFiles::Find(args.model_path));
    LATTE_ASSIGN_OR_RETURN(ModelConfig c, files.Config());
    LATTE_ASSIGN_OR_RETURN(resolved.report.stored, files.StoredTensors(c));
    return c;
  }();
  if (!config.ok()) return Fail(config.status().message());
  const ModelCostReport report = BuildModelCostReport(source, *config, resolved.report);
  if (args.json) {
    std::printf("%s\n", ModelCostReportJson(report).dump(2).c_str());
  } else {
    PrintHuman(report);
  }
}

}  // namespace

void AddCalcCommand(CLI::App& app) {
  auto args = std::make_shared<CalcArgs>();
  CLI::App* calc =
      app.add_subcommand("calc", "Memory and FLOPs of an MLA model in its naive, absorbed and materialized modes");
  calc->add_option("--model", args->model_path,
                   "a checkpoint (Hugging Face directory or GGUF file): its config and its tensors' stored bytes");
  calc->add_option("--config", args->config_path,
                   "config.json of a checkpoint (release dtypes: bf16, or fp8 "
                   "with quantization_config)");
  calc->add_option("--preset", args->preset, "released shapes: " + PresetList())->check(OneOf(PresetNames()));
  calc->add_option("--tp", args->report.tp, "tensor-parallel GPUs (weights split N ways)")
      ->check(IntIn(1, 1 << 16))
      ->capture_default_str();
  calc->add_flag("--dp-attention", args->report.dp_attention,
                 "attention replicated on every GPU (only MoE/MLP/embeddings split)");
  calc->add_option("--dp", args->dp,
                   "data-parallel attention: N replicas of --tp ranks each (--dp N alone: --tp N --dp-attention)")
      ->check(IntIn(1, 1 << 16))
      ->capture_default_str();
  calc->add_option("--ep", args->report.ep, "expert-parallel ranks: 1 (experts split by width) or the ranks")
      ->check(IntIn(1, 1 << 16))
      ->capture_default_str();
  calc->add_option("--batch", args->report.batch, "sequences in the decode step of the collectives table")
      ->check(IntIn(1, 1 << 20))
      ->capture_default_str();
  CLI::Option* memory_gb = calc->add_option("--memory-gb", args->memory_gb_arg,
                                            "GPU memory in GB (1e9 bytes): how many KV tokens fit per GPU")
                               ->check(NumberIn(0, 1e9, /*lo_open=*/true));
  calc->add_option("--context", args->report.context, "cached tokens for the naive-mode FLOPs")
      ->check(IntIn(0, 1 << 30))
      ->capture_default_str();
  calc->add_option("--block-size", args->report.block_size, "latte's KV blocks, for the --memory-gb engine table")
      ->check(IntIn(1, 4096))
      ->capture_default_str();
  calc->add_option("--max-num-batched-tokens", args->report.scheduler.max_num_batched_tokens,
                   "latte's engine step, for the --memory-gb engine table's scratch")
      ->check(IntIn(1, 1 << 24))
      ->capture_default_str();
  calc->add_option("--max-num-seqs", args->report.scheduler.max_num_seqs,
                   "latte's running sequences, for the --memory-gb engine table's scratch")
      ->check(IntIn(1, 1 << 20))
      ->capture_default_str();
  AddThreadsOption(*calc, args->report.threads)
      ->description("threads, for the --memory-gb engine table's scratch (default: every core)");
  calc->add_option("--decompressed-prefix-gb", args->report.decompressed_prefix_gb,
                   "latte's decompressed-prefix store, for the --memory-gb engine table (default: 10% of the "
                   "budget, at most one prompt of the model's longest context)")
      ->check(NumberIn(0, 1e9));
  calc->add_option("--speculative-tokens", args->report.speculative_tokens,
                   "project speculative decoding with the MTP layer: bytes per step with this many drafts")
      ->check(CLI::Range(int64_t{1}, int64_t{16}));
  calc->add_option("--acceptance", args->report.acceptance,
                   "--speculative-tokens: share of steps whose draft 1, 2, ... is accepted (list)")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0));
  calc->add_flag("--json", args->json, "print one JSON object instead of tables");
  calc->callback([args, memory_gb, calc] {
    if (memory_gb->count() > 0) args->report.memory_gb = args->memory_gb_arg;
    RunCalc(*args, *calc);
  });
}

}  // namespace latte::cli
