// latte eval: a gsm8k-format task against an OpenAI-compatible server, scored as
// lm-eval scores gsm8k (client/gsm8k_task.h, client/gsm8k_eval.h), printed as lm-eval's
// results table.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "cli/progress_bar.h"
#include "client/gsm8k_eval.h"
#include "client/openai_client.h"

namespace latte::cli {
namespace {

struct EvalArgs {
  std::string base_url;
  std::string task;
  std::string fewshot;
  std::string model;
  int64_t num_fewshot = 5;
  int64_t limit = 0;
  int64_t concurrency = 1;
  std::string json;
  std::string api_key;
};

// The few-shot file: --fewshot, else fewshot.jsonl or train.jsonl beside the task.
Result<std::string> FewshotFile(const EvalArgs& args) {
  if (!args.fewshot.empty()) return args.fewshot;
  const std::filesystem::path dir = std::filesystem::path(args.task).parent_path();
  for (const char* name : {"fewshot.jsonl", "train.jsonl"}) {
    if (std::filesystem::exists(dir / name)) return (dir / name).string();
  }
  return Status::InvalidArgument(
      "--num-fewshot " + std::to_string(args.num_fewshot) +
      " needs examples: give --fewshot FILE (none of fewshot.jsonl, train.jsonl beside --task)");
}

// The Tasks column: the file's name without .jsonl, or its folder's for gsm8k's
// split names (tasks/arith/test.jsonl: "arith").
std::string TaskName(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string stem = p.stem().string();
  if ((stem == "test" || stem == "train") && p.has_parent_path() && !p.parent_path().filename().empty()) {
    return p.parent_path().filename().string();
  }
  return stem;
}

nlohmann::json ResultJson(const EvalArgs& args, const std::string& model, const std::vector<Gsm8kDoc>& docs,
                          const Gsm8kEvalResult& r) {
  nlohmann::json scores = nlohmann::json::array();
  for (const Gsm8kFilterScore& s : r.scores) {
    scores.push_back({{"filter", s.filter},
                      {"metric", "exact_match"},
                      {"value", s.exact_match},
                      {"stderr", std::isnan(s.stderr_) ? nlohmann::json(nullptr) : nlohmann::json(s.stderr_)}});
  }
  nlohmann::json samples = nlohmann::json::array();
  for (size_t i = 0; i < r.docs.size(); ++i) {
    const Gsm8kDocResult& d = r.docs[i];
    samples.push_back({{"question", docs[i].question},
                       {"target", docs[i].answer},
                       {"completion", d.completion},
                       {"strict_match", d.strict},
                       {"flexible_extract", d.flexible},
                       {"strict_correct", d.strict_correct},
                       {"flexible_correct", d.flexible_correct}});
  }
  return {
      {"task", TaskName(args.task)}, {"task_file", args.task}, {"model", model},    {"num_fewshot", args.num_fewshot},
      {"n", r.docs.size()},          {"scores", scores},       {"samples", samples}};
}

Status RunEval(const EvalArgs& args) {
  LATTE_ASSIGN_OR_RETURN(const BaseUrl base, ParseBaseUrl(args.base_url));
  if (!args.json.empty()) LATTE_RETURN_IF_ERROR(CheckWritableFile("--json", args.json));
  Gsm8kEvalOptions options;
  options.base = base;
  options.http.api_key = ApiKeyOrEnvironment(args.api_key);
  LATTE_ASSIGN_OR_RETURN(options.docs, LoadGsm8kJsonl(args.task));
  if (args.limit > 0 && static_cast<size_t>(args.limit) < options.docs.size()) options.docs.resize(args.limit);
  options.num_fewshot = static_cast<size_t>(args.num_fewshot);
  if (args.num_fewshot > 0) {
    LATTE_ASSIGN_OR_RETURN(const std::string fewshot, FewshotFile(args));
    LATTE_ASSIGN_OR_RETURN(options.fewshot, LoadGsm8kJsonl(fewshot));
    if (options.fewshot.size() < options.num_fewshot) {
      return Status::InvalidArgument("--num-fewshot " + std::to_string(args.num_fewshot) + ": " + fewshot +
                                     " has only " + std::to_string(options.fewshot.size()) + " examples");
    }
  }
  options.concurrency = args.concurrency;
  options.model = args.model;
  if (options.model.empty()) {
    auto id = ServedModelId(base, options.http);
    if (!id.ok()) return Status::InvalidArgument(id.status().message() + " (or give --model)");
    options.model = *id;
  }
  ProgressBar bar(TaskName(args.task));
  options.on_progress = [&bar](int64_t done, int64_t total) { bar.Update(done, 0, total); };
  LATTE_ASSIGN_OR_RETURN(const Gsm8kEvalResult result, RunGsm8kEval(options));
  std::printf("%s", LmEvalTable(TaskName(args.task), options.num_fewshot, result).c_str());
  std::fflush(stdout);
  if (!args.json.empty()) {
    std::ofstream out(args.json);
    out << ResultJson(args, options.model, options.docs, result).dump(1) << "\n";
    if (!out) return Status::Internal("--json " + args.json + ": write failed");
  }
  return Status::Ok();
}

}  // namespace

void AddEvalCommand(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Accuracy of an OpenAI-compatible server on a gsm8k-format task, scored as lm-eval's gsm8k");
  cmd->add_option("--base-url", args->base_url, "The server: http://HOST:PORT")->required();
  cmd->add_option("--task", args->task, "Problems: gsm8k JSON Lines (question, answer ending in \"#### N\")")
      ->required();
  cmd->add_option("--fewshot", args->fewshot,
                  "Few-shot examples, the same format (default: fewshot.jsonl or train.jsonl beside --task)");
  cmd->add_option("--num-fewshot", args->num_fewshot, "Examples before each question (lm-eval's gsm8k: 5)")
      ->check(IntIn(0, 1000))
      ->capture_default_str();
  cmd->add_option("--limit", args->limit, "Only the first N problems (0: all)")
      ->check(IntIn(0, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--concurrency", args->concurrency, "Requests in flight at once")
      ->check(IntIn(1, 4096))
      ->capture_default_str();
  cmd->add_option("--model", args->model, "\"model\" in the requests (default: the first of /v1/models)");
  cmd->add_option("--json", args->json, "Write the scores and every problem's completion and answers to this file");
  cmd->add_option("--api-key", args->api_key, "Bearer token (default: $OPENAI_API_KEY)");
  cmd->callback([args] { ExitOnError("eval", RunEval(*args)); });
}

}  // namespace latte::cli
