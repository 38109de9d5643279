// ChatScheduler: the request queue, the slots and the decode loop of continuous batching.
#include "rlx/serve/chat_scheduler.h"

#include <algorithm>
#include <utility>

#include "rlx/io/gguf.h"
#include "rlx/models/bpe_tokenizer.h"

namespace rlx::serve {

using Clock = std::chrono::steady_clock;

// One request. Guarded by the scheduler's mutex.
struct ChatTicket::Shared {
  ChatScheduler* scheduler = nullptr;
  ChatRequest request;
  Clock::time_point submitted;
  std::string pending;  // text not yet returned by wait()
  std::string text;
  std::string error, stop_reason;
  int64_t completion_tokens = 0;
  bool finished = false;   // done, failed or cancelled: its queue place is free
  bool cancelled = false;  // withdrawn: its slot is freed at the next step
  std::condition_variable cv;
};

// A row of the cache: the request it serves (null: free) and its sequence's state.
struct ChatScheduler::Slot {
  std::shared_ptr<ChatTicket::Shared> job;
  std::optional<models::Generation> gen;
  int32_t last = -1;     // the token to append at the next decode step
  bool sampled = false;  // needs the sampler's executable (not is_greedy)
};

ChatUpdate ChatTicket::wait(Clock::time_point deadline) {
  ChatScheduler& s = *shared_->scheduler;
  std::unique_lock<std::mutex> lock(s.mu_);
  ChatUpdate u;
  u.timed_out = !shared_->cv.wait_until(
      lock, deadline, [&] { return shared_->finished || !shared_->pending.empty(); });
  u.text = std::move(shared_->pending);
  shared_->pending.clear();
  u.finished = shared_->finished;
  return u;
}
void ChatTicket::cancel() { shared_->scheduler->cancel(*shared_); }
std::string ChatTicket::error() const {
  std::lock_guard<std::mutex> lock(shared_->scheduler->mu_);
  return shared_->error;
}
std::string ChatTicket::stop_reason() const {
  std::lock_guard<std::mutex> lock(shared_->scheduler->mu_);
  return shared_->stop_reason;
}
std::string ChatTicket::text() const {
  std::lock_guard<std::mutex> lock(shared_->scheduler->mu_);
  return shared_->text;
}
int64_t ChatTicket::prompt_tokens() const {
  return static_cast<int64_t>(shared_->request.prompt.size());
}
int64_t ChatTicket::completion_tokens() const {
  std::lock_guard<std::mutex> lock(shared_->scheduler->mu_);
  return shared_->completion_tokens;
}

ChatScheduler::ChatScheduler(models::LlamaModel model, const ChatSchedulerOptions& options)
    : model_(std::move(model)),
      options_(options),
      sampler_(std::max<int64_t>(options.parallel, 1), model_.options().sampler_history) {
  check(model_.has_tokenizer(), "ChatScheduler: " + model_.path() +
                                    " has no tokenizer (metadata key 'tokenizer.ggml.model')");
  check(options_.parallel >= 1,
        "ChatScheduler: parallel must be >= 1, got " + std::to_string(options_.parallel));
  check(options_.max_queue >= 1,
        "ChatScheduler: max_queue must be >= 1, got " + std::to_string(options_.max_queue));
  tokenizer_ = &model_.tokenizer();
  ctx_ = model_.ctx();
  try {
    template_ = models::ChatTemplate::from_gguf(GgufFile::open(model_.path()));
  } catch (const Error& e) {
    template_error_ = e.what();
  }
  slots_.resize(static_cast<size_t>(options_.parallel));
  thread_ = std::thread([this] { loop(); });
}

ChatScheduler::~ChatScheduler() { stop(); }

const models::ChatTemplate& ChatScheduler::chat_template() const {
  check(template_.has_value(), template_error_);
  return *template_;
}

ChatTicket ChatScheduler::submit(ChatRequest request) {
  const auto n = static_cast<int64_t>(request.prompt.size());
  check(n >= 1, "ChatScheduler::submit: the prompt is empty");
  check(n <= ctx_, "the prompt is " + std::to_string(n) +
                       " tokens long; a sequence holds at most " + std::to_string(ctx_) +
                       " tokens (prompt and completion)");
  const int64_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < request.prompt.size(); ++i)
    check(request.prompt[i] >= 0 && request.prompt[i] < vocab,
          "ChatScheduler::submit: prompt token " + std::to_string(i) + " (id " +
              std::to_string(request.prompt[i]) + ") is outside the vocabulary");
  check(request.options.max_tokens >= 0, "ChatScheduler::submit: max_tokens must be >= 0");
  auto job = std::make_shared<ChatTicket::Shared>();
  job->scheduler = this;
  job->request = std::move(request);
  job->submitted = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    check_admission(stopping_, in_flight_, options_.max_queue);
    ++in_flight_;
    queue_.push_back(job);
  }
  work_cv_.notify_all();
  ChatTicket t;
  t.shared_ = std::move(job);
  return t;
}

