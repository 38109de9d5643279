// Token sampling as a graph: the rules of llama.cpp's default sampler chain (penalties -> top-k
// -> top-p -> min-p -> temperature -> draw) appended to a decode graph, so an executable returns
// token ids instead of a vocabulary-wide logit row per step; per-row settings are inputs, so one
// executable serves rows with different settings. Plus the host-side state that feeds it.
//
// Rules (row b; V = vocabulary size, K = SamplerOptions::max_candidates, bounded by V):
//   0. NaN logits count as -inf (never drawn, unless the whole row is -inf: see 7).
//   1. Penalties (llama.cpp llama_sampler_penalties, HF RepetitionPenaltyLogitsProcessor, OpenAI
//      presence/frequency): c = the count of each token among history[b] (slots outside [0, V)
//      are empty); where c > 0: l = l <= 0 ? l * repetition_penalty : l / repetition_penalty,
//      then l -= c * frequency_penalty + presence_penalty.
//   2. Top-k: the K best (lax.top_k: descending, ties to the lower id) are the candidates; of
//      them the first top_k[b] (top_k <= 0 or > K: all K). Tokens outside the best K are never
//      drawn: K bounds the cost (llama.cpp's default top_k is 40).
//   3. Top-p (llama.cpp): p = softmax over the kept candidates; keep candidate i while the sum
//      of the probabilities before it is < top_p (the first always; top_p >= 1: off).
//   4. Min-p (llama.cpp, on logits): keep candidates with l >= l_max + log(min_p) (min_p <= 0:
//      off).
//   5. Temperature: temperature <= 0 is greedy (the best candidate: the argmax of the penalized
//      logits, lowest id on ties); else l / temperature.
//   6. Draw: q = softmax over the kept candidates, c = cumsum(q); the token is candidate j =
//      #{i : c_i <= u * c_last}, capped at the last kept one, for the uniform u in [0, 1) of the
//      row: u = uniform(fold_in(fold_in(key, seed[b]), step[b])) (jax.random, rlx/ir/random.h),
//      key = the compile seed's (rng_key). A row's draw depends only on its own seed and step, not
//      on its position in the batch or the other rows.
//   7. A row whose logits are all -inf or NaN gives token 0; a +inf logit is always chosen (the
//      first one).
// Every kept set is a prefix of the sorted candidates, so the rules compose as in llama.cpp's
// chain. Order as llama.cpp's default (common/sampling.cpp), not Hugging Face's (which applies
// temperature before top-k/top-p): top-p and min-p see the untempered distribution.
// Cost per step: one pass over the logits (NaN -> -inf) and one top_k of K + N over them (CPU: a
// heap scan); everything else is O(B * (K + N)^2) on a pool of candidates: penalties change
// only history tokens, so the K best penalized tokens are among the K + N best raw logits and
// the history's tokens (N = the history length).
//
// In a decode graph, in place of a greedy argmax over the last position's logits:
//   SamplerInputs s = add_sampler_inputs(g, batch, /*history=*/64);   // inputs "sampler.*"
//   Value ids = sample_tokens(g, last_logits /* f32[B, V] */, s);       // i32[B]
// (or LlamaStepOptions::select = token_sampler(64)), and on the host, per sequence row:
// SamplerState st(batch, 64); st.reset(row, params, prompt); each step feed st.feeds() with the
// model's inputs, run, then st.accept(row, ids[row]). The compile seed (CompileOptions::seed, e.g.
// `--seed`) and each row's SamplingParams::seed both key the draws; compile once, any settings per
// row.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"

