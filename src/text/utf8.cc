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
  if (n == 3 && b(0) == 0xe0 && b(1) < 0xa0) return 0;  // overlong
  if (n == 3 && b(0) == 0xed && b(1) >= 0xa0) return 0;  // surrogate
  if (n == 4 && b(0) == 0xf0 && b(1) < 0x90) return 0;  // overlong
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

}  // namespace latte
