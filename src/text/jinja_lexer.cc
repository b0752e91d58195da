#include "text/jinja_lexer.h"

#include <algorithm>

#include "text/utf8.h"

namespace latte::jinja {

namespace {

// The preprocessed source with, for each of its bytes, the offset in the original.
struct Preprocessed {
  std::string text;
  std::vector<size_t> origin;
  size_t end_offset;  // offset reported for "end of input"
};

bool IsLineTerminatorAt(std::string_view s, size_t i, size_t* length) {
  if (s[i] == '\n' || s[i] == '\r') {
    *length = 1;
    return true;
  }
  // U+2028, U+2029: JavaScript's ^ in multiline mode matches after them too.
  if (i + 2 < s.size() + 0 && static_cast<unsigned char>(s[i]) == 0xe2 &&
      static_cast<unsigned char>(s[i + 1]) == 0x80 &&
      (static_cast<unsigned char>(s[i + 2]) == 0xa8 || static_cast<unsigned char>(s[i + 2]) == 0xa9)) {
    *length = 3;
    return true;
  }
  return false;
}

Preprocessed Preprocess(std::string_view source) {
  std::string_view src = source;
  if (!src.empty() && src.back() == '\n') src.remove_suffix(1);

  // lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1".
  std::string a;
  std::vector<size_t> a_origin;
  a.reserve(src.size());
  a_origin.reserve(src.size());
  bool line_start = true;
  for (size_t i = 0; i < src.size();) {
    if (line_start) {
      size_t j = i;
      while (j < src.size() && (src[j] == ' ' || src[j] == '\t')) ++j;
      if (j + 1 < src.size() && src[j] == '{' && (src[j + 1] == '#' || src[j + 1] == '%' || src[j + 1] == '-')) {
        i = j;
      }
      line_start = false;
      continue;
    }
    size_t n = 1;
    const bool terminator = IsLineTerminatorAt(src, i, &n);
    for (size_t k = 0; k < n; ++k) {
      a.push_back(src[i + k]);
      a_origin.push_back(i + k);
    }
    i += n;
    line_start = terminator;
  }

  // trim_blocks: /([#%-]})\n/g -> "$1".
  Preprocessed out;
  out.text.reserve(a.size());
  out.origin.reserve(a.size());
  for (size_t i = 0; i < a.size();) {
    if (i + 2 < a.size() && (a[i] == '#' || a[i] == '%' || a[i] == '-') && a[i + 1] == '}' && a[i + 2] == '\n') {
      out.text.append(a, i, 2);
      out.origin.push_back(a_origin[i]);
      out.origin.push_back(a_origin[i + 1]);
      i += 3;
      continue;
    }
    out.text.push_back(a[i]);
    out.origin.push_back(a_origin[i]);
    ++i;
  }
  out.end_offset = source.size();
  return out;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsWordChar(char c) { return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

struct SyntaxError {
  size_t offset;
  std::string message;
};

class Lexer {
 public:
  Lexer(std::string_view source, Preprocessed pre) : source_(source), pre_(std::move(pre)) {}

  Result<std::vector<Token>> Run() {
    const std::string_view src = pre_.text;
    while (pos_ < src.size()) {
      const TokenType* last = tokens_.empty() ? nullptr : &tokens_.back().type;
      if (last == nullptr || *last == TokenType::kCloseStatement || *last == TokenType::kCloseExpression ||
          *last == TokenType::kComment) {
        const size_t start = pos_;
        while (pos_ < src.size() && !(src[pos_] == '{' && pos_ + 1 < src.size() &&
                                      (src[pos_ + 1] == '%' || src[pos_ + 1] == '{' || src[pos_ + 1] == '#'))) {
          ++pos_;
        }
        if (pos_ > start) {
          Push(TokenType::kText, std::string(src.substr(start, pos_ - start)), start);
          continue;
        }
      }
      if (!Step()) return Error();
    }
    return std::move(tokens_);
  }

 private:
  size_t Origin(size_t pos) const { return pos < pre_.origin.size() ? pre_.origin[pos] : pre_.end_offset; }
  void Push(TokenType type, std::string value, size_t pos) {
    tokens_.push_back(Token{type, std::move(value), Origin(pos)});
  }
  bool Fail(size_t pos, std::string message) {
    error_ = SyntaxError{Origin(pos), std::move(message)};
    return false;
  }
  Status Error() const {
    return Status::InvalidArgument(DescribeOffset(source_, error_.offset) + ": " + error_.message);
  }
  bool StartsWith(std::string_view s) const { return std::string_view(pre_.text).substr(pos_, s.size()) == s; }
  void StripTrailingWhitespace() {
    if (!tokens_.empty() && tokens_.back().type == TokenType::kText) {
      std::string& v = tokens_.back().value;
      v.resize(TrimJsEnd(v).size());
      if (v.empty()) tokens_.pop_back();
    }
  }
  void SkipWhitespace() {
    size_t n = 0;
    while (pos_ < pre_.text.size() && IsJsWhitespaceAt(pre_.text, pos_, &n)) pos_ += n;
  }

  // One token inside a tag (or a tag opener/comment).
  bool Step() {
    const std::string_view src = pre_.text;
    if (StartsWith("{#")) {
      const size_t open = pos_;
      pos_ += 2;
      const bool strip_before = pos_ < src.size() && src[pos_] == '-';
      if (strip_before) ++pos_;
      const size_t close = src.find("#}", pos_);
      if (close == std::string_view::npos) return Fail(open, "unterminated comment: expected '#}'");
      std::string comment(src.substr(pos_, close - pos_));
      const bool strip_after = !comment.empty() && comment.back() == '-';
      if (strip_after) comment.pop_back();
      if (strip_before) StripTrailingWhitespace();
      Push(TokenType::kComment, std::move(comment), open);
      pos_ = close + 2;
      if (strip_after) SkipWhitespace();
      return true;
    }
    if (StartsWith("{%-")) {
      StripTrailingWhitespace();
      Push(TokenType::kOpenStatement, "{%", pos_);
      pos_ += 3;
      return true;
    }
    if (StartsWith("{{-")) {
      StripTrailingWhitespace();
      Push(TokenType::kOpenExpression, "{{", pos_);
      brace_depth_ = 0;
      pos_ += 3;
      return true;
    }
    SkipWhitespace();
    if (pos_ >= src.size()) return true;
    if (StartsWith("-%}")) {
      Push(TokenType::kCloseStatement, "%}", pos_);
      pos_ += 3;
      SkipWhitespace();
      return true;
    }
    if (StartsWith("-}}")) {
      Push(TokenType::kCloseExpression, "}}", pos_);
      pos_ += 3;
      SkipWhitespace();
      return true;
    }
    const char c = src[pos_];
    if (c == '-' || c == '+') {
      if (tokens_.empty() || tokens_.back().type == TokenType::kText) {
        return Fail(pos_, std::string("unexpected character '") + c + "'");
      }
      switch (tokens_.back().type) {
        case TokenType::kIdentifier:
        case TokenType::kNumber:
        case TokenType::kString:
        case TokenType::kCloseParen:
        case TokenType::kCloseBracket: break;  // a binary operator: the table below
        default: {
          const size_t start = pos_++;
          std::string num = ConsumeDigits();
          if (!num.empty() && pos_ + 1 < src.size() && src[pos_] == '.' && IsDigit(src[pos_ + 1])) {
            ++pos_;
            num += "." + ConsumeDigits();
          }
          if (num.empty()) {
            Push(TokenType::kUnary, std::string(1, c), start);
          } else {
            Push(TokenType::kNumber, std::string(1, c) + num, start);
          }
          return true;
        }
      }
    }
    static constexpr struct {
      std::string_view text;
      TokenType type;
    } kTable[] = {
        {"{%", TokenType::kOpenStatement},  {"%}", TokenType::kCloseStatement},
        {"{{", TokenType::kOpenExpression}, {"}}", TokenType::kCloseExpression},
        {"(", TokenType::kOpenParen},       {")", TokenType::kCloseParen},
        {"{", TokenType::kOpenBrace},       {"}", TokenType::kCloseBrace},
        {"[", TokenType::kOpenBracket},     {"]", TokenType::kCloseBracket},
        {",", TokenType::kComma},           {".", TokenType::kDot},
        {":", TokenType::kColon},           {"|", TokenType::kPipe},
        {"<=", TokenType::kComparison},     {">=", TokenType::kComparison},
        {"==", TokenType::kComparison},     {"!=", TokenType::kComparison},
        {"<", TokenType::kComparison},      {">", TokenType::kComparison},
        {"+", TokenType::kAdditive},        {"-", TokenType::kAdditive},
        {"~", TokenType::kAdditive},        {"**", TokenType::kPower},
        {"*", TokenType::kMultiplicative},  {"//", TokenType::kMultiplicative},
        {"/", TokenType::kMultiplicative},  {"%", TokenType::kMultiplicative},
        {"=", TokenType::kEquals},
    };
    for (const auto& entry : kTable) {
      if (entry.text == "}}" && brace_depth_ > 0) continue;
      if (!StartsWith(entry.text)) continue;
      Push(entry.type, std::string(entry.text), pos_);
      if (entry.type == TokenType::kOpenExpression) brace_depth_ = 0;
      if (entry.type == TokenType::kOpenBrace) ++brace_depth_;
      if (entry.type == TokenType::kCloseBrace) --brace_depth_;
      pos_ += entry.text.size();
      return true;
    }
    if (c == '\'' || c == '"') return LexString(c);
    if (IsDigit(c)) {
      const size_t start = pos_;
      std::string num = ConsumeDigits();
      const bool after_dot = !tokens_.empty() && tokens_.back().type == TokenType::kDot;
      if (!after_dot && pos_ + 1 < src.size() && src[pos_] == '.' && IsDigit(src[pos_ + 1])) {
        ++pos_;
        num += "." + ConsumeDigits();
      }
      Push(TokenType::kNumber, std::move(num), start);
      return true;
    }
    if (IsWordChar(c)) {
      const size_t start = pos_;
      while (pos_ < src.size() && IsWordChar(src[pos_])) ++pos_;
      Push(TokenType::kIdentifier, std::string(src.substr(start, pos_ - start)), start);
      return true;
    }
    return Fail(pos_, "unexpected character '" + std::string(src.substr(pos_, 1)) + "'");
  }

  std::string ConsumeDigits() {
    const size_t start = pos_;
    while (pos_ < pre_.text.size() && IsDigit(pre_.text[pos_])) ++pos_;
    return pre_.text.substr(start, pos_ - start);
  }

  static int HexValue(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  bool LexString(char quote) {
    const std::string_view src = pre_.text;
    const size_t open = pos_++;
    std::string value;
    while (true) {
      if (pos_ >= src.size()) return Fail(open, "unterminated string literal");
      const char c = src[pos_];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++pos_;
        continue;
      }
      if (++pos_ >= src.size()) return Fail(open, "unterminated string literal");
      const char e = src[pos_++];
      switch (e) {
        case 'n': value.push_back('\n'); break;
        case 't': value.push_back('\t'); break;
        case 'r': value.push_back('\r'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'v': value.push_back('\v'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case '\\': value.push_back('\\'); break;
        case 'x':
        case 'u': {
          const size_t length = e == 'x' ? 2 : 4;
          uint32_t cp = 0;
          for (size_t k = 0; k < length; ++k) {
            const int h = pos_ + k < src.size() ? HexValue(src[pos_ + k]) : -1;
            if (h < 0) return Fail(pos_ - 2, std::string("invalid escape sequence \\") + e);
            cp = cp * 16 + static_cast<uint32_t>(h);
          }
          pos_ += length;
          if (cp >= 0xd800 && cp <= 0xdfff) return Fail(pos_ - length - 2, "surrogate escape");
          AppendUtf8(cp, value);
          break;
        }
        default: return Fail(pos_ - 2, std::string("unknown escape sequence \\") + e);
      }
    }
    Push(TokenType::kString, std::move(value), open);
    ++pos_;
    return true;
  }

  std::string_view source_;
  Preprocessed pre_;
  size_t pos_ = 0;
  int brace_depth_ = 0;
  std::vector<Token> tokens_;
  SyntaxError error_;
};

}  // namespace

bool IsJsWhitespaceAt(std::string_view s, size_t i, size_t* length) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c == ' ' || (c >= '\t' && c <= '\r')) {
    *length = 1;
    return true;
  }
  if (c == 0xc2 && i + 1 < s.size() && b(1) == 0xa0) {  // U+00A0
    *length = 2;
    return true;
  }
  if (i + 2 >= s.size()) return false;
  *length = 3;
  if (c == 0xe1 && b(1) == 0x9a && b(2) == 0x80) return true;  // U+1680
  if (c == 0xe2 && b(1) == 0x80 && (b(2) <= 0x8a || b(2) == 0xa8 || b(2) == 0xa9 || b(2) == 0xaf)) {
    return b(2) >= 0x80;  // U+2000..U+200A, U+2028, U+2029, U+202F
  }
  if (c == 0xe2 && b(1) == 0x81 && b(2) == 0x9f) return true;  // U+205F
  if (c == 0xe3 && b(1) == 0x80 && b(2) == 0x80) return true;  // U+3000
  if (c == 0xef && b(1) == 0xbb && b(2) == 0xbf) return true;  // U+FEFF
  return false;
}

std::string_view TrimJsStart(std::string_view s) {
  size_t i = 0, n = 0;
  while (i < s.size() && IsJsWhitespaceAt(s, i, &n)) i += n;
  return s.substr(i);
}

std::string_view TrimJsEnd(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    // Whitespace characters are 1 to 3 bytes long: try each start.
    bool found = false;
    for (size_t len = 1; len <= 3 && len <= end; ++len) {
      size_t n = 0;
      if (IsJsWhitespaceAt(s.substr(0, end), end - len, &n) && n == len) {
        end -= len;
        found = true;
        break;
      }
    }
    if (!found) break;
  }
  return s.substr(0, end);
}

std::string DescribeOffset(std::string_view source, size_t offset) {
  offset = std::min(offset, source.size());
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset; ++i) {
    if (source[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

Result<std::vector<Token>> Tokenize(std::string_view source) { return Lexer(source, Preprocess(source)).Run(); }

}  // namespace latte::jinja
