// Server: the endpoint table, request validation with OpenAI-style errors, auth, metrics and
// the shutdown sequence, on cpp-httplib.
#include "rlx/serve/server.h"

#include <httplib.h>
#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "api_error.h"
#include "completions.h"
#include "metrics.h"
#include "rlx/ir/error.h"

namespace rlx::serve {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Connections the kernel queues for accept() (nginx's and llama-server's order of magnitude).
constexpr int kListenBacklog = 1024;

void write_error(httplib::Response& res, const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  res.status = e.status;
  res.set_content(json{{"error", err}}.dump(), "application/json");
}

void write_json(httplib::Response& res, const json& j) {
  res.status = 200;
  res.set_content(j.dump(), "application/json");
}

// One endpoint: method, path (a cpp-httplib regex), its label in the metrics, the handler.
struct Route {
  std::string method, pattern, label;
  std::function<void(const httplib::Request&, httplib::Response&)> handler;
  std::regex re{pattern};
};

// The request being served on this thread began at (set by the pre-routing handler, read by
// the logger after the response was written; cpp-httplib serves a request on one thread).
thread_local std::optional<Clock::time_point> request_start;

}  // namespace

std::string base64_encode(const void* data, size_t bytes) {
  std::string out(4 * ((bytes + 2) / 3), '\0');
  // EVP_EncodeBlock takes an int length: encode in chunks of a multiple of 3 bytes.
  constexpr size_t kChunk = 3u << 20;
  size_t written = 0;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t at = 0; at < bytes; at += kChunk) {
    const size_t n = std::min(kChunk, bytes - at);
    written += static_cast<size_t>(EVP_EncodeBlock(
        reinterpret_cast<unsigned char*>(out.data()) + written, p + at, static_cast<int>(n)));
  }
  out.resize(written);
  return out;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

struct Server::Impl {
  ServerOptions options;
  std::vector<ServedModel> models;
  httplib::Server http;
  std::vector<Route> routes;
  Metrics metrics;
  int port = -1;
  socket_t listen_sock = INVALID_SOCKET;  ///< the last socket cpp-httplib created to bind
  std::atomic<bool> stopping{false};
  std::mutex run_mu, stop_mu;
  std::condition_variable stop_cv;

  Impl(ServerOptions o, std::vector<ServedModel> m) : options(std::move(o)), models(std::move(m)) {
    check(!models.empty(), "Server: needs at least one model");
    std::set<std::string> ids;
    for (const ServedModel& sm : models) {
      check(!sm.id.empty(), "Server: a model needs an id");
      check(ids.insert(sm.id).second, "Server: two models with the id '" + sm.id + "'");
      check((sm.embeddings != nullptr) != (sm.chat != nullptr),
            "Server: model '" + sm.id + "' needs exactly one scheduler (embeddings or chat)");
    }
    check(options.max_inputs >= 1,
          "Server: max_inputs must be >= 1, got " + std::to_string(options.max_inputs));
    check(options.http_threads >= 1,
          "Server: http_threads must be >= 1, got " + std::to_string(options.http_threads));
    check(options.keep_alive_s >= 1,
          "Server: keep_alive_s must be >= 1, got " + std::to_string(options.keep_alive_s));
    check(options.timeout_ms >= 0,
          "Server: timeout_ms must be >= 0, got " + std::to_string(options.timeout_ms));
    int64_t max_batch = 1, max_slots = 1;
    for (const ServedModel& sm : models) {
      if (sm.embeddings) max_batch = std::max(max_batch, sm.embeddings->options().max_batch);
      if (sm.chat) max_slots = std::max(max_slots, sm.chat->options().parallel);
    }
    metrics.init(max_batch, max_slots);
    for (const ServedModel& sm : models) {
      if (EmbeddingScheduler* s = sm.embeddings.get()) {
        metrics.add_queue(
            sm.id, [s] { return s->queue_depth(); }, [s] { return s->pending_sentences(); });
        s->add_batch_observer([this](const BatchReport& r) { metrics.batch(r); });
      }
      if (ChatScheduler* s = sm.chat.get()) {
        metrics.add_chat_queue(
            sm.id, [s] { return s->queue_depth(); }, [s] { return s->waiting(); });
        s->add_step_observer([this](const ChatStepReport& r) { metrics.chat_step(r); });
      }
    }
    routes = {
        {"POST", "/v1/embeddings", "/v1/embeddings",
         [this](const auto& req, auto& res) { embeddings(req, res); }},
        {"POST", "/v1/chat/completions", "/v1/chat/completions",
         [this](const auto& req, auto& res) { generation(req, res, true); }},
        {"POST", "/v1/completions", "/v1/completions",
         [this](const auto& req, auto& res) { generation(req, res, false); }},
        {"GET", "/v1/models", "/v1/models",
         [this](const auto&, auto& res) { write_json(res, list_models()); }},
        {"GET", "/v1/models/([^/]+)", "/v1/models/{id}",
         [this](const auto& req, auto& res) {
           write_json(res, model_object(find(req.matches[1])));
         }},
        {"GET", "/health", "/health", [this](const auto&, auto& res) { health(res); }},
        {"GET", "/metrics", "/metrics",
         [this](const auto&, auto& res) {
           res.set_content(metrics.text(), "text/plain; version=0.0.4; charset=utf-8");
         }},
    };
    install_routes();
  }

