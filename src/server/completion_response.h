// /v1/completions responses in OpenAI's shape: one JSON body
//   {id, object: "text_completion", created, model, choices: [{index, text, logprobs,
//    finish_reason, stop_reason}], usage}
// or, streaming, one such chunk per engine output and choice, then (include_usage) a
// chunk with no choices and the usage. Choice i of prompt p has index p * n + i. With
// echo the prompt's text comes first in each choice (and its logprobs, the first token's
// null, when logprobs is set: lm-eval's loglikelihood sends echo + max_tokens 0 +
// logprobs 1 and reads token_logprobs).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/generation_reply.h"
#include "server/openai_protocol.h"

namespace latte::server {

class CompletionFormatter : public ResponseFormatter {
 public:
  CompletionFormatter(const CompletionRequest& request, const Tokenizer* tokenizer, std::string id, int64_t created);
  std::string OnOutput(size_t prompt, const GenerationOutput& out) override;
  std::string Finish() override;

 private:
  // OpenAI's completions logprobs object, grown token by token.
  struct Logprobs {
    nlohmann::json tokens = nlohmann::json::array(), token_logprobs = nlohmann::json::array(),
                   top_logprobs = nlohmann::json::array(), text_offset = nlohmann::json::array();
  };
  struct Choice {
    std::string text;
    Logprobs logprobs;
    int64_t offset = 0;  // text_offset of the next token
    bool echoed = false;
    std::string finish_reason;
    nlohmann::json stop_reason;
  };
  void Echo(size_t prompt, Choice& c, std::string& text, Logprobs& lp);
  void AddToken(Logprobs& lp, int64_t& offset, const SampledToken& t) const;
  nlohmann::json LogprobsJson(const Logprobs& lp) const;
  nlohmann::json ChunkBase() const;

  const Tokenizer* tokenizer_;
  const std::string id_;
  const int64_t created_;
  const std::string model_;
  const int n_;
  const bool echo_;
  const std::optional<int> logprobs_;
  const bool stream_;
  const bool include_usage_;
  const bool tokens_as_ids_;
  std::vector<std::string> prompt_texts_;
  std::vector<std::vector<int32_t>> prompts_;
  std::vector<std::vector<int32_t>> stop_token_ids_;
  std::vector<std::vector<SampledToken>> prompt_logprobs_;  // per prompt, from choice 0's first output
  std::map<int, Choice> choices_;                           // by response index
  int64_t completion_tokens_ = 0;
};

}  // namespace latte::server
