#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace latte {
namespace {

// Unicode White_Space as a class body (what Oniguruma's \s matches in UTF-8 mode).
constexpr char kWhiteSpaceClassBody[] =
    "\\t-\\r\\x20\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";

// Per-thread scratch for pcre2_match: match data for one pair of offsets, and a JIT
// stack bigger than the 32 KiB default so long runs of text cannot exhaust it.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  MatchScratch() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
  ~MatchScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchScratch& Scratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

}  // namespace

std::string WithOnigurumaWhitespace(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceClassBody) : "[" + std::string(kWhiteSpaceClassBody) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceClassBody) + "]";
      } else {
        out += c;
        out += e;  // other escapes (including \S inside a class) stay as written
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Result<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern, bool literal) {
  const std::string source = literal ? std::string(pattern) : WithOnigurumaWhitespace(pattern);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : 0);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options, &error,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return Status::InvalidArgument("regex \"" + std::string(pattern) + "\" does not compile at offset " +
                                   std::to_string(error_offset) + ": " + reinterpret_cast<const char*>(message));
  }
  auto regex = std::unique_ptr<Regex>(new Regex());
  regex->code_ = code;
  regex->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return regex;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Regex::NextMatch(std::string_view subject, size_t& offset, size_t& start, size_t& end) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchScratch& scratch = Scratch();
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  while (offset < subject.size()) {
    int rc = jit_ ? pcre2_jit_match(code, text, subject.size(), offset, 0, scratch.data, scratch.context)
                  : PCRE2_ERROR_JIT_STACKLIMIT;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {  // fall back to the interpreter
      rc = pcre2_match(code, text, subject.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, scratch.data,
                       scratch.context);
    }
    if (rc < 0) return false;  // no (further) match
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.data);
    start = ovector[0];
    end = ovector[1];
    if (end > start) {
      offset = end;
      return true;
    }
    // An empty match: step over one character.
    offset = start + 1;
    while (offset < subject.size() && (static_cast<unsigned char>(subject[offset]) & 0xc0) == 0x80) ++offset;
  }
  return false;
}

void Regex::FindAll(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const {
  ForEachMatch(subject, [&out](size_t start, size_t end) { out.emplace_back(start, end); });
}

}  // namespace latte
