// The training loop's runtime half: compiles the train-step graph once and keeps parameters
// and optimizer state in host tensors between steps.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"
#include "rlx/train/optimizer.h"

namespace rlx::train {

/// Trains the leaves `wrt` of `loss_graph` with `opt` (build_train_step), compiled once by
/// `session`. Parameters and optimizer state live in host tensors owned by the Trainer; each
/// step binds them (params zero-copy through set_param, inputs as feeds), runs the one
/// executable, and swaps in the new tensors it returns. The optimizer state starts at zero.
class Trainer {
 public:
  /// `initial` must hold every param of loss_graph and every trained leaf, with exactly the
  /// declared dtype and shape; else rlx::Error ("Trainer: missing initial value for 'w1'",
  /// "Trainer: 'w1' expected f32[64,128], got f32[64,10]"). Throws build_train_step's and the
  /// compiler's errors. `options` are the step's compile options; their seed is the key of the
  /// step's random draws (train::step_key: dropout).
  Trainer(Session& session, const Graph& loss_graph, std::vector<std::string> wrt,
          const Optimizer& opt, const TensorMap& initial, const CompileOptions& options = {});

  /// One update on `batch` (the non-trained inputs of loss_graph, e.g. "x" and "labels") with
  /// learning rate `lr`. Returns loss_graph's outputs (the loss first) computed with the
  /// parameters before the update. Labels feeding a softmax_cross_entropy are checked on the
  /// host first (check_class_labels); feeds are checked by Executable::run (names, types).
  /// On error nothing is updated.
  std::vector<Tensor> step(const TensorMap& batch, double lr);

  /// Current values of every param and trained leaf of loss_graph, by name.
  const TensorMap& params() const { return params_; }
  const Tensor& param(const std::string& name) const;
  /// Current optimizer state of `param` for `slot` (rlx::Error if there is none).
  const Tensor& state(const std::string& param, const std::string& slot) const;
  /// Updates applied so far.
  int64_t num_steps() const { return steps_; }
  const Graph& step_graph() const { return step_graph_; }

 private:
  Graph step_graph_;
  std::vector<std::string> wrt_;
  std::vector<std::string> slots_;
  size_t num_loss_outputs_ = 0;
  std::shared_ptr<Executable> exe_;
  TensorMap params_;                       // every param of loss_graph + every trained leaf
  TensorMap state_;                        // state_name(p, slot) -> tensor
  std::vector<std::string> param_leaves_;  // leaves of kind param (set_param)
  std::vector<std::pair<std::string, int64_t>> labels_;  // labels input -> classes
  int64_t steps_ = 0;
};

}  // namespace rlx::train
