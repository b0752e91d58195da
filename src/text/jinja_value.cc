#include "text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "text/utf8.h"

namespace latte::jinja {

const Value* Map::Find(std::string_view key) const {
  const auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Map::Set(const std::string& key, Value value) {
  const auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(key, std::move(value));
}

namespace {

Status TooDeep() {
  return Status::InvalidArgument("value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
}

}  // namespace

Result<Value> MakeList(List items) {
  Value v;
  v.kind = Value::Kind::kList;
  int depth = 0;
  for (const Value& item : items) {
    depth = std::max<int>(depth, item.depth);
    v.holds_namespace = v.holds_namespace || item.holds_namespace || item.is_namespace();
  }
  if (depth + 1 > kMaxValueDepth) return TooDeep();
  v.depth = static_cast<uint16_t>(depth + 1);
  v.list = std::make_shared<const List>(std::move(items));
  return v;
}

Result<Value> MakeMap(Map map) {
  Value v;
  v.kind = Value::Kind::kMap;
  int depth = 0;
  for (const auto& [key, item] : map.entries()) {
    depth = std::max<int>(depth, item.depth);
    v.holds_namespace = v.holds_namespace || item.holds_namespace || item.is_namespace();
  }
  if (depth + 1 > kMaxValueDepth) return TooDeep();
  v.depth = static_cast<uint16_t>(depth + 1);
  v.map = std::make_shared<Map>(std::move(map));
  return v;
}

Value MakeNamespace(Map map) {
  Value v;
  v.kind = Value::Kind::kNamespace;
  v.map = std::make_shared<Map>(std::move(map));
  return v;
}

bool Truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.boolean;
    case Value::Kind::kInt: return v.integer != 0;
    case Value::Kind::kFloat: return v.number != 0 && !std::isnan(v.number);
    case Value::Kind::kString: return !v.string.empty();
    case Value::Kind::kList: return !v.list->empty();
    case Value::Kind::kMap: return v.map->size() > 0;
    case Value::Kind::kNamespace: return true;
  }
  return false;
}

std::string JsNumberToString(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == 0) return "0";
  std::string sign = d < 0 ? "-" : "";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), std::fabs(d), std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int k = static_cast<int>(digits.size());
  const int n = std::stoi(sci.substr(e + 1)) + 1;  // value = 0.digits * 10^n
  if (k <= n && n <= 21) return sign + digits + std::string(n - k, '0');
  if (0 < n && n <= 21) return sign + digits.substr(0, n) + "." + digits.substr(n);
  if (-6 < n && n <= 0) return sign + "0." + std::string(-n, '0') + digits;
  std::string out = sign + digits.substr(0, 1);
  if (k > 1) out += "." + digits.substr(1);
  out += (n - 1 >= 0 ? "e+" : "e-") + std::to_string(std::abs(n - 1));
  return out;
}

namespace {

std::string FloatPrinted(double d) {
  if (d == 0 && std::signbit(d)) return "-0.0";
  if (std::isfinite(d) && std::fabs(d) < 1e21 && d == std::floor(d)) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.1f", d);
    return buf;
  }
  return JsNumberToString(d);
}

uint32_t DecodeAt(std::string_view s, size_t i, size_t* length) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const size_t n = Utf8SequenceLength(b(0));
  if (n == 0 || i + n > s.size()) {
    *length = 1;
    return b(0);
  }
  *length = n;
  if (n == 1) return b(0);
  uint32_t cp = b(0) & (0xff >> (n + 1));
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (b(k) & 0x3f);
  return cp;
}

void AppendHex4(uint32_t unit, std::string* out) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\u%04x", unit & 0xffff);
  out->append(buf);
}

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out->append("\\\""); break;
        case '\\': out->append("\\\\"); break;
        case '\b': out->append("\\b"); break;
        case '\f': out->append("\\f"); break;
        case '\n': out->append("\\n"); break;
        case '\r': out->append("\\r"); break;
        case '\t': out->append("\\t"); break;
        default:
          if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
            AppendHex4(c, out);
          } else {
            out->push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    size_t n = 1;
    const uint32_t cp = DecodeAt(s, i, &n);
    if (ensure_ascii) {
      if (cp >= 0x10000) {
        AppendHex4(0xd800 + ((cp - 0x10000) >> 10), out);
        AppendHex4(0xdc00 + ((cp - 0x10000) & 0x3ff), out);
      } else {
        AppendHex4(cp, out);
      }
    } else {
      out->append(s.substr(i, n));
    }
    i += n;
  }
  out->push_back('"');
}

}  // namespace

