#include "text/grammar.h"

#include <algorithm>

namespace latte {

Grammar::Grammar() { rules_.emplace_back(); }

Grammar::RuleId Grammar::NewRule() {
  rules_.emplace_back();
  return static_cast<RuleId>(rules_.size() - 1);
}

void Grammar::AddAlternative(RuleId rule, const std::vector<Item>& items) {
  rules_[rule].push_back(static_cast<int32_t>(elements_.size()));
  for (const Item& item : items) elements_.push_back({item.is_rule ? Element::kRule : Element::kBytes, item.id});
  elements_.push_back({Element::kEnd, 0});
}

Grammar::Item Grammar::ByteSet(const std::bitset<256>& set) {
  byte_sets_.push_back(set);
  return {false, static_cast<int32_t>(byte_sets_.size() - 1)};
}

Grammar::Item Grammar::Bytes(uint8_t lo, uint8_t hi) {
  std::bitset<256> set;
  for (int b = lo; b <= hi; ++b) set.set(b);
  return ByteSet(set);
}

Grammar::RuleId Grammar::Literal(std::string_view bytes) {
  std::vector<Item> items;
  for (char c : bytes) items.push_back(Bytes(static_cast<uint8_t>(c), static_cast<uint8_t>(c)));
  return Sequence(items);
}

Grammar::RuleId Grammar::Sequence(const std::vector<Item>& items) {
  const RuleId r = NewRule();
  AddAlternative(r, items);
  return r;
}

Grammar::RuleId Grammar::Choice(const std::vector<Item>& items) {
  const RuleId r = NewRule();
  for (const Item& item : items) AddAlternative(r, {item});
  return r;
}

Grammar::RuleId Grammar::Optional(Item item) {
  const RuleId r = NewRule();
  AddAlternative(r, {item});
  AddAlternative(r, {});
  return r;
}

Grammar::RuleId Grammar::ZeroOrMore(Item item) {
  const RuleId r = NewRule();
  AddAlternative(r, {item, Rule(r)});
  AddAlternative(r, {});
  return r;
}

GrammarDfa::GrammarDfa(Grammar grammar) : g_(std::move(grammar)) {
  std::vector<Stack> start;
  for (int32_t alt : g_.rules_[0]) {
    Stack s{alt};
    Expand(s, start, 0);
  }
  if (Intern(std::move(start)) == kDead) {
    // A grammar that allows nothing: its start is a state with no way on.
    StateInfo nothing;
    nothing.next.fill(kDead);
    states_.push_back(std::move(nothing));
  }
}

void GrammarDfa::Expand(Stack& stack, std::vector<Stack>& out, size_t depth) const {
  if (depth > kMaxExpansionDepth) return;
  // Pop finished alternatives: what follows is the enclosing one's next item.
  while (!stack.empty() && g_.elements_[stack.back()].kind == Grammar::Element::kEnd) stack.pop_back();
  if (stack.empty() || g_.elements_[stack.back()].kind == Grammar::Element::kBytes) {
    out.push_back(stack);
    return;
  }
  const int32_t top = stack.back();
  const Grammar::RuleId rule = g_.elements_[top].id;
  stack.pop_back();
  // The continuation after the rule; none when the rule ends its alternative, so right
  // recursion does not grow the stack.
  const bool continues = g_.elements_[top + 1].kind != Grammar::Element::kEnd;
  if (continues) stack.push_back(top + 1);
  for (int32_t alt : g_.rules_[rule]) {
    Stack s = stack;
    s.push_back(alt);
    Expand(s, out, depth + 1);
  }
}

GrammarDfa::State GrammarDfa::Intern(std::vector<Stack> stacks) {
  if (stacks.empty()) return kDead;
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  std::string key;
  for (const Stack& s : stacks) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    key.append(reinterpret_cast<const char*>(&n), sizeof n);
    key.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(int32_t));
  }
  auto [it, inserted] = index_.try_emplace(std::move(key), static_cast<State>(states_.size()));
  if (!inserted) return it->second;
  StateInfo info;
  info.next.fill(kUnknown);
  for (const Stack& s : stacks) (s.empty() ? info.accepting : info.continues) = true;
  info.stacks = std::move(stacks);
  states_.push_back(std::move(info));
  return it->second;
}

GrammarDfa::State GrammarDfa::Next(State state, uint8_t byte) {
  if (state < 0) return kDead;
  const State known = states_[state].next[byte];
  if (known != kUnknown) return known;
  std::vector<Stack> out;
  for (const Stack& s : states_[state].stacks) {
    if (s.empty() || !g_.byte_sets_[g_.elements_[s.back()].id].test(byte)) continue;
    Stack moved = s;
    ++moved.back();  // past the byte just read
    Expand(moved, out, 0);
  }
  const State next = Intern(std::move(out));  // may grow states_: index it again below
  states_[state].next[byte] = next;
  return next;
}

GrammarDfa::State GrammarDfa::Next(State state, std::string_view bytes) {
  for (char c : bytes) {
    state = Next(state, static_cast<uint8_t>(c));
    if (state == kDead) break;
  }
  return state;
}

}  // namespace latte
