// Internal to rlx_serve: OpenAI-style request errors and the JSON helpers every endpoint's
// validation shares.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace rlx::serve {

/// A failed request: its HTTP status and OpenAI's error object
/// {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  ///< "" -> null
  std::string code;   ///< "" -> null
};

/// A 400 invalid_request_error.
inline ApiError bad_request(std::string message, std::string param = "", std::string code = "") {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param),
                  std::move(code)};
}

/// The name of a JSON value's type as OpenAI's messages say it.
inline std::string type_name(const nlohmann::json& j) {
  if (j.is_number_integer()) return "integer";
  if (j.is_number_float()) return "number";
  return j.type_name();
}

/// The JSON object of a request body: 400 invalid_json (with nlohmann's position) when it does
/// not parse, 400 when it is not an object.
inline nlohmann::json parse_body(const std::string& text) {
  nlohmann::json body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    std::string why;
    try {
      nlohmann::json ignored = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      why = e.what();
    }
    throw bad_request("We could not parse the JSON body of your request: " + why, "",
                      "invalid_json");
  }
  if (!body.is_object())
    throw bad_request("The request body is " + type_name(body) + ", expected a JSON object");
  return body;
}

/// body["model"] as a string: 400 when missing or not a string.
inline std::string model_field(const nlohmann::json& body) {
  if (!body.contains("model")) throw bad_request("You must provide a model parameter", "model");
  if (!body["model"].is_string())
    throw bad_request("'model' is " + type_name(body["model"]) + ", expected a string", "model");
  return body["model"].get<std::string>();
}

}  // namespace rlx::serve
