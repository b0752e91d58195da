// The byte grammars behind response_format: the recognizer (text/grammar.h) against a
// plain recursive one, JSON against nlohmann::json's own parser, schemas against a
// plain reference validator, and the token masks (text/token_grammar.h) against trying
// every token's bytes one by one. Random data throughout.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <functional>
#include <random>
#include <set>

#include "engine/output_constraints.h"
#include "text/json_schema_grammar.h"
#include "text/token_grammar.h"

namespace latte {
namespace {

using Json = nlohmann::ordered_json;

// The grammar out of a compile that must succeed.
Grammar Compiled(Result<Grammar> g) {
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(*g) : Grammar();
}

bool Accepts(GrammarDfa& dfa, std::string_view s) {
  const GrammarDfa::State st = dfa.Next(dfa.start(), s);
  return st != GrammarDfa::kDead && dfa.Accepting(st);
}

// A prefix of some sentence: the recognizer has not refused it.
bool Viable(GrammarDfa& dfa, std::string_view s) { return dfa.Next(dfa.start(), s) != GrammarDfa::kDead; }

// ---- The recognizer on a small grammar, against a recursive reference ------------

// S ::= "(" S ")" S | "a" S | ε : balanced parentheses with a's anywhere.
bool BalancedReference(std::string_view s) {
  int depth = 0;
  for (char c : s) {
    if (c == '(') ++depth;
    if (c == ')' && --depth < 0) return false;
    if (c != '(' && c != ')' && c != 'a') return false;
  }
  return depth == 0;
}

TEST(GrammarDfa, BalancedParenthesesMatchAReferenceOnEveryShortString) {
  Grammar g;
  g.AddAlternative(0, {g.Bytes('(', '('), Grammar::Rule(0), g.Bytes(')', ')'), Grammar::Rule(0)});
  g.AddAlternative(0, {g.Bytes('a', 'a'), Grammar::Rule(0)});
  g.AddAlternative(0, {});
  GrammarDfa dfa(std::move(g));
  const std::string alphabet = "()ab";
  int accepted = 0;
  std::function<void(std::string)> all = [&](std::string s) {
    const bool ok = BalancedReference(s);
    accepted += ok;
    ASSERT_EQ(Accepts(dfa, s), ok) << s;
    if (s.size() == 8) return;
    for (char c : alphabet) all(s + c);
  };
  all("");
  EXPECT_GT(accepted, 100);
}

TEST(GrammarDfa, AGrammarThatAllowsNothingHasADeadStart) {
  Grammar g;  // rule 0 without an alternative
  GrammarDfa dfa(std::move(g));
  EXPECT_FALSE(dfa.Accepting(dfa.start()));
  EXPECT_FALSE(dfa.CanContinue(dfa.start()));
  EXPECT_EQ(dfa.Next(dfa.start(), 'x'), GrammarDfa::kDead);
}

// ---- JSON against nlohmann::json's parser ------------------------------------------

struct JsonGen {
  std::mt19937_64 rng;
  explicit JsonGen(uint64_t seed) : rng(seed) {}
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
  bool Coin(double p) { return std::bernoulli_distribution(p)(rng); }

