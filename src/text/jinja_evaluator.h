// Runs a parsed chat template over a context (messages, add_generation_prompt,
// bos_token, ...) and returns the text. Semantics follow @huggingface/jinja 0.5.11
// (src/runtime.ts), the implementation the tests compare against:
//   - scopes: the context and globals (true, false, none, True, False, None) are
//     the outer scope; each for loop body gets its own scope, so a plain
//     `{% set x %}` inside a loop does not leak out; namespace() attributes do.
//   - an undefined name or missing key is undefined: falsy, prints nothing,
//     `is defined` is false; arithmetic on it is an error.
//   - `+` concatenates when either side is a string; `~` always concatenates.
// Limits keep a hostile template from hanging or exhausting memory: output bytes
// (which also caps any one string value), loop iterations across the whole render,
// list lengths, and bytes of string work (copies included). Exceeding one is an error naming the limit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "text/jinja_parser.h"
#include "text/jinja_value.h"

namespace latte::jinja {

struct RenderLimits {
  // A 128K-token prompt is ~0.5 MB of text; 16 MiB leaves room for tool schemas.
  size_t max_output_bytes = size_t{16} << 20;
  // Loop iterations in one render, all loops together; a 10k-message conversation
  // with a few loops over it stays far below.
  int64_t max_loop_iterations = 1'000'000;
  // Items in any one list (range(), list +, split()); 2^18 values are ~25 MB.
  size_t max_list_items = size_t{1} << 18;
  // Bytes of strings copied or made in one render (about a second of memcpy):
  // bounds time when a loop keeps copying a long string.
  size_t max_work_bytes = size_t{1} << 30;
};

// Renders `program` (parsed from `source`, used for error positions) with the
// variables of `context` (a kMap value). Errors: one line, "line L, column C: ...",
// except raise_exception(msg), whose error is exactly `msg`.
Result<std::string> Render(const NodeList& program, std::string_view source, const Value& context,
                           const RenderLimits& limits);

}  // namespace latte::jinja
