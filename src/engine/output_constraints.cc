#include "engine/output_constraints.h"

#include <limits>

#include "text/json_schema_grammar.h"

namespace latte {

Result<std::shared_ptr<TokenGrammar>> OutputConstraints::Get(const std::string& spec,
                                                             const std::vector<int32_t>& end_tokens) {
  if (tokenizer_ == nullptr) {
    return Status::FailedPrecondition("constrained output needs a tokenizer, and this model has none",
                                      "response_format");
  }
  std::string key = spec;
  for (int32_t id : end_tokens) key += "\n" + std::to_string(id);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = recent_.begin(); it != recent_.end(); ++it) {
    if (it->first != key) continue;
    recent_.splice(recent_.begin(), recent_, it);
    return recent_.front().second;
  }
  LATTE_ASSIGN_OR_RETURN(Grammar grammar, OutputConstraintGrammar(spec));
  if (!trie_) trie_ = std::make_shared<TokenTrie>(*tokenizer_);
  auto compiled = std::make_shared<TokenGrammar>(std::move(grammar), trie_, end_tokens);
  recent_.emplace_front(std::move(key), compiled);
  if (recent_.size() > kKept) recent_.pop_back();
  return compiled;
}

void MaskLogits(const TokenMask& mask, std::span<const float> logits, std::vector<float>& out) {
  const size_t V = logits.size();
  out.resize(V);
  const float minus_inf = -std::numeric_limits<float>::infinity();
  for (size_t w = 0; w * 64 < V; ++w) {
    const uint64_t bits = w < mask.size() ? mask[w] : 0;
    const size_t end = std::min(V, w * 64 + 64);
    for (size_t t = w * 64; t < end; ++t) out[t] = (bits >> (t - w * 64)) & 1 ? logits[t] : minus_inf;
  }
}

}  // namespace latte