  std::string Text() {
    static const std::vector<std::string> pieces = {"a",  "Z", "0", " ", "\"",   "\\",  "/",   "\n",
                                                    "\t", "é", "€", "😀", "\x7f", "key", "null"};
    std::string s;
    for (int i = Int(0, 6); i > 0; --i) s += pieces[Int(0, static_cast<int>(pieces.size()) - 1)];
    return s;
  }
  Json Scalar() {
    switch (Int(0, 5)) {
      case 0: return Text();
      case 1: return Int(-100000, 100000);
      case 2: return std::ldexp(static_cast<double>(Int(-1000, 1000)), Int(-30, 30));
      case 3: return Coin(0.5);
      case 4: return nullptr;
      default: return static_cast<int64_t>(rng() >> 1);  // 19 digits: kMaxIntegerDigits
    }
  }
  Json Value(int depth) {
    if (depth >= 5 || Coin(0.5)) return Scalar();
    if (Coin(0.5)) return Object(depth);
    Json a = Json::array();
    for (int i = Int(0, 4); i > 0; --i) a.push_back(Value(depth + 1));
    return a;
  }
  Json Object(int depth) {
    Json o = Json::object();
    for (int i = Int(0, 4); i > 0; --i) o[Text()] = Value(depth + 1);
    return o;
  }
};

std::string Compact(const Json& j) { return j.dump(); }

// A single space after some ',' and ':' outside strings: what the grammar also allows.
std::string SpaceSome(const std::string& s, JsonGen& gen) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    out += s[i];
    if (in_string) {
      if (s[i] == '\\')
        out += s[++i];
      else if (s[i] == '"')
        in_string = false;
    } else if (s[i] == '"') {
      in_string = true;
    } else if ((s[i] == ',' || s[i] == ':') && gen.Coin(0.5)) {
      out += ' ';
    }
  }
  return out;
}

int ContainerDepth(const nlohmann::json& j) {
  int d = 0;
  if (j.is_structured()) {
    for (const auto& v : j) d = std::max(d, ContainerDepth(v));
    ++d;
  }
  return d;
}

// Every number literal outside strings has at most kMaxIntegerDigits digits before
// the point and kMaxExponentDigits in its exponent.
bool NumbersWithinBounds(std::string_view s) {
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (in_string) {
      if (s[i] == '\\')
        ++i;
      else if (s[i] == '"')
        in_string = false;
      continue;
    }
    if (s[i] == '"') {
      in_string = true;
      continue;
    }
    if (s[i] != '-' && !std::isdigit(static_cast<unsigned char>(s[i]))) continue;
    if (s[i] == '-') ++i;
    int digits = 0, exponent = 0;
    for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) ++digits;
    if (i < s.size() && s[i] == '.') {
      for (++i; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) {
      }
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      if (++i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
      for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) ++exponent;
    }
    if (digits > kMaxIntegerDigits || exponent > kMaxExponentDigits) return false;
    --i;
  }
  return true;
}

TEST(JsonObjectGrammar, AcceptsRandomObjectsAsNlohmannWritesThem) {
  GrammarDfa dfa(JsonObjectGrammar());
  JsonGen gen(7);
  for (int i = 0; i < 300; ++i) {
    const std::string s = Compact(gen.Object(0));
    ASSERT_TRUE(Accepts(dfa, s)) << s;
    ASSERT_TRUE(Accepts(dfa, SpaceSome(s, gen))) << SpaceSome(s, gen);
  }
}

TEST(JsonObjectGrammar, AcceptsExactlyWhatNlohmannAcceptsOnMutatedObjects) {
  // Mutations of valid objects: a byte deleted, inserted or replaced. The grammar takes
  // a string iff nlohmann::json parses it as an object (without whitespace, which the
  // grammar does not allow there, and within the depth and digit bounds).
  GrammarDfa dfa(JsonObjectGrammar());
  JsonGen gen(11);
  const std::string inserts = "{}[],:\"0159.eE+-\\/abu\xc3\xa9\xff\x80";
  int valid = 0, invalid = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string s = Compact(gen.Object(0));
    const int edits = gen.Int(1, 2);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const size_t at = static_cast<size_t>(gen.Int(0, static_cast<int>(s.size()) - 1));
      const char c = inserts[gen.Int(0, static_cast<int>(inserts.size()) - 1)];
      switch (gen.Int(0, 2)) {
        case 0: s.erase(at, 1); break;
        case 1: s.insert(at, 1, c); break;
        default: s[at] = c;
      }
    }
    if (s.find_first_of(" \t\n\r") != std::string::npos) continue;
    const nlohmann::json parsed = nlohmann::json::parse(s, nullptr, /*allow_exceptions=*/false);
    const bool ok = parsed.is_object() && ContainerDepth(parsed) <= kMaxAnyJsonDepth && NumbersWithinBounds(s);
    // nlohmann takes a \u escape of a lone surrogate as an error; the grammar, which
    // reads bytes, allows any four hex digits: leave those out.
    if (!ok && s.find("\\u") != std::string::npos) continue;
    (ok ? valid : invalid)++;
    ASSERT_EQ(Accepts(dfa, s), ok) << s;
  }
  EXPECT_GT(valid, 200);
  EXPECT_GT(invalid, 1000);
}

