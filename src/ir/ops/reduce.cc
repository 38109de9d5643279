// Reduction ops (reduce_*, argmax/argmin, cumsum, top_k): schemas and shape/dtype inference.
#include <string>
#include <vector>

#include "registry.h"

namespace rlx::detail {
namespace {

// Result shape of reducing `in` over `axes` (already normalised).
Shape reduced_shape(const Shape& in, const std::vector<int>& axes, bool keepdims) {
  // A flag per dim keeps this linear in the rank (a text file can declare a huge rank).
  std::vector<bool> is_reduced(static_cast<size_t>(in.rank()), false);
  for (int a : axes) is_reduced[static_cast<size_t>(a)] = true;
  Shape out;
  for (int i = 0; i < in.rank(); ++i) {
    bool reduced = is_reduced[static_cast<size_t>(i)];
    if (!reduced)
      out.dims().push_back(in[i]);
    else if (keepdims)
      out.dims().push_back(1);
  }
  return out;
}

// reduce_sum / reduce_prod / reduce_max / reduce_min: any numeric dtype, result dtype = input.
std::vector<TensorType> infer_reduce_numeric(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  ctx.require_op_dtype(x.dtype, "operand dtype");
  auto axes = normalize_axes(ctx, ctx.attrs.get_ints("axes"), x.shape.rank());
  return {{x.dtype, reduced_shape(x.shape, axes, ctx.attrs.get_bool("keepdims"))}};
}

// reduce_mean: float only (an integer mean would need a rounding rule rlx does not define).
std::vector<TensorType> infer_reduce_mean(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  ctx.require_op_dtype(x.dtype, "operand dtype");
  auto axes = normalize_axes(ctx, ctx.attrs.get_ints("axes"), x.shape.rank());
  return {{x.dtype, reduced_shape(x.shape, axes, ctx.attrs.get_bool("keepdims"))}};
}

// argmax / argmin: any dtype including bool; index dtype i32 or i64.
std::vector<TensorType> infer_arg_reduce(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  int axis = normalize_axis(ctx, ctx.attrs.get_int("axis"), x.shape.rank());
  DType index = ctx.attrs.get_dtype("index_dtype");
  require_dtype(ctx, index, index == DType::i32 || index == DType::i64, "i32 or i64",
                "index_dtype");
  if (x.shape[axis] == 0)
    ctx.fail(std::string(ctx.op.name) + " over an empty axis: axis " + std::to_string(axis) +
             " of " + x.shape.to_string() + " has size 0 (expected size >= 1)");
  return {{index, reduced_shape(x.shape, {axis}, ctx.attrs.get_bool("keepdims"))}};
}

std::vector<TensorType> infer_cumsum(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  ctx.require_op_dtype(x.dtype, "operand dtype");
  normalize_axis(ctx, ctx.attrs.get_int("axis"), x.shape.rank());
  return {x};
}

// top_k along the last axis: (values [..., k] of x's dtype, indices [..., k] i32).
std::vector<TensorType> infer_top_k(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  ctx.require_op_dtype(x.dtype, "operand dtype");
  if (x.shape.rank() == 0) ctx.fail("top_k needs an operand of rank >= 1, got a scalar");
  int64_t k = ctx.attrs.get_int("k");
  int64_t n = x.shape[x.shape.rank() - 1];
  if (k < 0 || k > n)
    ctx.fail("k = " + std::to_string(k) + " is out of range for last dim " + std::to_string(n) +
             " of " + x.shape.to_string() + " (expected 0 <= k <= " + std::to_string(n) + ")");
  Shape out = x.shape;
  out[out.rank() - 1] = k;
  return {{x.dtype, out}, {DType::i32, out}};
}

std::vector<AttrSpec> reduce_schema() {
  return {req("axes", AttrType::Ints), def("keepdims", AttrType::Bool, false)};
}

std::vector<AttrSpec> arg_reduce_schema() {
  return {req("axis", AttrType::Int), def("keepdims", AttrType::Bool, false),
          def("index_dtype", AttrType::DType, DType::i32)};
}

}  // namespace

void register_reduce_ops() {
  define_op(OpKind::ReduceSum, reduce_schema(), infer_reduce_numeric);
  define_op(OpKind::ReduceMean, reduce_schema(), infer_reduce_mean);
  define_op(OpKind::ReduceMax, reduce_schema(), infer_reduce_numeric);
  define_op(OpKind::ReduceMin, reduce_schema(), infer_reduce_numeric);
  define_op(OpKind::ReduceProd, reduce_schema(), infer_reduce_numeric);
  define_op(OpKind::ArgMax, arg_reduce_schema(), infer_arg_reduce);
  define_op(OpKind::ArgMin, arg_reduce_schema(), infer_arg_reduce);
  define_op(OpKind::CumSum,
            {req("axis", AttrType::Int), def("exclusive", AttrType::Bool, false),
             def("reverse", AttrType::Bool, false)},
            infer_cumsum);
  define_op(OpKind::TopK, {req("k", AttrType::Int)}, infer_top_k);
}

}  // namespace rlx::detail
