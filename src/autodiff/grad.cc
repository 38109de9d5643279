// Reverse-mode transform: the vjp rule table, the backward sweep, and grad / value_and_grad /
// vjp on top of it.
#include "rlx/autodiff/grad.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "rlx/ir/custom_op.h"
#include "rlx/ir/error.h"
#include "rlx/ir/op_table.h"
#include "rlx/opt/decompose.h"
#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"
#include "rules.h"

namespace rlx::autodiff {
namespace detail {
namespace {

OpTable<VjpFn>& rules() {
  static OpTable<VjpFn> t("vjp rule table", [](OpTable<VjpFn>&) {
    register_vjp_elementwise();
    register_vjp_linalg();
    register_vjp_reduce();
    register_vjp_shape();
    register_vjp_nn();
    register_vjp_collective();
    register_vjp_control_flow();
    register_vjp_custom();
  });
  return t;
}

// The explicit list of ops whose cotangent is zero (JAX gives these zero or integer-valued
// tangents): comparisons and logic, index-valued reductions, piecewise-constant rounding, and
// stop_gradient, whose whole point is to cut the gradient; dequantize, whose operand is packed
// integer data (its f32 result is a constant of the weight bytes, so no float input reaches it);
// threefry2x32, whose operands and results are integer words (random bits).
// The coverage test requires every op to be here or to have a rule or a decomposition.
constexpr OpKind kNonDifferentiable[] = {
    OpKind::Not,    OpKind::And,          OpKind::Or,         OpKind::Xor,         OpKind::Eq,
    OpKind::Ne,     OpKind::Lt,           OpKind::Le,         OpKind::Gt,          OpKind::Ge,
    OpKind::ArgMax, OpKind::ArgMin,       OpKind::Sign,       OpKind::Floor,       OpKind::Ceil,
    OpKind::Round,  OpKind::StopGradient, OpKind::Dequantize, OpKind::Threefry2x32};

}  // namespace

void set_vjp(OpKind op, VjpFn fn) { rules().set(op, fn); }
VjpFn vjp_rule(OpKind op) {
  const VjpFn* fn = rules().find(op);
  return fn ? *fn : nullptr;
}
bool is_non_differentiable(OpKind op) {
  for (OpKind k : kNonDifferentiable)
    if (k == op) return true;
  return false;
}

Value VjpContext::ct(size_t i) {
  if (!cts[i].valid()) cts[i] = zeros(g, result_type(i));
  return cts[i];
}

}  // namespace detail

using detail::VjpContext;

VjpSupport vjp_support(OpKind op) {
  const OpInfo& info = op_info(op);
  if (info.has(kLeaf)) return VjpSupport::Leaf;
  if (detail::is_non_differentiable(op)) return VjpSupport::NonDifferentiable;
  if (detail::vjp_rule(op) != nullptr) return VjpSupport::Rule;
  if (info.has(kComposite) && has_decomposition(op)) return VjpSupport::Decomposition;
  return VjpSupport::Missing;
}

const char* vjp_support_name(VjpSupport s) {
  switch (s) {
    case VjpSupport::Leaf:
      return "leaf";
    case VjpSupport::Rule:
      return "rule";
    case VjpSupport::Decomposition:
      return "decomposition";
    case VjpSupport::NonDifferentiable:
      return "non-differentiable";
    case VjpSupport::Missing:
      break;
  }
  return "MISSING";
}

namespace {

std::string node_ref(const Node& n) {
  return "op '" + std::string(op_name(n.op)) + "' (node %" + n.name + ")";
}

// Node ids of the `wrt` leaves of g, checked: known, unique, float.
std::vector<int32_t> resolve_wrt(const Graph& g, const std::vector<std::string>& wrt) {
  std::vector<int32_t> ids;
  std::set<std::string> seen;
  for (const std::string& name : wrt) {
    check(seen.insert(name).second, "grad: '" + name + "' appears twice in wrt");
    int32_t id = g.find(name);
    bool leaf = id >= 0 && (g.node(id).op == OpKind::Input || g.node(id).op == OpKind::Param);
    if (!leaf) {
      std::string known;
      for (const auto& ids_of : {g.inputs(), g.params()})
        for (int32_t k : ids_of) known += (known.empty() ? "" : ", ") + g.node(k).name;
      throw Error("grad: no input or param named '" + name + "' in graph @" + g.name() +
                  " (inputs and params: " + (known.empty() ? "none" : known) + ")");
    }
    const TensorType& t = g.node(id).results[0];
    check(is_float(t.dtype), "grad: cannot differentiate with respect to '" + name + "' of type " +
                                 t.to_string() + ": only float inputs and params have gradients");
    ids.push_back(id);
  }
  return ids;
}

// Keep composites that have their own rule or are non-differentiable, and leaves (rng_key's
// key is the compile seed's, bound when the result is compiled); decompose the rest so every
// remaining op has a rule (or contributes zero).
bool keep_for_ad(OpKind op) {
  return detail::vjp_rule(op) != nullptr || detail::is_non_differentiable(op) ||
         op_info(op).has(kLeaf);
}
// Per node: a custom op is kept when it has a vjp rule (or nothing to decompose, so that its
// rule reports the error), else its decomposition is differentiated.
bool keep_node_for_ad(const Node& n) {
  if (n.op != OpKind::CustomCall) return keep_for_ad(n.op);
  const CustomOpDef& def = custom_op_of(n);
  return def.vjp || !def.decompose;
}

// The backward sweep over the nodes of g: seeds give the cotangents of some values; returns
// d/d v for each value of `wrt` (zeros when nothing reaches it). Nodes in `cut` are treated
// as leaves: nothing flows through them, and their results may be among `wrt`.
// Rules that recompute a node's results in their own forward pass report it in `recomputed`.
std::vector<Value> backprop(Graph& g, const std::vector<std::pair<Value, Value>>& seeds,
                            const std::vector<Value>& wrt, const GradOptions& options,
                            std::vector<detail::Recomputed>& recomputed,
                            const std::set<int32_t>& cut = {}) {
  const size_t n = g.nodes().size();
  // A value is active when it is a float that depends on a wrt value: only those carry
  // cotangents (integer paths, e.g. indices, never do).
  std::vector<std::vector<bool>> active(n);
  std::set<std::pair<int32_t, int32_t>> is_wrt;
  for (Value v : wrt) is_wrt.insert({v.node, v.index});
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes()[i];
    bool any = false;
    if (!detail::is_non_differentiable(node.op) && cut.count(static_cast<int32_t>(i)) == 0)
      for (Value v : node.operands)
        any = any || active[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)];
    active[i].resize(node.results.size());
    for (size_t r = 0; r < node.results.size(); ++r)
      active[i][r] = (any || is_wrt.count({static_cast<int32_t>(i), static_cast<int32_t>(r)})) &&
                     is_float(node.results[r].dtype);
  }
  std::vector<std::vector<Value>> cts(n);
  for (size_t i = 0; i < n; ++i) cts[i].resize(g.nodes()[i].results.size());
  auto accumulate = [&](Value v, Value ct) {
    Value& slot = cts[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)];
    slot = slot.valid() ? g.add(slot, ct) : ct;
  };
  for (const auto& [v, ct] : seeds)
    if (active[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)]) accumulate(v, ct);

  for (size_t i = n; i-- > 0;) {
    Node node = g.nodes()[i];  // a copy: rules append to the node list
    if (op_info(node.op).has(kLeaf) || detail::is_non_differentiable(node.op) ||
        cut.count(static_cast<int32_t>(i)) != 0)
      continue;
    bool has_ct = false;
    for (Value c : cts[i]) has_ct = has_ct || c.valid();
    if (!has_ct) continue;
    VjpContext ctx{g, node, node.operands, {}, cts[i], {}, options, &recomputed};
    bool any_wanted = false;
    for (Value v : node.operands) {
      bool w = active[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)];
      ctx.wants.push_back(w);
      any_wanted = any_wanted || w;
    }
    if (!any_wanted) continue;
    for (size_t r = 0; r < node.results.size(); ++r)
      ctx.results.push_back(Value{static_cast<int32_t>(i), static_cast<int32_t>(r)});
    detail::VjpFn fn = detail::vjp_rule(node.op);
    // Composites without a rule were decomposed by prepare(); rules emit only ops with rules
    // (so jvp's second sweep over a backward graph needs no decomposition either).
    check(fn != nullptr, "grad: " + node_ref(node) + " has no vjp rule");
    std::vector<Value> grads = fn(ctx);
    check(grads.size() == node.operands.size(),
          "grad: the vjp rule of " + node_ref(node) + " returned " + std::to_string(grads.size()) +
              " cotangents for " + std::to_string(node.operands.size()) + " operands");
    for (size_t k = 0; k < grads.size(); ++k) {
      if (!grads[k].valid() || !ctx.wants[k]) continue;
      check(g.type(grads[k]) == g.type(node.operands[k]),
            "grad: the vjp rule of " + node_ref(node) + " gave " + g.type(grads[k]).to_string() +
                " for operand " + std::to_string(k) + " of type " +
                g.type(node.operands[k]).to_string());
      accumulate(node.operands[k], grads[k]);
    }
  }
  std::vector<Value> out;
  for (Value v : wrt) {
    Value c = cts[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)];
    out.push_back(c.valid() ? c : detail::zeros(g, g.type(v)));
  }
  return out;
}

