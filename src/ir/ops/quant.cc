// Quantized-weight ops (dequantize, quant_matmul): schemas and shape/dtype inference. A
// quantized weight is a packed u8 tensor whose last dim holds one row of ggml blocks
// (rlx/ir/quant.h); the `format` attribute names the block format and `k` the logical row
// length, so R = quant_row_bytes(format, k) bytes.
#include "rlx/ir/quant.h"

#include <string>
#include <vector>

#include "registry.h"

namespace rlx::detail {
namespace {

// The format of a node (validated against the choices already) and k checked against it:
// non-negative and a whole number of blocks.
QuantFormat format_and_k(const InferContext& ctx, int64_t& k) {
  const QuantFormat f = quant_format_from_name(ctx.attrs.get_string("format"));
  const QuantFormatInfo& info = quant_format_info(f);
  k = ctx.attrs.get_int("k");
  if (k < 0) ctx.fail("k = " + std::to_string(k) + " must be >= 0");
  if (k % info.block_size != 0)
    ctx.fail("k = " + std::to_string(k) + " is not a multiple of the " + std::string(info.name) +
             " block size " + std::to_string(info.block_size));
  return f;
}

// Checks that the last dim of w (operand `i`, u8) is the packed row of k elements.
void check_rows(const InferContext& ctx, size_t i, QuantFormat f, int64_t k) {
  const TensorType& w = ctx.operands[i];
  if (w.dtype != DType::u8)
    ctx.fail("the packed weight must be u8, got " + std::string(dtype_name(w.dtype)));
  const QuantFormatInfo& info = quant_format_info(f);
  const int64_t want = quant_row_bytes(f, k);
  const int64_t got = w.shape[w.shape.rank() - 1];
  if (got != want)
    ctx.fail("the packed weight's last dim is " + std::to_string(got) + " bytes, but a " +
             std::string(info.name) + " row of k = " + std::to_string(k) + " elements is " +
             std::to_string(k / info.block_size) + " blocks of " +
             std::to_string(info.bytes_per_block) + " bytes = " + std::to_string(want) + " bytes");
}

// dequantize(w: u8[..., R]) -> f32[..., k].
std::vector<TensorType> infer_dequantize(const InferContext& ctx) {
  const TensorType& w = ctx.operands[0];
  ctx.require_op_dtype(w.dtype, "the packed weight");
  if (w.shape.rank() < 1) ctx.fail("the packed weight must have rank >= 1 (its last dim is a row)");
  int64_t k = 0;
  const QuantFormat f = format_and_k(ctx, k);
  check_rows(ctx, 0, f, k);
  Shape out = w.shape;
  out.dims().back() = k;
  return {{DType::f32, out}};
}

// quant_matmul(x: float[..., k], w: u8[N, R] [, bias: x.dtype[N]]) -> x.dtype[..., N].
std::vector<TensorType> infer_quant_matmul(const InferContext& ctx) {
  if (ctx.operands.size() != 2 && ctx.operands.size() != 3)
    ctx.fail("takes x, the packed weight and an optional bias (2 or 3 operands), got " +
             std::to_string(ctx.operands.size()));
  const TensorType& x = ctx.operands[0];
  const TensorType& w = ctx.operands[1];
  ctx.require_op_dtype(x.dtype, "x");
  if (x.shape.rank() < 1) ctx.fail("x must have rank >= 1 (its last dim is contracted)");
  if (w.shape.rank() != 2)
    ctx.fail("the packed weight must be u8[N, R] (rank 2), got rank " +
             std::to_string(w.shape.rank()));
  int64_t k = 0;
  const QuantFormat f = format_and_k(ctx, k);
  const int64_t xk = x.shape[x.shape.rank() - 1];
  if (xk != k)
    ctx.fail("x's last dim " + std::to_string(xk) + " differs from k = " + std::to_string(k) +
             " (the weight's row length)");
  check_rows(ctx, 1, f, k);
  if (ctx.attrs.get_string("act_quant") == "int8" && quant_format_info(f).block_size < 32)
    ctx.fail("act_quant \"int8\" rounds x per 32-element block for a block-quantized weight; " +
             std::string(quant_format_info(f).name) +
             " weights are multiplied in float (use \"none\")");
  Shape out = x.shape;
  out.dims().back() = w.shape[0];
  if (ctx.operands.size() == 3) {
    const TensorType want{x.dtype, Shape{w.shape[0]}};
    if (ctx.operands[2] != want)
      ctx.fail("the bias must be " + want.to_string() +
               " (x's dtype, one value per weight row), got " + ctx.operands[2].to_string());
  }
  return {{x.dtype, out}};
}

std::vector<std::string> format_names() {
  std::vector<std::string> out;
  for (const QuantFormatInfo& info : quant_formats()) out.emplace_back(info.name);
  return out;
}

std::vector<AttrSpec> quant_attrs() {
  return {{"format", AttrType::String, AttrPresence::Required, Attr{std::string()}, format_names()},
          req("k", AttrType::Int)};
}

// quant_matmul adds act_quant: "none" (x . dequantize(w)^T exactly) or "int8" (x first rounded
// per 32 elements as round_activations_int8, what the integer kernels compute), and the
// activation applied after the optional bias (fused_matmul_bias_act's choices: the epilogue the
// fusion pass folds in).
std::vector<AttrSpec> quant_matmul_attrs() {
  std::vector<AttrSpec> attrs = quant_attrs();
  attrs.push_back(def("act_quant", AttrType::String, std::string("none"), {"none", "int8"}));
  attrs.push_back(activation_attr());
  return attrs;
}

}  // namespace

void register_quant_ops() {
  define_op(OpKind::Dequantize, quant_attrs(), infer_dequantize);
  define_op(OpKind::QuantMatMul, quant_matmul_attrs(), infer_quant_matmul);
}

}  // namespace rlx::detail