TEST(JsonObjectGrammar, RefusesWhatJsonForbids) {
  GrammarDfa dfa(JsonObjectGrammar());
  for (const char* bad :
       {R"({"a":12345678901234567890})", R"({"a":1e100})", R"({"a":1,})", R"({"a":01})", R"({'a':1})", R"({"a":1)",
        R"({"a" :1})", R"({"a":  1})", R"({"a":.5})", R"({"a":1.})", R"({"a":tru})", R"({"a":"\x"})",
        "{\"a\":\"\x01\"}", "{\"a\":\"\xc0\xaf\"}", R"([1,2])", R"("x")", R"( {})"}) {
    EXPECT_FALSE(Accepts(dfa, bad)) << bad;
  }
  for (const char* good : {R"({})", R"({"a":-0.5e+10})", R"({"a":-1234567890123456789.5e-99})",
                           R"({"a": [1, {"b":null}]})", R"({"\u00e9":"\n"})"}) {
    EXPECT_TRUE(Accepts(dfa, good)) << good;
  }
}

TEST(JsonObjectGrammar, NestsContainersAtMostTheBoundDeep) {
  GrammarDfa dfa(JsonObjectGrammar());
  std::string deep =
      "{\"a\":" + std::string(kMaxAnyJsonDepth - 1, '[') + "1" + std::string(kMaxAnyJsonDepth - 1, ']') + "}";
  EXPECT_TRUE(Accepts(dfa, deep));
  std::string deeper = "{\"a\":" + std::string(kMaxAnyJsonDepth, '[');
  EXPECT_FALSE(Viable(dfa, deeper));
}

// ---- Schemas against a reference validator ------------------------------------------

// What a "#/a/b" reference names in `root` (the test schemas escape nothing).
const Json& RefTarget(const Json& root, const std::string& ref) {
  const Json* node = &root;
  for (size_t at = 1; at < ref.size();) {
    const size_t end = std::min(ref.find('/', at + 1), ref.size());
    node = &(*node)[ref.substr(at + 1, end - at - 1)];
    at = end;
  }
  return *node;
}

