#include "server/api_error.h"

namespace latte::server {

nlohmann::json ApiError::ToJson() const {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return {{"error", e}};
}

std::string ApiError::Body() const { return ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

ApiError BadRequest(std::string message, std::string param) {
  return {400, "invalid_request_error", std::move(message), std::move(param), {}, 0};
}

ApiError NotFound(std::string message, std::string code) {
  return {404, "invalid_request_error", std::move(message), {}, std::move(code), 0};
}

ApiError Unauthorized(std::string message) {
  return {401, "authentication_error", std::move(message), {}, "invalid_api_key", 0};
}

ApiError MethodNotAllowed(std::string message) {
  return {405, "invalid_request_error", std::move(message), {}, "method_not_allowed", 0};
}

ApiError PayloadTooLarge(std::string message) {
  return {413, "invalid_request_error", std::move(message), {}, "request_too_large", 0};
}

ApiError UnsupportedMediaType(std::string message) {
  return {415, "invalid_request_error", std::move(message), {}, "unsupported_media_type", 0};
}

ApiError Unavailable(std::string message, int retry_after_s) {
  return {503, "service_unavailable", std::move(message), {}, "service_unavailable", retry_after_s};
}

ApiError InternalError(std::string message) { return {500, "server_error", std::move(message), {}, {}, 0}; }

ApiError FromStatus(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kUnimplemented:
    case StatusCode::kDataLoss: return BadRequest(status.message(), status.field());
    case StatusCode::kNotFound: {
      ApiError e = NotFound(status.message());
      e.param = status.field();
      return e;
    }
    case StatusCode::kUnavailable: return Unavailable(status.message(), 1);
    case StatusCode::kOk:
    case StatusCode::kInternal: break;
  }
  return InternalError(status.message());
}

HttpReply ErrorReply(const ApiError& error) {
  HttpReply r{error.status, "application/json", error.Body(), {}};
  if (error.retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(error.retry_after_s));
  return r;
}

}  // namespace latte::server
