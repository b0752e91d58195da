#include "server/json_fields.h"

#include <cmath>

namespace latte::server {
namespace {

const char* TypeName(const nlohmann::ordered_json& v) { return v.type_name(); }

ApiError WrongType(const char* name, const char* want, const nlohmann::ordered_json& v) {
  return BadRequest(std::string(name) + " must be " + want + ", got " + TypeName(v), name);
}

// Counts values and stops at the first past the bound; builds nothing.
class ValueCounter : public nlohmann::json_sax<nlohmann::ordered_json> {
 public:
  explicit ValueCounter(int64_t max_values) : max_values_(max_values) {}
  bool over() const { return count_ > max_values_; }

  bool null() override { return Count(); }
  bool boolean(bool) override { return Count(); }
  bool number_integer(number_integer_t) override { return Count(); }
  bool number_unsigned(number_unsigned_t) override { return Count(); }
  bool number_float(number_float_t, const string_t&) override { return Count(); }
  bool string(string_t&) override { return Count(); }
  bool binary(binary_t&) override { return Count(); }
  bool start_object(std::size_t) override { return Count(); }
  bool key(string_t&) override { return Count(); }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return Count(); }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  bool Count() { return ++count_ <= max_values_; }
  int64_t max_values_;
  int64_t count_ = 0;
};

// The integer a JSON number stands for, if it is one within int64.
std::optional<int64_t> AsInt(const nlohmann::ordered_json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // 2^63 is exactly representable; anything at or past it does not fit.
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.2233720368547758e18) {
      return static_cast<int64_t>(d);
    }
  }
  return std::nullopt;
}

}  // namespace

MaybeError ParseBoundedJson(std::string_view text, int64_t max_values, nlohmann::ordered_json& out) {
  ValueCounter counter(max_values);
  if (!nlohmann::ordered_json::sax_parse(text, &counter)) {
    if (counter.over()) {
      return PayloadTooLarge("the request body holds more than " + std::to_string(max_values) +
                             " JSON values (numbers, strings, keys, objects, arrays): send fewer messages, parts "
                             "or token ids in one request");
    }
    return BadRequest("the request body is not valid JSON");
  }
  out = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) return BadRequest("the request body is not valid JSON");
  return std::nullopt;
}

bool HasField(const nlohmann::ordered_json& obj, const char* name) {
  auto it = obj.find(name);
  return it != obj.end() && !it->is_null();
}

MaybeError ReadInt(const nlohmann::ordered_json& obj, const char* name, int64_t& out) {
  std::optional<int64_t> v;
  LATTE_RETURN_IF_API_ERROR(ReadInt(obj, name, v));
  if (v) out = *v;
  return std::nullopt;
}

MaybeError ReadInt(const nlohmann::ordered_json& obj, const char* name, std::optional<int64_t>& out) {
  if (!HasField(obj, name)) return std::nullopt;
  const nlohmann::ordered_json& v = obj.at(name);
  const auto i = AsInt(v);
  if (!i)
    return v.is_number() ? BadRequest(std::string(name) + " must be an integer", name)
                         : WrongType(name, "an integer", v);
  out = *i;
  return std::nullopt;
}

MaybeError ReadFloat(const nlohmann::ordered_json& obj, const char* name, float& out) {
  if (!HasField(obj, name)) return std::nullopt;
  const nlohmann::ordered_json& v = obj.at(name);
  if (!v.is_number()) return WrongType(name, "a number", v);
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > 3.0e38) return BadRequest(std::string(name) + " must be finite", name);
  out = static_cast<float>(d);
  return std::nullopt;
}

MaybeError ReadBool(const nlohmann::ordered_json& obj, const char* name, bool& out) {
  if (!HasField(obj, name)) return std::nullopt;
  const nlohmann::ordered_json& v = obj.at(name);
  if (!v.is_boolean()) return WrongType(name, "a boolean", v);
  out = v.get<bool>();
  return std::nullopt;
}

MaybeError ReadString(const nlohmann::ordered_json& obj, const char* name, std::string& out) {
  if (!HasField(obj, name)) return std::nullopt;
  const nlohmann::ordered_json& v = obj.at(name);
  if (!v.is_string()) return WrongType(name, "a string", v);
  out = v.get<std::string>();
  return std::nullopt;
}

MaybeError ReadStringOrList(const nlohmann::ordered_json& obj, const char* name, std::vector<std::string>& out) {
  if (!HasField(obj, name)) return std::nullopt;
  const nlohmann::ordered_json& v = obj.at(name);
  out.clear();
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
    return std::nullopt;
  }
  if (!v.is_array()) return WrongType(name, "a string or a list of strings", v);
  for (const auto& e : v) {
    if (!e.is_string()) return WrongType(name, "a string or a list of strings", e);
    out.push_back(e.get<std::string>());
  }
  return std::nullopt;
}

MaybeError ReadIdList(const nlohmann::ordered_json& obj, const char* name, int64_t limit, std::vector<int32_t>& out) {
  if (!HasField(obj, name)) return std::nullopt;
  const nlohmann::ordered_json& v = obj.at(name);
  if (!v.is_array()) return WrongType(name, "a list of token ids", v);
  return IdsFromJson(v, name, name, limit, out);
}

MaybeError IdsFromJson(const nlohmann::ordered_json& v, const std::string& what, const char* param, int64_t limit,
                       std::vector<int32_t>& out) {
  out.clear();
  out.reserve(v.size());
  for (const auto& e : v) {
    const auto id = AsInt(e);
    if (!id) return BadRequest(what + " must hold integer token ids, got " + e.type_name(), param);
    if (*id < 0 || *id >= limit) {
      return BadRequest(
          what + ": token id " + std::to_string(*id) + " is outside the vocabulary [0, " + std::to_string(limit) + ")",
          param);
    }
    out.push_back(static_cast<int32_t>(*id));
  }
  return std::nullopt;
}

}  // namespace latte::server