// A plain validator of the keywords the compiler takes, written from the JSON Schema
// text; `root` resolves $ref.
bool Valid(const Json& s, const nlohmann::json& v, const Json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    return Valid(RefTarget(root, s["$ref"].get<std::string>()), v, root);
  }
  if (s.contains("const") && nlohmann::json::parse(s["const"].dump()) != v) return false;
  if (s.contains("enum")) {
    bool any = false;
    for (const Json& e : s["enum"]) any = any || nlohmann::json::parse(e.dump()) == v;
    if (!any) return false;
  }
  if (s.contains("anyOf")) {
    bool any = false;
    for (const Json& sub : s["anyOf"]) any = any || Valid(sub, v, root);
    if (!any) return false;
  }
  if (s.contains("type")) {
    auto is = [&](const std::string& t) {
      if (t == "object") return v.is_object();
      if (t == "array") return v.is_array();
      if (t == "string") return v.is_string();
      // JSON Schema counts 2.0 as an integer; the grammar writes integers without a
      // fraction, and the candidates hold no such number where an integer is asked.
      // (nlohmann reads an integer past 64 bits as a double, integral and that large.)
      if (t == "integer") {
        return v.is_number_integer() || (v.is_number_float() && std::fabs(v.get<double>()) >= 9.2e18 &&
                                         std::floor(v.get<double>()) == v.get<double>());
      }
      if (t == "number") return v.is_number();
      if (t == "boolean") return v.is_boolean();
      return v.is_null();
    };
    bool any = false;
    if (s["type"].is_string()) any = is(s["type"].get<std::string>());
    for (const Json& t : s["type"].is_array() ? s["type"] : Json::array()) any = any || is(t.get<std::string>());
    if (!any) return false;
  }
  if (v.is_object()) {
    if (s.contains("required")) {
      for (const Json& name : s["required"]) {
        if (!v.contains(name.get<std::string>())) return false;
      }
    }
    const Json props = s.value("properties", Json::object());
    for (const auto& [key, value] : v.items()) {
      if (props.contains(key)) {
        if (!Valid(props[key], value, root)) return false;
      } else if (s.contains("additionalProperties")) {
        if (!Valid(s["additionalProperties"], value, root)) return false;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (s.contains("items")) {
      for (const auto& item : v) {
        if (!Valid(s["items"], item, root)) return false;
      }
    }
  }
  return true;
}

// Candidates near a schema: mostly what it asks for, sometimes a neighbour that breaks
// it (a wrong type, a missing or extra member, one item too many or too few).
struct SchemaGen {
  JsonGen gen;
  const Json& root;
  SchemaGen(uint64_t seed, const Json& r) : gen(seed), root(r) {}

  const Json& Resolve(const Json& s) {
    if (!s.is_object() || !s.contains("$ref")) return s;
    return Resolve(RefTarget(root, s["$ref"].get<std::string>()));
  }

  Json Near(const Json& schema, int depth) {
    const Json& s = Resolve(schema);
    if (depth > 6 || gen.Coin(0.04)) return gen.Value(4);
    if (s.is_boolean()) return gen.Value(3);
    if (s.contains("const")) return gen.Coin(0.9) ? s["const"] : gen.Scalar();
    if (s.contains("enum"))
      return gen.Coin(0.9) ? s["enum"][gen.Int(0, static_cast<int>(s["enum"].size()) - 1)] : gen.Scalar();
    if (s.contains("anyOf")) return Near(s["anyOf"][gen.Int(0, static_cast<int>(s["anyOf"].size()) - 1)], depth + 1);
    std::string type = "any";
    if (s.contains("type")) {
      type = s["type"].is_string() ? s["type"].get<std::string>()
                                   : s["type"][gen.Int(0, static_cast<int>(s["type"].size()) - 1)].get<std::string>();
    } else if (s.contains("properties")) {
      type = "object";
    }
    if (type == "string") return gen.Text();
    if (type == "integer") return gen.Int(-5000, 5000);
    if (type == "number") return gen.Coin(0.5) ? Json(gen.Int(-50, 50)) : Json(gen.Int(-5000, 5000) / 64.0);
    if (type == "boolean") return gen.Coin(0.5);
    if (type == "null") return nullptr;
    if (type == "array") {
      const int lo = s.value("minItems", 0), hi = s.value("maxItems", lo + 3);
      Json a = Json::array();
      for (int n = std::max(0, gen.Int(lo - 1, hi + 1)); n > 0; --n)
        a.push_back(Near(s.value("items", Json(true)), depth + 1));
      return a;
    }
    if (type == "object") {
      Json o = Json::object();
      const Json props = s.value("properties", Json::object());
      std::set<std::string> required;
      for (const Json& r : s.value("required", Json::array())) required.insert(r.get<std::string>());
      for (const auto& [key, sub] : props.items()) {
        if (required.count(key) ? gen.Coin(0.97) : gen.Coin(0.5)) o[key] = Near(sub, depth + 1);
      }
      if (gen.Coin(0.05) || (props.empty() && gen.Coin(0.5))) {
        const Json extra = s.value("additionalProperties", Json(true));
        o[gen.Text()] = Near(extra, depth + 1);
      }
      return o;
    }
    return gen.Value(3);
  }
};

const char* const kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"ok":{"type":"boolean"}},
        "required":["name","age"],"additionalProperties":false})",
    R"({"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":3},
        "score":{"type":["number","null"]},"kind":{"enum":["a","b",3,null]},"v":{"const":{"x":[1,2]}}},
        "required":["tags","kind","v"],"additionalProperties":false})",
    R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},
        "children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},
        "required":["value","children"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
    R"({"anyOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false},
        {"type":"array","items":{"anyOf":[{"type":"integer"},{"type":"boolean"}]},"minItems":2,"maxItems":2},
        {"type":"null"}]})",
    R"({"type":"object","properties":{"meta":{"type":"object","additionalProperties":{"type":"integer"}},
        "free":{},"one":{"type":"object","properties":{"p":{"type":"object","properties":{"q":{"type":"number"}},
        "required":["q"],"additionalProperties":false}},"required":["p"],"additionalProperties":false}},
        "required":["meta","free","one"],"additionalProperties":false,"title":"t","description":"d"})",
    R"({"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"}},"required":[],
        "additionalProperties":false}})",
};

