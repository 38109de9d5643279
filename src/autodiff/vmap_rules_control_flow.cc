// Batching rules of the control-flow ops (jax's cond / scan / while batching rules): each body
// is batched with vmap itself; a batched cond predicate runs every branch and selects per lane;
// loops batch only the carries the fixed point needs, and a batched while_loop predicate runs
// until every lane is done and freezes finished lanes.
#include <algorithm>
#include <memory>
#include <string>

#include "rlx/opt/decompose.h"
#include "vmap_rules.h"

namespace rlx::autodiff::vmap_detail {
namespace {

// `body` batched: input i carries the batch at axis 0 when batched[i] (else it is shared);
// every output carries it at axis 0 (an output that depends on nothing batched is broadcast).
Graph batch_body(const Graph& body, const std::vector<bool>& batched, int64_t size) {
  std::vector<BatchAxis> in_axes;
  for (bool b : batched) in_axes.push_back(b ? BatchAxis{0} : BatchAxis{});
  return vmap(body, in_axes, {}, size);
}

std::vector<bool> batched_flags(const std::vector<BVal>& in, size_t from, size_t to) {
  std::vector<bool> out;
  for (size_t i = from; i < to; ++i) out.push_back(in[i].batched);
  return out;
}

std::vector<Value> values(const std::vector<BVal>& in, size_t from, size_t to) {
  std::vector<Value> out;
  for (size_t i = from; i < to; ++i) out.push_back(in[i].v);
  return out;
}

// A per-lane mask [size] reshaped to [size, 1, ...] against `like` (batched), so that select
// broadcasts it over the example's dims.
Value lane_mask(Graph& g, Value mask, Value like) {
  std::vector<int64_t> d(static_cast<size_t>(g.shape(like).rank()), 1);
  d[0] = g.shape(mask)[0];
  return g.reshape(mask, d);
}

// cond / switch. Shared index: a cond of the batched branches. Batched index: every branch runs
// on the batch and each lane takes its branch's results (select; jax turns the cond into a
// select_n the same way), the index clamped to [0, N-1] as the op does.
std::optional<std::vector<BVal>> batch_cond(BatchContext& ctx) {
  Graph& g = ctx.g;
  const GraphList& branches = ctx.node.attrs.get_graphs("branches");
  const std::vector<bool> flags = batched_flags(ctx.in, 1, ctx.in.size());
  GraphList batched;
  for (const GraphRef& b : branches)
    batched.push_back(std::make_shared<const Graph>(batch_body(*b, flags, ctx.size)));
  std::vector<Value> xs = values(ctx.in, 1, ctx.in.size());
  std::vector<BVal> out;
  if (!ctx.in[0].batched) {
    std::vector<Value> operands{ctx.in[0].v};
    operands.insert(operands.end(), xs.begin(), xs.end());
    for (Value v : g.emit(OpKind::Cond, operands, {{"branches", batched}}))
      out.push_back({v, true});
    return out;
  }
  Value index = ctx.in[0].v;
  const bool pred = g.dtype(index) == DType::bool_;
  if (!pred)
    index = g.clamp(g.scalar(0, DType::i32), index,
                    g.scalar(static_cast<double>(branches.size() - 1), DType::i32));
  std::vector<Value> r = inline_graph(g, *batched[0], xs);
  for (size_t k = 1; k < batched.size(); ++k) {
    std::vector<Value> rk = inline_graph(g, *batched[k], xs);
    Value take = pred ? index : g.eq(index, g.scalar(static_cast<double>(k), DType::i32));
    for (size_t j = 0; j < r.size(); ++j) r[j] = g.select(lane_mask(g, take, rk[j]), rk[j], r[j]);
  }
  for (Value v : r) out.push_back({v, true});
  return out;
}

std::vector<bool> batched_results(const Node& n, const std::vector<bool>& in);

// Which outputs of `body` carry the batch when its inputs do (`in`, in input order): a node's
// results are batched when any operand is, except a scan's or while_loop's, which follow the
// loops' fixed point below. What vmap gives may be less batched (a rule may return an unbatched
// result) but never more, so an output found unbatched is one vmap keeps unbatched.
std::vector<bool> batched_outputs(const Graph& body, const std::vector<bool>& in) {
  std::vector<std::vector<bool>> b(body.nodes().size());
  const std::vector<int32_t> ins = body.inputs();
  for (size_t i = 0; i < ins.size(); ++i) b[static_cast<size_t>(ins[i])] = {in[i]};
  for (size_t i = 0; i < body.nodes().size(); ++i) {
    const Node& n = body.nodes()[i];
    if (n.op == OpKind::Input) continue;
    std::vector<bool> ops;
    for (Value v : n.operands)
      ops.push_back(b[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)]);
    b[i] = batched_results(n, ops);
  }
  std::vector<bool> out;
  for (Value v : body.outputs())
    out.push_back(b[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)]);
  return out;
}

