// A small recurrent language model over `scan` (issue 16's training check): token embedding,
// a tanh RNN cell scanned over time, a linear head and mean softmax cross-entropy; and a toy
// sequence task that needs the recurrence (predict the token seen `delay` steps earlier).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"
#include "rlx/ir/tensor.h"
#include "rlx/train/init.h"
#include "rlx/train/loss.h"

namespace rlx::testing {

struct RnnLmShape {
  int64_t batch = 16, time = 10, vocab = 8, hidden = 32;
  int64_t delay = 2;  ///< label at step t is the token at t - delay (0 for t < delay)
};

/// tokens i32[T, B] (time-major) -> emb [V, H] gathered -> scan over T of h' = tanh(h wh + x_t
/// wx + b), y_t = h' -> logits [T*B, V] = ys wo + bo -> mean softmax cross-entropy against
/// labels i32[T*B]. The params are the trained leaves.
inline Graph rnn_lm(const RnnLmShape& s) {
  const int64_t T = s.time, B = s.batch, V = s.vocab, H = s.hidden;
  Graph cell("cell");
  Value wx = cell.input("wx", DType::f32, {H, H});
  Value wh = cell.input("wh", DType::f32, {H, H});
  Value b = cell.input("b", DType::f32, {H});
  Value h = cell.input("h", DType::f32, {B, H});
  Value x = cell.input("x", DType::f32, {B, H});
  Value h2 = cell.tanh(cell.add(cell.add(cell.matmul(h, wh), cell.matmul(x, wx)), b));
  cell.set_outputs({h2, h2});

  Graph g("rnn_lm");
  Value tokens = g.input("tokens", DType::i32, {T, B});
  Value labels = g.input("labels", DType::i32, {T * B});
  Value emb = g.param("emb", DType::f32, {V, H});
  Value gwx = g.param("wx", DType::f32, {H, H});
  Value gwh = g.param("wh", DType::f32, {H, H});
  Value gb = g.param("b", DType::f32, {H});
  Value wo = g.param("wo", DType::f32, {H, V});
  Value bo = g.param("bo", DType::f32, {V});
  Value xs = g.gather(emb, tokens, 0);  // [T, B, H]
  Value h0 = g.constant(Tensor::full(DType::f32, {B, H}, 0.0));
  std::vector<Value> r = g.scan(cell, {h0}, {xs}, {gwx, gwh, gb});
  Value ys = g.reshape(r[1], {T * B, H});
  Value logits = g.add(g.matmul(ys, wo), bo);
  g.set_outputs({train::softmax_cross_entropy_loss(g, logits, labels)});
  return g;
}

/// Training length and the loss it must reach (mean cross-entropy of the last step; chance is
/// ln(vocab) = 2.08).
inline constexpr int kRnnLmSteps = 150;
inline constexpr double kRnnLmConverged = 0.05;

inline const std::vector<std::string> kRnnLmParams = {"emb", "wx", "wh", "b", "wo", "bo"};

/// Initial params: Glorot-uniform matrices, zero biases, seeded.
inline TensorMap rnn_lm_init(const RnnLmShape& s, uint64_t seed) {
  train::Rng rng(seed);
  using train::Init;
  return {{"emb", train::initialize(Init::GlorotUniform, DType::f32, {s.vocab, s.hidden}, rng)},
          {"wx", train::initialize(Init::GlorotUniform, DType::f32, {s.hidden, s.hidden}, rng)},
          {"wh", train::initialize(Init::GlorotUniform, DType::f32, {s.hidden, s.hidden}, rng)},
          {"b", Tensor::full(DType::f32, {s.hidden}, 0.0)},
          {"wo", train::initialize(Init::GlorotUniform, DType::f32, {s.hidden, s.vocab}, rng)},
          {"bo", Tensor::full(DType::f32, {s.vocab}, 0.0)}};
}

/// Batch k of the delayed-copy task: uniform random tokens (seeded by k), labels[t, b] =
/// tokens[t - delay, b] (0 for t < delay). Chance level is ln(vocab) per token.
inline TensorMap rnn_lm_batch(const RnnLmShape& s, uint64_t k) {
  Tensor tokens(DType::i32, {s.time, s.batch});
  Tensor labels(DType::i32, {s.time * s.batch});
  uint64_t state = 0x9E3779B97F4A7C15ull * (k + 1);
  auto next = [&] {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  int32_t* tok = tokens.data_as<int32_t>();
  int32_t* lab = labels.data_as<int32_t>();
  for (int64_t i = 0; i < s.time * s.batch; ++i) tok[i] = static_cast<int32_t>(next() % s.vocab);
  for (int64_t t = 0; t < s.time; ++t)
    for (int64_t b = 0; b < s.batch; ++b)
      lab[t * s.batch + b] = t < s.delay ? 0 : tok[(t - s.delay) * s.batch + b];
  return {{"tokens", tokens}, {"labels", labels}};
}

}  // namespace rlx::testing
