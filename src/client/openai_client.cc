#include "client/openai_client.h"

#include <cstdlib>

#include <nlohmann/json.hpp>

namespace latte {

std::string ErrorMessage(const std::string& body) {
  const nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.contains("error")) {
    const nlohmann::json& error = parsed["error"];
    if (error.is_object() && error.contains("message") && error["message"].is_string()) {
      return error["message"].get<std::string>();
    }
    if (error.is_string()) return error.get<std::string>();
  }
  constexpr size_t kShown = 200;  // enough to recognise a proxy's or a framework's page
  return body.substr(0, kShown);
}

std::string HttpErrorText(const HttpResponse& response) {
  const std::string message = ErrorMessage(response.body);
  return "HTTP " + std::to_string(response.status) + (message.empty() ? "" : ": " + message);
}

std::string ApiKeyOrEnvironment(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* key = std::getenv("OPENAI_API_KEY");
  return key != nullptr ? key : "";
}

Result<std::string> ServedModelId(const BaseUrl& base, const HttpRequestOptions& http) {
  LATTE_ASSIGN_OR_RETURN(const HttpResponse response, HttpGet(base, "/v1/models", http));
  if (response.status != 200) return Status::Unavailable(base.text + "/v1/models: " + HttpErrorText(response));
  const nlohmann::json body = nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains("data") || !body["data"].is_array() || body["data"].empty() ||
      !body["data"][0].is_object() || !body["data"][0].contains("id") || !body["data"][0]["id"].is_string()) {
    return Status::Unavailable(base.text + "/v1/models: no model id in the reply (give --model)");
  }
  return body["data"][0]["id"].get<std::string>();
}

Result<std::vector<int64_t>> TokenizeText(const BaseUrl& base, const HttpRequestOptions& http, const std::string& model,
                                          const std::string& text) {
  const nlohmann::json request = {{"model", model}, {"prompt", text}, {"content", text}, {"add_special_tokens", false}};
  LATTE_ASSIGN_OR_RETURN(const HttpResponse response, HttpPostJson(base, "/tokenize", request.dump(), http));
  if (response.status != 200) return Status::Unavailable(base.text + "/tokenize: " + HttpErrorText(response));
  const nlohmann::json body = nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array()) {
    return Status::Unavailable(base.text + "/tokenize: no \"tokens\" list in the reply");
  }
  std::vector<int64_t> ids;
  for (const nlohmann::json& t : body["tokens"]) {
    if (!t.is_number_integer()) return Status::Unavailable(base.text + "/tokenize: a token that is not an integer id");
    ids.push_back(t.get<int64_t>());
  }
  return ids;
}

}  // namespace latte