// The batching of a scan or while_loop (jax's fixed point): a carry is batched when its init
// is, or when the body makes it batched given the batched consts, carries and xs, iterated
// until stable; a while_loop whose predicate is then batched batches every carry (lanes stop
// at different trips). Unbatched consts, carries and xs stay unbatched.
struct LoopBatching {
  std::vector<bool> in;  // per operand, the carries widened to the fixed point
  std::vector<bool> ys;  // per ys (scan)
  bool pred = false;     // the while_loop's predicate is batched
};

LoopBatching loop_batching(const Node& n, std::vector<bool> in) {
  const AttrMap& a = n.attrs;
  const auto nc = static_cast<size_t>(a.get_int("num_consts"));
  const size_t nk =
      n.op == OpKind::Scan ? static_cast<size_t>(a.get_int("num_carry")) : n.operands.size() - nc;
  LoopBatching r;
  for (bool changed = true; changed;) {
    std::vector<bool> out = batched_outputs(a.get_graph("body"), in);
    changed = false;
    for (size_t i = 0; i < nk; ++i)
      if (out[i] && !in[nc + i]) in[nc + i] = changed = true;
    r.ys.assign(out.begin() + static_cast<ptrdiff_t>(nk), out.end());
  }
  if (n.op == OpKind::WhileLoop && batched_outputs(a.get_graph("cond"), in)[0]) {
    r.pred = true;
    std::fill(in.begin() + static_cast<ptrdiff_t>(nc), in.end(), true);
  }
  r.in = std::move(in);
  return r;
}

std::vector<bool> batched_results(const Node& n, const std::vector<bool>& in) {
  if (n.op == OpKind::Scan || n.op == OpKind::WhileLoop) {
    const auto nc = static_cast<size_t>(n.attrs.get_int("num_consts"));
    LoopBatching lb = loop_batching(n, in);
    std::vector<bool> out(lb.in.begin() + static_cast<ptrdiff_t>(nc),
                          lb.in.begin() + static_cast<ptrdiff_t>(nc) +
                              static_cast<ptrdiff_t>(n.results.size() - lb.ys.size()));
    out.insert(out.end(), lb.ys.begin(), lb.ys.end());
    return out;
  }
  const bool any = std::find(in.begin(), in.end(), true) != in.end();
  return std::vector<bool>(n.results.size(), any);
}

// `body` batched as a loop region: input i batched when in[i], output j at axis 0 when out[j]
// and kept unbatched otherwise.
Graph batch_region(const Graph& body, const std::vector<bool>& in, const std::vector<bool>& out,
                   int64_t size) {
  std::vector<BatchAxis> in_axes, out_axes;
  for (bool b : in) in_axes.push_back(b ? BatchAxis{0} : BatchAxis{});
  for (bool b : out) out_axes.push_back(b ? BatchAxis{0} : BatchAxis{});
  return vmap(body, in_axes, out_axes, size);
}

// The operands of a loop batched as `flags` says: a carry batched at the fixed point gets an
// unbatched init broadcast.
std::vector<Value> loop_operands(BatchContext& ctx, const std::vector<bool>& flags) {
  std::vector<Value> operands = values(ctx.in, 0, ctx.in.size());
  for (size_t i = 0; i < operands.size(); ++i)
    if (flags[i] && !ctx.in[i].batched) operands[i] = ctx.batched(i);
  return operands;
}

