#include "server/openai_protocol.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "text/json_schema_grammar.h"
#include "text/utf8.h"

namespace latte::server {
namespace {

// vLLM's fields that would change the output if honoured: refused unless they are at
// their neutral value, so a client never gets a silently different answer. (Unknown
// fields that change nothing, like `user`, are ignored, as vLLM ignores them.)
MaybeError RefuseUnsupported(const nlohmann::ordered_json& body) {
  struct Field {
    const char* name;
    nlohmann::ordered_json neutral;  // the value that asks for nothing
  };
  const Field fields[] = {
      {"min_tokens", 0},
      {"include_stop_str_in_output", false},
      {"use_beam_search", false},
      {"truncate_prompt_tokens", nullptr},
      {"prompt_logprobs", nullptr},
      {"guided_json", nullptr},
      {"guided_regex", nullptr},
      {"guided_choice", nullptr},
      {"guided_grammar", nullptr},
      {"structured_outputs", nullptr},
      {"bad_words", nullptr},
      {"allowed_token_ids", nullptr},
  };
  for (const Field& f : fields) {
    if (HasField(body, f.name) && body[f.name] != f.neutral) {
      return BadRequest(std::string(f.name) + " is not supported by latte", f.name);
    }
  }
  return std::nullopt;
}

// response_format: text (nothing to do), json_object, or json_schema, as the spec the
// engine constrains decoding with (GenerationRequest::output_constraint).
MaybeError ReadResponseFormat(const nlohmann::ordered_json& body, GenerationRequest& r) {
  if (!HasField(body, "response_format")) return std::nullopt;
  const nlohmann::ordered_json& rf = body["response_format"];
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) {
    return BadRequest("response_format must be an object with a type: text, json_object or json_schema",
                      "response_format");
  }
  const std::string type = rf["type"].get<std::string>();
  nlohmann::ordered_json spec;
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    spec = {{"type", "json_object"}};
  } else if (type == "json_schema") {
    const auto js = rf.find("json_schema");
    if (js == rf.end() || !js->is_object()) {
      return BadRequest("response_format.json_schema must be an object with a name and a schema",
                        "response_format.json_schema");
    }
    const auto name = js->find("name");
    if (name != js->end() && !name->is_string()) {
      return BadRequest("response_format.json_schema.name must be a string", "response_format.json_schema.name");
    }
    const auto schema = js->find("schema");
    if (schema == js->end() || !(schema->is_object() || schema->is_boolean())) {
      return BadRequest("response_format.json_schema.schema must be a JSON Schema (an object)",
                        "response_format.json_schema.schema");
    }
    spec = {{"type", "json_schema"}, {"schema", *schema}};
  } else {
    return BadRequest("response_format.type must be text, json_object or json_schema, got \"" + type + "\"",
                      "response_format.type");
  }
  std::string text = spec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  Result<Grammar> grammar = OutputConstraintGrammar(text);
  if (!grammar.ok()) {
    return BadRequest("response_format.json_schema.schema: " + grammar.status().message(),
                      "response_format.json_schema.schema");
  }
  r.output_constraint = std::move(text);
  return std::nullopt;
}

