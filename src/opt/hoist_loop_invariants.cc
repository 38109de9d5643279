// "hoist-loop-invariants": loop-invariant code motion out of while_loop / scan bodies (as XLA's
// WhileLoopInvariantCodeMotion) and step-independent hoisting of scan bodies (a value that
// depends only on the step's xs slices and invariants is computed for every step at once before
// the loop and fed back as a new xs).
#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rlx/ir/error.h"
#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

/// What a body value depends on: invariants only (consts, constants), the step's xs slices
/// (and invariants) but no carry, or a carry / something impure.
enum class Dep : uint8_t { Invariant, Step, Variant };

/// Whether `n` may run outside its loop: not communicating, no user code (custom_call and the
/// pure_callback built on it are opaque), no unseeded rng_key (its key is the compile seed at
/// the top level but seed 0 inside a body), no control flow (not hoisted in this version).
bool movable(const Node& n) {
  if (op_info(n.op).has(kCollective) || n.op == OpKind::CustomCall || is_control_flow(n.op))
    return false;
  return n.op != OpKind::Param && !(n.op == OpKind::RngKey && !n.attrs.has("seed"));
}

int64_t bytes(const TensorType& t) { return t.shape.numel() * dtype_size(t.dtype); }

/// XLA's hoist_size_inflating_ops=false: a node whose result is larger (in bytes) than all its
/// operands together (a broadcast, a pad, an outer product, a widening convert) stays in the
/// body, so hoisting never makes a loop hold a larger live value than it computed from.
bool size_inflating(const Graph& b, const Node& n) {
  int64_t in = 0;
  for (Value v : n.operands) in += bytes(b.type(v));
  return bytes(n.results[0]) > in;
}

bool is_gemm(OpKind op) { return op == OpKind::DotGeneral || op == OpKind::MatMul; }

/// A step's product is batched over the steps when it has fewer rows than this, or when its
/// graph holds more than one loop. With few rows a GEMM runs far from peak (short FMA chains,
/// per-call overhead) and one GEMM over all steps wins. From about 8 rows a step's product
/// already runs near peak, and batching only adds the round trip of the [T, ...] result
/// through memory (written, then read back by the loop), unless another loop hoists the same
/// product and the cse after this pass merges the two (the forward and reverse scans of a
/// gradient: computed once instead of twice). A 256-step tanh-RNN on Zen 4 at 1 thread, x_t
/// [B, 256] @ U [256, 256] batched vs per step: B = 4 0.94x, 8 1.02x, 16 1.07x, 64 1.06x,
/// 128 1.06x the time of the forward; its gradient (B = 64) 0.89x. XLA never batches.
constexpr int64_t kBatchGemmMaxRows = 8;

/// Whether `n` (a dot_general or matmul) has fewer than kBatchGemmMaxRows rows: its result's
/// elements over its last dim (1 for a scalar or vector result).
bool few_rows(const Node& n) {
  const Shape& s = n.results[0].shape;
  int64_t cols = s.rank() >= 2 ? s.dims().back() : std::max<int64_t>(s.numel(), 1);
  return s.numel() / std::max<int64_t>(cols, 1) < kBatchGemmMaxRows;
}

/// Whether the node can be computed for all steps at once from its operands with a new leading
/// step axis (`step[i]`: operand i is step-dependent, else invariant and unbatched).
bool batchable(const Graph& b, const Node& n, const std::vector<bool>& step) {
  if (n.results.size() != 1) return false;
  const OpInfo& info = op_info(n.op);
  if (info.has(kElementwise)) return n.op != OpKind::ElementwiseRegion;
  switch (n.op) {
    case OpKind::Reshape:
    case OpKind::Transpose:
    case OpKind::BroadcastInDim:
      return true;
    case OpKind::DotGeneral:
      return step[0] != step[1];
    case OpKind::MatMul: {
      // numpy batch dims broadcast right-aligned: the new leading axis stays in front when
      // both operands are matrices (or stacks of them) and the invariant has no more dims.
      if (step[0] == step[1]) return false;
      int rs = b.shape(n.operands[step[0] ? 0 : 1]).rank();
      int ri = b.shape(n.operands[step[0] ? 1 : 0]).rank();
      return rs >= 2 && ri >= 2 && ri <= rs;
    }
    default:
      return false;
  }
}

