// `latte eval`: a gsm8k-format task against an OpenAI-compatible server's
// /v1/completions, as lm-eval's local-completions model runs a generate-until task
// (lm_eval/models/openai_completions.py and api_models.py): one non-streamed request
// per problem with {"model", "prompt", "max_tokens": 256, "temperature": 0, "stop":
// ["Question:", "</s>", "<|im_end|>"], "seed": 1234}, at most C at once, each tried up
// to 3 times (lm-eval's max_retries); scored with client/gsm8k_task.h. lm-eval also
// appends the tokenizer's EOS text to "stop"; a server stops at EOS by itself, so the
// text is the same without it (and latte eval needs no tokenizer).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "client/gsm8k_task.h"
#include "client/http_client.h"

namespace latte {

struct Gsm8kEvalOptions {
  BaseUrl base;
  HttpRequestOptions http;
  std::string model;
  std::vector<Gsm8kDoc> docs;     // the problems scored
  std::vector<Gsm8kDoc> fewshot;  // the first num_fewshot precede each prompt
  size_t num_fewshot = 5;
  int64_t concurrency = 1;
  int attempts = 3;
  int64_t seed = 1234;                                           // lm-eval's default, sent as "seed"
  std::function<void(int64_t done, int64_t total)> on_progress;  // serialized
};

struct Gsm8kDocResult {
  std::string completion;  // choices[0].text
  std::string strict;      // the strict-match filter's answer
  std::string flexible;    // flexible-extract's
  bool strict_correct = false;
  bool flexible_correct = false;
};

struct Gsm8kFilterScore {
  std::string filter;  // "flexible-extract" or "strict-match"
  double exact_match = 0;
  double stderr_ = 0;  // NaN when n < 2
};

struct Gsm8kEvalResult {
  std::vector<Gsm8kDocResult> docs;      // in the task file's order
  std::vector<Gsm8kFilterScore> scores;  // flexible-extract, then strict-match (lm-eval's order)
};

// Errors: a request that failed every attempt (the message names the problem).
Result<Gsm8kEvalResult> RunGsm8kEval(const Gsm8kEvalOptions& options);

// lm-eval's results table (make_table): Tasks, Version, Filter, n-shot, Metric, Value,
// Stderr, as Markdown.
std::string LmEvalTable(const std::string& task, size_t num_fewshot, const Gsm8kEvalResult& result);

}  // namespace latte
