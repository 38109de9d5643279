// The OpenAI wire format of /v1/chat/completions and /v1/completions (completions.h).
#include "completions.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "api_error.h"
#include "rlx/models/bpe_tokenizer.h"

namespace rlx::serve {
namespace {

using json = nlohmann::json;

// Fields of each request that rlx reads or accepts (OpenAI's schemas, plus llama-server's
// top_k, min_p and repeat_penalty); others are a 400, as OpenAI answers them.
const std::set<std::string>& known_fields(bool chat) {
  static const std::set<std::string> common = {
      "model",          "max_tokens",       "temperature",       "top_p",      "top_k", "min_p",
      "repeat_penalty", "presence_penalty", "frequency_penalty", "seed",       "stop",  "n",
      "stream",         "stream_options",   "logprobs",          "logit_bias", "user"};
  static const std::set<std::string> chat_fields = [] {
    std::set<std::string> s = common;
    s.insert({"messages", "max_completion_tokens", "top_logprobs", "response_format", "tools",
              "tool_choice", "parallel_tool_calls", "store", "metadata", "service_tier"});
    return s;
  }();
  static const std::set<std::string> completion_fields = [] {
    std::set<std::string> s = common;
    s.insert({"prompt", "echo", "best_of", "suffix"});
    return s;
  }();
  return chat ? chat_fields : completion_fields;
}

// `x` as %g prints it (2, not 2.0).
std::string shortest(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// A number field within [lo, hi] (absent or null: nullopt).
std::optional<double> number(const json& body, const char* key, double lo, double hi) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  const json& v = body[key];
  if (!v.is_number())
    throw bad_request("'" + std::string(key) + "' is " + type_name(v) + ", expected a number", key);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi))
    throw bad_request("'" + std::string(key) + "' is " + v.dump() + ", expected a number in [" +
                          shortest(lo) + ", " + shortest(hi) + "]",
                      key);
  return x;
}

std::optional<int64_t> integer(const json& body, const char* key, int64_t lo, int64_t hi) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  const json& v = body[key];
  if (!v.is_number_integer())
    throw bad_request("'" + std::string(key) + "' is " + type_name(v) + ", expected an integer",
                      key);
  // Integers beyond int64 (nlohmann's unsigned) are out of range too.
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    throw bad_request(
        "'" + std::string(key) + "' is " + v.dump() + ", expected at most " + std::to_string(hi),
        key);
  const auto x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw bad_request("'" + std::string(key) + "' is " + v.dump() + ", expected an integer in [" +
                          std::to_string(lo) + ", " + std::to_string(hi) + "]",
                      key);
  return x;
}

std::optional<bool> boolean(const json& body, const char* key) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  if (!body[key].is_boolean())
    throw bad_request(
        "'" + std::string(key) + "' is " + type_name(body[key]) + ", expected a boolean", key);
  return body[key].get<bool>();
}

// A field rlx does not implement: present with anything but its "off" value is a 400.
void unsupported(const json& body, const char* key, const std::function<bool(const json&)>& off,
                 const std::string& why) {
  if (body.contains(key) && !body[key].is_null() && !off(body[key]))
    throw bad_request("'" + std::string(key) + "' is not supported by this server: " + why, key,
                      "unsupported_parameter");
}

// The text of a message's content: a string, or an array of {"type": "text", "text": ...}.
std::string content_text(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw bad_request("'" + where + "' is " + type_name(content) +
                          ", expected a string or an array of text parts",
                      "messages");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string())
      throw bad_request("'" + at + "' must be {\"type\": \"text\", \"text\": string}; this " +
                            "server takes text only",
                        "messages");
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<models::ChatMessage> messages(const json& body) {
  if (!body.contains("messages"))
    throw bad_request("'messages' is a required property", "messages");
  const json& m = body["messages"];
  if (!m.is_array())
    throw bad_request("'messages' is " + type_name(m) + ", expected an array", "messages");
  if (m.empty()) throw bad_request("'messages' is an empty array", "messages");
  std::vector<models::ChatMessage> out;
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const json& msg = m[i];
    if (!msg.is_object())
      throw bad_request("'" + where + "' is " + type_name(msg) + ", expected an object",
                        "messages");
    if (!msg.contains("role") || !msg["role"].is_string())
      throw bad_request("'" + where + ".role' is missing or not a string", "messages");
    std::string role = msg["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant")
      throw bad_request("'" + where + ".role' is '" + msg["role"].get<std::string>() +
                            "'; this server takes system, developer, user and assistant",
                        "messages");
    if (!msg.contains("content") || msg["content"].is_null())
      throw bad_request("'" + where + ".content' is missing", "messages");
    for (const auto& [key, value] : msg.items())
      if (key != "role" && key != "content" && key != "name")
        throw bad_request("'" + where + "." + key + "' is not supported by this server",
                          "messages");
    out.push_back({role, content_text(msg["content"], where + ".content")});
  }
  return out;
}