TEST(JsonSchemaGrammar, AcceptsACandidateIffTheReferenceValidatorDoes) {
  int schema_index = 0;
  for (const char* text : kSchemas) {
    const Json schema = Json::parse(text);
    Result<Grammar> g = JsonSchemaGrammar(schema);
    ASSERT_TRUE(g.ok()) << g.status().message();
    GrammarDfa dfa(std::move(*g));
    SchemaGen sg(100 + schema_index++, schema);
    int valid = 0, invalid = 0;
    for (int i = 0; i < 1500; ++i) {
      const Json candidate = sg.Near(schema, 0);
      // Near writes members in the schema's order, as the grammar wants them.
      const std::string s = candidate.dump();
      const nlohmann::json value = nlohmann::json::parse(s);
      const bool ok = Valid(schema, value, schema);
      (ok ? valid : invalid)++;
      ASSERT_EQ(Accepts(dfa, s), ok) << "schema " << text << "\ncandidate " << s;
    }
    EXPECT_GT(valid, 100) << text;
    EXPECT_GT(invalid, 50) << text;
  }
}

TEST(JsonSchemaGrammar, RandomWalksOfTheGrammarAreValidJson) {
  // What constrained decoding relies on: every sentence the grammar lets a model write
  // parses and validates. Walks choose among the bytes the automaton allows.
  int schema_index = 0;
  for (const char* text : kSchemas) {
    const Json schema = Json::parse(text);
    GrammarDfa dfa(Compiled(JsonSchemaGrammar(schema)));
    std::mt19937_64 rng(500 + schema_index++);
    const std::string favoured = "\"}],:0123456789-.eE+-tfnalrsu{[ x";
    int finished = 0;
    for (int walk = 0; walk < 200; ++walk) {
      std::string s;
      GrammarDfa::State st = dfa.start();
      while (s.size() < 4000) {
        if (dfa.Accepting(st) && (!dfa.CanContinue(st) || rng() % 3 == 0)) break;
        std::vector<uint8_t> allowed, preferred;
        for (int b = 0; b < 256; ++b) {
          if (dfa.Next(st, static_cast<uint8_t>(b)) == GrammarDfa::kDead) continue;
          allowed.push_back(static_cast<uint8_t>(b));
          if (favoured.find(static_cast<char>(b)) != std::string::npos) preferred.push_back(static_cast<uint8_t>(b));
        }
        ASSERT_FALSE(allowed.empty()) << "a live state with no way on: " << s;
        const auto& pool = !preferred.empty() && rng() % 8 ? preferred : allowed;
        const uint8_t b = pool[rng() % pool.size()];
        s += static_cast<char>(b);
        st = dfa.Next(st, b);
      }
      if (!dfa.Accepting(st)) continue;
      ++finished;
      const nlohmann::json value = nlohmann::json::parse(s, nullptr, false);
      ASSERT_FALSE(value.is_discarded()) << s;
      ASSERT_TRUE(Valid(schema, value, schema)) << "schema " << text << "\nwalk " << s;
    }
    EXPECT_GT(finished, 100) << text;
  }
}

