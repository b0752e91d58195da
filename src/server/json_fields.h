// Typed reads of a request body's optional fields. A field that is absent or null keeps
// the caller's default; one of the wrong type is an ApiError naming it (OpenAI answers
// a wrong type with 400 and `param` set to the field).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
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

// True when `obj` has `name` with a non-null value.
bool HasField(const nlohmann::json& obj, const char* name);

// Integers: JSON integers, or numbers with an integral value (2.0), within int64.
MaybeError ReadInt(const nlohmann::json& obj, const char* name, int64_t& out);
MaybeError ReadInt(const nlohmann::json& obj, const char* name, std::optional<int64_t>& out);
// Finite numbers.
MaybeError ReadFloat(const nlohmann::json& obj, const char* name, float& out);
MaybeError ReadBool(const nlohmann::json& obj, const char* name, bool& out);
MaybeError ReadString(const nlohmann::json& obj, const char* name, std::string& out);
// A string or a list of strings (OpenAI's `stop`).
MaybeError ReadStringOrList(const nlohmann::json& obj, const char* name, std::vector<std::string>& out);
// A list of integers in [0, limit).
MaybeError ReadIdList(const nlohmann::json& obj, const char* name, int64_t limit, std::vector<int32_t>& out);

// The value as an id list when it is one (every element an integer); `what` names it in errors.
MaybeError IdsFromJson(const nlohmann::json& v, const std::string& what, const char* param, int64_t limit,
                       std::vector<int32_t>& out);

}  // namespace latte::server
