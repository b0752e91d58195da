#include "text/pre_tokenizer.h"

namespace latte {
namespace {

using nlohmann::json;

// GPT-2's pattern, which ByteLevel applies when use_regex is true.
constexpr char kGpt2Pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

bool FlagOr(const json& j, const char* key, bool fallback) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

// A span of a piece and whether the regex matched it.
struct Span {
  size_t start, end;
  bool is_match;
};

// Every byte of `piece` in order: the matches and the gaps between them.
std::vector<Span> CoveringSpans(const Regex& regex, std::string_view piece, bool invert) {
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  matches.clear();
  regex.FindAll(piece, matches);
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [start, end] : matches) {
    if (prev != start) spans.push_back({prev, start, invert});
    spans.push_back({start, end, !invert});
    prev = end;
  }
  if (prev != piece.size()) spans.push_back({prev, piece.size(), invert});
  return spans;
}

}  // namespace

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const json& j) {
  auto pre = std::unique_ptr<PreTokenizer>(new PreTokenizer());
  if (j.is_null()) return pre;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return Status::DataLoss("pre_tokenizer must be null or an object with a \"type\"");
  }
  if (j["type"] == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      return Status::DataLoss("pre_tokenizer Sequence needs a \"pretokenizers\" array");
    }
    const json& list = j["pretokenizers"];
    for (size_t i = 0; i < list.size(); ++i) {
      LATTE_RETURN_IF_ERROR(pre->AddStep(list[i], i + 1 == list.size())
                                .WithContext("pre_tokenizer.pretokenizers[" + std::to_string(i) + "]"));
    }
    return pre;
  }
  LATTE_RETURN_IF_ERROR(pre->AddStep(j, true).WithContext("pre_tokenizer"));
  return pre;
}

Status PreTokenizer::AddStep(const json& j, bool last) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return Status::DataLoss("needs a \"type\"");
  const std::string type = j["type"].get<std::string>();
  SplitStep step;
  if (type == "Split") {
    const json pattern = j.value("pattern", json());
    const bool literal = pattern.contains("String") && pattern["String"].is_string();
    if (!literal && !(pattern.contains("Regex") && pattern["Regex"].is_string())) {
      return Status::DataLoss("Split needs a pattern {\"Regex\": ...} or {\"String\": ...}");
    }
    LATTE_ASSIGN_OR_RETURN(step.regex,
                           Regex::Compile(pattern[literal ? "String" : "Regex"].get<std::string>(), literal));
    const std::string behavior = j.value("behavior", std::string("Isolated"));
    if (behavior == "Removed")
      step.behavior = Behavior::kRemoved;
    else if (behavior == "Isolated")
      step.behavior = Behavior::kIsolated;
    else if (behavior == "MergedWithPrevious")
      step.behavior = Behavior::kMergedWithPrevious;
    else if (behavior == "MergedWithNext")
      step.behavior = Behavior::kMergedWithNext;
    else if (behavior == "Contiguous")
      step.behavior = Behavior::kContiguous;
    else
      return Status::Unimplemented("Split behavior \"" + behavior + "\" is not supported");
    step.invert = FlagOr(j, "invert", false);
  } else if (type == "ByteLevel") {
    // Later steps would see byte-level characters instead of text; no known
    // tokenizer does that.
    if (!last) return Status::DataLoss("ByteLevel is supported only as the last pre-tokenizer");
    if (FlagOr(j, "use_regex", true)) {
      LATTE_ASSIGN_OR_RETURN(step.regex, Regex::Compile(kGpt2Pattern));
    }
    step.add_prefix_space = FlagOr(j, "add_prefix_space", true);
    byte_level_ = true;
  } else {
    return Status::Unimplemented("pre-tokenizer type \"" + type +
                                 "\" is not supported (supported: Sequence, Split, ByteLevel)");
  }
  steps_.push_back(std::move(step));
  return Status::Ok();
}

void PreTokenizer::ApplyStep(const SplitStep& step, std::string_view piece, std::vector<std::string_view>& out,
                             std::deque<std::string>& arena) {
  if (step.add_prefix_space && piece.front() != ' ') {
    arena.push_back(" " + std::string(piece));
    piece = arena.back();
  }
  if (!step.regex) {
    out.push_back(piece);
    return;
  }
  const std::vector<Span> spans = CoveringSpans(*step.regex, piece, step.invert);
  // Pieces as [start, end) offsets, merged per behavior as in Hugging Face's
  // NormalizedString::split.
  std::vector<std::pair<size_t, size_t>> parts;
  bool previous_match = false;
  switch (step.behavior) {
    case Behavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) parts.emplace_back(s.start, s.end);
      }
      break;
    case Behavior::kIsolated:
      for (const Span& s : spans) parts.emplace_back(s.start, s.end);
      break;
    case Behavior::kMergedWithPrevious:  // a match joins the piece before it
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !parts.empty())
          parts.back().second = s.end;
        else
          parts.emplace_back(s.start, s.end);
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithNext:  // a match joins the piece after it
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !parts.empty())
          parts.back().first = it->start;
        else
          parts.emplace_back(it->start, it->end);
        previous_match = it->is_match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    case Behavior::kContiguous:  // runs of matches, and runs of non-matches, join
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !parts.empty())
          parts.back().second = s.end;
        else
          parts.emplace_back(s.start, s.end);
        previous_match = s.is_match;
      }
      break;
  }
  for (const auto& [start, end] : parts) {
    if (end > start) out.push_back(piece.substr(start, end - start));
  }
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>& out,
                         std::deque<std::string>& arena) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text}, next;
  for (const SplitStep& step : steps_) {
    next.clear();
    for (std::string_view piece : current) ApplyStep(step, piece, next, arena);
    current.swap(next);
  }
  out.insert(out.end(), current.begin(), current.end());
}

}  // namespace latte