std::vector<Value> leaf_values(const std::vector<int32_t>& ids) {
  std::vector<Value> out;
  for (int32_t id : ids) out.push_back(Value{id, 0});
  return out;
}

// g decomposed for differentiation, with the loss appended as its last output.
Graph prepare(const Graph& g, const LossSpec& loss, bool require_scalar) {
  Graph fwd = g;
  std::vector<Value> outs = fwd.outputs();
  Value lv = loss.value;
  if (!lv.valid()) {
    check(loss.output >= 0 && static_cast<size_t>(loss.output) < outs.size(),
          "grad: loss output index " + std::to_string(loss.output) + " is out of range: graph @" +
              g.name() + " has " + std::to_string(outs.size()) + " outputs");
    lv = outs[static_cast<size_t>(loss.output)];
  } else {
    check(lv.node >= 0 && static_cast<size_t>(lv.node) < g.nodes().size() && lv.index >= 0 &&
              static_cast<size_t>(lv.index) < g.node(lv.node).results.size(),
          "grad: the loss value %" + std::to_string(lv.node) + "#" + std::to_string(lv.index) +
              " is not a value of graph @" + g.name());
  }
  if (require_scalar) {
    const TensorType& t = g.type(lv);
    check(is_float(t.dtype) && t.shape.rank() == 0,
          "grad: the loss must be a scalar float (rank 0), found " + t.to_string() + " (node %" +
              g.node(lv).name + ")");
  }
  outs.push_back(lv);
  fwd.set_outputs(outs);
  return decompose_nodes(fwd, keep_node_for_ad);
}

