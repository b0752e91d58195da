#include "text/json_schema_grammar.h"

#include <map>
#include <set>
#include <string>
#include <utility>

namespace latte {
namespace {

using Item = Grammar::Item;
using Json = nlohmann::ordered_json;

// A schema the compiler refuses: caught at the top and returned as a Status.
struct SchemaError {
  std::string message;
};

// The pieces every JSON grammar shares, each built once per grammar.
class JsonPieces {
 public:
  explicit JsonPieces(Grammar& g) : g_(g) {}

  Item Lit(std::string_view s) { return Grammar::Rule(g_.Literal(s)); }
  // At most one space: after ':' and ','.
  Item Space() {
    if (!space_) space_ = g_.Optional(g_.Bytes(' ', ' '));
    return Grammar::Rule(*space_);
  }
  Item Comma() {
    if (!comma_) comma_ = g_.Sequence({g_.Bytes(',', ','), Space()});
    return Grammar::Rule(*comma_);
  }
  Item Colon() {
    if (!colon_) colon_ = g_.Sequence({g_.Bytes(':', ':'), Space()});
    return Grammar::Rule(*colon_);
  }

  // "…": printable ASCII but '"' and '\', escapes, and well-formed UTF-8.
  Item String() {
    if (string_) return Grammar::Rule(*string_);
    const Item cont = g_.Bytes(0x80, 0xBF);
    const Item hex = Grammar::Rule(g_.Choice({g_.Bytes('0', '9'), g_.Bytes('a', 'f'), g_.Bytes('A', 'F')}));
    std::bitset<256> escapable;
    for (char c : std::string_view("\"\\/bfnrt")) escapable.set(static_cast<uint8_t>(c));
    const Grammar::RuleId escape = g_.NewRule();
    g_.AddAlternative(escape, {g_.Bytes('\\', '\\'), g_.ByteSet(escapable)});
    g_.AddAlternative(escape, {g_.Bytes('\\', '\\'), g_.Bytes('u', 'u'), hex, hex, hex, hex});
    const Grammar::RuleId ch = g_.NewRule();
    g_.AddAlternative(ch, {g_.Bytes(0x20, 0x21)});
    g_.AddAlternative(ch, {g_.Bytes(0x23, 0x5B)});
    g_.AddAlternative(ch, {g_.Bytes(0x5D, 0x7F)});
    g_.AddAlternative(ch, {Grammar::Rule(escape)});
    g_.AddAlternative(ch, {g_.Bytes(0xC2, 0xDF), cont});
    g_.AddAlternative(ch, {g_.Bytes(0xE0, 0xE0), g_.Bytes(0xA0, 0xBF), cont});
    g_.AddAlternative(ch, {g_.Bytes(0xE1, 0xEC), cont, cont});
    g_.AddAlternative(ch, {g_.Bytes(0xED, 0xED), g_.Bytes(0x80, 0x9F), cont});
    g_.AddAlternative(ch, {g_.Bytes(0xEE, 0xEF), cont, cont});
    g_.AddAlternative(ch, {g_.Bytes(0xF0, 0xF0), g_.Bytes(0x90, 0xBF), cont, cont});
    g_.AddAlternative(ch, {g_.Bytes(0xF1, 0xF3), cont, cont, cont});
    g_.AddAlternative(ch, {g_.Bytes(0xF4, 0xF4), g_.Bytes(0x80, 0x8F), cont, cont});
    const Item quote = g_.Bytes('"', '"');
    string_ = g_.Sequence({quote, Grammar::Rule(g_.ZeroOrMore(Grammar::Rule(ch))), quote});
    return Grammar::Rule(*string_);
  }

