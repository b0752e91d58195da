// Chat templates: the Jinja text in tokenizer_config.json's "chat_template" that
// turns a conversation into the prompt string (DeepSeek-V3:
// "<｜begin▁of▁sentence｜>{system}<｜User｜>{user}<｜Assistant｜>"). latte renders it
// with its own interpreter of the Jinja subset real templates use (see
// jinja_parser.h for the grammar, jinja_evaluator.h for the semantics), matching
// Hugging Face's @huggingface/jinja byte for byte (tests/chat_template_test.cc).
//
//   auto tmpl = ChatTemplate::FromTokenizerConfig(dir + "/tokenizer_config.json");
//   auto prompt = tmpl->Render({{"messages", messages}, {"add_generation_prompt", true}});
//
// bos_token / eos_token from the config are added to the context unless the
// context sets them itself.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "text/jinja_evaluator.h"
#include "text/jinja_parser.h"

namespace latte {

class ChatTemplate {
 public:
  // Parses a template. Syntax errors: one line, "chat template: line L, column C:
  // expected X, got Y".
  static Result<ChatTemplate> Parse(std::string_view source);

  // Reads "chat_template" and the bos/eos tokens (a string or an {"content": ...}
  // object) from a Hugging Face tokenizer_config.json.
  static Result<ChatTemplate> FromTokenizerConfig(const std::string& path);

  // A template with the bos/eos token texts it is rendered with (a GGUF's
  // tokenizer.chat_template and its BOS / EOS tokens' texts).
  static Result<ChatTemplate> WithSpecialTokens(std::string_view source, std::optional<std::string> bos_token,
                                                std::optional<std::string> eos_token);

  // Renders with `context` (a JSON object: messages, add_generation_prompt,
  // bos_token, eos_token, tools, ...). Errors: one line naming the position, or
  // exactly the message of the template's own raise_exception("...").
  Result<std::string> Render(const nlohmann::json& context) const;
  // The same, keeping the context's key order (visible through |tojson and
  // |items; nlohmann::json sorts keys).
  Result<std::string> Render(const nlohmann::ordered_json& context) const;

  const std::string& source() const { return state_->source; }
  const std::string& bos_token() const { return state_->bos_token; }
  const std::string& eos_token() const { return state_->eos_token; }

  jinja::RenderLimits& limits() { return state_->limits; }

 private:
  struct State {
    std::string source;
    jinja::NodeList program;
    std::string bos_token, eos_token;
    bool has_bos = false, has_eos = false;
    jinja::RenderLimits limits;
  };
  explicit ChatTemplate(std::shared_ptr<State> state) : state_(std::move(state)) {}
  Result<std::string> RenderValue(jinja::Value context) const;

  std::shared_ptr<State> state_;
};

}  // namespace latte