// The fields completions and chat share, in vLLM's spelling.
MaybeError ReadSamplingFields(const nlohmann::ordered_json& body, const ServedModel& model, GenerationRequest& r) {
  SamplingParams& s = r.sampling;
  LATTE_RETURN_IF_API_ERROR(ReadFloat(body, "temperature", s.temperature));
  LATTE_RETURN_IF_API_ERROR(ReadFloat(body, "top_p", s.top_p));
  int64_t top_k = s.top_k;
  LATTE_RETURN_IF_API_ERROR(ReadInt(body, "top_k", top_k));
  if (top_k < -1)
    return BadRequest("top_k must be -1 (off), 0 (off) or at least 1, got " + std::to_string(top_k), "top_k");
  s.top_k = static_cast<int>(std::min<int64_t>(top_k, INT32_MAX));
  LATTE_RETURN_IF_API_ERROR(ReadFloat(body, "min_p", s.min_p));
  LATTE_RETURN_IF_API_ERROR(ReadFloat(body, "presence_penalty", s.presence_penalty));
  LATTE_RETURN_IF_API_ERROR(ReadFloat(body, "frequency_penalty", s.frequency_penalty));
  LATTE_RETURN_IF_API_ERROR(ReadFloat(body, "repetition_penalty", s.repetition_penalty));
  std::optional<int64_t> seed;
  LATTE_RETURN_IF_API_ERROR(ReadInt(body, "seed", seed));
  if (seed) s.seed = static_cast<uint64_t>(*seed);

  int64_t n = 1;
  LATTE_RETURN_IF_API_ERROR(ReadInt(body, "n", n));
  // Clamped into int's range; CheckRequest refuses n below 1 or above --max-num-seqs.
  r.n = static_cast<int>(std::clamp<int64_t>(n, INT32_MIN, INT32_MAX));
  std::optional<int64_t> best_of;
  LATTE_RETURN_IF_API_ERROR(ReadInt(body, "best_of", best_of));
  if (best_of && *best_of != n) {
    return BadRequest("best_of must be absent or equal to n (" + std::to_string(n) + "); latte returns every choice",
                      "best_of");
  }

  LATTE_RETURN_IF_API_ERROR(ReadStringOrList(body, "stop", r.stop));
  LATTE_RETURN_IF_API_ERROR(ReadIdList(body, "stop_token_ids", model.limits.vocab_size, r.stop_token_ids));
  LATTE_RETURN_IF_API_ERROR(ReadBool(body, "ignore_eos", r.ignore_eos));
  LATTE_RETURN_IF_API_ERROR(ReadBool(body, "skip_special_tokens", r.skip_special_tokens));

  if (HasField(body, "logit_bias") && !(body["logit_bias"].is_object() && body["logit_bias"].empty())) {
    return BadRequest("logit_bias is not supported", "logit_bias");
  }
  LATTE_RETURN_IF_API_ERROR(ReadResponseFormat(body, r));
  return RefuseUnsupported(body);
}

// Streaming fields: `stream` and `stream_options.include_usage` (only with stream, as vLLM).
MaybeError ReadStreamFields(const nlohmann::ordered_json& body, bool& stream, bool& include_usage) {
  LATTE_RETURN_IF_API_ERROR(ReadBool(body, "stream", stream));
  if (!HasField(body, "stream_options")) return std::nullopt;
  const nlohmann::ordered_json& options = body["stream_options"];
  if (!options.is_object()) return BadRequest("stream_options must be an object", "stream_options");
  if (!stream) return BadRequest("stream_options can only be given with stream: true", "stream_options");
  if (auto e = ReadBool(options, "include_usage", include_usage)) {
    e->param = "stream_options.include_usage";
    return e;
  }
  return std::nullopt;
}

// The engine's own validation (ranges, n, stop strings, context and pool) of one
// parsed request, as the 400 naming the field. `max_tokens_param` is the field the
// client set max_tokens with.
MaybeError CheckEngineRequest(const GenerationRequest& r, const ServedModel& model,
                              const char* max_tokens_param = "max_tokens") {
  const Status st = CheckRequest(r, model.limits, max_tokens_param);
  if (!st.ok()) return FromStatus(st);
  return std::nullopt;
}

// One text prompt: valid UTF-8 (nlohmann checks that on parse), non-empty, encoded with
// BOS first when add_special_tokens (vLLM's default for completions).
MaybeError EncodeTextPrompt(const std::string& text, const ServedModel& model, bool add_special_tokens,
                            std::vector<int32_t>& ids) {
  if (model.tokenizer == nullptr) {
    return BadRequest("this model has no tokenizer.json: send the prompt as token ids", "prompt");
  }
  if (text.empty()) return BadRequest("prompt must not be empty", "prompt");
  ids.clear();
  if (add_special_tokens && model.tokenizer->bos_id()) ids.push_back(*model.tokenizer->bos_id());
  const std::vector<int32_t> encoded = model.tokenizer->Encode(text);
  ids.insert(ids.end(), encoded.begin(), encoded.end());
  return std::nullopt;
}

bool IsIdList(const nlohmann::ordered_json& v) {
  return v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), [](const auto& e) { return e.is_number(); });
}