// The prompt of a completions request: a string, [string], or token ids.
std::vector<int32_t> prompt_ids(const json& body, const BpeTokenizer& tok) {
  if (!body.contains("prompt")) throw bad_request("'prompt' is a required property", "prompt");
  json p = body["prompt"];
  if (p.is_array() && p.size() == 1 && p[0].is_string()) p = p[0];
  if (p.is_string()) {
    const std::string text = p.get<std::string>();
    if (text.empty()) throw bad_request("'prompt' is an empty string", "prompt");
    try {
      return tok.encode(text, true, false);
    } catch (const Error& e) {
      throw bad_request(std::string("'prompt': ") + e.what(), "prompt");
    }
  }
  if (p.is_array() && !p.empty() && p[0].is_number()) {
    std::vector<int32_t> ids;
    for (size_t j = 0; j < p.size(); ++j) {
      if (!p[j].is_number_integer() || p[j].get<int64_t>() < 0 ||
          p[j].get<int64_t>() >= tok.vocab_size())
        throw bad_request("'prompt[" + std::to_string(j) + "]' is " + p[j].dump() +
                              ", expected a token id in [0, " + std::to_string(tok.vocab_size()) +
                              ")",
                          "prompt");
      ids.push_back(static_cast<int32_t>(p[j].get<int64_t>()));
    }
    return ids;
  }
  if (p.is_array() && p.size() > 1)
    throw bad_request("'prompt' holds " + std::to_string(p.size()) +
                          " prompts; this server answers one prompt per request",
                      "prompt");
  throw bad_request("'prompt' is " + type_name(p) +
                        ", expected a string, an array of one string or an array of token ids",
                    "prompt");
}

std::vector<std::string> stop_strings(const json& body) {
  if (!body.contains("stop") || body["stop"].is_null()) return {};
  const json& s = body["stop"];
  if (s.is_string()) return {s.get<std::string>()};
  if (!s.is_array())
    throw bad_request("'stop' is " + type_name(s) + ", expected a string or an array of strings",
                      "stop");
  if (s.size() > 4)
    throw bad_request("'stop' holds " + std::to_string(s.size()) +
                          " strings; at most 4 are "
                          "allowed",
                      "stop");
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!s[i].is_string())
      throw bad_request(
          "'stop[" + std::to_string(i) + "]' is " + type_name(s[i]) + ", expected a string",
          "stop");
    out.push_back(s[i].get<std::string>());
  }
  return out;
}

}  // namespace

