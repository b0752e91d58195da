// latte convert: a Hugging Face DeepSeek directory written as a GGUF file of
// llama.cpp's deepseek2 architecture, in one weight type or the Q4_K_M mix
// (synth/gguf_export.h): what latte's GGUF tests read, and what llama.cpp reads too.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "engine/engine_config.h"
#include "synth/gguf_export.h"

namespace latte::cli {
namespace {

struct ConvertArgs {
  std::string model;
  std::string out;
  std::string type = "Q8_0";
  std::string kv_b = "split";
  std::string pre;
  int threads = 0;
};

Status RunConvert(const ConvertArgs& args) {
  SetThreads(args.threads);
  LATTE_ASSIGN_OR_RETURN(GgufExportOptions options, ParseGgufExportType(args.type));
  options.layout = args.kv_b == "split" ? GgufExportLayout::kSplitKvB : GgufExportLayout::kKvB;
  options.pre = args.pre;
  const auto start = std::chrono::steady_clock::now();
  LATTE_RETURN_IF_ERROR(ExportGguf(args.model, args.out, options));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "convert: %s -> %s (%s, kv_b %s), %.1f s\n", args.model.c_str(), args.out.c_str(),
               args.type.c_str(), args.kv_b.c_str(), seconds);
  std::printf("%s\n", args.out.c_str());
  return Status::Ok();
}

}  // namespace

void AddConvertCommand(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand(
      "convert", "Write a Hugging Face DeepSeek directory as a GGUF file (llama.cpp's deepseek2 architecture)");
  cmd->add_option("--model", args->model, "The Hugging Face directory (config.json, safetensors, tokenizer.json)")
      ->required();
  cmd->add_option("--out", args->out, "The .gguf file to write")->required();
  cmd->add_option(
         "--type", args->type,
         "F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, IQ2_XXS, IQ3_XXS, "
         "IQ1_S (searched codebooks, no importance matrix: slow, for small models), or the Q4_K_M mix")
      ->check(OneOf({"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                     "IQ4_NL", "IQ4_XS", "IQ2_XXS", "IQ3_XXS", "IQ1_S", "Q4_K_M"}))
      ->capture_default_str();
  cmd->add_option("--kv-b", args->kv_b,
                  "split: attn_k_b + attn_v_b, as llama.cpp's converter writes today; joined: one attn_kv_b "
                  "(older files)")
      ->check(OneOf({"split", "joined"}))
      ->capture_default_str();
  cmd->add_option("--pre", args->pre,
                  "tokenizer.ggml.pre (default: deepseek-v3 for V3-architecture configs, else deepseek-llm)");
  AddThreadsOption(*cmd, args->threads);
  cmd->callback([args] { ExitOnError("convert", RunConvert(*args)); });
}

}  // namespace latte::cli
