#include "text/jinja_parser.h"

#include <cmath>
#include <cstdlib>

namespace latte::jinja {

namespace {

// Thrown inside the parser only; Parse() turns it into a Status.
struct ParseError {
  size_t offset;
  std::string message;
};

std::string Describe(const Token* t) {
  if (t == nullptr) return "end of template";
  switch (t->type) {
    case TokenType::kText: return "text";
    case TokenType::kComment: return "a comment";
    case TokenType::kString: return "a string";
    case TokenType::kNumber: return "number " + t->value;
    case TokenType::kIdentifier: return "'" + t->value + "'";
    default: return "'" + t->value + "'";
  }
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, size_t end_offset) : tokens_(std::move(tokens)), end_offset_(end_offset) {}

  NodeList ParseTemplate() {
    NodeList body;
    while (!AtEnd()) body.push_back(ParseAny());
    return body;
  }

 private:
  // Counts nesting; throws past kMaxNesting.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxNesting) {
        p_->Fail("template nested deeper than " + std::to_string(kMaxNesting) + " levels");
      }
    }
    ~DepthGuard() { --p_->depth_; }

   private:
    Parser* p_;
  };

  bool AtEnd() const { return pos_ >= tokens_.size(); }
  const Token* Peek(size_t ahead = 0) const { return pos_ + ahead < tokens_.size() ? &tokens_[pos_ + ahead] : nullptr; }
  size_t Offset() const { return AtEnd() ? end_offset_ : tokens_[pos_].offset; }
  [[noreturn]] void Fail(std::string message) const { throw ParseError{Offset(), std::move(message)}; }
  [[noreturn]] void Expected(const std::string& what) const { Fail("expected " + what + ", got " + Describe(Peek())); }
  bool Is(TokenType type) const { return !AtEnd() && tokens_[pos_].type == type; }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    const Token* t = Peek(ahead);
    return t != nullptr && t->type == TokenType::kIdentifier && t->value == name;
  }
  // True at "{% name" for one of `names`.
  bool IsStatement(std::initializer_list<std::string_view> names) const {
    if (!Is(TokenType::kOpenStatement)) return false;
    for (std::string_view n : names) {
      if (IsName(n, 1)) return true;
    }
    return false;
  }
  const Token& Expect(TokenType type, const std::string& what) {
    if (!Is(type)) Expected(what);
    return tokens_[pos_++];
  }
  void ExpectName(std::string_view name) {
    if (!IsName(name)) Expected("'" + std::string(name) + "'");
    ++pos_;
  }
  std::unique_ptr<Node> MakeNode(NodeKind kind, size_t offset) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->offset = offset;
    return node;
  }

  std::unique_ptr<Node> ParseAny() {
    const Token& t = tokens_[pos_];
    switch (t.type) {
      case TokenType::kComment: {
        ++pos_;
        auto node = MakeNode(NodeKind::kText, t.offset);  // renders as nothing
        return node;
      }
      case TokenType::kText: {
        auto node = MakeNode(NodeKind::kText, t.offset);
        node->name = t.value;
        ++pos_;
        return node;
      }
      case TokenType::kOpenStatement: return ParseStatement();
      case TokenType::kOpenExpression: {
        auto node = MakeNode(NodeKind::kOutput, t.offset);
        ++pos_;
        node->args.push_back(ParseExpression());
        Expect(TokenType::kCloseExpression, "'}}'");
        return node;
      }
      default: Fail("unexpected " + Describe(&t));
    }
  }

  // Body statements until one of `enders` ("{% endfor" etc.); fails at the end.
  NodeList ParseBody(std::initializer_list<std::string_view> enders, const char* what, size_t open_offset) {
    NodeList body;
    while (!IsStatement(enders)) {
      if (AtEnd()) {
        throw ParseError{open_offset, std::string("unterminated '") + what + "': expected '{% end" + what +
                                          " %}' before the end of the template"};
      }
      body.push_back(ParseAny());
    }
    return body;
  }

  void ExpectEnd(std::string_view ender) {
    Expect(TokenType::kOpenStatement, "'{%'");
    ExpectName(ender);
    Expect(TokenType::kCloseStatement, "'%}'");
  }

  std::unique_ptr<Node> ParseStatement() {
    DepthGuard guard(this);
    const size_t open = Offset();
    Expect(TokenType::kOpenStatement, "'{%'");
    if (!Is(TokenType::kIdentifier)) Expected("a statement name");
    const std::string name = tokens_[pos_].value;
    ++pos_;
    if (name == "set") {
      auto node = MakeNode(NodeKind::kSet, open);
      node->args.push_back(ParseExpressionSequence(/*primary=*/true));
      const Node& target = *node->args[0];
      const bool ok_target =
          target.kind == NodeKind::kName || target.kind == NodeKind::kTuple || (target.kind == NodeKind::kAttribute);
      if (!ok_target) Fail("expected a name, a tuple of names or ns.attribute to assign to");
      Expect(TokenType::kEquals, "'=' ({% set %} blocks are not supported)");
      node->args.push_back(ParseExpressionSequence(false));
      Expect(TokenType::kCloseStatement, "'%}'");
      return node;
    }
    if (name == "if") {
      auto node = ParseIfRest(open);
      ExpectEnd("endif");
      return node;
    }
    if (name == "for") {
      auto node = MakeNode(NodeKind::kFor, open);
      auto target = ParseExpressionSequence(/*primary=*/true);
      if (target->kind != NodeKind::kName && target->kind != NodeKind::kTuple) {
        Fail("expected a name or a tuple of names as the loop variable");
      }
      ExpectName("in");
      auto iterable = ParseExpression();
      node->args.push_back(std::move(target));
      if (iterable->kind == NodeKind::kSelect) {
        node->args.push_back(std::move(iterable->args[1]));
        node->args.push_back(std::move(iterable->args[0]));
      } else {
        node->args.push_back(std::move(iterable));
      }
      Expect(TokenType::kCloseStatement, "'%}'");
      node->body = ParseBody({"endfor", "else"}, "for", open);
      if (IsStatement({"else"})) {
        pos_ += 2;
        Expect(TokenType::kCloseStatement, "'%}'");
        node->orelse = ParseBody({"endfor"}, "for", open);
      }
      ExpectEnd("endfor");
      return node;
    }
    if (name == "break" || name == "continue") {
      Expect(TokenType::kCloseStatement, "'%}'");
      return MakeNode(name == "break" ? NodeKind::kBreak : NodeKind::kContinue, open);
    }
    pos_--;
    Fail("unknown statement '" + name + "' (supported: set, if, elif, else, for, break, continue)");
  }

  // After "{% if" (or "{% elif"): test, body, and elif/else chains; not the endif.
  std::unique_ptr<Node> ParseIfRest(size_t open) {
    DepthGuard guard(this);
    auto node = MakeNode(NodeKind::kIf, open);
    node->args.push_back(ParseExpression());
    Expect(TokenType::kCloseStatement, "'%}'");
    node->body = ParseBody({"elif", "else", "endif"}, "if", open);
    if (IsStatement({"elif"})) {
      const size_t elif = Offset();
      pos_ += 2;
      node->orelse.push_back(ParseIfRest(elif));
    } else if (IsStatement({"else"})) {
      pos_ += 2;
      Expect(TokenType::kCloseStatement, "'%}'");
      node->orelse = ParseBody({"endif"}, "if", open);
    }
    return node;
  }

  std::unique_ptr<Node> ParseExpressionSequence(bool primary) {
    const size_t offset = Offset();
    auto first = primary ? ParsePrimary() : ParseExpression();
    if (!Is(TokenType::kComma)) {
      if (primary) return ParseMemberChain(std::move(first));  // ns.attr targets
      return first;
    }
    auto tuple = MakeNode(NodeKind::kTuple, offset);
    tuple->args.push_back(std::move(first));
    while (Is(TokenType::kComma)) {
      ++pos_;
      tuple->args.push_back(primary ? ParsePrimary() : ParseExpression());
    }
    return tuple;
  }

  std::unique_ptr<Node> ParseExpression() {
    DepthGuard guard(this);
    auto a = ParseOr();
    if (IsName("if")) {
      const size_t offset = Offset();
      ++pos_;
      auto test = ParseOr();
      if (IsName("else")) {
        ++pos_;
        auto node = MakeNode(NodeKind::kTernary, offset);
        node->args.push_back(std::move(test));
        node->args.push_back(std::move(a));
        node->args.push_back(ParseExpression());
        return node;
      }
      auto node = MakeNode(NodeKind::kSelect, offset);
      node->args.push_back(std::move(test));
      node->args.push_back(std::move(a));
      return node;
    }
    return a;
  }

  std::unique_ptr<Node> Binary(std::string op, size_t offset, std::unique_ptr<Node> left, std::unique_ptr<Node> right) {
    auto node = MakeNode(NodeKind::kBinary, offset);
    node->name = std::move(op);
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    return node;
  }

  std::unique_ptr<Node> ParseOr() {
    auto left = ParseAnd();
    while (IsName("or")) {
      const size_t offset = Offset();
      ++pos_;
      left = Binary("or", offset, std::move(left), ParseAnd());
    }
    return left;
  }

  std::unique_ptr<Node> ParseAnd() {
    auto left = ParseNot();
    while (IsName("and")) {
      const size_t offset = Offset();
      ++pos_;
      left = Binary("and", offset, std::move(left), ParseNot());
    }
    return left;
  }

  std::unique_ptr<Node> ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(this);
      auto node = MakeNode(NodeKind::kUnary, Offset());
      node->name = "not";
      ++pos_;
      node->args.push_back(ParseNot());
      return node;
    }
    return ParseComparison();
  }

  std::unique_ptr<Node> ParseComparison() {
    auto left = ParseAdditive();
    while (true) {
      const size_t offset = Offset();
      std::string op;
      if (IsName("not") && IsName("in", 1)) {
        op = "not in";
        pos_ += 2;
      } else if (IsName("in")) {
        op = "in";
        ++pos_;
      } else if (Is(TokenType::kComparison)) {
        op = tokens_[pos_++].value;
      } else {
        break;
      }
      left = Binary(op, offset, std::move(left), ParseAdditive());
    }
    return left;
  }

  std::unique_ptr<Node> ParseAdditive() {
    auto left = ParseMultiplicative();
    while (Is(TokenType::kAdditive)) {
      const Token& t = tokens_[pos_++];
      left = Binary(t.value, t.offset, std::move(left), ParseMultiplicative());
    }
    return left;
  }

  std::unique_ptr<Node> ParseMultiplicative() {
    auto left = ParsePower();
    while (Is(TokenType::kMultiplicative)) {
      const Token& t = tokens_[pos_++];
      left = Binary(t.value, t.offset, std::move(left), ParsePower());
    }
    return left;
  }

  std::unique_ptr<Node> ParsePower() {
    auto left = ParseTest();
    while (Is(TokenType::kPower)) {
      const Token& t = tokens_[pos_++];
      left = Binary("**", t.offset, std::move(left), ParseTest());
    }
    return left;
  }

  std::unique_ptr<Node> ParseTest() {
    auto operand = ParseFilter();
    while (IsName("is")) {
      auto node = MakeNode(NodeKind::kTest, Offset());
      ++pos_;
      if (IsName("not")) {
        node->negate = true;
        ++pos_;
      }
      // `is none` / `is true`: the test names are identifiers here.
      if (!Is(TokenType::kIdentifier)) Expected("a test name after 'is'");
      node->name = tokens_[pos_++].value;
      node->args.push_back(std::move(operand));
      if (Is(TokenType::kOpenParen)) ParseArguments(node.get());
      operand = std::move(node);
    }
    return operand;
  }

  std::unique_ptr<Node> ParseFilter() {
    auto operand = ParseUnary();
    while (Is(TokenType::kPipe)) {
      auto node = MakeNode(NodeKind::kFilter, Offset());
      ++pos_;
      if (!Is(TokenType::kIdentifier)) Expected("a filter name after '|'");
      node->name = tokens_[pos_++].value;
      node->args.push_back(std::move(operand));
      if (Is(TokenType::kOpenParen)) ParseArguments(node.get());
      operand = std::move(node);
    }
    return operand;
  }

  std::unique_ptr<Node> ParseUnary() {
    if ((Is(TokenType::kUnary) || Is(TokenType::kAdditive)) &&
        (tokens_[pos_].value == "-" || tokens_[pos_].value == "+")) {
      DepthGuard guard(this);
      auto node = MakeNode(NodeKind::kUnary, Offset());
      node->name = tokens_[pos_++].value;
      node->args.push_back(ParseUnary());
      return node;
    }
    auto primary = ParsePrimary();
    auto node = ParseMemberChain(std::move(primary));
    return node;
  }

  // Appends "(a, b, key=c)" to node->args / node->keywords.
  void ParseArguments(Node* node) {
    DepthGuard guard(this);
    Expect(TokenType::kOpenParen, "'('");
    bool saw_keyword = false;
    while (!Is(TokenType::kCloseParen)) {
      if (AtEnd()) Expected("')'");
      std::string keyword;
      if (Is(TokenType::kIdentifier) && Peek(1) != nullptr && Peek(1)->type == TokenType::kEquals) {
        keyword = tokens_[pos_].value;
        pos_ += 2;
        saw_keyword = true;
      } else if (saw_keyword) {
        Fail("positional arguments must come before keyword arguments");
      }
      node->args.push_back(ParseExpression());
      node->keywords.push_back(keyword);
      if (Is(TokenType::kComma)) {
        ++pos_;
      } else if (!Is(TokenType::kCloseParen)) {
        Expected("',' or ')'");
      }
    }
    ++pos_;
  }

  std::unique_ptr<Node> ParseMemberChain(std::unique_ptr<Node> object) {
    int links = 0;
    while (Is(TokenType::kDot) || Is(TokenType::kOpenBracket) || Is(TokenType::kOpenParen)) {
      // Each link nests the tree one level: a long chain is as deep as nesting.
      if (++links > kMaxNesting) Fail("expression chain longer than " + std::to_string(kMaxNesting));
      const size_t offset = Offset();
      if (Is(TokenType::kOpenParen)) {
        auto call = MakeNode(NodeKind::kCall, object->offset);
        call->args.push_back(std::move(object));
        ParseArguments(call.get());
        object = std::move(call);
        continue;
      }
      if (Is(TokenType::kDot)) {
        ++pos_;
        if (Is(TokenType::kIdentifier)) {
          auto node = MakeNode(NodeKind::kAttribute, offset);
          node->name = tokens_[pos_++].value;
          node->args.push_back(std::move(object));
          object = std::move(node);
        } else if (Is(TokenType::kNumber) && tokens_[pos_].value.find('.') == std::string::npos) {
          auto node = MakeNode(NodeKind::kIndex, offset);
          auto index = MakeNode(NodeKind::kLiteral, Offset());
          index->literal = Value::Int(std::strtoll(tokens_[pos_++].value.c_str(), nullptr, 10));
          node->args.push_back(std::move(object));
          node->args.push_back(std::move(index));
          object = std::move(node);
        } else {
          Expected("an attribute name after '.'");
        }
        continue;
      }
      ++pos_;  // [
      DepthGuard guard(this);
      std::unique_ptr<Node> parts[3];
      int n = 0;
      bool is_slice = false;
      while (!Is(TokenType::kCloseBracket)) {
        if (AtEnd()) Expected("']'");
        if (Is(TokenType::kColon)) {
          ++pos_;
          if (++n > 2) Fail("a slice takes at most 3 parts");
          is_slice = true;
          continue;
        }
        if (parts[n]) Expected("':' or ']'");
        parts[n] = ParseExpression();
      }
      ++pos_;
      if (!is_slice) {
        if (!parts[0]) Fail("expected an index inside '[]'");
        auto node = MakeNode(NodeKind::kIndex, offset);
        node->args.push_back(std::move(object));
        node->args.push_back(std::move(parts[0]));
        object = std::move(node);
      } else {
        auto node = MakeNode(NodeKind::kSlice, offset);
        node->args.push_back(std::move(object));
        for (auto& p : parts) node->args.push_back(std::move(p));
        object = std::move(node);
      }
    }
    return object;
  }

  std::unique_ptr<Node> ParsePrimary() {
    DepthGuard guard(this);
    if (AtEnd()) Expected("an expression");
    const Token& t = tokens_[pos_];
    switch (t.type) {
      case TokenType::kNumber: {
        ++pos_;
        auto node = MakeNode(NodeKind::kLiteral, t.offset);
        if (t.value.find('.') != std::string::npos) {
          node->literal = Value::Float(std::strtod(t.value.c_str(), nullptr));
        } else {
          errno = 0;
          const long long v = std::strtoll(t.value.c_str(), nullptr, 10);
          if (errno == ERANGE) {
            node->literal = Value::Float(std::strtod(t.value.c_str(), nullptr));
          } else {
            node->literal = Value::Int(v);
          }
        }
        return node;
      }
      case TokenType::kString: {
        auto node = MakeNode(NodeKind::kLiteral, t.offset);
        std::string s = t.value;
        ++pos_;
        while (Is(TokenType::kString)) s += tokens_[pos_++].value;  // 'a' 'b' -> 'ab'
        node->literal = Value::String(std::move(s));
        return node;
      }
      case TokenType::kIdentifier: {
        ++pos_;
        auto node = MakeNode(NodeKind::kName, t.offset);
        node->name = t.value;
        return node;
      }
      case TokenType::kOpenParen: {
        ++pos_;
        auto inner = ParseExpressionSequence(false);
        Expect(TokenType::kCloseParen, "')'");
        return inner;
      }
      case TokenType::kOpenBracket: {
        ++pos_;
        auto node = MakeNode(NodeKind::kList, t.offset);
        while (!Is(TokenType::kCloseBracket)) {
          if (AtEnd()) Expected("']'");
          node->args.push_back(ParseExpression());
          if (Is(TokenType::kComma)) {
            ++pos_;
          } else if (!Is(TokenType::kCloseBracket)) {
            Expected("',' or ']'");
          }
        }
        ++pos_;
        return node;
      }
      case TokenType::kOpenBrace: {
        ++pos_;
        auto node = MakeNode(NodeKind::kDict, t.offset);
        while (!Is(TokenType::kCloseBrace)) {
          if (AtEnd()) Expected("'}'");
          node->args.push_back(ParseExpression());
          Expect(TokenType::kColon, "':' between key and value");
          node->args.push_back(ParseExpression());
          if (Is(TokenType::kComma)) {
            ++pos_;
          } else if (!Is(TokenType::kCloseBrace)) {
            Expected("',' or '}'");
          }
        }
        ++pos_;
        return node;
      }
      default: Expected("an expression");
    }
  }

  std::vector<Token> tokens_;
  size_t end_offset_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<NodeList> Parse(std::string_view source) {
  LATTE_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  Parser parser(std::move(tokens), source.size());
  try {
    return parser.ParseTemplate();
  } catch (const ParseError& e) {
    return Status::InvalidArgument(DescribeOffset(source, e.offset) + ": " + e.message);
  }
}

}  // namespace latte::jinja
