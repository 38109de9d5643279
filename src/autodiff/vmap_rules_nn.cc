// Batching rules of dot_general, conv and the neural-network composites: the batch becomes a
// dot_general batch dim, or is folded into an existing batch dim (attention, pooling, conv's
// N, or conv's channel groups for a batched kernel).
#include "vmap_rules.h"

namespace rlx::autodiff::vmap_detail {
namespace {

std::vector<int64_t> plus_one(const std::vector<int64_t>& v) {
  std::vector<int64_t> out;
  for (int64_t x : v) out.push_back(x + 1);
  return out;
}

// dot_general: both batched -> a new leading batch dim pair; one batched -> its batch dim is a
// free dim of that side, which lands after the batch dims (lhs) or after lhs's free dims (rhs)
// and is moved to the front.
std::optional<std::vector<BVal>> batch_dot_general(BatchContext& ctx) {
  Graph& g = ctx.g;
  AttrMap a = ctx.node.attrs;
  const auto lb = a.get_ints("lhs_batch"), rb = a.get_ints("rhs_batch");
  const auto lc = a.get_ints("lhs_contract"), rc = a.get_ints("rhs_contract");
  const bool bl = ctx.in[0].batched, br = ctx.in[1].batched;
  if (bl) {
    a.set("lhs_batch", plus_one(lb));
    a.set("lhs_contract", plus_one(lc));
  }
  if (br) {
    a.set("rhs_batch", plus_one(rb));
    a.set("rhs_contract", plus_one(rc));
  }
  if (bl && br) {
    std::vector<int64_t> l = a.get_ints("lhs_batch"), r = a.get_ints("rhs_batch");
    l.insert(l.begin(), 0);
    r.insert(r.begin(), 0);
    a.set("lhs_batch", l);
    a.set("rhs_batch", r);
    return ctx.emit_batched({ctx.in[0].v, ctx.in[1].v}, a);
  }
  Value r = g.emit1(OpKind::DotGeneral, {ctx.in[0].v, ctx.in[1].v}, a, ctx.node.name);
  const int64_t lhs_free =
      ctx.unbatched_type(0).shape.rank() - static_cast<int64_t>(lb.size() + lc.size());
  const int64_t at = static_cast<int64_t>(lb.size()) + (bl ? 0 : lhs_free);
  return std::vector<BVal>{{move_axis(g, r, static_cast<int>(at), 0), true}};
}

// softmax / log_softmax: the axis moves one place right.
std::optional<std::vector<BVal>> batch_softmax(BatchContext& ctx) {
  AttrMap a = ctx.node.attrs;
  a.set("axis", shift_axis(a.get_int("axis"), ctx.unbatched_type(0).shape.rank()));
  return ctx.emit_batched({ctx.in[0].v}, a);
}

// layer_norm / rms_norm with shared scale (and bias): normalized dims [axis+1, rank+1), scale
// unchanged. Per-example scales decline (the decomposition broadcasts them).
std::optional<std::vector<BVal>> batch_norm(BatchContext& ctx) {
  for (size_t i = 1; i < ctx.in.size(); ++i)
    if (ctx.in[i].batched) return std::nullopt;
  std::vector<Value> ops;
  for (const BVal& b : ctx.in) ops.push_back(b.v);
  ops[0] = ctx.batched(0);
  AttrMap a = ctx.node.attrs;
  a.set("axis", shift_axis(a.get_int("axis"), ctx.unbatched_type(0).shape.rank()));
  return ctx.emit_batched(ops, a);
}

// rope broadcasts over x's leading dims: a batched x with shared tables needs nothing else.
std::optional<std::vector<BVal>> batch_rope(BatchContext& ctx) {
  if (ctx.in[1].batched || ctx.in[2].batched) return std::nullopt;
  return ctx.emit_batched({ctx.in[0].v, ctx.in[1].v, ctx.in[2].v}, ctx.node.attrs);
}

// Ops over a leading batch dim N (pools: [N,C,...]; attention: [B,H,S,D]): [V,N,...] is folded
// to [V*N,...] and the result unfolded.
std::optional<std::vector<BVal>> batch_pool(BatchContext& ctx) {
  Value r =
      ctx.g.emit1(ctx.node.op, {fold_batch(ctx.g, ctx.in[0].v)}, ctx.node.attrs, ctx.node.name);
  return std::vector<BVal>{{unfold_batch(ctx.g, r, ctx.size), true}};
}

std::optional<std::vector<BVal>> batch_attention(BatchContext& ctx) {
  Graph& g = ctx.g;
  std::vector<Value> ops;
  for (size_t i = 0; i < 3; ++i) ops.push_back(fold_batch(g, ctx.batched(i)));
  if (ctx.in.size() == 4 && ctx.node.attrs.get_string("mask") == "causal_lengths") {
    // lengths [B] per example: [V, B] folded with V like q, k and v.
    ops.push_back(fold_batch(g, ctx.batched(3)));
  } else if (ctx.in.size() == 4) {
    // The mask broadcasts to [B,Hq,Sq,Sk]. A shared mask whose batch extent is 1 (or absent)
    // still broadcasts against V*B. Otherwise only its batch extent is expanded (to [V, B,
    // its other dims]) and folded with V; its size-1 head / query dims stay size 1.
    const Shape ms = ctx.unbatched_type(3).shape;
    if (!ctx.in[3].batched && (ms.rank() < 4 || ms[0] == 1)) {
      ops.push_back(ctx.in[3].v);
    } else {
      std::vector<int64_t> m4(static_cast<size_t>(4 - ms.rank()), 1);
      m4.insert(m4.end(), ms.dims().begin(), ms.dims().end());
      std::vector<int64_t> shape{ctx.size, ctx.unbatched_type(0).shape[0], m4[1], m4[2], m4[3]};
      std::vector<int64_t> dims{0};
      for (int i = 0; i < ms.rank(); ++i) dims.push_back(5 - ms.rank() + i);
      ops.push_back(fold_batch(g, g.broadcast_in_dim(ctx.batched(3), shape, dims)));
    }
  }
  Value r = g.emit1(OpKind::Attention, ops, ctx.node.attrs, ctx.node.name);
  return std::vector<BVal>{{unfold_batch(g, r, ctx.size), true}};
}

// conv: a shared kernel folds the batch into N. A batched kernel (per-example weights) uses the
// channel groups, as JAX does: x [V,N,C,..] -> [N, V*C, ..], w [V,O,C/g,..] -> [V*O, C/g, ..],
// groups g*V (group v*g + j reads example v's channel block j), out [N, V*O, ..] -> [V,N,O,..].
std::optional<std::vector<BVal>> batch_conv(BatchContext& ctx) {
  Graph& g = ctx.g;
  if (!ctx.in[1].batched) {
    Value r = g.emit1(OpKind::Conv, {fold_batch(g, ctx.in[0].v), ctx.in[1].v}, ctx.node.attrs,
                      ctx.node.name);
    return std::vector<BVal>{{unfold_batch(g, r, ctx.size), true}};
  }
  Value xt = move_axis(g, ctx.batched(0), 0, 1);  // [N, V, C, ...]
  std::vector<int64_t> xs = g.shape(xt).dims();
  xs[2] *= xs[1];
  xs.erase(xs.begin() + 1);
  Value x = g.reshape(xt, xs);           // [N, V*C, ...]
  Value w = fold_batch(g, ctx.in[1].v);  // [V*O, C/g, ...]
  AttrMap a = ctx.node.attrs;
  a.set("groups", a.get_int("groups") * ctx.size);
  Value r = g.emit1(OpKind::Conv, {x, w}, a, ctx.node.name);  // [N, V*O, ...]
  std::vector<int64_t> s = g.shape(r).dims();
  s[1] /= ctx.size;
  s.insert(s.begin() + 1, ctx.size);
  return std::vector<BVal>{{move_axis(g, g.reshape(r, s), 1, 0), true}};
}

// softmax_cross_entropy works over any leading dims: both operands get the batch.
std::optional<std::vector<BVal>> batch_cross_entropy(BatchContext& ctx) {
  return ctx.emit_batched({ctx.batched(0), ctx.batched(1)}, ctx.node.attrs);
}

}  // namespace

void register_batch_nn() {
  set_batch_rule(OpKind::DotGeneral, batch_dot_general);
  set_batch_rule(OpKind::Softmax, batch_softmax);
  set_batch_rule(OpKind::LogSoftmax, batch_softmax);
  set_batch_rule(OpKind::LayerNorm, batch_norm);
  set_batch_rule(OpKind::RmsNorm, batch_norm);
  set_batch_rule(OpKind::Rope, batch_rope);
  set_batch_rule(OpKind::MaxPool, batch_pool);
  set_batch_rule(OpKind::AvgPool, batch_pool);
  set_batch_rule(OpKind::Attention, batch_attention);
  set_batch_rule(OpKind::Conv, batch_conv);
  set_batch_rule(OpKind::SoftmaxCrossEntropy, batch_cross_entropy);
}

}  // namespace rlx::autodiff::vmap_detail
