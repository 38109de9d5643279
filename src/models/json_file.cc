// read_json_file and the typed field readers of the model directory's JSON files.
#include "json_file.h"

#include "rlx/io/file.h"
#include "rlx/ir/error.h"

namespace rlx::models {

using json = nlohmann::json;

json parse_json(std::string_view text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(source + ": malformed JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  } catch (const json::exception& e) {  // out_of_range.406: a number too large for a double
    throw Error(source + ": malformed JSON: " + e.what());
  }
}

json read_json_file(const std::string& path) { return parse_json(read_file(path), path); }

std::string json_excerpt(const json& j) {
  std::string s = j.dump();
  return s.size() <= 60 ? s : s.substr(0, 57) + "...";
}

void expect_object(const json& j, const std::string& path, const std::string& what) {
  check(j.is_object(),
        path + ": expected " + what + " to be a JSON object, found " + json_excerpt(j));
}

bool bool_field(const json& j, const std::string& path, const char* field, bool fallback) {
  auto it = j.find(field);
  if (it == j.end()) return fallback;
  check(it->is_boolean(),
        path + ": field '" + field + "' must be true or false, found " + json_excerpt(*it));
  return it->get<bool>();
}

std::string string_field(const json& j, const std::string& path, const char* field,
                         const std::string& fallback) {
  auto it = j.find(field);
  if (it == j.end()) return fallback;
  check(it->is_string(),
        path + ": field '" + field + "' must be a string, found " + json_excerpt(*it));
  return it->get<std::string>();
}

}  // namespace rlx::models
