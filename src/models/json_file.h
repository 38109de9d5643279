// The JSON files of a model directory: read and parsed with errors that name the file, the byte
// of a syntax error and the field of a wrong type (private to rlx_models).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace rlx::models {

/// `text` parsed as JSON; `source` names it in errors (a file's path, or what the text came
/// from). Throws rlx::Error "S: malformed JSON at byte B: <reason>" for a syntax error and
/// "S: malformed JSON: <reason>" for what the parser rejects otherwise (a number too large for
/// a double).
nlohmann::json parse_json(std::string_view text, const std::string& source);

/// The JSON document in the file at `path`. Throws rlx::Error as read_file (rlx/io/file.h) does
/// for a missing file, a directory or a read error, and "P: malformed JSON at byte B: <reason>"
/// for a syntax error.
nlohmann::json read_json_file(const std::string& path);

/// Checks that `j` (the document of `path`, or the part that `what` names) is a JSON object;
/// else throws "P: expected <what> to be a JSON object, found <j>".
void expect_object(const nlohmann::json& j, const std::string& path, const std::string& what);

/// j[field] as a bool, `fallback` when absent. Throws "P: field 'F' must be true or false,
/// found <value>" for any other JSON type.
bool bool_field(const nlohmann::json& j, const std::string& path, const char* field, bool fallback);

/// j[field] as a string, `fallback` when absent. Throws "P: field 'F' must be a string, found
/// <value>" for any other JSON type.
std::string string_field(const nlohmann::json& j, const std::string& path, const char* field,
                         const std::string& fallback);

/// `j` as JSON text for an error message, cut to about 60 characters.
std::string json_excerpt(const nlohmann::json& j);

}  // namespace rlx::models