TEST(JsonSchemaGrammar, PropertiesComeInTheSchemasOrderAndOptionalOnesMayBeLeftOut) {
  const Json schema = Json::parse(
      R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"integer"},"c":{"type":"integer"}},
          "required":["a"],"additionalProperties":false})");
  GrammarDfa dfa(Compiled(JsonSchemaGrammar(schema)));
  EXPECT_TRUE(Accepts(dfa, R"({"b":1,"a":2,"c":3})"));
  EXPECT_TRUE(Accepts(dfa, R"({"a":2})"));
  EXPECT_TRUE(Accepts(dfa, R"({"b":1, "a":2})"));
  EXPECT_TRUE(Accepts(dfa, R"({"a":2,"c":3})"));
  EXPECT_FALSE(Accepts(dfa, R"({"a":2,"b":1})"));
  EXPECT_FALSE(Accepts(dfa, R"({"b":1,"c":3})"));
  EXPECT_FALSE(Accepts(dfa, R"({"a":2,"d":3})"));
  EXPECT_FALSE(Accepts(dfa, R"({,"a":2})"));
  EXPECT_FALSE(Accepts(dfa, R"({"a":2,})"));
}

TEST(JsonSchemaGrammar, ArrayBoundsHoldExactly) {
  for (int lo = 0; lo <= 3; ++lo) {
    for (int hi = lo; hi <= 4; ++hi) {
      const Json schema = {{"type", "array"}, {"items", {{"type", "integer"}}}, {"minItems", lo}, {"maxItems", hi}};
      GrammarDfa dfa(Compiled(JsonSchemaGrammar(schema)));
      for (int n = 0; n <= 6; ++n) {
        std::string s = "[";
        for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(i * 7);
        s += "]";
        EXPECT_EQ(Accepts(dfa, s), n >= lo && n <= hi) << schema.dump() << " " << s;
      }
    }
  }
}

TEST(JsonSchemaGrammar, RefusesWhatItCannotHonourNamingTheKeywordAndWhere) {
  struct Case {
    const char* schema;
    const char* says;
  };
  const Case cases[] = {
      {R"({"type":"object","properties":{"name":{"type":"string","pattern":"^a"}}})",
       "\"pattern\" at properties.name is not supported"},
      {R"({"type":"string","format":"date"})", "\"format\" is not supported"},
      {R"({"type":"array","items":{"type":"integer"},"maxItems":100000})",
       "\"maxItems\" must be an integer in [0, 1024]"},
      {R"({"type":"array","minItems":3,"maxItems":2})", "\"maxItems\" is less than minItems"},
      {R"({"$ref":"#/$defs/missing"})", "points at nothing"},
      {R"({"$ref":"https://example.com/s.json"})", "only references inside the schema"},
      {R"({"type":"decimal"})", "the type \"decimal\" is not a JSON Schema type"},
      {R"({"enum":[]})", "\"enum\" must be a non-empty list"},
      {R"({"type":"object","properties":{"a":{}},"required":["b"]})", "names \"b\", which is not in properties"},
      {R"({"allOf":[{"type":"integer"}]})", "\"allOf\" is not supported"},
      {R"({"type":"array","items":[{"type":"integer"}]})", "tuple validation"},
      {R"(false)", "allows nothing"},
  };
  for (const Case& c : cases) {
    Result<Grammar> g = JsonSchemaGrammar(Json::parse(c.schema));
    ASSERT_FALSE(g.ok()) << c.schema;
    EXPECT_NE(g.status().message().find(c.says), std::string::npos) << g.status().message();
  }
}

TEST(JsonSchemaGrammar, ARecursiveSchemaWithoutABaseCaseNeverFinishesButStaysLive) {
  const Json schema = Json::parse(
      R"({"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}},"required":["next"],
          "additionalProperties":false}},"$ref":"#/$defs/n"})");
  GrammarDfa dfa(Compiled(JsonSchemaGrammar(schema)));
  std::string s;
  for (int i = 0; i < 50; ++i) s += "{\"next\":";
  EXPECT_TRUE(Viable(dfa, s));
  EXPECT_FALSE(Accepts(dfa, s + "{}" + std::string(50, '}')));
}

