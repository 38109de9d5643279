// vmap driver: the batching-rule table, the batching interpreter (rule or decomposition per
// node), argument checking and the movement of batch axes at inputs and outputs.
#include "rlx/autodiff/vmap.h"

#include <numeric>

#include "rlx/ir/custom_op.h"
#include "rlx/ir/error.h"
#include "rlx/ir/op_table.h"
#include "rlx/opt/decompose.h"
#include "rlx/opt/passes.h"
#include "vmap_rules.h"

namespace rlx::autodiff {
namespace vmap_detail {
namespace {

OpTable<BatchFn>& rules() {
  static OpTable<BatchFn> t("vmap batching rule table", [](OpTable<BatchFn>&) {
    register_batch_elementwise();
    register_batch_shape();
    register_batch_nn();
    register_batch_quant();
    register_batch_collective();
    register_batch_control_flow();
    register_batch_custom();
  });
  return t;
}

}  // namespace

void set_batch_rule(OpKind op, BatchFn fn) { rules().set(op, fn); }
BatchFn batch_rule(OpKind op) {
  const BatchFn* fn = rules().find(op);
  return fn ? *fn : nullptr;
}

Value broadcast_batch(Graph& g, Value v, int64_t size) {
  std::vector<int64_t> shape = g.shape(v).dims();
  std::vector<int64_t> dims(shape.size());
  std::iota(dims.begin(), dims.end(), 1);
  shape.insert(shape.begin(), size);
  return g.broadcast_in_dim(v, shape, dims);
}

Value move_axis(Graph& g, Value v, int from, int to) {
  if (from == to) return v;
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < g.shape(v).rank(); ++d)
    if (d != from) perm.push_back(d);
  perm.insert(perm.begin() + to, from);
  return g.transpose(v, perm);
}

int64_t shift_axis(int64_t axis, int unbatched_rank) {
  return Shape(std::vector<int64_t>(static_cast<size_t>(unbatched_rank), 1)).normalize_axis(axis) +
         1;
}

Value fold_batch(Graph& g, Value v) {
  std::vector<int64_t> s = g.shape(v).dims();
  s[1] *= s[0];
  s.erase(s.begin());
  return g.reshape(v, s);
}

Value unfold_batch(Graph& g, Value v, int64_t size) {
  std::vector<int64_t> s = g.shape(v).dims();
  s[0] /= size;
  s.insert(s.begin(), size);
  return g.reshape(v, s);
}

TensorType BatchContext::unbatched_type(size_t i) const {
  TensorType t = g.type(in[i].v);
  if (in[i].batched) t.shape.dims().erase(t.shape.dims().begin());
  return t;
}

Value BatchContext::batched(size_t i) {
  return in[i].batched ? in[i].v : broadcast_batch(g, in[i].v, size);
}

std::vector<BVal> BatchContext::emit_batched(std::vector<Value> operands, AttrMap attrs) {
  std::vector<BVal> out;
  for (Value r : g.emit(node.op, std::move(operands), std::move(attrs), node.name))
    out.push_back({r, true});
  return out;
}

std::string node_ref(const Node& n) {
  return "op '" + std::string(op_name(n.op)) + "' (node %" + n.name + ")";
}

// The batching interpreter: emits into `g` the batched form of every node of `src` after its
// leaves, given the batched values of src's leaves (`env` holds them by node id); returns the
// batched values of src's outputs.
class Batcher {
 public:
  Batcher(Graph& g, int64_t size) : g_(g), size_(size) {}

  std::vector<BVal> run(const Graph& src, std::vector<std::vector<BVal>>& env) {
    for (size_t id = 0; id < src.nodes().size(); ++id) {
      const Node& n = src.nodes()[id];
      if (!env[id].empty()) continue;  // a leaf bound by the caller
      std::vector<BVal> ops;
      bool any = false;
      for (Value v : n.operands) {
        ops.push_back(env[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)]);
        any = any || ops.back().batched;
      }
      env[id] = any ? batch_node(n, std::move(ops)) : copy_node(n, ops);
    }
    std::vector<BVal> out;
    for (Value v : src.outputs())
      out.push_back(env[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)]);
    return out;
  }

 private:
  // No operand is batched: the node is the same computation for every example.
  std::vector<BVal> copy_node(const Node& n, const std::vector<BVal>& ops) {
    std::vector<Value> vs;
    for (const BVal& b : ops) vs.push_back(b.v);
    std::vector<BVal> out;
    for (Value r : g_.emit(n.op, std::move(vs), n.attrs, n.name)) out.push_back({r, false});
    return out;
  }

  std::vector<BVal> batch_node(const Node& n, std::vector<BVal> ops) {
    if (BatchFn fn = batch_rule(n.op)) {
      BatchContext ctx{g_, size_, n, ops};
      if (std::optional<std::vector<BVal>> r = fn(ctx)) return *r;
    }
    if (n.op == OpKind::CustomCall)
      check(has_decomposition(n), "vmap: custom op '" + custom_op_of(n).name + "' (node %" +
                                      n.name + ") has no batching rule and no decomposition");
    check(has_decomposition(n), "vmap: no batching rule for " + node_ref(n));
    // Decompose the node in a scratch graph over its unbatched operand types, then batch that.
    Graph sub("vmap_" + std::string(op_name(n.op)));
    std::vector<Value> leaves;
    for (size_t i = 0; i < ops.size(); ++i) {
      TensorType t = g_.type(ops[i].v);
      if (ops[i].batched) t.shape.dims().erase(t.shape.dims().begin());
      leaves.push_back(sub.input("x" + std::to_string(i), t.dtype, t.shape));
    }
    sub.set_outputs(decompose_node(sub, n, leaves));
    std::vector<std::vector<BVal>> env(sub.nodes().size());
    for (size_t i = 0; i < ops.size(); ++i) env[static_cast<size_t>(leaves[i].node)] = {ops[i]};
    return run(sub, env);
  }

  Graph& g_;
  int64_t size_;
};

}  // namespace vmap_detail

