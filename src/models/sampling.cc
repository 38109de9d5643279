// Token sampling as a graph (rlx/models/sampling.h: the rules and their sources) and its
// host-side state.
#include "rlx/models/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "rlx/ir/error.h"
#include "rlx/ir/random.h"

namespace rlx::models {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Checks a per-row input: `dtype`[B] (or [B, N] for the history).
void check_row_input(const Graph& g, Value v, const char* name, DType dtype, int64_t batch,
                     int rank = 1) {
  check(v.valid(), std::string("sample_tokens: input ") + name + " is missing");
  const TensorType& t = g.type(v);
  check(t.dtype == dtype && t.shape.rank() == rank && t.shape[0] == batch,
        std::string("sample_tokens: ") + name + " must be " + std::string(dtype_name(dtype)) +
            (rank == 1 ? "[B]" : "[B, N]") + " with B = " + std::to_string(batch) +
            " (the logits' rows), got " + t.to_string());
}

// [B] -> [B, 1], to broadcast a row's setting along its candidates.
Value per_row(Graph& g, Value v) { return g.expand_dims(v, {1}); }

// x [B, A] against y [B, C] elementwise in all pairs: [B, A, C].
Value pairs(Graph& g, Value x, Value y, Value (Graph::*cmp)(Value, Value)) {
  return (g.*cmp)(g.expand_dims(x, {2}), g.expand_dims(y, {1}));
}

// The number of true entries along the last axis, as i32.
Value count_true(Graph& g, Value b, int64_t axis) {
  return g.reduce_sum(g.convert(b, DType::i32), {axis});
}

// The k best (value desc, id asc) of a pool of candidates values/ids [B, P] whose ids are
// distinct: each entry's rank is the number of entries before it in that order, and the entry of
// rank r is gathered by a one-hot mask (O(B * P^2), for the small pools of the sampler).
std::pair<Value, Value> best_of_pool(Graph& g, Value values, Value ids, int64_t k) {
  Value before = g.logical_or(
      pairs(g, values, values, &Graph::lt),
      g.logical_and(pairs(g, values, values, &Graph::eq), pairs(g, ids, ids, &Graph::gt)));
  Value rank = count_true(g, before, 2);  // [B, P]: entries (j) ahead of entry (i)
  const int64_t batch = g.shape(values)[0];
  Value r = g.iota(DType::i32, Shape{batch, k, 1}, 1);
  Value hit = g.eq(g.expand_dims(rank, {1}), r);  // [B, k, P]
  auto pick = [&](Value v) {
    Value z = g.scalar(0, g.dtype(v));
    return g.reduce_sum(g.select(hit, g.expand_dims(v, {1}), z), {2});
  };
  return {pick(values), pick(ids)};
}

}  // namespace

SamplerInputs add_sampler_inputs(Graph& g, int64_t batch, int64_t history) {
  check(batch >= 1 && history >= 1, "add_sampler_inputs: batch and history must be >= 1, got " +
                                        std::to_string(batch) + " and " + std::to_string(history));
  auto f32 = [&](const char* name) { return g.input(name, DType::f32, Shape{batch}); };
  auto i32 = [&](const char* name) { return g.input(name, DType::i32, Shape{batch}); };
  SamplerInputs in;
  in.temperature = f32(kSamplerTemperature);
  in.top_k = i32(kSamplerTopK);
  in.top_p = f32(kSamplerTopP);
  in.min_p = f32(kSamplerMinP);
  in.repetition_penalty = f32(kSamplerRepetitionPenalty);
  in.presence_penalty = f32(kSamplerPresencePenalty);
  in.frequency_penalty = f32(kSamplerFrequencyPenalty);
  in.history = g.input(kSamplerHistory, DType::i32, Shape{batch, history});
  in.seed = i32(kSamplerSeed);
  in.step = i32(kSamplerStep);
  return in;
}

Value sampler_uniform(Graph& g, Value key, Value seed, Value step) {
  return random::uniform(g, random::fold_in(g, random::fold_in(g, key, seed), step), Shape{});
}

Value sample_tokens(Graph& g, Value logits, const SamplerInputs& in,
                    const SamplerOptions& options) {
  check(g.shape(logits).rank() == 2,
        "sample_tokens: logits must be [B, V], got " + g.type(logits).to_string());
  const int64_t batch = g.shape(logits)[0];
  check_row_input(g, in.seed, "seed", DType::i32, batch);
  check_row_input(g, in.step, "step", DType::i32, batch);
  return sample_tokens_with_uniform(g, logits, in,
                                    sampler_uniform(g, g.rng_key(), in.seed, in.step), options);
}

