#include "text/token_grammar.h"

#include <algorithm>

namespace latte {

TokenTrie::TokenTrie(const Tokenizer& tokenizer) {
  vocab_size_ = tokenizer.vocab_size();
  std::vector<std::pair<std::string, int32_t>> tokens;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    if (tokenizer.IsSpecial(id)) continue;
    std::string b = tokenizer.TokenBytes(id);
    if (!b.empty()) tokens.emplace_back(std::move(b), id);
  }
  Build(std::move(tokens));
}

TokenTrie::TokenTrie(const std::vector<std::string>& tokens) {
  vocab_size_ = static_cast<int32_t>(tokens.size());
  std::vector<std::pair<std::string, int32_t>> list;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    if (!tokens[id].empty()) list.emplace_back(tokens[id], id);
  }
  Build(std::move(list));
}

void TokenTrie::Build(std::vector<std::pair<std::string, int32_t>> tokens) {
  bytes_.assign(vocab_size_, std::string());
  for (const auto& [b, id] : tokens) bytes_[id] = b;
  // Sorted, a string's nodes are its longest common prefix with the one before plus
  // new nodes, created in depth-first order; `path` holds the nodes of the current
  // string's prefix.
  std::sort(tokens.begin(), tokens.end());
  byte_ = {0};
  depth_ = {0};
  end_ = {0};
  std::vector<int32_t> owner;  // the node each token ends at, in token order
  std::vector<int32_t> path = {0};
  const std::string* previous = nullptr;
  for (const auto& [b, id] : tokens) {
    size_t common = 0;
    if (previous) {
      while (common < b.size() && common < previous->size() && b[common] == (*previous)[common]) ++common;
    }
    while (path.size() > common + 1) {
      end_[path.back()] = static_cast<int32_t>(byte_.size());
      path.pop_back();
    }
    for (size_t i = common; i < b.size(); ++i) {
      path.push_back(static_cast<int32_t>(byte_.size()));
      byte_.push_back(static_cast<uint8_t>(b[i]));
      depth_.push_back(static_cast<int32_t>(i + 1));
      end_.push_back(0);
    }
    owner.push_back(path.back());
    token_ids_.push_back(id);
    previous = &b;
  }
  for (int32_t node : path) end_[node] = static_cast<int32_t>(byte_.size());
  // owner is nondecreasing: only a duplicate string (the one just before) reuses a node.
  token_begin_.assign(byte_.size() + 1, 0);
  for (int32_t node : owner) ++token_begin_[node + 1];
  for (size_t i = 1; i < token_begin_.size(); ++i) token_begin_[i] += token_begin_[i - 1];
}

TokenGrammar::TokenGrammar(Grammar grammar, std::shared_ptr<const TokenTrie> trie, std::vector<int32_t> end_tokens)
    : dfa_(std::move(grammar)), trie_(std::move(trie)), end_tokens_(std::move(end_tokens)) {}

std::shared_ptr<const TokenMask> TokenGrammar::Mask(State state) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto known = masks_.find(state); known != masks_.end()) return known->second;
  if (masks_.size() >= kMaxKeptMasks) masks_.clear();
  const TokenTrie& t = *trie_;
  auto mask = std::make_shared<TokenMask>((t.vocab_size_ + 63) / 64, 0);
  uint64_t* bits = mask->data();
  if (state != kDead) {
    // Walk the trie in its depth-first order; states[d]: the state after the first d
    // bytes of the current node's path. A refused byte skips the node's whole subtree.
    std::vector<State> states(1, state);
    const int32_t nodes = static_cast<int32_t>(t.byte_.size());
    for (int32_t i = 1; i < nodes;) {
      const int32_t d = t.depth_[i];
      const State s = dfa_.Next(states[d - 1], t.byte_[i]);
      if (s == kDead) {
        i = t.end_[i];
        continue;
      }
      if (static_cast<int32_t>(states.size()) <= d) states.resize(d + 1);
      states[d] = s;
      for (int32_t k = t.token_begin_[i]; k < t.token_begin_[i + 1]; ++k) {
        const int32_t id = t.token_ids_[k];
        bits[id / 64] |= uint64_t{1} << (id % 64);
      }
      ++i;
    }
    if (dfa_.Accepting(state)) {
      for (int32_t id : end_tokens_) {
        if (id >= 0 && id < t.vocab_size_) bits[id / 64] |= uint64_t{1} << (id % 64);
      }
    }
  }
  masks_.emplace(state, mask);
  return mask;
}

bool TokenGrammar::IsEndToken(int32_t token) const {
  return std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end();
}

TokenGrammar::State TokenGrammar::Next(State state, int32_t token) {
  if (token < 0 || token >= trie_->vocab_size_ || IsEndToken(token)) return kDead;
  const std::string& b = trie_->bytes_[token];
  if (b.empty()) return kDead;
  std::lock_guard<std::mutex> lock(mu_);
  return dfa_.Next(state, b);
}

bool TokenGrammar::Finished(State state) {
  std::lock_guard<std::mutex> lock(mu_);
  return state == kDead || (dfa_.Accepting(state) && !dfa_.CanContinue(state));
}

size_t TokenGrammar::num_states() {
  std::lock_guard<std::mutex> lock(mu_);
  return dfa_.num_states();
}

}  // namespace latte