void dce(Graph& g) { create_dce_pass()->run(g); }

// The nodes after `node` that `values` depend on, in order, or nullopt when one of them is
// `node` itself or a leaf (then the values cannot take its place).
std::optional<std::vector<int32_t>> needed_after(const Graph& g, int32_t node,
                                                 const std::vector<Value>& values) {
  std::set<int32_t> seen;
  std::vector<int32_t> todo;
  for (Value v : values) todo.push_back(v.node);
  while (!todo.empty()) {
    const int32_t id = todo.back();
    todo.pop_back();
    if (id < node || !seen.insert(id).second) continue;
    const OpKind op = g.node(id).op;
    if (id == node || op == OpKind::Input || op == OpKind::Param) return std::nullopt;
    for (Value v : g.node(id).operands) todo.push_back(v.node);
  }
  return std::vector<int32_t>(seen.begin(), seen.end());
}

// Runs each recomputed node's forward once: the nodes a rule emitted to recompute node p's
// results (they depend only on values before p) move to p's place, p's uses read their values
// and p is dropped; the nodes that give p's results take its name. A node recomputed twice (jvp
// transposes more than once) keeps the first.
Graph use_recomputed(const Graph& g, const std::vector<detail::Recomputed>& recomputed) {
  std::map<int32_t, std::pair<std::vector<int32_t>, std::vector<Value>>> at;  // p -> nodes, values
  for (const detail::Recomputed& r : recomputed) {
    if (at.count(r.node)) continue;
    if (auto nodes = needed_after(g, r.node, r.values)) at[r.node] = {*nodes, r.values};
  }
  if (at.empty()) return g;
  std::map<int32_t, std::vector<Value>> moved;  // source node -> its values in the result
  const RewriteFn fn = [&](RewriteContext& ctx, const Node&,
                           std::span<const Value>) -> std::optional<std::vector<Value>> {
    if (auto m = moved.find(ctx.id); m != moved.end()) return m->second;
    auto it = at.find(ctx.id);
    if (it == at.end()) return std::nullopt;
    auto value = [&](Value v) {
      return v.node < ctx.id ? ctx.mapped(v) : moved.at(v.node)[static_cast<size_t>(v.index)];
    };
    for (int32_t id : it->second.first) {
      if (moved.count(id)) continue;
      const Node& n = g.node(id);
      std::vector<Value> operands;
      for (Value v : n.operands) operands.push_back(value(v));
      // A node giving p's results takes p's name, which output naming then sees as before.
      bool gives = false;
      for (Value v : it->second.second) gives = gives || v.node == id;
      moved[id] =
          ctx.dst.emit(n.op, std::move(operands), n.attrs, gives ? g.node(ctx.id).name : n.name);
    }
    std::vector<Value> out;
    for (Value v : it->second.second) out.push_back(value(v));
    return out;
  };
  return rewrite(g, fn);
}

