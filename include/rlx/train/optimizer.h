// Optimizers as graph updates, and the one "train step" graph that chains a loss graph's
// gradient (autodiff::value_and_grad) with the update of every trained leaf.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx::train {

/// An optimizer emits the update of one parameter into a graph. Per parameter it keeps the
/// state slots named by slots() (same dtype and shape as the parameter, zero-initialised).
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  /// State slot names, e.g. {"m", "v"} for AdamW; empty for plain SGD.
  virtual std::vector<std::string> slots() const = 0;
  /// Emits into `g` one update. `param` and `grad` have one float type; `state` holds one
  /// value per slot (same type); `step` is the f32 scalar t of this update (1 for the first)
  /// and `lr` the f32 scalar learning rate (both converted to the param dtype). Returns the new
  /// param followed by the new state values, in slot order.
  virtual std::vector<Value> update(Graph& g, Value param, Value grad,
                                    const std::vector<Value>& state, Value step,
                                    Value lr) const = 0;
};

/// SGD with (heavy-ball or Nesterov) momentum and L2 weight decay, as torch.optim.SGD
/// (dampening 0) and optax.sgd(momentum, nesterov) + add_decayed_weights:
///   g' = g + weight_decay * p;  b = momentum * b + g';
///   d = nesterov ? g' + momentum * b : b;  p = p - lr * d.
/// (PyTorch's first step sets b = g', which equals the formula with b initialised to 0.)
/// momentum == 0 keeps no state. Throws rlx::Error for momentum outside [0, 1), negative
/// weight_decay, or nesterov without momentum.
struct SgdOptions {
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
};
class Sgd : public Optimizer {
 public:
  explicit Sgd(SgdOptions options = {});
  std::string name() const override { return "sgd"; }
  std::vector<std::string> slots() const override;
  std::vector<Value> update(Graph& g, Value param, Value grad, const std::vector<Value>& state,
                            Value step, Value lr) const override;

 private:
  SgdOptions o_;
};

/// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019), as
/// torch.optim.AdamW and optax.adamw, with bias correction (Kingma & Ba 2015):
///   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
///   m^ = m / (1 - b1^t);  v^ = v / (1 - b2^t);
///   p = p - lr * (m^ / (sqrt(v^) + eps) + weight_decay * p).
/// (PyTorch first scales p by 1 - lr wd, then subtracts lr m^/(sqrt(v^)+eps): the same value.)
/// Throws rlx::Error for betas outside [0, 1), eps <= 0 or negative weight_decay.
struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};
class AdamW : public Optimizer {
 public:
  explicit AdamW(AdamWOptions options = {});
  std::string name() const override { return "adamw"; }
  std::vector<std::string> slots() const override { return {"m", "v"}; }
  std::vector<Value> update(Graph& g, Value param, Value grad, const std::vector<Value>& state,
                            Value step, Value lr) const override;

 private:
  AdamWOptions o_;
};

/// Names of the train-step graph's extra leaves.
inline constexpr const char* kStepInput = "train.step";  ///< f32[] input: t of this update
inline constexpr const char* kLrInput = "train.lr";      ///< f32[] input: learning rate
/// The state leaf of `param` for `slot`: "<param>.<slot>", e.g. "w1.m".
std::string state_name(const std::string& param, const std::string& slot);

/// One compiled step: from `loss_graph` (output 0 a rank-0 float loss), `wrt` (names of its
/// float inputs or params to train) and `opt`, builds a graph with
///   leaves:  every input and param of loss_graph (same kinds), the f32[] inputs kStepInput
///            and kLrInput, and one param state_name(p, slot) per trained leaf and slot;
///   outputs: every output of loss_graph (loss first), then the new value of each `wrt` leaf
///            (in order), then the new state (leaf-major, slot order).
/// A loss graph may read the step itself: an f32[] input named kStepInput is kept as the step
/// input (train::step_key, dropout's per-step key, does this).
/// Errors: those of autodiff::value_and_grad (unknown / repeated / non-float name, loss not a
/// rank-0 float), and rlx::Error if loss_graph already has a leaf named like an added one
/// (other than an f32[] input kStepInput).
Graph build_train_step(const Graph& loss_graph, const std::vector<std::string>& wrt,
                       const Optimizer& opt);

}  // namespace rlx::train
