// vjp rules of the nn ops with a direct rule: conv (transposed convolutions), top_k, softmax,
// log_softmax, softmax_cross_entropy, layer_norm, rms_norm and attention. The other nn
// composites (rope, pooling, fused forms) are differentiated through their decompositions.
#include <cmath>

#include "rules.h"

namespace rlx::autodiff::detail {
namespace {

using C = VjpContext;
using Grads = std::vector<Value>;
using Ints = std::vector<int64_t>;

// A per-spatial-dim conv attribute with the [] default expanded.
Ints spatial_attr(const AttrMap& a, const char* name, int ns, int64_t fill) {
  Ints v = a.get_ints(name);
  if (v.empty()) v.assign(static_cast<size_t>(ns), fill);
  return v;
}

// Swaps dims 0 and 1 (N <-> C for activations, O <-> I for kernels).
Value swap01(Graph& g, Value v) {
  Ints perm;
  for (int i = 0; i < g.shape(v).rank(); ++i) perm.push_back(i);
  std::swap(perm[0], perm[1]);
  return g.transpose(v, perm);
}

// conv(x, w) with window strides s, padding (pl, ph), kernel dilation d and g groups.
// dx: ct dilated by s (interior padding), padded by (k_eff - 1 - pl, in + pl - (out-1)s - 1)
//     and convolved with the kernel flipped spatially and transposed per group to
//     [C, O/g, K], dilation d (lax's _conv_general_vjp_lhs).
// dw: per group, x (padded) and ct with N and channels swapped, convolved with window
//     stride d and kernel dilation s, the first K positions kept, channels swapped back.
Grads vjp_conv(C& c) {
  Graph& g = c.g;
  TensorType xt = c.operand_type(0), wt = c.operand_type(1);
  Shape out = c.result_type().shape;
  const int ns = xt.shape.rank() - 2;
  const AttrMap& a = c.node.attrs;
  Ints s = spatial_attr(a, "strides", ns, 1), pl = spatial_attr(a, "pad_low", ns, 0);
  Ints ph = spatial_attr(a, "pad_high", ns, 0), d = spatial_attr(a, "dilation", ns, 1);
  const int64_t groups = a.get_int("groups");
  const int64_t ch = xt.shape[1], o = wt.shape[0], cg = ch / groups, og = o / groups;
  Grads grads(2);
  if (out.numel() == 0 || xt.shape.numel() == 0) {
    if (c.wants[0]) grads[0] = zeros(g, xt);
    if (c.wants[1]) grads[1] = zeros(g, wt);
    return grads;
  }
  Value ct = c.ct(), zero = g.scalar(0, xt.dtype);
  if (c.wants[0]) {
    Ints lo{0, 0}, hi{0, 0}, interior{0, 0}, flip;
    for (int i = 0; i < ns; ++i) {
      const size_t u = static_cast<size_t>(i);
      int64_t k_eff = d[u] * (wt.shape[i + 2] - 1) + 1;
      lo.push_back(k_eff - 1 - pl[u]);
      hi.push_back(xt.shape[i + 2] + pl[u] - (out[i + 2] - 1) * s[u] - 1);
      interior.push_back(s[u] - 1);
      flip.push_back(i + 2);
    }
    Value ct_p = g.pad(ct, zero, lo, hi, interior);
    Ints grouped{groups, og, cg};
    for (int i = 0; i < ns; ++i) grouped.push_back(wt.shape[i + 2]);
    Ints perm{0, 2, 1};
    for (int i = 0; i < ns; ++i) perm.push_back(i + 3);
    Ints wt_shape{ch, og};
    for (int i = 0; i < ns; ++i) wt_shape.push_back(wt.shape[i + 2]);
    Value w_t = g.reshape(g.transpose(g.reshape(c.operands[1], grouped), perm), wt_shape);
    w_t = g.reverse(w_t, flip);
    grads[0] = g.conv(ct_p, w_t, Ints(static_cast<size_t>(ns), 1), {}, {}, d, groups);
  }
  if (c.wants[1]) {
    Ints lo{0, 0}, hi{0, 0};
    for (int i = 0; i < ns; ++i) {
      lo.push_back(pl[static_cast<size_t>(i)]);
      hi.push_back(ph[static_cast<size_t>(i)]);
    }
    Value xp = g.pad(c.operands[0], zero, lo, hi);
    Shape xps = g.shape(xp);
    std::vector<Value> parts;
    for (int64_t gi = 0; gi < groups; ++gi) {
      Ints xs_lo(static_cast<size_t>(ns + 2), 0), xs_hi = xps.dims();
      xs_lo[1] = gi * cg;
      xs_hi[1] = (gi + 1) * cg;
      Ints cs_lo(static_cast<size_t>(ns + 2), 0), cs_hi = out.dims();
      cs_lo[1] = gi * og;
      cs_hi[1] = (gi + 1) * og;
      Value xg = groups == 1 ? xp : g.slice(xp, xs_lo, xs_hi);
      Value cgv = groups == 1 ? ct : g.slice(ct, cs_lo, cs_hi);
      Value r = g.conv(swap01(g, xg), swap01(g, cgv), d, {}, {}, s, 1);  // [Cg, Og, L...]
      Ints r_hi{cg, og};
      for (int i = 0; i < ns; ++i) r_hi.push_back(wt.shape[i + 2]);
      r = g.slice(r, Ints(static_cast<size_t>(ns + 2), 0), r_hi);
      parts.push_back(swap01(g, r));
    }
    grads[1] = parts.size() == 1 ? parts[0] : g.concatenate(parts, 0);
  }
  return grads;
}

// top_k: the values' cotangent scattered to the chosen positions; indices carry none.
Grads vjp_top_k(C& c) {
  if (!c.cts[0].valid()) return {Value{}};
  TensorType xt = c.operand_type(0);
  int last = xt.shape.rank() - 1;
  if (xt.shape.numel() == 0) return {zeros(c.g, xt)};
  return {scatter_along_axis(c.g, c.cts[0], c.results[1], xt.shape, last)};
}

// softmax: y * (ct - sum(ct * y)) along the axis.
Grads vjp_softmax(C& c) {
  Graph& g = c.g;
  Value y = c.results[0];
  int64_t axis = c.node.attrs.get_int("axis");
  Value dot = g.reduce_sum(g.mul(c.ct(), y), {axis}, true);
  return {g.mul(y, g.sub(c.ct(), dot))};
}

// log_softmax: ct - softmax(x) * sum(ct) along the axis, softmax(x) = exp(y).
Grads vjp_log_softmax(C& c) {
  Graph& g = c.g;
  int64_t axis = c.node.attrs.get_int("axis");
  Value total = g.reduce_sum(c.ct(), {axis}, true);
  return {g.sub(c.ct(), g.mul(g.exp(c.results[0]), total))};
}

// softmax_cross_entropy: d/dlogits = ct[..., None] * (softmax(logits) - onehot(label)), the
// label clamped into [0, C-1] as the forward reads it.
Grads vjp_softmax_cross_entropy(C& c) {
  Graph& g = c.g;
  TensorType lt = c.operand_type(0);
  const int last = lt.shape.rank() - 1;
  const int64_t classes = lt.shape[last];
  if (lt.shape.numel() == 0) return {zeros(g, lt), Value{}};
  Value labels = c.operands[1];
  DType it = g.dtype(labels);
  Value lab = g.clamp(g.scalar(0, it), labels, g.scalar(static_cast<double>(classes - 1), it));
  Ints iota_shape(static_cast<size_t>(lt.shape.rank()), 1);
  iota_shape.back() = classes;
  Value hit = g.eq(g.expand_dims(lab, {last}), g.iota(it, Shape(iota_shape), last));
  Value p = g.softmax(c.operands[0], last);
  Value diff = g.sub(p, g.convert(hit, lt.dtype));
  return {g.mul(g.expand_dims(c.ct(), {last}), diff), Value{}};
}

// The normalized axes [axis, rank) and the leading ones [0, axis) of a norm node.
void norm_axes(const C& c, Ints& norm, Ints& lead) {
  Shape xs = c.operand_type(0).shape;
  int axis = xs.normalize_axis(c.node.attrs.get_int("axis"));
  for (int i = 0; i < xs.rank(); ++i) (i < axis ? lead : norm).push_back(i);
}

Value sum_over(Graph& g, Value v, const Ints& axes) {
  return axes.empty() ? v : g.reduce_sum(v, axes);
}

// layer_norm: with xhat = (x - mean) r, r = rsqrt(var + eps), g = ct * scale:
// dx = r (g - mean(g) - xhat mean(g xhat)), dscale = sum_lead(ct xhat), dbias = sum_lead(ct).
Grads vjp_layer_norm(C& c) {
  Graph& g = c.g;
  Ints norm, lead;
  norm_axes(c, norm, lead);
  Value x = c.operands[0], ct = c.ct();
  Value eps = g.scalar(c.node.attrs.get_float("eps"), c.operand_type(0).dtype);
  Value centered = g.sub(x, g.reduce_mean(x, norm, true));
  Value r = g.rsqrt(g.add(g.reduce_mean(g.mul(centered, centered), norm, true), eps));
  Value xhat = g.mul(centered, r);
  Grads out(3);
  if (c.wants[0]) {
    Value gh = g.mul(ct, c.operands[1]);
    Value inner = g.sub(g.sub(gh, g.reduce_mean(gh, norm, true)),
                        g.mul(xhat, g.reduce_mean(g.mul(gh, xhat), norm, true)));
    out[0] = g.mul(r, inner);
  }
  if (c.wants[1]) out[1] = sum_over(g, g.mul(ct, xhat), lead);
  if (c.wants[2]) out[2] = sum_over(g, ct, lead);
  return out;
}

// rms_norm: with xhat = x r, r = rsqrt(mean(x^2) + eps), g = ct * scale:
// dx = r (g - xhat mean(g xhat)), dscale = sum_lead(ct xhat).
Grads vjp_rms_norm(C& c) {
  Graph& g = c.g;
  Ints norm, lead;
  norm_axes(c, norm, lead);
  Value x = c.operands[0], ct = c.ct();
  Value eps = g.scalar(c.node.attrs.get_float("eps"), c.operand_type(0).dtype);
  Value r = g.rsqrt(g.add(g.reduce_mean(g.mul(x, x), norm, true), eps));
  Value xhat = g.mul(x, r);
  Grads out(2);
  if (c.wants[0]) {
    Value gh = g.mul(ct, c.operands[1]);
    out[0] = g.mul(r, g.sub(gh, g.mul(xhat, g.reduce_mean(g.mul(gh, xhat), norm, true))));
  }
  if (c.wants[1]) out[1] = sum_over(g, g.mul(ct, xhat), lead);
  return out;
}

// attention(q, k, v[, mask]) with P = softmax(scale q k^T + mask) (masked entries 0):
// dv = P^T do, dP = do v^T, dS = P (dP - rowsum(dP P)), dq = scale dS k, dk = scale dS^T q,
// dbias = dS summed to the bias's shape. P itself comes from the op with v = I (Sk x Sk), so
// every mask kind, the window and fully masked rows (P = 0) follow the op's own semantics and
// its native kernel. GQA folds the G = Hq / Hkv query heads of a kv head into the rows, as the
// decomposition does. The FlashAttention-2 backward (Dao 2023) without the tiling.
Grads vjp_attention(C& c) {
  Graph& g = c.g;
  TensorType qt = c.operand_type(0), kt = c.operand_type(1), vt = c.operand_type(2);
  const int64_t nb = qt.shape[0], hq = qt.shape[1], sq = qt.shape[2], d = qt.shape[3];
  const int64_t hkv = kt.shape[1], sk = kt.shape[2], dv = vt.shape[3], group = hq / hkv;
  const DType dt = qt.dtype;
  Grads out(c.operands.size());
  if (qt.shape.numel() == 0 || kt.shape.numel() == 0) {
    for (size_t i = 0; i < out.size(); ++i)
      if (c.wants[i]) out[i] = zeros(g, c.operand_type(i));
    return out;
  }
  const AttrMap& a = c.node.attrs;
  double scale = a.has("scale") ? a.get_float("scale") : 1.0 / std::sqrt(static_cast<double>(d));
  Value eye = g.convert(
      g.eq(g.iota(DType::i32, Shape{sk, sk}, 0), g.iota(DType::i32, Shape{sk, sk}, 1)), dt);
  std::vector<Value> ops{c.operands[0], c.operands[1],
                         g.broadcast_in_dim(eye, {nb, hkv, sk, sk}, {2, 3})};
  if (c.operands.size() > 3) ops.push_back(c.operands[3]);
  Value p = g.emit1(OpKind::Attention, ops, a);  // [B,Hq,Sq,Sk]
  Value pf = g.reshape(p, {nb, hkv, group * sq, sk});
  Value dof = g.reshape(c.ct(), {nb, hkv, group * sq, dv});
  if (c.wants[2]) out[2] = g.dot_general(pf, dof, {0, 1}, {0, 1}, {2}, {2});
  bool need_scores = c.wants[0] || c.wants[1] || (out.size() > 3 && c.wants[3]);
  if (!need_scores) return out;
  Value dp = g.dot_general(dof, c.operands[2], {0, 1}, {0, 1}, {3}, {3});  // [B,Hkv,G*Sq,Sk]
  Value ds = g.mul(pf, g.sub(dp, g.reduce_sum(g.mul(dp, pf), {3}, true)));
  Value sc = g.scalar(scale, dt);
  if (c.wants[0]) {
    Value dq = g.dot_general(ds, c.operands[1], {0, 1}, {0, 1}, {3}, {2});  // [B,Hkv,G*Sq,D]
    out[0] = g.mul(g.reshape(dq, {nb, hq, sq, d}), sc);
  }
  if (c.wants[1]) {
    Value qf = g.reshape(c.operands[0], {nb, hkv, group * sq, d});
    out[1] = g.mul(g.dot_general(ds, qf, {0, 1}, {0, 1}, {2}, {2}), sc);  // [B,Hkv,Sk,D]
  }
  if (out.size() > 3 && c.wants[3])  // only a float (bias) mask can be active
    out[3] = unbroadcast(g, g.reshape(ds, {nb, hq, sq, sk}), c.operand_type(3).shape);
  return out;
}

}  // namespace

void register_vjp_nn() {
  set_vjp(OpKind::LayerNorm, vjp_layer_norm);
  set_vjp(OpKind::RmsNorm, vjp_rms_norm);
  set_vjp(OpKind::Attention, vjp_attention);
  set_vjp(OpKind::Conv, vjp_conv);
  set_vjp(OpKind::TopK, vjp_top_k);
  set_vjp(OpKind::Softmax, vjp_softmax);
  set_vjp(OpKind::LogSoftmax, vjp_log_softmax);
  set_vjp(OpKind::SoftmaxCrossEntropy, vjp_softmax_cross_entropy);
}

}  // namespace rlx::autodiff::detail
