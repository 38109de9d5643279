// vjp rules of the control-flow ops: cond (a cond over the branches' vjps), scan (a residual
// scan stacking the carries, then a reverse scan of the body's vjp, optionally checkpointed) and
// while_loop with max_trip_count (differentiated as the equivalent bounded scan).
#include <algorithm>
#include <memory>
#include <string>

#include "rlx/ir/error.h"
#include "rlx/opt/decompose.h"
#include "rlx/opt/passes.h"
#include "rules.h"

namespace rlx::autodiff::detail {
namespace {

std::string node_ref(const Node& n) {
  return "op '" + std::string(op_name(n.op)) + "' (node %" + n.name + ")";
}

void dce(Graph& g) { create_dce_pass()->run(g); }

std::vector<TensorType> input_types(const Graph& body) {
  std::vector<TensorType> ts;
  for (int32_t id : body.inputs()) ts.push_back(body.node(id).results[0]);
  return ts;
}

// The vjp of a body with respect to its float inputs: inputs are the body's inputs then one
// cotangent per float output (in output order); outputs the cotangent of each float input (in
// input order). Built by vjp() itself, so nested regions are differentiated recursively.
Graph body_vjp(const Graph& body, const GradOptions& options) {
  std::vector<std::string> wrt;
  for (int32_t id : body.inputs())
    if (is_float(body.node(id).results[0].dtype)) wrt.push_back(body.node(id).name);
  Graph v = vjp(body, wrt, options);
  // Re-rooted on inputs of its own names: vjp() names its cotangent inputs "ct.<i>", which a
  // second-order transform of this graph would add again.
  Graph out(body.name() + "_vjp");
  std::vector<Value> args;
  for (int32_t id : v.inputs()) {
    const TensorType& t = v.node(id).results[0];
    args.push_back(out.input("in" + std::to_string(args.size()), t.dtype, t.shape));
  }
  std::vector<Value> r = inline_graph(out, v, args);
  out.set_outputs(std::vector<Value>(r.end() - static_cast<ptrdiff_t>(wrt.size()), r.end()));
  dce(out);
  return out;
}

// A scan's static description: its body, the operand split and the step order.
struct ScanSpec {
  const Graph* body;
  size_t nc, nk;
  int64_t length;
  bool reverse;
};

ScanOptions scan_options(int64_t length, bool reverse) {
  ScanOptions o;
  o.length = length;
  o.reverse = reverse;
  return o;
}

// A forward pass of the scan that also stacks the carry entering each step, [length,
// carry...] per carry, as ys (ys[t] is step t's also for a reverse scan). With `primal`, the
// body keeps all its outputs and `primal` gets the scan's own carry and ys (a ys that already
// is a carry input serves as that carry's residual); without, it keeps only the new carry.
std::vector<Value> residual_carries(Graph& g, const ScanSpec& s, const std::vector<Value>& c,
                                    const std::vector<Value>& h, const std::vector<Value>& x,
                                    std::vector<Value>* primal = nullptr) {
  if (s.nk == 0) return {};
  Graph body = *s.body;
  std::vector<Value> outs = body.outputs();
  if (!primal) outs.resize(s.nk);
  const std::vector<int32_t> ins = body.inputs();
  std::vector<size_t> at;  // body output index of each carry's residual
  for (size_t i = 0; i < s.nk; ++i) {
    const Value in{ins[s.nc + i], 0};
    auto it = std::find(outs.begin() + static_cast<ptrdiff_t>(s.nk), outs.end(), in);
    at.push_back(static_cast<size_t>(it - outs.begin()));
    if (it == outs.end()) outs.push_back(in);
  }
  body.set_outputs(outs);
  dce(body);
  std::vector<Value> r = g.scan(std::move(body), h, x, c, scan_options(s.length, s.reverse));
  g.rename(r[0].node, "scan_residuals");  // a scan that replaces the primal takes its name
  if (primal)
    primal->assign(r.begin(), r.begin() + static_cast<ptrdiff_t>(s.body->outputs().size()));
  std::vector<Value> res;
  for (size_t j : at) res.push_back(r[j]);
  return res;
}

struct ScanCotangents {
  std::vector<Value> dh;  // per float carry
  std::vector<Value> dc;  // per float const (acc_init plus every step's)
  std::vector<Value> dx;  // per float xs, stacked
  // The scan's own carry and ys as the forward pass of the vjp computed them (scan_vjp only;
  // empty without a carry).
  std::vector<Value> primal;
};

// A backward body's inputs in its scan's operand order: consts; the carry (carry cotangents,
// const accumulators); per step the residual carry, the xs and the ys' cotangents. With
// `steps` > 0 the xs and ys' cotangents are a segment's [steps, ...] (the carry entering the
// segment stands in the residual's place).
struct BackwardBody {
  Graph b;
  std::vector<Value> c, ct_h, acc, h, x, ct_y;
};

BackwardBody backward_body(const std::string& name, const ScanSpec& s, const Graph& g,
                           const std::vector<Value>& ct_h, const std::vector<Value>& acc,
                           const std::vector<Value>& ct_y, int64_t steps) {
  std::vector<TensorType> bt = input_types(*s.body);
  BackwardBody r{Graph(name), {}, {}, {}, {}, {}, {}};
  auto add = [&](std::vector<Value>& to, const std::string& prefix, TensorType t, bool segment) {
    if (segment && steps > 0) t.shape.dims().insert(t.shape.dims().begin(), steps);
    to.push_back(r.b.input(prefix + std::to_string(to.size()), t.dtype, t.shape));
  };
  for (size_t i = 0; i < s.nc; ++i) add(r.c, "c", bt[i], false);
  for (Value v : ct_h) add(r.ct_h, "ct_h", g.type(v), false);
  for (Value v : acc) add(r.acc, "acc", g.type(v), false);
  for (size_t i = 0; i < s.nk; ++i) add(r.h, "h", bt[s.nc + i], false);
  for (size_t i = s.nc + s.nk; i < bt.size(); ++i) add(r.x, "x", bt[i], true);
  for (Value v : ct_y) {
    TensorType t = g.type(v);
    t.shape.dims().erase(t.shape.dims().begin());
    add(r.ct_y, "ct_y", t, true);
  }
  return r;
}

std::vector<Value> concat(std::vector<Value> a, const std::vector<Value>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Runs `body` with outputs `outs` (carry cotangents and accumulators as its carry, the xs'
// cotangents as ys) over `xs` for `length` steps in the reverse of the forward's direction,
// its carry starting at (ct_h, acc).
ScanCotangents run_backward(Graph& g, BackwardBody body, const ScanCotangents& outs,
                            const std::vector<Value>& c, const std::vector<Value>& ct_h,
                            const std::vector<Value>& acc, const std::vector<Value>& xs,
                            int64_t length, bool reverse) {
  std::vector<Value> o = concat(outs.dh, outs.dc);
  const size_t kf = outs.dh.size(), num_carry = o.size();
  o = concat(o, outs.dx);
  if (o.empty()) return {};
  body.b.set_outputs(o);
  std::vector<Value> r =
      g.scan(std::move(body.b), concat(ct_h, acc), xs, c, scan_options(length, !reverse));
  ScanCotangents out;
  out.dh.assign(r.begin(), r.begin() + static_cast<ptrdiff_t>(kf));
  out.dc.assign(r.begin() + static_cast<ptrdiff_t>(kf),
                r.begin() + static_cast<ptrdiff_t>(num_carry));
  out.dx.assign(r.begin() + static_cast<ptrdiff_t>(num_carry), r.end());
  return out;
}

// The reverse scan of the body's vjp `v` over stacked residual carries `hs`: its carry holds
// the carry cotangents (from `ct_h`) and the float consts' accumulated cotangents (from
// `acc`, adding each step's); its xs are the residuals, the xs and the float ys' cotangents.
ScanCotangents backward_scan(Graph& g, const ScanSpec& s, const Graph& v,
                             const std::vector<Value>& c, const std::vector<Value>& hs,
                             const std::vector<Value>& x, const std::vector<Value>& ct_h,
                             const std::vector<Value>& acc, const std::vector<Value>& ct_y) {
  BackwardBody b = backward_body(s.body->name() + "_vjp", s, g, ct_h, acc, ct_y, 0);
  std::vector<Value> d =  // cotangents of the float consts, carries, xs
      inline_graph(b.b, v, concat(concat(concat(concat(b.c, b.h), b.x), b.ct_h), b.ct_y));
  const size_t cf = acc.size(), kf = ct_h.size();
  ScanCotangents outs;
  outs.dh.assign(d.begin() + static_cast<ptrdiff_t>(cf),
                 d.begin() + static_cast<ptrdiff_t>(cf + kf));
  for (size_t i = 0; i < cf; ++i) outs.dc.push_back(b.b.add(b.acc[i], d[i]));
  outs.dx.assign(d.begin() + static_cast<ptrdiff_t>(cf + kf), d.end());
  return run_backward(g, std::move(b), outs, c, ct_h, acc, concat(concat(hs, x), ct_y), s.length,
                      s.reverse);
}

// [length, rest...] -> [length / k, k, rest...] and back.
Value split_steps(Graph& g, Value v, int64_t k) {
  std::vector<int64_t> d = g.shape(v).dims();
  d[0] /= k;
  d.insert(d.begin() + 1, k);
  return g.reshape(v, d);
}
Value merge_steps(Graph& g, Value v) {
  std::vector<int64_t> d = g.shape(v).dims();
  d[1] *= d[0];
  d.erase(d.begin());
  return g.reshape(v, d);
}

// Steps [from, to) of a stacked value.
Value steps_of(Graph& g, Value v, int64_t from, int64_t to) {
  std::vector<int64_t> start(static_cast<size_t>(g.shape(v).rank()), 0);
  std::vector<int64_t> limit = g.shape(v).dims();
  start[0] = from;
  limit[0] = to;
  return g.slice(v, start, limit);
}

// Emits the cotangents of a scan's float consts, carries and xs given those of its float
// carries (`ct_h`) and float ys (`ct_y`). With checkpointing every k steps, the first q * k
// steps the forward runs form q segments: a checkpoint scan stacks the carry entering each, and
// in the backward an outer scan over the segments recomputes each one's k residual carries and
// runs the same backward scan over them; the r = length - q * k steps the forward runs last (a
// tail shorter than k) are differentiated unchecked first. The backward visits the steps in
// the unchecked order with the same ops, so the gradients are bitwise the unchecked ones.
ScanCotangents scan_vjp(Graph& g, const ScanSpec& s, const std::vector<Value>& c,
                        const std::vector<Value>& h, const std::vector<Value>& x,
                        const std::vector<Value>& ct_h, const std::vector<Value>& ct_y,
                        const GradOptions& options) {
  Graph v = body_vjp(*s.body, options);
  std::vector<Value> acc0;
  for (Value ci : c)
    if (is_float(g.dtype(ci))) acc0.push_back(zeros(g, g.type(ci)));
  const int64_t k = options.scan_checkpoint_every;
  check(k >= 0, "grad: scan_checkpoint_every must be >= 0, found " + std::to_string(k));
  if (k == 0 || s.length <= k || s.nk == 0) {
    std::vector<Value> primal;
    std::vector<Value> hs = residual_carries(g, s, c, h, x, &primal);
    ScanCotangents out = backward_scan(g, s, v, c, hs, x, ct_h, acc0, ct_y);
    out.primal = std::move(primal);
    return out;
  }
  const int64_t nseg = s.length / k, rest = s.length % k;
  // The segments' steps and the tail's, in step order (a reverse scan runs the tail last too:
  // its steps are the first ones).
  const int64_t seg_from = s.reverse ? rest : 0, seg_to = seg_from + nseg * k;
  const int64_t tail_from = s.reverse ? 0 : seg_to, tail_to = tail_from + rest;
  std::vector<Value> xseg, ctyseg, xtail, ctytail;
  for (Value xi : x) {
    xseg.push_back(split_steps(g, rest ? steps_of(g, xi, seg_from, seg_to) : xi, k));
    if (rest) xtail.push_back(steps_of(g, xi, tail_from, tail_to));
  }
  for (Value yi : ct_y) {
    ctyseg.push_back(split_steps(g, rest ? steps_of(g, yi, seg_from, seg_to) : yi, k));
    if (rest) ctytail.push_back(steps_of(g, yi, tail_from, tail_to));
  }
  ScanSpec inner = s;
  inner.length = k;
  // Forward: the carry after the segments, their ys ([nseg, k, ...]) and the carry entering
  // each segment, stacked [nseg, carry...].
  const size_t ny = s.body->outputs().size() - s.nk;
  BackwardBody fwd = backward_body(s.body->name() + "_checkpoints", s, g, {}, {}, {}, k);
  std::vector<Value> fo = fwd.b.scan(*s.body, fwd.h, fwd.x, fwd.c, scan_options(k, s.reverse));
  fwd.b.set_outputs(concat(fo, fwd.h));
  std::vector<Value> ck = g.scan(std::move(fwd.b), h, xseg, c, scan_options(nseg, s.reverse));
  const auto nk = static_cast<ptrdiff_t>(s.nk);
  std::vector<Value> hmid(ck.begin(), ck.begin() + nk);
  std::vector<Value> hck(ck.begin() + nk + static_cast<ptrdiff_t>(ny), ck.end());
  g.rename(hck[0].node, "scan_checkpoints");
  // Backward of the tail, from the carry the segments end with (its forward pass ends the
  // scan's own: the final carry and the tail's ys).
  ScanCotangents tail{ct_h, acc0, {}, hmid};
  if (rest) {
    ScanSpec ts = s;
    ts.length = rest;
    std::vector<Value> tp;
    std::vector<Value> ths = residual_carries(g, ts, c, hmid, xtail, &tp);
    tail = backward_scan(g, ts, v, c, ths, xtail, ct_h, acc0, ctytail);
    tail.primal = std::move(tp);
  }
  std::vector<Value> primal(tail.primal.begin(), tail.primal.begin() + nk);
  for (size_t j = 0; j < ny; ++j) {
    Value y = merge_steps(g, ck[s.nk + j]);
    if (rest) {
      Value ty = tail.primal[s.nk + j];
      y = s.reverse ? g.concatenate({ty, y}, 0) : g.concatenate({y, ty}, 0);
    }
    primal.push_back(y);
  }
  // Backward of the segments: recompute each one's k residual carries, run the backward scan.
  BackwardBody seg = backward_body(s.body->name() + "_segment_vjp", s, g, ct_h, acc0, ct_y, k);
  std::vector<Value> shs = residual_carries(seg.b, inner, seg.c, seg.h, seg.x);
  ScanCotangents r = backward_scan(seg.b, inner, v, seg.c, shs, seg.x, seg.ct_h, seg.acc, seg.ct_y);
  ScanCotangents out = run_backward(g, std::move(seg), r, c, tail.dh, tail.dc,
                                    concat(concat(hck, xseg), ctyseg), nseg, s.reverse);
  for (size_t i = 0; i < out.dx.size(); ++i) {
    Value d = merge_steps(g, out.dx[i]);
    if (rest) d = s.reverse ? g.concatenate({tail.dx[i], d}, 0) : g.concatenate({d, tail.dx[i]}, 0);
    out.dx[i] = d;
  }
  out.primal = std::move(primal);
  return out;
}

// Cotangents of a scan-like op's operands (consts, init, xs) from its results' cotangents.
std::vector<Value> scan_like_vjp(VjpContext& ctx, const ScanSpec& s) {
  Graph& g = ctx.g;
  const auto nc = static_cast<ptrdiff_t>(s.nc), nk = static_cast<ptrdiff_t>(s.nk);
  std::vector<Value> c(ctx.operands.begin(), ctx.operands.begin() + nc);
  std::vector<Value> h(ctx.operands.begin() + nc, ctx.operands.begin() + nc + nk);
  std::vector<Value> x(ctx.operands.begin() + nc + nk, ctx.operands.end());
  std::vector<Value> ct_h, ct_y;
  for (size_t i = 0; i < s.nk; ++i)
    if (is_float(g.dtype(h[i]))) ct_h.push_back(ctx.ct(i));
  for (size_t i = s.nk; i < ctx.results.size(); ++i)
    if (is_float(ctx.result_type(i).dtype)) ct_y.push_back(ctx.ct(i));
  ScanCotangents r = scan_vjp(g, s, c, h, x, ct_h, ct_y, ctx.options);
  std::vector<Value> grads(ctx.operands.size());
  size_t ic = 0, ik = 0, ix = 0;
  for (size_t i = 0; i < ctx.operands.size(); ++i) {
    if (!is_float(ctx.operand_type(i).dtype)) continue;
    if (i < s.nc) {
      if (ic < r.dc.size()) grads[i] = r.dc[ic++];
    } else if (i < s.nc + s.nk) {
      if (ik < r.dh.size()) grads[i] = r.dh[ik++];
    } else if (ix < r.dx.size()) {
      grads[i] = r.dx[ix++];
    }
  }
  // The forward pass computed the scan's results as well (a placeholder result, the bounded
  // while's `alive`, is no result of the node): the node itself need not run.
  if (ctx.recomputed && r.primal.size() == ctx.results.size()) {
    Recomputed rec{-1, {}};
    for (size_t i = 0; i < r.primal.size(); ++i)
      if (ctx.results[i].valid()) {
        rec.node = ctx.results[i].node;
        rec.values.push_back(r.primal[i]);
      }
    ctx.recomputed->push_back(std::move(rec));
  }
  return grads;
}

// scan: residual carries stacked by a forward scan that also computes the scan's own results
// (it replaces the node: one forward pass), then the reverse scan of the body's vjp (jax's
// scan partial-eval + transpose): d carry flows backwards step by step, d const is the
// sum over steps, d xs[t] is step t's cotangent of x_t.
std::vector<Value> vjp_scan(VjpContext& ctx) {
  const AttrMap& a = ctx.node.attrs;
  ScanSpec s{&a.get_graph("body"), static_cast<size_t>(a.get_int("num_consts")),
             static_cast<size_t>(a.get_int("num_carry")), a.get_int("length"),
             a.get_bool("reverse")};
  return scan_like_vjp(ctx, s);
}

// cond / switch: a cond on the same index whose branch i is branch i's vjp (jax's cond
// transpose): operands (index, x..., ct of each float result), results the cotangents of the
// float x (the index gets none).
std::vector<Value> vjp_cond(VjpContext& ctx) {
  const GraphList& branches = ctx.node.attrs.get_graphs("branches");
  std::vector<Value> operands(ctx.operands.begin(), ctx.operands.end());
  for (size_t i = 0; i < ctx.results.size(); ++i)
    if (is_float(ctx.result_type(i).dtype)) operands.push_back(ctx.ct(i));
  std::vector<Value> grads(ctx.operands.size());
  std::vector<size_t> float_x;
  for (size_t i = 1; i < ctx.operands.size(); ++i)
    if (is_float(ctx.operand_type(i).dtype)) float_x.push_back(i);
  if (float_x.empty()) return grads;
  GraphList vjps;
  for (const GraphRef& b : branches)
    vjps.push_back(std::make_shared<const Graph>(body_vjp(*b, ctx.options)));
  std::vector<Value> r = ctx.g.emit(OpKind::Cond, operands, {{"branches", vjps}});
  for (size_t j = 0; j < float_x.size(); ++j) grads[float_x[j]] = r[j];
  return grads;
}

// A graph over `types` returning its inputs [from, from + count).
Graph identity_body(const std::string& name, const std::vector<TensorType>& types, size_t from,
                    size_t count) {
  Graph b(name);
  std::vector<Value> in;
  for (size_t i = 0; i < types.size(); ++i)
    in.push_back(b.input("a" + std::to_string(i), types[i].dtype, types[i].shape));
  b.set_outputs(std::vector<Value>(in.begin() + static_cast<ptrdiff_t>(from),
                                   in.begin() + static_cast<ptrdiff_t>(from + count)));
  return b;
}

// while_loop with max_trip_count N: differentiated as the equivalent scan of N steps carrying
// (alive, carry...): alive' = alive && cond(consts, carry), carry' = cond(alive', body,
// identity)(consts, carry) (jax's reverse mode of a bounded loop); that scan's forward pass
// also gives the loop's results, so the loop itself is dropped. Without a bound the loop has
// no vjp, as in jax (lax.while_loop is not reverse-differentiable); jvp() differentiates it in
// forward mode instead (grad.cc, forward_mode).
std::vector<Value> vjp_while(VjpContext& ctx) {
  const AttrMap& a = ctx.node.attrs;
  check(a.has("max_trip_count"),
        "grad: " + node_ref(ctx.node) +
            " has no max_trip_count: reverse-mode differentiation of a while_loop needs a bound "
            "on its trip count (as jax's lax.while_loop; give max_trip_count, or use scan); "
            "forward mode (jvp) works without one");
  const Graph& cond = a.get_graph("cond");
  const Graph& body = a.get_graph("body");
  const auto nc = static_cast<size_t>(a.get_int("num_consts"));
  const size_t nk = ctx.operands.size() - nc;
  std::vector<TensorType> ts = input_types(body);
  // The scan body: inputs consts, then the carry (alive, carry...); outputs that carry.
  Graph sb(body.name() + "_bounded");
  std::vector<Value> args;
  for (size_t i = 0; i < nc; ++i)
    args.push_back(sb.input("c" + std::to_string(i), ts[i].dtype, ts[i].shape));
  Value alive = sb.input("alive", DType::bool_, {});
  for (size_t i = nc; i < ts.size(); ++i)
    args.push_back(sb.input("h" + std::to_string(i - nc), ts[i].dtype, ts[i].shape));
  Value more = sb.logical_and(alive, inline_graph(sb, cond, args)[0]);
  std::vector<Value> cargs{more};
  cargs.insert(cargs.end(), args.begin(), args.end());
  GraphList branches{std::make_shared<const Graph>(identity_body("done", ts, nc, nk)),
                     std::make_shared<const Graph>(body)};
  std::vector<Value> outs{more};
  for (Value v : sb.emit(OpKind::Cond, cargs, {{"branches", branches}})) outs.push_back(v);
  sb.set_outputs(outs);
  // The scan's operands: consts, init (true, carry...); no xs.
  Graph& g = ctx.g;
  std::vector<Value> operands(ctx.operands.begin(),
                              ctx.operands.begin() + static_cast<ptrdiff_t>(nc));
  operands.push_back(g.constant(Tensor::from_doubles(DType::bool_, {}, std::vector<double>{1})));
  operands.insert(operands.end(), ctx.operands.begin() + static_cast<ptrdiff_t>(nc),
                  ctx.operands.end());
  VjpContext sctx{g, ctx.node, operands, {}, {}, {}, ctx.options, ctx.recomputed};
  // Results of the equivalent scan: (alive, carry...); alive has no cotangent.
  sctx.results.push_back(Value{});
  sctx.cts.push_back(Value{});
  for (size_t i = 0; i < nk; ++i) {
    sctx.results.push_back(ctx.results[i]);
    sctx.cts.push_back(ctx.cts[i]);
  }
  ScanSpec s{&sb, nc, nk + 1, a.get_int("max_trip_count"), false};
  // scan_like_vjp reads result types only for ys (none here), so the placeholder is not read.
  std::vector<Value> sg = scan_like_vjp(sctx, s);
  std::vector<Value> grads(sg.begin(), sg.begin() + static_cast<ptrdiff_t>(nc));
  grads.insert(grads.end(), sg.begin() + static_cast<ptrdiff_t>(nc + 1), sg.end());
  return grads;
}

}  // namespace

void register_vjp_control_flow() {
  set_vjp(OpKind::Cond, vjp_cond);
  set_vjp(OpKind::Scan, vjp_scan);
  set_vjp(OpKind::WhileLoop, vjp_while);
}

}  // namespace rlx::autodiff::detail
