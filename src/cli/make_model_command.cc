// latte make-model: writes a random-weight model directory in the Hugging Face
// DeepSeek layout (see synth/random_checkpoint.h), for tests and benchmarks.
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "model/presets.h"
#include "model/tensor_specs.h"
#include "synth/random_checkpoint.h"
#include "synth/tiny_tokenizer.h"

namespace latte::cli {
namespace {

struct MakeModelArgs {
  std::string preset;
  std::optional<int64_t> layers;
  std::optional<int64_t> vocab;
  std::string dtype = "bf16";
  uint64_t seed = 0;
  bool no_q_lora = false;
  std::optional<int64_t> mtp_layers;
  std::optional<std::string> rope;
  uint64_t shard_bytes = 4'000'000'000;
  std::string out;
  bool force = false;
  int threads = 0;
};

Status RunMakeModel(const MakeModelArgs& args) {
  const std::optional<CheckpointDType> dtype = ParseCheckpointDType(args.dtype);
  if (!dtype) return Status::InvalidArgument("--dtype must be bf16, f32 or fp8, got \"" + args.dtype + "\"");
  if (args.shard_bytes == 0) return Status::InvalidArgument("--shard-bytes must be positive");
  SetThreads(args.threads);

  MakeModelOverrides overrides;
  overrides.num_hidden_layers = args.layers;
  overrides.vocab_size = args.vocab;
  overrides.no_q_lora = args.no_q_lora;
  overrides.mtp_layers = args.mtp_layers;
  overrides.rope = args.rope;
  overrides.dtype = *dtype;
  LATTE_ASSIGN_OR_RETURN(const ModelConfig config, MakeModelConfig(args.preset, overrides));

  RandomCheckpointOptions options;
  options.dtype = *dtype;
  options.seed = args.seed;
  options.shard_bytes = args.shard_bytes;
  RandomCheckpointSummary summary;
  const auto start = std::chrono::steady_clock::now();
  LATTE_RETURN_IF_ERROR(WriteModelDirectory(config, options, args.out, args.force, &summary));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::fprintf(stderr,
               "make-model: %s, %lld layers, %s: %lld tensors, %.1f MB in %lld file(s), "
               "%.2f s (%.0f MB/s)\n",
               args.preset.c_str(), static_cast<long long>(config.num_hidden_layers), args.dtype.c_str(),
               static_cast<long long>(summary.tensors), summary.bytes / 1e6, static_cast<long long>(summary.shards),
               seconds, seconds > 0 ? summary.bytes / 1e6 / seconds : 0.0);
  std::printf("%s\n", args.out.c_str());
  return Status::Ok();
}

}  // namespace

void AddMakeModelCommand(CLI::App& app) {
  auto args = std::make_shared<MakeModelArgs>();
  CLI::App* cmd = app.add_subcommand("make-model",
                                     "Write a random-weight DeepSeek model directory (config, safetensors, tokenizer)");
  cmd->add_option("--preset", args->preset, PresetList() + " (v2, v3, r1: the MoE shrunk; see README)")
      ->check(OneOf(PresetNames()))
      ->required();
  cmd->add_option("--layers", args->layers, "Number of layers (default: the preset's)")
      ->check(IntIn(1, kMaxMakeModelLayers));
  cmd->add_option("--vocab", args->vocab, "Vocabulary size (default: the preset's); the tokenizer covers every id")
      ->check(IntIn(TinyTokenizerSize(), kMaxMakeModelVocab));
  cmd->add_option("--dtype", args->dtype, "bf16, f32 or fp8 (V3 block-quantized)")
      ->check(OneOf({"bf16", "f32", "fp8"}))
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Random seed; the same seed writes the same bytes")->capture_default_str();
  cmd->add_flag("--no-q-lora", args->no_q_lora, "q_lora_rank null: a plain q_proj (as V2-Lite)");
  cmd->add_option("--mtp-layers", args->mtp_layers,
                  "Multi-token-prediction layers after the others (V3's num_nextn_predict_layers; default 0)")
      ->check(IntIn(0, 4));
  cmd->add_option("--rope", args->rope, "plain or yarn (default: the preset's)")->check(OneOf({"plain", "yarn"}));
  cmd->add_option("--shard-bytes", args->shard_bytes, "Split the weights into shards of at most this many bytes")
      ->check(IntIn(1, std::numeric_limits<int64_t>::max()))
      ->capture_default_str();
  cmd->add_option("--out", args->out,
                  "Output directory (created if missing; written in a temporary folder, moved in at the end)")
      ->required();
  cmd->add_flag("--force", args->force, "Replace the model an --out folder already holds (its safetensors files)");
  AddThreadsOption(*cmd, args->threads);
  cmd->callback([args] { ExitOnError("make-model", RunMakeModel(*args)); });
}

}  // namespace latte::cli
