#include "text/jinja_evaluator.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <unordered_map>

#include "text/jinja_lexer.h"

namespace latte::jinja {

namespace {

// Thrown inside the evaluator only; Render() turns it into a Status. `raised`
// marks raise_exception(), whose message is returned as is.
struct RenderError {
  size_t offset;
  std::string message;
  bool raised = false;
};

enum class Flow { kNormal, kBreak, kContinue };

const char* KindName(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return "undefined";
    case Value::Kind::kNone: return "none";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "string";
    case Value::Kind::kList: return "list";
    case Value::Kind::kMap: return "map";
    case Value::Kind::kNamespace: return "namespace";
  }
  return "?";
}

bool IsWordChar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

// What JavaScript's String(x) gives for the operands of + and ~ and for join.
std::string JsString(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "";
    case Value::Kind::kFloat: return JsNumberToString(v.number);
    default: return Printed(v);
  }
}

double NumericValue(const Value& v) {
  if (v.kind == Value::Kind::kInt) return static_cast<double>(v.integer);
  if (v.kind == Value::Kind::kBool) return v.boolean ? 1 : 0;
  return v.number;
}

// JavaScript's Number(string).
double JsStringToNumber(std::string_view s) {
  s = TrimJsEnd(TrimJsStart(s));
  if (s.empty()) return 0;
  const std::string str(s);
  char* end = nullptr;
  const double d = std::strtod(str.c_str(), &end);
  return end == str.c_str() + str.size() ? d : NAN;
}

// JavaScript's == on the operands' raw values (what @huggingface/jinja compares).
bool LooseEqual(const Value& a, const Value& b) {
  const bool a_nil = a.is_undefined() || a.is_none(), b_nil = b.is_undefined() || b.is_none();
  if (a_nil || b_nil) return a_nil && b_nil;
  if (a.is_string() && b.is_string()) return a.string == b.string;
  const auto numeric = [](const Value& v) { return v.is_number() || v.kind == Value::Kind::kBool; };
  if (numeric(a) && numeric(b)) return NumericValue(a) == NumericValue(b);
  if (numeric(a) && b.is_string()) return NumericValue(a) == JsStringToNumber(b.string);
  if (a.is_string() && numeric(b)) return JsStringToNumber(a.string) == NumericValue(b);
  if (a.kind != b.kind) return false;
  if (a.is_list()) return a.list == b.list;
  return a.map == b.map;  // maps and namespaces: the same object
}

// JavaScript's === on raw values (list membership).
bool StrictEqual(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return NumericValue(a) == NumericValue(b);
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kBool: return a.boolean == b.boolean;
    case Value::Kind::kString: return a.string == b.string;
    case Value::Kind::kList: return a.list == b.list;
    default: return a.map == b.map;
  }
}

std::string AsciiUpper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}
std::string AsciiLower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

// Python's str.strip(chars) family for an explicit set of characters.
std::string_view StripChars(std::string_view s, std::string_view chars, bool left, bool right) {
  const std::vector<std::string_view> set = CodePoints(chars);
  const auto in_set = [&](std::string_view cp) { return std::find(set.begin(), set.end(), cp) != set.end(); };
  std::vector<std::string_view> cps = CodePoints(s);
  size_t begin = 0, end = cps.size();
  while (left && begin < end && in_set(cps[begin])) ++begin;
  while (right && end > begin && in_set(cps[end - 1])) --end;
  if (begin == end) return {};
  const size_t from = static_cast<size_t>(cps[begin].data() - s.data());
  const size_t to = static_cast<size_t>(cps[end - 1].data() + cps[end - 1].size() - s.data());
  return s.substr(from, to - from);
}

class Evaluator {
 public:
  Evaluator(const Value& context, const RenderLimits& limits) : limits_(limits) {
    scopes_.emplace_back();
    auto& globals = scopes_.back();
    globals["true"] = Value::Bool(true);
    globals["True"] = Value::Bool(true);
    globals["false"] = Value::Bool(false);
    globals["False"] = Value::Bool(false);
    globals["none"] = Value::None();
    globals["None"] = Value::None();
    for (const auto& [key, value] : context.map->entries()) globals[key] = value;
  }

  std::string Run(const NodeList& program) {
    const Flow flow = ExecBlock(program);
    if (flow != Flow::kNormal) {
      throw RenderError{0, flow == Flow::kBreak ? "'break' outside a loop" : "'continue' outside a loop"};
    }
    return std::move(out_);
  }

 private:
  [[noreturn]] static void Fail(const Node& node, std::string message) {
    throw RenderError{node.offset, std::move(message)};
  }