// Names the outputs of a transform's result, so that executables report them as "loss",
// "grad_w", ... rather than node numbers. `names[i]` is output i's name; `numbered_only[i]`
// keeps a name the user gave (only a number the builder assigned is replaced). Inputs and
// params keep their feed names, and a node that is already an earlier output keeps the name
// it got there (one node has one name).
void name_outputs(Graph& g, const std::vector<std::string>& names,
                  const std::vector<bool>& numbered_only) {
  std::set<int32_t> named;
  for (size_t i = 0; i < g.outputs().size() && i < names.size(); ++i) {
    const Value v = g.outputs()[i];
    const Node& n = g.node(v);
    if (!named.insert(v.node).second || n.op == OpKind::Input || n.op == OpKind::Param) continue;
    const bool numbered = !n.name.empty() && std::all_of(n.name.begin(), n.name.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (numbered_only[i] && !numbered) continue;
    g.rename(v.node, names[i]);
  }
}

// Names for the forward outputs [0, count) of g as value_and_grad / vjp / jvp keep them: the
// loss (index `loss`, or none when -1) "loss", the others "out_<i>"; only numbered ones change.
void forward_names(size_t count, int loss, std::vector<std::string>& names,
                   std::vector<bool>& numbered_only) {
  for (size_t i = 0; i < count; ++i) {
    names.push_back(static_cast<int>(i) == loss ? "loss" : "out_" + std::to_string(i));
    numbered_only.push_back(true);
  }
}

// The name of the gradient-like output for leaf `wrt` ("grad", "w" -> "grad_w").
void derivative_names(const std::string& prefix, const std::vector<std::string>& wrt,
                      std::vector<std::string>& names, std::vector<bool>& numbered_only) {
  for (const std::string& w : wrt) {
    names.push_back(prefix + "_" + w);
    numbered_only.push_back(false);
  }
}

}  // namespace