void ChatScheduler::cancel(ChatTicket::Shared& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    job.cancelled = true;
    if (!job.finished) {
      job.finished = true;
      --in_flight_;
    }
    job.cv.notify_all();
  }
  work_cv_.notify_all();
}

int64_t ChatScheduler::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

int64_t ChatScheduler::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(queue_.size());
}

void ChatScheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ChatScheduler::add_step_observer(std::function<void(const ChatStepReport&)> observer) {
  std::lock_guard<std::mutex> lock(mu_);
  observers_.push_back(std::move(observer));
}

void ChatScheduler::report(const ChatStepReport& r) {
  std::vector<std::function<void(const ChatStepReport&)>> observers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    observers = observers_;
  }
  for (const auto& f : observers) f(r);
}

// Ends the slot's request (done, or failed with `error`) and frees the slot.
void ChatScheduler::finish(Slot& slot, const std::string& error) {
  std::string rest;
  if (slot.gen) rest = slot.gen->finish();  // streams what was held back (through on_text)
  {
    std::lock_guard<std::mutex> lock(mu_);
    ChatTicket::Shared& job = *slot.job;
    if (slot.gen) {
      job.stop_reason = slot.gen->stop_reason();
      job.completion_tokens = static_cast<int64_t>(slot.gen->ids().size());
    }
    job.error = error;
    if (!job.finished) {
      job.finished = true;
      --in_flight_;
    }
    job.cv.notify_all();
  }
  const auto row = static_cast<int64_t>(&slot - slots_.data());
  model_.reset(options_.parallel, row);
  slot = Slot{};
}

void ChatScheduler::prefill(Slot& slot, std::shared_ptr<ChatTicket::Shared> job) {
  const auto row = static_cast<int64_t>(&slot - slots_.data());
  slot.job = std::move(job);
  ChatTicket::Shared* shared = slot.job.get();
  models::GenerateOptions o = shared->request.options;
  // Text goes to the ticket as it completes.
  o.on_text = [this, shared](std::string_view piece) {
    std::lock_guard<std::mutex> lock(mu_);
    shared->pending.append(piece);
    shared->text.append(piece);
    shared->cv.notify_all();
  };
  models::SamplingParams params;  // greedy unless the request samples
  params.temperature = 0;
  params.repetition_penalty = 1;
  params.presence_penalty = params.frequency_penalty = 0;
  if (o.sampling) params = *o.sampling;
  slot.sampled = !models::is_greedy(params);
  const std::vector<int32_t>& prompt = shared->request.prompt;
  ChatStepReport r;
  r.prefill = true;
  r.active = 1;
  r.slots = options_.parallel;
  r.tokens = static_cast<int64_t>(prompt.size());
  int32_t next = -1;
  try {
    sampler_.reset(row, params, prompt);
    slot.gen.emplace(tokenizer_, std::move(o));
    if (slot.gen->done()) {  // max_tokens 0: nothing to generate
      finish(slot, "");
      return;
    }
    models::AppendOptions step;
    step.rows = {row};
    step.cache_batch = options_.parallel;
    if (slot.sampled) step.sampler = &sampler_;
    const auto t0 = Clock::now();
    next = model_.append(prompt, 1, r.tokens, step).next[0];
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  } catch (const std::exception& e) {
    finish(slot, e.what());
    return;
  }
  r.first_token_seconds.push_back(
      std::chrono::duration<double>(Clock::now() - shared->submitted).count());
  const size_t before = slot.gen->ids().size();
  const bool done = slot.gen->push(next, r.tokens >= ctx_);
  r.generated = static_cast<int64_t>(slot.gen->ids().size() - before);
  // The step is reported (metrics, observers) before the request is finished: a client that
  // reads /metrics after its reply must see the step that produced it.
  report(r);
  if (done) {
    finish(slot, "");
  } else {
    sampler_.accept(row, next);
    slot.last = next;
    std::lock_guard<std::mutex> lock(mu_);
    shared->completion_tokens = static_cast<int64_t>(slot.gen->ids().size());
  }
}

