// latte generate: one request through the serving engine, from prompt ids (greedy;
// ids out, optional logits file) or from text (optionally through the chat template;
// sampled; text streamed to stdout).
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/npy.h"
#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "engine/model_files.h"
#include "engine/serving_stack.h"
#include "engine/stop_matcher.h"
#include "model/deepseek.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace latte::cli {
namespace {

struct GenerateArgs {
  EngineConfig engine;
  std::string prompt_ids;
  std::string prompt;
  bool chat = false;
  std::string system;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int64_t max_tokens = 16;
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
      return Status::InvalidArgument("--prompt-ids: \"" + item + "\" is not a token id");
    }
  }
  if (ids.empty()) return Status::InvalidArgument("--prompt-ids is empty");
  return ids;
}

// The prompt's ids: the text itself (no BOS: see text/tokenizer.h), or with --chat
// the chat template rendered over [system,] user with the generation prompt (the
// template writes BOS).
Result<std::vector<int32_t>> TextPromptIds(const GenerateArgs& args, const Tokenizer& tokenizer) {
  if (!args.chat) return tokenizer.Encode(args.prompt);
  LATTE_ASSIGN_OR_RETURN(const ModelFiles files, ModelFiles::Find(args.engine.model));
  LATTE_ASSIGN_OR_RETURN(ChatTemplate tmpl, files.LoadChatTemplate());
  nlohmann::json messages = nlohmann::json::array();
  if (!args.system.empty()) messages.push_back({{"role", "system"}, {"content", args.system}});
  messages.push_back({{"role", "user"}, {"content", args.prompt}});
  const nlohmann::json context = {{"messages", messages}, {"add_generation_prompt", true}};
  LATTE_ASSIGN_OR_RETURN(std::string text, tmpl.Render(context));
  return tokenizer.Encode(text);
}

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Everything checked before the weights load: the flags on their own and together,
// then against the model's config.json and tokenizer. Fills the request's prompt.
Status CheckArguments(const GenerateArgs& args, const CLI::App& cmd, ModelPreview& preview,
                      GenerationRequest& request) {
  if (args.prompt_ids.empty() == args.prompt.empty()) {
    return Status::InvalidArgument("give exactly one of --prompt-ids and --prompt");
  }
  const bool text = !args.prompt.empty();
  LATTE_RETURN_IF_ERROR(
      RefuseUnless(cmd, text,
                   {"--temperature", "--top-k", "--top-p", "--min-p", "--presence-penalty", "--frequency-penalty",
                    "--repetition-penalty", "--seed", "--stop", "--ignore-eos", "--chat", "--system"},
                   "with --prompt-ids (greedy, EOS ignored; use --prompt to sample text)"));
  LATTE_RETURN_IF_ERROR(RefuseUnless(cmd, !text, {"--logits-out"}, "with --prompt (it needs --prompt-ids)"));
  LATTE_RETURN_IF_ERROR(RefuseUnless(cmd, args.chat, {"--system"}, "without --chat"));
  LATTE_RETURN_IF_ERROR(AsFlagError(args.sampling.Validate()));
  if (!args.stop.empty()) {
    const Result<StopMatcher> stops = StopMatcher::Create(args.stop, {});
    if (!stops.ok()) return Status::InvalidArgument("--stop: " + stops.status().message());
  }
  if (!args.logits_out.empty()) LATTE_RETURN_IF_ERROR(CheckWritableFile("--logits-out", args.logits_out));

  LATTE_RETURN_IF_ERROR(AsFlagError(args.engine.Validate()));
  auto previewed = PreviewModel(args.engine.model);
  if (!previewed.ok()) return AsFlagError(previewed.status());
  preview = std::move(previewed).value();
  const ModelConfig& config = preview.config;
  LATTE_RETURN_IF_ERROR(
      RefuseUnless(cmd, config.quantization.has_value(), {"--fp8"}, "on a checkpoint without fp8 weights"));
  if (text) {
    if (!preview.tokenizer) return Status::InvalidArgument("--prompt needs a tokenizer.json in the model directory");
    LATTE_ASSIGN_OR_RETURN(request.prompt, TextPromptIds(args, *preview.tokenizer));
    if (request.prompt.empty()) return Status::InvalidArgument("--prompt encodes to no tokens");
  } else {
    LATTE_ASSIGN_OR_RETURN(request.prompt, ParseIds(args.prompt_ids));
    for (int32_t id : request.prompt) {
      if (id >= config.vocab_size) {
        return Status::InvalidArgument("--prompt-ids: " + std::to_string(id) + " is outside the vocabulary [0, " +
                                       std::to_string(config.vocab_size) + ")");
      }
    }
  }
  const int64_t P = static_cast<int64_t>(request.prompt.size());
  return CheckContextLength(
      config, P + args.max_tokens,
      "the prompt (" + std::to_string(P) + " tokens) plus --max-tokens (" + std::to_string(args.max_tokens) + ")");
}

