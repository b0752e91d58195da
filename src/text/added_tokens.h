// Added tokens of a tokenizer.json ("added_tokens": [{id, content, special,
// normalized, lstrip, rstrip, single_word}]): strings matched in the text before
// pre-tokenization and BPE, each becoming its own id. DeepSeek-V3 has 818, e.g.
// "<｜begin▁of▁sentence｜>" (special) and "<｜User｜>" (not special, normalized).
//
// Matching follows Hugging Face's AddedVocabulary: leftmost-longest, non-overlapping
// (its Aho-Corasick MatchKind::LeftmostLongest), on the raw text for tokens with
// normalized=false and then on the normalized remainder for normalized=true ones.
// lstrip/rstrip widen a match over neighbouring whitespace; single_word drops a
// match that touches a word character on either side.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace latte {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// A run of text and, when it is an added token, that token's id (else -1).
struct TextSegment {
  std::string_view text;
  int32_t id = -1;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  // Splits `text` into plain runs and matched tokens, appended to `out` in order.
  void Split(std::string_view text, std::vector<TextSegment>& out) const;
  bool empty() const { return tokens_.empty(); }

 private:
  // Index into tokens_ of the longest token starting at text[pos], or -1.
  int LongestAt(std::string_view text, size_t pos) const;
  // Whether the single_word / strip rules keep a match at [start, end) and where
  // the token's span then lies.
  bool Accept(const AddedToken& token, std::string_view text, size_t& start, size_t& end, size_t floor) const;

  std::vector<AddedToken> tokens_;
  // Byte trie over the contents: edges keyed by (node << 8 | byte); node 0 is the root.
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> terminal_;  // node -> index into tokens_, or -1
  bool first_byte_[256] = {};      // bytes that start some token: a fast skip test
};

}  // namespace latte
