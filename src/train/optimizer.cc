// SGD / AdamW as graph updates and the train-step graph (include/rlx/train/optimizer.h).
#include "rlx/train/optimizer.h"

#include "rlx/autodiff/grad.h"
#include "rlx/ir/error.h"

namespace rlx::train {
namespace {

// `x` (an f32 scalar input) in the dtype of `like`, so f16/bf16 params update in their dtype.
Value as_dtype_of(Graph& g, Value x, Value like) {
  return g.dtype(x) == g.dtype(like) ? x : g.convert(x, g.dtype(like));
}

void check_unit_interval(double v, const char* opt, const char* what) {
  check(v >= 0.0 && v < 1.0,
        std::string(opt) + ": " + what + " = " + std::to_string(v) + " must be in [0, 1)");
}

}  // namespace

Sgd::Sgd(SgdOptions options) : o_(options) {
  check_unit_interval(o_.momentum, "sgd", "momentum");
  check(o_.weight_decay >= 0, "sgd: weight_decay must be >= 0");
  check(!o_.nesterov || o_.momentum > 0, "sgd: nesterov needs momentum > 0");
}

std::vector<std::string> Sgd::slots() const {
  if (o_.momentum == 0.0) return {};
  return {"momentum"};
}

std::vector<Value> Sgd::update(Graph& g, Value p, Value grad, const std::vector<Value>& state,
                               Value /*step*/, Value lr) const {
  check(state.size() == slots().size(), "sgd: wrong number of state values");
  Value d = grad;
  if (o_.weight_decay != 0.0) d = g.add(d, g.mul(g.scalar_like(p, o_.weight_decay), p));
  std::vector<Value> out(1);
  if (o_.momentum != 0.0) {
    Value b = g.add(g.mul(g.scalar_like(p, o_.momentum), state[0]), d);
    out.push_back(b);
    d = o_.nesterov ? g.add(d, g.mul(g.scalar_like(p, o_.momentum), b)) : b;
  }
  out[0] = g.sub(p, g.mul(as_dtype_of(g, lr, p), d));
  return out;
}

AdamW::AdamW(AdamWOptions options) : o_(options) {
  check_unit_interval(o_.beta1, "adamw", "beta1");
  check_unit_interval(o_.beta2, "adamw", "beta2");
  check(o_.eps > 0, "adamw: eps must be > 0");
  check(o_.weight_decay >= 0, "adamw: weight_decay must be >= 0");
}

std::vector<Value> AdamW::update(Graph& g, Value p, Value grad, const std::vector<Value>& state,
                                 Value step, Value lr) const {
  check(state.size() == 2, "adamw: wrong number of state values");
  auto c = [&](double v) { return g.scalar_like(p, v); };
  Value t = as_dtype_of(g, step, p);
  Value m = g.add(g.mul(c(o_.beta1), state[0]), g.mul(c(1.0 - o_.beta1), grad));
  Value v = g.add(g.mul(c(o_.beta2), state[1]), g.mul(c(1.0 - o_.beta2), g.mul(grad, grad)));
  // Bias corrections 1 - beta^t are scalars: computed once, not per element.
  Value m_hat = g.div(m, g.sub(c(1.0), g.pow(c(o_.beta1), t)));
  Value v_hat = g.div(v, g.sub(c(1.0), g.pow(c(o_.beta2), t)));
  Value u = g.div(m_hat, g.add(g.sqrt(v_hat), c(o_.eps)));
  if (o_.weight_decay != 0.0) u = g.add(u, g.mul(c(o_.weight_decay), p));
  return {g.sub(p, g.mul(as_dtype_of(g, lr, p), u)), m, v};
}

std::string state_name(const std::string& param, const std::string& slot) {
  return param + "." + slot;
}

Graph build_train_step(const Graph& loss_graph, const std::vector<std::string>& wrt,
                       const Optimizer& opt) {
  Graph g = autodiff::value_and_grad(loss_graph, wrt, 0);
  const size_t num_outputs = loss_graph.outputs().size();
  const std::vector<std::string> slots = opt.slots();
  auto fresh = [&](const std::string& name) {
    check(g.find(name) < 0, "build_train_step: the loss graph already has a leaf named '" + name +
                                "', which the train step needs for itself");
    return name;
  };
  // A loss graph that reads the step (train::step_key) has the input already.
  const int32_t given = g.find(kStepInput);
  const bool reuse = given >= 0 && g.node(given).op == OpKind::Input &&
                     g.node(given).results[0] == TensorType{DType::f32, Shape{}};
  Value step = reuse ? Value{given, 0} : g.input(fresh(kStepInput), DType::f32, Shape{});
  Value lr = g.input(fresh(kLrInput), DType::f32, Shape{});
  std::vector<Value> outs(g.outputs().begin(), g.outputs().begin() + num_outputs);
  std::vector<Value> new_state;
  for (size_t i = 0; i < wrt.size(); ++i) {
    Value p{g.find(wrt[i]), 0};
    Value grad = g.outputs()[num_outputs + i];
    std::vector<Value> state;
    for (const auto& s : slots)
      state.push_back(g.param(fresh(state_name(wrt[i], s)), g.dtype(p), g.shape(p)));
    std::vector<Value> up = opt.update(g, p, grad, state, step, lr);
    check(up.size() == 1 + slots.size(),
          "build_train_step: optimizer '" + opt.name() + "' returned a wrong number of values");
    outs.push_back(up[0]);
    new_state.insert(new_state.end(), up.begin() + 1, up.end());
  }
  outs.insert(outs.end(), new_state.begin(), new_state.end());
  g.set_outputs(outs);
  return g;
}

}  // namespace rlx::train
