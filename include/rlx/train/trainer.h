// The training loop's runtime half: compiles the train-step graph once and keeps parameters
// and optimizer state between steps, in host tensors or in the executable (on the device, and
// sharded over a pjrt device mesh for data-parallel / FSDP-style training).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rlx/backends/pjrt/sharding.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"
#include "rlx/train/optimizer.h"

namespace rlx::train {

/// Where a Trainer keeps params and optimizer state between steps.
struct TrainerOptions {
  /// The step's compile options (their seed keys the step's random draws, train::step_key).
  CompileOptions compile;
  /// true: the trained leaves and the optimizer state are state of the executable
  /// (CompileOptions::state: each bound to its new value, donated to the run on pjrt), so a
  /// step moves only the batch, train.step / train.lr and the loss outputs between host and
  /// device; params() / state() read them back on demand. false: host tensors bound anew
  /// every step (set_param), as the Session constructor without TrainerOptions does.
  bool resident = true;
};

/// Training over a pjrt device mesh (jax.jit of the train step with in_shardings /
/// out_shardings): the step is one SPMD program (make_pjrt_spmd_backend) and XLA's
/// partitioner inserts the collectives. `batch`: a PartitionSpec per batch input (e.g. "x"
/// and "labels" as P('data'): data parallelism, gradients all-reduced by XLA); `params`: a
/// PartitionSpec per param or trained leaf (absent: replicated; e.g. P(None, 'model') splits
/// a weight's columns: FSDP / Megatron-style, XLA all-gathers and reduce-scatters); each
/// optimizer slot of a leaf is sharded like the leaf, and the loss outputs are replicated.
struct MeshTraining {
  pjrt::Mesh mesh;
  std::map<std::string, pjrt::PartitionSpec> batch;
  std::map<std::string, pjrt::PartitionSpec> params;
  /// The PJRT plugin ("": RLX_PJRT_PLUGIN / TPU_LIBRARY_PATH / LIBTPU_PATH).
  std::string plugin;
};

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
  /// As above, keeping params and optimizer state where `options.resident` says (resident:
  /// the Trainer compiles its own copy of the step, Executable::clone() of the Session's, so
  /// two Trainers of one Session never share state).
  Trainer(Session& session, const Graph& loss_graph, std::vector<std::string> wrt,
          const Optimizer& opt, const TensorMap& initial, const TrainerOptions& options);
  /// The step as one SPMD program over `mesh.mesh` (MeshTraining). Besides the errors above,
  /// throws the sharding's (validate_sharding, at construction: "sharding of input 'x' [6,16]
  /// with P('data') on Mesh('data': 4): dim 0 of size 6 is not divisible by 4 ('data')"), a
  /// name in `mesh.batch` / `mesh.params` that is no batch input / param or trained leaf, and
  /// the plugin's. Steps feed whole host batches: each is split by its spec on the way in.
  Trainer(const MeshTraining& mesh, const Graph& loss_graph, std::vector<std::string> wrt,
          const Optimizer& opt, const TensorMap& initial, const TrainerOptions& options = {});

  /// One update on `batch` (the non-trained inputs of loss_graph, e.g. "x" and "labels") with
  /// learning rate `lr`. Returns loss_graph's outputs (the loss first) computed with the
  /// parameters before the update. Labels feeding a softmax_cross_entropy are checked on the
  /// host first (check_class_labels); feeds are checked by Executable::run (names, types).
  /// On error nothing is updated.
  std::vector<Tensor> step(const TensorMap& batch, double lr);
  /// step() without waiting for the device (Executable::run_async, jax's async dispatch): with
  /// resident params and state the update is dispatched and this returns at once; the loss
  /// outputs are read (and waited for) through the AsyncResult, so a loop of step_async calls
  /// chains the updates on the device (the state buffers of step k are the donated inputs of
  /// step k + 1) and reads nothing until the caller does. params() / state() wait for the
  /// steps dispatched before them. A device error of a step surfaces at the first read of its
  /// result (and of every later step's, whose inputs it computed) and at params(). Not
  /// resident: runs step() and returns its finished outputs. Throws step()'s argument errors
  /// at the call; nothing is updated then.
  AsyncResult step_async(const TensorMap& batch, double lr);

  /// Current values of every param and trained leaf of loss_graph, by name (resident: read
  /// back from the executable by this call; the reference stays valid until the next call).
  const TensorMap& params() const;
  const Tensor& param(const std::string& name) const;
  /// Current optimizer state of `param` for `slot` (rlx::Error if there is none).
  const Tensor& state(const std::string& param, const std::string& slot) const;
  /// Whether params and optimizer state live in the executable (TrainerOptions::resident).
  bool resident() const { return resident_; }
  /// The compiled step (e.g. for its kernel report or its StableHLO).
  const Executable& executable() const { return *exe_; }
  /// Updates applied so far.
  int64_t num_steps() const { return steps_; }
  const Graph& step_graph() const { return step_graph_; }

 private:
  Graph step_graph_{"train_step"};
  std::vector<std::string> wrt_;
  std::vector<std::string> slots_;
  size_t num_loss_outputs_ = 0;
  // Builds the step graph and the host copies (initial values, zero state); `resident`
  // turns trained leaves and slots into inputs bound as state.
  void prepare(const Graph& loss_graph, const TensorMap& initial, const Optimizer& opt);
  // After exe_ is compiled: binds the untrained params once, and the initial state.
  void bind_initial();
  // The feeds of the next step: `batch` (labels checked) plus train.step and train.lr.
  TensorMap step_feeds(const TensorMap& batch, double lr) const;
  CompileOptions step_options(const CompileOptions& base) const;

  bool resident_ = false;
  std::shared_ptr<Backend> backend_;  // the mesh's SPMD backend (kept with its client)
  std::shared_ptr<Executable> exe_;
  mutable TensorMap params_;                      // every param of loss_graph + every trained leaf
  mutable TensorMap state_;                       // state_name(p, slot) -> tensor
  std::map<std::string, std::string> out_names_;  // trained leaf / slot -> its output's name
  std::vector<std::string> param_leaves_;         // leaves of kind param (set_param)
  std::vector<std::pair<std::string, int64_t>> labels_;  // labels input -> classes
  int64_t steps_ = 0;
};

}  // namespace rlx::train