Value sample_tokens_with_uniform(Graph& g, Value logits, const SamplerInputs& in, Value uniform,
                                 const SamplerOptions& options) {
  const TensorType lt = g.type(logits);
  check(lt.shape.rank() == 2 && is_float(lt.dtype) && lt.shape[1] >= 1,
        "sample_tokens: logits must be float [B, V] with V >= 1, got " + lt.to_string());
  check(options.max_candidates >= 1, "sample_tokens: max_candidates must be >= 1, got " +
                                         std::to_string(options.max_candidates));
  const int64_t batch = lt.shape[0], vocab = lt.shape[1];
  check_row_input(g, in.temperature, "temperature", DType::f32, batch);
  check_row_input(g, in.top_k, "top_k", DType::i32, batch);
  check_row_input(g, in.top_p, "top_p", DType::f32, batch);
  check_row_input(g, in.min_p, "min_p", DType::f32, batch);
  check_row_input(g, in.repetition_penalty, "repetition_penalty", DType::f32, batch);
  check_row_input(g, in.presence_penalty, "presence_penalty", DType::f32, batch);
  check_row_input(g, in.frequency_penalty, "frequency_penalty", DType::f32, batch);
  check_row_input(g, in.history, "history", DType::i32, batch, 2);
  check_row_input(g, uniform, "uniform", DType::f32, batch);
  const int64_t k = std::min(options.max_candidates, vocab);
  auto f32 = [&](double v) { return g.scalar(v, DType::f32); };
  auto i32 = [&](double v) { return g.scalar(v, DType::i32); };

  // 0. NaN -> -inf.
  Value l = lt.dtype == DType::f32 ? logits : g.convert(logits, DType::f32);
  l = g.select(g.ne(l, l), f32(-kInf), l);

  // 1-2. Penalties and the K best candidates of the penalized row. Penalties change only the
  // tokens of the history (N slots), so the K best are among the K + N best raw logits (at
  // most N history tokens can rank above a token that is not in the history) and the history's
  // tokens: a pool of M + N candidates (M = min(K + N, V)) ranked in lax.top_k's order (value
  // desc, id asc), instead of O(B * V) elementwise work per step. Ids outside [0, V) in the
  // history are empty slots; pool entries that stand for nothing (raw candidates that are also
  // history tokens, repeated or empty history slots) get -inf and ids from V up, which rank
  // after every real token.
  const int64_t n = g.shape(in.history)[1];
  const int64_t m = std::min(k + n, vocab);
  check(vocab + m + n < (int64_t{1} << 31),
        "sample_tokens: V = " + std::to_string(vocab) + " is too large for i32 token ids");
  auto [raw, raw_ids] = g.top_k(l, m);
  Value h = in.history;
  Value valid = g.logical_and(g.ge(h, i32(0)), g.lt(h, i32(static_cast<double>(vocab))));
  Value same = g.logical_and(pairs(g, h, h, &Graph::eq), g.expand_dims(valid, {1}));  // [B,N,N]
  Value count = g.convert(count_true(g, same, 2), DType::f32);  // occurrences of h[j]
  Value slot = g.iota(DType::i32, Shape{batch, n, n}, 1),
        other = g.iota(DType::i32, Shape{batch, n, n}, 2);
  Value repeat = g.gt(count_true(g, g.logical_and(same, g.lt(other, slot)), 2), i32(0));
  Value first_seen = g.logical_and(valid, g.logical_not(repeat));
  Value lh = g.take_along_axis(l, h, 1);  // h's logits (take_along_axis clamps empty slots)
  Value rp = per_row(g, in.repetition_penalty);
  Value penalized =
      g.sub(g.select(g.le(lh, f32(0)), g.mul(lh, rp), g.div(lh, rp)),
            g.add(g.mul(count, per_row(g, in.frequency_penalty)), per_row(g, in.presence_penalty)));
  auto none_ids = [&](int64_t from, int64_t len) {
    return g.add(g.iota(DType::i32, Shape{batch, len}, 1), i32(static_cast<double>(from)));
  };
  Value hist_vals = g.select(first_seen, penalized, f32(-kInf));
  Value hist_ids = g.select(first_seen, h, none_ids(vocab + m, n));
  Value in_history = g.gt(
      count_true(g, g.logical_and(pairs(g, raw_ids, h, &Graph::eq), g.expand_dims(valid, {1})), 2),
      i32(0));
  Value raw_vals = g.select(in_history, f32(-kInf), raw);
  raw_ids = g.select(in_history, none_ids(vocab, m), raw_ids);
  auto [values, ids] = best_of_pool(g, g.concatenate({raw_vals, hist_vals}, 1),
                                    g.concatenate({raw_ids, hist_ids}, 1), k);

  // 2 (continued). The row's top_k of the K candidates.
  Value pos = g.iota(DType::i32, Shape{batch, k}, 1);
  Value first = g.eq(pos, i32(0));
  Value top_k = per_row(g, in.top_k);
  Value keep = g.logical_or(g.le(top_k, i32(0)), g.lt(pos, top_k));
  Value masked = g.select(keep, values, f32(-kInf));

  // 3. Top-p over the candidates top-k kept: the probability mass before each candidate.
  Value top_p = per_row(g, in.top_p);
  Value before = g.cumsum(g.softmax(masked, -1), -1, /*exclusive=*/true);
  keep = g.logical_and(keep,
                       g.logical_or(g.logical_or(first, g.ge(top_p, f32(1))), g.lt(before, top_p)));

  // 4. Min-p on logits, against the best candidate.
  Value min_p = per_row(g, in.min_p);
  Value best = g.slice(values, {0, 0}, {batch, 1});
  Value floor = g.add(best, g.log(g.max(min_p, f32(std::numeric_limits<float>::min()))));
  keep = g.logical_and(keep,
                       g.logical_or(g.logical_or(first, g.le(min_p, f32(0))), g.ge(values, floor)));

  // 5. Temperature (greedy rows take candidate 0 below), 6. the draw by inverse CDF.
  Value temp = per_row(g, in.temperature);
  Value greedy = g.le(temp, f32(0));
  Value scaled = g.select(keep, g.div(values, g.select(greedy, f32(1), temp)), f32(-kInf));
  Value cdf = g.cumsum(g.softmax(scaled, -1), -1);
  Value total = g.slice(cdf, {0, k - 1}, {batch, k});
  Value target = g.mul(per_row(g, uniform), total);
  Value below = g.reduce_sum(g.convert(g.le(cdf, target), DType::i32), {1}, true);
  Value last_kept = g.sub(g.reduce_sum(g.convert(keep, DType::i32), {1}, true), i32(1));
  Value j = g.select(greedy, i32(0), g.min(below, last_kept));
  return g.reshape(g.take_along_axis(ids, j, 1), {batch});
}