Graph value_and_grad(const Graph& g, const std::vector<std::string>& wrt, LossSpec loss,
                     const GradOptions& options) {
  resolve_wrt(g, wrt);  // errors name the caller's graph
  Graph out = prepare(g, loss, true);
  std::vector<int32_t> ids = resolve_wrt(out, wrt);
  std::vector<Value> outs = out.outputs();
  Value lv = outs.back();
  outs.pop_back();
  std::vector<detail::Recomputed> rec;
  std::vector<Value> grads =
      backprop(out, {{lv, out.scalar(1.0, out.dtype(lv))}}, leaf_values(ids), options, rec);
  const size_t num_forward = outs.size();
  outs.insert(outs.end(), grads.begin(), grads.end());
  out.set_outputs(outs);
  out = use_recomputed(out, rec);
  std::vector<std::string> names;
  std::vector<bool> numbered_only;
  forward_names(num_forward, loss.value.valid() ? -1 : loss.output, names, numbered_only);
  derivative_names("grad", wrt, names, numbered_only);
  name_outputs(out, names, numbered_only);
  dce(out);
  return out;
}

Graph grad(const Graph& g, const std::vector<std::string>& wrt, LossSpec loss,
           const GradOptions& options) {
  resolve_wrt(g, wrt);
  Graph out = prepare(g, loss, true);
  std::vector<int32_t> ids = resolve_wrt(out, wrt);
  Value lv = out.outputs().back();
  std::vector<Value> outs{lv};
  std::vector<detail::Recomputed> rec;
  for (Value v :
       backprop(out, {{lv, out.scalar(1.0, out.dtype(lv))}}, leaf_values(ids), options, rec))
    outs.push_back(v);
  out.set_outputs(outs);
  out = use_recomputed(out, rec);
  std::vector<std::string> names;
  std::vector<bool> numbered_only;
  forward_names(1, 0, names, numbered_only);
  derivative_names("grad", wrt, names, numbered_only);
  name_outputs(out, names, numbered_only);
  dce(out);
  return out;
}

Graph vjp(const Graph& g, const std::vector<std::string>& wrt, const GradOptions& options) {
  resolve_wrt(g, wrt);
  check(!g.outputs().empty(), "grad: graph @" + g.name() + " has no outputs to differentiate");
  Graph out = prepare(g, 0, false);
  std::vector<int32_t> ids = resolve_wrt(out, wrt);
  std::vector<Value> outs = out.outputs();
  outs.pop_back();
  std::vector<std::pair<Value, Value>> seeds;
  for (size_t i = 0; i < outs.size(); ++i) {
    TensorType t = out.type(outs[i]);
    if (!is_float(t.dtype)) continue;
    seeds.emplace_back(outs[i], out.input("ct." + std::to_string(i), t.dtype, t.shape));
  }
  std::vector<detail::Recomputed> rec;
  std::vector<Value> grads = backprop(out, seeds, leaf_values(ids), options, rec);
  const size_t num_forward = outs.size();
  outs.insert(outs.end(), grads.begin(), grads.end());
  out.set_outputs(outs);
  out = use_recomputed(out, rec);
  std::vector<std::string> names;
  std::vector<bool> numbered_only;
  forward_names(num_forward, -1, names, numbered_only);
  derivative_names("vjp", wrt, names, numbered_only);
  name_outputs(out, names, numbered_only);
  dce(out);
  return out;
}

