// CPU kernels of the quantized-weight ops: dequantize (dequantize_row per packed row, parallel
// over rows) and quant_matmul (quant_matmul.h: with act_quant "int8" the fused integer kernels,
// with "none" quant_matmul_exact: f32 products with the dequantized rows for few rows of x,
// dequantize + sgemm panel by panel for many; the optional bias and the activation as their
// epilogue). Both read the packed weight where it
// lives (a param's or constant's bytes): nothing is expanded at compile time.
#include "rlx/ir/quant.h"

#include <algorithm>
#include <optional>
#include <string>

#include "../kernel.h"
#include "quant_matmul.h"
#include "rlx/runtime/threading.h"

namespace rlx::cpu {
namespace {

QuantFormat node_format(const Node& node) {
  return quant_format_from_name(node.attrs.get_string("format"));
}

Kernel dequantize_kernel(const Graph& g, const Node& node) {
  const QuantFormat f = node_format(node);
  const int64_t k = node.attrs.get_int("k");
  const Shape& ws = g.shape(node.operands[0]);
  const int64_t rb = ws[ws.rank() - 1];
  const int64_t rows = k == 0 ? 0 : node.results[0].shape.numel() / k;
  // About 16 K output elements per task: rows are independent.
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1));
  return [f, k, rb, rows, grain](const KernelIO& io) {
    const uint8_t* w = io.input<uint8_t>(0);
    float* y = io.output<float>(0);
    parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) dequantize_row(f, w + r * rb, y + r * k, k);
    });
  };
}

// The vec_apply function of an "activation" attribute value, none for "none".
std::optional<VecFn> activation_fn(const std::string& act) {
  if (act == "relu") return VecFn::kRelu;
  if (act == "gelu") return VecFn::kGelu;
  if (act == "gelu_tanh") return VecFn::kGeluTanh;
  if (act == "silu") return VecFn::kSilu;
  return std::nullopt;
}

// f32 x [..., K] viewed as M = numel / K rows; the fused kernel parallelizes over N and applies
// the bias operand and the activation per block of output columns (QuantEpilogue).
Kernel quant_matmul_kernel(const Graph& g, const Node& node) {
  const QuantFormat f = node_format(node);
  const int64_t k = node.attrs.get_int("k");
  const int64_t n = g.shape(node.operands[1])[0];
  const int64_t m = node.results[0].shape.numel() / n;  // the result is non-empty: n > 0
  const QuantTarget target = default_quant_target();    // RLX_QUANT_TARGET errors: compile time
  const bool has_bias = node.operands.size() > 2;
  const std::optional<VecFn> act = activation_fn(node.attrs.get_string("activation"));
  auto epilogue = [has_bias, act](const KernelIO& io) {
    return QuantEpilogue{has_bias ? io.input<float>(2) : nullptr, act};
  };
  if (node.attrs.get_string("act_quant") == "int8")
    return [f, k, m, n, target, epilogue](const KernelIO& io) {
      quant_matmul(f, io.input<float>(0), m, k, io.input<uint8_t>(1), n, io.output<float>(0),
                   target, epilogue(io));
    };
  return [f, k, m, n, target, epilogue](const KernelIO& io) {
    quant_matmul_exact(f, io.input<float>(0), m, k, io.input<uint8_t>(1), n, io.output<float>(0),
                       target, epilogue(io));
  };
}

}  // namespace

void register_quant_kernels() {
  register_native(OpKind::Dequantize, dequantize_kernel);
  register_kernel(OpKind::QuantMatMul,
                  {quant_matmul_kernel, DTypeSet{DType::f32},
                   "the fused kernel reads f32 activations (f16 / bf16 / f64 x run on the "
                   "reference kernel; convert x to f32 for speed)",
                   ""});
}

}  // namespace rlx::cpu
