#include "text/utf8.h"

namespace latte {

size_t Utf8SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xc2 && lead <= 0xdf) return 2;
  if (lead >= 0xe0 && lead <= 0xef) return 3;
  if (lead >= 0xf0 && lead <= 0xf4) return 4;
  return 0;
}

namespace {
// Length of the valid character at s[i], or 0 if the bytes there are not one.
size_t ValidCharAt(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const size_t n = Utf8SequenceLength(b(0));
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
  }
  if (n == 3 && b(0) == 0xe0 && b(1) < 0xa0) return 0;   // overlong
  if (n == 3 && b(0) == 0xed && b(1) >= 0xa0) return 0;  // surrogate
  if (n == 4 && b(0) == 0xf0 && b(1) < 0x90) return 0;   // overlong
  if (n == 4 && b(0) == 0xf4 && b(1) >= 0x90) return 0;  // > U+10FFFF
  return n;
}
}  // namespace

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = ValidCharAt(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

size_t CompleteUtf8Prefix(std::string_view s) {
  // Only the last 3 bytes can start an unfinished character.
  const size_t start = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = start; i < s.size(); ++i) {
    const auto lead = static_cast<unsigned char>(s[i]);
    const size_t n = Utf8SequenceLength(lead);
    if (n <= 1 || i + n <= s.size()) continue;
    // A lead byte whose sequence runs past the end: incomplete if what follows so
    // far are continuation bytes.
    bool continuation = true;
    for (size_t k = i + 1; k < s.size(); ++k) {
      continuation = continuation && (static_cast<unsigned char>(s[k]) & 0xc0) == 0x80;
    }
    if (continuation) return i;
  }
  return s.size();
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

uint32_t DecodeUtf8At(std::string_view s, size_t i, size_t& len) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k])); };
  len = Utf8SequenceLength(static_cast<unsigned char>(s[i]));
  switch (len) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1f) << 6) | (b(1) & 0x3f);
    case 3: return ((b(0) & 0x0f) << 12) | ((b(1) & 0x3f) << 6) | (b(2) & 0x3f);
    case 4: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3f) << 12) | ((b(2) & 0x3f) << 6) | (b(3) & 0x3f);
    default: len = 1; return 0xfffd;
  }
}

}  // namespace latte