  void CheckSize(const Node& node, size_t bytes) const {
    if (bytes > limits_.max_output_bytes) {
      Fail(node, "output or string longer than the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
    }
  }
  // Charges bytes copied or produced against the render's work budget, so a
  // template cannot loop over copies of a huge string for hours.
  void Charge(const Node& node, size_t bytes) {
    work_bytes_ += bytes + 1;
    if (work_bytes_ > limits_.max_work_bytes) {
      Fail(node, "more than " + std::to_string(limits_.max_work_bytes) + " bytes of string work in one render");
    }
  }
  const Value& Charged(const Node& node, const Value& v) {
    if (v.is_string()) Charge(node, v.string.size());
    if (v.is_list()) Charge(node, v.list->size() * sizeof(Value));
    return v;
  }
  void Emit(const Node& node, std::string_view text) {
    Charge(node, text.size());
    CheckSize(node, out_.size() + text.size());
    out_.append(text);
  }
  void CountIteration(const Node& node) {
    if (++iterations_ > limits_.max_loop_iterations) {
      Fail(node, "more than " + std::to_string(limits_.max_loop_iterations) + " loop iterations in one render");
    }
  }
  Value List(const Node& node, jinja::List items) {
    if (items.size() > limits_.max_list_items) {
      Fail(node, "list longer than the limit of " + std::to_string(limits_.max_list_items) + " items");
    }
    Result<Value> v = MakeList(std::move(items));
    if (!v.ok()) Fail(node, v.status().message());
    return std::move(v).value();
  }
  Value String(const Node& node, std::string s) {
    Charge(node, s.size());
    CheckSize(node, s.size());
    return Value::String(std::move(s));
  }

  const Value* Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      const auto found = it->find(name);
      if (found != it->end()) return &found->second;
    }
    return nullptr;
  }

  Flow ExecBlock(const NodeList& block) {
    for (const auto& node : block) {
      const Flow flow = Exec(*node);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow Exec(const Node& node) {
    switch (node.kind) {
      case NodeKind::kText: Emit(node, node.name); return Flow::kNormal;
      case NodeKind::kOutput: {
        const Value v = Eval(*node.args[0]);
        if (v.is_string()) {
          Emit(node, v.string);
        } else if (!v.is_none() && !v.is_undefined()) {
          Emit(node, Printed(v));
        }
        return Flow::kNormal;
      }
      case NodeKind::kIf: return ExecBlock(Truthy(Eval(*node.args[0])) ? node.body : node.orelse);
      case NodeKind::kFor: ExecFor(node); return Flow::kNormal;
      case NodeKind::kSet: ExecSet(node); return Flow::kNormal;
      case NodeKind::kBreak: return Flow::kBreak;
      case NodeKind::kContinue: return Flow::kContinue;
      default: Fail(node, "internal: expression in statement position");
    }
  }

  void Assign(const Node& target, const Value& value) {
    if (target.kind == NodeKind::kName) {
      scopes_.back()[target.name] = value;
      return;
    }
    if (target.kind == NodeKind::kTuple) {
      if (!value.is_list()) Fail(target, std::string("cannot unpack ") + KindName(value));
      if (value.list->size() != target.args.size()) {
        Fail(target, "expected " + std::to_string(target.args.size()) + " values to unpack, got " +
                         std::to_string(value.list->size()));
      }
      for (size_t i = 0; i < target.args.size(); ++i) {
        if (target.args[i]->kind != NodeKind::kName) Fail(*target.args[i], "can only unpack into names");
        scopes_.back()[target.args[i]->name] = (*value.list)[i];
      }
      return;
    }
    // ns.attr
    const Value object = Eval(*target.args[0]);
    if (!object.is_namespace()) {
      Fail(*target.args[0],
           std::string("cannot set an attribute on ") + KindName(object) + " (only on namespace() objects)");
    }
    if (value.is_namespace() || value.holds_namespace) {
      Fail(target, "a namespace attribute cannot hold a namespace");
    }
    if (value.depth + 1 > kMaxValueDepth) Fail(target, "value nested too deeply");
    object.map->Set(target.name, value);
  }

  void ExecSet(const Node& node) { Assign(*node.args[0], Eval(*node.args[1])); }

  void ExecFor(const Node& node) {
    const Node& target = *node.args[0];
    scopes_.emplace_back();
    Value iterable = Eval(*node.args[1]);
    jinja::List source;
    if (iterable.is_list()) {
      Charged(node, iterable);
      source = *iterable.list;
    } else if (iterable.is_map()) {
      for (const auto& entry : iterable.map->entries()) source.push_back(Value::String(entry.first));
    } else {
      Fail(*node.args[1], std::string("cannot loop over ") + KindName(iterable));
    }
    jinja::List items;
    if (node.args.size() > 2) {
      for (const Value& item : source) {
        CountIteration(node);
        scopes_.emplace_back();
        Assign(target, item);
        const bool keep = Truthy(Eval(*node.args[2]));
        scopes_.pop_back();
        if (keep) items.push_back(item);
      }
    } else {
      items = std::move(source);
    }
    bool no_iteration = true;
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      CountIteration(node);
      Map loop;
      loop.Set("index", Value::Int(i + 1));
      loop.Set("index0", Value::Int(i));
      loop.Set("revindex", Value::Int(n - i));
      loop.Set("revindex0", Value::Int(n - i - 1));
      loop.Set("first", Value::Bool(i == 0));
      loop.Set("last", Value::Bool(i == n - 1));
      loop.Set("length", Value::Int(n));
      loop.Set("previtem", i > 0 ? items[i - 1] : Value::Undefined());
      loop.Set("nextitem", i < n - 1 ? items[i + 1] : Value::Undefined());
      Result<Value> loop_value = MakeMap(std::move(loop));
      if (!loop_value.ok()) Fail(node, loop_value.status().message());
      scopes_.back()["loop"] = std::move(loop_value).value();
      Assign(target, items[i]);
      const Flow flow = ExecBlock(node.body);
      if (flow == Flow::kContinue) continue;
      if (flow == Flow::kBreak) break;
      no_iteration = false;
    }
    if (no_iteration) ExecBlock(node.orelse);
    scopes_.pop_back();
  }

  Value Eval(const Node& node) {
    switch (node.kind) {
      case NodeKind::kLiteral: return node.literal;
      case NodeKind::kName: {
        const Value* v = Lookup(node.name);
        return v ? Charged(node, *v) : Value::Undefined();
      }
      case NodeKind::kList:
      case NodeKind::kTuple: {
        jinja::List items;
        for (const auto& arg : node.args) items.push_back(Eval(*arg));
        return List(node, std::move(items));
      }
      case NodeKind::kDict: {
        Map map;
        for (size_t i = 0; i + 1 < node.args.size(); i += 2) {
          const Value key = Eval(*node.args[i]);
          if (!key.is_string()) Fail(*node.args[i], std::string("dict keys must be strings, got ") + KindName(key));
          map.Set(key.string, Eval(*node.args[i + 1]));
        }
        Result<Value> v = MakeMap(std::move(map));
        if (!v.ok()) Fail(node, v.status().message());
        return std::move(v).value();
      }
      case NodeKind::kUnary: {
        const Value v = Eval(*node.args[0]);
        if (node.name == "not") return Value::Bool(!Truthy(v));
        const int sign = node.name == "-" ? -1 : 1;
        if (v.kind == Value::Kind::kFloat) return Value::Float(sign * v.number);
        if (v.kind == Value::Kind::kInt) return Value::Int(sign * v.integer);
        if (v.kind == Value::Kind::kBool) return Value::Int(sign * (v.boolean ? 1 : 0));
        Fail(node, "unary " + node.name + " needs a number, got " + KindName(v));
      }
      case NodeKind::kBinary: return EvalBinary(node);
      case NodeKind::kAttribute: return Charged(node, Member(node, Eval(*node.args[0]), Value::String(node.name)));
      case NodeKind::kIndex: return Charged(node, Member(node, Eval(*node.args[0]), Eval(*node.args[1])));
      case NodeKind::kSlice: return EvalSlice(node);
      case NodeKind::kCall: return EvalCall(node);
      case NodeKind::kFilter: return EvalFilter(node);
      case NodeKind::kTest: return Value::Bool(EvalTest(node) != node.negate);
      case NodeKind::kTernary: return Truthy(Eval(*node.args[0])) ? Eval(*node.args[1]) : Eval(*node.args[2]);
      case NodeKind::kSelect: return Truthy(Eval(*node.args[0])) ? Eval(*node.args[1]) : Value::Undefined();
      default: Fail(node, "internal: statement in expression position");
    }
  }

  Value EvalBinary(const Node& node) {
    const std::string& op = node.name;
    const Value left = Eval(*node.args[0]);
    if (op == "and") return Truthy(left) ? Eval(*node.args[1]) : left;
    if (op == "or") return Truthy(left) ? left : Eval(*node.args[1]);
    const Value right = Eval(*node.args[1]);
    if (op == "==") return Value::Bool(LooseEqual(left, right));
    if (op == "!=") return Value::Bool(!LooseEqual(left, right));
    const bool is_in = op == "in" || op == "not in";
    if (left.is_undefined() || right.is_undefined()) {
      if (right.is_undefined() && is_in) return Value::Bool(op == "not in");
      Fail(node, "cannot apply '" + op + "' to an undefined value");
    }
    if (left.is_none() || right.is_none()) Fail(node, "cannot apply '" + op + "' to none");
    if (op == "~") return String(node, JsString(left) + JsString(right));
    const auto numeric = [](const Value& v) { return v.is_number() || v.kind == Value::Kind::kBool; };
    if (op == "**" && numeric(left) && numeric(right)) {
      const double a = NumericValue(left), b = NumericValue(right);
      const double r = std::pow(a, b);
      if (!std::isfinite(r)) Fail(node, "'**' result is not a finite number");
      const bool is_float = left.kind == Value::Kind::kFloat || right.kind == Value::Kind::kFloat || b < 0;
      if (!is_float && std::fabs(r) < 9.0e18) return Value::Int(static_cast<int64_t>(r));
      return Value::Float(r);
    }
    if (left.is_number() && right.is_number()) return Arithmetic(node, left, right);
    if (left.is_list() && right.is_list() && op == "+") {
      jinja::List items = *left.list;
      if (items.size() + right.list->size() > limits_.max_list_items) {
        Fail(node, "list longer than the limit of " + std::to_string(limits_.max_list_items) + " items");
      }
      Charge(node, items.size() * sizeof(Value));
      items.insert(items.end(), right.list->begin(), right.list->end());
      return List(node, std::move(items));
    }
    if (right.is_list() && is_in) {
      bool member = false;
      for (const Value& item : *right.list) member = member || StrictEqual(item, left);
      return Value::Bool(member == (op == "in"));
    }
    if ((left.is_string() || right.is_string()) && op == "+") {
      const std::string a = JsString(left), b = JsString(right);
      CheckSize(node, a.size() + b.size());
      return Value::String(a + b);
    }
    if (left.is_string() && right.is_string()) {
      if (is_in) return Value::Bool((right.string.find(left.string) != std::string::npos) == (op == "in"));
      // An extension (the reference compares numbers only): bytewise, as Python compares UTF-8.
      if (op == "<") return Value::Bool(left.string < right.string);
      if (op == ">") return Value::Bool(left.string > right.string);
      if (op == "<=") return Value::Bool(left.string <= right.string);
      if (op == ">=") return Value::Bool(left.string >= right.string);
    }
    if (left.is_string() && right.is_map() && is_in) {
      return Value::Bool((right.map->Find(left.string) != nullptr) == (op == "in"));
    }
    Fail(node, "cannot apply '" + op + "' to " + KindName(left) + " and " + KindName(right));
  }

  Value Arithmetic(const Node& node, const Value& left, const Value& right) {
    const std::string& op = node.name;
    if (left.kind == Value::Kind::kInt && right.kind == Value::Kind::kInt) {
      const int64_t a = left.integer, b = right.integer;
      int64_t r = 0;
      if (op == "+" && !__builtin_add_overflow(a, b, &r)) return Value::Int(r);
      if (op == "-" && !__builtin_sub_overflow(a, b, &r)) return Value::Int(r);
      if (op == "*" && !__builtin_mul_overflow(a, b, &r)) return Value::Int(r);
      if ((op == "//" || op == "%") && b == 0) Fail(node, "integer division by zero");
      if (op == "//" && !(a == INT64_MIN && b == -1)) {
        int64_t q = a / b;
        if ((a % b != 0) && ((a < 0) != (b < 0))) --q;  // floor
        return Value::Int(q);
      }
      if (op == "%" && !(a == INT64_MIN && b == -1)) return Value::Int(a % b);  // JS: sign of a
    }
    const double a = NumericValue(left), b = NumericValue(right);
    // Mixed or overflowing operands: JavaScript computes in doubles.
    const auto number = [](double r) { return Value::Float(r); };
    if (op == "+") return number(a + b);
    if (op == "-") return number(a - b);
    if (op == "*") return number(a * b);
    if (op == "/") return Value::Float(a / b);
    if (op == "//") return number(std::floor(a / b));
    if (op == "%") return number(std::fmod(a, b));
    if (op == "<") return Value::Bool(a < b);
    if (op == ">") return Value::Bool(a > b);
    if (op == "<=") return Value::Bool(a <= b);
    if (op == ">=") return Value::Bool(a >= b);
    Fail(node, "cannot apply '" + op + "' to numbers");
  }

  Value Member(const Node& node, const Value& object, const Value& key) {
    if (object.is_map() || object.is_namespace()) {
      if (!key.is_string()) Fail(node, std::string("map keys are strings, got ") + KindName(key));
      const Value* v = object.map->Find(key.string);
      return v ? *v : Value::Undefined();
    }
    if (object.is_list()) {
      if (key.kind == Value::Kind::kInt) {
        const int64_t n = static_cast<int64_t>(object.list->size());
        const int64_t i = key.integer < 0 ? key.integer + n : key.integer;
        return i >= 0 && i < n ? (*object.list)[i] : Value::Undefined();
      }
      if (key.is_string() && key.string == "length") return Value::Int(static_cast<int64_t>(object.list->size()));
      if (key.is_string()) return Value::Undefined();
      Fail(node, std::string("list indices are integers, got ") + KindName(key));
    }
    if (object.is_string()) {
      if (key.kind == Value::Kind::kInt) {
        const std::vector<std::string_view> cps = CodePoints(object.string);
        const int64_t n = static_cast<int64_t>(cps.size());
        const int64_t i = key.integer < 0 ? key.integer + n : key.integer;
        return i >= 0 && i < n ? Value::String(std::string(cps[i])) : Value::Undefined();
      }
      if (key.is_string() && key.string == "length") {
        return Value::Int(static_cast<int64_t>(Utf16Length(object.string)));
      }
      if (key.is_string()) return Value::Undefined();
      Fail(node, std::string("string indices are integers, got ") + KindName(key));
    }
    return Value::Undefined();  // attributes of none/undefined/numbers: undefined, as in the reference
  }

  std::optional<int64_t> SliceBound(const Node* part) {
    if (part == nullptr) return std::nullopt;
    const Value v = Eval(*part);
    if (v.is_undefined()) return std::nullopt;
    if (v.kind != Value::Kind::kInt) Fail(*part, std::string("slice bounds are integers, got ") + KindName(v));
    return v.integer;
  }

  Value EvalSlice(const Node& node) {
    const Value object = Eval(*node.args[0]);
    if (!object.is_list() && !object.is_string()) Fail(node, std::string("cannot slice ") + KindName(object));
    const std::optional<int64_t> start_arg = SliceBound(node.args[1].get());
    const std::optional<int64_t> stop_arg = SliceBound(node.args[2].get());
    const std::optional<int64_t> step_arg = SliceBound(node.args[3].get());
    std::vector<std::string_view> cps;
    if (object.is_string()) cps = CodePoints(object.string);
    const int64_t n = object.is_list() ? static_cast<int64_t>(object.list->size()) : static_cast<int64_t>(cps.size());
    const int64_t step = step_arg.value_or(1);
    std::vector<int64_t> picked;
    if (step > 0) {
      int64_t start = start_arg.value_or(0), stop = stop_arg.value_or(n);
      start = start < 0 ? std::max<int64_t>(n + start, 0) : std::min(start, n);
      stop = stop < 0 ? std::max<int64_t>(n + stop, 0) : std::min(stop, n);
      for (int64_t i = start; i < stop; i += step) picked.push_back(i);
    } else if (step < 0) {
      int64_t start = start_arg.value_or(n - 1), stop = stop_arg.value_or(-1);
      start = start < 0 ? std::max<int64_t>(n + start, -1) : std::min(start, n - 1);
      stop = stop < -1 ? std::max<int64_t>(n + stop, -1) : std::min(stop, n - 1);
      for (int64_t i = start; i > stop; i += step) picked.push_back(i);
    }
    if (object.is_list()) {
      jinja::List items;
      for (int64_t i : picked) items.push_back((*object.list)[i]);
      return List(node, std::move(items));
    }
    std::string s;
    for (int64_t i : picked) s.append(cps[i]);
    return Value::String(std::move(s));
  }

  // Positional and keyword arguments of a call or filter (args[first..]).
  struct Args {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keyword;
    const Value* Get(size_t index, std::string_view name) const {
      if (index < positional.size()) return &positional[index];
      for (const auto& [k, v] : keyword) {
        if (k == name) return &v;
      }
      return nullptr;
    }
  };
  Args EvalArgs(const Node& node, size_t first) {
    Args args;
    for (size_t i = first; i < node.args.size(); ++i) {
      const std::string& keyword = node.keywords[i - 1];
      Value v = Eval(*node.args[i]);
      if (keyword.empty()) {
        args.positional.push_back(std::move(v));
      } else {
        args.keyword.emplace_back(keyword, std::move(v));
      }
    }
    return args;
  }

  Value EvalCall(const Node& node) {
    const Node& callee = *node.args[0];
    if (callee.kind == NodeKind::kAttribute) {
      const Value object = Eval(*callee.args[0]);
      const Args args = EvalArgs(node, 1);
      return CallMethod(node, object, callee.name, args);
    }
    if (callee.kind != NodeKind::kName) Fail(node, "only named functions and methods can be called");
    if (Lookup(callee.name) != nullptr) Fail(node, "'" + callee.name + "' is not a function");
    const Args args = EvalArgs(node, 1);
    if (callee.name == "raise_exception") {
      std::string message;
      for (size_t i = 0; i < args.positional.size(); ++i) {
        if (i > 0) message += ",";
        message += JsString(args.positional[i]);
      }
      throw RenderError{node.offset, message, /*raised=*/true};
    }
    if (callee.name == "namespace") {
      Map map;
      if (args.positional.size() > 1) Fail(node, "namespace() takes at most one positional argument");
      if (args.positional.size() == 1) {
        const Value& source = args.positional[0];
        if (!source.is_map()) Fail(node, "namespace() takes a map or keyword arguments");
        if (source.holds_namespace) Fail(node, "a namespace attribute cannot hold a namespace");
        for (const auto& [k, v] : source.map->entries()) map.Set(k, v);
      }
      for (const auto& [k, v] : args.keyword) {
        if (v.is_namespace() || v.holds_namespace) Fail(node, "a namespace attribute cannot hold a namespace");
        map.Set(k, v);
      }
      return MakeNamespace(std::move(map));
    }
    if (callee.name == "range") {
      std::vector<int64_t> bounds;
      for (const Value& v : args.positional) {
        if (v.kind != Value::Kind::kInt) Fail(node, "range() takes integers");
        bounds.push_back(v.integer);
      }
      if (bounds.empty() || bounds.size() > 3) Fail(node, "range() takes 1 to 3 arguments");
      const int64_t start = bounds.size() == 1 ? 0 : bounds[0];
      const int64_t stop = bounds.size() == 1 ? bounds[0] : bounds[1];
      const int64_t step = bounds.size() == 3 ? bounds[2] : 1;
      if (step == 0) Fail(node, "range() step must not be zero");
      jinja::List items;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (items.size() >= limits_.max_list_items) {
          Fail(node, "list longer than the limit of " + std::to_string(limits_.max_list_items) + " items");
        }
        items.push_back(Value::Int(i));
        if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
      }
      return List(node, std::move(items));
    }
    Fail(node, "unknown function '" + callee.name + "'");
  }

  static const std::string& StringArg(const Node& node, const Args& args, size_t index, std::string_view name,
                                      std::string_view method) {
    const Value* v = args.Get(index, name);
    if (v == nullptr || !v->is_string()) {
      Fail(node, std::string(method) + "() needs a string argument '" + std::string(name) + "'");
    }
    return v->string;
  }

  Value CallMethod(const Node& node, const Value& object, const std::string& method, const Args& args) {
    if (object.is_string()) return StringMethod(node, object.string, method, args);
    if (object.is_map()) {
      if (object.map->Find(method) != nullptr) Fail(node, "'" + method + "' is not a function");
      if (method == "get") {
        const std::string& key = StringArg(node, args, 0, "key", "get");
        const Value* v = object.map->Find(key);
        if (v != nullptr) return *v;
        const Value* fallback = args.Get(1, "default");
        return fallback ? *fallback : Value::None();
      }
      if (method == "items" || method == "keys" || method == "values") {
        jinja::List items;
        for (const auto& [k, v] : object.map->entries()) {
          if (method == "keys") {
            items.push_back(Value::String(k));
          } else if (method == "values") {
            items.push_back(v);
          } else {
            items.push_back(List(node, {Value::String(k), v}));
          }
        }
        return List(node, std::move(items));
      }
    }
    Fail(node, std::string("unknown method '") + method + "' on " + KindName(object));
  }

  Value StringMethod(const Node& node, const std::string& s, const std::string& method, const Args& args) {
    if (method == "upper") return Value::String(AsciiUpper(s));
    if (method == "lower") return Value::String(AsciiLower(s));
    if (method == "strip" || method == "lstrip" || method == "rstrip") {
      const bool left = method != "rstrip", right = method != "lstrip";
      const Value* chars = args.Get(0, "chars");
      if (chars != nullptr && chars->is_string()) {
        return Value::String(std::string(StripChars(s, chars->string, left, right)));
      }
      std::string_view v = s;
      if (left) v = TrimJsStart(v);
      if (right) v = TrimJsEnd(v);
      return Value::String(std::string(v));
    }
    if (method == "title") {
      std::string out = s;
      for (size_t i = 0; i < out.size(); ++i) {
        if (IsWordChar(out[i]) && (i == 0 || !IsWordChar(out[i - 1])) && out[i] >= 'a' && out[i] <= 'z') {
          out[i] = static_cast<char>(out[i] - 'a' + 'A');
        }
      }
      return Value::String(std::move(out));
    }
    if (method == "capitalize") {
      std::string out = s;
      if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
      return Value::String(std::move(out));
    }
    if (method == "startswith" || method == "endswith") {
      const Value* pattern = args.Get(0, "prefix");
      if (pattern == nullptr) Fail(node, method + "() needs an argument");
      std::vector<std::string> options;
      if (pattern->is_string()) {
        options.push_back(pattern->string);
      } else if (pattern->is_list()) {
        for (const Value& v : *pattern->list) {
          if (!v.is_string()) Fail(node, method + "() takes strings");
          options.push_back(v.string);
        }
      } else {
        Fail(node, method + "() takes a string or a tuple of strings");
      }
      for (const std::string& o : options) {
        const bool hit = method == "startswith"
                             ? s.compare(0, o.size(), o) == 0 && s.size() >= o.size()
                             : s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0;
        if (hit) return Value::Bool(true);
      }
      return Value::Bool(false);
    }
    if (method == "split") return Split(node, s, args);
    if (method == "replace") {
      const std::string& from = StringArg(node, args, 0, "old", "replace");
      const std::string& to = StringArg(node, args, 1, "new", "replace");
      const Value* count_arg = args.Get(2, "count");
      int64_t count = count_arg != nullptr && count_arg->kind == Value::Kind::kInt ? count_arg->integer : -1;
      std::string out;
      if (from.empty()) {
        // Python: the replacement goes before every character and at the end.
        const std::vector<std::string_view> cps = CodePoints(s);
        for (size_t i = 0; i <= cps.size(); ++i) {
          if (count != 0) {
            out += to;
            --count;
          }
          if (i < cps.size()) out.append(cps[i]);
          CheckSize(node, out.size());
        }
        return Value::String(std::move(out));
      }
      size_t pos = 0;
      while (count != 0) {
        const size_t hit = s.find(from, pos);
        if (hit == std::string::npos) break;
        out.append(s, pos, hit - pos);
        out += to;
        CheckSize(node, out.size());
        pos = hit + from.size();
        --count;
      }
      out.append(s, pos, std::string::npos);
      return String(node, std::move(out));
    }
    Fail(node, "unknown string method '" + method + "'");
  }

  // Python's str.split(sep=None, maxsplit=-1).
  Value Split(const Node& node, const std::string& s, const Args& args) {
    const Value* sep = args.Get(0, "sep");
    const Value* maxsplit_arg = args.Get(1, "maxsplit");
    const int64_t maxsplit =
        maxsplit_arg != nullptr && maxsplit_arg->kind == Value::Kind::kInt ? maxsplit_arg->integer : -1;
    jinja::List parts;
    const auto add = [&](std::string_view part) {
      if (parts.size() >= limits_.max_list_items) {
        Fail(node, "list longer than the limit of " + std::to_string(limits_.max_list_items) + " items");
      }
      parts.push_back(Value::String(std::string(part)));
    };
    if (sep == nullptr || sep->is_none()) {
      std::string_view rest = TrimJsStart(s);
      while (!rest.empty()) {
        if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
          add(rest);
          break;
        }
        size_t end = 0, n = 0;
        while (end < rest.size() && !IsJsWhitespaceAt(rest, end, &n)) ++end;
        add(rest.substr(0, end));
        rest = TrimJsStart(rest.substr(end));
      }
      return List(node, std::move(parts));
    }
    if (!sep->is_string()) Fail(node, "split() separator must be a string or none");
    if (sep->string.empty()) Fail(node, "split() separator must not be empty");
    size_t pos = 0;
    while (true) {
      const size_t hit = s.find(sep->string, pos);
      if (hit == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit)) {
        add(std::string_view(s).substr(pos));
        break;
      }
      add(std::string_view(s).substr(pos, hit - pos));
      pos = hit + sep->string.size();
    }
    return List(node, std::move(parts));
  }

  Value EvalFilter(const Node& node) {
    Value operand = Eval(*node.args[0]);  // not const: returned by move
    const Args args = EvalArgs(node, 1);
    const std::string& name = node.name;
    if (name == "safe") return operand;
    if (name == "default" || name == "d") {
      const Value* fallback = args.Get(0, "default_value");
      const Value* boolean = args.Get(1, "boolean");
      const bool use_truthiness = boolean != nullptr && Truthy(*boolean);
      if (operand.is_undefined() || (use_truthiness && !Truthy(operand))) {
        return fallback ? *fallback : Value::String("");
      }
      return operand;
    }
    if (name == "tojson") {
      JsonOptions options;
      if (const Value* indent = args.Get(99, "indent"); indent && indent->kind == Value::Kind::kInt) {
        options.indent = static_cast<int>(std::clamp<int64_t>(indent->integer, -1, 64));
      }
      if (const Value* v = args.Get(99, "ensure_ascii")) options.ensure_ascii = Truthy(*v);
      if (const Value* v = args.Get(99, "sort_keys")) options.sort_keys = Truthy(*v);
      if (const Value* v = args.Get(99, "separators");
          v && v->is_list() && v->list->size() == 2 && (*v->list)[0].is_string() && (*v->list)[1].is_string()) {
        options.item_separator = (*v->list)[0].string;
        options.key_separator = (*v->list)[1].string;
      }
      std::string out;
      AppendJson(operand, options, /*undefined_as_null=*/true, 0, &out);
      return String(node, std::move(out));
    }
    if (operand.is_list()) {
      const jinja::List& items = *operand.list;
      if (name == "list") return operand;
      if (name == "first") return items.empty() ? Value::Undefined() : items.front();
      if (name == "last") return items.empty() ? Value::Undefined() : items.back();
      if (name == "length" || name == "count") return Value::Int(static_cast<int64_t>(items.size()));
      if (name == "reverse") return List(node, jinja::List(items.rbegin(), items.rend()));
      if (name == "join") {
        const Value* sep = args.Get(0, "d");
        std::string out;
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0 && sep != nullptr) out += JsString(*sep);
          out += JsString(items[i]);
          CheckSize(node, out.size());
        }
        return Value::String(std::move(out));
      }
      if (name == "string") return String(node, Printed(operand));
      if (name == "unique") {
        jinja::List out;
        for (const Value& item : items) {
          bool seen = false;
          for (const Value& o : out) seen = seen || StrictEqual(o, item);
          if (!seen) out.push_back(item);
        }
        return List(node, std::move(out));
      }
      if (name == "map") {
        const Value* attribute = args.Get(99, "attribute");
        if (attribute == nullptr || !attribute->is_string()) Fail(node, "map needs attribute='name'");
        const Value* fallback = args.Get(99, "default");
        jinja::List out;
        for (const Value& item : items) {
          if (!item.is_map() && !item.is_namespace()) Fail(node, "map(attribute=) needs a list of maps");
          const Value* v = item.map->Find(attribute->string);
          out.push_back(v ? *v : fallback ? *fallback : Value::Undefined());
        }
        return List(node, std::move(out));
      }
      if (name == "selectattr" || name == "rejectattr") {
        const std::string& attribute = StringArg(node, args, 0, "attribute", name);
        const bool select = name == "selectattr";
        jinja::List out;
        for (const Value& item : items) {
          if (!item.is_map() && !item.is_namespace()) Fail(node, name + " needs a list of maps");
          const Value* v = item.map->Find(attribute);
          bool result = false;
          if (v != nullptr && Truthy(*v)) {
            result = true;
            if (const Value* test = args.Get(1, "test")) {
              if (!test->is_string()) Fail(node, name + " test must be a string");
              const Value* arg = args.Get(2, "value");
              result = ApplyTest(node, test->string, *v, arg);
            }
          }
          if (result == select) out.push_back(item);
        }
        return List(node, std::move(out));
      }
    } else if (operand.is_string()) {
      const std::string& s = operand.string;
      if (name == "length" || name == "count") return Value::Int(static_cast<int64_t>(Utf16Length(s)));
      if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
        return StringMethod(node, s, name, Args());
      }
      if (name == "trim") {
        const Value* chars = args.Get(0, "chars");
        if (chars != nullptr && chars->is_string()) {
          return Value::String(std::string(StripChars(s, chars->string, true, true)));
        }
        return Value::String(std::string(TrimJsEnd(TrimJsStart(s))));
      }
      if (name == "string") return operand;
      if (name == "join") {
        const Value* sep = args.Get(0, "d");
        if (sep == nullptr) return operand;
        std::string out;
        const std::vector<std::string_view> cps = CodePoints(s);
        for (size_t i = 0; i < cps.size(); ++i) {
          if (i > 0) out += JsString(*sep);
          out.append(cps[i]);
          CheckSize(node, out.size());
        }
        return Value::String(std::move(out));
      }
      if (name == "first") return s.empty() ? Value::Undefined() : Value::String(std::string(CodePoints(s).front()));
      if (name == "last") return s.empty() ? Value::Undefined() : Value::String(std::string(CodePoints(s).back()));
      if (name == "replace") return StringMethod(node, s, "replace", args);
      if (name == "indent") {
        const Value* width_arg = args.Get(0, "width");
        const int64_t width =
            width_arg && width_arg->kind == Value::Kind::kInt ? std::clamp<int64_t>(width_arg->integer, 0, 1024) : 4;
        const Value* first_arg = args.Get(1, "first");
        const Value* blank_arg = args.Get(2, "blank");
        const bool first = first_arg && Truthy(*first_arg), blank = blank_arg && Truthy(*blank_arg);
        const std::string pad(static_cast<size_t>(width), ' ');
        std::string out;
        size_t start = 0, line = 0;
        while (true) {
          const size_t nl = s.find('\n', start);
          const std::string_view text =
              std::string_view(s).substr(start, nl == std::string::npos ? std::string::npos : nl - start);
          if (!((!first && line == 0) || (!blank && text.empty()))) out += pad;
          out.append(text);
          CheckSize(node, out.size());
          if (nl == std::string::npos) break;
          out.push_back('\n');
          start = nl + 1;
          ++line;
        }
        return Value::String(std::move(out));
      }
      if (name == "int") {
        char* end = nullptr;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (end == s.c_str()) {
          const Value* fallback = args.Get(0, "default");
          return fallback ? *fallback : Value::Int(0);
        }
        return Value::Int(v);
      }
      if (name == "float") {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (end == s.c_str()) {
          const Value* fallback = args.Get(0, "default");
          return fallback ? *fallback : Value::Float(0);
        }
        return Value::Float(v);
      }
    } else if (operand.is_number()) {
      if (name == "abs") {
        return operand.kind == Value::Kind::kInt ? Value::Int(operand.integer < 0 ? -operand.integer : operand.integer)
                                                 : Value::Float(std::fabs(operand.number));
      }
      if (name == "int") {
        if (operand.kind == Value::Kind::kInt) return operand;
        const double f = std::floor(operand.number);
        if (!std::isfinite(f) || std::fabs(f) >= 9.0e18) Fail(node, "int: number out of range");
        return Value::Int(static_cast<int64_t>(f));
      }
      if (name == "float") return Value::Float(NumericValue(operand));
      if (name == "string") return Value::String(Printed(operand));
    } else if (operand.is_map()) {
      if (name == "items") return CallMethod(node, operand, "items", Args());
      if (name == "length" || name == "count") return Value::Int(static_cast<int64_t>(operand.map->size()));
      if (name == "string") return String(node, Printed(operand));
    } else if (operand.kind == Value::Kind::kBool) {
      if (name == "bool") return operand;
      if (name == "int") return Value::Int(operand.boolean ? 1 : 0);
      if (name == "float") return Value::Float(operand.boolean ? 1 : 0);
      if (name == "string") return Value::String(operand.boolean ? "true" : "false");
    }
    static const char* const kKnown[] = {
        "safe", "default", "d",      "tojson", "list",       "first",      "last",  "length", "count", "reverse",
        "join", "string",  "unique", "map",    "selectattr", "rejectattr", "upper", "lower",  "title", "capitalize",
        "trim", "replace", "indent", "int",    "float",      "abs",        "items", "bool"};
    for (const char* known : kKnown) {
      if (name == known) Fail(node, "filter '" + name + "' cannot apply to " + KindName(operand));
    }
    Fail(node, "unknown filter '" + name + "'");
  }

  bool EvalTest(const Node& node) {
    Value operand = Eval(*node.args[0]);  // not const: returned by move
    const Args args = EvalArgs(node, 1);
    const Value* arg = args.positional.empty() ? nullptr : &args.positional[0];
    return ApplyTest(node, node.name, operand, arg);
  }

  bool ApplyTest(const Node& node, const std::string& name, const Value& v, const Value* arg) {
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "boolean") return v.kind == Value::Kind::kBool;
    if (name == "true") return v.kind == Value::Kind::kBool && v.boolean;
    if (name == "false") return v.kind == Value::Kind::kBool && !v.boolean;
    if (name == "string") return v.is_string();
    if (name == "number") return v.is_number();
    if (name == "integer") return v.kind == Value::Kind::kInt;
    if (name == "float") return v.kind == Value::Kind::kFloat;
    if (name == "iterable") return v.is_list() || v.is_string();
    if (name == "mapping") return v.is_map();
    if (name == "sequence") return v.is_list() || v.is_map() || v.is_string();
    if (name == "callable") return false;
    if (name == "lower") return v.is_string() && AsciiLower(v.string) == v.string;
    if (name == "upper") return v.is_string() && AsciiUpper(v.string) == v.string;
    if (name == "odd" || name == "even") {
      if (v.kind != Value::Kind::kInt) Fail(node, "test '" + name + "' needs an integer");
      return (v.integer % 2 != 0) == (name == "odd");
    }
    if (name == "eq" || name == "equalto" || name == "sameas") {
      if (arg == nullptr) Fail(node, "test '" + name + "' needs an argument");
      return StrictEqual(v, *arg);
    }
    Fail(node, "unknown test '" + name + "'");
  }

  const RenderLimits& limits_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
  std::string out_;
  int64_t iterations_ = 0;
  size_t work_bytes_ = 0;
};

}  // namespace

Result<std::string> Render(const NodeList& program, std::string_view source, const Value& context,
                           const RenderLimits& limits) {
  if (!context.is_map()) return Status::InvalidArgument("template context must be a JSON object");
  try {
    Evaluator evaluator(context, limits);
    return evaluator.Run(program);
  } catch (const RenderError& e) {
    if (e.raised) return Status::InvalidArgument(e.message);
    return Status::InvalidArgument(DescribeOffset(source, e.offset) + ": " + e.message);
  }
}

}  // namespace latte::jinja
