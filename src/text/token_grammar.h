// Grammars over a tokenizer's vocabulary: which tokens may come next in a grammar
// state (a mask over the vocabulary), and the state after a token. What the engine
// applies to a constrained sequence's logits each step.
//
//   auto trie = std::make_shared<TokenTrie>(tokenizer);
//   TokenGrammar g(JsonObjectGrammar(), trie, {eos_id});
//   auto s = g.start();
//   auto allowed = g.Mask(s);   // bit t of *allowed set: token t may come next
//   s = g.Next(s, sampled);
//
// A state's mask is computed once (a walk of the vocabulary's byte trie through the
// grammar's automaton, pruned where the grammar refuses a byte) and kept: the states a
// JSON grammar passes through repeat (inside a string, every character leaves it in
// the same state), so most steps cost a lookup. Thread-safe: the sequences of a
// request, sampled on different threads, share one TokenGrammar.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/grammar.h"
#include "text/tokenizer.h"

namespace latte {

// The vocabulary's tokens by their bytes, as a trie in depth-first order. Special
// tokens and tokens without bytes are left out (a grammar never allows them).
class TokenTrie {
 public:
  explicit TokenTrie(const Tokenizer& tokenizer);
  // For tests: tokens given as byte strings, ids their indices ("" and `skip` left out).
  explicit TokenTrie(const std::vector<std::string>& tokens);

  int32_t vocab_size() const { return vocab_size_; }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }

 private:
  friend class TokenGrammar;
  void Build(std::vector<std::pair<std::string, int32_t>> tokens);

  int32_t vocab_size_ = 0;
  std::vector<std::string> bytes_;  // bytes_: [V]; empty for tokens left out
  // Node 0 is the root; node i > 0 reads byte_[i] below its parent, at depth_[i], and
  // its subtree is nodes [i, end_[i]). The tokens that end at node i:
  // token_ids_[token_begin_[i], token_begin_[i + 1]).
  std::vector<uint8_t> byte_;
  std::vector<int32_t> depth_, end_, token_begin_, token_ids_;
};

// Bit t of word t / 64: token t is allowed.
using TokenMask = std::vector<uint64_t>;

class TokenGrammar {
 public:
  using State = GrammarDfa::State;
  static constexpr State kDead = GrammarDfa::kDead;

  // end_tokens: allowed where the grammar is complete (EOS): sampling one ends the
  // sequence.
  TokenGrammar(Grammar grammar, std::shared_ptr<const TokenTrie> trie, std::vector<int32_t> end_tokens);

  State start() const { return 0; }
  // The tokens allowed in `state`: [ceil(V / 64)] words.
  std::shared_ptr<const TokenMask> Mask(State state);
  // The state after `token`; kDead if the grammar refuses it (or after an end token).
  State Next(State state, int32_t token);
  bool IsEndToken(int32_t token) const;
  // Complete, and no byte may follow: the sequence is done.
  bool Finished(State state);
  size_t num_states();

 private:
  std::mutex mu_;
  GrammarDfa dfa_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<int32_t> end_tokens_;
  // Masks kept, at most kMaxKeptMasks (V / 8 bytes each): past that they are dropped
  // and computed again as states come back, so a grammar that keeps reaching new states
  // (deep nesting, long bounded arrays) does not grow without bound.
  static constexpr size_t kMaxKeptMasks = 2048;
  std::unordered_map<State, std::shared_ptr<const TokenMask>> masks_;
};

}  // namespace latte