// `prompt`: a string, a list of strings, a list of ids, or a list of id lists.
MaybeError ReadPrompts(const nlohmann::ordered_json& body, const ServedModel& model, bool add_special_tokens,
                       std::vector<std::vector<int32_t>>& prompts, std::vector<std::string>& texts) {
  if (!HasField(body, "prompt")) return BadRequest("prompt is required", "prompt");
  const nlohmann::ordered_json& p = body["prompt"];
  const auto add_ids = [&](const nlohmann::ordered_json& ids) -> MaybeError {
    if (!ids.is_array() || ids.empty()) return BadRequest("prompt must not be empty", "prompt");
    std::vector<int32_t> out;
    LATTE_RETURN_IF_API_ERROR(IdsFromJson(ids, "prompt", "prompt", model.limits.vocab_size, out));
    texts.push_back(model.tokenizer ? model.tokenizer->Decode(out) : std::string());
    prompts.push_back(std::move(out));
    return std::nullopt;
  };
  const auto add_text = [&](const std::string& text) -> MaybeError {
    std::vector<int32_t> ids;
    LATTE_RETURN_IF_API_ERROR(EncodeTextPrompt(text, model, add_special_tokens, ids));
    texts.push_back(text);
    prompts.push_back(std::move(ids));
    return std::nullopt;
  };
  if (p.is_string()) return add_text(p.get<std::string>());
  if (!p.is_array())
    return BadRequest(
        "prompt must be a string, a list of strings, a list of token ids or a list of token-id lists, got " +
            std::string(p.type_name()),
        "prompt");
  if (p.empty()) return BadRequest("prompt must not be empty", "prompt");
  if (IsIdList(p)) return add_ids(p);
  for (const nlohmann::ordered_json& e : p) {
    if (e.is_string()) {
      LATTE_RETURN_IF_API_ERROR(add_text(e.get<std::string>()));
    } else if (e.is_array()) {
      LATTE_RETURN_IF_API_ERROR(add_ids(e));
    } else {
      return BadRequest(
          "prompt must be a string, a list of strings, a list of token ids or a list of token-id lists; an element "
          "is " +
              std::string(e.type_name()),
          "prompt");
    }
  }
  return std::nullopt;
}

// tools: function tools, each {type: "function", function: {name, description?,
// parameters?, strict?}}.
MaybeError CheckTools(const nlohmann::ordered_json& tools) {
  if (!tools.is_array()) return BadRequest("tools must be a list of function tools", "tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const nlohmann::ordered_json& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || t.value("type", nlohmann::ordered_json()) != "function") {
      return BadRequest(where + ".type: only {\"type\": \"function\", \"function\": {...}} tools are supported",
                        where + ".type");
    }
    const auto f = t.find("function");
    if (f == t.end() || !f->is_object()) return BadRequest(where + ".function must be an object", where + ".function");
    const auto name = f->find("name");
    const bool good_name = name != f->end() && name->is_string() && !name->get<std::string>().empty() &&
                           name->get<std::string>().size() <= 64 &&
                           name->get<std::string>().find_first_not_of(
                               "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == std::string::npos;
    if (!good_name) {
      return BadRequest(where + ".function.name must be 1 to 64 letters, digits, '_' or '-'", where + ".function.name");
    }
    if (HasField(*f, "description") && !(*f)["description"].is_string()) {
      return BadRequest(where + ".function.description must be a string", where + ".function.description");
    }
    if (HasField(*f, "parameters") && !(*f)["parameters"].is_object()) {
      return BadRequest(where + ".function.parameters must be a JSON Schema object", where + ".function.parameters");
    }
  }
  return std::nullopt;
}

// An assistant turn's earlier calls: [{id?, type: "function", function: {name,
// arguments (a JSON string)}}], as the templates write them back.
MaybeError CheckHistoryToolCalls(const nlohmann::ordered_json& calls, const std::string& where) {
  if (!calls.is_array()) return BadRequest(where + " must be a list of tool calls", where);
  for (size_t k = 0; k < calls.size(); ++k) {
    const nlohmann::ordered_json& c = calls[k];
    const std::string at = where + "[" + std::to_string(k) + "]";
    if (!c.is_object() || c.value("type", nlohmann::ordered_json("function")) != "function" ||
        !c.contains("function") || !c["function"].is_object() || !c["function"].contains("name") ||
        !c["function"]["name"].is_string() || !c["function"].contains("arguments") ||
        !c["function"]["arguments"].is_string()) {
      return BadRequest(
          at + " must be {\"type\": \"function\", \"function\": {\"name\": string, \"arguments\": string}}", at);
    }
  }
  return std::nullopt;
}

