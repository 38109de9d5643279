// Dynamic batching of embedding requests: requests arriving within a window are grouped by
// sequence-length bucket and run as one executable call, results routed back per request.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rlx/ir/error.h"
#include "rlx/models/sentence_embedder.h"
#include "rlx/models/tokenizer.h"

namespace rlx::serve {

/// Thrown by a Scheduler's submit() when its queue already holds max_queue requests (the
/// server answers 429).
class QueueFullError : public Error {
 public:
  using Error::Error;
};

/// Thrown by a Scheduler's submit() after stop() began (the server answers 503).
class ShuttingDownError : public Error {
 public:
  using Error::Error;
};

/// What every scheduler of the server has in common (the embedding scheduler below; a text
/// generation scheduler for /v1/chat/completions is meant to implement the same): it owns its
/// worker threads, bounds its queue, and drains on stop().
class Scheduler {
 public:
  virtual ~Scheduler() = default;
  /// Requests admitted and not finished (queued or running).
  virtual int64_t queue_depth() const = 0;
  /// Stops admitting (submit throws ShuttingDownError), runs everything already admitted to
  /// completion, then joins the workers. Idempotent; the destructor calls it.
  virtual void stop() = 0;

 protected:
  /// The admission rule of every submit(): throws ShuttingDownError once stopping, and
  /// QueueFullError when `in_flight` requests already fill `max_queue`.
  static void check_admission(bool stopping, int64_t in_flight, int64_t max_queue);
};

/// Options of an EmbeddingScheduler.
struct EmbeddingSchedulerOptions {
  /// Sentences per executable call, at most. The batch dimension is padded up to a power of
  /// two <= max_batch, as SentenceEmbedder::encode pads with batch_size = max_batch. 1: off.
  int64_t max_batch = 32;
  /// How long the oldest queued sentence waits for others of its length bucket before its
  /// batch runs (ms). 0: run whatever is queued at once (batching only what arrived together).
  double batch_window_ms = 2.0;
  /// Requests admitted and not finished, at most; submit() beyond it throws QueueFullError.
  int64_t max_queue = 256;
  /// Sequence lengths are padded up to a multiple of this, capped at the model's max_length
  /// (EmbedderOptions::bucket, which must be the same for results to match `rlx embed`).
  int64_t bucket = 16;
};

/// One executable call, reported to the on_batch observer: sentences, padded shape, tokens.
struct BatchReport {
  int64_t sentences = 0;  ///< real rows
  int64_t rows = 0;       ///< rows after padding the batch to a power of two
  int64_t seq = 0;        ///< padded sequence length
  int64_t tokens = 0;     ///< real tokens (mask 1)
  double seconds = 0;     ///< wall time of the call
};

/// A request handed to EmbeddingScheduler::submit; wait for it, then read its rows.
class EmbeddingTicket {
 public:
  /// Waits until every input has its embedding or the request failed, at most `timeout`
  /// (negative: no limit). True when finished (done or failed), false on timeout.
  bool wait(std::chrono::milliseconds timeout);
  /// Withdraws a request that timed out: inputs not yet run are dropped, the queue slot freed.
  void cancel();
  /// After wait() returned true: the message of the rlx::Error the batch raised, or "".
  const std::string& error() const;
  /// After a successful wait(): f32 embeddings [inputs, dim], row-major, in input order.
  const std::vector<float>& embeddings() const;
  /// Tokens of the request's inputs (what usage.prompt_tokens reports).
  int64_t tokens() const;

  struct Shared;  ///< the state a ticket shares with the scheduler (scheduler.cc)

 private:
  friend class EmbeddingScheduler;
  std::shared_ptr<Shared> shared_;
};

/// The embedding scheduler: a bounded queue of tokenized sentences, grouped by padded length
/// (min(round_up(len, bucket), max_length)), and `workers.size()` worker threads, each running
/// its own SentenceEmbedder (one is not thread-safe) on one batch at a time. A worker takes the
/// bucket whose oldest sentence waited longest, once that bucket holds max_batch sentences or
/// its oldest has waited batch_window_ms, and runs up to max_batch sentences of it in FIFO
/// order through SentenceEmbedder::embed at [min(next_pow2(n), max_batch), seq], the shape
/// SentenceEmbedder::encode would use for those sentences (so a sentence run alone gives
/// exactly what `rlx embed` gives for it alone). The layout follows the continuous-batching
/// servers (vLLM, text-embeddings-inference): tokenize on the request thread, batch on workers.
class EmbeddingScheduler : public Scheduler {
 public:
  /// Starts one worker per embedder (at least one; all of the same model directory and
  /// options). Throws rlx::Error for no embedders, max_batch, max_queue or bucket < 1, or a
  /// negative window.
  EmbeddingScheduler(std::vector<std::unique_ptr<models::SentenceEmbedder>> embedders,
                     const EmbeddingSchedulerOptions& options);
  ~EmbeddingScheduler() override;
  EmbeddingScheduler(const EmbeddingScheduler&) = delete;
  EmbeddingScheduler& operator=(const EmbeddingScheduler&) = delete;

  /// Queues the encodings of one request (ids as the tokenizer gives them, [CLS] ... [SEP],
  /// each 1..max_length() long; mask 1, type 0). Throws QueueFullError when max_queue requests
  /// are in flight, ShuttingDownError after stop(), rlx::Error for an empty request or an
  /// encoding of bad length.
  EmbeddingTicket submit(std::vector<Encoding> inputs);

  /// The model every worker runs (the first embedder): tokenizer, dim, max_length, name.
  const models::SentenceEmbedder& model() const { return *embedders_.front(); }
  const EmbeddingSchedulerOptions& options() const { return options_; }
  int64_t queue_depth() const override;
  /// Sentences queued and not yet taken by a worker.
  int64_t pending_sentences() const;
  void stop() override;
  /// Adds a function a worker calls after each successful executable call (the server's
  /// metrics); it must be thread-safe, as workers call it concurrently.
  void add_batch_observer(std::function<void(const BatchReport&)> observer);

 private:
  struct Item;
  void work(size_t worker);
  friend class EmbeddingTicket;
  void cancel(EmbeddingTicket::Shared& job);
  bool wait(EmbeddingTicket::Shared& job, std::chrono::milliseconds timeout);

  std::vector<std::unique_ptr<models::SentenceEmbedder>> embedders_;
  EmbeddingSchedulerOptions options_;
  std::vector<std::function<void(const BatchReport&)>> observers_;  // guarded by mu_
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::map<int64_t, std::deque<Item>> buckets_;  // padded seq -> FIFO of sentences
  int64_t pending_ = 0, in_flight_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace rlx::serve
