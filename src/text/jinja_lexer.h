// Tokens of the chat-template language (a Jinja subset), produced the way
// Hugging Face's @huggingface/jinja (0.5.11, src/lexer.ts) produces them, so the
// whitespace of rendered prompts matches byte for byte:
//   1. preprocess: drop one trailing "\n"; lstrip_blocks (spaces and tabs before a
//      line's "{%" or "{#" go); trim_blocks (the "\n" right after "%}" or "#}" goes).
//      transformers renders with the same two options.
//   2. tokenize: text runs between tags; "{%-", "{{-", "{#-" trim the preceding text's
//      trailing whitespace, "-%}", "-}}", "-#}" skip the following whitespace.
// Every token keeps its byte offset in the original source for error messages.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace latte::jinja {

enum class TokenType : uint8_t {
  kText,
  kNumber,      // 123, 1.5, -1 (a sign right after an operator belongs to the number)
  kString,      // 'a\n' with escapes already decoded
  kIdentifier,  // names and keywords (if, for, in, not, and, ...)
  kEquals,      // =
  kOpenParen,
  kCloseParen,
  kOpenStatement,    // {%
  kCloseStatement,   // %}
  kOpenExpression,   // {{
  kCloseExpression,  // }}
  kOpenBracket,
  kCloseBracket,
  kOpenBrace,
  kCloseBrace,
  kComma,
  kDot,
  kColon,
  kPipe,
  kAdditive,        // + - ~
  kMultiplicative,  // * / // %
  kPower,           // **
  kComparison,      // < > <= >= == !=
  kUnary,           // a lone + or - before a non-number
  kComment,
};

struct Token {
  TokenType type;
  std::string value;
  size_t offset;  // byte offset in the original source
};

// The tokens of `source`, or a one-line error "line L, column C: ...".
Result<std::vector<Token>> Tokenize(std::string_view source);

// "line L, column C" (1-based; columns count bytes) of a byte offset in `source`.
std::string DescribeOffset(std::string_view source, size_t offset);

// JavaScript's String.prototype.trim family (the whitespace set of /\s/:
// ASCII space and \t\n\v\f\r, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
// U+202F, U+205F, U+3000, U+FEFF), on UTF-8.
bool IsJsWhitespaceAt(std::string_view s, size_t i, size_t* length);
std::string_view TrimJsStart(std::string_view s);
std::string_view TrimJsEnd(std::string_view s);

}  // namespace latte::jinja
