// Metrics: prometheus-cpp families of the server.
#include "metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "rlx/serve/scheduler.h"

namespace rlx::serve {

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {}
Metrics::~Metrics() = default;

void Metrics::init(int64_t max_batch) {
  using namespace prometheus;
  requests_ = &BuildCounter()
                   .Name("rlx_http_requests_total")
                   .Help("HTTP requests answered, by endpoint and status code")
                   .Register(*registry_);
  latency_ = &BuildHistogram()
                  .Name("rlx_http_request_duration_seconds")
                  .Help("Time from routing a request to its response written, by endpoint")
                  .Register(*registry_);
  Histogram::BucketBoundaries sizes;
  for (int64_t b = 1; b < max_batch; b *= 2) sizes.push_back(static_cast<double>(b));
  sizes.push_back(static_cast<double>(max_batch));
  batch_size_ = &BuildHistogram()
                     .Name("rlx_embedding_batch_size")
                     .Help("Sentences per executable call of the embedding scheduler")
                     .Register(*registry_)
                     .Add({}, sizes);
  batch_seconds_ = &BuildHistogram()
                        .Name("rlx_embedding_batch_duration_seconds")
                        .Help("Wall time of one executable call of the embedding scheduler")
                        .Register(*registry_)
                        .Add({}, Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025,
                                                             0.05, 0.1, 0.25, 0.5, 1, 2.5, 5});
  batches_ = &BuildCounter()
                  .Name("rlx_embedding_batches_total")
                  .Help("Executable calls of the embedding scheduler")
                  .Register(*registry_)
                  .Add({});
  padded_rows_ = &BuildCounter()
                      .Name("rlx_embedding_padded_rows_total")
                      .Help("Rows run including the padding of batches to a power of two")
                      .Register(*registry_)
                      .Add({});
  inputs_ = &BuildCounter()
                 .Name("rlx_embedding_inputs_total")
                 .Help("Inputs embedded in answered requests")
                 .Register(*registry_)
                 .Add({});
  tokens_ = &BuildCounter()
                 .Name("rlx_embedding_prompt_tokens_total")
                 .Help("Tokens of the inputs of answered requests ([CLS] and [SEP] included)")
                 .Register(*registry_)
                 .Add({});
  depth_ = &BuildGauge()
                .Name("rlx_queue_depth")
                .Help("Requests admitted and not yet answered, by model")
                .Register(*registry_);
  pending_ = &BuildGauge()
                  .Name("rlx_queue_pending_sentences")
                  .Help("Sentences queued and not yet taken into a batch, by model")
                  .Register(*registry_);
}

void Metrics::add_queue(const std::string& model, std::function<int64_t()> depth,
                        std::function<int64_t()> pending) {
  std::lock_guard<std::mutex> lock(mu_);
  queues_.push_back(Queue{&depth_->Add({{"model", model}}), &pending_->Add({{"model", model}}),
                          std::move(depth), std::move(pending)});
}

void Metrics::request(const std::string& endpoint, int status, double seconds) {
  requests_->Add({{"endpoint", endpoint}, {"status", std::to_string(status)}}).Increment();
  if (seconds >= 0)
    latency_
        ->Add({{"endpoint", endpoint}},
              prometheus::Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                      0.25, 0.5, 1, 2.5, 5, 10})
        .Observe(seconds);
}

void Metrics::embedded(int64_t inputs, int64_t tokens) {
  inputs_->Increment(static_cast<double>(inputs));
  tokens_->Increment(static_cast<double>(tokens));
}

void Metrics::batch(const BatchReport& r) {
  batch_size_->Observe(static_cast<double>(r.sentences));
  batch_seconds_->Observe(r.seconds);
  batches_->Increment();
  padded_rows_->Increment(static_cast<double>(r.rows));
}

std::string Metrics::text() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Queue& q : queues_) {
      q.depth->Set(static_cast<double>(q.read_depth()));
      q.pending->Set(static_cast<double>(q.read_pending()));
    }
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace rlx::serve