TEST(OutputConstraintGrammar, ReadsTheEnginesSpec) {
  EXPECT_TRUE(OutputConstraintGrammar(R"({"type":"json_object"})").ok());
  EXPECT_TRUE(OutputConstraintGrammar(R"({"type":"json_schema","schema":{"type":"integer"}})").ok());
  EXPECT_FALSE(OutputConstraintGrammar(R"({"type":"regex"})").ok());
  EXPECT_FALSE(OutputConstraintGrammar("not json").ok());
}

// ---- Token masks against trying each token ------------------------------------------

// A toy vocabulary: every printable ASCII byte alone, a few multi-byte UTF-8 pieces,
// and random strings of JSON-ish characters, some repeated.
std::vector<std::string> ToyVocabulary(uint64_t seed) {
  std::vector<std::string> vocab = {""};  // id 0: a token without bytes (special-like)
  for (int c = 0x20; c < 0x7f; ++c) vocab.emplace_back(1, static_cast<char>(c));
  for (const char* piece : {"\xc3", "\xa9", "\xc3\xa9", "\xe2\x82\xac", "\xff"}) vocab.emplace_back(piece);
  std::mt19937_64 rng(seed);
  const std::string chars = "{}[]\":, 0123456789.-eE\\ntrufalsxyz";
  for (int i = 0; i < 400; ++i) {
    std::string s;
    for (int n = 1 + static_cast<int>(rng() % 6); n > 0; --n) s += chars[rng() % chars.size()];
    vocab.push_back(s);
  }
  vocab.push_back("\"name\":");  // a duplicate string below
  vocab.push_back("\"name\":");
  vocab.emplace_back();  // the end token: no bytes
  return vocab;
}

TEST(TokenGrammar, MasksEqualTryingEveryTokenInReachableStates) {
  const std::vector<std::string> vocab = ToyVocabulary(3);
  const int32_t end_id = static_cast<int32_t>(vocab.size()) - 1;
  auto trie = std::make_shared<TokenTrie>(vocab);
  int schema_index = 0;
  for (const char* text : kSchemas) {
    const Json schema = Json::parse(text);
    TokenGrammar tg(Compiled(JsonSchemaGrammar(schema)), trie, {end_id});
    GrammarDfa reference(Compiled(JsonSchemaGrammar(schema)));
    std::mt19937_64 rng(900 + schema_index++);
    int checked = 0;
    for (int walk = 0; walk < 30; ++walk) {
      TokenGrammar::State st = tg.start();
      std::string written;
      for (int step = 0; step < 60; ++step) {
        const std::shared_ptr<const TokenMask> kept = tg.Mask(st);
        const TokenMask& mask = *kept;
        const GrammarDfa::State ref_state = reference.Next(reference.start(), written);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
          bool expect;
          if (id == end_id) {
            expect = reference.Accepting(ref_state);
          } else {
            expect = !vocab[id].empty() && reference.Next(ref_state, vocab[id]) != GrammarDfa::kDead;
          }
          const bool got = (mask[id / 64] >> (id % 64)) & 1;
          ASSERT_EQ(got, expect) << "token " << id << " '" << vocab[id] << "' after '" << written << "'";
          if (got) allowed.push_back(id);
        }
        ++checked;
        if (allowed.empty()) break;
        const int32_t t = allowed[rng() % allowed.size()];
        if (tg.IsEndToken(t)) {
          EXPECT_EQ(tg.Next(st, t), TokenGrammar::kDead);
          break;
        }
        st = tg.Next(st, t);
        written += vocab[t];
        ASSERT_NE(st, TokenGrammar::kDead);
        if (tg.Finished(st)) {
          EXPECT_TRUE(Accepts(reference, written));
          break;
        }
      }
    }
    EXPECT_GT(checked, 300);
  }
}