GenerationCall parse_generation(const json& body, bool chat, const ChatScheduler& scheduler) {
  const std::set<std::string>& known = known_fields(chat);
  for (const auto& [key, value] : body.items())
    if (known.count(key) == 0)
      throw bad_request("Unrecognized request argument supplied: " + key, key);
  GenerationCall call;
  call.chat = chat;
  call.model = model_field(body);

  // What rlx does not do.
  if (auto n = integer(body, "n", 1, std::numeric_limits<int64_t>::max()); n && *n != 1)
    throw bad_request(
        "'n' is " + std::to_string(*n) + "; this server returns one choice per request (n = 1)",
        "n", "unsupported_parameter");
  const auto is_false = [](const json& v) { return v.is_boolean() && !v.get<bool>(); };
  const auto is_empty = [](const json& v) { return v.empty(); };
  if (chat) {
    unsupported(body, "logprobs", is_false, "log probabilities are not returned");
    unsupported(
        body, "top_logprobs", [](const json&) { return false; },
        "log probabilities are not returned");
    unsupported(body, "tools", is_empty, "tool calls are not generated");
    unsupported(
        body, "tool_choice", [](const json& v) { return v == "none"; },
        "tool calls are not generated");
    unsupported(
        body, "response_format",
        [](const json& v) { return v.is_object() && v.value("type", "") == "text"; },
        "only {\"type\": \"text\"}");
    unsupported(body, "store", is_false, "completions are not stored");
  } else {
    unsupported(
        body, "logprobs", [](const json& v) { return v == 0; },
        "log probabilities are not returned");
    unsupported(body, "echo", is_false, "the prompt is not echoed");
    unsupported(
        body, "best_of", [](const json& v) { return v == 1; }, "one completion per request");
    unsupported(
        body, "suffix", [](const json& v) { return v.is_string() && v.empty(); }, "no insertion");
  }
  unsupported(body, "logit_bias", is_empty, "logit biases are not applied");
  for (const char* key : {"user", "service_tier"})
    if (body.contains(key) && !body[key].is_null() && !body[key].is_string())
      throw bad_request(
          "'" + std::string(key) + "' is " + type_name(body[key]) + ", expected a string", key);
  for (const char* key : {"metadata", "stream_options"})
    if (body.contains(key) && !body[key].is_null() && !body[key].is_object())
      throw bad_request(
          "'" + std::string(key) + "' is " + type_name(body[key]) + ", expected an object", key);
  boolean(body, "parallel_tool_calls");

  call.stream = boolean(body, "stream").value_or(false);
  if (body.contains("stream_options") && body["stream_options"].is_object()) {
    if (!call.stream)
      throw bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    call.include_usage = boolean(body["stream_options"], "include_usage").value_or(false);
  }

  // Sampling: llama-server's defaults for what the request leaves out.
  models::SamplingParams p;  // temperature 0.8, top_k 40, top_p 0.95, min_p 0.05
  p.temperature = static_cast<float>(number(body, "temperature", 0, 2).value_or(p.temperature));
  p.top_p = static_cast<float>(number(body, "top_p", 0, 1).value_or(p.top_p));
  p.min_p = static_cast<float>(number(body, "min_p", 0, 1).value_or(p.min_p));
  p.top_k = static_cast<int32_t>(integer(body, "top_k", -1, 1 << 30).value_or(p.top_k));
  p.repetition_penalty =
      static_cast<float>(number(body, "repeat_penalty", 1e-3, 100).value_or(1.0));
  p.presence_penalty = static_cast<float>(number(body, "presence_penalty", -2, 2).value_or(0));
  p.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", -2, 2).value_or(0));
  // OpenAI's seed is any 64-bit integer; the sampler keys on 32 bits (the low ones).
  if (auto seed = integer(body, "seed", std::numeric_limits<int64_t>::min(),
                          std::numeric_limits<int64_t>::max()))
    p.seed = static_cast<uint32_t>(static_cast<uint64_t>(*seed));
  else
    p.seed = std::random_device{}();
  models::GenerateOptions& o = call.request.options;
  o.sampling = p;
  o.stop = stop_strings(body);
  o.reuse_prefix = false;
  o.max_tokens = scheduler.context();  // until EOS or a full context
  const int64_t limit = std::numeric_limits<int32_t>::max();
  if (auto m = integer(body, "max_tokens", 1, limit)) o.max_tokens = *m;
  if (chat)
    if (auto m = integer(body, "max_completion_tokens", 1, limit)) o.max_tokens = *m;

  // The prompt.
  const BpeTokenizer& tok = scheduler.tokenizer();
  if (chat) {
    const std::vector<models::ChatMessage> turns = messages(body);
    std::string text;
    try {
      text = scheduler.chat_template().render(turns);
      call.request.prompt = tok.encode(text, true, true);
    } catch (const Error& e) {
      throw bad_request(e.what(), "messages");
    }
  } else {
    call.request.prompt = prompt_ids(body, tok);
  }
  const auto n = static_cast<int64_t>(call.request.prompt.size());
  if (n > scheduler.context())
    throw bad_request(
        "This model's maximum context length is " + std::to_string(scheduler.context()) +
            " tokens (per slot: --ctx / --parallel). However, your " +
            (chat ? "messages" : "prompt") + " resulted in " + std::to_string(n) +
            " tokens. Please reduce the length of the " + (chat ? "messages." : "prompt."),
        chat ? "messages" : "prompt", "context_length_exceeded");
  return call;
}

std::string finish_reason(const std::string& stop_reason) {
  return stop_reason == "eos" || stop_reason == "stop" ? "stop" : "length";
}

json usage_object(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json completion_object(const GenerationCall& call, const std::string& id, int64_t created,
                       const std::string& text, const std::string& finish, int64_t prompt_tokens,
                       int64_t completion_tokens) {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish}};
  if (call.chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  return {{"id", id},
          {"object", call.chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", call.model},
          {"choices", json::array({choice})},
          {"usage", usage_object(prompt_tokens, completion_tokens)}};
}

json completion_chunk(const GenerationCall& call, const std::string& id, int64_t created,
                      const std::string& text, bool role, const std::string& finish) {
  json choice = {{"index", 0},
                 {"logprobs", nullptr},
                 {"finish_reason", finish.empty() ? json(nullptr) : json(finish)}};
  if (call.chat) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (role || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  return {{"id", id},
          {"object", call.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", call.model},
          {"choices", json::array({choice})}};
}

}  // namespace rlx::serve