std::function<Value(Graph&, Value)> token_sampler(int64_t history, SamplerOptions options) {
  check(history >= 1, "token_sampler: history must be >= 1, got " + std::to_string(history));
  return [history, options](Graph& g, Value logits) {
    check(g.shape(logits).rank() == 2,
          "token_sampler: logits must be [B, V], got " + g.type(logits).to_string());
    return sample_tokens(g, logits, add_sampler_inputs(g, g.shape(logits)[0], history), options);
  };
}

// ---------------------------------------------------------------- SamplerState

SamplerState::SamplerState(int64_t batch, int64_t history)
    : history_(history),
      params_(static_cast<size_t>(std::max<int64_t>(batch, 0))),
      tokens_(static_cast<size_t>(std::max<int64_t>(batch * history, 0)), -1),
      next_(params_.size(), 0),
      steps_(params_.size(), 0) {
  check(batch >= 1 && history >= 1, "SamplerState: batch and history must be >= 1, got " +
                                        std::to_string(batch) + " and " + std::to_string(history));
}

void SamplerState::check_row(int64_t row, const char* fn) const {
  check(row >= 0 && row < batch(), std::string("SamplerState::") + fn + ": row " +
                                       std::to_string(row) + " is outside [0, " +
                                       std::to_string(batch()) + ")");
}