namespace {

// J t for each of `values` of g (zeros for a value nothing reaches), t the tangents of the
// `wrt` values (tangents[i] for wrt[i], values of g), by transposition: the vjp u -> J^T u is
// built for a stand-in u per value, then its own vjp with cotangent t, taken with respect to
// u, is J t. `cut` nodes are leaves (their results, among wrt, carry given tangents).
std::vector<Value> transposed_jvp(Graph& g, const std::vector<Value>& values,
                                  const std::vector<Value>& wrt, const std::vector<Value>& tangents,
                                  const std::set<int32_t>& cut,
                                  std::vector<detail::Recomputed>& rec) {
  // u only needs a node to hang its cotangent on: J^T u is linear in u, so the final J t never
  // reads u's value, and DCE then removes it (an input would stay and have to be fed).
  std::vector<Value> us;
  std::vector<std::pair<Value, Value>> seeds;
  for (Value v : values) {
    us.push_back(detail::zeros(g, g.type(v)));
    seeds.emplace_back(v, us.back());
  }
  std::vector<Value> jt_u = backprop(g, seeds, wrt, {}, rec, cut);
  std::vector<std::pair<Value, Value>> tseeds;
  for (size_t i = 0; i < wrt.size(); ++i) tseeds.emplace_back(jt_u[i], tangents[i]);
  return backprop(g, tseeds, us, {}, rec);
}

// True when `g` or a region nested in it holds a while_loop without max_trip_count.
bool holds_unbounded_while(const Graph& g);
bool regions_hold_unbounded_while(const Node& n) {
  switch (n.op) {
    case OpKind::WhileLoop:
      return holds_unbounded_while(n.attrs.get_graph("cond")) ||
             holds_unbounded_while(n.attrs.get_graph("body"));
    case OpKind::Scan:
      return holds_unbounded_while(n.attrs.get_graph("body"));
    case OpKind::Cond:
      for (const GraphRef& b : n.attrs.get_graphs("branches"))
        if (holds_unbounded_while(*b)) return true;
      return false;
    default:
      return false;
  }
}
bool holds_unbounded_while(const Graph& g) {
  for (const Node& n : g.nodes())
    if ((n.op == OpKind::WhileLoop && !n.attrs.has("max_trip_count")) ||
        regions_hold_unbounded_while(n))
      return true;
  return false;
}

// A control-flow node jvp() differentiates in forward mode: an unbounded while_loop (no vjp to
// transpose), or a loop or cond whose regions hold one (their vjp would differentiate it).
bool needs_forward_mode(const Node& n) {
  return (n.op == OpKind::WhileLoop && !n.attrs.has("max_trip_count")) ||
         regions_hold_unbounded_while(n);
}

// A region of a forward-mode node: `ts` the original region's input types, split into groups
// ending at `ends` (consts, carry, xs); each group's inputs are followed by the tangents of its
// float ones. `primal` gets the primal inputs in the original order, `tangent` the tangents.
Graph tangent_region(const std::string& name, const std::vector<TensorType>& ts,
                     const std::vector<size_t>& ends, std::vector<Value>& primal,
                     std::vector<Value>& tangent) {
  Graph r(name);
  size_t from = 0;
  for (size_t end : ends) {
    for (size_t i = from; i < end; ++i)
      primal.push_back(r.input("p" + std::to_string(i), ts[i].dtype, ts[i].shape));
    for (size_t i = from; i < end; ++i)
      if (is_float(ts[i].dtype))
        tangent.push_back(r.input("t" + std::to_string(i), ts[i].dtype, ts[i].shape));
    from = end;
  }
  return r;
}

// The region `body` with its tangents (jvp() of it, so nested loops are handled as here) in
// the layout of tangent_region: outputs the body's outputs, then the tangent of each float one.
Graph region_jvp(const Graph& body, const std::vector<size_t>& ends) {
  std::vector<TensorType> ts;
  std::vector<std::string> names;
  for (int32_t id : body.inputs()) {
    ts.push_back(body.node(id).results[0]);
    if (is_float(ts.back().dtype)) names.push_back(body.node(id).name);
  }
  std::vector<Value> primal, tangent;
  Graph r = tangent_region(body.name() + "_jvp", ts, ends, primal, tangent);
  std::vector<Value> args = primal;
  args.insert(args.end(), tangent.begin(), tangent.end());
  r.set_outputs(names.empty() ? inline_graph(r, body, primal)
                              : inline_graph(r, jvp(body, names), args));
  return r;
}

// Forward mode of a control-flow node (jax's while / scan / cond jvp rules): a node of the
// same op whose operands are grouped as tangent_region's (consts, their tangents; carry, its
// tangents; xs, theirs; a cond's index, then x and theirs) and whose regions are the regions'
// jvps; a while_loop's cond ignores the tangents. Returns the tangents of the node's float
// results (invalid for the others). `t_operands` has a tangent per float operand (invalid for
// the others).
std::vector<Value> forward_mode(Graph& g, const Node& node, const std::vector<Value>& t_operands) {
  const AttrMap& a = node.attrs;
  const size_t n = node.operands.size();
  std::vector<size_t> ends;  // operand group ends
  size_t nk = 0;             // carries (loops)
  if (node.op == OpKind::Cond) {
    ends = {1, n};
  } else {
    const auto nc = static_cast<size_t>(a.get_int("num_consts"));
    nk = node.op == OpKind::Scan ? static_cast<size_t>(a.get_int("num_carry")) : n - nc;
    ends = {nc, nc + nk};
    if (node.op == OpKind::Scan) ends.push_back(n);
  }
  std::vector<Value> operands;
  std::vector<size_t> nf;  // float operands per group
  size_t from = 0;
  for (size_t end : ends) {
    nf.push_back(0);
    for (size_t i = from; i < end; ++i) operands.push_back(node.operands[i]);
    for (size_t i = from; i < end; ++i)
      if (t_operands[i].valid()) {
        operands.push_back(t_operands[i]);
        ++nf.back();
      }
    from = end;
  }
  // Region input groups: the operand groups, a cond's branches without the index.
  const std::vector<size_t> region_ends =
      node.op == OpKind::Cond ? std::vector<size_t>{n - 1} : ends;
  AttrMap attrs = a;
  std::vector<Value> r;
  if (node.op == OpKind::Cond) {
    GraphList branches;
    for (const GraphRef& b : a.get_graphs("branches"))
      branches.push_back(std::make_shared<const Graph>(region_jvp(*b, region_ends)));
    attrs.set("branches", branches);
    r = g.emit(OpKind::Cond, operands, attrs);
  } else {
    const Graph& body = a.get_graph("body");
    Graph jb = region_jvp(body, region_ends);
    if (node.op == OpKind::Scan) {
      // jvp's outputs (carry, ys, tangents of the float ones) -> (carry, theirs, ys, theirs).
      const std::vector<Value>& o = jb.outputs();
      const size_t ny = node.results.size() - nk;
      size_t fk = 0;
      for (size_t i = 0; i < nk; ++i) fk += is_float(node.results[i].dtype) ? 1 : 0;
      std::vector<Value> outs(o.begin(), o.begin() + static_cast<ptrdiff_t>(nk));
      const auto t0 = o.begin() + static_cast<ptrdiff_t>(nk + ny);
      outs.insert(outs.end(), t0, t0 + static_cast<ptrdiff_t>(fk));
      outs.insert(outs.end(), o.begin() + static_cast<ptrdiff_t>(nk),
                  o.begin() + static_cast<ptrdiff_t>(nk + ny));
      outs.insert(outs.end(), t0 + static_cast<ptrdiff_t>(fk), o.end());
      jb.set_outputs(outs);
      attrs.set("num_carry", static_cast<int64_t>(nk + fk));
    } else {
      std::vector<TensorType> ts;
      for (int32_t id : body.inputs()) ts.push_back(body.node(id).results[0]);
      std::vector<Value> cp, ct;
      const Graph& cond = a.get_graph("cond");
      Graph c2 = tangent_region(cond.name() + "_jvp", ts, region_ends, cp, ct);
      c2.set_outputs(inline_graph(c2, cond, cp));
      attrs.set("cond", std::make_shared<const Graph>(std::move(c2)));
    }
    attrs.set("num_consts", static_cast<int64_t>(ends[0] + nf[0]));
    attrs.set("body", std::make_shared<const Graph>(std::move(jb)));
    r = g.emit(node.op, operands, attrs);
  }
  // r holds, group by group (a scan's carry, then its ys; the others' results), the primal
  // results and then the tangents of the float ones.
  std::vector<Value> out(node.results.size());
  std::vector<size_t> groups{node.results.size()};
  if (node.op == OpKind::Scan) groups = {nk, node.results.size()};
  size_t at = 0, first = 0;
  for (size_t end : groups) {
    at += end - first;
    for (size_t i = first; i < end; ++i)
      if (is_float(node.results[i].dtype)) out[i] = r[at++];
    first = end;
  }
  return out;
}

}  // namespace

