// OpenAI's request bodies for /v1/completions and /v1/chat/completions, parsed and
// validated into engine requests (GenerationRequest), and the pieces of response JSON
// both endpoints share. Every field of the wrong type or out of range is a 400 whose
// message and `param` name it: the types and the API's own rules here, the ranges
// and limits by the engine's CheckRequest, so the engine never sees a request it
// would refuse.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/tool_call_parser.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace latte::server {

// What the server serves: its names, the engine's limits (Engine::limits()) that
// requests are validated against (CheckRequest, engine/request.h), its text side.
struct ServedModel {
  std::string name;                             // --served-model-name, else the --model path
  std::string path;                             // --model
  RequestLimits limits;                         // the engine's
  const Tokenizer* tokenizer = nullptr;         // null: token-id prompts only
  const ChatTemplate* chat_template = nullptr;  // null: no chat endpoint
  bool reasoning_parser = false;                // --reasoning-parser deepseek_r1
  // --enable-auto-tool-choice with --tool-call-parser: tool_choice "auto" is parsed.
  std::optional<ToolCallFormat> tool_parser;
  int64_t created = 0;  // unix seconds the server started (/v1/models)
};

// The most sequences (prompts × n) one completions request may ask for.
inline constexpr int64_t kMaxSequencesPerRequest = 1024;

// /v1/completions: one engine request per prompt, each with n choices.
struct CompletionRequest {
  std::string model;
  std::vector<GenerationRequest> prompts;
  std::vector<std::string> prompt_texts;  // what echo writes: the text sent, or the ids decoded
  int n = 1;
  bool echo = false;
  std::optional<int> logprobs;  // alternatives per token; nullopt: no logprobs
  bool stream = false;
  bool include_usage = false;
  bool tokens_as_ids = false;  // vLLM's return_tokens_as_token_ids
};

// /v1/chat/completions: the conversation rendered by the chat template, one engine request.
struct ChatRequest {
  std::string model;
  GenerationRequest request;
  std::string prompt_text;  // the rendered template
  bool logprobs = false;
  int top_logprobs = 0;
  bool stream = false;
  bool include_usage = false;
  bool tokens_as_ids = false;  // vLLM's return_tokens_as_token_ids
  // tools with tool_choice "auto": the output is read for tool calls in this format.
  std::optional<ToolCallFormat> tool_calls;
  // tool_choice "required" or a named function: decoding is constrained to JSON (as
  // vLLM does): "required", a list [{"name": N, "parameters": {...}}, ...] of one or
  // more calls of the tools; named, the arguments of that function.
  enum class ForcedTools { kNone, kRequired, kNamed } forced_tools = ForcedTools::kNone;
  std::string forced_name;
};

// Body parsing (the body must already be a JSON object) and validation.
MaybeError ParseCompletionRequest(const nlohmann::ordered_json& body, const ServedModel& model, CompletionRequest& out);
MaybeError ParseChatRequest(const nlohmann::ordered_json& body, const ServedModel& model, ChatRequest& out);
// The chat template's context for `messages` (validated: roles, content types).
MaybeError ChatTemplateContext(const nlohmann::ordered_json& body, nlohmann::ordered_json& context);
// `model` absent, null, the served name or the model path; else 404 model_not_found.
MaybeError CheckModelName(const nlohmann::ordered_json& body, const ServedModel& model);

// A token as logprobs responses spell it: its text alone (lossy UTF-8, special tokens
// written out), or "token_id:N" without a tokenizer or when `as_id` (vLLM's
// return_tokens_as_token_ids).
std::string TokenText(const Tokenizer* tokenizer, int32_t id, bool as_id = false);

// Usage object: prompt, completion and total tokens.
nlohmann::json UsageJson(int64_t prompt_tokens, int64_t completion_tokens);

// "data: <json>\n\n": one server-sent event.
std::string SseEvent(const nlohmann::json& payload);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

// The last chunk of a stream with stream_options.include_usage: `chunk_base` (id,
// object, created, model) with no choices and the usage, as one event.
std::string UsageChunkEvent(nlohmann::json chunk_base, const nlohmann::json& usage);

// A random request id with the given prefix ("cmpl-", "chatcmpl-"): 32 hex digits.
std::string NewRequestId(const char* prefix);

}  // namespace latte::server
