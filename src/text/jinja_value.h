// Values of the chat-template interpreter: undefined, none, bool, int, float,
// string, list, map (insertion-ordered) and namespace (a map whose attributes
// `{% set ns.x = ... %}` may change). Lists and maps are immutable once made and
// shared by pointer; a namespace is shared and mutable, and may not hold another
// namespace (so no value can contain itself).
//
// Printing, truthiness and JSON follow @huggingface/jinja, the reference the tests
// compare against: true prints "true", none and undefined print nothing, a float
// with no fraction prints "2.0", lists and maps print as JSON.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace latte::jinja {

struct Value;
using List = std::vector<Value>;

class Map;

struct Value {
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kMap, kNamespace };

  Kind kind = Kind::kUndefined;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::string string;
  std::shared_ptr<const List> list;
  std::shared_ptr<Map> map;  // kMap (never changed after creation) and kNamespace
  // Container nesting (0 for scalars) and whether a namespace is inside: both are
  // checked when a container is made, so nesting stays bounded and acyclic.
  uint16_t depth = 0;
  bool holds_namespace = false;

  static Value Undefined() { return Value(); }
  static Value None() {
    Value v;
    v.kind = Kind::kNone;
    return v;
  }
  static Value Bool(bool b) {
    Value v;
    v.kind = Kind::kBool;
    v.boolean = b;
    return v;
  }
  static Value Int(int64_t i) {
    Value v;
    v.kind = Kind::kInt;
    v.integer = i;
    return v;
  }
  static Value Float(double f) {
    Value v;
    v.kind = Kind::kFloat;
    v.number = f;
    return v;
  }
  static Value String(std::string s) {
    Value v;
    v.kind = Kind::kString;
    v.string = std::move(s);
    return v;
  }

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_map() const { return kind == Kind::kMap; }
  bool is_namespace() const { return kind == Kind::kNamespace; }
};

class Map {
 public:
  const Value* Find(std::string_view key) const;
  void Set(const std::string& key, Value value);
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

// Deepest container nesting a value may have: deep enough for any chat message
// (tool schemas nest ~10 levels), shallow enough that recursive printing stays far
// from the stack limit.
inline constexpr int kMaxValueDepth = 64;

// A list or map value; fails when it would nest deeper than kMaxValueDepth.
Result<Value> MakeList(List items);
Result<Value> MakeMap(Map map);
Value MakeNamespace(Map map);

// JavaScript truthiness as @huggingface/jinja applies it: empty string, 0, false,
// none, undefined, empty list and empty map are false; a namespace is true.
bool Truthy(const Value& v);

// Appends what `{{ v }}` prints (nothing for none/undefined).
void AppendPrinted(const Value& v, std::string* out);
std::string Printed(const Value& v);

// JavaScript's Number.prototype.toString for a double.
std::string JsNumberToString(double d);

struct JsonOptions {
  int indent = -1;  // < 0: one line with ", " and ": "
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator;  // empty: the default for the indent
  std::string key_separator;
};
// JSON as |tojson writes it (JSON.stringify string escaping, Python-style separators).
void AppendJson(const Value& v, const JsonOptions& options, bool undefined_as_null, int depth, std::string* out);

// Converts request JSON (messages, tools, ...) to values. Integral numbers become
// ints, as JavaScript's Number.isInteger decides them. Fails past kMaxValueDepth.
Result<Value> FromJson(const nlohmann::json& j);
Result<Value> FromJson(const nlohmann::ordered_json& j);

// Length in UTF-16 code units, as JavaScript's String.length counts (|length).
size_t Utf16Length(std::string_view s);

// Splits UTF-8 into code points (invalid bytes count as one each).
std::vector<std::string_view> CodePoints(std::string_view s);

}  // namespace latte::jinja
