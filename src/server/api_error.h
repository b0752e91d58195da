// The error a client gets back: an HTTP status and OpenAI's error object,
//   {"error": {"message": "...", "type": "...", "param": "field" | null, "code": ...}}
// Every request-level failure in the server is one of these; nothing about HTTP
// reaches the engine, and nothing a client sends ends the process.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "server/http_types.h"

namespace latte::server {

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;      // the offending field, or empty (JSON null)
  std::string code;       // a short machine-readable reason, or empty (JSON null)
  int retry_after_s = 0;  // > 0: sent as Retry-After (503s)

  nlohmann::json ToJson() const;
  // ToJson as text. Messages quote what the client sent (a path, a header), which may
  // not be UTF-8: such bytes become U+FFFD instead of an exception.
  std::string Body() const;
};

// 400 invalid_request_error naming `param`.
ApiError BadRequest(std::string message, std::string param = {});
ApiError NotFound(std::string message, std::string code = {});
ApiError Unauthorized(std::string message);
ApiError MethodNotAllowed(std::string message);
ApiError PayloadTooLarge(std::string message);
ApiError UnsupportedMediaType(std::string message);
// 503 with Retry-After: the queue is full, a request waited too long, or the server stops.
ApiError Unavailable(std::string message, int retry_after_s);
ApiError InternalError(std::string message);

// The reply for a failed Status, chosen by its kind: a request the engine or the
// protocol refuses is a 400 naming status.field() as `param`; kNotFound a 404;
// kUnavailable a 503 with Retry-After; kInternal a 500.
ApiError FromStatus(const Status& status);

// A whole reply carrying an OpenAI error object (and Retry-After when it has one).
HttpReply ErrorReply(const ApiError& error);

}  // namespace latte::server
