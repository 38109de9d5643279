// `rlx serve`: an OpenAI-compatible HTTP server (cpp-httplib) over the model registry and its
// schedulers: POST /v1/embeddings, POST /v1/chat/completions, POST /v1/completions,
// GET /v1/models, GET /health, GET /metrics (Prometheus).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rlx/serve/chat_scheduler.h"
#include "rlx/serve/scheduler.h"

namespace rlx::serve {

/// Options of a Server (HTTP side; batching is EmbeddingSchedulerOptions).
struct ServerOptions {
  /// Address to bind: loopback unless asked otherwise.
  std::string host = "127.0.0.1";
  /// TCP port; 0 picks a free one (bind() returns it).
  int port = 8080;
  /// When non-empty, every /v1/ and /metrics request needs "Authorization: Bearer <api_key>"
  /// (compared in constant time); /health stays open for liveness probes.
  std::string api_key;
  /// A request body larger than this is answered 413 before it is read (bytes).
  size_t max_body_bytes = 8u << 20;
  /// Inputs per embeddings request, at most (OpenAI's limit: 2048).
  int64_t max_inputs = 2048;
  /// A request not answered within this many ms is withdrawn and answered 504 (a stream ends
  /// with an error event); 0: no limit.
  int64_t timeout_ms = 60000;
  /// Longer inputs are cut to the model's max_length (as `rlx embed` and sentence-transformers
  /// do) instead of answered 400 (as OpenAI does).
  bool truncate = false;
  /// Threads serving connections (cpp-httplib's pool). A keep-alive connection holds one while
  /// it is open, so this bounds the clients served at once.
  int http_threads = 64;
  /// Seconds an idle keep-alive connection is kept; stop() waits at most this for idle ones.
  int keep_alive_s = 2;
};

/// A model the server offers: its id (the `model` field of requests and of /v1/models) and the
/// scheduler of the endpoint family it supports (one of them).
struct ServedModel {
  std::string id;
  int64_t created = 0;                             ///< Unix seconds, as /v1/models reports it
  std::shared_ptr<EmbeddingScheduler> embeddings;  ///< POST /v1/embeddings
  std::shared_ptr<ChatScheduler> chat;  ///< POST /v1/chat/completions and /v1/completions
};

/// The HTTP server. Endpoints and their errors follow the OpenAI API reference
/// (https://platform.openai.com/docs/api-reference/embeddings): every failure is a 4xx/5xx with
/// {"error": {"message", "type", "param", "code"}} (docs/serve.md lists them). Thread-safe:
/// run() on one thread, stop() and metrics() from any.
class Server {
 public:
  /// Throws rlx::Error for no models, two with one id, a model with no scheduler or two, or
  /// bad options (max_inputs, http_threads or keep_alive_s < 1, timeout_ms < 0).
  Server(ServerOptions options, std::vector<ServedModel> models);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Binds host:port and returns the port (the one picked when port is 0). Throws rlx::Error
  /// naming host and port when binding fails (in use, bad address).
  int bind();
  /// Serves until stop(): then stops accepting, finishes the requests in flight (their
  /// connections' threads are joined), drains and stops every scheduler, and returns. Calls
  /// bind() first if it was not called.
  void run();
  /// Asks run() to return (from any thread, e.g. a signal-waiting one). Idempotent.
  void stop();
  /// True once run() accepts connections.
  bool is_running() const;
  /// The Prometheus text exposition of GET /metrics.
  std::string metrics() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Bytes of `data` in standard base64 (RFC 4648, with padding), as OpenAI's
/// encoding_format=base64 carries little-endian f32 embeddings (OpenSSL's EVP_EncodeBlock).
std::string base64_encode(const void* data, size_t bytes);

/// Whether a and b are equal, in time that depends only on their lengths (for API keys).
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace rlx::serve