// A function's parameters as a schema ({"type": "object"} when it declares none).
nlohmann::ordered_json ToolParameters(const nlohmann::ordered_json& tool) {
  const nlohmann::ordered_json& f = tool["function"];
  return HasField(f, "parameters") ? f["parameters"] : nlohmann::ordered_json({{"type", "object"}});
}

// tool_choice "required" or named: the output constrained to the calls' JSON.
MaybeError ForceToolCalls(const nlohmann::ordered_json& body, bool named, ChatRequest& out) {
  const nlohmann::ordered_json& tools = body["tools"];
  if (HasField(body, "response_format") && body["response_format"].is_object() &&
      body["response_format"].value("type", nlohmann::ordered_json("text")) != "text") {
    return BadRequest(
        "response_format cannot be used with tool_choice \"required\" or a named function: both "
        "constrain the output",
        "response_format");
  }
  nlohmann::ordered_json schema;
  if (named) {
    const nlohmann::ordered_json& tc = body["tool_choice"];
    const nlohmann::ordered_json name = tc.contains("function") && tc["function"].is_object()
                                            ? tc["function"].value("name", nlohmann::ordered_json())
                                            : nlohmann::ordered_json();
    if (!name.is_string()) {
      return BadRequest("tool_choice.function.name must name one of the tools", "tool_choice.function.name");
    }
    const auto tool = std::find_if(tools.begin(), tools.end(),
                                   [&](const nlohmann::ordered_json& t) { return t["function"]["name"] == name; });
    if (tool == tools.end()) {
      return BadRequest("tool_choice.function.name: no tool is named \"" + name.get<std::string>() + "\"",
                        "tool_choice.function.name");
    }
    schema = ToolParameters(*tool);
    out.forced_tools = ChatRequest::ForcedTools::kNamed;
    out.forced_name = name.get<std::string>();
  } else {
    nlohmann::ordered_json calls = nlohmann::ordered_json::array();
    for (const nlohmann::ordered_json& t : tools) {
      calls.push_back(
          {{"type", "object"},
           {"properties", {{"name", {{"const", t["function"]["name"]}}}, {"parameters", ToolParameters(t)}}},
           {"required", nlohmann::ordered_json::array({"name", "parameters"})},
           {"additionalProperties", false}});
    }
    schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", calls}}}};
    // parallel_tool_calls false: at most one call, as OpenAI's API promises.
    if (HasField(body, "parallel_tool_calls") && body["parallel_tool_calls"] == false) schema["maxItems"] = 1;
    out.forced_tools = ChatRequest::ForcedTools::kRequired;
  }
  std::string spec = nlohmann::ordered_json({{"type", "json_schema"}, {"schema", schema}})
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  Result<Grammar> grammar = OutputConstraintGrammar(spec);
  if (!grammar.ok()) return BadRequest("tools: a function's parameters: " + grammar.status().message(), "tools");
  out.request.output_constraint = std::move(spec);
  return std::nullopt;
}

