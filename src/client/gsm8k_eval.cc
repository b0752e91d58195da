#include "client/gsm8k_eval.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "client/openai_client.h"

namespace latte {
namespace {

std::string RequestBody(const Gsm8kEvalOptions& options, const Gsm8kDoc& doc) {
  nlohmann::json stop = nlohmann::json::array();
  for (std::string_view s : kGsm8kStop) stop.push_back(std::string(s));
  const nlohmann::json body = {{"model", options.model},
                               {"prompt", Gsm8kPrompt(options.fewshot, options.num_fewshot, doc)},
                               {"max_tokens", kGsm8kMaxGenTokens},
                               {"temperature", 0.0},
                               {"stop", stop},
                               {"seed", options.seed}};
  return body.dump();
}

// choices[0].text of a completion reply.
Result<std::string> CompletionText(const HttpResponse& response) {
  if (response.status != 200) return Status::Unavailable(HttpErrorText(response));
  const nlohmann::json body = nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains("choices") || !body["choices"].is_array() || body["choices"].empty() ||
      !body["choices"][0].is_object() || !body["choices"][0].contains("text") ||
      !body["choices"][0]["text"].is_string()) {
    return Status::Unavailable("a reply without choices[0].text: " + response.body.substr(0, 200));
  }
  return body["choices"][0]["text"].get<std::string>();
}

Result<std::string> Complete(const Gsm8kEvalOptions& options, const std::string& body) {
  Status last;
  for (int attempt = 0; attempt < options.attempts; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::seconds(attempt));  // lm-eval backs off too
    auto response = HttpPostJson(options.base, "/v1/completions", body, options.http);
    if (!response.ok()) {
      last = response.status();
      continue;
    }
    auto text = CompletionText(*response);
    if (text.ok()) return text;
    last = text.status();
  }
  return last;
}

// Characters on screen: UTF-8 continuation bytes take no column ("↑" is three bytes).
size_t Width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string Pad(const std::string& s, size_t width, char align) {
  const size_t fill = width > Width(s) ? width - Width(s) : 0;
  if (align == 'r') return std::string(fill, ' ') + s;
  if (align == 'c') return std::string(fill / 2, ' ') + s + std::string(fill - fill / 2, ' ');
  return s + std::string(fill, ' ');
}

std::string Fixed4(double v) {
  if (std::isnan(v)) return "N/A";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

}  // namespace

Result<Gsm8kEvalResult> RunGsm8kEval(const Gsm8kEvalOptions& options) {
  if (options.docs.empty()) return Status::Unavailable("no problems to evaluate");
  if (options.num_fewshot > options.fewshot.size()) {
    return Status::Unavailable(std::to_string(options.num_fewshot) +
                               "-shot needs that many few-shot examples, the file has " +
                               std::to_string(options.fewshot.size()));
  }
  LATTE_ASSIGN_OR_RETURN(std::unique_ptr<Gsm8kScorer> scorer, Gsm8kScorer::Create());
  const int64_t n = static_cast<int64_t>(options.docs.size());
  Gsm8kEvalResult result;
  result.docs.resize(options.docs.size());
  std::vector<Status> errors(options.docs.size());
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex progress_mu;
  int64_t done = 0;
  auto work = [&] {
    for (int64_t i; !failed && (i = next.fetch_add(1)) < n;) {
      const Gsm8kDoc& doc = options.docs[static_cast<size_t>(i)];
      auto text = Complete(options, RequestBody(options, doc));
      if (!text.ok()) {
        errors[static_cast<size_t>(i)] = text.status();
        failed = true;
        return;
      }
      Gsm8kDocResult& r = result.docs[static_cast<size_t>(i)];
      r.completion = std::move(text).value();
      r.strict = scorer->StrictMatch(r.completion);
      r.flexible = scorer->FlexibleExtract(r.completion);
      r.strict_correct = scorer->ExactMatch(r.strict, doc.answer);
      r.flexible_correct = scorer->ExactMatch(r.flexible, doc.answer);
      std::lock_guard<std::mutex> lock(progress_mu);
      ++done;
      if (options.on_progress) options.on_progress(done, n);
    }
  };
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < std::min(std::max<int64_t>(options.concurrency, 1), n); ++w) threads.emplace_back(work);
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < errors.size(); ++i) {
    if (!errors[i].ok()) {
      return Status::Unavailable("problem " + std::to_string(i + 1) + " failed " + std::to_string(options.attempts) +
                                 " times: " + errors[i].message());
    }
  }
  std::vector<double> strict, flexible;
  for (const Gsm8kDocResult& r : result.docs) {
    strict.push_back(r.strict_correct ? 1.0 : 0.0);
    flexible.push_back(r.flexible_correct ? 1.0 : 0.0);
  }
  auto score = [](const char* name, const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return Gsm8kFilterScore{name, sum / static_cast<double>(v.size()), MeanStderr(v)};
  };
  result.scores = {score("flexible-extract", flexible), score("strict-match", strict)};
  return result;
}

std::string LmEvalTable(const std::string& task, size_t num_fewshot, const Gsm8kEvalResult& result) {
  const std::vector<std::string> header = {"Tasks", "Version", "Filter", "n-shot", "Metric", "", "Value", "", "Stderr"};
  const std::string align = "lrlrllrlr";
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < result.scores.size(); ++i) {
    const Gsm8kFilterScore& s = result.scores[i];
    rows.push_back({i == 0 ? task : "", i == 0 ? std::to_string(kGsm8kVersion) : "", s.filter,
                    std::to_string(num_fewshot), "exact_match", "↑", Fixed4(s.exact_match), "±", Fixed4(s.stderr_)});
  }
  std::vector<size_t> widths(header.size(), 3);  // a Markdown rule needs three dashes
  for (size_t c = 0; c < header.size(); ++c) {
    widths[c] = std::max(widths[c], Width(header[c]));
    for (const auto& row : rows) widths[c] = std::max(widths[c], Width(row[c]));
  }
  std::string out = "|";
  for (size_t c = 0; c < header.size(); ++c) out += Pad(header[c], widths[c], 'c') + "|";
  out += "\n|";
  for (size_t c = 0; c < header.size(); ++c) {
    out += std::string(widths[c] - (align[c] == 'r' ? 1 : 0), '-') + (align[c] == 'r' ? ":" : "") + "|";
  }
  out += "\n";
  for (const auto& row : rows) {
    out += "|";
    for (size_t c = 0; c < header.size(); ++c) out += Pad(row[c], widths[c], align[c]) + "|";
    out += "\n";
  }
  return out;
}

}  // namespace latte
