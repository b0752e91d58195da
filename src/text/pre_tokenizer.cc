#include "text/pre_tokenizer.h"

namespace latte {
namespace {

using nlohmann::json;

// GPT-2's pattern, which ByteLevel applies when use_regex is true.
constexpr char kGpt2Pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

bool FlagOr(const json& j, const char* key, bool fallback) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
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

// Joins a step's spans (the matches and the gaps between them, in order) into parts as
// Hugging Face's NormalizedString::split does per behavior, holding at most one part
// back: MergedWithPrevious and Contiguous may extend it with the next span,
// MergedWithNext may prepend a match to the span after it.
class PreTokenizer::PartJoiner {
 public:
  PartJoiner(Behavior behavior, std::function<void(size_t, size_t)> emit)
      : behavior_(behavior), emit_(std::move(emit)) {}

  void Add(size_t start, size_t end, bool is_match) {
    switch (behavior_) {
      case Behavior::kRemoved:
        if (!is_match) emit_(start, end);
        return;
      case Behavior::kIsolated: emit_(start, end); return;
      case Behavior::kMergedWithPrevious:
        if (is_match && held_ && !held_match_) {
          held_end_ = end;
        } else {
          Hold(start, end);
        }
        break;
      case Behavior::kMergedWithNext:
        if (held_ && held_match_ && !is_match) {  // the held match and this gap are one part
          emit_(held_start_, end);
          held_ = false;
          return;
        }
        Hold(start, end);
        break;
      case Behavior::kContiguous:
        if (held_ && is_match == held_match_) {
          held_end_ = end;
        } else {
          Hold(start, end);
        }
        break;
    }
    held_match_ = is_match;
  }
  void Finish() {
    if (held_) emit_(held_start_, held_end_);
    held_ = false;
  }

 private:
  void Hold(size_t start, size_t end) {
    if (held_) emit_(held_start_, held_end_);
    held_ = true;
    held_start_ = start;
    held_end_ = end;
  }
  Behavior behavior_;
  std::function<void(size_t, size_t)> emit_;
  bool held_ = false;
  bool held_match_ = false;  // whether the last span added was a match
  size_t held_start_ = 0, held_end_ = 0;
};

void PreTokenizer::ApplyStep(size_t index, std::string_view piece,
                             const std::function<void(std::string_view)>& emit) const {
  if (index == steps_.size()) {
    emit(piece);
    return;
  }
  const SplitStep& step = steps_[index];
  std::string spaced;  // lives until the parts made from it are passed on
  if (step.add_prefix_space && piece.front() != ' ') {
    spaced = " " + std::string(piece);
    piece = spaced;
  }
  if (!step.regex) {
    ApplyStep(index + 1, piece, emit);
    return;
  }
  PartJoiner joiner(step.behavior, [&](size_t start, size_t end) {
    if (end > start) ApplyStep(index + 1, piece.substr(start, end - start), emit);
  });
  size_t previous_end = 0;
  step.regex->ForEachMatch(piece, [&](size_t start, size_t end) {
    if (previous_end != start) joiner.Add(previous_end, start, step.invert);
    joiner.Add(start, end, !step.invert);
    previous_end = end;
  });
  if (previous_end != piece.size()) joiner.Add(previous_end, piece.size(), step.invert);
  joiner.Finish();
}

void PreTokenizer::ForEach(std::string_view text, const std::function<void(std::string_view)>& emit) const {
  if (!text.empty()) ApplyStep(0, text, emit);
}

}  // namespace latte
