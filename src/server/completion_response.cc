#include "server/completion_response.h"

namespace latte::server {

CompletionFormatter::CompletionFormatter(const CompletionRequest& request, const Tokenizer* tokenizer, std::string id,
                                         int64_t created)
    : tokenizer_(tokenizer),
      id_(std::move(id)),
      created_(created),
      model_(request.model),
      n_(request.n),
      echo_(request.echo),
      logprobs_(request.logprobs),
      stream_(request.stream),
      include_usage_(request.include_usage),
      tokens_as_ids_(request.tokens_as_ids),
      prompt_texts_(request.prompt_texts),
      prompt_logprobs_(request.prompts.size()) {
  for (const GenerationRequest& r : request.prompts) {
    prompts_.push_back(r.prompt);
    stop_token_ids_.push_back(r.stop_token_ids);
  }
}

// Each token's text, its logprob, the top alternatives by text (vLLM adds the chosen
// token to them), and where it starts in the choice's text.
void CompletionFormatter::AddToken(Logprobs& lp, int64_t& offset, const SampledToken& t) const {
  const std::string text = TokenText(tokenizer_, t.id, tokens_as_ids_);
  lp.tokens.push_back(text);
  lp.token_logprobs.push_back(t.logprob);
  nlohmann::json top = nlohmann::json::object();
  for (const TokenLogprob& alt : t.top_logprobs()) top[TokenText(tokenizer_, alt.id, tokens_as_ids_)] = alt.logprob;
  top[text] = t.logprob;
  lp.top_logprobs.push_back(std::move(top));
  lp.text_offset.push_back(offset);
  offset += static_cast<int64_t>(text.size());
}

nlohmann::json CompletionFormatter::LogprobsJson(const Logprobs& lp) const {
  return {{"tokens", lp.tokens},
          {"token_logprobs", lp.token_logprobs},
          {"top_logprobs", lp.top_logprobs},
          {"text_offset", lp.text_offset}};
}

// The prompt at the head of a choice: its text, and its tokens' logprobs (the first
// token has none: nothing came before it).
void CompletionFormatter::Echo(size_t prompt, Choice& c, std::string& text, Logprobs& lp) {
  c.echoed = true;
  text += prompt_texts_[prompt];
  if (!logprobs_) return;
  const std::vector<int32_t>& ids = prompts_[prompt];
  const std::vector<SampledToken>& scored = prompt_logprobs_[prompt];
  int64_t offset = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0 && i - 1 < scored.size()) {
      AddToken(lp, offset, scored[i - 1]);
      continue;
    }
    const std::string token = TokenText(tokenizer_, ids[i], tokens_as_ids_);
    lp.tokens.push_back(token);
    lp.token_logprobs.push_back(nullptr);
    lp.top_logprobs.push_back(nullptr);
    lp.text_offset.push_back(offset);
    offset += static_cast<int64_t>(token.size());
  }
  c.offset = static_cast<int64_t>(prompt_texts_[prompt].size());
}

nlohmann::json CompletionFormatter::ChunkBase() const {
  nlohmann::json chunk = {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_}};
  if (include_usage_) chunk["usage"] = nullptr;
  return chunk;
}

std::string CompletionFormatter::OnOutput(size_t prompt, const GenerationOutput& out) {
  if (!out.prompt_logprobs.empty()) prompt_logprobs_[prompt] = out.prompt_logprobs;
  const int index = static_cast<int>(prompt) * n_ + out.index;
  Choice& c = choices_[index];
  std::string text;
  Logprobs lp;
  if (echo_ && !c.echoed) Echo(prompt, c, text, lp);
  text += out.text;
  if (logprobs_) {
    for (const SampledToken& t : out.tokens) AddToken(lp, c.offset, t);
  } else {
    c.offset += static_cast<int64_t>(out.text.size());
  }
  completion_tokens_ += static_cast<int64_t>(out.tokens.size());
  nlohmann::json finish = nullptr, stop_reason = nullptr;
  if (out.finish) {
    c.finish_reason = std::string(FinishReasonName(*out.finish));
    finish = c.finish_reason;
    if (!out.stop_reason.empty()) {
      stop_reason = out.stop_reason;
    } else if (*out.finish == FinishReason::kStop && !out.tokens.empty()) {
      const int32_t last = out.tokens.back().id;  // a stop_token_ids id is reported; EOS is not (vLLM)
      for (int32_t id : stop_token_ids_[prompt]) {
        if (id == last) stop_reason = id;
      }
    }
    c.stop_reason = stop_reason;
  }
  if (!stream_) {
    c.text += text;
    for (size_t i = 0; i < lp.tokens.size(); ++i) {
      c.logprobs.tokens.push_back(lp.tokens[i]);
      c.logprobs.token_logprobs.push_back(lp.token_logprobs[i]);
      c.logprobs.top_logprobs.push_back(lp.top_logprobs[i]);
      c.logprobs.text_offset.push_back(lp.text_offset[i]);
    }
    return {};
  }
  if (text.empty() && lp.tokens.empty() && !out.finish) return {};
  nlohmann::json choice = {{"index", index},
                           {"text", text},
                           {"logprobs", logprobs_ ? LogprobsJson(lp) : nlohmann::json(nullptr)},
                           {"finish_reason", finish},
                           {"stop_reason", stop_reason}};
  nlohmann::json chunk = ChunkBase();
  chunk["choices"] = nlohmann::json::array({choice});
  return SseEvent(chunk);
}

std::string CompletionFormatter::Finish() {
  int64_t prompt_tokens = 0;
  for (const auto& p : prompts_) prompt_tokens += static_cast<int64_t>(p.size());
  const nlohmann::json usage = UsageJson(prompt_tokens, completion_tokens_);
  if (stream_) {
    return include_usage_ ? UsageChunkEvent(ChunkBase(), usage) : std::string();
  }
  nlohmann::json choices = nlohmann::json::array();
  for (const auto& [index, c] : choices_) {
    choices.push_back(
        {{"index", index},
         {"text", c.text},
         {"logprobs", logprobs_ ? LogprobsJson(c.logprobs) : nlohmann::json(nullptr)},
         {"finish_reason", c.finish_reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.finish_reason)},
         {"stop_reason", c.stop_reason}});
  }
  nlohmann::json body = {{"id", id_},       {"object", "text_completion"}, {"created", created_},
                         {"model", model_}, {"choices", choices},          {"usage", usage}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace latte::server
