// vjp rules of the control-flow ops: cond (a cond over the branches' vjps), scan (a residual
// scan stacking the carries, then a reverse scan of the body's vjp, optionally checkpointed) and
// while_loop with max_trip_count (differentiated as the equivalent bounded scan).
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

// The body with its outputs replaced by the new carry and, when `stack_inputs`, the carry it
// was given (stacked as ys, that is each step's residual).
Graph carry_body(const ScanSpec& s, bool stack_inputs) {
  Graph r = *s.body;
  std::vector<Value> outs(r.outputs().begin(), r.outputs().begin() + static_cast<ptrdiff_t>(s.nk));
  if (stack_inputs) {
    std::vector<int32_t> ins = r.inputs();
    for (size_t i = 0; i < s.nk; ++i) outs.push_back(Value{ins[s.nc + i], 0});
  }
  r.set_outputs(outs);
  dce(r);
  return r;
}

// Stacked carry entering each step, [length, carry...] per carry, as scan ys (ys[t] is step
// t's also for a reverse scan).
std::vector<Value> residual_carries(Graph& g, const ScanSpec& s, const std::vector<Value>& c,
                                    const std::vector<Value>& h, const std::vector<Value>& x) {
  if (s.nk == 0) return {};
  std::vector<Value> r = g.scan(carry_body(s, true), h, x, c, scan_options(s.length, s.reverse));
  g.rename(r[0].node, "scan_residuals");  // what the backward pass keeps (tests measure it)
  return std::vector<Value>(r.begin() + static_cast<ptrdiff_t>(s.nk), r.end());
}

struct ScanCotangents {
  std::vector<Value> dh;  // per float carry
  std::vector<Value> dc;  // per float const (acc_init plus every step's)
  std::vector<Value> dx;  // per float xs, stacked
};