  // -?(0|[1-9][0-9]{0,18}): at most 19 digits, so that with the exponent's bound every
  // number a parser reads is finite.
  Item Integer() {
    if (integer_) return Grammar::Rule(*integer_);
    Item digits = Grammar::Rule(g_.Literal(""));
    for (int k = 1; k < kMaxIntegerDigits; ++k) {
      digits = Grammar::Rule(g_.Optional(Grammar::Rule(g_.Sequence({g_.Bytes('0', '9'), digits}))));
    }
    const Item natural =
        Grammar::Rule(g_.Choice({g_.Bytes('0', '0'), Grammar::Rule(g_.Sequence({g_.Bytes('1', '9'), digits}))}));
    integer_ = g_.Sequence({Grammar::Rule(g_.Optional(g_.Bytes('-', '-'))), natural});
    return Grammar::Rule(*integer_);
  }

  // An integer, then an optional fraction and an optional exponent of at most
  // kMaxExponentDigits digits.
  Item Number() {
    if (number_) return Grammar::Rule(*number_);
    const Item digit = g_.Bytes('0', '9');
    const Item digits1 = Grammar::Rule(g_.Sequence({digit, Grammar::Rule(g_.ZeroOrMore(digit))}));
    const Item fraction = Grammar::Rule(g_.Optional(Grammar::Rule(g_.Sequence({g_.Bytes('.', '.'), digits1}))));
    std::bitset<256> e, sign;
    e.set('e'), e.set('E'), sign.set('+'), sign.set('-');
    Item exponent_digits = Grammar::Rule(g_.Literal(""));
    for (int k = 1; k < kMaxExponentDigits; ++k) {
      exponent_digits = Grammar::Rule(g_.Optional(Grammar::Rule(g_.Sequence({digit, exponent_digits}))));
    }
    const Item exponent = Grammar::Rule(g_.Optional(Grammar::Rule(
        g_.Sequence({g_.ByteSet(e), Grammar::Rule(g_.Optional(g_.ByteSet(sign))), digit, exponent_digits}))));
    number_ = g_.Sequence({Integer(), fraction, exponent});
    return Grammar::Rule(*number_);
  }

  Item Boolean() {
    if (!boolean_) boolean_ = g_.Choice({Lit("true"), Lit("false")});
    return Grammar::Rule(*boolean_);
  }
  Item Null() { return Lit("null"); }

  // "[" items "]" with items separated by commas, minItems..maxItems of them
  // (max < 0: no bound).
  Item Array(Item item, int64_t min_items, int64_t max_items) {
    const Item open = g_.Bytes('[', '['), close = g_.Bytes(']', ']');
    if (max_items == 0) return Grammar::Rule(g_.Sequence({open, close}));
    // tail(k): what may follow the k-th item.
    const Item next = Grammar::Rule(g_.Sequence({Comma(), item}));
    Item tail = Grammar::Rule(g_.Literal(""));
    if (max_items < 0) {
      tail = Grammar::Rule(g_.ZeroOrMore(next));
      for (int64_t k = min_items - 1; k >= 1; --k) tail = Grammar::Rule(g_.Sequence({Comma(), item, tail}));
    } else {
      for (int64_t k = max_items - 1; k >= 1; --k) {
        const Item more = Grammar::Rule(g_.Sequence({Comma(), item, tail}));
        tail = k >= min_items ? Grammar::Rule(g_.Optional(more)) : more;
      }
    }
    const Item items = Grammar::Rule(g_.Sequence({item, tail}));
    return Grammar::Rule(g_.Sequence({open, min_items == 0 ? Grammar::Rule(g_.Optional(items)) : items, close}));
  }

  // {"key": value, …} with any string keys.
  Item Map(Item value) {
    const Item member = Grammar::Rule(g_.Sequence({String(), Colon(), value}));
    const Item members = Grammar::Rule(
        g_.Sequence({member, Grammar::Rule(g_.ZeroOrMore(Grammar::Rule(g_.Sequence({Comma(), member}))))}));
    return Grammar::Rule(g_.Sequence({g_.Bytes('{', '{'), Grammar::Rule(g_.Optional(members)), g_.Bytes('}', '}')}));
  }

