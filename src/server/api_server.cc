#include "server/api_server.h"

#include <algorithm>
#include <cctype>

#include "server/chat_response.h"
#include "server/completion_response.h"
#include "server/generation_reply.h"
#include "server/json_fields.h"
#include "server/responses.h"
#include "text/utf8.h"

namespace latte::server {
namespace {

using Clock = std::chrono::steady_clock;

HttpReply JsonReply(const nlohmann::json& body) {
  return HttpReply{200, "application/json", body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), {}};
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// application/json, with or without parameters (charset=utf-8).
bool IsJsonContentType(const std::string& value) {
  const std::string media = Lower(value.substr(0, value.find(';')));
  const auto first = media.find_first_not_of(" \t"), last = media.find_last_not_of(" \t");
  return first != std::string::npos && media.substr(first, last - first + 1) == "application/json";
}

// The body as a JSON object, or the 4xx naming what is wrong with it.
MaybeError ParseBody(HttpRequest& request, nlohmann::ordered_json& body) {
  if (!IsJsonContentType(request.content_type)) {
    return UnsupportedMediaType("Content-Type must be application/json, got \"" + request.content_type + "\"");
  }
  if (!IsValidUtf8(request.body)) return BadRequest("the request body is not valid UTF-8");
  LATTE_RETURN_IF_API_ERROR(ParseBoundedJson(request.body, kMaxJsonValues, body));
  std::string().swap(request.body);  // parsed: its bytes are not needed while the tree is
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  return std::nullopt;
}

// Paths and the method each takes (the API key guards those under /v1/).
struct Route {
  const char* path;
  const char* method;
};
constexpr Route kRoutes[] = {
    {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
    {"/v1/models", "GET"},       {"/health", "GET"},
    {"/metrics", "GET"},         {"/version", "GET"},
    {"/tokenize", "POST"},       {"/detokenize", "POST"},
    {"/v1/responses", "POST"},
};

}  // namespace

ApiServer::ApiServer(Engine& engine, ServedModel model, std::string mla_mode, ApiOptions options)
    : engine_(engine),
      model_(std::move(model)),
      options_(std::move(options)),
      metrics_(model_.name, std::move(mla_mode)) {}

Handled ApiServer::Handle(HttpRequest& request) {
  // The key guards all of /v1/, found or not (an unknown path is no hint without it).
  if (request.path.starts_with("/v1/") && !options_.api_key.empty() &&
      request.authorization != "Bearer " + options_.api_key) {
    return ErrorReply(Unauthorized(request.authorization.empty() ? "missing API key: send Authorization: Bearer <key>"
                                                                 : "incorrect API key"));
  }
  const Route* route = nullptr;
  for (const Route& r : kRoutes) {
    if (request.path == r.path) route = &r;
  }
  if (route == nullptr) return ErrorReply(NotFound("no such path: " + request.path, "not_found"));
  if (request.method != route->method) {
    HttpReply r = ErrorReply(MethodNotAllowed(request.path + " takes " + route->method + ", not " + request.method));
    r.headers.emplace_back("Allow", route->method);
    return r;
  }
  const std::string path = request.path;
  if (path == "/health") {
    if (shutting_down_) return ErrorReply(Unavailable("the server is shutting down", 1));
    return HttpReply{200, "application/json", "", {}};
  }
  if (path == "/metrics")
    return HttpReply{200, "text/plain; version=0.0.4; charset=utf-8", metrics_.Render(engine_.Stats()), {}};
  if (path == "/version") return JsonReply({{"version", kLatteVersion}});
  if (path == "/v1/models") return Models();
  nlohmann::ordered_json body;
  if (auto e = ParseBody(request, body)) return ErrorReply(*e);
  if (path == "/tokenize") return Tokenize(body);
  if (path == "/detokenize") return Detokenize(body);
  if (path == "/v1/completions") return Completions(body);
  if (path == "/v1/responses") return Responses(body);
  return ChatCompletions(body);
}

Handled ApiServer::Submit(std::vector<GenerationRequest> requests, std::string id, bool stream, int64_t prompt_tokens,
                          std::unique_ptr<ResponseFormatter> formatter, Clock::time_point arrival) {
  if (shutting_down_) return ErrorReply(Unavailable("the server is shutting down", 1));
  // The queue limit counts requests, not prompts: one HTTP request waits as one.
  if (queued_.fetch_add(1) >= options_.max_queue) {
    --queued_;
    return ErrorReply(Unavailable("the server's queue is full (" + std::to_string(options_.max_queue) +
                                      " requests waiting, --max-queue); retry later",
                                  1));
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  const Clock::time_point submit_time = Clock::now();
  for (GenerationRequest& r : requests) {
    auto submitted = engine_.Submit(std::move(r));
    if (!submitted.ok()) {
      for (auto& s : streams) engine_.Abort(s->id());
      --queued_;
      return ErrorReply(FromStatus(submitted.status()));
    }
    streams.push_back(std::move(submitted).value());
  }
  GenerationLimits limits{&engine_, &metrics_, &queued_, options_.queue_timeout};
  return std::make_shared<GenerationReply>(limits, std::move(id), stream, prompt_tokens, std::move(streams),
                                           std::move(formatter), arrival, submit_time);
}

Handled ApiServer::Completions(const nlohmann::ordered_json& body) {
  const Clock::time_point arrival = Clock::now();
  CompletionRequest request;
  if (auto e = ParseCompletionRequest(body, model_, request)) return ErrorReply(*e);
  std::string id = NewRequestId("cmpl-");
  int64_t prompt_tokens = 0;
  for (const GenerationRequest& r : request.prompts) prompt_tokens += static_cast<int64_t>(r.prompt.size());
  auto formatter = std::make_unique<CompletionFormatter>(request, model_.tokenizer, id, UnixNow());
  return Submit(std::move(request.prompts), std::move(id), request.stream, prompt_tokens, std::move(formatter),
                arrival);
}

Handled ApiServer::ChatCompletions(const nlohmann::ordered_json& body) {
  const Clock::time_point arrival = Clock::now();
  ChatRequest request;
  if (auto e = ParseChatRequest(body, model_, request)) return ErrorReply(*e);
  std::string id = NewRequestId("chatcmpl-");
  const int64_t prompt_tokens = static_cast<int64_t>(request.request.prompt.size());
  auto formatter = std::make_unique<ChatFormatter>(request, model_.reasoning_parser, model_.tokenizer, id, UnixNow());
  std::vector<GenerationRequest> requests;
  requests.push_back(std::move(request.request));
  return Submit(std::move(requests), std::move(id), request.stream, prompt_tokens, std::move(formatter), arrival);
}

Handled ApiServer::Responses(const nlohmann::ordered_json& body) {
  const Clock::time_point arrival = Clock::now();
  ResponsesRequest request;
  if (auto e = ParseResponsesRequest(body, model_, request)) return ErrorReply(*e);
  std::string id = NewRequestId("resp_");
  const int64_t prompt_tokens = static_cast<int64_t>(request.chat.request.prompt.size());
  auto formatter = std::make_unique<ResponsesFormatter>(request, model_.reasoning_parser, id, UnixNow());
  std::vector<GenerationRequest> requests;
  requests.push_back(std::move(request.chat.request));
  return Submit(std::move(requests), std::move(id), request.chat.stream, prompt_tokens, std::move(formatter), arrival);
}

HttpReply ApiServer::Models() const {
  const nlohmann::json card = {{"id", model_.name},
                               {"object", "model"},
                               {"created", model_.created},
                               {"owned_by", "latte"},
                               {"root", model_.path},
                               {"parent", nullptr},
                               {"max_model_len", model_.limits.max_model_len}};
  return JsonReply({{"object", "list"}, {"data", nlohmann::json::array({card})}});
}

// vLLM's /tokenize: {"prompt": text} or {"messages": [...]} in, {count, max_model_len,
// tokens} out. add_special_tokens (default true) puts BOS first, as for completions.
HttpReply ApiServer::Tokenize(const nlohmann::ordered_json& body) const {
  if (auto e = CheckModelName(body, model_)) return ErrorReply(*e);
  if (model_.tokenizer == nullptr) return ErrorReply(BadRequest("this model has no tokenizer.json"));
  std::vector<int32_t> ids;
  if (HasField(body, "messages")) {
    if (model_.chat_template == nullptr) return ErrorReply(BadRequest("this model has no chat template", "messages"));
    nlohmann::ordered_json context;
    if (auto e = ChatTemplateContext(body, context)) return ErrorReply(*e);
    auto text = model_.chat_template->Render(context);
    if (!text.ok())
      return ErrorReply(BadRequest("the chat template refused the messages: " + text.status().message(), "messages"));
    ids = model_.tokenizer->Encode(text.value());
  } else {
    std::string prompt;
    if (!HasField(body, "prompt")) return ErrorReply(BadRequest("prompt (or messages) is required", "prompt"));
    if (auto e = ReadString(body, "prompt", prompt)) return ErrorReply(*e);
    bool add_special_tokens = true;
    if (auto e = ReadBool(body, "add_special_tokens", add_special_tokens)) return ErrorReply(*e);
    if (add_special_tokens && model_.tokenizer->bos_id()) ids.push_back(*model_.tokenizer->bos_id());
    const auto encoded = model_.tokenizer->Encode(prompt);
    ids.insert(ids.end(), encoded.begin(), encoded.end());
  }
  // Written out directly: a JSON tree of millions of ids would cost 16 bytes each.
  std::string out = "{\"count\":" + std::to_string(ids.size()) +
                    ",\"max_model_len\":" + std::to_string(model_.limits.max_model_len) + ",\"tokens\":[";
  out.reserve(out.size() + ids.size() * 7 + 32);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  out += "],\"token_strs\":null}";
  return HttpReply{200, "application/json", std::move(out), {}};
}

HttpReply ApiServer::Detokenize(const nlohmann::ordered_json& body) const {
  if (auto e = CheckModelName(body, model_)) return ErrorReply(*e);
  if (model_.tokenizer == nullptr) return ErrorReply(BadRequest("this model has no tokenizer.json"));
  if (!HasField(body, "tokens")) return ErrorReply(BadRequest("tokens is required", "tokens"));
  std::vector<int32_t> ids;
  if (auto e = ReadIdList(body, "tokens", model_.limits.vocab_size, ids)) return ErrorReply(*e);
  return JsonReply({{"prompt", model_.tokenizer->Decode(ids)}});
}

}  // namespace latte::server
