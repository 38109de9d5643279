// ONNX Attention (opset 23+) and the losses NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss, composed from rlx primitives as onnx's reference computes them
// (a fully masked attention row gives 0; the masks, causal and sliding windows are additive
// -inf biases aligned at the past length).
#include <cmath>
#include <limits>

#include "importer.h"

namespace rlx::onnx::detail {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Value k(Graph& g, Value like, double v) { return g.scalar(v, g.dtype(like)); }

// [B, S, H*D] -> [B, H, S, D].
Value split_heads(Graph& g, Value x, int64_t heads) {
  const Shape s = g.shape(x);
  return g.transpose(g.reshape(x, {s[0], s[1], heads, s[2] / heads}), {0, 2, 1, 3});
}

// An additive bias [q, kv] (or [B, 1, q, kv] with a per-batch offset) that is 0 where key j is
// allowed for query i: j <= i + offset (causal), and within the window when one is given.
Value position_bias(NodeContext& c, DType dt, int64_t q, int64_t kv, std::optional<Value> offset,
                    int64_t past, bool causal, int64_t left, int64_t right) {
  Graph& g = c.g;
  Value i = g.iota(DType::i64, Shape{q, kv}, 0), j = g.iota(DType::i64, Shape{q, kv}, 1);
  Value pos = g.add(i, offset ? g.reshape(*offset, {-1, 1, 1, 1})
                              : g.scalar(static_cast<double>(past), DType::i64));
  Value allowed = causal ? g.le(j, pos) : g.eq(j, j);
  if (left >= 0)
    allowed = g.logical_and(allowed,
                            g.le(g.sub(pos, j), g.scalar(static_cast<double>(left), DType::i64)));
  if (right >= 0)
    allowed = g.logical_and(allowed,
                            g.le(g.sub(j, pos), g.scalar(static_cast<double>(right), DType::i64)));
  return g.select(allowed, g.scalar(0, dt), g.scalar(-kInf, dt));
}

void convert_attention(NodeContext& c) {
  Graph& g = c.g;
  Value q = c.input(0), key = c.input(1), v = c.input(2);
  const DType dt = g.dtype(q);
  const bool three_d = g.shape(q).rank() == 3;
  if (three_d) {
    const int64_t qh = c.attr_int("q_num_heads", 0), kvh = c.attr_int("kv_num_heads", 0);
    c.require(qh > 0 && kvh > 0, "3-D inputs need q_num_heads and kv_num_heads");
    q = split_heads(g, q, qh);
    key = split_heads(g, key, kvh);
    v = split_heads(g, v, kvh);
  }
  c.require(g.shape(q).rank() == 4 && g.shape(key).rank() == 4 && g.shape(v).rank() == 4,
            "Q, K and V must all be 3-D or all 4-D");
  const int64_t head_dim = g.shape(q)[3];
  double scale = c.attr_float("scale", 1.0 / std::sqrt(static_cast<double>(head_dim)));
  int64_t past = 0;
  if (c.has_input(4)) {
    past = g.shape(c.input(4))[2];
    key = g.concatenate({c.input(4), key}, 2);
    v = g.concatenate({c.input(5), v}, 2);
  }
  c.set_output(1, key);
  c.set_output(2, v);
  const int64_t sq = g.shape(q)[2], skv = g.shape(key)[2];
  const bool causal = c.attr_int("is_causal", 0) != 0;
  const int64_t left = c.attr_int("left_window_size", -1),
                right = c.attr_int("right_window_size", -1);
  std::optional<Value> nonpad;
  if (c.has_input(6)) nonpad = g.convert(c.input(6), DType::i64);
  // The mask as an additive bias, its last dim padded to the kv length (-inf / false).
  std::optional<Value> bias;
  if (c.has_input(3)) {
    Value m = c.input(3);
    const Shape ms = g.shape(m);
    const int64_t pad = skv - ms[ms.rank() - 1];
    c.require(pad >= 0, "attn_mask is longer than the key sequence");
    if (g.dtype(m) == DType::bool_) {
      m = g.select(m, g.scalar(0, dt), g.scalar(-kInf, dt));
    } else {
      m = g.convert(m, dt);
    }
    if (pad > 0) {
      std::vector<int64_t> lo(static_cast<size_t>(ms.rank()), 0), hi = lo;
      hi.back() = pad;
      m = g.pad(m, g.scalar(-kInf, dt), lo, hi);
    }
    bias = m;
  }
  if (causal || left >= 0 || right >= 0) {
    std::optional<Value> offset;
    if (nonpad && past == 0) offset = g.sub(*nonpad, g.scalar(static_cast<double>(sq), DType::i64));
    Value pb = position_bias(c, dt, sq, skv, offset, past, causal, left, right);
    bias = bias ? g.add(*bias, pb) : pb;
  }
  if (nonpad) {
    Value j = g.iota(DType::i64, Shape{g.shape(q)[0], 1, 1, skv}, 3);
    Value keep = g.lt(j, g.reshape(*nonpad, {-1, 1, 1, 1}));
    Value pb = g.select(keep, g.scalar(0, dt), g.scalar(-kInf, dt));
    bias = bias ? g.add(*bias, pb) : pb;
  }
  // Grouped heads: each K/V head serves q_heads / kv_heads query heads.
  const int64_t hq = g.shape(q)[1], hk = g.shape(key)[1];
  if (hq != hk) {
    c.require(hq % hk == 0, "query heads must be a multiple of key/value heads");
    auto repeat = [&](Value x) {
      const Shape s = g.shape(x);
      Value b = g.broadcast_in_dim(x, {s[0], s[1], hq / hk, s[2], s[3]}, {0, 1, 3, 4});
      return g.reshape(b, {s[0], hq, s[2], s[3]});
    };
    key = repeat(key);
    v = repeat(v);
  }
  Value s = k(g, q, std::sqrt(scale));
  Value qk = g.matmul(g.mul(q, s), g.transpose(g.mul(key, s), {0, 1, 3, 2}));
  const double softcap = c.attr_float("softcap", 0.0);
  if (softcap > 0) qk = g.mul(g.tanh(g.div(qk, k(g, qk, softcap))), k(g, qk, softcap));
  Value x = bias ? g.add(qk, *bias) : qk;
  const int64_t mode = c.attr_int("qk_matmul_output_mode", 0);
  if (c.has_attr("softmax_precision")) {
    auto p = dtype_of(static_cast<int32_t>(c.attr_int("softmax_precision", 1)));
    c.require(p && is_float(*p), "softmax_precision must be a float type rlx has");
    x = g.convert(x, *p);
  }
  // Softmax whose fully masked (-inf) rows give 0.
  Value m = g.reduce_max(x, {-1}, true);
  Value neg_inf = k(g, m, -kInf);
  Value e = g.exp(g.sub(x, g.select(g.eq(m, neg_inf), k(g, m, 0), m)));
  Value sum = g.reduce_sum(e, {-1}, true);
  Value p = g.div(e, g.select(g.eq(sum, k(g, sum, 0)), k(g, sum, 1), sum));
  if (bias) {
    Value bm = g.reduce_max(
        g.add(*bias, g.broadcast_in_dim(k(g, *bias, 0), g.shape(qk).dims(), {})), {-1}, true);
    p = g.select(g.eq(bm, k(g, bm, -kInf)), k(g, p, 0), p);
  }
  p = g.convert(p, dt);
  if (c.wants_output(3)) {
    Value out = mode == 1 ? qk : mode == 2 ? x : mode == 3 ? p : qk;
    if (mode == 0 && softcap > 0)
      out = g.matmul(g.mul(q, s), g.transpose(g.mul(key, s), {0, 1, 3, 2}));
    c.set_output(3, g.convert(out, dt));
  }
  Value y = g.matmul(p, v);
  if (three_d) {
    const Shape ys = g.shape(y);
    y = g.reshape(g.transpose(y, {0, 2, 1, 3}), {ys[0], ys[2], ys[1] * ys[3]});
  }
  c.set_output(0, y);
}

// -input[n, target[n, ...], ...] * weight[target], reduced as `reduction` ("mean" divides by
// the summed weights of the targets not ignored).
Value nll(NodeContext& c, Value input, Value target, std::optional<Value> weight) {
  Graph& g = c.g;
  const DType dt = g.dtype(input);
  Value t = g.convert(target, DType::i64);
  std::optional<Value> ignored;
  if (c.has_attr("ignore_index"))
    ignored = g.eq(t, g.scalar(static_cast<double>(c.attr_int("ignore_index", 0)), DType::i64));
  if (ignored) t = g.select(*ignored, g.scalar(0, DType::i64), t);
  Value picked = g.squeeze(g.take_along_axis(input, g.expand_dims(t, {1}), 1), {1});
  Value w =
      weight ? g.gather(*weight, t, 0) : g.broadcast_in_dim(g.scalar(1, dt), g.shape(t).dims(), {});
  if (ignored) w = g.select(*ignored, g.scalar(0, dt), w);
  Value loss = g.neg(g.mul(picked, w));
  const std::string reduction = c.attr_string("reduction", "mean");
  std::vector<int64_t> all;
  for (int i = 0; i < g.shape(loss).rank(); ++i) all.push_back(i);
  if (reduction == "none") return loss;
  if (reduction == "sum") return g.reduce_sum(loss, all);
  c.require(reduction == "mean", "reduction must be none, sum or mean");
  return g.div(g.reduce_sum(loss, all), g.reduce_sum(w, all));
}

}  // namespace

void add_attention_converters(ConverterTable& t) {
  t[{"", "Attention"}] = convert_attention;
  t[{"", "NegativeLogLikelihoodLoss"}] = [](NodeContext& c) {
    c.set_output(0, nll(c, c.input(0), c.input(1), c.optional_input(2)));
  };
  t[{"", "SoftmaxCrossEntropyLoss"}] = [](NodeContext& c) {
    Value lp = c.g.log_softmax(c.input(0), 1);
    c.set_output(0, nll(c, lp, c.input(1), c.optional_input(2)));
    c.set_output(1, lp);
  };
}

}  // namespace rlx::onnx::detail