/// What to do with one region (a scan body, a while_loop's body or cond).
struct RegionPlan {
  const Graph* body = nullptr;
  std::vector<Dep> dep;             // per node
  std::vector<bool> to_const;       // invariant node replaced by a new const input
  std::vector<bool> to_xs;          // step-dependent node replaced by a new xs input
  std::vector<bool> live;           // node kept in the new body
  std::vector<int32_t> consts, xs;  // the replaced nodes, in node order
};

/// Classifies the nodes of `body` (inputs [0, nc) are consts, [first_xs, end) xs slices) and
/// picks what leaves it: invariant frontier nodes (used by a node staying in the body or
/// returned) unless they are leaves or size-inflating, and (when `first_xs` < inputs) the
/// step-dependent frontier nodes whose subgraph holds a dot_general / matmul with few rows, or
/// any one when `batch_all` (kBatchGemmMaxRows).
RegionPlan plan_region(const Graph& body, size_t nc, size_t first_xs, bool batch_all) {
  const std::vector<Node>& nodes = body.nodes();
  RegionPlan p;
  p.body = &body;
  p.dep.assign(nodes.size(), Dep::Variant);
  std::vector<bool> gemm(nodes.size(), false);  // a step node with a gemm among its step cone
  size_t input = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.op == OpKind::Input) {
      p.dep[i] = input < nc ? Dep::Invariant : input >= first_xs ? Dep::Step : Dep::Variant;
      ++input;
      continue;
    }
    if (!movable(n)) continue;
    bool any_variant = false, any_step = false;
    std::vector<bool> step;
    for (Value v : n.operands) {
      Dep d = p.dep[static_cast<size_t>(v.node)];
      any_variant = any_variant || d == Dep::Variant;
      any_step = any_step || d == Dep::Step;
      step.push_back(d == Dep::Step);
    }
    if (any_variant) continue;
    if (!any_step) {
      p.dep[i] = Dep::Invariant;
    } else if (batchable(body, n, step)) {
      p.dep[i] = Dep::Step;
      gemm[i] = is_gemm(n.op) && (batch_all || few_rows(n));
      for (Value v : n.operands) gemm[i] = gemm[i] || gemm[static_cast<size_t>(v.node)];
    }
  }
  // From the outputs down: the first invariant / gemm-holding step node met on a path is a
  // frontier (replaced by an input); everything else met stays in the body.
  p.to_const.assign(nodes.size(), false);
  p.to_xs.assign(nodes.size(), false);
  p.live.assign(nodes.size(), false);
  std::vector<bool> seen(nodes.size(), false);
  std::vector<int32_t> stack;
  for (Value v : body.outputs()) stack.push_back(v.node);
  while (!stack.empty()) {
    auto id = static_cast<size_t>(stack.back());
    stack.pop_back();
    if (seen[id]) continue;
    seen[id] = true;
    const Node& n = nodes[id];
    bool leaf = op_info(n.op).has(kLeaf);
    if (p.dep[id] == Dep::Step && gemm[id]) {
      p.to_xs[id] = true;
      continue;
    }
    if (p.dep[id] == Dep::Invariant && !leaf && n.results.size() == 1 && !size_inflating(body, n)) {
      p.to_const[id] = true;
      continue;
    }
    p.live[id] = true;
    for (Value v : n.operands) stack.push_back(v.node);
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (p.to_const[i]) p.consts.push_back(static_cast<int32_t>(i));
    if (p.to_xs[i]) p.xs.push_back(static_cast<int32_t>(i));
  }
  return p;
}

/// A name for a new body input, free in `b` and among `taken`.
std::string fresh_input_name(const Graph& b, const std::string& hint,
                             std::vector<std::string>& taken) {
  std::string name = hint;
  for (int k = 1; b.find(name) >= 0 || std::find(taken.begin(), taken.end(), name) != taken.end();
       ++k)
    name = hint + "_" + std::to_string(k);
  taken.push_back(name);
  return name;
}

/// Emits into `dst` the hoisted values of the regions of one loop: `operands` are the loop's
/// operands mapped into dst, `length` the scan's (-1: a while_loop). Returns, per region, the
/// outer value of each of its `consts` and `xs` nodes (in that order).
class Emitter {
 public:
  /// Hoisted nodes are named LOOP.NODE (`loop` the loop's name, NODE the body node's).
  Emitter(Graph& dst, std::span<const Value> operands, int64_t length, std::string loop)
      : dst_(dst), operands_(operands), length_(length), loop_(std::move(loop)) {}

