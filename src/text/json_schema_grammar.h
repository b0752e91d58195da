// JSON, and JSON that a schema allows, as byte grammars (text/grammar.h): what
// response_format {"type": "json_object"} and {"type": "json_schema"} constrain
// decoding to.
//
// The JSON written is compact, with at most one space after each ':' and ',' (no
// other whitespace), so a model cannot spend its tokens on endless whitespace; numbers
// have bounded digits (kMaxIntegerDigits, kMaxExponentDigits).
// Object properties come in the order the schema lists them (so the schema must reach
// here as nlohmann::ordered_json: nlohmann::json sorts keys); properties not in
// `required` may be left out.
//
// Schema keywords understood (what OpenAI's strict mode allows, and a little more):
//   type (one or a list): object, array, string, number, integer, boolean, null
//   object: properties, required, additionalProperties (false, true, or a schema for
//           an object without properties)
//   array: items, minItems, maxItems (at most kMaxItemsBound)
//   enum, const, anyOf, $ref ("#", "#/$defs/…", "#/definitions/…") with $defs /
//   definitions
//   annotations, ignored: title, description, default, examples, $schema, $id,
//   $comment, strict
// Any other keyword is refused with a message naming it and the path to it.
#pragma once

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "text/grammar.h"

namespace latte {

// Containers in a value of any shape (json_object, a schema of `{}`) nest at most
// this deep; deeper, only scalars are allowed.
inline constexpr int kMaxAnyJsonDepth = 8;
// Numbers: at most this many digits before the point, and in the exponent, so that
// every number written is finite for a parser of doubles (JavaScript's JSON.parse).
inline constexpr int kMaxIntegerDigits = 19;
inline constexpr int kMaxExponentDigits = 2;
inline constexpr int64_t kMaxItemsBound = 1024;

// Any JSON object.
Grammar JsonObjectGrammar();

// JSON that `schema` allows. Errors: InvalidArgument naming the keyword and its path
// ("\"pattern\" at properties.name is not supported").
Result<Grammar> JsonSchemaGrammar(const nlohmann::ordered_json& schema);

// The grammar a request's output is constrained to, from its spec as the engine
// carries it (GenerationRequest::output_constraint): {"type": "json_object"} or
// {"type": "json_schema", "schema": S}.
Result<Grammar> OutputConstraintGrammar(std::string_view spec);

}  // namespace latte
