// What `latte bench serve` and `latte eval` ask of an OpenAI-compatible server beyond
// the completion itself: the served model's id, the token ids of a text, and the
// sentence an error reply carries. Only the OpenAI API is assumed (/v1/models);
// /tokenize is vLLM's and llama.cpp's (and latte's) extension, used when present.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "client/http_client.h"

namespace latte {

// The bearer token a client sends: `flag` (--api-key) when given, else $OPENAI_API_KEY
// (as OpenAI's own clients read it), else none.
std::string ApiKeyOrEnvironment(const std::string& flag);

// The first model GET /v1/models lists (vLLM's benchmark does the same when no
// model is named).
Result<std::string> ServedModelId(const BaseUrl& base, const HttpRequestOptions& http);

// POST /tokenize: the ids of `text` without special tokens. The body carries the text
// as "prompt" (vLLM, latte) and as "content" (llama.cpp); both read "tokens".
Result<std::vector<int64_t>> TokenizeText(const BaseUrl& base, const HttpRequestOptions& http, const std::string& model,
                                          const std::string& text);

// "HTTP 400: <error.message>" from an error reply (OpenAI's error object, or the
// start of whatever body the server sent).
std::string HttpErrorText(const HttpResponse& response);
// error.message of an OpenAI error object in `body`, else the start of `body`.
std::string ErrorMessage(const std::string& body);

}  // namespace latte