// One request through the engine: text streamed to stdout (--prompt), or the ids
// printed at the end (--prompt-ids: greedy, max_tokens of them whatever EOS says).
Status RunGenerate(const GenerateArgs& args, const CLI::App& cmd) {
  GenerationRequest request;
  ModelPreview preview;
  LATTE_RETURN_IF_ERROR(CheckArguments(args, cmd, preview, request));
  const bool text = !args.prompt.empty();
  auto built = BuildServingStack(args.engine, /*log=*/true, std::move(preview.tokenizer));
  if (!built.ok()) return AsFlagError(built.status());
  std::unique_ptr<ServingStack> stack = std::move(built).value();
  // Under tensor parallelism the other ranks run the leader's request in lockstep.
  if (!stack->engine->leads()) {
    stack->engine->WaitForLeaderToStop();
    return Status::Ok();
  }
  if (text) {
    request.sampling = args.sampling;
    request.stop = args.stop;
    request.ignore_eos = args.ignore_eos;
  } else {
    request.sampling.temperature = 0;
    request.ignore_eos = true;
    request.return_logits = !args.logits_out.empty();
  }
  request.max_tokens = args.max_tokens;
  const auto submitted = std::chrono::steady_clock::now();
  LATTE_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream, stack->engine->Submit(request));

  std::vector<int32_t> tokens;
  std::vector<float> logits;
  std::optional<std::chrono::steady_clock::time_point> first, last;
  std::string finish = "length";
  while (auto out = stream->Next(std::chrono::steady_clock::time_point::max())) {
    for (const SampledToken& t : out->tokens) tokens.push_back(t.id);
    logits.insert(logits.end(), out->logits.begin(), out->logits.end());
    if (!out->tokens.empty()) {
      if (!first) first = out->time;
      last = out->time;
    }
    if (text && !out->text.empty()) {
      std::fwrite(out->text.data(), 1, out->text.size(), stdout);
      if (StdoutFailed()) return Status::Internal(std::string("writing to stdout failed: ") + std::strerror(errno));
    }
    if (out->finish) {
      finish = std::string(FinishReasonName(*out->finish));
      if (*out->finish == FinishReason::kAbort)
        return Status::InvalidArgument("the request was aborted: " + out->error);
    }
  }
  if (text) {
    std::printf("\n");
    std::fprintf(stderr, "finish_reason: %s\n", finish.c_str());
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) std::printf("%s%d", i ? "," : "", tokens[i]);
    std::printf("\n");
  }
  if (first) {
    const double prefill = Seconds(*first - submitted), decode = Seconds(*last - *first);
    std::fprintf(stderr, "prefill: %zu tokens, %.3f s, %.1f tok/s\n", request.prompt.size(), prefill,
                 static_cast<double>(request.prompt.size()) / prefill);
    if (tokens.size() > 1) {
      std::fprintf(stderr, "decode: %zu tokens, %.3f s, %.2f tok/s (mla-mode %s)\n", tokens.size() - 1, decode,
                   static_cast<double>(tokens.size() - 1) / decode,
                   std::string(MlaModeName(args.engine.load.mode)).c_str());
    }
  }
  if (!args.logits_out.empty()) {
    const int64_t V = stack->model->config().vocab_size;
    LATTE_RETURN_IF_ERROR(WriteNpyF32(args.logits_out, {static_cast<int64_t>(logits.size()) / V, V}, logits.data()));
  }
  return Status::Ok();
}

}  // namespace

void AddGenerateCommand(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate from a prompt (text or token ids) through the engine");
  AddEngineFlags(*cmd, args->engine);
  cmd->add_option("--prompt-ids", args->prompt_ids, "Comma-separated prompt token ids (greedy; ids printed)");
  cmd->add_option("--prompt", args->prompt, "Prompt text (sampled; text streamed to stdout)");
  cmd->add_flag("--chat", args->chat, "Wrap --prompt as a user turn with the model's chat template");
  cmd->add_option("--system", args->system, "System message (needs --chat)");
  SamplingParams& sp = args->sampling;
  // Ranges: SamplingParams::Validate (engine/sampler.cc), run before anything loads.
  cmd->add_option("--temperature", sp.temperature, "[0, 2]; 0: greedy")->capture_default_str();
  cmd->add_option("--top-k", sp.top_k, ">= 1; 0 or -1: off")->capture_default_str();
  cmd->add_option("--top-p", sp.top_p, "(0, 1]")->capture_default_str();
  cmd->add_option("--min-p", sp.min_p, "[0, 1]")->capture_default_str();
  cmd->add_option("--presence-penalty", sp.presence_penalty, "[-2, 2]")->capture_default_str();
  cmd->add_option("--frequency-penalty", sp.frequency_penalty, "[-2, 2]")->capture_default_str();
  cmd->add_option("--repetition-penalty", sp.repetition_penalty, "> 0; 1: off")->capture_default_str();
  cmd->add_option("--seed", sp.seed, "Same seed, same tokens");
  cmd->add_option("--stop", args->stop, "Stop string (repeatable, up to 4; not printed)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep generating past EOS");
  cmd->add_option("--max-tokens", args->max_tokens, "Tokens to generate (the prompt plus these fit in the context)")
      ->check(IntIn(1, int64_t{1} << 40))  // past any context: the context check names both numbers
      ->capture_default_str();
  cmd->add_option("--logits-out", args->logits_out,
                  "Write float32 .npy of shape [P + N - 1, vocab_size]: logits at every position run");
  cmd->callback([args, cmd] { ExitOnError("generate", RunGenerate(*args, *cmd)); });
}

}  // namespace latte::cli