// tools and tool_choice: "none" (the tools are still rendered, as vLLM does), "auto"
// (the output is parsed for calls: needs the server's tool-call parser), "required"
// or a named function (decoding constrained to the calls, ForceToolCalls).
MaybeError ReadToolChoice(const nlohmann::ordered_json& body, const ServedModel& model, ChatRequest& out) {
  const bool has_tools = HasField(body, "tools") && !(body["tools"].is_array() && body["tools"].empty());
  if (has_tools) LATTE_RETURN_IF_API_ERROR(CheckTools(body["tools"]));
  if (HasField(body, "parallel_tool_calls") && !body["parallel_tool_calls"].is_boolean()) {
    return BadRequest("parallel_tool_calls must be a boolean", "parallel_tool_calls");
  }
  std::string choice = has_tools ? "auto" : "none";
  if (HasField(body, "tool_choice")) {
    const nlohmann::ordered_json& tc = body["tool_choice"];
    if (tc.is_string()) {
      choice = tc.get<std::string>();
      if (choice != "none" && choice != "auto" && choice != "required") {
        return BadRequest(
            "tool_choice must be none, auto, required or {\"type\": \"function\", ...}, got \"" + choice + "\"",
            "tool_choice");
      }
    } else if (tc.is_object() && tc.value("type", nlohmann::ordered_json()) == "function") {
      choice = "named";
    } else {
      return BadRequest("tool_choice must be none, auto, required or {\"type\": \"function\", ...}", "tool_choice");
    }
  }
  if (choice == "none") return std::nullopt;
  if (!has_tools) return BadRequest("tool_choice \"" + choice + "\" needs tools", "tool_choice");
  if (choice == "required" || choice == "named") return ForceToolCalls(body, choice == "named", out);
  if (!model.tool_parser) {
    return BadRequest(
        "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set "
        "(tool_choice is \"auto\" by default when tools are given)",
        "tool_choice");
  }
  out.tool_calls = model.tool_parser;
  return std::nullopt;
}

