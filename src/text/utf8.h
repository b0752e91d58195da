// UTF-8 helpers shared by the tokenizer, the streaming detokenizer and the
// chat template: validity, the length of the longest complete prefix, and
// encoding and decoding one code point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace latte {

// Bytes in the sequence a lead byte starts (1..4), or 0 for a continuation or invalid byte.
size_t Utf8SequenceLength(unsigned char lead);

// True when `s` is well-formed UTF-8 (no overlongs, surrogates, or code points > U+10FFFF).
bool IsValidUtf8(std::string_view s);

// Length of the longest prefix of `s` that does not end inside a (possibly still
// arriving) multi-byte character: the bytes safe to emit while streaming.
// Invalid bytes count as complete (they will never become valid).
size_t CompleteUtf8Prefix(std::string_view s);

// Appends code point `cp` (at most U+10FFFF) as UTF-8.
void AppendUtf8(uint32_t cp, std::string& out);

// Decodes the code point at s[i] (s must be valid UTF-8 there); sets `len`.
uint32_t DecodeUtf8At(std::string_view s, size_t i, size_t& len);

}  // namespace latte
