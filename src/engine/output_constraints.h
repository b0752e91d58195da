// The grammars that constrain requests' outputs (GenerationRequest::output_constraint),
// compiled for the engine's vocabulary, and the masking of a row of logits by one.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "text/token_grammar.h"
#include "text/tokenizer.h"

namespace latte {

// The vocabulary's trie is built at the first constrained request; each distinct
// (spec, end tokens) keeps its TokenGrammar while it is among the last kKept used, so
// requests with the same schema share its automaton and its masks. Thread-safe.
class OutputConstraints {
 public:
  static constexpr size_t kKept = 32;

  explicit OutputConstraints(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}

  // The grammar for `spec`; errors as OutputConstraintGrammar's, or FailedPrecondition
  // without a tokenizer.
  Result<std::shared_ptr<TokenGrammar>> Get(const std::string& spec, const std::vector<int32_t>& end_tokens);

 private:
  std::mutex mu_;
  const Tokenizer* tokenizer_;
  std::shared_ptr<const TokenTrie> trie_;
  std::list<std::pair<std::string, std::shared_ptr<TokenGrammar>>> recent_;  // most recent first
};

// out = logits where `mask` allows the token, -inf elsewhere. logits, out: [V].
void MaskLogits(const TokenMask& mask, std::span<const float> logits, std::vector<float>& out);

}  // namespace latte
