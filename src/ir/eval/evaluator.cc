// Reference evaluator driver: kernel table, feed checking, node-by-node evaluation.

#include "eval.h"
#include "rlx/ir/error.h"
#include "rlx/ir/op_table.h"

namespace rlx {
namespace detail {
namespace {
OpTable<EvalFn>& kernels() {
  static OpTable<EvalFn> t("reference evaluator", [](OpTable<EvalFn>&) {
    register_eval_leaf();
    register_eval_elementwise();
    register_eval_linalg();
    register_eval_reduce();
    register_eval_shape();
    register_eval_nn();
    register_eval_conv();
    register_eval_fused();
    register_eval_quant();
    register_eval_random();
    register_eval_control_flow();
    register_eval_collective();
    register_eval_custom();
  });
  return t;
}
}  // namespace

void set_eval(OpKind op, EvalFn fn) { kernels().set(op, fn); }

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(static_cast<size_t>(shape.rank()));
  for (int i = shape.rank() - 1; i >= 0; --i) {
    idx[static_cast<size_t>(i)] = flat % shape[i];
    flat /= shape[i];
  }
  return idx;
}

int64_t ravel(std::span<const int64_t> index, const Shape& shape) {
  int64_t flat = 0;
  for (int i = 0; i < shape.rank(); ++i) flat = flat * shape[i] + index[static_cast<size_t>(i)];
  return flat;
}

int64_t dims_product(const Shape& shape, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= shape[i];
  return p;
}

}  // namespace detail

bool has_evaluator(OpKind op) { return detail::kernels().contains(op); }

namespace {

std::vector<Tensor> run_node(const Node& n, std::span<const Tensor> operands) {
  const detail::EvalFn* fn = detail::kernels().find(n.op);
  check(fn != nullptr,
        "reference evaluator: no kernel for op '" + std::string(op_name(n.op)) + "'");
  // Results with no elements have nothing to compute. Skipping their kernel also keeps kernels
  // from looping over, or multiplying, the dims an empty shape may have ([2^40,2^40,0] is valid).
  bool all_empty = true;
  for (const TensorType& t : n.results) all_empty = all_empty && t.shape.numel() == 0;
  if (all_empty) {
    std::vector<Tensor> empty;
    for (const TensorType& t : n.results) empty.emplace_back(t.dtype, t.shape);
    return empty;
  }
  detail::EvalContext ctx{n, operands};
  std::vector<Tensor> out = (*fn)(ctx);
  check(out.size() == n.results.size(),
        "reference evaluator: op '" + std::string(op_name(n.op)) + "' produced " +
            std::to_string(out.size()) + " results, expected " + std::to_string(n.results.size()));
  for (size_t i = 0; i < out.size(); ++i)
    check(out[i].type() == n.results[i],
          "reference evaluator: op '" + std::string(op_name(n.op)) + "' (node %" + n.name +
              ") produced " + out[i].type().to_string() + ", expected " + n.results[i].to_string());
  return out;
}

}  // namespace

namespace {

// Evaluates `g` once per device of `feeds` (one map per device): ordinary nodes per device,
// collectives across the devices of each group. `who` prefixes the feed errors.
std::vector<std::vector<Tensor>> evaluate_devices(const Graph& g,
                                                  const std::vector<TensorMap>& feeds,
                                                  const std::string& who) {
  const auto& nodes = g.nodes();
  const size_t num_devices = feeds.size();
  check(num_devices >= 1, who + ": a run needs at least one device");
  for (size_t d = 0; d < num_devices; ++d) {
    std::string on = num_devices == 1 ? "" : " (device " + std::to_string(d) + ")";
    for (const auto& [name, t] : feeds[d]) {
      int32_t id = g.find(name);
      check(id >= 0 && (g.node(id).op == OpKind::Input || g.node(id).op == OpKind::Param),
            who + ": '" + name + "' is not an input or param of graph '" + g.name() + "'" + on);
    }
  }
  // values[d][node][result]
  std::vector<std::vector<std::vector<Tensor>>> values(
      num_devices, std::vector<std::vector<Tensor>>(nodes.size()));
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.op == OpKind::Input || n.op == OpKind::Param) {
      auto kind = n.op == OpKind::Input ? "input" : "param";
      for (size_t d = 0; d < num_devices; ++d) {
        std::string on = num_devices == 1 ? "" : " (device " + std::to_string(d) + ")";
        auto it = feeds[d].find(n.name);
        check(it != feeds[d].end(), who + ": missing " + kind + " '" + n.name + "' of type " +
                                        n.results[0].to_string() + on);
        check(it->second.type() == n.results[0], who + ": " + kind + " '" + n.name + "' expects " +
                                                     n.results[0].to_string() + ", got " +
                                                     it->second.type().to_string() + on);
        values[d][i] = {it->second};
      }
      continue;
    }
    auto operand = [&](size_t d, Value v) -> const Tensor& {
      return values[d][static_cast<size_t>(v.node)][static_cast<size_t>(v.index)];
    };
    if (op_info(n.op).has(kCollective)) {
      std::vector<Tensor> per_device;
      for (size_t d = 0; d < num_devices; ++d) per_device.push_back(operand(d, n.operands[0]));
      std::vector<Tensor> rs = detail::eval_collective(n, per_device);
      for (size_t d = 0; d < num_devices; ++d) values[d][i] = {rs[d]};
      continue;
    }
    for (size_t d = 0; d < num_devices; ++d) {
      std::vector<Tensor> operands;
      operands.reserve(n.operands.size());
      for (Value v : n.operands) operands.push_back(operand(d, v));
      values[d][i] = run_node(n, operands);
    }
  }
  // Tensor copies share storage. An output that is a feed or a constant is cloned, so writing
  // to a returned tensor can never modify the caller's feeds or the graph's constants.
  std::vector<std::vector<Tensor>> out(num_devices);
  for (size_t d = 0; d < num_devices; ++d)
    for (Value v : g.outputs()) {
      const Tensor& t = values[d][static_cast<size_t>(v.node)][static_cast<size_t>(v.index)];
      OpKind op = g.node(v).op;
      bool shared = op == OpKind::Input || op == OpKind::Param || op == OpKind::Constant;
      out[d].push_back(shared ? t.clone() : t);
    }
  return out;
}

}  // namespace

std::vector<Tensor> evaluate(const Graph& g, const TensorMap& feeds) {
  return std::move(evaluate_devices(g, {feeds}, "evaluate")[0]);
}

std::vector<std::vector<Tensor>> evaluate_spmd(const Graph& g,
                                               const std::vector<TensorMap>& feeds) {
  return evaluate_devices(g, feeds, "evaluate_spmd");
}

std::vector<Tensor> evaluate_op(OpKind op, const std::vector<Tensor>& operands,
                                const AttrMap& attrs) {
  Graph g("op");
  std::vector<Value> vs;
  for (size_t i = 0; i < operands.size(); ++i)
    vs.push_back(g.input("x" + std::to_string(i), operands[i].dtype(), operands[i].shape()));
  auto rs = g.emit(op, vs, attrs);
  return run_node(g.node(rs[0]), operands);
}

}  // namespace rlx