void ChatScheduler::decode() {
  const int64_t n = options_.parallel;
  // The busy slots, padded with free ones up to a power of two (at most n): a step of b < n
  // rows runs a subset executable (its rows of the cache gathered for attention), so a few
  // busy slots do not pay for the matrix products of idle ones.
  std::vector<int64_t> busy, free;
  for (int64_t s = 0; s < n; ++s) (slots_[static_cast<size_t>(s)].job ? busy : free).push_back(s);
  int64_t b = 1;
  while (b < static_cast<int64_t>(busy.size())) b *= 2;
  b = std::min(b, n);
  std::vector<int64_t> rows = busy;
  rows.insert(rows.end(), free.begin(), free.begin() + (b - static_cast<int64_t>(busy.size())));
  std::sort(rows.begin(), rows.end());
  models::AppendOptions step;
  if (b < n) {
    step.rows = rows;
    step.cache_batch = n;
  }
  std::vector<int32_t> ids(static_cast<size_t>(b), 0);
  step.counts.assign(static_cast<size_t>(b), 0);
  bool sampled = false;
  ChatStepReport r;
  r.slots = n;
  for (int64_t i = 0; i < b; ++i) {
    const Slot& slot = slots_[static_cast<size_t>(rows[static_cast<size_t>(i)])];
    if (!slot.job) continue;
    ids[static_cast<size_t>(i)] = slot.last;
    step.counts[static_cast<size_t>(i)] = 1;
    sampled = sampled || slot.sampled;
    ++r.active;
  }
  r.tokens = r.active;
  if (sampled) step.sampler = &sampler_;
  models::LlamaStep out;
  try {
    const auto t0 = Clock::now();
    out = model_.append(ids, b, 1, step);
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  } catch (const std::exception& e) {
    for (Slot& slot : slots_)
      if (slot.job) finish(slot, e.what());
    return;
  }
  const std::vector<int64_t> held = model_.positions(n);
  std::vector<Slot*> done_slots;  // finished after the step is reported (see prefill)
  for (int64_t i = 0; i < b; ++i) {
    const int64_t s = rows[static_cast<size_t>(i)];
    Slot& slot = slots_[static_cast<size_t>(s)];
    if (!slot.job) continue;
    const int32_t next = out.next[static_cast<size_t>(i)];
    const size_t before = slot.gen->ids().size();
    const bool done = slot.gen->push(next, held[static_cast<size_t>(s)] >= ctx_);
    r.generated += static_cast<int64_t>(slot.gen->ids().size() - before);
    if (done) {
      done_slots.push_back(&slot);
      continue;
    }
    sampler_.accept(s, next);
    slot.last = next;
    std::lock_guard<std::mutex> lock(mu_);
    slot.job->completion_tokens = static_cast<int64_t>(slot.gen->ids().size());
  }
  report(r);
  for (Slot* slot : done_slots) finish(*slot, "");
}

void ChatScheduler::loop() {
  for (;;) {
    std::shared_ptr<ChatTicket::Shared> admit;
    Slot* free_slot = nullptr;
    bool busy = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Free the slots of withdrawn requests (finish() locks, so collect them first).
      std::vector<Slot*> withdrawn;
      for (Slot& slot : slots_)
        if (slot.job && slot.job->cancelled) withdrawn.push_back(&slot);
      if (!withdrawn.empty()) {
        lock.unlock();
        for (Slot* slot : withdrawn) finish(*slot, "cancelled");
        continue;
      }
      while (!queue_.empty() && queue_.front()->cancelled) queue_.pop_front();
      for (Slot& slot : slots_) {
        if (slot.job)
          busy = true;
        else if (free_slot == nullptr)
          free_slot = &slot;
      }
      if (free_slot != nullptr && !queue_.empty()) {
        admit = std::move(queue_.front());
        queue_.pop_front();
      }
      if (!admit && !busy) {
        if (stopping_) return;
        work_cv_.wait(lock);
        continue;
      }
    }
    if (admit) prefill(*free_slot, std::move(admit));
    if (std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.job != nullptr; }))
      decode();
  }
}

}  // namespace rlx::serve
