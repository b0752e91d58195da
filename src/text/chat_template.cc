#include "text/chat_template.h"

#include <fstream>
#include <sstream>

namespace latte {

Result<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  auto state = std::make_shared<State>();
  state->source = std::string(source);
  Result<jinja::NodeList> program = jinja::Parse(state->source);
  if (!program.ok()) return program.status().WithContext("chat template");
  state->program = std::move(program).value();
  return ChatTemplate(std::move(state));
}

namespace {

// A special token in tokenizer_config.json: "text" or {"content": "text", ...}.
Result<std::string> TokenText(const nlohmann::json& config, const char* key, bool* present) {
  *present = false;
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) {
    *present = true;
    return it->get<std::string>();
  }
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) {
      *present = true;
      return content->get<std::string>();
    }
  }
  return Status::InvalidArgument(std::string("\"") + key +
                                 "\" must be a string or an object with a string \"content\"");
}

}  // namespace

Result<ChatTemplate> ChatTemplate::FromTokenizerConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json config = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return Status::InvalidArgument(path + ": not a JSON object");
  }
  const auto tmpl = config.find("chat_template");
  if (tmpl == config.end() || !tmpl->is_string()) {
    // Some repositories list several named templates; "default" is the chat one.
    if (tmpl != config.end() && tmpl->is_array()) {
      for (const auto& entry : *tmpl) {
        if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
            entry["template"].is_string()) {
          Result<ChatTemplate> parsed = Parse(entry["template"].get<std::string>());
          if (!parsed.ok()) return parsed.status().WithContext(path);
          return parsed;
        }
      }
    }
    return Status::InvalidArgument(path + ": no string \"chat_template\"");
  }
  Result<ChatTemplate> parsed = Parse(tmpl->get<std::string>());
  if (!parsed.ok()) return parsed.status().WithContext(path);
  State& state = *parsed->state_;
  Result<std::string> bos = TokenText(config, "bos_token", &state.has_bos);
  if (!bos.ok()) return bos.status().WithContext(path);
  Result<std::string> eos = TokenText(config, "eos_token", &state.has_eos);
  if (!eos.ok()) return eos.status().WithContext(path);
  state.bos_token = bos.value();
  state.eos_token = eos.value();
  return parsed;
}

Result<ChatTemplate> ChatTemplate::WithSpecialTokens(std::string_view source, std::optional<std::string> bos_token,
                                                     std::optional<std::string> eos_token) {
  LATTE_ASSIGN_OR_RETURN(ChatTemplate parsed, Parse(source));
  State& state = *parsed.state_;
  state.has_bos = bos_token.has_value();
  state.has_eos = eos_token.has_value();
  state.bos_token = std::move(bos_token).value_or("");
  state.eos_token = std::move(eos_token).value_or("");
  return parsed;
}

Result<std::string> ChatTemplate::RenderValue(jinja::Value context) const {
  if (!context.is_map()) return Status::InvalidArgument("chat template context must be a JSON object");
  if ((state_->has_bos && context.map->Find("bos_token") == nullptr) ||
      (state_->has_eos && context.map->Find("eos_token") == nullptr)) {
    jinja::Map map = *context.map;
    if (state_->has_bos && map.Find("bos_token") == nullptr) {
      map.Set("bos_token", jinja::Value::String(state_->bos_token));
    }
    if (state_->has_eos && map.Find("eos_token") == nullptr) {
      map.Set("eos_token", jinja::Value::String(state_->eos_token));
    }
    LATTE_ASSIGN_OR_RETURN(context, jinja::MakeMap(std::move(map)));
  }
  Result<std::string> out = jinja::Render(state_->program, state_->source, context, state_->limits);
  if (!out.ok()) return out.status();
  return out;
}

Result<std::string> ChatTemplate::Render(const nlohmann::json& context) const {
  if (!context.is_object()) return Status::InvalidArgument("chat template context must be a JSON object");
  LATTE_ASSIGN_OR_RETURN(jinja::Value value, jinja::FromJson(context));
  return RenderValue(std::move(value));
}

Result<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) return Status::InvalidArgument("chat template context must be a JSON object");
  LATTE_ASSIGN_OR_RETURN(jinja::Value value, jinja::FromJson(context));
  return RenderValue(std::move(value));
}

}  // namespace latte
