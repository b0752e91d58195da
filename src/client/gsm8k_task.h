// lm-eval's gsm8k task (EleutherAI/lm-evaluation-harness, lm_eval/tasks/gsm8k/gsm8k.yaml,
// metadata version 3.0), written out: what `latte eval` sends and how it scores.
//   doc_to_text      "Question: {{question}}\nAnswer:"
//   doc_to_target    "{{answer}}" (the whole worked answer, "... #### 72")
//   few-shot context (lm_eval/api/task.py, build_qa_turn): each example is
//                    text + " " + target + "\n\n"; then the question's text alone
//   until            ["Question:", "</s>", "<|im_end|>"], temperature 0, max_gen_toks 256
//                    (lm_eval/models/openai_completions.py, local-completions)
//   filters          strict-match: regex "#### (\-?[0-9\.\,]+)", the first match's group;
//                    flexible-extract: regex "(-?[$0-9.,]{2,})|(-?[0-9]+)", group_select -1
//                    (the last match, its first non-empty group); then take_first; no
//                    match: "[invalid]" (lm_eval/filters/extraction.py, RegexFilter)
//   exact_match      ignore_case, not ignore_punctuation, regexes_to_ignore
//                    [",", "\$", "(?s).*#### ", "\.$"] removed (re.sub) from the filtered
//                    answer and from the target alike, then string equality
//                    (lm_eval/api/metrics.py, exact_match_hf_evaluate)
//   stderr           sample standard deviation / sqrt(n) (metrics.py, mean_stderr)
// Differences: lm-eval draws the few-shot examples at random (seed 1234) from gsm8k's
// train split; here they are the first K of a few-shot file, in order (lm-eval's
// "first_n" sampler). ignore_case lowercases ASCII letters only (Python's lower()
// also folds other scripts; gsm8k's answers are numbers).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace latte {

struct Gsm8kDoc {
  std::string question;
  std::string answer;  // the worked answer ending in "#### N"
};

// JSON Lines of {"question", "answer"} (gsm8k's own files); blank lines are skipped;
// other keys are ignored. Errors name the file and the line.
Result<std::vector<Gsm8kDoc>> LoadGsm8kJsonl(const std::string& path);

inline constexpr std::string_view kGsm8kStop[] = {"Question:", "</s>", "<|im_end|>"};
inline constexpr int kGsm8kMaxGenTokens = 256;  // lm-eval's default max_gen_toks
inline constexpr int kGsm8kVersion = 3;         // gsm8k.yaml's metadata version
inline constexpr std::string_view kInvalidAnswer = "[invalid]";

// The prompt for `doc` after the first `shots` of `fewshot` (shots <= fewshot.size()).
std::string Gsm8kPrompt(const std::vector<Gsm8kDoc>& fewshot, size_t shots, const Gsm8kDoc& doc);

// The two filters and the metric, compiled once (PCRE2); thread-safe.
class Gsm8kScorer {
 public:
  static Result<std::unique_ptr<Gsm8kScorer>> Create();
  ~Gsm8kScorer();
  Gsm8kScorer(const Gsm8kScorer&) = delete;
  Gsm8kScorer& operator=(const Gsm8kScorer&) = delete;

  std::string StrictMatch(std::string_view completion) const;
  std::string FlexibleExtract(std::string_view completion) const;
  // The metric's normalization: regexes_to_ignore removed, then lowercased.
  std::string Normalize(std::string_view text) const;
  // exact_match of a filtered answer against a doc's target.
  bool ExactMatch(std::string_view filtered, std::string_view target) const;

 private:
  struct Impl;
  explicit Gsm8kScorer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// lm-eval's stderr of a mean of 0/1 scores: sample standard deviation / sqrt(n);
// NaN for n < 2 (lm-eval prints "N/A").
double MeanStderr(const std::vector<double>& scores);

}  // namespace latte