  std::vector<Value> emit(const RegionPlan& p) {
    const std::vector<Node>& nodes = p.body->nodes();
    // Which nodes the frontiers need, backwards: invariant ones unbatched, step ones batched.
    std::vector<bool> need(nodes.size(), false);
    for (int32_t id : p.consts) need[static_cast<size_t>(id)] = true;
    for (int32_t id : p.xs) need[static_cast<size_t>(id)] = true;
    for (size_t i = nodes.size(); i-- > 0;)
      if (need[i])
        for (Value v : nodes[i].operands) need[static_cast<size_t>(v.node)] = true;
    std::vector<std::vector<Value>> outer(nodes.size());
    size_t input = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Node& n = nodes[i];
      if (n.op == OpKind::Input) {
        outer[i] = {operands_[input++]};  // body inputs are the loop's operands, in order
        continue;
      }
      if (!need[i]) continue;
      std::vector<Value> ops;
      std::vector<bool> step;
      for (Value v : n.operands) {
        ops.push_back(outer[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)]);
        step.push_back(p.dep[static_cast<size_t>(v.node)] == Dep::Step);
      }
      outer[i] = p.dep[i] == Dep::Step
                     ? std::vector<Value>{batched(n, ops, step)}
                     : dst_.emit(n.op, std::move(ops), n.attrs, loop_ + "." + n.name);
    }
    std::vector<Value> out;
    for (int32_t id : p.consts) out.push_back(outer[static_cast<size_t>(id)][0]);
    for (int32_t id : p.xs) out.push_back(outer[static_cast<size_t>(id)][0]);
    return out;
  }

 private:
  /// `n` computed for all steps: operands marked in `step` have a new leading axis of size
  /// length; the result is [length, n's result shape...].
  Value batched(const Node& n, std::vector<Value> ops, const std::vector<bool>& step) {
    const Shape& r = n.results[0].shape;
    std::vector<int64_t> full{length_};
    for (int d = 0; d < r.rank(); ++d) full.push_back(r[d]);
    auto shifted = [](const std::vector<int64_t>& dims) {
      std::vector<int64_t> out;
      for (int64_t d : dims) out.push_back(d + 1);
      return out;
    };
    AttrMap attrs = n.attrs;
    const std::string name = loop_ + "." + n.name;
    Value out;
    if (op_info(n.op).has(kElementwise)) {
      // Invariants broadcast against the new axis as numpy does (right-aligned, no copy); a
      // step operand of lower rank than the result gets unit dims after its step axis.
      for (size_t i = 0; i < ops.size(); ++i) {
        const Shape& s = dst_.shape(ops[i]);
        if (!step[i] || s.rank() == static_cast<int>(full.size())) continue;
        std::vector<int64_t> dims{length_};
        for (int d = s.rank() - 1; d < r.rank(); ++d) dims.push_back(1);
        for (int d = 1; d < s.rank(); ++d) dims.push_back(s[d]);
        ops[i] = dst_.reshape(ops[i], dims);
      }
      out = dst_.emit1(n.op, std::move(ops), std::move(attrs), name);
    } else if (n.op == OpKind::Reshape) {
      out = dst_.reshape(ops[0], full);
    } else if (n.op == OpKind::Transpose) {
      std::vector<int64_t> perm{0};
      for (int64_t d : shifted(n.attrs.get_ints("permutation"))) perm.push_back(d);
      out = dst_.transpose(ops[0], perm);
    } else if (n.op == OpKind::BroadcastInDim) {
      std::vector<int64_t> dims{0};
      for (int64_t d : shifted(n.attrs.get_ints("broadcast_dimensions"))) dims.push_back(d);
      out = dst_.broadcast_in_dim(ops[0], full, dims);
    } else if (n.op == OpKind::MatMul && step[0] && dst_.shape(ops[1]).rank() == 2) {
      // x [T, ..., M, K] @ w [K, N] as the dot_general autodiff and decompositions write, so
      // cse merges it with theirs (the forward recomputation in a scan's vjp).
      int64_t k = dst_.shape(ops[0]).rank() - 1;
      out = dst_.dot_general(ops[0], ops[1], {}, {}, {k}, {0});
      dst_.rename(out.node, name);
    } else if (n.op == OpKind::MatMul) {
      out = dst_.emit1(n.op, std::move(ops), std::move(attrs), name);
    } else {  // dot_general with one step operand
      // Its new axis 0 is the first free dim of its side: the result is [batch..., lhs free...,
      // rhs free...], so the step axis lands after the batch dims (lhs) or after the lhs free
      // dims (rhs) and is moved to the front when it is not already there.
      const std::string side = step[0] ? "lhs" : "rhs";
      attrs.set(side + "_batch", shifted(n.attrs.get_ints(side + "_batch")));
      attrs.set(side + "_contract", shifted(n.attrs.get_ints(side + "_contract")));
      auto nb = static_cast<int64_t>(n.attrs.get_ints("lhs_batch").size());
      int64_t at = nb;
      if (!step[0]) {
        const Shape& lhs = dst_.shape(ops[0]);
        at = lhs.rank() - static_cast<int64_t>(n.attrs.get_ints("lhs_contract").size());
      }
      out = dst_.emit1(n.op, std::move(ops), std::move(attrs), name);
      if (at != 0) {
        std::vector<int64_t> perm{at};
        for (int64_t d = 0; d < static_cast<int64_t>(full.size()); ++d)
          if (d != at) perm.push_back(d);
        out = dst_.transpose(out, perm);
      }
    }
    check(dst_.type(out) == TensorType{n.results[0].dtype, Shape(full)},
          "hoist-loop-invariants: batched '" + std::string(op_name(n.op)) + "' (node %" + n.name +
              ") is " + dst_.type(out).to_string() + ", expected [length, " +
              n.results[0].to_string() + "]");
    return out;
  }

  Graph& dst_;
  std::span<const Value> operands_;
  int64_t length_;
  std::string loop_;
};

