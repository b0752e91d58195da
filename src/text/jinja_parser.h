// Syntax tree and parser of the chat-template language. Precedence, loosest first,
// as @huggingface/jinja (src/parser.ts) has it:
//   a if c else b  <  or  <  and  <  not  <  == != < > <= >= in, not in
//   <  + - ~  <  * / // %  <  **  <  is [not] test  <  |filter  <  unary + -
//   <  call, .attr, [index], [a:b:c]  <  literals, names, ( ), [ ], { }
// Statements: set (name, tuple, ns.attr), if/elif/else, for (tuple targets,
// `for x in xs if cond`, for/else, break, continue), comments, text, {{ expr }}.
// Nesting is limited (kMaxNesting) so hostile templates cannot exhaust the stack.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/jinja_lexer.h"
#include "text/jinja_value.h"

namespace latte::jinja {

enum class NodeKind : uint8_t {
  // Statements.
  kText,    // name: the text
  kOutput,  // {{ args[0] }}
  kIf,      // args[0]: test; body; orelse
  kFor,     // args: target, iterable, [condition]; body; orelse (runs when no item)
  kSet,     // args: target, value
  kBreak,
  kContinue,
  // Expressions.
  kLiteral,    // literal
  kName,       // name
  kList,       // args: items
  kTuple,      // args: items
  kDict,       // args: key0, value0, key1, value1, ...
  kUnary,      // name: "-" / "+" / "not"; args[0]
  kBinary,     // name: operator ("+", "==", "in", "not in", "and", "or", ...); args[0], args[1]
  kAttribute,  // args[0].name
  kIndex,      // args[0][args[1]]
  kSlice,      // args[0][args[1]:args[2]:args[3]] (null children for omitted parts)
  kCall,       // args[0](args[1..]) with keywords[i - 1] naming keyword arguments
  kFilter,     // args[0] | name(args[1..]), keywords as for kCall
  kTest,       // args[0] is [not] name(args[1..]); negate
  kTernary,    // args[1] if args[0] else args[2]
  kSelect,     // args[1] if args[0] (no else: undefined when false)
};

struct Node {
  NodeKind kind;
  size_t offset = 0;  // byte offset in the template source
  std::string name;
  Value literal;
  bool negate = false;
  std::vector<std::unique_ptr<Node>> args;
  std::vector<std::string> keywords;
  std::vector<std::unique_ptr<Node>> body;
  std::vector<std::unique_ptr<Node>> orelse;
};

using NodeList = std::vector<std::unique_ptr<Node>>;

// Deepest nesting of statements and expressions: real templates stay under 10.
inline constexpr int kMaxNesting = 100;

// The statements of a template, or one line "line L, column C: expected X, got Y".
Result<NodeList> Parse(std::string_view source);

}  // namespace latte::jinja
