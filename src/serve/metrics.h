// The server's Prometheus metrics (prometheus-cpp's registry and text serializer): requests by
// endpoint and status, request latency, batch sizes, tokens and queue depth.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace prometheus {
class Registry;
class Counter;
class Histogram;
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace rlx::serve {

struct BatchReport;
struct ChatStepReport;

/// The metric families GET /metrics exposes; every method is thread-safe.
class Metrics {
 public:
  Metrics();
  ~Metrics();
  /// Registers the families; the batch-size histogram gets buckets 1, 2, 4, ... up to
  /// max_batch, the decode-occupancy histogram 1, 2, ... up to max_slots.
  void init(int64_t max_batch, int64_t max_slots = 1);
  /// A scheduler whose queue depth (requests in flight) and pending sentences are read at each
  /// scrape, labelled model=<id>.
  void add_queue(const std::string& model, std::function<int64_t()> depth,
                 std::function<int64_t()> pending);
  /// One answered request: endpoint label, HTTP status, seconds from routing to the response
  /// written (negative: unknown, not observed).
  void request(const std::string& endpoint, int status, double seconds);
  /// One answered embeddings request: inputs and tokens.
  void embedded(int64_t inputs, int64_t tokens);
  /// One executable call of the embedding scheduler.
  void batch(const BatchReport& report);
  /// A chat scheduler's queue: requests in flight and requests waiting for a slot, labelled
  /// model=<id>, read at each scrape.
  void add_chat_queue(const std::string& model, std::function<int64_t()> depth,
                      std::function<int64_t()> waiting);
  /// One step of a chat scheduler's decode loop (slots = its --parallel).
  void chat_step(const ChatStepReport& report);
  /// One answered chat/completions request: its prompt and completion tokens.
  void completed(int64_t prompt_tokens, int64_t completion_tokens);
  /// The text exposition format (version 0.0.4).
  std::string text();

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_ = nullptr;
  prometheus::Family<prometheus::Histogram>* latency_ = nullptr;
  prometheus::Histogram* batch_size_ = nullptr;
  prometheus::Histogram* batch_seconds_ = nullptr;
  prometheus::Counter* batches_ = nullptr;
  prometheus::Counter* padded_rows_ = nullptr;
  prometheus::Counter* inputs_ = nullptr;
  prometheus::Counter* tokens_ = nullptr;
  prometheus::Counter* generated_ = nullptr;
  prometheus::Counter* chat_prompt_tokens_ = nullptr;
  prometheus::Counter* completion_tokens_ = nullptr;
  prometheus::Histogram* occupancy_ = nullptr;
  prometheus::Histogram* ttft_ = nullptr;
  prometheus::Family<prometheus::Counter>* steps_ = nullptr;
  prometheus::Family<prometheus::Histogram>* step_seconds_ = nullptr;
  prometheus::Family<prometheus::Gauge>* waiting_ = nullptr;
  prometheus::Family<prometheus::Gauge>* depth_ = nullptr;
  prometheus::Family<prometheus::Gauge>* pending_ = nullptr;
  struct Queue {
    prometheus::Gauge* depth;
    prometheus::Gauge* pending;
    std::function<int64_t()> read_depth, read_pending;
  };
  std::mutex mu_;  // queues_
  std::vector<Queue> queues_;
};

}  // namespace rlx::serve