// One message's content: a string, null (assistant turns), or a list of text parts,
// joined with "\n" between them (as vLLM renders them).
MaybeError MessageContent(const nlohmann::ordered_json& m, size_t i, std::string& content) {
  const std::string where = "messages[" + std::to_string(i) + "].content";
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) {
    content.clear();
    return std::nullopt;
  }
  if (it->is_string()) {
    content = it->get<std::string>();
    return std::nullopt;
  }
  if (!it->is_array()) return BadRequest(where + " must be a string or a list of text parts", where);
  content.clear();
  for (size_t k = 0; k < it->size(); ++k) {
    const nlohmann::ordered_json& part = (*it)[k];
    if (!part.is_object() || part.value("type", nlohmann::ordered_json()) != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      return BadRequest(where + ": only {\"type\": \"text\", \"text\": ...} parts are supported", where);
    }
    if (k > 0) content += '\n';
    content += part["text"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

MaybeError CheckModelName(const nlohmann::ordered_json& body, const ServedModel& model) {
  std::string name;
  LATTE_RETURN_IF_API_ERROR(ReadString(body, "model", name));
  if (!HasField(body, "model") || name == model.name || name == model.path) return std::nullopt;
  ApiError e = NotFound("the model \"" + name + "\" does not exist; this server serves \"" + model.name + "\"",
                        "model_not_found");
  e.param = "model";
  return e;
}

MaybeError ParseCompletionRequest(const nlohmann::ordered_json& body, const ServedModel& model,
                                  CompletionRequest& out) {
  LATTE_RETURN_IF_API_ERROR(CheckModelName(body, model));
  out.model = model.name;
  if (HasField(body, "suffix")) return BadRequest("suffix is not supported", "suffix");
  GenerationRequest base;
  base.max_tokens = 16;  // OpenAI's and vLLM's default for completions
  LATTE_RETURN_IF_API_ERROR(ReadInt(body, "max_tokens", base.max_tokens));
  LATTE_RETURN_IF_API_ERROR(ReadSamplingFields(body, model, base));
  std::optional<int64_t> logprobs;
  LATTE_RETURN_IF_API_ERROR(ReadInt(body, "logprobs", logprobs));
  if (logprobs && (*logprobs < 0 || *logprobs > kMaxTopLogprobs)) {
    return BadRequest(
        "logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) + "], got " + std::to_string(*logprobs),
        "logprobs");
  }
  if (logprobs) {
    out.logprobs = static_cast<int>(*logprobs);
    base.sampling.logprobs = out.logprobs.value();
  }
  LATTE_RETURN_IF_API_ERROR(ReadBool(body, "echo", out.echo));
  if (base.max_tokens == 0 && !out.echo) {
    // Nothing to compute and nothing to return; vLLM refuses it too.
    return BadRequest("max_tokens must be at least 1 unless echo is true", "max_tokens");
  }
  base.prompt_logprobs = out.echo && out.logprobs.has_value();
  LATTE_RETURN_IF_API_ERROR(ReadStreamFields(body, out.stream, out.include_usage));
  bool add_special_tokens = true;
  LATTE_RETURN_IF_API_ERROR(ReadBool(body, "add_special_tokens", add_special_tokens));
  LATTE_RETURN_IF_API_ERROR(ReadBool(body, "return_tokens_as_token_ids", out.tokens_as_ids));

  std::vector<std::vector<int32_t>> prompts;
  LATTE_RETURN_IF_API_ERROR(ReadPrompts(body, model, add_special_tokens, prompts, out.prompt_texts));
  // n and the sampling fields are every prompt's: checked with the first prompt before
  // the bound below, so that a bad n is named as n.
  GenerationRequest first = base;
  first.prompt = prompts.front();
  LATTE_RETURN_IF_API_ERROR(CheckEngineRequest(first, model));
  // Each choice of each prompt is a sequence in the engine: bound what one body can ask
  // for (a list of a million one-token prompts fits in the body limit).
  if (static_cast<int64_t>(prompts.size()) * base.n > kMaxSequencesPerRequest) {
    return BadRequest("prompt: " + std::to_string(prompts.size()) + " prompts × n = " + std::to_string(base.n) +
                          " is more than " + std::to_string(kMaxSequencesPerRequest) + " sequences in one request",
                      "prompt");
  }
  out.n = base.n;
  for (auto& ids : prompts) {
    GenerationRequest r = base;
    r.prompt = std::move(ids);
    LATTE_RETURN_IF_API_ERROR(CheckEngineRequest(r, model));
    out.prompts.push_back(std::move(r));
  }
  return std::nullopt;
}

MaybeError ChatTemplateContext(const nlohmann::ordered_json& body, nlohmann::ordered_json& context) {
  if (!HasField(body, "messages")) return BadRequest("messages is required", "messages");
  const nlohmann::ordered_json& messages = body["messages"];
  if (!messages.is_array()) return BadRequest("messages must be a list of messages", "messages");
  if (messages.empty()) return BadRequest("messages must not be empty", "messages");
  nlohmann::ordered_json rendered = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::ordered_json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return BadRequest(where + " must be an object", where);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return BadRequest(where + ".role must be a string", where + ".role");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "developer" && r != "tool") {
      return BadRequest(where + ".role must be system, user, assistant, developer or tool, got \"" + r + "\"",
                        where + ".role");
    }
    std::string content;
    LATTE_RETURN_IF_API_ERROR(MessageContent(m, i, content));
    // The DeepSeek templates know "system"; OpenAI's newer "developer" is the same turn.
    nlohmann::ordered_json message = nlohmann::ordered_json::object();
    message["role"] = r == "developer" ? "system" : r;
    message["content"] = std::move(content);
    if (r == "assistant" && HasField(m, "tool_calls")) {
      LATTE_RETURN_IF_API_ERROR(CheckHistoryToolCalls(m["tool_calls"], where + ".tool_calls"));
      message["tool_calls"] = m["tool_calls"];
      for (nlohmann::ordered_json& call : message["tool_calls"]) call["type"] = "function";
      // The templates write a call's turn without content when there is none.
      if (!HasField(m, "content")) message["content"] = nullptr;
    }
    if (r == "tool") {
      if (HasField(m, "tool_call_id") && !m["tool_call_id"].is_string()) {
        return BadRequest(where + ".tool_call_id must be a string", where + ".tool_call_id");
      }
      if (HasField(m, "tool_call_id")) message["tool_call_id"] = m["tool_call_id"];
    }
    rendered.push_back(std::move(message));
  }
  bool add_generation_prompt = true;
  LATTE_RETURN_IF_API_ERROR(ReadBool(body, "add_generation_prompt", add_generation_prompt));
  context = nlohmann::ordered_json::object();  // moved in: the messages are not copied again
  context["messages"] = std::move(rendered);
  // Templates with a tools section (V3.1's) describe them to the model.
  if (HasField(body, "tools") && body["tools"].is_array() && !body["tools"].empty()) {
    LATTE_RETURN_IF_API_ERROR(CheckTools(body["tools"]));
    context["tools"] = body["tools"];
  }
  context["add_generation_prompt"] = add_generation_prompt;
  return std::nullopt;
}

