// Typed reads of a request body's optional fields. A field that is absent or null keeps
// the caller's default; one of the wrong type is an ApiError naming it (OpenAI answers
// a wrong type with 400 and `param` set to the field).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace latte::server {

using MaybeError = std::optional<ApiError>;

#define LATTE_RETURN_IF_API_ERROR(expr)    \
  do {                                     \
    if (auto latte_api_error_ = (expr)) {  \
      return std::move(*latte_api_error_); \
    }                                      \
  } while (0)

// The most JSON values (numbers, strings, booleans, nulls, objects, arrays and object
// keys) one request body may hold. nlohmann's tree costs 16 bytes a value and ~100 a
// key, so a body of small values parses to many times its size (200k one-word chat
// messages: 40x); at this bound the tree stays within a few times the body limit, and
// a prompt of token ids as long as V3's context (163,840) still fits.
inline constexpr int64_t kMaxJsonValues = int64_t{1} << 18;

// Parses `text` into `out` after one pass that counts its values without building
// anything: more than `max_values` is a 413 before the tree is built; invalid JSON a 400.
MaybeError ParseBoundedJson(std::string_view text, int64_t max_values, nlohmann::ordered_json& out);

// True when `obj` has `name` with a non-null value.
bool HasField(const nlohmann::ordered_json& obj, const char* name);

// Integers: JSON integers, or numbers with an integral value (2.0), within int64.
MaybeError ReadInt(const nlohmann::ordered_json& obj, const char* name, int64_t& out);
MaybeError ReadInt(const nlohmann::ordered_json& obj, const char* name, std::optional<int64_t>& out);
// Finite numbers.
MaybeError ReadFloat(const nlohmann::ordered_json& obj, const char* name, float& out);
MaybeError ReadBool(const nlohmann::ordered_json& obj, const char* name, bool& out);
MaybeError ReadString(const nlohmann::ordered_json& obj, const char* name, std::string& out);
// A string or a list of strings (OpenAI's `stop`).
MaybeError ReadStringOrList(const nlohmann::ordered_json& obj, const char* name, std::vector<std::string>& out);
// A list of integers in [0, limit).
MaybeError ReadIdList(const nlohmann::ordered_json& obj, const char* name, int64_t limit, std::vector<int32_t>& out);

// The value as an id list when it is one (every element an integer); `what` names it in errors.
MaybeError IdsFromJson(const nlohmann::ordered_json& v, const std::string& what, const char* param, int64_t limit,
                       std::vector<int32_t>& out);

}  // namespace latte::server
