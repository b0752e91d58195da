#include "text/added_tokens.h"

#include "text/regex.h"
#include "text/utf8.h"

namespace latte {
namespace {

// Rust's char::is_whitespace: Unicode White_Space.
bool IsWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

// Rust's is_alphanumeric() || '_' on one character (what single_word tests).
bool IsWordChar(std::string_view ch) {
  static const auto regex = Regex::Compile("^[\\p{Alphabetic}\\p{N}_]");
  if (!regex.ok()) return false;
  std::vector<std::pair<size_t, size_t>> m;
  regex.value()->FindAll(ch, m);
  return !m.empty();
}

// Start of the character that ends at `end` (text[..end] is valid UTF-8).
size_t LastCharStart(std::string_view text, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xc0) == 0x80) --i;
  return i;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  terminal_.push_back(-1);
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& content = tokens_[t].content;
    if (content.empty()) continue;
    first_byte_[static_cast<unsigned char>(content[0])] = true;
    int32_t node = 0;
    for (unsigned char b : content) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        it = edges_.emplace(key, static_cast<int32_t>(terminal_.size())).first;
        terminal_.push_back(-1);
      }
      node = it->second;
    }
    terminal_[node] = static_cast<int32_t>(t);  // a later duplicate wins
  }
}

int AddedTokenMatcher::LongestAt(std::string_view text, size_t pos) const {
  int best = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (terminal_[node] >= 0) best = terminal_[node];
  }
  return best;
}

bool AddedTokenMatcher::Accept(const AddedToken& token, std::string_view text, size_t& start, size_t& end,
                               size_t floor) const {
  size_t len = 0;
  if (token.single_word) {
    const bool word_before = start > 0 && IsWordChar(text.substr(LastCharStart(text, start)));
    const bool word_after = end < text.size() && IsWordChar(text.substr(end));
    if (word_before || word_after) return false;
  }
  if (token.lstrip) {
    while (start > floor) {
      const size_t prev = LastCharStart(text, start);
      if (!IsWhitespace(DecodeUtf8At(text, prev, len))) break;
      start = prev;
    }
  }
  if (token.rstrip) {
    while (end < text.size() && IsWhitespace(DecodeUtf8At(text, end, len))) end += len;
  }
  return true;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<TextSegment>& out) const {
  size_t emitted = 0;  // text[..emitted] is already in `out`
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const int t = LongestAt(text, pos);
    if (t < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[t];
    size_t start = pos, end = pos + token.content.size();
    if (!Accept(token, text, start, end, emitted)) {
      pos = end;  // matches do not overlap, even rejected ones
      continue;
    }
    if (start > emitted) out.push_back({text.substr(emitted, start - emitted), -1});
    out.push_back({text.substr(start, end - start), token.id});
    emitted = pos = end;
  }
  if (emitted < text.size()) out.push_back({text.substr(emitted), -1});
}

}  // namespace latte
