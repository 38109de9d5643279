// Reference kernels for fused ops: direct loops in double, each result rounded once; the region
// op evaluates its body graph.
#include <cmath>
#include <string>
#include <vector>

#include "eval.h"

namespace rlx::detail {
namespace {

// Shape of a matmul operand with numpy's 1-D promotion: x [K] -> [1, K], w [K] -> [K, 1].
Shape as_matrix(const Shape& s, bool is_lhs) {
  if (s.rank() != 1) return s;
  return is_lhs ? Shape{1, s[0]} : Shape{s[0], 1};
}

Shape leading(const Shape& s) {
  return Shape(std::vector<int64_t>(s.dims().begin(), s.dims().end() - 2));
}

std::vector<Tensor> eval_matmul_bias_act(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  const Tensor& w = ctx.operands[1];
  const Tensor& bias = ctx.operands[2];
  const TensorType& rt = ctx.result_type();
  Tensor out(rt.dtype, rt.shape);
  Shape xs = as_matrix(x.shape(), true), ws = as_matrix(w.shape(), false);
  int64_t m = xs[xs.rank() - 2], k = xs[xs.rank() - 1], n = ws[ws.rank() - 1];
  // The squeezed 1-D dims have size 1, so [batch..., M, N] has the result's row-major order.
  Shape batch = *broadcast_shapes(leading(xs), leading(ws));
  BroadcastIndexer xb(leading(xs), batch), wb(leading(ws), batch), bb(bias.shape(), rt.shape);
  const std::string& act = ctx.attrs().get_string("activation");
  int64_t flat = 0;
  for (int64_t b = 0; b < batch.numel(); ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j, ++flat) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += x.get_f64((xb(b) * m + i) * k + p) * w.get_f64((wb(b) * k + p) * n + j);
        out.set_f64(flat, apply_activation(act, acc + bias.get_f64(bb(flat))));
      }
  return {out};
}

// h = x + residual rounded to the dtype (it is a result), then each row of the trailing
// `axis:` dims normalised by `norm`, which maps the row of h to the row of the output.
template <class Norm>
std::vector<Tensor> residual_norm(const EvalContext& ctx, Norm norm) {
  const Tensor& x = ctx.operands[0];
  const Tensor& r = ctx.operands[1];
  const TensorType& rt = ctx.result_type();
  Tensor h(rt.dtype, rt.shape), out(rt.dtype, rt.shape);
  for (int64_t i = 0; i < h.numel(); ++i) h.set_f64(i, x.get_f64(i) + r.get_f64(i));
  int axis = rt.shape.normalize_axis(ctx.attrs().get_int("axis"));
  int64_t rows = dims_product(rt.shape, 0, axis);
  int64_t inner = dims_product(rt.shape, axis, rt.shape.rank());
  std::vector<double> row(static_cast<size_t>(inner)), res(static_cast<size_t>(inner));
  for (int64_t q = 0; q < rows; ++q) {
    for (int64_t i = 0; i < inner; ++i) row[static_cast<size_t>(i)] = h.get_f64(q * inner + i);
    norm(row, res);
    for (int64_t i = 0; i < inner; ++i) out.set_f64(q * inner + i, res[static_cast<size_t>(i)]);
  }
  return {out, h};
}

std::vector<Tensor> eval_residual_layer_norm(const EvalContext& ctx) {
  const Tensor& scale = ctx.operands[2];
  const Tensor& bias = ctx.operands[3];
  double eps = ctx.attrs().get_float("eps");
  return residual_norm(ctx, [&](const std::vector<double>& row, std::vector<double>& res) {
    auto n = static_cast<double>(row.size());
    double mean = 0, var = 0;
    for (double v : row) mean += v;
    mean /= n;
    for (double v : row) var += (v - mean) * (v - mean);  // two-pass variance
    var /= n;
    double inv = 1 / std::sqrt(var + eps);
    for (size_t i = 0; i < row.size(); ++i) {
      auto p = static_cast<int64_t>(i);
      res[i] = (row[i] - mean) * inv * scale.get_f64(p) + bias.get_f64(p);
    }
  });
}

std::vector<Tensor> eval_residual_rms_norm(const EvalContext& ctx) {
  const Tensor& scale = ctx.operands[2];
  double eps = ctx.attrs().get_float("eps");
  return residual_norm(ctx, [&](const std::vector<double>& row, std::vector<double>& res) {
    double ms = 0;
    for (double v : row) ms += v * v;
    double inv = 1 / std::sqrt(ms / static_cast<double>(row.size()) + eps);
    for (size_t i = 0; i < row.size(); ++i)
      res[i] = row[i] * inv * scale.get_f64(static_cast<int64_t>(i));
  });
}

// The three column blocks of qkv as [B, heads, S, D] tensors, attention's reference on them,
// and its result written token-major [B, S, Hq D] (copies only: values stay exact).
std::vector<Tensor> eval_packed_qkv_attention(const EvalContext& ctx) {
  const Tensor& qkv = ctx.operands[0];
  const int64_t hq = ctx.attrs().get_int("heads");
  const int64_t hkv = ctx.attrs().has("kv_heads") ? ctx.attrs().get_int("kv_heads") : hq;
  const int64_t nb = qkv.shape()[0], s = qkv.shape()[1], width = qkv.shape()[2];
  const int64_t d = width / (hq + 2 * hkv);
  auto split = [&](int64_t heads, int64_t col0) {
    Tensor t(qkv.dtype(), Shape{nb, heads, s, d});
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < s; ++i)
          for (int64_t c = 0; c < d; ++c)
            t.set_f64(((b * heads + h) * s + i) * d + c,
                      qkv.get_f64((b * s + i) * width + col0 + h * d + c));
    return t;
  };
  const Tensor* mask = ctx.operands.size() == 2 ? &ctx.operands[1] : nullptr;
  Tensor a = attention_reference(split(hq, 0), split(hkv, hq * d), split(hkv, (hq + hkv) * d), mask,
                                 ctx.attrs());
  Tensor out(qkv.dtype(), Shape{nb, s, hq * d});
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < s; ++i)
        for (int64_t c = 0; c < d; ++c)
          out.set_f64((b * s + i) * hq * d + h * d + c, a.get_f64(((b * hq + h) * s + i) * d + c));
  return {out};
}

std::vector<Tensor> eval_elementwise_region(const EvalContext& ctx) {
  const Graph& body = ctx.attrs().get_graph("body");
  TensorMap feeds;
  std::vector<int32_t> ins = body.inputs();
  for (size_t i = 0; i < ins.size(); ++i) feeds[body.node(ins[i]).name] = ctx.operands[i];
  return evaluate(body, feeds);
}

}  // namespace

// The scalar functions of the relu, gelu, gelu_tanh and silu kernels.
double apply_activation(const std::string& act, double v) {
  if (act == "relu") return scalar::relu(v);
  if (act == "gelu") return scalar::gelu(v);
  if (act == "gelu_tanh") return scalar::gelu_tanh(v);
  if (act == "silu") return scalar::silu(v);
  return v;  // "none"
}

void register_eval_fused() {
  set_eval(OpKind::FusedMatMulBiasAct, eval_matmul_bias_act);
  set_eval(OpKind::FusedResidualLayerNorm, eval_residual_layer_norm);
  set_eval(OpKind::FusedResidualRmsNorm, eval_residual_rms_norm);
  set_eval(OpKind::PackedQkvAttention, eval_packed_qkv_attention);
  set_eval(OpKind::ElementwiseRegion, eval_elementwise_region);
}

}  // namespace rlx::detail