// The reverse scan of the body's vjp over stacked residual carries `hs`: its carry holds the
// carry cotangents (from `ct_h`) and the float consts' accumulated cotangents (from
// `acc_init`); its xs are the residuals, the xs and the float ys' cotangents `ct_y`.
ScanCotangents backward_scan(Graph& g, const ScanSpec& s, const Graph& v,
                             const std::vector<Value>& c, const std::vector<Value>& hs,
                             const std::vector<Value>& x, const std::vector<Value>& ct_h,
                             const std::vector<Value>& acc_init, const std::vector<Value>& ct_y) {
  std::vector<TensorType> bt = input_types(*s.body);
  Graph b(s.body->name() + "_vjp");
  std::vector<Value> bc, bh, bx, bct_h, bacc, bct_y;
  for (size_t i = 0; i < s.nc; ++i)
    bc.push_back(b.input("c" + std::to_string(i), bt[i].dtype, bt[i].shape));
  for (size_t i = 0; i < ct_h.size(); ++i) {
    TensorType t = g.type(ct_h[i]);
    bct_h.push_back(b.input("ct_h" + std::to_string(i), t.dtype, t.shape));
  }
  for (size_t i = 0; i < acc_init.size(); ++i) {
    TensorType t = g.type(acc_init[i]);
    bacc.push_back(b.input("acc" + std::to_string(i), t.dtype, t.shape));
  }
  for (size_t i = 0; i < s.nk; ++i)
    bh.push_back(b.input("h" + std::to_string(i), bt[s.nc + i].dtype, bt[s.nc + i].shape));
  for (size_t i = s.nc + s.nk; i < bt.size(); ++i)
    bx.push_back(b.input("x" + std::to_string(i - s.nc - s.nk), bt[i].dtype, bt[i].shape));
  for (size_t i = 0; i < ct_y.size(); ++i) {
    Shape sh = g.shape(ct_y[i]);
    std::vector<int64_t> d(sh.dims().begin() + 1, sh.dims().end());
    bct_y.push_back(b.input("ct_y" + std::to_string(i), g.dtype(ct_y[i]), Shape(d)));
  }
  std::vector<Value> args = bc;
  args.insert(args.end(), bh.begin(), bh.end());
  args.insert(args.end(), bx.begin(), bx.end());
  args.insert(args.end(), bct_h.begin(), bct_h.end());
  args.insert(args.end(), bct_y.begin(), bct_y.end());
  std::vector<Value> d = inline_graph(b, v, args);  // float consts, carries, xs
  const size_t cf = acc_init.size(), kf = ct_h.size();
  std::vector<Value> outs(d.begin() + static_cast<ptrdiff_t>(cf),
                          d.begin() + static_cast<ptrdiff_t>(cf + kf));
  for (size_t i = 0; i < cf; ++i) outs.push_back(b.add(bacc[i], d[i]));
  const size_t num_carry = outs.size();
  outs.insert(outs.end(), d.begin() + static_cast<ptrdiff_t>(cf + kf), d.end());
  ScanCotangents out;
  if (outs.empty()) return out;
  b.set_outputs(outs);
  std::vector<Value> init = ct_h;
  init.insert(init.end(), acc_init.begin(), acc_init.end());
  std::vector<Value> xs = hs;
  xs.insert(xs.end(), x.begin(), x.end());
  xs.insert(xs.end(), ct_y.begin(), ct_y.end());
  std::vector<Value> r = g.scan(std::move(b), init, xs, c, scan_options(s.length, !s.reverse));
  out.dh.assign(r.begin(), r.begin() + static_cast<ptrdiff_t>(kf));
  out.dc.assign(r.begin() + static_cast<ptrdiff_t>(kf),
                r.begin() + static_cast<ptrdiff_t>(num_carry));
  out.dx.assign(r.begin() + static_cast<ptrdiff_t>(num_carry), r.end());
  return out;
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

// Emits the cotangents of a scan's float consts, carries and xs given those of its float
// carries (`ct_h`) and float ys (`ct_y`). With checkpointing (every k-th carry, k dividing the
// length) the segments run as an outer scan whose body recomputes the k residual carries and
// runs the same backward scan over them, so the arithmetic is that of the unchecked form.
ScanCotangents scan_vjp(Graph& g, const ScanSpec& s, const Node& node, const std::vector<Value>& c,
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
    std::vector<Value> hs = residual_carries(g, s, c, h, x);
    return backward_scan(g, s, v, c, hs, x, ct_h, acc0, ct_y);
  }
  check(s.length % k == 0, "grad: scan_checkpoint_every " + std::to_string(k) +
                               " does not divide the length " + std::to_string(s.length) + " of " +
                               node_ref(node));
  const int64_t nseg = s.length / k;
  std::vector<Value> xseg, ctyseg;
  for (Value xi : x) xseg.push_back(split_steps(g, xi, k));
  for (Value yi : ct_y) ctyseg.push_back(split_steps(g, yi, k));
  ScanSpec inner = s;
  inner.length = k;
  std::vector<TensorType> bt = input_types(*s.body);
  auto seg_input = [&](Graph& b, const std::string& name, const TensorType& t) {
    std::vector<int64_t> d = t.shape.dims();
    d.insert(d.begin(), k);
    return b.input(name, t.dtype, Shape(d));
  };
  // Forward: the carry entering each segment, stacked [nseg, carry...].
  Graph fwd(s.body->name() + "_checkpoints");
  std::vector<Value> fc, fh, fx;
  for (size_t i = 0; i < s.nc; ++i)
    fc.push_back(fwd.input("c" + std::to_string(i), bt[i].dtype, bt[i].shape));
  for (size_t i = 0; i < s.nk; ++i)
    fh.push_back(fwd.input("h" + std::to_string(i), bt[s.nc + i].dtype, bt[s.nc + i].shape));
  for (size_t i = s.nc + s.nk; i < bt.size(); ++i)
    fx.push_back(seg_input(fwd, "x" + std::to_string(i - s.nc - s.nk), bt[i]));
  std::vector<Value> fo = fwd.scan(carry_body(s, false), fh, fx, fc, scan_options(k, s.reverse));
  fo.insert(fo.end(), fh.begin(), fh.end());
  fwd.set_outputs(fo);
  std::vector<Value> ck = g.scan(std::move(fwd), h, xseg, c, scan_options(nseg, s.reverse));
  std::vector<Value> hck(ck.begin() + static_cast<ptrdiff_t>(s.nk), ck.end());
  g.rename(hck[0].node, "scan_checkpoints");
  // Backward: per segment, recompute its k residual carries and run the backward scan on them.
  Graph seg(s.body->name() + "_segment_vjp");
  std::vector<Value> sc, sct_h, sacc, sh, sx, sct_y;
  for (size_t i = 0; i < s.nc; ++i)
    sc.push_back(seg.input("c" + std::to_string(i), bt[i].dtype, bt[i].shape));
  for (size_t i = 0; i < ct_h.size(); ++i)
    sct_h.push_back(seg.input("ct_h" + std::to_string(i), g.dtype(ct_h[i]), g.shape(ct_h[i])));
  for (size_t i = 0; i < acc0.size(); ++i)
    sacc.push_back(seg.input("acc" + std::to_string(i), g.dtype(acc0[i]), g.shape(acc0[i])));
  for (size_t i = 0; i < s.nk; ++i)
    sh.push_back(seg.input("h" + std::to_string(i), bt[s.nc + i].dtype, bt[s.nc + i].shape));
  for (size_t i = s.nc + s.nk; i < bt.size(); ++i)
    sx.push_back(seg_input(seg, "x" + std::to_string(i - s.nc - s.nk), bt[i]));
  for (size_t i = 0; i < ct_y.size(); ++i) {
    std::vector<int64_t> d = g.shape(ct_y[i]).dims();
    d[0] = k;
    sct_y.push_back(seg.input("ct_y" + std::to_string(i), g.dtype(ct_y[i]), Shape(d)));
  }
  std::vector<Value> shs = residual_carries(seg, inner, sc, sh, sx);
  ScanCotangents r = backward_scan(seg, inner, v, sc, shs, sx, sct_h, sacc, sct_y);
  std::vector<Value> so = r.dh;
  so.insert(so.end(), r.dc.begin(), r.dc.end());
  const size_t num_carry = so.size();
  so.insert(so.end(), r.dx.begin(), r.dx.end());
  ScanCotangents out;
  if (so.empty()) return out;
  seg.set_outputs(so);
  std::vector<Value> init = ct_h;
  init.insert(init.end(), acc0.begin(), acc0.end());
  std::vector<Value> xs = hck;
  xs.insert(xs.end(), xseg.begin(), xseg.end());
  xs.insert(xs.end(), ctyseg.begin(), ctyseg.end());
  std::vector<Value> o = g.scan(std::move(seg), init, xs, c, scan_options(nseg, !s.reverse));
  out.dh.assign(o.begin(), o.begin() + static_cast<ptrdiff_t>(ct_h.size()));
  out.dc.assign(o.begin() + static_cast<ptrdiff_t>(ct_h.size()),
                o.begin() + static_cast<ptrdiff_t>(num_carry));
  for (size_t i = num_carry; i < o.size(); ++i) out.dx.push_back(merge_steps(g, o[i]));
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
  ScanCotangents r = scan_vjp(g, s, ctx.node, c, h, x, ct_h, ct_y, ctx.options);
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
  return grads;
}

// scan: residual carries stacked by a forward scan, then the reverse scan of the body's vjp
// (jax's scan partial-eval + transpose): d carry flows backwards step by step, d const is the
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
// identity)(consts, carry) (jax's reverse mode of a bounded loop). Without a bound the loop has
// no vjp, as in jax (lax.while_loop is not reverse-differentiable).
std::vector<Value> vjp_while(VjpContext& ctx) {
  const AttrMap& a = ctx.node.attrs;
  check(a.has("max_trip_count"),
        "grad: " + node_ref(ctx.node) +
            " has no max_trip_count: reverse-mode differentiation of a while_loop needs a bound "
            "on its trip count (as jax's lax.while_loop; give max_trip_count, or use scan); rlx's "
            "forward mode (jvp) transposes the vjp, so it needs the bound too");
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
  VjpContext sctx{g, ctx.node, operands, {}, {}, {}, ctx.options};
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
