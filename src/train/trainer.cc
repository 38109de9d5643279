// The training loop's runtime half (include/rlx/train/trainer.h).
#include "rlx/train/trainer.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/error.h"
#include "rlx/runtime/backend_core.h"
#include "rlx/train/loss.h"

namespace rlx::train {
namespace {

// `g` with the top-level params named in `names` turned into inputs of the same type (through
// the exact text round trip: "  %w = param : f32[..]" becomes "  %w = input : f32[..]").
Graph params_to_inputs(const Graph& g, const std::set<std::string>& names) {
  std::istringstream in(g.to_string());
  std::string text, line;
  while (std::getline(in, line)) {
    for (const std::string& name : names) {
      const std::string from = "  %" + name + " = param :";
      if (line.rfind(from, 0) == 0) {
        line = "  %" + name + " = input :" + line.substr(from.size());
        break;
      }
    }
    text += line + '\n';
  }
  return Graph::parse(text);
}

}  // namespace

Trainer::Trainer(Session& session, const Graph& loss_graph, std::vector<std::string> wrt,
                 const Optimizer& opt, const TensorMap& initial, const CompileOptions& options)
    : Trainer(session, loss_graph, std::move(wrt), opt, initial,
              TrainerOptions{options, /*resident=*/false}) {}

Trainer::Trainer(Session& session, const Graph& loss_graph, std::vector<std::string> wrt,
                 const Optimizer& opt, const TensorMap& initial, const TrainerOptions& options)
    : wrt_(std::move(wrt)),
      slots_(opt.slots()),
      num_loss_outputs_(loss_graph.outputs().size()),
      resident_(options.resident) {
  prepare(loss_graph, initial, opt);
  exe_ = session.compile(step_graph_, step_options(options.compile));
  // A Session's executable is shared by every holder: state (and bound params) are ours alone.
  if (resident_ && exe_->capabilities().clone) exe_ = std::shared_ptr<Executable>(exe_->clone());
  bind_initial();
}

Trainer::Trainer(const MeshTraining& mesh, const Graph& loss_graph, std::vector<std::string> wrt,
                 const Optimizer& opt, const TensorMap& initial, const TrainerOptions& options)
    : wrt_(std::move(wrt)),
      slots_(opt.slots()),
      num_loss_outputs_(loss_graph.outputs().size()),
      resident_(options.resident) {
  prepare(loss_graph, initial, opt);
  pjrt::ShardingConfig config;
  config.mesh = mesh.mesh;
  config.inputs = mesh.batch;
  for (const auto& [name, spec] : mesh.params) {
    check(params_.count(name) != 0, "Trainer: MeshTraining shards '" + name +
                                        "', which is neither a param nor a trained leaf of '" +
                                        loss_graph.name() + "'");
    // A trained leaf (and its slots) is an input of the step when resident or when it is an
    // input of the loss graph; an untrained param stays a param.
    const bool trained = std::find(wrt_.begin(), wrt_.end(), name) != wrt_.end();
    const bool is_param =
        std::find(param_leaves_.begin(), param_leaves_.end(), name) != param_leaves_.end();
    (is_param ? config.params : config.inputs)[name] = spec;
    if (!trained) continue;
    for (const auto& s : slots_)
      (resident_ ? config.inputs : config.params)[state_name(name, s)] = spec;
    config.outputs[out_names_.at(name)] = spec;
    for (const auto& s : slots_) config.outputs[out_names_.at(state_name(name, s))] = spec;
  }
  backend_ = pjrt::make_pjrt_spmd_backend(std::move(config), mesh.plugin);
  exe_ = backend_->compile(step_graph_, resolve_environment(step_options(options.compile)),
                           Device::parse("pjrt:0"));
  bind_initial();
}

void Trainer::prepare(const Graph& loss_graph, const TensorMap& initial, const Optimizer& opt) {
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
    const std::string& name = loss_graph.node(id).name;
    // Resident: trained params become state inputs; only the others are bound as params.
    if (!resident_ || std::find(wrt_.begin(), wrt_.end(), name) == wrt_.end())
      param_leaves_.push_back(name);
  }
  for (const auto& name : wrt_) {
    if (!params_.count(name)) {
      const int32_t id = loss_graph.find(name);
      check(id >= 0, "Trainer: the loss graph '" + loss_graph.name() + "' has no leaf '" + name +
                         "' to train");
      take_initial(loss_graph.node(id));
    }
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
  step_graph_ = build_train_step(loss_graph, wrt_, opt);
  if (resident_) {
    std::set<std::string> leaves(wrt_.begin(), wrt_.end());
    for (const auto& [name, t] : state_) leaves.insert(name);
    step_graph_ = params_to_inputs(step_graph_, leaves);
  }
  // The name of each new value among the step's outputs (Executable::outputs()).
  IoSpecs io = io_specs_of(step_graph_);
  size_t k = num_loss_outputs_;
  for (const auto& name : wrt_) out_names_[name] = io.outputs[k++].name;
  for (const auto& name : wrt_)
    for (const auto& s : slots_) out_names_[state_name(name, s)] = io.outputs[k++].name;
}

CompileOptions Trainer::step_options(const CompileOptions& base) const {
  CompileOptions o = base;
  if (!resident_) return o;
  check(o.state.empty(),
        "Trainer: resident training binds its own state; the compile options "
        "must not bind any (" +
            std::to_string(o.state.size()) + " given)");
  for (const auto& name : wrt_) o.state.push_back({name, out_names_.at(name)});
  for (const auto& name : wrt_)
    for (const auto& s : slots_)
      o.state.push_back({state_name(name, s), out_names_.at(state_name(name, s))});
  return o;
}

void Trainer::bind_initial() {
  if (!resident_) return;
  for (const auto& name : param_leaves_) exe_->set_param(name, params_.at(name));  // once
  for (const auto& name : wrt_) exe_->set_state(name, params_.at(name));
  for (const auto& [name, t] : state_) exe_->set_state(name, t);
}

TensorMap Trainer::step_feeds(const TensorMap& batch, double lr) const {
  for (const auto& [name, classes] : labels_) {
    auto it = batch.find(name);
    if (it != batch.end())
      check_class_labels(it->second, classes, "Trainer::step: input '" + name + "'");
  }
  TensorMap feeds = batch;
  feeds[kStepInput] = Tensor::full(DType::f32, Shape{}, static_cast<double>(steps_ + 1));
  feeds[kLrInput] = Tensor::full(DType::f32, Shape{}, lr);
  return feeds;
}

AsyncResult Trainer::step_async(const TensorMap& batch, double lr) {
  if (!resident_) return AsyncResult(step(batch, lr));
  AsyncResult out = exe_->run_async(step_feeds(batch, lr));
  ++steps_;
  return out;
}

std::vector<Tensor> Trainer::step(const TensorMap& batch, double lr) {
  TensorMap feeds = step_feeds(batch, lr);
  if (resident_) {  // params and state stay in the executable; it returns the loss outputs
    std::vector<Tensor> out = exe_->run(feeds);
    ++steps_;
    return out;
  }
  for (const auto& name : wrt_)
    if (std::find(param_leaves_.begin(), param_leaves_.end(), name) == param_leaves_.end())
      feeds[name] = params_.at(name);
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

const TensorMap& Trainer::params() const {
  if (resident_)
    for (const auto& name : wrt_) params_[name] = exe_->get_state(name);
  return params_;
}

const Tensor& Trainer::param(const std::string& name) const {
  auto it = params_.find(name);
  check(it != params_.end(), "Trainer::param: no param '" + name + "'");
  if (resident_ && std::find(wrt_.begin(), wrt_.end(), name) != wrt_.end())
    it->second = exe_->get_state(name);
  return it->second;
}

const Tensor& Trainer::state(const std::string& param, const std::string& slot) const {
  auto it = state_.find(state_name(param, slot));
  check(it != state_.end(), "Trainer::state: no state '" + slot + "' for '" + param + "'");
  if (resident_) it->second = exe_->get_state(it->first);
  return it->second;
}

}  // namespace rlx::train
