// EmbeddingScheduler: the bounded queue, length buckets and worker threads of dynamic batching.
#include "rlx/serve/scheduler.h"

#include <algorithm>
#include <cstring>

namespace rlx::serve {

void Scheduler::check_admission(bool stopping, int64_t in_flight, int64_t max_queue) {
  if (stopping) throw ShuttingDownError("the server is shutting down");
  if (in_flight >= max_queue)
    throw QueueFullError("the server's queue is full (" + std::to_string(in_flight) +
                         " requests in flight, --max-queue " + std::to_string(max_queue) +
                         "); retry later");
}

// One request. Guarded by the scheduler's mutex.
struct EmbeddingTicket::Shared {
  EmbeddingScheduler* scheduler = nullptr;
  std::vector<Encoding> inputs;
  std::vector<float> out;
  std::string error;
  int64_t remaining = 0;  // inputs not yet embedded
  int64_t tokens = 0;
  bool finished = false;   // done, failed or cancelled: its queue slot is free
  bool cancelled = false;  // withdrawn: its queued inputs are skipped
  std::condition_variable done_cv;
};

struct EmbeddingScheduler::Item {
  std::shared_ptr<EmbeddingTicket::Shared> job;
  size_t index = 0;
  std::chrono::steady_clock::time_point queued;
};

bool EmbeddingTicket::wait(std::chrono::milliseconds timeout) {
  return shared_->scheduler->wait(*shared_, timeout);
}
void EmbeddingTicket::cancel() { shared_->scheduler->cancel(*shared_); }
const std::string& EmbeddingTicket::error() const { return shared_->error; }
const std::vector<float>& EmbeddingTicket::embeddings() const { return shared_->out; }
int64_t EmbeddingTicket::tokens() const { return shared_->tokens; }

EmbeddingScheduler::EmbeddingScheduler(
    std::vector<std::unique_ptr<models::SentenceEmbedder>> embedders,
    const EmbeddingSchedulerOptions& options)
    : embedders_(std::move(embedders)), options_(options) {
  check(!embedders_.empty(), "EmbeddingScheduler: needs at least one SentenceEmbedder");
  for (const auto& e : embedders_) check(e != nullptr, "EmbeddingScheduler: a null embedder");
  check(options_.max_batch >= 1,
        "EmbeddingScheduler: max_batch must be >= 1, got " + std::to_string(options_.max_batch));
  check(options_.max_queue >= 1,
        "EmbeddingScheduler: max_queue must be >= 1, got " + std::to_string(options_.max_queue));
  check(options_.bucket >= 1,
        "EmbeddingScheduler: bucket must be >= 1, got " + std::to_string(options_.bucket));
  check(options_.batch_window_ms >= 0, "EmbeddingScheduler: batch_window_ms must be >= 0, got " +
                                           std::to_string(options_.batch_window_ms));
  for (size_t w = 0; w < embedders_.size(); ++w) workers_.emplace_back([this, w] { work(w); });
}

EmbeddingScheduler::~EmbeddingScheduler() { stop(); }

EmbeddingTicket EmbeddingScheduler::submit(std::vector<Encoding> inputs) {
  check(!inputs.empty(), "EmbeddingScheduler::submit: a request needs at least one input");
  const int64_t max_length = model().max_length();
  auto job = std::make_shared<EmbeddingTicket::Shared>();
  job->scheduler = this;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto n = static_cast<int64_t>(inputs[i].ids.size());
    check(n >= 1 && n <= max_length && inputs[i].attention_mask.size() == inputs[i].ids.size() &&
              inputs[i].token_type_ids.size() == inputs[i].ids.size(),
          "EmbeddingScheduler::submit: input " + std::to_string(i) + " has " + std::to_string(n) +
              " ids (and " + std::to_string(inputs[i].attention_mask.size()) + " mask values); " +
              "need 1.." + std::to_string(max_length) + " of each");
    job->tokens += n;
  }
  job->remaining = static_cast<int64_t>(inputs.size());
  job->out.assign(inputs.size() * static_cast<size_t>(model().dim()), 0.0f);
  job->inputs = std::move(inputs);
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    check_admission(stopping_, in_flight_, options_.max_queue);
    ++in_flight_;
    for (size_t i = 0; i < job->inputs.size(); ++i) {
      const auto len = static_cast<int64_t>(job->inputs[i].ids.size());
      const int64_t seq = models::bucketed_length(len, options_.bucket, max_length);
      buckets_[seq].push_back(Item{job, i, now});
      ++pending_;
    }
  }
  work_cv_.notify_all();
  EmbeddingTicket t;
  t.shared_ = std::move(job);
  return t;
}