/// Marks in `used` the inputs of `p.body` that a live node or an output reads.
void mark_used_inputs(const RegionPlan& p, std::vector<bool>& used) {
  const Graph& body = *p.body;
  std::vector<int32_t> ins = body.inputs();
  std::vector<int> position(body.nodes().size(), -1);
  for (size_t i = 0; i < ins.size(); ++i)
    position[static_cast<size_t>(ins[i])] = static_cast<int>(i);
  auto mark = [&](Value v) {
    int at = position[static_cast<size_t>(v.node)];
    if (at >= 0) used[static_cast<size_t>(at)] = true;
  };
  for (size_t i = 0; i < body.nodes().size(); ++i)
    if (p.live[i])
      for (Value v : body.nodes()[i].operands) mark(v);
  for (Value v : body.outputs()) mark(v);
}

/// `p.body` with new inputs: after its `nc` consts one per value of `new_consts` (the loop's new
/// consts; this region's own start at `offset`, a while_loop's cond and body sharing the list),
/// and at the end one per value of `new_xs`; its `consts` and `xs` nodes read those inputs, nodes
/// that are not live and the inputs not marked in `keep_input` are left out.
Graph rebuild(const RegionPlan& p, size_t nc, const std::vector<TensorType>& new_consts,
              size_t offset, const std::vector<TensorType>& new_xs,
              const std::vector<bool>& keep_input) {
  const Graph& body = *p.body;
  const std::vector<Node>& nodes = body.nodes();
  Graph nb(body.name());
  std::vector<std::vector<Value>> map(nodes.size());
  std::vector<std::string> taken;
  auto add_inputs = [&](const std::vector<int32_t>& replaced, const std::vector<TensorType>& all,
                        size_t first, const char* suffix) {
    for (size_t k = 0; k < all.size(); ++k) {
      bool own = k >= first && k - first < replaced.size();
      auto id = own ? static_cast<size_t>(replaced[k - first]) : 0;
      std::string hint = (own ? nodes[id].name : std::string("unused")) + suffix;
      Value in = nb.input(fresh_input_name(body, hint, taken), all[k].dtype, all[k].shape);
      if (own) map[id] = {in};
    }
  };
  std::vector<int32_t> ins = body.inputs();
  for (size_t i = 0; i <= ins.size(); ++i) {
    if (i == nc) add_inputs(p.consts, new_consts, offset, "_inv");
    if (i == ins.size()) break;
    if (!keep_input[i]) continue;  // used by no node left in any region of the loop
    const Node& in = nodes[static_cast<size_t>(ins[i])];
    map[static_cast<size_t>(ins[i])] = {
        nb.input(in.name, in.results[0].dtype, in.results[0].shape)};
  }
  add_inputs(p.xs, new_xs, 0, "_xs");
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.op == OpKind::Input || !p.live[i]) continue;
    std::vector<Value> ops;
    for (Value v : n.operands)
      ops.push_back(map[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)]);
    map[i] = nb.emit(n.op, std::move(ops), n.attrs, n.name);
  }
  std::vector<Value> outs;
  for (Value v : body.outputs())
    outs.push_back(map[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)]);
  nb.set_outputs(std::move(outs));
  return nb;
}

