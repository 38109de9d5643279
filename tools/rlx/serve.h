// `rlx serve`: the OpenAI-compatible server (rlx/serve/server.h) from the command line: embedding
// models and text-generation models (GGUF decoders), one or several.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace rlx::tools {

struct ServeArgs {
  /// Model directories or GGUF files (a decoder's GGUF serves chat/completions, anything else
  /// embeddings); empty: models::default_model_dir().
  std::vector<std::string> models;
  /// The ids clients send as `model`, in the order of `models`; missing ones: the embedder's
  /// name, or the GGUF file's name without ".gguf".
  std::vector<std::string> model_names;
  std::string device = "cpu";
  std::string precision;   ///< empty: RLX_PRECISION / f32
  int64_t max_length = 0;  ///< 0: the model's
  std::string host = "127.0.0.1";
  int port = 8080;      ///< 0: a free port, printed
  std::string api_key;  ///< empty: RLX_API_KEY if set, else no auth
  int64_t max_batch = 32;
  double batch_window_ms = 2;
  int parallel = 1;  ///< embeddings: worker threads, each with its own embedder; chat: slots
  int64_t ctx = 0;   ///< chat: KV positions over all slots; 0: min(the file's, 4096)
  std::string cache_type = "f32";  ///< chat: LlamaOptions::cache_type
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
