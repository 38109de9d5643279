// Batching rules of the control-flow ops (jax's cond / scan / while batching rules): each body
// is batched with vmap itself; a batched cond predicate runs every branch and selects per lane,
// a batched while_loop predicate runs until every lane is done and freezes finished lanes.
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

// scan: consts keep their batching, every carry is batched (an unbatched init is broadcast: a
// carry may pick the batch up from a batched const or xs in any step), batched xs [V, T, ...]
// are scanned as [T, V, ...], and the ys [T, V, ...] come back as [V, T, ...].
std::optional<std::vector<BVal>> batch_scan(BatchContext& ctx) {
  Graph& g = ctx.g;
  const AttrMap& a = ctx.node.attrs;
  const auto nc = static_cast<size_t>(a.get_int("num_consts"));
  const auto nk = static_cast<size_t>(a.get_int("num_carry"));
  std::vector<bool> flags = batched_flags(ctx.in, 0, ctx.in.size());
  std::vector<Value> operands = values(ctx.in, 0, ctx.in.size());
  for (size_t i = nc; i < nc + nk; ++i) {
    operands[i] = ctx.batched(i);
    flags[i] = true;
  }
  for (size_t i = nc + nk; i < operands.size(); ++i)
    if (flags[i]) operands[i] = move_axis(g, operands[i], 0, 1);
  AttrMap attrs = a;
  attrs.set("body",
            std::make_shared<const Graph>(batch_body(a.get_graph("body"), flags, ctx.size)));
  std::vector<Value> r = g.emit(OpKind::Scan, operands, attrs);
  std::vector<BVal> out;
  for (size_t j = 0; j < r.size(); ++j)
    out.push_back({j < nk ? r[j] : move_axis(g, r[j], 1, 0), true});
  return out;
}

// while_loop: every carry batched; cond' = any lane's cond, body' = the batched body on lanes
// whose cond holds and the old carry on the others (jax's batched-predicate while rule), so
// each lane stops after its own trips (and at most max_trip_count, shared by all lanes).
std::optional<std::vector<BVal>> batch_while(BatchContext& ctx) {
  Graph& g = ctx.g;
  const AttrMap& a = ctx.node.attrs;
  const auto nc = static_cast<size_t>(a.get_int("num_consts"));
  std::vector<bool> flags = batched_flags(ctx.in, 0, ctx.in.size());
  std::vector<Value> operands = values(ctx.in, 0, ctx.in.size());
  for (size_t i = nc; i < operands.size(); ++i) {
    operands[i] = ctx.batched(i);
    flags[i] = true;
  }
  Graph cond = batch_body(a.get_graph("cond"), flags, ctx.size);
  Graph body = batch_body(a.get_graph("body"), flags, ctx.size);
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
  AttrMap attrs = a;
  attrs.set("cond", std::make_shared<const Graph>(std::move(any_cond)));
  attrs.set("body", std::make_shared<const Graph>(std::move(masked)));
  std::vector<BVal> out;
  for (Value v : g.emit(OpKind::WhileLoop, operands, attrs)) out.push_back({v, true});
  return out;
}

}  // namespace

void register_batch_control_flow() {
  set_batch_rule(OpKind::Cond, batch_cond);
  set_batch_rule(OpKind::Scan, batch_scan);
  set_batch_rule(OpKind::WhileLoop, batch_while);
}

}  // namespace rlx::autodiff::vmap_detail
