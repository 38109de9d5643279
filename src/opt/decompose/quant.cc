// Decomposition of quant_matmul: dequantize the packed weight, convert it to x's dtype, and
// contract x's last dim with the weight rows' (dot_general), the path of every backend without
// a fused kernel and of autodiff.
#include "decompose.h"

namespace rlx::detail {
namespace {

// x[..., K] . dequantize(w)[N, K]^T: dot_general contracting x's last dim with dim 1 of the
// dequantized weight gives [..., N] directly (x's free dims, then the weight's N).
std::vector<Value> decompose_quant_matmul(Graph& g, const Node& node,
                                          std::span<const Value> operands) {
  Value x = operands[0];
  const DType t = g.dtype(x);
  Value wd = g.emit1(OpKind::Dequantize, {operands[1]}, node.attrs);
  if (t != DType::f32) wd = g.convert(wd, t);
  const int64_t last = g.shape(x).rank() - 1;
  return {g.dot_general(x, wd, {}, {}, {last}, {1})};
}

}  // namespace

void register_decompose_quant() { set_decomposition(OpKind::QuantMatMul, decompose_quant_matmul); }

}  // namespace rlx::detail
