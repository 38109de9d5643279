// `rlx serve`: the OpenAI-compatible embeddings server (rlx/serve/server.h) from the command line.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace rlx::tools {

struct ServeArgs {
  std::string model;       ///< empty: models::default_model_dir()
  std::string model_name;  ///< the id clients send as `model`; empty: the embedder's name
  std::string device = "cpu";
  std::string precision;   ///< empty: RLX_PRECISION / f32
  int64_t max_length = 0;  ///< 0: the model's
  std::string host = "127.0.0.1";
  int port = 8080;      ///< 0: a free port, printed
  std::string api_key;  ///< empty: RLX_API_KEY if set, else no auth
  int64_t max_batch = 32;
  double batch_window_ms = 2;
  int parallel = 1;  ///< worker threads, each with its own embedder
  int64_t max_queue = 256;
  int64_t timeout_ms = 60000;
  int threads = 0;  ///< intra-op threads per worker; 0: RLX_NUM_THREADS / physical cores
  int64_t max_inputs = 2048;
  int64_t max_body_bytes = 8 << 20;
  int http_threads = 64;
  bool truncate = false;
};

/// Adds the `serve` subcommand with its options to `app`, filling `args`.
CLI::App* add_serve_command(CLI::App& app, ServeArgs& args);

/// Loads the model, serves until SIGINT or SIGTERM, drains the requests in flight and returns
/// 0. Prints "rlx serve: listening on http://HOST:PORT" (the port picked when --port 0) on
/// stdout once it accepts connections. Throws rlx::Error when the model does not load or the
/// address cannot be bound.
int run_serve(const ServeArgs& args);

}  // namespace rlx::tools
