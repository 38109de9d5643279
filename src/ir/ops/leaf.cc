// Leaf ops: input, param, constant, iota — schemas, inference and builders.
#include "registry.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace detail {
namespace {

std::vector<TensorType> infer_declared(const InferContext& ctx) {
  ctx.fail("input and param nodes take their type from their declaration (Graph::input/param)");
}

std::vector<TensorType> infer_constant(const InferContext& ctx) {
  return {ctx.attrs.get_tensor("value").type()};
}

std::vector<TensorType> infer_iota(const InferContext& ctx) {
  Shape shape(ctx.attrs.get_ints("shape"));
  for (int64_t d : shape.dims())
    if (d < 0) ctx.fail("shape " + shape.to_string() + " has a negative dim");
  DType t = ctx.attrs.get_dtype("dtype");
  ctx.require_op_dtype(t, "dtype");
  if (shape.rank() == 0) ctx.fail("iota needs rank >= 1");
  normalize_axis(ctx, ctx.attrs.get_int("dimension"), shape.rank(), "dimension");
  if (ctx.attrs.get_int("dimension") < 0) ctx.fail("dimension must be non-negative");
  return {{t, shape}};
}

}  // namespace

void register_leaf_ops() {
  define_op(OpKind::Input, {}, infer_declared);
  define_op(OpKind::Param, {}, infer_declared);
  define_op(OpKind::Constant, {req("value", AttrType::Tensor)}, infer_constant);
  define_op(OpKind::Iota,
            {req("dtype", AttrType::DType), req("shape", AttrType::Ints),
             req("dimension", AttrType::Int)},
            infer_iota);
}

}  // namespace detail

Value Graph::iota(DType dtype, Shape shape, int64_t dimension) {
  return emit1(OpKind::Iota, {},
               {{"dtype", dtype}, {"shape", shape.dims()}, {"dimension", dimension}});
}

}  // namespace rlx
