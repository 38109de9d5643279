// Decompositions of composite nn ops (softmax, log_softmax, layer_norm, rms_norm, attention,
// rope, softmax_cross_entropy) into reductions, elementwise ops, shape ops and dot_general; the
// normalisations (and attention's softmax) of f16 / bf16 compute in f32.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "decompose.h"

namespace rlx::detail {
namespace {

using Ints = std::vector<int64_t>;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Axes [axis, rank) for the norms.
Ints trailing_axes(int axis, int rank) {
  Ints axes;
  for (int i = axis; i < rank; ++i) axes.push_back(i);
  return axes;
}

bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

// A normalisation of f16 / bf16 operands computes in f32 and rounds its results back once:
// its statistics (mean, variance, mean square, max, sum of exponentials) would lose the mean
// of [60000, 60032, 60064, 60096] to f16 rounding and overflow 300^2 (f16's max is 65504).
// The widening converts are explicit, so the statistics are f32 whatever the graph's dtypes;
// other operands pass through.
std::vector<Value> in_f32(Graph& g, const Node& node, std::span<const Value> ops, DecomposeFn f) {
  bool half = false;
  for (Value v : ops) half = half || is_half(g.dtype(v));
  if (!half) return f(g, node, ops);
  std::vector<Value> wide;
  for (Value v : ops) wide.push_back(is_half(g.dtype(v)) ? g.convert(v, DType::f32) : v);
  std::vector<Value> out = f(g, node, wide);
  for (size_t i = 0; i < out.size(); ++i)
    if (g.dtype(out[i]) != node.results[i].dtype) out[i] = g.convert(out[i], node.results[i].dtype);
  return out;
}

// Max-subtracted so that large finite inputs never overflow exp (also in f16); an all -inf
// row gives -inf - -inf = NaN, as jax.nn.softmax.
std::vector<Value> decompose_softmax(Graph& g, const Node& node, std::span<const Value> ops) {
  Value x = ops[0];
  int64_t axis = g.shape(x).normalize_axis(node.attrs.get_int("axis"));
  Value m = g.reduce_max(x, {axis}, true);
  Value e = g.exp(g.sub(x, m));
  return {g.div(e, g.reduce_sum(e, {axis}, true))};
}

// x - max - log(sum(exp(x - max))).
std::vector<Value> decompose_log_softmax(Graph& g, const Node& node, std::span<const Value> ops) {
  Value x = ops[0];
  int64_t axis = g.shape(x).normalize_axis(node.attrs.get_int("axis"));
  Value shifted = g.sub(x, g.reduce_max(x, {axis}, true));
  Value sum = g.reduce_sum(g.exp(shifted), {axis}, true);
  return {g.sub(shifted, g.log(sum))};
}

// c = x - mean(x); (c * rsqrt(mean(c * c) + eps)) * scale + bias over [axis, rank): the
// two-pass variance stays accurate when |mean| >> std.
std::vector<Value> decompose_layer_norm(Graph& g, const Node& node, std::span<const Value> ops) {
  Value x = ops[0];
  int rank = g.shape(x).rank();
  Ints axes = trailing_axes(g.shape(x).normalize_axis(node.attrs.get_int("axis")), rank);
  Value c = g.sub(x, g.reduce_mean(x, axes, true));
  Value var = g.reduce_mean(g.mul(c, c), axes, true);
  Value r = g.rsqrt(g.add(var, g.scalar_like(var, node.attrs.get_float("eps"))));
  return {g.add(g.mul(g.mul(c, r), ops[1]), ops[2])};
}

// (x * rsqrt(mean(x * x) + eps)) * scale over [axis, rank).
std::vector<Value> decompose_rms_norm(Graph& g, const Node& node, std::span<const Value> ops) {
  Value x = ops[0];
  int rank = g.shape(x).rank();
  Ints axes = trailing_axes(g.shape(x).normalize_axis(node.attrs.get_int("axis")), rank);
  Value ms = g.reduce_mean(g.mul(x, x), axes, true);
  Value r = g.rsqrt(g.add(ms, g.scalar_like(ms, node.attrs.get_float("eps"))));
  return {g.mul(g.mul(x, r), ops[1])};
}

// scores = (q k^T) * scale with the G = Hq / Hkv query heads of one kv head folded into the
// query length ([B,Hkv,G*Sq,D], so query head h meets kv head h / G); masked scores become
// -inf before the max and their exp is forced to 0 after it, so masked positions contribute
// exactly 0 whatever their score, and a fully masked row (denominator 0, divided by 1 instead)
// yields 0.
std::vector<Value> decompose_attention(Graph& g, const Node& node, std::span<const Value> ops) {
  Value q = ops[0], k = ops[1], v = ops[2];
  // Shapes are copied: g.shape() refers into the node list, which grows below.
  Shape qs = g.shape(q), ks = g.shape(k), vs = g.shape(v);
  int64_t nb = qs[0], hq = qs[1], sq = qs[2], d = qs[3];
  int64_t hkv = ks[1], sk = ks[2], dv = vs[3], group = hq / hkv;
  DType dt = g.dtype(q);
  const std::string& kind = node.attrs.get_string("mask");
  // As in the evaluator: a window >= Sk is the same mask as window Sk.
  int64_t window = std::min(node.attrs.get_int("window"), ks[2]);
  double scale = node.attrs.has("scale") ? node.attrs.get_float("scale")
                                         : 1.0 / std::sqrt(static_cast<double>(d));

  // f16 / bf16 scores and their softmax are f32 (in_f32's reason: the row sums); the weights
  // are rounded back to dt for the second contraction.
  DType st = is_half(dt) ? DType::f32 : dt;
  Value s = g.dot_general(g.reshape(q, {nb, hkv, group * sq, d}), k, {0, 1}, {0, 1}, {3}, {3});
  s = g.reshape(s, {nb, hq, sq, sk});
  if (st != dt) s = g.convert(s, st);
  s = g.mul(s, g.scalar(scale, st));

  std::optional<Value> mask;
  if (kind == "causal" || kind == "sliding_window") {
    // Query i sits at key position i + Sk - Sq (the last query meets the last key).
    constexpr int64_t kI32Safe = int64_t{1} << 30;
    DType it = sq < kI32Safe && sk < kI32Safe && window < kI32Safe ? DType::i32 : DType::i64;
    Value pos = g.add(g.iota(it, Shape{sq, sk}, 0), g.scalar(static_cast<double>(sk - sq), it));
    Value col = g.iota(it, Shape{sq, sk}, 1);
    mask = g.le(col, pos);
    if (kind == "sliding_window")
      mask = g.logical_and(*mask, g.lt(g.sub(pos, g.scalar(static_cast<double>(window), it)), col));
  } else if (kind == "causal_lengths") {
    // Query i of row b sits at key position lengths[b] - Sq + i: [B,1,Sq,Sk] from iotas.
    DType it = g.dtype(ops[3]) == DType::i64 ? DType::i64 : DType::i32;
    Value len = g.reshape(g.convert(ops[3], it), {nb, 1, 1, 1});
    Value pos =
        g.add(g.iota(it, Shape{sq, sk}, 0), g.sub(len, g.scalar(static_cast<double>(sq), it)));
    mask = g.le(g.iota(it, Shape{sq, sk}, 1), pos);
  } else if (kind == "bool") {
    mask = ops[3];
  } else if (kind == "bias") {
    s = g.add(s, g.dtype(ops[3]) == st ? ops[3] : g.convert(ops[3], st));
    mask = g.ne(s, g.scalar(-kInf, st));
  }
  Value zero = g.scalar(0, st);
  if (mask) s = g.select(*mask, s, g.scalar(-kInf, st));
  Value p = g.exp(g.sub(s, g.reduce_max(s, {3}, true)));
  if (mask) p = g.select(*mask, p, zero);
  Value den = g.reduce_sum(p, {3}, true);
  Value w = g.div(p, g.select(g.gt(den, zero), den, g.scalar(1, st)));
  if (st != dt) w = g.convert(w, dt);
  Value o = g.dot_general(g.reshape(w, {nb, hkv, group * sq, sk}), v, {0, 1}, {0, 1}, {3}, {2});
  return {g.reshape(o, {nb, hq, sq, dv})};
}

// Slice of `x` along its last dim, [lo, hi).
Value slice_last(Graph& g, Value x, int64_t lo, int64_t hi) {
  Ints limit = g.shape(x).dims();
  Ints start(limit.size(), 0);
  start.back() = lo;
  limit.back() = hi;
  return g.slice(x, std::move(start), std::move(limit));
}

// Rotates pairs (a, b) = neox (t, t + R/2) or gptj (2t, 2t + 1), t < R/2, to
// (a cos - b sin, b cos + a sin) and concatenates the pass-through dims [R, D).
std::vector<Value> decompose_rope(Graph& g, const Node& node, std::span<const Value> ops) {
  Value x = ops[0], cos = ops[1], sin = ops[2];
  Ints dims = g.shape(x).dims();
  int64_t last = static_cast<int64_t>(dims.size()) - 1;
  int64_t d = dims.back(), half = g.shape(cos).dims().back(), r = 2 * half;
  bool neox = node.attrs.get_string("layout") == "neox";
  Ints halves = dims, pairs = dims;  // [..., R/2] and [..., R/2, 2]
  halves.back() = half;
  pairs.back() = half;
  pairs.push_back(2);
  Value a, b;
  if (neox) {
    a = slice_last(g, x, 0, half);
    b = slice_last(g, x, half, r);
  } else {
    Value xp = g.reshape(slice_last(g, x, 0, r), pairs);
    a = g.reshape(slice_last(g, xp, 0, 1), halves);
    b = g.reshape(slice_last(g, xp, 1, 2), halves);
  }
  Value ra = g.sub(g.mul(a, cos), g.mul(b, sin));
  Value rb = g.add(g.mul(b, cos), g.mul(a, sin));
  Value rotated;
  if (neox) {
    rotated = g.concatenate({ra, rb}, last);
  } else {
    Ints column = halves;  // [..., R/2, 1]
    column.push_back(1);
    Ints full = dims;
    full.back() = r;
    rotated =
        g.reshape(g.concatenate({g.reshape(ra, column), g.reshape(rb, column)}, last + 1), full);
  }
  if (r == d) return {rotated};
  return {g.concatenate({rotated, slice_last(g, x, r, d)}, last)};
}

// -log_softmax(logits)[label] via take_along_axis (which clamps labels like gather).
std::vector<Value> decompose_softmax_cross_entropy(Graph& g, const Node&,
                                                   std::span<const Value> ops) {
  Value logits = ops[0], labels = ops[1];
  int64_t last = g.shape(logits).rank() - 1;
  Ints batch = g.shape(labels).dims();
  Value ls = g.log_softmax(logits, last);
  Value picked = g.take_along_axis(ls, g.expand_dims(labels, {last}), last);
  return {g.reshape(g.neg(picked), std::move(batch))};
}

}  // namespace

void register_decompose_nn() {
  // The normalisations compute f16 / bf16 in f32 (in_f32).
  set_decomposition(OpKind::Softmax, [](Graph& g, const Node& n, std::span<const Value> ops) {
    return in_f32(g, n, ops, decompose_softmax);
  });
  set_decomposition(OpKind::LogSoftmax, [](Graph& g, const Node& n, std::span<const Value> ops) {
    return in_f32(g, n, ops, decompose_log_softmax);
  });
  set_decomposition(OpKind::LayerNorm, [](Graph& g, const Node& n, std::span<const Value> ops) {
    return in_f32(g, n, ops, decompose_layer_norm);
  });
  set_decomposition(OpKind::RmsNorm, [](Graph& g, const Node& n, std::span<const Value> ops) {
    return in_f32(g, n, ops, decompose_rms_norm);
  });
  set_decomposition(OpKind::Attention, decompose_attention);
  set_decomposition(OpKind::Rope, decompose_rope);
  set_decomposition(OpKind::SoftmaxCrossEntropy, decompose_softmax_cross_entropy);
}

}  // namespace rlx::detail