void AppendJson(const Value& v, const JsonOptions& options, bool undefined_as_null, int depth, std::string* out) {
  switch (v.kind) {
    case Value::Kind::kUndefined: out->append(undefined_as_null ? "null" : "undefined"); return;
    case Value::Kind::kNone: out->append("null"); return;
    case Value::Kind::kBool: out->append(v.boolean ? "true" : "false"); return;
    case Value::Kind::kInt: out->append(std::to_string(v.integer)); return;
    case Value::Kind::kFloat: out->append(std::isfinite(v.number) ? JsNumberToString(v.number) : "null"); return;
    case Value::Kind::kString: AppendJsonString(v.string, options.ensure_ascii, out); return;
    default: break;
  }
  std::string item_sep = options.item_separator, key_sep = options.key_separator;
  if (item_sep.empty()) item_sep = options.indent > 0 ? "," : ", ";
  if (key_sep.empty()) key_sep = ": ";
  const std::string indent = options.indent > 0 ? std::string(options.indent, ' ') : "";
  std::string base_padding = "\n";
  for (int i = 0; i < depth; ++i) base_padding += indent;
  const std::string child_padding = base_padding + indent;
  // Namespaces are the only containers that can grow after creation; AppendJson's
  // depth is still bounded because a namespace never holds a namespace.
  if (v.is_list()) {
    out->push_back('[');
    bool first = true;
    for (const Value& item : *v.list) {
      if (!first) out->append(item_sep);
      if (options.indent > 0) out->append(child_padding);
      first = false;
      AppendJson(item, options, undefined_as_null, depth + 1, out);
    }
    if (options.indent > 0 && !v.list->empty()) out->append(base_padding);
    out->push_back(']');
    return;
  }
  std::vector<const std::pair<std::string, Value>*> entries;
  for (const auto& entry : v.map->entries()) entries.push_back(&entry);
  if (options.sort_keys) {
    std::stable_sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
  }
  out->push_back('{');
  bool first = true;
  for (const auto* entry : entries) {
    if (!first) out->append(item_sep);
    if (options.indent > 0) out->append(child_padding);
    first = false;
    AppendJsonString(entry->first, options.ensure_ascii, out);
    out->append(key_sep);
    AppendJson(entry->second, options, undefined_as_null, depth + 1, out);
  }
  if (options.indent > 0 && !entries.empty()) out->append(base_padding);
  out->push_back('}');
}

void AppendPrinted(const Value& v, std::string* out) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return;
    case Value::Kind::kBool: out->append(v.boolean ? "true" : "false"); return;
    case Value::Kind::kInt: out->append(std::to_string(v.integer)); return;
    case Value::Kind::kFloat: out->append(FloatPrinted(v.number)); return;
    case Value::Kind::kString: out->append(v.string); return;
    default: AppendJson(v, JsonOptions(), /*undefined_as_null=*/false, 0, out); return;
  }
}

std::string Printed(const Value& v) {
  std::string out;
  AppendPrinted(v, &out);
  return out;
}

namespace {

template <typename Json> Result<Value> FromJsonImpl(const Json& j, int depth) {
  if (depth > kMaxValueDepth) {
    return Status::InvalidArgument("context JSON nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::None();
    case nlohmann::json::value_t::boolean: return Value::Bool(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::Int(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: {
      const double d = j.template get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) {
        return Value::Int(static_cast<int64_t>(d));
      }
      return Value::Float(d);
    }
    case nlohmann::json::value_t::string: return Value::String(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& item : j) {
        LATTE_ASSIGN_OR_RETURN(Value v, FromJsonImpl(item, depth + 1));
        items.push_back(std::move(v));
      }
      return MakeList(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Map map;
      for (auto it = j.begin(); it != j.end(); ++it) {
        LATTE_ASSIGN_OR_RETURN(Value v, FromJsonImpl(it.value(), depth + 1));
        map.Set(it.key(), std::move(v));
      }
      return MakeMap(std::move(map));
    }
    default: return Status::Unimplemented("context JSON holds a value of unsupported type (binary)");
  }
}

}  // namespace

Result<Value> FromJson(const nlohmann::json& j) { return FromJsonImpl(j, 0); }
Result<Value> FromJson(const nlohmann::ordered_json& j) { return FromJsonImpl(j, 0); }

size_t Utf16Length(std::string_view s) {
  size_t units = 0;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    const uint32_t cp = DecodeAt(s, i, &n);
    units += cp >= 0x10000 ? 2 : 1;
    i += n;
  }
  return units;
}

std::vector<std::string_view> CodePoints(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    DecodeAt(s, i, &n);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace latte::jinja