  // Any JSON value below `depth` open containers: containers only while depth <
  // kMaxAnyJsonDepth.
  Item AnyValue(int depth = 0) {
    auto it = any_.find(depth);
    if (it != any_.end()) return Grammar::Rule(it->second);
    const Grammar::RuleId r = g_.NewRule();
    any_[depth] = r;
    for (Item scalar : {String(), Number(), Boolean(), Null()}) g_.AddAlternative(r, {scalar});
    if (depth < kMaxAnyJsonDepth) {
      g_.AddAlternative(r, {AnyObject(depth)});
      g_.AddAlternative(r, {Array(AnyValue(depth + 1), 0, -1)});
    }
    return Grammar::Rule(r);
  }
  // An object opened below `depth` containers.
  Item AnyObject(int depth = 0) {
    auto it = any_object_.find(depth);
    if (it != any_object_.end()) return Grammar::Rule(it->second);
    const Item object = Map(AnyValue(depth + 1));
    any_object_[depth] = object.id;
    return object;
  }

  Grammar& g_;

 private:
  std::optional<Grammar::RuleId> space_, comma_, colon_, string_, integer_, number_, boolean_;
  std::map<int, Grammar::RuleId> any_, any_object_;
};

// Compiles one schema document; $refs resolve against its root.
class SchemaCompiler {
 public:
  SchemaCompiler(Grammar& g, const Json& root) : p_(g), root_(root) {}

  Item Value(const Json& s, const std::string& path) {
    // Each level of the schema is a level of this recursion (and of the recognizer's).
    if (++nesting_ > kMaxSchemaNesting) {
      throw SchemaError{"the schema nests more than " + std::to_string(kMaxSchemaNesting) + " levels deep" + At(path)};
    }
    const Item item = ValueAt(s, path);
    --nesting_;
    return item;
  }

 private:
  static constexpr int kMaxSchemaNesting = 64;

