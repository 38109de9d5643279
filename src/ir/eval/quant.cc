// Reference kernels of the quantized-weight ops: dequantize row by row with dequantize_row
// (bit-equal to ggml / gguf-py) and quant_matmul as x . dequantize(w)^T accumulated in double.
#include "rlx/ir/quant.h"

#include <string>
#include <vector>

#include "eval.h"

namespace rlx::detail {
namespace {

QuantFormat node_format(const EvalContext& ctx) {
  return quant_format_from_name(ctx.attrs().get_string("format"));
}

std::vector<Tensor> eval_dequantize(const EvalContext& ctx) {
  const Tensor& w = ctx.operands[0];
  const QuantFormat f = node_format(ctx);
  const int64_t k = ctx.attrs().get_int("k");
  const int64_t rb = w.shape()[w.shape().rank() - 1];
  Tensor out(DType::f32, ctx.result_type().shape);
  const int64_t rows = k == 0 ? 0 : out.numel() / k;
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(f, w.data_as<uint8_t>() + r * rb, out.data_as<float>() + r * k, k);
  return {out};
}

// y[m, n] = sum_k x'[m, k] * w'[n, k], w' the dequantized weight rounded to x's dtype (the
// decomposition's convert), x' = x or with act_quant "int8" x rounded per 32 elements in f32
// (round_activations_int8) and back to x's dtype, as the decomposition does, in double, rounded
// once to x's dtype; with a bias operand and an activation, activation(sum + bias[n]) in double,
// still rounded once.
std::vector<Tensor> eval_quant_matmul(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  const Tensor& w = ctx.operands[1];
  const QuantFormat f = node_format(ctx);
  const int64_t k = ctx.attrs().get_int("k");
  const int64_t n = w.shape()[0], rb = w.shape()[1];
  std::vector<float> row(static_cast<size_t>(k));
  Tensor wd(x.dtype(), Shape{n, k});
  for (int64_t j = 0; j < n; ++j) {
    dequantize_row(f, w.data_as<uint8_t>() + j * rb, row.data(), k);
    for (int64_t i = 0; i < k; ++i) wd.set_f64(j * k + i, row[static_cast<size_t>(i)]);
  }
  std::vector<double> wv(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n * k; ++i) wv[static_cast<size_t>(i)] = wd.get_f64(i);
  Tensor out(x.dtype(), ctx.result_type().shape);
  const int64_t m = n == 0 ? 0 : out.numel() / n;
  const bool int8 = ctx.attrs().get_string("act_quant") == "int8";
  const std::string& act = ctx.attrs().get_string("activation");
  const Tensor* bias = ctx.operands.size() > 2 ? &ctx.operands[2] : nullptr;
  std::vector<double> xr(static_cast<size_t>(k));
  std::vector<float> xf(static_cast<size_t>(k));
  Tensor xt(x.dtype(), Shape{k});  // the rounded row back in x's dtype
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < k; ++i) xr[static_cast<size_t>(i)] = x.get_f64(r * k + i);
    if (int8) {  // in f32, as the decomposition's rounding ops
      for (int64_t i = 0; i < k; ++i) xf[size_t(i)] = float(xr[size_t(i)]);
      round_activations_int8(xf.data(), xf.data(), k);
      for (int64_t i = 0; i < k; ++i) {
        xt.set_f64(i, xf[size_t(i)]);
        xr[size_t(i)] = xt.get_f64(i);
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      const double* wj = wv.data() + j * k;
      for (int64_t i = 0; i < k; ++i) s += xr[static_cast<size_t>(i)] * wj[i];
      if (bias) s += bias->get_f64(j);
      out.set_f64(r * n + j, apply_activation(act, s));
    }
  }
  return {out};
}

}  // namespace

void register_eval_quant() {
  set_eval(OpKind::Dequantize, eval_dequantize);
  set_eval(OpKind::QuantMatMul, eval_quant_matmul);
}

}  // namespace rlx::detail
