// Elementwise ops (unary, activations, binary, compare, select, clamp): schemas and inference.
#include <string>
#include <vector>

#include "registry.h"

namespace rlx::detail {
namespace {

// Unary op whose result has the operand's type (ops.def's dtype column says which dtypes).
std::vector<TensorType> infer_unary(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  ctx.require_op_dtype(x.dtype, "operand");
  return {x};
}

std::vector<TensorType> infer_convert(const InferContext& ctx) {
  return {{ctx.attrs.get_dtype("dtype"), ctx.operands[0].shape}};
}

// Binary op: equal dtypes, numpy-broadcast shapes; compare ops return bool.
std::vector<TensorType> infer_binary(const InferContext& ctx) {
  DType t = common_dtype(ctx);
  ctx.require_op_dtype(t, "operands");
  Shape shape = broadcast_operands(ctx);
  return {{ctx.op.has(kCompare) ? DType::bool_ : t, std::move(shape)}};
}

// select(pred, on_true, on_false): pred bool, branches share a dtype, all three broadcast.
std::vector<TensorType> infer_select(const InferContext& ctx) {
  require_dtype(ctx, ctx.operands[0].dtype, is_bool(ctx.operands[0].dtype), "bool",
                "predicate (operand 0)");
  DType t = common_dtype(ctx, 1, 2);
  ctx.require_op_dtype(t, "branches");
  return {{t, broadcast_operands(ctx)}};
}

// clamp(lo, x, hi): one numeric dtype, all three broadcast.
std::vector<TensorType> infer_clamp(const InferContext& ctx) {
  DType t = common_dtype(ctx);
  ctx.require_op_dtype(t, "operands");
  return {{t, broadcast_operands(ctx)}};
}

}  // namespace

void register_elementwise_ops() {
  for (int i = 0; i < kNumOps; ++i) {
    auto k = static_cast<OpKind>(i);
    const OpInfo& info = mutable_op_info(k);  // op_info() would wait for this registration
    if (info.has(kUnary) && info.has(kElementwise) && k != OpKind::Convert &&
        k != OpKind::LeakyRelu)
      define_op(k, {}, infer_unary);
    if (info.has(kBinary)) define_op(k, {}, infer_binary);
  }
  define_op(OpKind::Convert, {req("dtype", AttrType::DType)}, infer_convert);
  define_op(OpKind::LeakyRelu, {def("alpha", AttrType::Float, 0.01)}, infer_unary);
  define_op(OpKind::StopGradient, {}, infer_unary);
  define_op(OpKind::Select, {}, infer_select);
  define_op(OpKind::Clamp, {}, infer_clamp);
}

}  // namespace rlx::detail