  Item ValueAt(const Json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) throw SchemaError{"the schema false" + At(path) + " allows nothing"};
      return p_.AnyValue();
    }
    if (!s.is_object()) throw SchemaError{"the schema" + At(path) + " must be an object or a boolean"};
    CheckKeywords(s, path);
    if (s.contains("$ref")) return Ref(s["$ref"], path);
    if (s.contains("const")) return p_.Lit(Dump(s["const"]));
    if (s.contains("enum")) return Enum(s["enum"], path);
    if (s.contains("anyOf")) return AnyOf(s["anyOf"], path);
    if (!s.contains("type")) {
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
        return Typed("object", s, path);
      }
      if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) return Typed("array", s, path);
      return p_.AnyValue();
    }
    const Json& type = s["type"];
    if (type.is_string()) return Typed(type.get<std::string>(), s, path);
    if (!type.is_array() || type.empty()) {
      throw SchemaError{"\"type\"" + At(path) + " must be a type name or a list of them"};
    }
    std::vector<Item> choices;
    for (const Json& t : type) {
      if (!t.is_string()) throw SchemaError{"\"type\"" + At(path) + " must list type names"};
      choices.push_back(Typed(t.get<std::string>(), s, path));
    }
    return Grammar::Rule(p_.g_.Choice(choices));
  }

  static std::string At(const std::string& path) { return path.empty() ? "" : " at " + path; }
  static std::string Join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }
  static std::string Dump(const Json& v) {
    return v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }

  static void CheckKeywords(const Json& s, const std::string& path) {
    static const std::set<std::string> known = {"type",        "properties", "required",    "additionalProperties",
                                                "items",       "minItems",   "maxItems",    "enum",
                                                "const",       "anyOf",      "$ref",        "$defs",
                                                "definitions", "title",      "description", "default",
                                                "examples",    "$schema",    "$id",         "$comment",
                                                "strict"};
    for (const auto& [key, value] : s.items()) {
      if (!known.count(key)) throw SchemaError{"\"" + key + "\"" + At(path) + " is not supported"};
    }
  }

  Item Typed(const std::string& type, const Json& s, const std::string& path) {
    if (type == "string") return p_.String();
    if (type == "number") return p_.Number();
    if (type == "integer") return p_.Integer();
    if (type == "boolean") return p_.Boolean();
    if (type == "null") return p_.Null();
    if (type == "object") return Object(s, path);
    if (type == "array") return Array(s, path);
    throw SchemaError{"the type \"" + type + "\"" + At(path) + " is not a JSON Schema type"};
  }

  Item Enum(const Json& values, const std::string& path) {
    if (!values.is_array() || values.empty()) {
      throw SchemaError{"\"enum\"" + At(path) + " must be a non-empty list"};
    }
    std::vector<Item> choices;
    for (const Json& v : values) choices.push_back(p_.Lit(Dump(v)));
    return Grammar::Rule(p_.g_.Choice(choices));
  }

  Item AnyOf(const Json& schemas, const std::string& path) {
    if (!schemas.is_array() || schemas.empty()) {
      throw SchemaError{"\"anyOf\"" + At(path) + " must be a non-empty list of schemas"};
    }
    std::vector<Item> choices;
    for (size_t i = 0; i < schemas.size(); ++i) {
      choices.push_back(Value(schemas[i], Join(path, "anyOf[" + std::to_string(i) + "]")));
    }
    return Grammar::Rule(p_.g_.Choice(choices));
  }

  Item Ref(const Json& ref, const std::string& path) {
    if (!ref.is_string()) throw SchemaError{"\"$ref\"" + At(path) + " must be a string"};
    const std::string target = ref.get<std::string>();
    auto known = refs_.find(target);
    if (known != refs_.end()) return Grammar::Rule(known->second);
    if (target.empty() || target[0] != '#') {
      throw SchemaError{"\"$ref\": \"" + target + "\"" + At(path) +
                        ": only references inside the schema (\"#…\") are supported"};
    }
    const Json* node = &root_;
    std::string pointer = target.substr(1);
    size_t pos = 0;
    while (pos < pointer.size()) {
      if (pointer[pos] != '/') throw SchemaError{"\"$ref\": \"" + target + "\" is not a JSON pointer"};
      const size_t end = std::min(pointer.find('/', pos + 1), pointer.size());
      std::string token = pointer.substr(pos + 1, end - pos - 1);
      for (size_t i; (i = token.find("~1")) != std::string::npos;) token.replace(i, 2, "/");
      for (size_t i; (i = token.find("~0")) != std::string::npos;) token.replace(i, 2, "~");
      if (!node->is_object() || !node->contains(token)) {
        throw SchemaError{"\"$ref\": \"" + target + "\"" + At(path) + " points at nothing"};
      }
      node = &(*node)[token];
      pos = end;
    }
    // The rule exists before its body is compiled, so a recursive schema refers to it.
    const Grammar::RuleId rule = p_.g_.NewRule();
    refs_[target] = rule;
    const Item body = Value(*node, target);
    p_.g_.AddAlternative(rule, {body});
    return Grammar::Rule(rule);
  }

  Item Object(const Json& s, const std::string& path) {
    const Json* properties = s.contains("properties") ? &s["properties"] : nullptr;
    if (properties && !properties->is_object()) {
      throw SchemaError{"\"properties\"" + At(path) + " must be an object"};
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      const Json& r = s["required"];
      if (!r.is_array()) throw SchemaError{"\"required\"" + At(path) + " must be a list of names"};
      for (const Json& name : r) {
        if (!name.is_string()) throw SchemaError{"\"required\"" + At(path) + " must be a list of names"};
        if (!properties || !properties->contains(name.get<std::string>())) {
          throw SchemaError{"\"required\"" + At(path) + " names \"" + name.get<std::string>() +
                            "\", which is not in properties"};
        }
        required.insert(name.get<std::string>());
      }
    }
    const Json* additional = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (!properties || properties->empty()) {
      if (additional && additional->is_boolean() && !additional->get<bool>()) return p_.Lit("{}");
      return additional && additional->is_object() ? p_.Map(Value(*additional, Join(path, "additionalProperties")))
                                                   : p_.AnyObject();
    }
    // Members in the schema's order; members(i, first) is what may follow once
    // properties [0, i) were decided, `first` while none was written.
    std::vector<std::pair<std::string, Item>> members;
    for (const auto& [name, sub] : properties->items()) {
      const Item key = p_.Lit(Dump(Json(name)));
      const Item value = Value(sub, Join(path, "properties." + name));
      members.emplace_back(name, Grammar::Rule(p_.g_.Sequence({key, p_.Colon(), value})));
    }
    const size_t n = members.size();
    std::vector<std::array<Item, 2>> after(n + 1);
    after[n] = {p_.Lit(""), p_.Lit("")};
    for (size_t i = n; i-- > 0;) {
      for (int first = 0; first < 2; ++first) {
        const Grammar::RuleId r = p_.g_.NewRule();
        std::vector<Item> take;
        if (!first) take.push_back(p_.Comma());
        take.push_back(members[i].second);
        take.push_back(after[i + 1][0]);
        p_.g_.AddAlternative(r, take);
        if (!required.count(members[i].first)) p_.g_.AddAlternative(r, {after[i + 1][first]});
        after[i][first] = Grammar::Rule(r);
      }
    }
    return Grammar::Rule(p_.g_.Sequence({p_.g_.Bytes('{', '{'), after[0][1], p_.g_.Bytes('}', '}')}));
  }

  Item Array(const Json& s, const std::string& path) {
    int64_t min_items = 0, max_items = -1;
    for (const char* key : {"minItems", "maxItems"}) {
      if (!s.contains(key)) continue;
      const Json& v = s[key];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxItemsBound) {
        throw SchemaError{"\"" + std::string(key) + "\"" + At(path) + " must be an integer in [0, " +
                          std::to_string(kMaxItemsBound) + "]"};
      }
      (std::string(key) == "minItems" ? min_items : max_items) = v.get<int64_t>();
    }
    if (max_items >= 0 && max_items < min_items) {
      throw SchemaError{"\"maxItems\"" + At(path) + " is less than minItems"};
    }
    if (s.contains("items") && s["items"].is_array()) {
      throw SchemaError{"\"items\"" + At(path) + " as a list (tuple validation) is not supported"};
    }
    const Item item = s.contains("items") ? Value(s["items"], Join(path, "items")) : p_.AnyValue(1);
    return p_.Array(item, min_items, max_items);
  }

  JsonPieces p_;
  const Json& root_;
  std::map<std::string, Grammar::RuleId> refs_;
  int nesting_ = 0;
};

}  // namespace

Grammar JsonObjectGrammar() {
  Grammar g;
  JsonPieces p(g);
  g.AddAlternative(0, {p.AnyObject()});
  return g;
}

Result<Grammar> JsonSchemaGrammar(const nlohmann::ordered_json& schema) {
  Grammar g;
  try {
    SchemaCompiler compiler(g, schema);
    const Item value = compiler.Value(schema, "");
    g.AddAlternative(0, {value});
  } catch (const SchemaError& e) {
    return Status::InvalidArgument(e.message, "response_format");
  }
  return g;
}

Result<Grammar> OutputConstraintGrammar(std::string_view spec) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(spec, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return Status::InvalidArgument("an output constraint must be a JSON object with a \"type\"", "response_format");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "json_object") return JsonObjectGrammar();
  if (type == "json_schema" && j.contains("schema")) return JsonSchemaGrammar(j["schema"]);
  return Status::InvalidArgument("unknown output constraint \"" + type + "\"", "response_format");
}

}  // namespace latte