TEST(TokenGrammar, AFinishedStateAllowsOnlyTheEndTokens) {
  const std::vector<std::string> vocab = ToyVocabulary(5);
  const int32_t end_id = static_cast<int32_t>(vocab.size()) - 1;
  TokenGrammar tg(Compiled(JsonSchemaGrammar(Json::parse(R"({"enum":[true]})"))), std::make_shared<TokenTrie>(vocab),
                  {end_id});
  TokenGrammar::State st = tg.start();
  for (char c : std::string("true")) {
    st = tg.Next(st, static_cast<int32_t>(std::find(vocab.begin(), vocab.end(), std::string(1, c)) - vocab.begin()));
  }
  ASSERT_TRUE(tg.Finished(st));
  const std::shared_ptr<const TokenMask> kept = tg.Mask(st);
  const TokenMask& mask = *kept;
  for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
    EXPECT_EQ((mask[id / 64] >> (id % 64)) & 1, id == end_id ? 1u : 0u) << id;
  }
}

TEST(TokenGrammar, MasksStayRightPastTheBoundOnKeptMasks) {
  // [1,1,...] up to 1024 items: every prefix is a state of its own, so the walk passes
  // far more states than the grammar keeps masks for; masks of states seen long ago
  // are computed again, and still right.
  const std::vector<std::string> vocab = ToyVocabulary(9);
  const int32_t end_id = static_cast<int32_t>(vocab.size()) - 1;
  const Json schema = Json::parse(R"({"type":"array","items":{"enum":[1]},"maxItems":1024})");
  TokenGrammar tg(Compiled(JsonSchemaGrammar(schema)), std::make_shared<TokenTrie>(vocab), {end_id});
  GrammarDfa reference(Compiled(JsonSchemaGrammar(schema)));
  auto id_of = [&](const std::string& s) {
    return static_cast<int32_t>(std::find(vocab.begin(), vocab.end(), s) - vocab.begin());
  };
  auto expect_mask = [&](TokenGrammar::State st, const std::string& written) {
    const std::shared_ptr<const TokenMask> mask = tg.Mask(st);
    const GrammarDfa::State ref = reference.Next(reference.start(), written);
    for (int32_t id = 0; id < end_id; ++id) {
      const bool want = !vocab[id].empty() && reference.Next(ref, vocab[id]) != GrammarDfa::kDead;
      ASSERT_EQ(((*mask)[id / 64] >> (id % 64)) & 1, want ? 1u : 0u)
          << "token '" << vocab[id] << "' after " << written.size() << " bytes";
    }
  };
  std::vector<std::pair<TokenGrammar::State, std::string>> seen;
  TokenGrammar::State st = tg.start();
  std::string written;
  for (int item = 0; item < 1024; ++item) {
    for (const char* piece : {item ? "," : "[", "1"}) {
      seen.emplace_back(st, written);
      tg.Mask(st);
      st = tg.Next(st, id_of(piece));
      written += piece;
      ASSERT_NE(st, TokenGrammar::kDead) << written.size();
    }
  }
  st = tg.Next(st, id_of("]"));
  EXPECT_TRUE(tg.Finished(st));
  for (size_t i = 0; i < seen.size(); i += 97) expect_mask(seen[i].first, seen[i].second);
}

TEST(MaskLogits, KeepsAllowedLogitsAndSetsTheRestToMinusInfinity) {
  std::mt19937_64 rng(2);
  std::normal_distribution<float> normal;
  const size_t V = 200;
  std::vector<float> logits(V);
  for (float& x : logits) x = normal(rng);
  TokenMask mask((V + 63) / 64);
  for (uint64_t& w : mask) w = rng();
  std::vector<float> out;
  MaskLogits(mask, logits, out);
  ASSERT_EQ(out.size(), V);
  for (size_t t = 0; t < V; ++t) {
    if ((mask[t / 64] >> (t % 64)) & 1) {
      EXPECT_EQ(out[t], logits[t]);
    } else {
      EXPECT_TRUE(std::isinf(out[t]) && out[t] < 0);
    }
  }
}

}  // namespace
}  // namespace latte