  // ---- the endpoint table -> cpp-httplib

  void install_routes() {
    using Register =
        httplib::Server& (httplib::Server::*)(const std::string&, httplib::Server::Handler);
    const std::vector<std::pair<std::string, Register>> methods = {
        {"GET", &httplib::Server::Get},
        {"POST", &httplib::Server::Post},
        {"PUT", &httplib::Server::Put},
        {"PATCH", &httplib::Server::Patch},
        {"DELETE", &httplib::Server::Delete}};
    std::map<std::string, std::vector<const Route*>> by_pattern;
    for (const Route& r : routes) by_pattern[r.pattern].push_back(&r);
    for (const auto& [pattern, rs] : by_pattern) {
      std::string allow;
      for (const Route* r : rs) allow += (allow.empty() ? "" : ", ") + r->method;
      for (const auto& [method, add] : methods) {
        auto it =
            std::find_if(rs.begin(), rs.end(), [&](const Route* r) { return r->method == method; });
        if (it != rs.end()) {
          const Route* r = *it;
          (http.*add)(pattern, [r](const httplib::Request& req, httplib::Response& res) {
            guarded(req, res, r->handler);
          });
        } else {
          (http.*add)(pattern, [allow](const httplib::Request& req, httplib::Response& res) {
            res.set_header("Allow", allow);
            write_error(res, ApiError{405,
                                      "Method " + req.method + " is not allowed on " + req.path +
                                          " (allowed: " + allow + ")",
                                      "invalid_request_error", "", "method_not_allowed"});
          });
        }
      }
    }
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      request_start = Clock::now();
      return authorize(req, res) ? httplib::Server::HandlerResponse::Unhandled
                                 : httplib::Server::HandlerResponse::Handled;
    });
    // Responses >= 400 that no handler filled (cpp-httplib's own 404, 413, 400, 414).
    http.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          ApiError e{res.status, "HTTP status " + std::to_string(res.status),
                     "invalid_request_error", "", ""};
          if (res.status == 404) {
            e.message = "Invalid URL (" + req.method + " " + req.path + ")";
            e.code = "unknown_url";
          } else if (res.status == 413) {
            e.message = "The request body exceeds the server's limit of " +
                        std::to_string(options.max_body_bytes) + " bytes";
            e.code = "request_too_large";
          } else if (res.status == 400) {
            e.message = "Malformed HTTP request";
          } else if (res.status == 414) {
            e.message = "The request URI is too long";
          } else if (res.status >= 500) {
            e.type = "server_error";
          }
          write_error(res, e);
          return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "an unknown exception";
          try {
            if (ep) std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          write_error(res, ApiError{500, "internal error: " + what, "server_error", "", ""});
        });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      std::string label = "other";
      for (const Route& r : routes)
        if (std::regex_match(req.path, r.re)) label = r.label;
      double seconds = -1;
      if (request_start) {
        seconds = std::chrono::duration<double>(Clock::now() - *request_start).count();
        request_start.reset();
      }
      metrics.request(label, res.status, seconds);
    });
    // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, under which a second server
    // on the same port would bind and silently share its connections. The socket is kept for
    // bind(), which raises its listen backlog.
    http.set_socket_options([this](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      listen_sock = sock;
    });
    http.set_payload_max_length(options.max_body_bytes);
    http.set_keep_alive_timeout(options.keep_alive_s);
    http.set_keep_alive_max_count(1000);  // cpp-httplib's 5 would reconnect clients constantly
    const int threads = options.http_threads;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  }

  // Runs a handler; an ApiError becomes its error response, anything else a 500.
  static void guarded(const httplib::Request& req, httplib::Response& res,
                      const std::function<void(const httplib::Request&, httplib::Response&)>& f) {
    try {
      f(req, res);
    } catch (const ApiError& e) {
      write_error(res, e);
    } catch (const std::exception& e) {
      write_error(
          res, ApiError{500, std::string("internal error: ") + e.what(), "server_error", "", ""});
    }
  }

  // Bearer auth for /v1/ and /metrics when an API key is configured; false: answered 401.
  bool authorize(const httplib::Request& req, httplib::Response& res) const {
    if (options.api_key.empty()) return true;
    if (req.path.rfind("/v1/", 0) != 0 && req.path != "/metrics") return true;
    const std::string header = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    res.set_header("WWW-Authenticate", "Bearer");
    if (header.empty()) {
      write_error(res, ApiError{401,
                                "You didn't provide an API key. You need to provide your API "
                                "key in an Authorization header using Bearer auth (i.e. "
                                "Authorization: Bearer YOUR_KEY)",
                                "invalid_request_error", "", "missing_api_key"});
      return false;
    }
    if (header.rfind(prefix, 0) != 0 ||
        !constant_time_equal(header.substr(prefix.size()), options.api_key)) {
      write_error(res, ApiError{401, "Incorrect API key provided", "invalid_request_error", "",
                                "invalid_api_key"});
      return false;
    }
    return true;
  }

  // ---- endpoints

  const ServedModel& find(const std::string& id) const {
    for (const ServedModel& m : models)
      if (m.id == id) return m;
    std::string known;
    for (const ServedModel& m : models) known += (known.empty() ? "" : ", ") + m.id;
    throw ApiError{404, "The model '" + id + "' does not exist (this server serves: " + known + ")",
                   "invalid_request_error", "model", "model_not_found"};
  }

  static json model_object(const ServedModel& m) {
    return {{"id", m.id}, {"object", "model"}, {"created", m.created}, {"owned_by", "rlx"}};
  }

  json list_models() const {
    json data = json::array();
    for (const ServedModel& m : models) data.push_back(model_object(m));
    return {{"object", "list"}, {"data", data}};
  }

  void health(httplib::Response& res) const {
    if (stopping) {
      res.status = 503;
      res.set_content(R"({"status":"shutting_down"})", "application/json");
    } else {
      write_json(res, {{"status", "ok"}});
    }
  }

  // One text input -> its encoding: 400 when longer than max_length (unless truncating).
  Encoding encode_text(const models::SentenceEmbedder& m, const std::string& text,
                       const std::string& where) const {
    if (text.empty())
      throw bad_request("'" + where + "' is an empty string; OpenAI's API rejects empty inputs",
                        "input");
    const int64_t max_length = m.max_length();
    try {
      // max_length + 1 ids: an input that fits comes back whole, exactly as encode_full(text,
      // max_length) returns it; one that does not is longer than max_length.
      Encoding e = m.tokenizer().encode_full(text, max_length + 1);
      if (static_cast<int64_t>(e.ids.size()) <= max_length) return e;
      if (options.truncate) return m.tokenizer().encode_full(text, max_length);
      const size_t full = m.tokenizer().encode(text).size();
      throw bad_request("'" + where + "' is " + std::to_string(full) +
                            " tokens long; the model's maximum input is " +
                            std::to_string(max_length) +
                            " tokens ([CLS] and [SEP] included). Shorten it, or start the "
                            "server with --truncate to cut long inputs",
                        "input", "context_length_exceeded");
    } catch (const Error& e) {
      throw bad_request("'" + where + "': " + e.what(), "input");
    }
  }

  // One token-id array -> its encoding (ids as given; mask 1, type 0).
  Encoding encode_ids(const models::SentenceEmbedder& m, const json& ids,
                      const std::string& where) const {
    if (ids.empty()) throw bad_request("'" + where + "' is an empty token array", "input");
    const int64_t vocab = m.tokenizer().vocab_size(), max_length = m.max_length();
    Encoding e;
    for (size_t j = 0; j < ids.size(); ++j) {
      const json& v = ids[j];
      if (!v.is_number_integer())
        throw bad_request("'" + where + "[" + std::to_string(j) + "]' is " + type_name(v) +
                              ", expected an integer token id",
                          "input");
      const auto id = v.get<int64_t>();
      if (id < 0 || id >= vocab)
        throw bad_request("'" + where + "[" + std::to_string(j) + "]': token id " +
                              std::to_string(id) + " is outside the model's vocabulary [0, " +
                              std::to_string(vocab) + ")",
                          "input");
      e.ids.push_back(static_cast<int32_t>(id));
    }
    if (static_cast<int64_t>(e.ids.size()) > max_length) {
      if (!options.truncate)
        throw bad_request("'" + where + "' is " + std::to_string(e.ids.size()) +
                              " tokens long; the model's maximum input is " +
                              std::to_string(max_length) + " tokens",
                          "input", "context_length_exceeded");
      e.ids.resize(static_cast<size_t>(max_length));
    }
    e.attention_mask.assign(e.ids.size(), 1);
    e.token_type_ids.assign(e.ids.size(), 0);
    return e;
  }

  std::vector<Encoding> parse_input(const models::SentenceEmbedder& m, const json& input) const {
    std::vector<Encoding> out;
    if (input.is_string()) {
      out.push_back(encode_text(m, input.get<std::string>(), "input"));
      return out;
    }
    if (!input.is_array())
      throw bad_request("'input' is " + type_name(input) +
                            ", expected a string, an array of strings, an array of token ids "
                            "or an array of token-id arrays",
                        "input");
    if (input.empty()) throw bad_request("'input' is an empty array", "input");
    // An array of integers is one tokenized input.
    if (input.front().is_number()) {
      out.push_back(encode_ids(m, input, "input"));
      return out;
    }
    if (static_cast<int64_t>(input.size()) > options.max_inputs)
      throw bad_request("'input' has " + std::to_string(input.size()) + " items; at most " +
                            std::to_string(options.max_inputs) + " are allowed per request",
                        "input");
    const bool texts = input.front().is_string();
    for (size_t i = 0; i < input.size(); ++i) {
      const std::string where = "input[" + std::to_string(i) + "]";
      const json& v = input[i];
      if (texts && v.is_string()) {
        out.push_back(encode_text(m, v.get<std::string>(), where));
      } else if (!texts && v.is_array()) {
        out.push_back(encode_ids(m, v, where));
      } else {
        throw bad_request("'" + where + "' is " + type_name(v) + ", expected " +
                              (texts ? "a string, as input[0]" : "a token-id array, as input[0]"),
                          "input");
      }
    }
    return out;
  }

  void embeddings(const httplib::Request& req, httplib::Response& res) {
    json body = parse_body(req.body);
    for (const auto& [key, value] : body.items())
      if (key != "input" && key != "model" && key != "encoding_format" && key != "dimensions" &&
          key != "user")
        throw bad_request("Unrecognized request argument supplied: " + key, key);
    const std::string model = model_field(body);
    const ServedModel& served = find(model);
    if (!served.embeddings)
      throw bad_request(
          "The model '" + served.id + "' generates text; it does not serve /v1/embeddings", "model",
          "model_not_supported");
    EmbeddingScheduler& scheduler = *served.embeddings;
    const models::SentenceEmbedder& m = scheduler.model();

    std::string format = "float";
    if (body.contains("encoding_format")) {
      const json& f = body["encoding_format"];
      if (!f.is_string() || (f != "float" && f != "base64"))
        throw bad_request("'encoding_format' is " + f.dump() + ", expected \"float\" or \"base64\"",
                          "encoding_format");
      format = f.get<std::string>();
    }
    if (body.contains("dimensions")) {
      const json& d = body["dimensions"];
      if (!d.is_number_integer())
        throw bad_request("'dimensions' is " + type_name(d) + ", expected an integer",
                          "dimensions");
      if (d.get<int64_t>() != m.dim())
        throw bad_request("Model '" + served.id + "' produces " + std::to_string(m.dim()) +
                              "-dimensional embeddings and does not support dimensions=" +
                              d.dump() + " (only " + std::to_string(m.dim()) + ")",
                          "dimensions");
    }
    if (body.contains("user") && !body["user"].is_string())
      throw bad_request("'user' is " + type_name(body["user"]) + ", expected a string", "user");
    if (!body.contains("input")) throw bad_request("'input' is a required property", "input");
    std::vector<Encoding> inputs = parse_input(m, body["input"]);
    const size_t n = inputs.size();

    if (stopping)
      throw ApiError{503, "The server is shutting down", "server_error", "", "shutting_down"};
    EmbeddingTicket ticket;
    try {
      ticket = scheduler.submit(std::move(inputs));
    } catch (const QueueFullError& e) {
      throw ApiError{429, e.what(), "rate_limit_error", "", "queue_full"};
    } catch (const ShuttingDownError& e) {
      throw ApiError{503, e.what(), "server_error", "", "shutting_down"};
    }
    const auto timeout =
        std::chrono::milliseconds(options.timeout_ms > 0 ? options.timeout_ms : -1);
    if (!ticket.wait(timeout)) {
      ticket.cancel();
      throw ApiError{504,
                     "The request was not answered within the server's timeout of " +
                         std::to_string(options.timeout_ms) + " ms",
                     "timeout_error", "", "timeout"};
    }
    if (!ticket.error().empty())
      throw ApiError{500, "embedding failed: " + ticket.error(), "server_error", "", ""};

    const auto dim = static_cast<size_t>(m.dim());
    const float* rows = ticket.embeddings().data();
    json data = json::array();
    for (size_t i = 0; i < n; ++i) {
      json item = {{"object", "embedding"}, {"index", i}};
      const float* row = rows + i * dim;
      if (format == "base64") {
        static_assert(std::endian::native == std::endian::little,
                      "base64 embeddings are little-endian f32: byte-swap on this target");
        item["embedding"] = base64_encode(row, dim * sizeof(float));
      } else {
        item["embedding"] = std::vector<float>(row, row + dim);
      }
      data.push_back(std::move(item));
    }
    metrics.embedded(static_cast<int64_t>(n), ticket.tokens());
    write_json(
        res, {{"object", "list"},
              {"data", std::move(data)},
              {"model", served.id},
              {"usage", {{"prompt_tokens", ticket.tokens()}, {"total_tokens", ticket.tokens()}}}});
  }

  // ---- text generation

  // A fresh id for a completion ("chatcmpl-..." / "cmpl-...": 24 hex digits).
  static std::string completion_id(bool chat) {
    static std::atomic<uint64_t> counter{0};
    static const uint64_t base = [] {
      std::random_device rd;
      return (static_cast<uint64_t>(rd()) << 32) | rd();
    }();
    char hex[32];
    std::snprintf(hex, sizeof hex, "%08llx%016llx", static_cast<unsigned long long>(base >> 32),
                  static_cast<unsigned long long>(base * 0x9E3779B97F4A7C15ull + ++counter));
    return std::string(chat ? "chatcmpl-" : "cmpl-") + hex;
  }

  static ApiError timeout_error(int64_t ms) {
    return ApiError{
        504,
        "The request was not answered within the server's timeout of " + std::to_string(ms) + " ms",
        "timeout_error", "", "timeout"};
  }

  // POST /v1/chat/completions (chat) and /v1/completions: validate, queue on the model's
  // ChatScheduler, then answer once done, or stream server-sent events as the text comes.
  void generation(const httplib::Request& req, httplib::Response& res, bool chat) {
    json body = parse_body(req.body);
    const ServedModel& served = find(model_field(body));
    if (!served.chat)
      throw bad_request("The model '" + served.id +
                            "' serves embeddings; it does not generate text (" +
                            (chat ? "/v1/chat/completions" : "/v1/completions") + ")",
                        "model", "model_not_supported");
    ChatScheduler& scheduler = *served.chat;
    auto call = std::make_shared<GenerationCall>(parse_generation(body, chat, scheduler));
    call->model = served.id;
    if (stopping)
      throw ApiError{503, "The server is shutting down", "server_error", "", "shutting_down"};
    ChatTicket ticket;
    try {
      ticket = scheduler.submit(call->request);
    } catch (const QueueFullError& e) {
      throw ApiError{429, e.what(), "rate_limit_error", "", "queue_full"};
    } catch (const ShuttingDownError& e) {
      throw ApiError{503, e.what(), "server_error", "", "shutting_down"};
    } catch (const Error& e) {
      throw bad_request(e.what(), chat ? "messages" : "prompt");
    }
    const auto start = Clock::now();
    const int64_t timeout_ms = options.timeout_ms;
    // No limit: a year (time_point::max() would overflow inside the timed waits).
    const auto deadline = start + (timeout_ms > 0 ? std::chrono::milliseconds(timeout_ms)
                                                  : std::chrono::hours(24 * 365));
    const std::string id = completion_id(chat);
    const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
    if (!call->stream) {
      for (;;) {
        ChatUpdate u = ticket.wait(deadline);
        if (u.finished) break;
        if (u.timed_out && Clock::now() >= deadline) {
          ticket.cancel();
          throw timeout_error(timeout_ms);
        }
      }
      if (!ticket.error().empty())
        throw ApiError{500, "generation failed: " + ticket.error(), "server_error", "", ""};
      metrics.completed(ticket.prompt_tokens(), ticket.completion_tokens());
      write_json(res, completion_object(*call, id, created, ticket.text(),
                                        finish_reason(ticket.stop_reason()), ticket.prompt_tokens(),
                                        ticket.completion_tokens()));
      return;
    }
    // The whole stream is written by one call of the provider: cpp-httplib checks for a
    // server stop only between calls, so a stream that began is finished on SIGTERM (drain).
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, call, ticket, deadline, timeout_ms,
                                                           id, created](
                                                              size_t,
                                                              httplib::DataSink& sink) mutable {
      auto event = [&](const json& j) {
        const std::string data = "data: " + j.dump() + "\n\n";
        return sink.write(data.data(), data.size());
      };
      auto end = [&] {
        static constexpr char kDone[] = "data: [DONE]\n\n";
        sink.write(kDone, sizeof kDone - 1);
        sink.done();
        return true;
      };
      // The assistant role first (as OpenAI streams it), then the text as it comes.
      if (call->chat && !event(completion_chunk(*call, id, created, "", true, ""))) {
        ticket.cancel();  // the client is gone: free its slot
        return false;
      }
      for (;;) {
        ChatUpdate u = ticket.wait(deadline);
        if (!u.text.empty() && !event(completion_chunk(*call, id, created, u.text, false, ""))) {
          ticket.cancel();
          return false;
        }
        if (u.finished) break;
        if (u.timed_out && Clock::now() >= deadline) {
          ticket.cancel();
          const ApiError e = timeout_error(timeout_ms);
          event(
              {{"error",
                {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", e.code}}}});
          return end();
        }
      }
      if (!ticket.error().empty()) {
        event({{"error",
                {{"message", "generation failed: " + ticket.error()},
                 {"type", "server_error"},
                 {"param", nullptr},
                 {"code", nullptr}}}});
        return end();
      }
      event(completion_chunk(*call, id, created, "", false, finish_reason(ticket.stop_reason())));
      if (call->include_usage) {
        json usage = completion_chunk(*call, id, created, "", false, "");
        usage["choices"] = json::array();
        usage["usage"] = usage_object(ticket.prompt_tokens(), ticket.completion_tokens());
        event(usage);
      }
      metrics.completed(ticket.prompt_tokens(), ticket.completion_tokens());
      return end();
    });
  }
};

namespace {
void stop_scheduler(ServedModel& m) {
  if (m.embeddings) m.embeddings->stop();
  if (m.chat) m.chat->stop();
}
}  // namespace

Server::Server(ServerOptions options, std::vector<ServedModel> models)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(models))) {}

