// The training loop's runtime half (include/rlx/train/trainer.h).
#include "rlx/train/trainer.h"

#include <algorithm>

#include "rlx/ir/error.h"
#include "rlx/train/loss.h"

namespace rlx::train {

Trainer::Trainer(Session& session, const Graph& loss_graph, std::vector<std::string> wrt,
                 const Optimizer& opt, const TensorMap& initial, const CompileOptions& options)
    : step_graph_(build_train_step(loss_graph, wrt, opt)),
      wrt_(std::move(wrt)),
      slots_(opt.slots()),
      num_loss_outputs_(loss_graph.outputs().size()) {
  // Host copies of every param and trained leaf, checked against the declared types.
  auto take_initial = [&](const Node& n) {
    auto it = initial.find(n.name);
    check(it != initial.end(), "Trainer: missing initial value for '" + n.name + "'");
    check(it->second.type() == n.results[0], "Trainer: '" + n.name + "' expected " +
                                                 n.results[0].to_string() + ", got " +
                                                 it->second.type().to_string());
    params_[n.name] = it->second.clone();
  };
  for (int32_t id : loss_graph.params()) {
    take_initial(loss_graph.node(id));
    param_leaves_.push_back(loss_graph.node(id).name);
  }
  for (const auto& name : wrt_) {
    if (!params_.count(name)) take_initial(loss_graph.node(loss_graph.find(name)));
    for (const auto& s : slots_) {
      const Tensor& p = params_.at(name);
      Tensor z(p.dtype(), p.shape());
      std::fill(z.data(), z.data() + z.nbytes(), std::byte{0});  // 0.0 in every float dtype
      state_[state_name(name, s)] = std::move(z);
    }
  }
  // softmax_cross_entropy's labels are clamped by the op; check those fed directly on the host.
  for (const Node& n : loss_graph.nodes()) {
    if (n.op != OpKind::SoftmaxCrossEntropy) continue;
    const Node& y = loss_graph.node(n.operands[1]);
    if (y.op != OpKind::Input) continue;
    const Shape& logits = loss_graph.shape(n.operands[0]);
    labels_.emplace_back(y.name, logits[logits.rank() - 1]);
  }
  exe_ = session.compile(step_graph_, options);
}

std::vector<Tensor> Trainer::step(const TensorMap& batch, double lr) {
  for (const auto& [name, classes] : labels_) {
    auto it = batch.find(name);
    if (it != batch.end())
      check_class_labels(it->second, classes, "Trainer::step: input '" + name + "'");
  }
  TensorMap feeds = batch;
  for (const auto& name : wrt_)
    if (std::find(param_leaves_.begin(), param_leaves_.end(), name) == param_leaves_.end())
      feeds[name] = params_.at(name);
  feeds[kStepInput] = Tensor::full(DType::f32, Shape{}, static_cast<double>(steps_ + 1));
  feeds[kLrInput] = Tensor::full(DType::f32, Shape{}, lr);
  // Params are bound to the host tensors (zero-copy where the backend can); rebinding every
  // step follows the swaps below.
  for (const auto& name : param_leaves_) exe_->set_param(name, params_.at(name));
  for (const auto& [name, t] : state_) exe_->set_param(name, t);
  std::vector<Tensor> out = exe_->run(feeds);

  size_t k = num_loss_outputs_;
  for (const auto& name : wrt_) params_[name] = std::move(out[k++]);
  for (const auto& name : wrt_)
    for (const auto& s : slots_) state_[state_name(name, s)] = std::move(out[k++]);
  out.resize(num_loss_outputs_);
  ++steps_;
  return out;
}

const Tensor& Trainer::param(const std::string& name) const {
  auto it = params_.find(name);
  check(it != params_.end(), "Trainer::param: no param '" + name + "'");
  return it->second;
}

const Tensor& Trainer::state(const std::string& param, const std::string& slot) const {
  auto it = state_.find(state_name(param, slot));
  check(it != state_.end(), "Trainer::state: no state '" + slot + "' for '" + param + "'");
  return it->second;
}

}  // namespace rlx::train
