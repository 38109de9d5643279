// Dropout for training graphs, on the threefry random-number ops (rlx/ir/random.h): a key per
// training step from the compile seed and the step, and inverted dropout drawn from it.
#pragma once

#include <cstdint>

#include "rlx/ir/graph.h"

namespace rlx::train {

/// The key i32[2] of this training step's draws for stream `stream` (one per dropout site):
/// fold_in(fold_in(rng_key, step), stream) with rng_key the compile seed's key
/// (CompileOptions::seed: Trainer's options) and step the train step's t (the f32[] input
/// kStepInput, added to `g` on first use; build_train_step keeps it and Trainer feeds it). So
/// the masks are a function of (seed, step, stream): the same seed replays the same run, each
/// step and each site draws fresh numbers. Throws rlx::Error if `g` has a leaf named kStepInput
/// that is not an f32[] input.
Value step_key(Graph& g, int64_t stream = 0);

/// Inverted dropout (Srivastava et al., JMLR 2014; flax.linen.Dropout and torch.nn.Dropout in
/// training mode): each element of float x is kept with probability 1 - rate and scaled by
/// 1 / (1 - rate), else 0: select(bernoulli(key, 1 - rate, x.shape), x / (1 - rate), 0), with
/// jax.random.bernoulli's mask (flax's, bit for bit, for the same key). rate 0 returns x. Build
/// it into the loss graph given to Trainer only; an evaluation graph leaves it out (dropout is
/// the identity at inference). Gradient: the same mask times 1 / (1 - rate). Throws rlx::Error
/// for rate outside [0, 1), non-float x, or a key that is not i32[2].
Value dropout(Graph& g, Value x, double rate, Value key);

}  // namespace rlx::train