Server::~Server() {
  for (ServedModel& m : impl_->models) stop_scheduler(m);
}

int Server::bind() {
  std::lock_guard<std::mutex> lock(impl_->run_mu);
  if (impl_->port >= 0) return impl_->port;
  const ServerOptions& o = impl_->options;
  if (o.port == 0) {
    impl_->port = impl_->http.bind_to_any_port(o.host);
  } else if (impl_->http.bind_to_port(o.host, o.port)) {
    impl_->port = o.port;
  }
  if (impl_->port < 0)
    throw Error("rlx serve: cannot listen on " + o.host + ":" + std::to_string(o.port) +
                " (address in use, or not an address of this machine)");
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of more clients than that overflows
  // the accept queue, and the kernel drops their handshakes (a 1 s SYN retry at best, a reset
  // connection at worst). listen() again on the bound socket only resizes its queue (Linux,
  // POSIX); the kernel caps it at net.core.somaxconn.
  if (::listen(impl_->listen_sock, kListenBacklog) != 0)
    throw Error("rlx serve: cannot listen on " + o.host + ":" + std::to_string(impl_->port) +
                " with a backlog of " + std::to_string(kListenBacklog) + ": " +
                std::strerror(errno));
  return impl_->port;
}

void Server::run() {
  bind();
  // stop() only raises a flag (it may come before listening starts, or from a signal thread):
  // this watcher turns it into cpp-httplib's stop(), called once, while it is listening.
  bool listening = true;
  std::thread watcher([&] {
    std::unique_lock<std::mutex> lock(impl_->stop_mu);
    impl_->stop_cv.wait(lock, [&] { return impl_->stopping.load() || !listening; });
    while (listening && !impl_->http.is_running())
      impl_->stop_cv.wait_for(lock, std::chrono::milliseconds(5));
    if (listening) impl_->http.stop();
  });
  impl_->http.listen_after_bind();
  {
    std::lock_guard<std::mutex> lock(impl_->stop_mu);
    listening = false;
  }
  impl_->stop_cv.notify_all();
  watcher.join();
  // listen_after_bind returned after every connection thread ended, so the requests in flight
  // have been answered; stop the schedulers (nothing is left in them but withdrawn requests).
  impl_->stopping = true;
  for (ServedModel& m : impl_->models) stop_scheduler(m);
}

void Server::stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->stop_mu);
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
}

bool Server::is_running() const { return impl_->http.is_running(); }

std::string Server::metrics() const { return impl_->metrics.text(); }

}  // namespace rlx::serve