BatchSupport batch_support(OpKind op) {
  const OpInfo& info = op_info(op);
  if (info.has(kLeaf)) return BatchSupport::Leaf;
  if (vmap_detail::batch_rule(op) != nullptr) return BatchSupport::Rule;
  if (info.has(kComposite) && has_decomposition(op)) return BatchSupport::Decomposition;
  return BatchSupport::Missing;
}

const char* batch_support_name(BatchSupport s) {
  switch (s) {
    case BatchSupport::Leaf:
      return "leaf";
    case BatchSupport::Rule:
      return "rule";
    case BatchSupport::Decomposition:
      return "decomposition";
    case BatchSupport::Missing:
      break;
  }
  return "MISSING";
}

namespace {

using vmap_detail::BVal;

// Normalizes a batch axis for a value of unbatched rank `rank` (the batched rank is rank + 1).
int64_t batch_axis(int64_t axis, int rank, const std::string& what) {
  check(axis >= -(rank + 1) && axis <= rank,
        "vmap: " + what + " axis " + std::to_string(axis) + " is out of range for rank " +
            std::to_string(rank) + " (allowed: " + std::to_string(-(rank + 1)) + ".." +
            std::to_string(rank) + ")");
  return axis < 0 ? axis + rank + 1 : axis;
}

}  // namespace

Graph vmap(const Graph& g, const std::vector<BatchAxis>& in_axes,
           const std::vector<BatchAxis>& out_axes, int64_t batch_size,
           const std::map<std::string, int64_t>& param_axes) {
  const std::vector<int32_t> inputs = g.inputs();
  check(in_axes.size() == inputs.size(), "vmap: in_axes has " + std::to_string(in_axes.size()) +
                                             " entries but graph @" + g.name() + " has " +
                                             std::to_string(inputs.size()) + " inputs");
  check(out_axes.empty() || out_axes.size() == g.outputs().size(),
        "vmap: out_axes has " + std::to_string(out_axes.size()) + " entries but graph @" +
            g.name() + " has " + std::to_string(g.outputs().size()) + " outputs");
  check(batch_size >= 1, "vmap: batch_size must be >= 1, got " + std::to_string(batch_size));
  for (const auto& [name, axis] : param_axes) {
    int32_t id = g.find(name);
    check(id >= 0 && g.node(id).op == OpKind::Param,
          "vmap: param_axes names '" + name + "', which is not a param of graph @" + g.name());
  }

  // Batch axis per leaf node id: inputs by position, params by name.
  std::vector<std::optional<int64_t>> axis_of(g.nodes().size());
  auto bind = [&](int32_t id, int64_t axis, const std::string& what) {
    const Node& n = g.node(id);
    axis_of[static_cast<size_t>(id)] =
        batch_axis(axis, n.results[0].shape.rank(),
                   what + " '" + n.name + "' (" + n.results[0].to_string() + ")");
  };
  for (size_t i = 0; i < inputs.size(); ++i)
    if (in_axes[i]) bind(inputs[i], *in_axes[i], "in_axes[" + std::to_string(i) + "] of input");
  for (const auto& [name, axis] : param_axes) bind(g.find(name), axis, "param_axes of param");

  // Leaves first, in g's order and with g's names, so the result's feeds are g's feeds; each
  // batched leaf is then moved to the canonical batch-at-0 layout.
  Graph out(g.name() + ".vmap");
  std::vector<std::vector<BVal>> env(g.nodes().size());
  for (size_t id = 0; id < g.nodes().size(); ++id) {
    const Node& n = g.nodes()[id];
    if (n.op != OpKind::Input && n.op != OpKind::Param) continue;
    TensorType t = n.results[0];
    const std::optional<int64_t>& a = axis_of[id];
    if (a) t.shape.dims().insert(t.shape.dims().begin() + *a, batch_size);
    Value leaf = out.add_leaf(n.op, n.name, t);
    env[id] = {a ? BVal{vmap_detail::move_axis(out, leaf, static_cast<int>(*a), 0), true}
                 : BVal{leaf, false}};
  }
  vmap_detail::Batcher batcher(out, batch_size);
  std::vector<BVal> results = batcher.run(g, env);

  std::vector<Value> outs;
  for (size_t j = 0; j < results.size(); ++j) {
    const int rank = g.shape(g.outputs()[j]).rank();
    const std::string what = "out_axes[" + std::to_string(j) + "] of output " + std::to_string(j) +
                             " (" + g.type(g.outputs()[j]).to_string() + ")";
    BatchAxis want = out_axes.empty() ? BatchAxis{0} : out_axes[j];
    if (!want) {
      check(!results[j].batched,
            "vmap: " + what + " is None, but the output depends on a batched value");
      outs.push_back(results[j].v);
      continue;
    }
    int64_t a = batch_axis(*want, rank, what);
    Value v = results[j].batched ? results[j].v
                                 : vmap_detail::broadcast_batch(out, results[j].v, batch_size);
    outs.push_back(vmap_detail::move_axis(out, v, 0, static_cast<int>(a)));
  }
  out.set_outputs(outs);
  create_dce_pass()->run(out);  // the moves of unused leaves, broadcasts of dead values
  return out;
}

}  // namespace rlx::autodiff