namespace rlx::models {

/// Input names of add_sampler_inputs (one entry per SamplerInputs field).
inline constexpr const char* kSamplerTemperature = "sampler.temperature";
inline constexpr const char* kSamplerTopK = "sampler.top_k";
inline constexpr const char* kSamplerTopP = "sampler.top_p";
inline constexpr const char* kSamplerMinP = "sampler.min_p";
inline constexpr const char* kSamplerRepetitionPenalty = "sampler.repetition_penalty";
inline constexpr const char* kSamplerPresencePenalty = "sampler.presence_penalty";
inline constexpr const char* kSamplerFrequencyPenalty = "sampler.frequency_penalty";
inline constexpr const char* kSamplerHistory = "sampler.history";
inline constexpr const char* kSamplerSeed = "sampler.seed";
inline constexpr const char* kSamplerStep = "sampler.step";

/// The per-row values the sampler reads, each a graph Value (B rows).
struct SamplerInputs {
  Value temperature;         ///< f32[B]; <= 0: greedy
  Value top_k;               ///< i32[B]; <= 0: off (all max_candidates)
  Value top_p;               ///< f32[B]; >= 1: off
  Value min_p;               ///< f32[B]; <= 0: off
  Value repetition_penalty;  ///< f32[B]; 1: off (must be > 0)
  Value presence_penalty;    ///< f32[B]; 0: off
  Value frequency_penalty;   ///< f32[B]; 0: off
  Value history;  ///< i32[B, N]: tokens the penalties count; ids outside [0, V) are empty
  Value seed;     ///< i32[B]: the row's stream (any 32-bit value)
  Value step;     ///< i32[B]: the row's draw counter (a fresh number per step)
};

/// Graph-level options.
struct SamplerOptions {
  /// K: candidates kept by the first top_k over the vocabulary (min(K, V) are used); top_k
  /// settings above it act as K, so K bounds the cost and the reach of top-p.
  int64_t max_candidates = 64;
};

/// Adds the inputs of SamplerInputs to `g` under the kSampler* names, for `batch` rows and a
/// token history of `history` slots (>= 1). Throws rlx::Error if a name is taken.
SamplerInputs add_sampler_inputs(Graph& g, int64_t batch, int64_t history);

/// The per-row uniform draw f32[B] in [0, 1): uniform(fold_in(fold_in(key, seed[b]),
/// step[b])) (jax.random with threefry, partitionable). key: i32[2]; seed, step: i32[B].
Value sampler_uniform(Graph& g, Value key, Value seed, Value step);

/// Appends the sampler to `g`: logits f32[B, V] (float logits of another dtype are converted)
/// and `in` -> token ids i32[B], drawing u with sampler_uniform(g.rng_key(), in.seed, in.step).
/// Throws rlx::Error naming the input when a shape or dtype is wrong (every per-row input
/// [B], history [B, N]) or max_candidates < 1.
Value sample_tokens(Graph& g, Value logits, const SamplerInputs& in,
                    const SamplerOptions& options = {});

/// sample_tokens with the uniform draw given (f32[B] in [0, 1)), e.g. to test the rules with
/// draws of one's own; `in.seed` and `in.step` are not read (they may be invalid Values).
Value sample_tokens_with_uniform(Graph& g, Value logits, const SamplerInputs& in, Value uniform,
                                 const SamplerOptions& options = {});

/// A token selector that samples (a rlx/models/llama.h TokenSelector, e.g. for
/// LlamaStepOptions::select): for logits [B, V] it adds add_sampler_inputs(g, B, history) and
/// returns sample_tokens(g, logits, inputs, options). Every graph it is used in gets the same
/// "sampler.*" inputs, so one SamplerState feeds prefill and decode executables alike.
std::function<Value(Graph&, Value)> token_sampler(int64_t history, SamplerOptions options = {});

/// One row's settings; the defaults are llama.cpp's (common_params_sampling).
struct SamplingParams {
  float temperature = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint32_t seed = 0;
};

/// Whether the sampler picks the argmax of the raw logits with `p` (temperature <= 0, no
/// penalty active: repetition_penalty 1, presence and frequency 0): the token greedy_tokens
/// (rlx/models/llama.h) picks, lowest id among equal maxima, so a greedy executable may run
/// in its place.
bool is_greedy(const SamplingParams& p);

/// Host-side state of B rows for the inputs of add_sampler_inputs: each row's settings, the last
/// `history` tokens it saw (llama.cpp's penalty_last_n window: prompt and generated tokens) and
/// its draw counter. After every decode step, accept() each row's token.
class SamplerState {
 public:
  /// `batch` >= 1 rows, `history` >= 1 slots; every row starts empty with default settings.
  SamplerState(int64_t batch, int64_t history);
  /// Starts row `row` over: its settings, a history holding the last `history` tokens of
  /// `prompt`, step 0. Throws rlx::Error for a row out of range or a setting out of its domain
  /// (NaN temperature / top_p / min_p, repetition_penalty not > 0, non-finite penalties), naming
  /// the row and the field.
  void reset(int64_t row, const SamplingParams& params, std::span<const int32_t> prompt = {});
  /// Records `token` as row `row`'s newest token (the oldest leaves a full window) and
  /// advances its step.
  void accept(int64_t row, int32_t token);
  /// The tensors of every kSampler* input.
  TensorMap feeds() const;
  /// The tensors of every kSampler* input for the rows `rows` (in that order, [rows.size()]):
  /// a step over some rows of a batch. Throws rlx::Error for a row out of range.
  TensorMap feeds(std::span<const int64_t> rows) const;
  int64_t batch() const { return static_cast<int64_t>(params_.size()); }
  int64_t history() const { return history_; }
  const SamplingParams& params(int64_t row) const;
  int32_t step(int64_t row) const;

 private:
  void check_row(int64_t row, const char* fn) const;
  int64_t history_;
  std::vector<SamplingParams> params_;
  std::vector<int32_t> tokens_;  // [batch, history] ring buffers, -1 = empty
  std::vector<int64_t> next_;    // per row: the slot the next token goes to
  std::vector<int32_t> steps_;
};

}  // namespace rlx::models
