// Elementwise ops (unary, activations, binary, compare, select, clamp): schemas and inference.
#include <string>
#include <vector>

#include "registry.h"

namespace rlx::detail {
namespace {

// Which operand dtypes an elementwise op accepts. InferFn is a plain function pointer, so the
// class is a template argument rather than a captured value.
enum class Accepts { Float, Numeric, IntOrBool, Any };

bool accepts(Accepts a, DType t) {
  switch (a) {
    case Accepts::Float:
      return is_float(t);
    case Accepts::Numeric:
      return is_float(t) || is_integer(t);
    case Accepts::IntOrBool:
      return is_integer(t) || is_bool(t);
    case Accepts::Any:
      return true;
  }
  return false;
}

const char* accepts_name(Accepts a) {
  switch (a) {
    case Accepts::Float:
      return "a float type (f32, f16, bf16, f64)";
    case Accepts::Numeric:
      return "a float or integer type (not bool)";
    case Accepts::IntOrBool:
      return "bool or an integer type";
    case Accepts::Any:
      return "any type";
  }
  return "?";
}

// Unary op whose result has the operand's type.
template <Accepts A>
std::vector<TensorType> infer_unary(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  require_dtype(ctx, x.dtype, accepts(A, x.dtype), accepts_name(A), "operand");
  return {x};
}

std::vector<TensorType> infer_convert(const InferContext& ctx) {
  return {{ctx.attrs.get_dtype("dtype"), ctx.operands[0].shape}};
}

// Binary op: equal dtypes, numpy-broadcast shapes; compare ops return bool.
template <Accepts A, bool kCompareOp>
std::vector<TensorType> infer_binary(const InferContext& ctx) {
  DType t = common_dtype(ctx);
  require_dtype(ctx, t, accepts(A, t), accepts_name(A), "operands");
  Shape shape = broadcast_operands(ctx);
  return {{kCompareOp ? DType::bool_ : t, std::move(shape)}};
}

// select(pred, on_true, on_false): pred bool, branches share a dtype, all three broadcast.
std::vector<TensorType> infer_select(const InferContext& ctx) {
  require_dtype(ctx, ctx.operands[0].dtype, is_bool(ctx.operands[0].dtype), "bool",
                "predicate (operand 0)");
  DType t = common_dtype(ctx, 1, 2);
  return {{t, broadcast_operands(ctx)}};
}

// clamp(lo, x, hi): one numeric dtype, all three broadcast.
std::vector<TensorType> infer_clamp(const InferContext& ctx) {
  DType t = common_dtype(ctx);
  require_dtype(ctx, t, accepts(Accepts::Numeric, t), accepts_name(Accepts::Numeric), "operands");
  return {{t, broadcast_operands(ctx)}};
}

}  // namespace

void register_elementwise_ops() {
  constexpr auto kFloatUnary = infer_unary<Accepts::Float>;
  for (OpKind k :
       {OpKind::Exp,   OpKind::Expm1,    OpKind::Log,      OpKind::Log1p, OpKind::Sqrt,
        OpKind::Rsqrt, OpKind::Sin,      OpKind::Cos,      OpKind::Tan,   OpKind::Tanh,
        OpKind::Atan,  OpKind::Logistic, OpKind::Erf,      OpKind::Floor, OpKind::Ceil,
        OpKind::Round, OpKind::Gelu,     OpKind::GeluTanh, OpKind::Silu,  OpKind::Softplus})
    define_op(k, {}, kFloatUnary);
  for (OpKind k : {OpKind::Neg, OpKind::Abs, OpKind::Sign, OpKind::Relu})
    define_op(k, {}, infer_unary<Accepts::Numeric>);
  define_op(OpKind::Not, {}, infer_unary<Accepts::IntOrBool>);
  define_op(OpKind::Convert, {req("dtype", AttrType::DType)}, infer_convert);
  define_op(OpKind::LeakyRelu, {def("alpha", AttrType::Float, 0.01)}, kFloatUnary);
  define_op(OpKind::StopGradient, {}, infer_unary<Accepts::Any>);

  for (OpKind k : {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Pow, OpKind::Max,
                   OpKind::Min, OpKind::Rem})
    define_op(k, {}, infer_binary<Accepts::Numeric, false>);
  for (OpKind k : {OpKind::And, OpKind::Or, OpKind::Xor})
    define_op(k, {}, infer_binary<Accepts::IntOrBool, false>);
  for (OpKind k : {OpKind::Eq, OpKind::Ne, OpKind::Lt, OpKind::Le, OpKind::Gt, OpKind::Ge})
    define_op(k, {}, infer_binary<Accepts::Any, true>);
  define_op(OpKind::Select, {}, infer_select);
  define_op(OpKind::Clamp, {}, infer_clamp);
}

}  // namespace rlx::detail