Graph jvp(const Graph& g, const std::vector<std::string>& primals) {
  resolve_wrt(g, primals);
  check(!g.outputs().empty(), "grad: graph @" + g.name() + " has no outputs to differentiate");
  Graph out = prepare(g, 0, false);
  std::vector<int32_t> ids = resolve_wrt(out, primals);
  std::vector<Value> outs = out.outputs();
  outs.pop_back();
  std::vector<Value> wrt = leaf_values(ids), tangents;
  for (size_t i = 0; i < ids.size(); ++i) {
    const TensorType t = out.node(ids[i]).results[0];
    tangents.push_back(out.input("tangent." + primals[i], t.dtype, t.shape));
  }
  // A while_loop without max_trip_count has no vjp, nor has a scan, cond or loop whose regions
  // hold one: such a node is cut from the transposition, its result tangents computed in
  // forward mode from its operands' tangents (in node order, so a node's operands may depend
  // on earlier ones).
  std::set<int32_t> cut;
  std::vector<detail::Recomputed> rec;
  const size_t num_forward = out.nodes().size();
  for (size_t i = 0; i < num_forward; ++i) {
    Node node = out.nodes()[i];
    if (!needs_forward_mode(node)) continue;
    std::vector<Value> float_ops;
    for (Value v : node.operands)
      if (is_float(out.dtype(v))) float_ops.push_back(v);
    if (float_ops.empty()) continue;  // nothing to carry a tangent
    std::vector<Value> t_float = transposed_jvp(out, float_ops, wrt, tangents, cut, rec);
    std::vector<Value> t_ops;
    size_t k = 0;
    for (Value v : node.operands) t_ops.push_back(is_float(out.dtype(v)) ? t_float[k++] : Value{});
    std::vector<Value> t_res = forward_mode(out, node, t_ops);
    cut.insert(static_cast<int32_t>(i));
    for (size_t r = 0; r < t_res.size(); ++r) {
      if (!t_res[r].valid()) continue;
      wrt.push_back(Value{static_cast<int32_t>(i), static_cast<int32_t>(r)});
      tangents.push_back(t_res[r]);
    }
  }
  std::vector<Value> float_outs;
  std::vector<std::string> names;
  std::vector<bool> numbered_only;
  forward_names(outs.size(), -1, names, numbered_only);
  for (size_t i = 0; i < outs.size(); ++i)  // J t of each float output i: "jvp_<i>"
    if (is_float(out.type(outs[i]).dtype)) {
      float_outs.push_back(outs[i]);
      names.push_back("jvp_" + std::to_string(i));
      numbered_only.push_back(false);
    }
  std::vector<Value> jt = transposed_jvp(out, float_outs, wrt, tangents, cut, rec);
  outs.insert(outs.end(), jt.begin(), jt.end());
  out.set_outputs(outs);
  out = use_recomputed(out, rec);
  name_outputs(out, names, numbered_only);
  dce(out);
  return out;
}

Graph hvp(const Graph& g, const std::vector<std::string>& wrt, LossSpec loss) {
  Graph dg = grad(g, wrt, loss);  // outputs: loss, d/d wrt_i
  Graph j = jvp(dg, wrt);         // outputs: loss, grads, then tangents of loss and grads
  std::vector<Value> outs = j.outputs();
  const size_t n = wrt.size();
  std::vector<Value> picked{outs[0]};
  for (size_t i = 0; i < n; ++i) picked.push_back(outs[n + 2 + i]);
  j.set_outputs(picked);
  std::vector<std::string> names{"loss"};
  std::vector<bool> numbered_only{true};
  derivative_names("hvp", wrt, names, numbered_only);
  name_outputs(j, names, numbered_only);
  dce(j);
  return j;
}

}  // namespace rlx::autodiff
