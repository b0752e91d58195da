// latte generate: from prompt ids (greedy; ids out, optional logits file) or from
// text (optionally through the chat template; sampled; text streamed to stdout).
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/npy.h"
#include "cli/commands.h"
#include "engine/greedy_generate.h"
#include "engine/text_generation.h"
#include "model/deepseek.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace latte::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt_ids;
  std::string prompt;
  bool chat = false;
  std::string system;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int64_t max_tokens = 16;
  std::string mla_mode = "absorbed";
  std::string fp8 = "keep";
  bool huge_pages = false;
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

void ReportSpeed(size_t prompt_tokens, size_t generated, double prefill_seconds, double decode_seconds,
                 const std::string& mode) {
  std::fprintf(stderr, "prefill: %zu tokens, %.3f s, %.1f tok/s\n", prompt_tokens, prefill_seconds,
               prompt_tokens / prefill_seconds);
  if (generated > 1) {
    std::fprintf(stderr, "decode: %zu tokens, %.3f s, %.2f tok/s (mla-mode %s)\n", generated - 1, decode_seconds,
                 (generated - 1) / decode_seconds, mode.c_str());
  }
}

// The prompt's ids: the text itself (no BOS: see text/tokenizer.h), or with --chat
// the chat template rendered over [system,] user with the generation prompt (the
// template writes BOS).
Result<std::vector<int32_t>> TextPromptIds(const GenerateArgs& args, const Tokenizer& tokenizer) {
  if (!args.chat) return tokenizer.Encode(args.prompt);
  LATTE_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::FromTokenizerConfig(args.model + "/tokenizer_config.json"));
  nlohmann::json messages = nlohmann::json::array();
  if (!args.system.empty()) messages.push_back({{"role", "system"}, {"content", args.system}});
  messages.push_back({{"role", "user"}, {"content", args.prompt}});
  const nlohmann::json context = {{"messages", messages}, {"add_generation_prompt", true}};
  LATTE_ASSIGN_OR_RETURN(std::string text, tmpl.Render(context));
  return tokenizer.Encode(text);
}

Status RunTextGenerate(const GenerateArgs& args, DeepSeekModel& model) {
  LATTE_ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::FromDirectory(args.model));
  TextRequest request;
  LATTE_ASSIGN_OR_RETURN(request.prompt, TextPromptIds(args, *tokenizer));
  if (request.prompt.empty()) return Status::Error("--prompt encodes to no tokens");
  request.sampling = args.sampling;
  request.max_tokens = args.max_tokens;
  request.stop = args.stop;
  request.ignore_eos = args.ignore_eos;
  LATTE_ASSIGN_OR_RETURN(TextResult r, GenerateText(model, *tokenizer, request, [](std::string_view piece) {
                           std::fwrite(piece.data(), 1, piece.size(), stdout);
                           std::fflush(stdout);
                         }));
  std::printf("\n");
  std::fprintf(stderr, "finish_reason: %s\n", r.finish_reason.c_str());
  ReportSpeed(request.prompt.size(), r.tokens.size(), r.prefill_seconds, r.decode_seconds, args.mla_mode);
  return Status::Ok();
}

Status RunGenerate(const GenerateArgs& args) {
  SetThreads(args.threads);
  const auto mode = ParseMlaMode(args.mla_mode);
  if (!mode) return Status::Error("--mla-mode must be absorbed, materialized or naive");
  const auto fp8 = ParseFp8Weights(args.fp8);
  if (!fp8) return Status::Error("--fp8 must be keep or bf16, got \"" + args.fp8 + "\"");
  if (args.prompt_ids.empty() == args.prompt.empty()) {
    return Status::Error("give exactly one of --prompt-ids and --prompt");
  }
  if (!args.prompt.empty() && !args.logits_out.empty()) return Status::Error("--logits-out needs --prompt-ids");
  if (args.prompt.empty() && args.chat) return Status::Error("--chat needs --prompt");
  LATTE_RETURN_IF_ERROR(args.sampling.Validate());
  std::vector<int32_t> prompt;
  if (!args.prompt_ids.empty()) {
    LATTE_ASSIGN_OR_RETURN(prompt, ParseIds(args.prompt_ids));
  }
  LoadOptions load;
  load.mode = *mode;
  load.fp8 = *fp8;
  if (args.huge_pages) load.residency = FileResidency::kHugePageCopy;
  LATTE_ASSIGN_OR_RETURN(auto weights, ModelWeights::Load(args.model, load));
  DeepSeekModel model(*weights);
  if (!args.prompt.empty()) return RunTextGenerate(args, model);
  LATTE_ASSIGN_OR_RETURN(GenerateResult r,
                         GreedyGenerate(model, prompt, args.max_tokens, !args.logits_out.empty()));
  for (size_t i = 0; i < r.tokens.size(); ++i) std::printf("%s%d", i ? "," : "", r.tokens[i]);
  std::printf("\n");
  ReportSpeed(prompt.size(), r.tokens.size(), r.prefill_seconds, r.decode_seconds, args.mla_mode);
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
  cmd->add_option("--prompt-ids", args->prompt_ids, "Comma-separated prompt token ids (greedy; ids printed)");
  cmd->add_option("--prompt", args->prompt, "Prompt text (sampled; text streamed to stdout)");
  cmd->add_flag("--chat", args->chat, "Wrap --prompt as a user turn with the model's chat template");
  cmd->add_option("--system", args->system, "System message for --chat");
  SamplingParams& sp = args->sampling;
  cmd->add_option("--temperature", sp.temperature, "0: greedy")->capture_default_str();
  cmd->add_option("--top-k", sp.top_k, "0 or -1: off")->capture_default_str();
  cmd->add_option("--top-p", sp.top_p)->capture_default_str();
  cmd->add_option("--min-p", sp.min_p)->capture_default_str();
  cmd->add_option("--presence-penalty", sp.presence_penalty)->capture_default_str();
  cmd->add_option("--frequency-penalty", sp.frequency_penalty)->capture_default_str();
  cmd->add_option("--repetition-penalty", sp.repetition_penalty)->capture_default_str();
  cmd->add_option("--seed", sp.seed, "Same seed, same tokens");
  cmd->add_option("--stop", args->stop, "Stop string (repeatable, up to 4; not printed)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep generating past EOS");
  cmd->add_option("--max-tokens", args->max_tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--mla-mode", args->mla_mode, "absorbed | materialized | naive")->capture_default_str();
  cmd->add_option("--fp8", args->fp8,
                  "fp8 checkpoints: keep (weights stay e4m3 with their block scales, converted in "
                  "registers: ~1 byte per weight per token) | bf16 (dequantized to bf16 at load)")
      ->capture_default_str();
  cmd->add_flag("--huge-pages", args->huge_pages,
                "Read the weights into memory on 2 MiB pages instead of serving them from an mmap "
                "of the checkpoint");
  cmd->add_option("--threads", args->threads, "Threads (0: every core)")->capture_default_str();
  cmd->add_option("--logits-out", args->logits_out,
                  "Write float32 .npy of shape [P + N - 1, vocab_size]: logits at every position run");
  cmd->callback([args] { ExitOnError("generate", RunGenerate(*args)); });
}

}  // namespace latte::cli