/// The loop `n` (operands mapped into `dst`) re-emitted with its hoisted values computed before
/// it in `dst`, or nullopt when nothing leaves its regions; `batch_all` as in plan_region.
std::optional<std::vector<Value>> hoist(Graph& dst, const Node& n, std::span<const Value> operands,
                                        bool batch_all) {
  if (n.op != OpKind::WhileLoop && n.op != OpKind::Scan) return std::nullopt;
  bool scan = n.op == OpKind::Scan;
  auto nc = static_cast<size_t>(n.attrs.get_int("num_consts"));
  const Graph& body = n.attrs.get_graph("body");
  size_t first_xs =
      scan ? nc + static_cast<size_t>(n.attrs.get_int("num_carry")) : body.inputs().size();
  std::vector<RegionPlan> plans{plan_region(body, nc, first_xs, batch_all)};
  if (!scan) {
    const Graph& cond = n.attrs.get_graph("cond");
    plans.push_back(plan_region(cond, nc, cond.inputs().size(), batch_all));
  }
  bool any = false;
  for (const RegionPlan& p : plans) any = any || !p.consts.empty() || !p.xs.empty();
  if (!any) return std::nullopt;
  Emitter emitter(dst, operands, scan ? n.attrs.get_int("length") : -1, n.name);
  std::vector<Value> new_consts, new_xs;
  std::vector<size_t> offsets;
  for (const RegionPlan& p : plans) {
    offsets.push_back(new_consts.size());
    std::vector<Value> vals = emitter.emit(p);
    new_consts.insert(new_consts.end(), vals.begin(), vals.begin() + p.consts.size());
    new_xs.insert(new_xs.end(), vals.begin() + p.consts.size(), vals.end());
  }
  std::vector<TensorType> const_types, xs_types;
  for (Value v : new_consts) const_types.push_back(dst.type(v));
  for (Value v : new_xs) {  // the body reads a step's slice
    const TensorType& t = dst.type(v);
    std::vector<int64_t> dims = t.shape.dims();
    dims.erase(dims.begin());
    xs_types.push_back({t.dtype, Shape(dims)});
  }
  // Consts and xs that no region reads any more (the hoisted work was their only use) leave the
  // loop; carries stay.
  std::vector<bool> keep(operands.size(), false);
  for (const RegionPlan& p : plans) mark_used_inputs(p, keep);
  for (size_t i = nc; i < first_xs; ++i) keep[i] = true;
  auto ref = [](Graph b) { return GraphRef(std::make_shared<const Graph>(std::move(b))); };
  AttrMap attrs = n.attrs;
  attrs.set("body", ref(rebuild(plans[0], nc, const_types, offsets[0], xs_types, keep)));
  if (!scan) attrs.set("cond", ref(rebuild(plans[1], nc, const_types, offsets[1], {}, keep)));
  std::vector<Value> ops;
  for (size_t i = 0; i <= operands.size(); ++i) {
    if (i == nc) {
      attrs.set("num_consts", static_cast<int64_t>(ops.size() + new_consts.size()));
      ops.insert(ops.end(), new_consts.begin(), new_consts.end());
    }
    if (i < operands.size() && keep[i]) ops.push_back(operands[i]);
  }
  ops.insert(ops.end(), new_xs.begin(), new_xs.end());
  return dst.emit(n.op, std::move(ops), std::move(attrs), n.name);
}

class HoistLoopInvariantsPass : public Pass {
 public:
  std::string_view name() const override { return "hoist-loop-invariants"; }

  bool run(Graph& g) override {
    bool inside = run_in_bodies(*this, g);  // inner loops first: they hoist into their body
    int loops = 0;  // another loop may hoist the same product (kBatchGemmMaxRows)
    for (const Node& n : g.nodes()) loops += n.op == OpKind::WhileLoop || n.op == OpKind::Scan;
    const bool batch_all = loops > 1;
    bool changed = false;
    Graph out = rewrite(g,
                        [&](RewriteContext& ctx, const Node& n,
                            std::span<const Value> ops) -> std::optional<std::vector<Value>> {
                          std::optional<std::vector<Value>> r = hoist(ctx.dst, n, ops, batch_all);
                          changed = changed || r.has_value();
                          return r;
                        });
    if (changed) g = std::move(out);
    return inside || changed;
  }
};

}  // namespace

std::unique_ptr<Pass> create_hoist_loop_invariants_pass() {
  return std::make_unique<HoistLoopInvariantsPass>();
}

}  // namespace rlx
