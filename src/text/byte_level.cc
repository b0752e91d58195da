#include "text/byte_level.h"

#include "text/utf8.h"

namespace latte {
namespace {

bool IsPrintableByte(uint32_t b) { return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae; }

struct ByteLevelTables {
  std::array<std::string, 256> chars;  // byte -> UTF-8 of its character
  std::array<int16_t, 0x144> bytes;    // code point (< U+0144) -> byte, or -1
};

const ByteLevelTables& Tables() {
  static const ByteLevelTables tables = [] {
    ByteLevelTables t;
    t.bytes.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t cp = IsPrintableByte(b) ? b : next++;
      AppendUtf8(cp, t.chars[b]);
      t.bytes[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return tables;
}

// Length of the maximal subpart of an ill-formed sequence starting at s[i]
// (at least 1): the lead byte plus the continuation bytes that were still allowed.
size_t InvalidSubpartLength(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const size_t n = Utf8SequenceLength(b0);
  if (n <= 1) return 1;
  size_t k = 1;
  for (; k < n && i + k < s.size(); ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    unsigned char lo = 0x80, hi = 0xbf;
    if (k == 1) {
      if (b0 == 0xe0) lo = 0xa0;
      if (b0 == 0xed) hi = 0x9f;
      if (b0 == 0xf0) lo = 0x90;
      if (b0 == 0xf4) hi = 0x8f;
    }
    if (b < lo || b > hi) break;
  }
  return k;
}

}  // namespace

const std::string& ByteLevelChar(uint8_t b) { return Tables().chars[b]; }

int ByteLevelByte(uint32_t code_point) { return code_point < Tables().bytes.size() ? Tables().bytes[code_point] : -1; }

std::string ToByteLevel(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) out += ByteLevelChar(c);
  return out;
}

bool AppendFromByteLevel(std::string_view token, std::string& out) {
  const size_t mark = out.size();
  for (size_t i = 0; i < token.size();) {
    size_t len = 0;
    const int byte = ByteLevelByte(DecodeUtf8At(token, i, len));
    if (byte < 0) {
      out.resize(mark);
      return false;
    }
    out += static_cast<char>(byte);
    i += len;
  }
  return true;
}

std::string Utf8Lossy(std::string_view bytes) {
  if (IsValidUtf8(bytes)) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size() + 8);
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = Utf8SequenceLength(static_cast<unsigned char>(bytes[i]));
    if (n > 0 && i + n <= bytes.size() && IsValidUtf8(bytes.substr(i, n))) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\xef\xbf\xbd";  // U+FFFD
      i += InvalidSubpartLength(bytes, i);
    }
  }
  return out;
}

}  // namespace latte
