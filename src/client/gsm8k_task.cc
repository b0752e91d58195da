#include "client/gsm8k_task.h"

#include <cmath>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace latte {
namespace {

// gsm8k.yaml's patterns, as written there (YAML's "\\" is one backslash).
constexpr std::string_view kStrictPattern = R"(#### (\-?[0-9\.\,]+))";
constexpr std::string_view kFlexiblePattern = R"((-?[$0-9.,]{2,})|(-?[0-9]+))";
constexpr std::string_view kIgnoredPatterns[] = {",", R"(\$)", "(?s).*#### ", R"(\.$)"};

// A pattern compiled in byte mode: every pattern above is ASCII and `.` under (?s)
// takes any byte, so bytes of UTF-8 text match as Python's str patterns match its
// characters. `$` matches at the end or before a final newline in both.
class Pattern {
 public:
  static Result<Pattern> Compile(std::string_view pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), 0, &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      return Status::DataLoss("regex \"" + std::string(pattern) + "\": " + reinterpret_cast<const char*>(message));
    }
    return Pattern(code);
  }
  Pattern(Pattern&& other) noexcept : code_(other.code_) { other.code_ = nullptr; }
  Pattern(const Pattern&) = delete;
  ~Pattern() { pcre2_code_free(code_); }

  // Python's re.findall: every non-overlapping match, left to right, as its groups
  // (an unmatched group is ""; empty matches step one byte on).
  std::vector<std::vector<std::string>> FindAll(std::string_view subject) const {
    std::vector<std::vector<std::string>> matches;
    pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_, nullptr);
    uint32_t groups = 0;
    pcre2_pattern_info(code_, PCRE2_INFO_CAPTURECOUNT, &groups);
    size_t at = 0;
    while (at <= subject.size()) {
      const int rc =
          pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), at, 0, data, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
      std::vector<std::string> match;
      for (uint32_t g = 1; g <= groups; ++g) {
        const bool set = static_cast<int>(g) < rc && ov[2 * g] != PCRE2_UNSET;
        match.push_back(set ? std::string(subject.substr(ov[2 * g], ov[2 * g + 1] - ov[2 * g])) : std::string());
      }
      matches.push_back(std::move(match));
      at = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
    }
    pcre2_match_data_free(data);
    return matches;
  }

  // Python's re.sub(pattern, "", subject).
  std::string RemoveAll(std::string_view subject) const {
    std::string out(subject.size() + 1, '\0');
    PCRE2_SIZE length = out.size();
    const int rc = pcre2_substitute(code_, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), 0,
                                    PCRE2_SUBSTITUTE_GLOBAL, nullptr, nullptr, reinterpret_cast<PCRE2_SPTR>(""), 0,
                                    reinterpret_cast<PCRE2_UCHAR*>(out.data()), &length);
    if (rc < 0) return std::string(subject);  // cannot happen: removing never grows the text
    out.resize(length);
    return out;
  }

 private:
  explicit Pattern(pcre2_code* code) : code_(code) {}
  pcre2_code* code_;
};

// Python's str.strip(): ASCII whitespace at both ends.
std::string Strip(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\x0b\x0c";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return "";
  return std::string(s.substr(begin, s.find_last_not_of(kSpace) + 1 - begin));
}

// RegexFilter.apply for one response: match[group_select]; a tuple of groups gives its
// first non-empty one; then strip; no match: the fallback.
std::string ApplyRegexFilter(const Pattern& pattern, std::string_view response, bool last) {
  const auto matches = pattern.FindAll(response);
  if (matches.empty()) return std::string(kInvalidAnswer);
  const std::vector<std::string>& match = last ? matches.back() : matches.front();
  for (const std::string& group : match) {
    if (!group.empty()) return Strip(group);
  }
  return std::string(kInvalidAnswer);
}

}  // namespace

struct Gsm8kScorer::Impl {
  Pattern strict;
  Pattern flexible;
  std::vector<Pattern> ignored;
};

Gsm8kScorer::Gsm8kScorer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Gsm8kScorer::~Gsm8kScorer() = default;

Result<std::unique_ptr<Gsm8kScorer>> Gsm8kScorer::Create() {
  LATTE_ASSIGN_OR_RETURN(Pattern strict, Pattern::Compile(kStrictPattern));
  LATTE_ASSIGN_OR_RETURN(Pattern flexible, Pattern::Compile(kFlexiblePattern));
  std::vector<Pattern> ignored;
  for (std::string_view p : kIgnoredPatterns) {
    LATTE_ASSIGN_OR_RETURN(Pattern compiled, Pattern::Compile(p));
    ignored.push_back(std::move(compiled));
  }
  auto impl = std::make_unique<Impl>(Impl{std::move(strict), std::move(flexible), std::move(ignored)});
  return std::unique_ptr<Gsm8kScorer>(new Gsm8kScorer(std::move(impl)));
}

std::string Gsm8kScorer::StrictMatch(std::string_view completion) const {
  return ApplyRegexFilter(impl_->strict, completion, /*last=*/false);
}

std::string Gsm8kScorer::FlexibleExtract(std::string_view completion) const {
  return ApplyRegexFilter(impl_->flexible, completion, /*last=*/true);
}

std::string Gsm8kScorer::Normalize(std::string_view text) const {
  std::string s(text);
  for (const Pattern& p : impl_->ignored) s = p.RemoveAll(s);
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

bool Gsm8kScorer::ExactMatch(std::string_view filtered, std::string_view target) const {
  return Normalize(filtered) == Normalize(target);
}

Result<std::vector<Gsm8kDoc>> LoadGsm8kJsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::vector<Gsm8kDoc> docs;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number) + ": ";
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Status::DataLoss(where + "not JSON");
    if (!j.is_object()) return Status::DataLoss(where + "not a JSON object");
    for (const char* key : {"question", "answer"}) {
      if (!j.contains(key) || !j[key].is_string()) return Status::DataLoss(where + "no string \"" + key + "\"");
    }
    docs.push_back({j["question"].get<std::string>(), j["answer"].get<std::string>()});
  }
  if (in.bad()) return Status::Internal(path + ": read error");
  if (docs.empty()) return Status::DataLoss(path + ": no problems in the file");
  return docs;
}

std::string Gsm8kPrompt(const std::vector<Gsm8kDoc>& fewshot, size_t shots, const Gsm8kDoc& doc) {
  std::string prompt;
  for (size_t i = 0; i < shots && i < fewshot.size(); ++i) {
    prompt += "Question: " + fewshot[i].question + "\nAnswer:" + " " + fewshot[i].answer + "\n\n";
  }
  return prompt + "Question: " + doc.question + "\nAnswer:";
}

double MeanStderr(const std::vector<double>& scores) {
  const size_t n = scores.size();
  if (n < 2) return std::nan("");
  const double mean = std::accumulate(scores.begin(), scores.end(), 0.0) / static_cast<double>(n);
  double squares = 0;
  for (double s : scores) squares += (s - mean) * (s - mean);
  return std::sqrt(squares / static_cast<double>(n - 1)) / std::sqrt(static_cast<double>(n));
}

}  // namespace latte
