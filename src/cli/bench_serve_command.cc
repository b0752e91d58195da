// latte bench serve: the online serving benchmark against any OpenAI-compatible server
// (client/serve_benchmark.h), printed in the columns of vLLM's benchmark_serving
// summary (backend, input_tokens, output_tokens, output_toks/s, req/s, median_itl_ms,
// median_ttft_ms), one row per input length.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "cli/progress_bar.h"
#include "client/openai_client.h"
#include "client/serve_benchmark.h"

namespace latte::cli {
namespace {

struct ServeBenchArgs {
  std::string base_url;
  std::string model;
  std::vector<int64_t> input_lens = {128};
  int64_t output_len = 128;
  int64_t num_prompts = 64;
  int64_t max_concurrency = 0;
  std::string request_rate = "inf";
  uint64_t seed = 0;
  std::string json;
  std::string label;
  std::string api_key;
  std::string response_format;
};

// Without /tokenize, prompt ids are drawn from [0, 256): every byte-level BPE (GPT-2's,
// DeepSeek's, latte's) has at least 256 tokens. Their count is then whatever the server
// reports in usage.
constexpr int64_t kFallbackIds = 256;

// "inf" or a number of requests per second > 0.
Result<double> ParseRequestRate(const std::string& text) {
  if (text == "inf") return std::numeric_limits<double>::infinity();
  char* end = nullptr;
  const double rate = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(rate > 0) || !std::isfinite(rate)) {
    return Status::InvalidArgument("--request-rate must be a number > 0 or inf, got \"" + text + "\"");
  }
  return rate;
}

std::string Figure(double v, int decimals) {
  if (std::isnan(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Columns right-aligned to their widest cell, two spaces apart (as pandas prints a
// DataFrame).
void PrintTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    widths[c] = header[c].size();
    for (const auto& row : rows) widths[c] = std::max(widths[c], row[c].size());
  }
  auto print = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) {
      line += (c == 0 ? "" : "  ") + std::string(widths[c] - cells[c].size(), ' ') + cells[c];
    }
    std::printf("%s\n", line.c_str());
  };
  print(header);
  for (const auto& row : rows) print(row);
}

nlohmann::json Ms(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

nlohmann::json RunJson(const ServeBenchOptions& o, const ServeBenchResult& r) {
  nlohmann::json j = {{"input_len", o.input_len},
                      {"output_len", o.output_len},
                      {"num_prompts", o.num_prompts},
                      {"completed", r.completed},
                      {"failed", r.failed},
                      {"duration_s", r.duration_s},
                      {"total_input_tokens", r.total_input_tokens},
                      {"total_output_tokens", r.total_output_tokens},
                      {"request_throughput", r.request_throughput},
                      {"output_throughput", r.output_throughput},
                      {"total_token_throughput", r.total_token_throughput},
                      {"prompt_token_mismatches", r.prompt_token_mismatches},
                      {"output_token_mismatches", r.output_token_mismatches}};
  const std::pair<const char*, const LatencyStats*> stats[] = {
      {"ttft", &r.ttft}, {"tpot", &r.tpot}, {"itl", &r.itl}, {"e2el", &r.e2el}};
  for (const auto& [name, s] : stats) {
    j[std::string("mean_") + name + "_ms"] = Ms(s->mean_ms);
    j[std::string("median_") + name + "_ms"] = Ms(s->median_ms);
    j[std::string("p99_") + name + "_ms"] = Ms(s->p99_ms);
  }
  nlohmann::json requests = nlohmann::json::array();
  for (const RequestRecord& q : r.requests) {
    nlohmann::json rq = {{"index", q.index}, {"ok", q.ok}, {"scheduled_s", q.scheduled_s}, {"start_s", q.start_s}};
    if (!q.ok) {
      rq["error"] = q.error;
    } else {
      nlohmann::json itl = nlohmann::json::array();
      for (double s : q.itl_s) itl.push_back(1000.0 * s);
      rq.update({{"prompt_tokens", q.prompt_tokens >= 0 ? nlohmann::json(q.prompt_tokens) : nlohmann::json(nullptr)},
                 {"output_tokens", q.output_tokens},
                 {"output_tokens_from", q.counted_by_usage ? "usage" : "events"},
                 {"ttft_ms", 1000.0 * q.ttft_s},
                 {"tpot_ms", q.output_tokens > 1 ? nlohmann::json(1000.0 * q.tpot_s) : nlohmann::json(nullptr)},
                 {"e2el_ms", 1000.0 * q.e2e_s},
                 {"itl_ms", itl}});
    }
    requests.push_back(rq);
  }
  j["requests"] = requests;
  return j;
}

// What went wrong, once per distinct error, with how often.
void PrintFailures(const ServeBenchResult& r, int64_t input_len) {
  if (r.failed == 0) return;
  std::map<std::string, int64_t> errors;
  for (const RequestRecord& q : r.requests) {
    if (!q.ok) ++errors[q.error];
  }
  std::printf("input %lld: %lld of %lld requests failed:\n", static_cast<long long>(input_len),
              static_cast<long long>(r.failed), static_cast<long long>(r.requests.size()));
  for (const auto& [error, count] : errors) std::printf("  %lld x %s\n", static_cast<long long>(count), error.c_str());
}

Status RunServeBench(const ServeBenchArgs& args) {
  LATTE_ASSIGN_OR_RETURN(const BaseUrl base, ParseBaseUrl(args.base_url));
  LATTE_ASSIGN_OR_RETURN(const double rate, ParseRequestRate(args.request_rate));
  if (!args.json.empty()) LATTE_RETURN_IF_ERROR(CheckWritableFile("--json", args.json));
  ServeBenchOptions options;
  options.base = base;
  options.http.api_key = ApiKeyOrEnvironment(args.api_key);
  options.model = args.model;
  if (options.model.empty()) {
    auto id = ServedModelId(base, options.http);
    if (!id.ok()) return Status::InvalidArgument(id.status().message() + " (or give --model)");
    options.model = *id;
  }
  options.num_prompts = args.num_prompts;
  options.output_len = args.output_len;
  options.max_concurrency = args.max_concurrency;
  options.request_rate = rate;
  options.seed = args.seed;
  if (!args.response_format.empty()) {
    options.response_format = nlohmann::json::parse(args.response_format, nullptr, /*allow_exceptions=*/false);
    if (!options.response_format.is_object()) {
      return Status::InvalidArgument("--response-format must be a JSON object, as the request's response_format");
    }
  }
  auto pool = PromptTokenPool(base, options.http, options.model, args.seed);
  if (pool.ok()) {
    options.token_pool = std::move(pool).value();
  } else {
    std::fprintf(stderr,
                 "latte bench serve: no token ids from the server (%s): prompt ids are drawn from [0, %lld), "
                 "their count as the server reports it\n",
                 pool.status().message().c_str(), static_cast<long long>(kFallbackIds));
    for (int64_t id = 0; id < kFallbackIds; ++id) options.token_pool.push_back(id);
  }
  const std::string label = args.label.empty() ? options.model : args.label;

  std::vector<std::pair<ServeBenchOptions, ServeBenchResult>> runs;
  for (int64_t input_len : args.input_lens) {
    options.input_len = input_len;
    ProgressBar bar("input " + std::to_string(input_len));
    options.on_progress = [&bar](int64_t done, int64_t failed, int64_t total) { bar.Update(done, failed, total); };
    LATTE_ASSIGN_OR_RETURN(ServeBenchResult r, RunServeBenchmark(options));
    options.on_progress = nullptr;
    runs.emplace_back(options, std::move(r));
  }

  std::vector<std::vector<std::string>> rows, details;
  for (const auto& [o, r] : runs) {
    rows.push_back({label, std::to_string(o.input_len), std::to_string(o.output_len), Figure(r.output_throughput, 2),
                    Figure(r.request_throughput, 3), Figure(r.itl.median_ms, 2), Figure(r.ttft.median_ms, 2)});
    const std::pair<const char*, const LatencyStats*> stats[] = {
        {"ttft_ms", &r.ttft}, {"tpot_ms", &r.tpot}, {"itl_ms", &r.itl}, {"e2el_ms", &r.e2el}};
    for (const auto& [name, s] : stats) {
      details.push_back({label, std::to_string(o.input_len), name, Figure(s->mean_ms, 2), Figure(s->median_ms, 2),
                         Figure(s->p99_ms, 2)});
    }
  }
  PrintTable({"backend", "input_tokens", "output_tokens", "output_toks/s", "req/s", "median_itl_ms", "median_ttft_ms"},
             rows);
  std::printf("\n");
  PrintTable({"backend", "input_tokens", "metric", "mean", "median", "p99"}, details);
  std::printf("\n");
  int64_t failed = 0, sent = 0;
  for (const auto& [o, r] : runs) {
    std::printf(
        "input %lld: %lld requests completed, %lld failed, %.2f s; %lld input and %lld output tokens "
        "(max concurrency %s, request rate %s)\n",
        static_cast<long long>(o.input_len), static_cast<long long>(r.completed), static_cast<long long>(r.failed),
        r.duration_s, static_cast<long long>(r.total_input_tokens), static_cast<long long>(r.total_output_tokens),
        o.max_concurrency > 0 ? std::to_string(o.max_concurrency).c_str() : "none", args.request_rate.c_str());
    if (r.prompt_token_mismatches > 0) {
      std::printf("  warning: the server counted another prompt length than %lld for %lld requests\n",
                  static_cast<long long>(o.input_len), static_cast<long long>(r.prompt_token_mismatches));
    }
    if (r.output_token_mismatches > 0) {
      std::printf("  warning: %lld requests returned another number of tokens than %lld\n",
                  static_cast<long long>(r.output_token_mismatches), static_cast<long long>(o.output_len));
    }
    PrintFailures(r, o.input_len);
    failed += r.failed;
    sent += static_cast<int64_t>(r.requests.size());
  }
  std::fflush(stdout);

  if (!args.json.empty()) {
    nlohmann::json j = {{"base_url", base.text},
                        {"model", options.model},
                        {"label", label},
                        {"max_concurrency", args.max_concurrency},
                        {"request_rate", args.request_rate},
                        {"seed", args.seed},
                        {"runs", nlohmann::json::array()}};
    for (const auto& [o, r] : runs) j["runs"].push_back(RunJson(o, r));
    std::ofstream out(args.json);
    out << j.dump(1) << "\n";
    if (!out) return Status::Internal("--json " + args.json + ": write failed");
  }
  if (failed > 0) {
    return Status::InvalidArgument(std::to_string(failed) + " of " + std::to_string(sent) +
                                   " requests failed (listed above)");
  }
  return Status::Ok();
}

}  // namespace

void AddBenchServeCommand(CLI::App& bench) {
  auto args = std::make_shared<ServeBenchArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "serve",
      "Online serving benchmark against an OpenAI-compatible server (as vLLM's bench serve): streaming "
      "completions of random prompts, TTFT / ITL / TPOT / E2E");
  cmd->add_option("--base-url", args->base_url, "The server: http://HOST:PORT")->required();
  cmd->add_option("--model", args->model, "\"model\" in the requests (default: the first of /v1/models)");
  cmd->add_option("--input-len", args->input_lens, "Prompt tokens per request (list: one run each)")
      ->check(IntIn(1, int64_t{1} << 24))
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--output-len", args->output_len, "Tokens generated per request (ignore_eos)")
      ->check(IntIn(1, int64_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--num-prompts", args->num_prompts, "Requests per run")
      ->check(IntIn(1, 100000))
      ->capture_default_str();
  cmd->add_option("--max-concurrency", args->max_concurrency, "Requests in flight at once (0: no limit but 1024)")
      ->check(IntIn(0, kMaxClientThreads))
      ->capture_default_str();
  cmd->add_option("--request-rate", args->request_rate, "Requests per second, Poisson arrivals (inf: all at once)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed of the prompts and the arrival times")->capture_default_str();
  cmd->add_option("--json", args->json, "Write every figure and every request's timings to this file");
  cmd->add_option("--label", args->label, "The backend column (default: the model name)");
  cmd->add_option("--api-key", args->api_key, "Bearer token (default: $OPENAI_API_KEY)");
  cmd->add_option("--response-format", args->response_format,
                  "JSON sent as every request's response_format (a constrained output may end early)");
  cmd->callback([args] { ExitOnError("bench serve", RunServeBench(*args)); });
}

}  // namespace latte::cli
