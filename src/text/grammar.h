// Context-free grammars over bytes, and a recognizer that reads them one byte at a
// time: what constrained decoding (JSON schemas, response_format) is built on.
//
// A grammar is a list of rules; a rule is a list of alternatives; an alternative is a
// sequence of items, each a set of bytes or a reference to a rule. Rule 0 is the
// start. Left recursion is not allowed (a rule that can reach itself without reading
// a byte); repetition is written with right recursion (`xs ::= x xs | ε`), which the
// recognizer runs in constant stack depth.
//
// GrammarDfa runs a grammar as a pushdown recognizer: a state is the set of stacks
// (positions still to match, innermost last) that the bytes read so far allow. States
// are interned and their transitions memoized, so a grammar read many times (every
// step of every sequence with the same schema, and every token of the vocabulary
// tried against a state) becomes a lazily built deterministic automaton.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace latte {

class Grammar {
 public:
  using RuleId = int32_t;

  // One item of an alternative: bytes in a set, or a rule.
  struct Item {
    bool is_rule = false;
    int32_t id = 0;  // a rule id, or an index into the grammar's byte sets
  };

  Grammar();  // rule 0 (the start) exists, with no alternative yet

  RuleId NewRule();
  void AddAlternative(RuleId rule, const std::vector<Item>& items);

  // Items.
  Item Bytes(uint8_t lo, uint8_t hi);  // one byte in [lo, hi]
  Item ByteSet(const std::bitset<256>& set);
  static Item Rule(RuleId rule) { return {true, rule}; }
  // Rules built from items (each a new rule).
  RuleId Literal(std::string_view bytes);  // exactly these bytes (may be empty)
  RuleId Sequence(const std::vector<Item>& items);
  RuleId Choice(const std::vector<Item>& items);  // one of them
  RuleId Optional(Item item);
  RuleId ZeroOrMore(Item item);  // `item` must not match the empty string

  int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }

 private:
  friend class GrammarDfa;
  // elements_: every alternative's items, each alternative closed by an end element.
  struct Element {
    enum Kind : uint8_t { kBytes, kRule, kEnd } kind = kEnd;
    int32_t id = 0;
  };
  std::vector<Element> elements_;
  std::vector<std::vector<int32_t>> rules_;  // rule -> the element index each alternative starts at
  std::vector<std::bitset<256>> byte_sets_;
};

class GrammarDfa {
 public:
  using State = int32_t;
  static constexpr State kDead = -1;  // no input can lead anywhere from here

  // Nested rules deeper than this (a grammar that recurses without reading) are cut:
  // such a path is treated as matching nothing.
  static constexpr size_t kMaxExpansionDepth = 4096;

  explicit GrammarDfa(Grammar grammar);

  State start() const { return 0; }
  // The state after reading `byte` in `state` (kDead if the grammar forbids it).
  State Next(State state, uint8_t byte);
  State Next(State state, std::string_view bytes);
  // The bytes read so far form a complete sentence.
  bool Accepting(State state) const { return states_[state].accepting; }
  // Some byte can still follow.
  bool CanContinue(State state) const { return states_[state].continues; }
  size_t num_states() const { return states_.size(); }

 private:
  using Stack = std::vector<int32_t>;  // element positions, innermost last
  struct StateInfo {
    std::vector<Stack> stacks;  // sorted, distinct; each top a byte element, or empty (accept)
    bool accepting = false;
    bool continues = false;
    std::array<State, 256> next;
  };
  static constexpr State kUnknown = -2;

  // Adds to `out` every stack `stack` can become before reading its next byte.
  void Expand(Stack& stack, std::vector<Stack>& out, size_t depth) const;
  State Intern(std::vector<Stack> stacks);

  Grammar g_;
  std::vector<StateInfo> states_;
  std::unordered_map<std::string, State> index_;  // the stacks, serialized -> state
};

}  // namespace latte
