// Decomposition of quant_matmul: dequantize the packed weight, convert it to x's dtype, and
// contract x's last dim with the weight rows' (dot_general), the path of every backend without
// a fused kernel and of autodiff.
#include <limits>

#include "decompose.h"

namespace rlx::detail {
namespace {

// act_quant "int8": each 32-element block of x as d * round_half_even(x * (1 / d)), d = max|x| /
// 127 and 1 / d replaced by 0 where d is below the smallest normal f32, in f32 (rlx/ir/quant.h
// round_activations_int8, the same f32 operations), back in x's dtype.
Value round_activations_int8(Graph& g, Value x) {
  const DType t = g.dtype(x);
  if (t != DType::f32) x = g.convert(x, DType::f32);
  const std::vector<int64_t> dims = g.shape(x).dims();  // a copy: emitting moves the nodes
  std::vector<int64_t> blocks = dims;
  blocks.back() /= 32;
  blocks.push_back(32);
  const Value xb = g.reshape(x, blocks);
  const int64_t last = int64_t(blocks.size()) - 1;
  auto scalar = [&](float v) { return g.constant(Tensor::full(DType::f32, Shape{}, v)); };
  const Value d = g.div(g.reduce_max(g.abs(xb), {last}, true), scalar(127.0f));
  const Value id = g.select(g.ge(d, scalar(std::numeric_limits<float>::min())),
                            g.div(scalar(1.0f), d), scalar(0.0f));
  Value r = g.reshape(g.mul(g.round(g.mul(xb, id)), d), dims);
  if (t != DType::f32) r = g.convert(r, t);
  return r;
}

// x[..., K] . dequantize(w)[N, K]^T: dot_general contracting x's last dim with dim 1 of the
// dequantized weight gives [..., N] directly (x's free dims, then the weight's N); then the
// bias [N] (broadcast over the rows) and the activation, when the node has them.
std::vector<Value> decompose_quant_matmul(Graph& g, const Node& node,
                                          std::span<const Value> operands) {
  Value x = operands[0];
  const DType t = g.dtype(x);
  if (node.attrs.get_string("act_quant") == "int8") x = round_activations_int8(g, x);
  Value wd = g.emit1(OpKind::Dequantize, {operands[1]},
                     {{"format", node.attrs.get_string("format")}, {"k", node.attrs.get_int("k")}});
  if (t != DType::f32) wd = g.convert(wd, t);
  const int64_t last = g.shape(x).rank() - 1;
  Value y = g.dot_general(x, wd, {}, {}, {last}, {1});
  if (operands.size() > 2) y = g.add(y, operands[2]);
  return {apply_activation(g, y, node.attrs.get_string("activation"))};
}

}  // namespace

void register_decompose_quant() { set_decomposition(OpKind::QuantMatMul, decompose_quant_matmul); }

}  // namespace rlx::detail
