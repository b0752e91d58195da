// A compiled PCRE2 regex that finds matches the way Hugging Face's tokenizers do
// with Oniguruma: leftmost-first (backtracking) alternation, Unicode properties for
// \p{..}, non-overlapping matches scanned left to right.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace latte {

class Regex {
 public:
  // `literal`: match `pattern` as plain text (Split's {"String": ...} pattern).
  static Result<std::unique_ptr<Regex>> Compile(std::string_view pattern, bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends [start, end) byte offsets of every non-empty match in `subject`, which
  // must be valid UTF-8 (not re-checked, for speed). Thread-safe.
  void FindAll(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const;
  // The same matches, in order, handed to `on_match(start, end)` as they are found.
  template <typename OnMatch> void ForEachMatch(std::string_view subject, OnMatch&& on_match) const {
    size_t offset = 0, start = 0, end = 0;
    while (NextMatch(subject, offset, start, end)) on_match(start, end);
  }

 private:
  Regex() = default;
  // The first non-empty match at or after `offset`; advances `offset` past it.
  bool NextMatch(std::string_view subject, size_t& offset, size_t& start, size_t& end) const;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

// Rewrites \s and \S (outside and inside [...]) into Oniguruma's set, Unicode's
// White_Space. PCRE2's UCP \s also takes U+180E MONGOLIAN VOWEL SEPARATOR, which
// Unicode 6.3 took out of White_Space and Oniguruma does not match.
std::string WithOnigurumaWhitespace(std::string_view pattern);

}  // namespace latte