MaybeError ParseChatRequest(const nlohmann::ordered_json& body, const ServedModel& model, ChatRequest& out) {
  LATTE_RETURN_IF_API_ERROR(CheckModelName(body, model));
  out.model = model.name;
  if (model.tokenizer == nullptr || model.chat_template == nullptr) {
    return BadRequest("this model has no tokenizer.json and chat template: use /v1/completions with token ids",
                      "messages");
  }
  LATTE_RETURN_IF_API_ERROR(ReadToolChoice(body, model, out));
  GenerationRequest& r = out.request;
  std::optional<int64_t> max_tokens;
  LATTE_RETURN_IF_API_ERROR(ReadInt(body, "max_completion_tokens", max_tokens));
  const char* max_param = max_tokens ? "max_completion_tokens" : "max_tokens";
  if (!max_tokens) LATTE_RETURN_IF_API_ERROR(ReadInt(body, "max_tokens", max_tokens));
  if (max_tokens && *max_tokens < 1) {
    return BadRequest(std::string(max_param) + " must be at least 1, got " + std::to_string(*max_tokens), max_param);
  }
  LATTE_RETURN_IF_API_ERROR(ReadSamplingFields(body, model, r));
  LATTE_RETURN_IF_API_ERROR(ReadBool(body, "logprobs", out.logprobs));
  std::optional<int64_t> top;
  LATTE_RETURN_IF_API_ERROR(ReadInt(body, "top_logprobs", top));
  if (top) {
    if (*top < 0 || *top > kMaxTopLogprobs) {
      return BadRequest(
          "top_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) + "], got " + std::to_string(*top),
          "top_logprobs");
    }
    if (!out.logprobs && *top > 0) return BadRequest("top_logprobs needs logprobs: true", "top_logprobs");
    out.top_logprobs = static_cast<int>(*top);
  }
  r.sampling.logprobs = out.top_logprobs;
  // The DeepSeek tool-call markers are special tokens: the parser reads them in the text.
  if (out.tool_calls) r.skip_special_tokens = false;
  LATTE_RETURN_IF_API_ERROR(ReadStreamFields(body, out.stream, out.include_usage));
  LATTE_RETURN_IF_API_ERROR(ReadBool(body, "return_tokens_as_token_ids", out.tokens_as_ids));

  nlohmann::ordered_json context;
  LATTE_RETURN_IF_API_ERROR(ChatTemplateContext(body, context));
  auto text = model.chat_template->Render(context);
  if (!text.ok()) return BadRequest("the chat template refused the messages: " + text.status().message(), "messages");
  out.prompt_text = std::move(text).value();
  r.prompt = model.tokenizer->Encode(out.prompt_text);  // the template wrote BOS
  if (r.prompt.empty()) return BadRequest("messages render to an empty prompt", "messages");
  const int64_t P = static_cast<int64_t>(r.prompt.size());
  // vLLM's default: whatever the context leaves (here also what the KV pool leaves).
  r.max_tokens = max_tokens.value_or(std::min(model.limits.max_model_len, model.limits.pool_tokens) - P);
  if (r.max_tokens < 1) r.max_tokens = 1;  // then the length check names the prompt
  LATTE_RETURN_IF_API_ERROR(CheckEngineRequest(r, model, max_param));
  return std::nullopt;
}

std::string TokenText(const Tokenizer* tokenizer, int32_t id, bool as_id) {
  if (tokenizer == nullptr || as_id) return "token_id:" + std::to_string(id);
  return tokenizer->Decode({id});
}

nlohmann::json UsageJson(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

std::string SseEvent(const nlohmann::json& payload) {
  // Invalid UTF-8 cannot reach here (the detokenizer repairs it), but a dump that
  // throws would end the process: replace instead.
  return "data: " + payload.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

std::string UsageChunkEvent(nlohmann::json chunk_base, const nlohmann::json& usage) {
  chunk_base["choices"] = nlohmann::json::array();
  chunk_base["usage"] = usage;
  return SseEvent(chunk_base);
}

std::string NewRequestId(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return std::string(prefix) + hex;
}

}  // namespace latte::server
