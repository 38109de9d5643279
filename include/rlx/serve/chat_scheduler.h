// Continuous batching of text generation: one decode loop over the slots of a batch-N KV cache;
// a request's prompt is prefilled into a free slot while the others wait one step, then every
// busy slot advances one token per decode step, and a finished sequence's slot takes the next
// request at the following step.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rlx/models/chat_template.h"
#include "rlx/models/llama.h"
#include "rlx/serve/scheduler.h"

namespace rlx::serve {

/// Options of a ChatScheduler.
struct ChatSchedulerOptions {
  /// Slots: sequences decoded together (the batch of the KV cache), at least 1.
  int64_t parallel = 1;
  /// Requests admitted and not finished (in a slot or waiting for one), at most; submit()
  /// beyond it throws QueueFullError.
  int64_t max_queue = 64;
};

/// One step of the decode loop, reported to the observers (the server's metrics).
struct ChatStepReport {
  bool prefill = false;   ///< a prompt's prefill (one slot), else a decode step (busy slots)
  int64_t active = 0;     ///< slots that appended tokens in this step
  int64_t slots = 0;      ///< slots of the cache (ChatSchedulerOptions::parallel)
  int64_t tokens = 0;     ///< tokens appended (the prompt's, or one per busy slot)
  int64_t generated = 0;  ///< new tokens that became part of a result
  double seconds = 0;     ///< wall time of the executable call
  /// Seconds from submit() to the first token of each request whose first token came now.
  std::vector<double> first_token_seconds;
};

/// A request: its prompt (token ids, already rendered and encoded) and how it runs and stops
/// (GenerateOptions: max_tokens, stop strings, stop_at_eos, sampling; on_text and reuse_prefix
/// are not used: text comes through ChatTicket::wait).
struct ChatRequest {
  std::vector<int32_t> prompt;
  models::GenerateOptions options;
};

/// What ChatTicket::wait returns.
struct ChatUpdate {
  std::string text;        ///< text produced since the previous wait (complete UTF-8)
  bool finished = false;   ///< the request is over (done, failed or cancelled)
  bool timed_out = false;  ///< the deadline passed first
};

/// A request handed to ChatScheduler::submit: read its text as it streams, or wait for the end.
class ChatTicket {
 public:
  /// Waits until new text arrives or the request ends, at most until `deadline`.
  ChatUpdate wait(std::chrono::steady_clock::time_point deadline);
  /// Withdraws the request (timeout, client gone): it leaves the queue, or its slot is freed
  /// at the next step. Idempotent.
  void cancel();
  /// After a finished update: the message of the error that ended it, or "".
  std::string error() const;
  /// After a finished update: "eos", "stop", "length" or "context" (Generation::stop_reason).
  std::string stop_reason() const;
  /// The whole text so far.
  std::string text() const;
  /// Tokens of the prompt, and new tokens so far (the EOS that ended it not counted).
  int64_t prompt_tokens() const;
  int64_t completion_tokens() const;

  struct Shared;  ///< the state a ticket shares with the scheduler (chat_scheduler.cc)

 private:
  friend class ChatScheduler;
  std::shared_ptr<Shared> shared_;
};

/// The chat scheduler: a LlamaModel (owned; only the loop thread runs it), a bounded FIFO of
/// requests and one thread running the decode loop over `parallel` slots, each a row of the
/// model's batch-`parallel` KV cache with its own position, sampler settings and seed (a
/// SamplerState row), stop state (models::Generation) and ticket. Each iteration: slots whose
/// request was cancelled are freed; if a slot is free and a request waits, its prompt is
/// prefilled alone (LlamaModel::append on that one row of the cache: the executable of a
/// one-row prefill, whatever the other slots hold) and its first token chosen; then one decode
/// step appends every busy slot's last token and chooses each one's next token. The decode
/// step runs the busy slots padded with idle free ones (count 0) up to a power of two b: all
/// `parallel` rows when b reaches it, else a b-row subset executable (AppendOptions::rows) that
/// gathers its rows of the cache for attention, so a few busy slots do not pay the matrix
/// products of idle rows (SmolLM2, 8 slots, 1 thread: one busy slot 32 ms per step this way,
/// 95 ms with all 8 rows). Steps run greedy executables unless a busy slot samples (then the
/// sampler's, where a greedy slot takes the argmax all the same). A sequence's tokens are the
/// ones LlamaModel::generate gives for it alone with the same settings: its prefill has the
/// shape of a batch-1 prefill, and a decode row is computed as at batch 1 while a step has at
/// most 8 rows (quant_matmul's GEMV tiles, kGemvRows, sum each row on its own; more rows take
/// the GEMM tiles, which round differently: parallel <= 8 keeps the equality). Prefill and
/// decode never share a step: a decode row in a prefill-sized step would take another path,
/// and its tokens would depend on what else was scheduled.
class ChatScheduler : public Scheduler {
 public:
  /// Starts the loop. The model needs a tokenizer (and a chat template, for
  /// /v1/chat/completions: chat_template() throws otherwise). Throws rlx::Error for a model
  /// without tokenizer, parallel or max_queue < 1.
  ChatScheduler(models::LlamaModel model, const ChatSchedulerOptions& options);
  ~ChatScheduler() override;
  ChatScheduler(const ChatScheduler&) = delete;
  ChatScheduler& operator=(const ChatScheduler&) = delete;

  /// Queues a request. Throws QueueFullError when max_queue requests are in flight,
  /// ShuttingDownError after stop(), rlx::Error for an empty prompt, one longer than a slot's
  /// context (context()) or ids outside the vocabulary.
  ChatTicket submit(ChatRequest request);

  /// The tokenizer, config and path of the model (read-only; safe from any thread).
  const BpeTokenizer& tokenizer() const { return *tokenizer_; }
  const models::LlamaConfig& config() const { return model_.config(); }
  /// The file's chat template. Throws rlx::Error when the file has none rlx can render.
  const models::ChatTemplate& chat_template() const;
  /// Positions of each slot's KV cache (LlamaModel::ctx()).
  int64_t context() const { return ctx_; }
  const ChatSchedulerOptions& options() const { return options_; }
  int64_t queue_depth() const override;
  /// Requests waiting for a slot.
  int64_t waiting() const;
  void stop() override;
  /// Adds a function the loop calls after each step, before the requests that step finished
  /// are completed (so a client that reads metrics after its reply sees the step).
  /// Thread-safe callers only.
  void add_step_observer(std::function<void(const ChatStepReport&)> observer);

 private:
  struct Slot;
  void loop();
  void prefill(Slot& slot, std::shared_ptr<ChatTicket::Shared> job);
  void decode();
  void finish(Slot& slot, const std::string& error);
  void report(const ChatStepReport& r);
  friend class ChatTicket;
  void cancel(ChatTicket::Shared& job);

  models::LlamaModel model_;
  const BpeTokenizer* tokenizer_ = nullptr;  // the model's
  std::optional<models::ChatTemplate> template_;
  std::string template_error_;
  int64_t ctx_ = 0;
  ChatSchedulerOptions options_;
  models::SamplerState sampler_;
  std::vector<Slot> slots_;  // touched by the loop thread only
  std::vector<std::function<void(const ChatStepReport&)>> observers_;  // guarded by mu_
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::deque<std::shared_ptr<ChatTicket::Shared>> queue_;  // waiting for a slot
  int64_t in_flight_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace rlx::serve