void SamplerState::reset(int64_t row, const SamplingParams& p, std::span<const int32_t> prompt) {
  check_row(row, "reset");
  auto fail = [&](const char* field, const char* want, float got) {
    throw Error("SamplerState::reset: row " + std::to_string(row) + ": " + field + " must be " +
                want + ", got " + std::to_string(got));
  };
  if (std::isnan(p.temperature)) fail("temperature", "a number", p.temperature);
  if (std::isnan(p.top_p)) fail("top_p", "a number", p.top_p);
  if (std::isnan(p.min_p)) fail("min_p", "a number", p.min_p);
  if (!(p.repetition_penalty > 0) || std::isinf(p.repetition_penalty))
    fail("repetition_penalty", "finite and > 0", p.repetition_penalty);
  if (!std::isfinite(p.presence_penalty)) fail("presence_penalty", "finite", p.presence_penalty);
  if (!std::isfinite(p.frequency_penalty)) fail("frequency_penalty", "finite", p.frequency_penalty);
  const auto r = static_cast<size_t>(row);
  params_[r] = p;
  std::fill_n(tokens_.begin() + static_cast<std::ptrdiff_t>(r * static_cast<size_t>(history_)),
              history_, -1);
  next_[r] = 0;
  steps_[r] = 0;
  const size_t from = prompt.size() > static_cast<size_t>(history_)
                          ? prompt.size() - static_cast<size_t>(history_)
                          : 0;
  for (size_t i = from; i < prompt.size(); ++i) {
    tokens_[r * static_cast<size_t>(history_) + static_cast<size_t>(next_[r])] = prompt[i];
    next_[r] = (next_[r] + 1) % history_;
  }
}

void SamplerState::accept(int64_t row, int32_t token) {
  check_row(row, "accept");
  const auto r = static_cast<size_t>(row);
  tokens_[r * static_cast<size_t>(history_) + static_cast<size_t>(next_[r])] = token;
  next_[r] = (next_[r] + 1) % history_;
  ++steps_[r];
}

const SamplingParams& SamplerState::params(int64_t row) const {
  check_row(row, "params");
  return params_[static_cast<size_t>(row)];
}

int32_t SamplerState::step(int64_t row) const {
  check_row(row, "step");
  return steps_[static_cast<size_t>(row)];
}

TensorMap SamplerState::feeds() const {
  std::vector<int64_t> all(params_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  return feeds(all);
}

TensorMap SamplerState::feeds(std::span<const int64_t> rows) const {
  for (int64_t r : rows) check_row(r, "feeds");
  const auto b = static_cast<int64_t>(rows.size());
  auto param = [&](int64_t i) -> const SamplingParams& { return params_[size_t(rows[size_t(i)])]; };
  auto column = [&](DType t, auto get) {
    Tensor out(t, Shape{b});
    for (int64_t i = 0; i < b; ++i) out.set_f64(i, static_cast<double>(get(param(i))));
    return out;
  };
  TensorMap m;
  m[kSamplerTemperature] =
      column(DType::f32, [](const SamplingParams& p) { return p.temperature; });
  m[kSamplerTopK] = column(DType::i32, [](const SamplingParams& p) { return p.top_k; });
  m[kSamplerTopP] = column(DType::f32, [](const SamplingParams& p) { return p.top_p; });
  m[kSamplerMinP] = column(DType::f32, [](const SamplingParams& p) { return p.min_p; });
  m[kSamplerRepetitionPenalty] =
      column(DType::f32, [](const SamplingParams& p) { return p.repetition_penalty; });
  m[kSamplerPresencePenalty] =
      column(DType::f32, [](const SamplingParams& p) { return p.presence_penalty; });
  m[kSamplerFrequencyPenalty] =
      column(DType::f32, [](const SamplingParams& p) { return p.frequency_penalty; });
  Tensor seed(DType::i32, Shape{b}), step(DType::i32, Shape{b});
  Tensor hist(DType::i32, Shape{b, history_});
  for (int64_t i = 0; i < b; ++i) {
    const auto r = static_cast<size_t>(rows[size_t(i)]);
    seed.data_as<int32_t>()[i] = static_cast<int32_t>(params_[r].seed);
    step.data_as<int32_t>()[i] = steps_[r];
    std::copy_n(tokens_.begin() + static_cast<std::ptrdiff_t>(r * size_t(history_)), history_,
                hist.data_as<int32_t>() + i * history_);
  }
  m[kSamplerSeed] = seed;
  m[kSamplerStep] = step;
  m[kSamplerHistory] = hist;
  return m;
}

bool is_greedy(const SamplingParams& p) {
  return p.temperature <= 0 && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f;
}

}  // namespace rlx::models