// scan: the fixed point above decides which carries are batched (an unbatched init of a batched
// carry is broadcast) and which ys are; batched xs [V, T, ...] are scanned as [T, V, ...], and
// batched ys [T, V, ...] come back as [V, T, ...]. Unbatched carries and ys stay unbatched.
std::optional<std::vector<BVal>> batch_scan(BatchContext& ctx) {
  Graph& g = ctx.g;
  const AttrMap& a = ctx.node.attrs;
  const auto nc = static_cast<size_t>(a.get_int("num_consts"));
  const auto nk = static_cast<size_t>(a.get_int("num_carry"));
  const LoopBatching lb = loop_batching(ctx.node, batched_flags(ctx.in, 0, ctx.in.size()));
  std::vector<Value> operands = loop_operands(ctx, lb.in);
  for (size_t i = nc + nk; i < operands.size(); ++i)
    if (lb.in[i]) operands[i] = move_axis(g, operands[i], 0, 1);
  std::vector<bool> outs(lb.in.begin() + static_cast<ptrdiff_t>(nc),
                         lb.in.begin() + static_cast<ptrdiff_t>(nc + nk));
  outs.insert(outs.end(), lb.ys.begin(), lb.ys.end());
  AttrMap attrs = a;
  attrs.set("body", std::make_shared<const Graph>(
                        batch_region(a.get_graph("body"), lb.in, outs, ctx.size)));
  std::vector<Value> r = g.emit(OpKind::Scan, operands, attrs);
  std::vector<BVal> out;
  for (size_t j = 0; j < r.size(); ++j)
    out.push_back({j < nk || !outs[j] ? r[j] : move_axis(g, r[j], 1, 0), outs[j]});
  return out;
}

// while_loop: the fixed point above decides which carries are batched. An unbatched predicate
// keeps a plain loop of the batched regions (every lane runs the same trips). A batched one
// batches every carry; cond' = any lane's cond, body' = the batched body on lanes whose cond
// holds and the old carry on the others (jax's batched-predicate while rule), so each lane
// stops after its own trips (and at most max_trip_count, shared by all lanes).
std::optional<std::vector<BVal>> batch_while(BatchContext& ctx) {
  Graph& g = ctx.g;
  const AttrMap& a = ctx.node.attrs;
  const auto nc = static_cast<size_t>(a.get_int("num_consts"));
  const LoopBatching lb = loop_batching(ctx.node, batched_flags(ctx.in, 0, ctx.in.size()));
  const std::vector<bool>& flags = lb.in;
  std::vector<Value> operands = loop_operands(ctx, flags);
  const std::vector<bool> carry(flags.begin() + static_cast<ptrdiff_t>(nc), flags.end());
  Graph cond = batch_region(a.get_graph("cond"), flags, {lb.pred}, ctx.size);
  Graph body = batch_region(a.get_graph("body"), flags, carry, ctx.size);
  AttrMap attrs = a;
  if (lb.pred) {
    // Both new regions take the batched operand types.
    auto region = [&](const std::string& name) {
      Graph r(name);
      std::vector<Value> in;
      for (Value v : operands)
        in.push_back(r.input("a" + std::to_string(in.size()), g.dtype(v), g.shape(v)));
      return std::make_pair(std::move(r), in);
    };
    auto [any_cond, cin] = region(a.get_graph("cond").name() + "_any");
    Value lanes = any_cond.convert(inline_graph(any_cond, cond, cin)[0], DType::i32);
    any_cond.set_outputs(
        {any_cond.gt(any_cond.reduce_sum(lanes, {0}), any_cond.scalar(0, DType::i32))});
    auto [masked, bin] = region(a.get_graph("body").name() + "_masked");
    Value live = inline_graph(masked, cond, bin)[0];
    std::vector<Value> next = inline_graph(masked, body, bin);
    for (size_t j = 0; j < next.size(); ++j)
      next[j] = masked.select(lane_mask(masked, live, next[j]), next[j], bin[nc + j]);
    masked.set_outputs(next);
    cond = std::move(any_cond);
    body = std::move(masked);
  }
  attrs.set("cond", std::make_shared<const Graph>(std::move(cond)));
  attrs.set("body", std::make_shared<const Graph>(std::move(body)));
  std::vector<Value> r = g.emit(OpKind::WhileLoop, operands, attrs);
  std::vector<BVal> out;
  for (size_t j = 0; j < r.size(); ++j) out.push_back({r[j], carry[j]});
  return out;
}

}  // namespace

void register_batch_control_flow() {
  set_batch_rule(OpKind::Cond, batch_cond);
  set_batch_rule(OpKind::Scan, batch_scan);
  set_batch_rule(OpKind::WhileLoop, batch_while);
}

}  // namespace rlx::autodiff::vmap_detail
