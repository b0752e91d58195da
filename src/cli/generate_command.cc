// latte generate: greedy generation from prompt ids, with prefill/decode speed.
#include <cstdio>
#include <sstream>

#include "base/npy.h"
#include "cli/commands.h"
#include "engine/greedy_generate.h"
#include "model/deepseek.h"

namespace latte::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt_ids;
  int64_t max_tokens = 16;
  std::string mla_mode = "absorbed";
  int threads = 0;
  std::string logits_out;
};

Result<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::out_of_range(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return Status::Error("--prompt-ids: \"" + item + "\" is not a token id");
    }
  }
  if (ids.empty()) return Status::Error("--prompt-ids is empty");
  return ids;
}

Status RunGenerate(const GenerateArgs& args) {
  SetThreads(args.threads);
  const auto mode = ParseMlaMode(args.mla_mode);
  if (!mode) return Status::Error("--mla-mode must be absorbed, materialized or naive");
  LATTE_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, ParseIds(args.prompt_ids));
  LATTE_ASSIGN_OR_RETURN(auto weights, ModelWeights::Load(args.model, LoadOptions{*mode, true}));
  DeepSeekModel model(*weights);
  LATTE_ASSIGN_OR_RETURN(GenerateResult r,
                         GreedyGenerate(model, prompt, args.max_tokens, !args.logits_out.empty()));
  for (size_t i = 0; i < r.tokens.size(); ++i) std::printf("%s%d", i ? "," : "", r.tokens[i]);
  std::printf("\n");
  const double n = static_cast<double>(prompt.size());
  std::fprintf(stderr, "prefill: %zu tokens, %.3f s, %.1f tok/s\n", prompt.size(), r.prefill_seconds,
               n / r.prefill_seconds);
  if (r.tokens.size() > 1) {
    std::fprintf(stderr, "decode: %zu tokens, %.3f s, %.2f tok/s (mla-mode %s)\n", r.tokens.size() - 1,
                 r.decode_seconds, (r.tokens.size() - 1) / r.decode_seconds, args.mla_mode.c_str());
  }
  if (!args.logits_out.empty()) {
    const int64_t rows = static_cast<int64_t>(prompt.size() + r.tokens.size() - 1);
    LATTE_RETURN_IF_ERROR(WriteNpyF32(args.logits_out, {rows, model.config().vocab_size}, r.logits.data()));
  }
  return Status::Ok();
}

}  // namespace

void AddGenerateCommand(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Greedy generation from prompt token ids");
  cmd->add_option("--model", args->model, "Model directory (config.json + safetensors)")->required();
  cmd->add_option("--prompt-ids", args->prompt_ids, "Comma-separated prompt token ids")->required();
  cmd->add_option("--max-tokens", args->max_tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--mla-mode", args->mla_mode, "absorbed | materialized | naive")->capture_default_str();
  cmd->add_option("--threads", args->threads, "Threads (0: every core)")->capture_default_str();
  cmd->add_option("--logits-out", args->logits_out,
                  "Write float32 .npy of shape [P + N - 1, vocab_size]: logits at every position run");
  cmd->callback([args] {
    const Status status = RunGenerate(*args);
    if (!status.ok()) {
      std::fprintf(stderr, "latte generate: error: %s\n", status.message().c_str());
      ExitWith(1);
    }
  });
}

}  // namespace latte::cli