bool EmbeddingScheduler::wait(EmbeddingTicket::Shared& job, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout.count() < 0) {
    job.done_cv.wait(lock, [&] { return job.finished; });
    return true;
  }
  return job.done_cv.wait_for(lock, timeout, [&] { return job.finished; });
}

void EmbeddingScheduler::cancel(EmbeddingTicket::Shared& job) {
  std::lock_guard<std::mutex> lock(mu_);
  job.cancelled = true;
  if (!job.finished) {
    job.finished = true;
    --in_flight_;
  }
}

int64_t EmbeddingScheduler::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

int64_t EmbeddingScheduler::pending_sentences() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

void EmbeddingScheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_)
    if (t.joinable()) t.join();
}

void EmbeddingScheduler::add_batch_observer(std::function<void(const BatchReport&)> observer) {
  std::lock_guard<std::mutex> lock(mu_);
  observers_.push_back(std::move(observer));
}

void EmbeddingScheduler::work(size_t worker) {
  models::SentenceEmbedder& embedder = *embedders_[worker];
  const auto window = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double, std::milli>(options_.batch_window_ms));
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Drop the queued inputs of finished (withdrawn or failed) requests, then find the bucket whose
    // front waited longest.
    auto oldest = buckets_.end();
    for (auto it = buckets_.begin(); it != buckets_.end();) {
      auto& q = it->second;
      while (!q.empty() && q.front().job->finished) {
        q.pop_front();
        --pending_;
      }
      if (q.empty()) {
        it = buckets_.erase(it);
        continue;
      }
      if (oldest == buckets_.end() || q.front().queued < oldest->second.front().queued) oldest = it;
      ++it;
    }
    if (oldest == buckets_.end()) {
      if (stopping_) return;
      work_cv_.wait(lock);
      continue;
    }
    const auto due = oldest->second.front().queued + window;
    if (!stopping_ && static_cast<int64_t>(oldest->second.size()) < options_.max_batch &&
        std::chrono::steady_clock::now() < due) {
      work_cv_.wait_until(lock, due);
      continue;
    }
    // Take up to max_batch live sentences of that bucket, FIFO.
    const int64_t seq = oldest->first;
    std::vector<Item> batch;
    auto& q = oldest->second;
    while (!q.empty() && static_cast<int64_t>(batch.size()) < options_.max_batch) {
      if (!q.front().job->finished) batch.push_back(std::move(q.front()));
      q.pop_front();
      --pending_;
    }
    if (q.empty()) buckets_.erase(oldest);
    if (batch.empty()) continue;
    lock.unlock();

    const auto count = static_cast<int64_t>(batch.size());
    BatchEncoding tokens;
    tokens.batch = models::padded_batch_size(count, options_.max_batch);
    tokens.seq = seq;
    const auto cells = static_cast<size_t>(tokens.batch * seq);
    tokens.ids.assign(cells, embedder.tokenizer().pad_id());
    tokens.attention_mask.assign(cells, 0);
    tokens.token_type_ids.assign(cells, 0);
    BatchReport report;
    report.sentences = count;
    report.rows = tokens.batch;
    report.seq = seq;
    for (int64_t r = 0; r < count; ++r) {
      const Item& item = batch[static_cast<size_t>(r)];
      const Encoding& e = item.job->inputs[item.index];
      const auto at = static_cast<size_t>(r * seq);
      std::copy(e.ids.begin(), e.ids.end(), tokens.ids.begin() + at);
      std::copy(e.attention_mask.begin(), e.attention_mask.end(),
                tokens.attention_mask.begin() + at);
      std::copy(e.token_type_ids.begin(), e.token_type_ids.end(),
                tokens.token_type_ids.begin() + at);
      report.tokens += static_cast<int64_t>(e.ids.size());
    }
    std::string failure;
    Tensor emb;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      emb = embedder.embed(tokens);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    lock.lock();
    if (failure.empty()) {
      auto observers = observers_;
      lock.unlock();
      for (const auto& f : observers) f(report);
      lock.lock();
    }
    const auto dim = static_cast<size_t>(embedder.dim());
    for (int64_t r = 0; r < count; ++r) {
      EmbeddingTicket::Shared& job = *batch[static_cast<size_t>(r)].job;
      if (job.finished) continue;  // cancelled meanwhile, or failed by an earlier row
      if (!failure.empty()) {
        job.error = failure;
        job.remaining = 0;
      } else {
        std::memcpy(job.out.data() + batch[static_cast<size_t>(r)].index * dim,
                    emb.data_as<float>() + r * static_cast<int64_t>(dim), dim * sizeof(float));
        --job.remaining;
      }
      if (job.remaining == 0) {
        job.finished = true;
        --in_flight_;
        job.done_cv.notify_all();
      }
    }
  }
}

}  // namespace rlx::serve
