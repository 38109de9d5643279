// Nn ops: schemas and shape/dtype inference of softmax, log_softmax, layer_norm, rms_norm,
// attention, rope and softmax_cross_entropy (builders are in src/ir/builder.cc).
#include <cmath>
#include <string>

#include "registry.h"

namespace rlx::detail {
namespace {

std::string dname(DType t) { return std::string(dtype_name(t)); }

// Shared by softmax and log_softmax: float x of rank >= 1, result of x's type.
std::vector<TensorType> infer_softmax(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  ctx.require_op_dtype(x.dtype, "x");
  if (x.shape.rank() == 0) ctx.fail("x must have rank >= 1, got a scalar");
  normalize_axis(ctx, ctx.attrs.get_int("axis"), x.shape.rank());
  return {x};
}

// Checks that a norm parameter (scale or bias, operand `i`) has shape x.shape[axis:] and x's
// dtype.
void check_norm_param(const InferContext& ctx, size_t i, const char* what, const Shape& expected) {
  const TensorType& x = ctx.operands[0];
  const TensorType& p = ctx.operands[i];
  if (p.shape != expected)
    ctx.fail(std::string(what) + " must have shape x.shape[axis:] = " + expected.to_string() +
             ", got " + p.shape.to_string());
  if (p.dtype != x.dtype)
    ctx.fail(std::string(what) + " must have x's dtype " + dname(x.dtype) + ", got " +
             dname(p.dtype));
}

// Shared by layer_norm (x, scale, bias) and rms_norm (x, scale).
std::vector<TensorType> infer_norm(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  ctx.require_op_dtype(x.dtype, "x");
  if (x.shape.rank() == 0) ctx.fail("x must have rank >= 1, got a scalar");
  int axis = normalize_axis(ctx, ctx.attrs.get_int("axis"), x.shape.rank());
  double eps = ctx.attrs.get_float("eps");
  if (!(eps >= 0) || std::isinf(eps))
    ctx.fail("eps must be finite and >= 0, got " + std::to_string(eps));
  Shape expected(std::vector<int64_t>(x.shape.dims().begin() + axis, x.shape.dims().end()));
  check_norm_param(ctx, 1, "scale", expected);
  if (ctx.operands.size() == 3) check_norm_param(ctx, 2, "bias", expected);
  return {x};
}

std::vector<TensorType> infer_attention(const InferContext& ctx) {
  check_attention_operands(ctx, 3, "q, k, v");
  const TensorType& q = ctx.operands[0];
  const TensorType& k = ctx.operands[1];
  const TensorType& v = ctx.operands[2];
  const char* names[] = {"q [B,Hq,Sq,D]", "k [B,Hkv,Sk,D]", "v [B,Hkv,Sk,Dv]"};
  for (size_t i = 0; i < 3; ++i)
    if (ctx.operands[i].shape.rank() != 4)
      ctx.fail(std::string(names[i]) + " must have rank 4, got " +
               ctx.operands[i].shape.to_string());
  ctx.require_op_dtype(q.dtype, "q");
  common_dtype(ctx, 0, 3);
  const Shape &qs = q.shape, &ks = k.shape, &vs = v.shape;
  if (ks[0] != qs[0] || vs[0] != qs[0])
    ctx.fail("q, k and v must have the same batch size, got q " + qs.to_string() + ", k " +
             ks.to_string() + ", v " + vs.to_string());
  if (ks[3] != qs[3])
    ctx.fail("q and k must have the same head dim D, got q " + qs.to_string() + ", k " +
             ks.to_string());
  if (vs[1] != ks[1] || vs[2] != ks[2])
    ctx.fail("k and v must have the same heads and length [B,Hkv,Sk,_], got k " + ks.to_string() +
             ", v " + vs.to_string());
  if (ks[1] == 0) ctx.fail("k must have at least one head, got k " + ks.to_string());
  if (qs[1] % ks[1] != 0)
    ctx.fail("query heads Hq = " + std::to_string(qs[1]) +
             " must be a multiple of kv heads Hkv = " + std::to_string(ks[1]));
  check_attention_mask(ctx, 3, q.dtype, Shape{qs[0], qs[1], qs[2], ks[2]});
  return {{q.dtype, Shape{qs[0], qs[1], qs[2], vs[3]}}};
}

std::vector<TensorType> infer_rope(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  ctx.require_op_dtype(x.dtype, "x");
  if (x.shape.rank() < 2) ctx.fail("x [..., S, D] must have rank >= 2, got " + x.shape.to_string());
  for (size_t i = 1; i < 3; ++i) {
    const char* what = i == 1 ? "cos" : "sin";
    if (ctx.operands[i].dtype != x.dtype)
      ctx.fail(std::string(what) + " must have x's dtype " + dname(x.dtype) + ", got " +
               dname(ctx.operands[i].dtype));
    if (ctx.operands[i].shape.rank() == 0)
      ctx.fail(std::string(what) + " must have rank >= 1 ([S, R/2]), got a scalar");
  }
  const Shape& cs = ctx.operands[1].shape;
  int64_t half = cs[cs.rank() - 1];
  int64_t d = x.shape[x.shape.rank() - 1];
  if (half < 1)
    ctx.fail("rotary dims R = 2 * cos.shape[-1] must be > 0, got cos " + cs.to_string());
  if (half > d / 2)  // 2 * half > d, without overflowing for a huge cos dim
    ctx.fail("rotary dims R = 2 * cos.shape[-1] = " +
             (half <= INT64_MAX / 2 ? std::to_string(2 * half) : "2 * " + std::to_string(half)) +
             " exceed the head dim D = " + std::to_string(d) + " of x " + x.shape.to_string());
  std::vector<int64_t> target_dims = x.shape.dims();
  target_dims.back() = half;
  Shape target(target_dims);
  for (size_t i = 1; i < 3; ++i) {
    const Shape& s = ctx.operands[i].shape;
    auto b = broadcast_shapes(s, target);
    if (!b || *b != target)
      ctx.fail(std::string(i == 1 ? "cos" : "sin") + " shape " + s.to_string() +
               " does not broadcast to x.shape[:-1] + [R/2] = " + target.to_string());
  }
  return {x};
}

std::vector<TensorType> infer_softmax_cross_entropy(const InferContext& ctx) {
  const TensorType& logits = ctx.operands[0];
  const TensorType& labels = ctx.operands[1];
  ctx.require_op_dtype(logits.dtype, "logits");
  require_dtype(ctx, labels.dtype, is_integer(labels.dtype), "an integer dtype", "labels");
  if (logits.shape.rank() == 0) ctx.fail("logits [..., C] must have rank >= 1, got a scalar");
  if (logits.shape[logits.shape.rank() - 1] == 0)
    ctx.fail("logits " + logits.shape.to_string() + " must have at least one class");
  Shape batch(std::vector<int64_t>(logits.shape.dims().begin(), logits.shape.dims().end() - 1));
  if (labels.shape != batch)
    ctx.fail("labels must have shape logits.shape[:-1] = " + batch.to_string() + ", got " +
             labels.shape.to_string());
  return {{logits.dtype, batch}};
}

}  // namespace

void check_attention_operands(const InferContext& ctx, size_t data, const char* names) {
  const std::string& mask = ctx.attrs.get_string("mask");
  bool wants_operand = mask == "bool" || mask == "bias" || mask == "causal_lengths";
  size_t n = ctx.operands.size();
  if (n != data && n != data + 1)
    ctx.fail("expected " + std::to_string(data) + " or " + std::to_string(data + 1) +
             " operands (" + names + "[, mask]), got " + std::to_string(n));
  if (wants_operand && n != data + 1)
    ctx.fail("mask \"" + mask + "\" needs a " + (data == 1 ? "2nd" : "4th") +
             " operand (the mask tensor), got " + std::to_string(n) + " operands");
  if (!wants_operand && n != data)
    ctx.fail("mask \"" + mask + "\" takes no mask operand, got " + std::to_string(n) + " operands");
}

void check_attention_mask(const InferContext& ctx, size_t at, DType dtype, const Shape& scores) {
  const std::string& mask = ctx.attrs.get_string("mask");
  int64_t window = ctx.attrs.get_int("window");
  if (mask == "sliding_window" && window < 1)
    ctx.fail("mask \"sliding_window\" needs window >= 1, got " + std::to_string(window));
  if (mask != "sliding_window" && window != 0)
    ctx.fail("window is only meaningful with mask \"sliding_window\"; got window = " +
             std::to_string(window) + " with mask \"" + mask + "\"");
  if (at >= ctx.operands.size()) return;
  const TensorType& m = ctx.operands[at];
  if (mask == "causal_lengths") {
    require_dtype(ctx, m.dtype, is_integer(m.dtype), "an integer dtype",
                  "the lengths of mask \"causal_lengths\"");
    if (m.shape != Shape{scores[0]})
      ctx.fail("the lengths of mask \"causal_lengths\" must have shape [B] = " +
               Shape{scores[0]}.to_string() + ", got " + m.shape.to_string());
    return;
  }
  if (mask == "bool")
    require_dtype(ctx, m.dtype, is_bool(m.dtype), "bool", "the mask tensor of mask \"bool\"");
  else if (m.dtype != dtype)
    ctx.fail("the bias tensor of mask \"bias\" must have q's dtype " + dname(dtype) + ", got " +
             dname(m.dtype));
  auto b = broadcast_shapes(m.shape, scores);
  if (!b || *b != scores)
    ctx.fail("mask shape " + m.shape.to_string() +
             " does not broadcast to the scores shape [B,Hq,Sq,Sk] = " + scores.to_string());
}

std::vector<AttrSpec> attention_mask_attrs() {
  return {def("mask", AttrType::String, std::string("none"),
              {"none", "causal", "sliding_window", "causal_lengths", "bool", "bias"}),
          opt("scale", AttrType::Float), def("window", AttrType::Int, int64_t{0})};
}

void register_nn_ops() {
  define_op(OpKind::Softmax, {def("axis", AttrType::Int, int64_t{-1})}, infer_softmax);
  define_op(OpKind::LogSoftmax, {def("axis", AttrType::Int, int64_t{-1})}, infer_softmax);
  define_op(OpKind::LayerNorm,
            {def("axis", AttrType::Int, int64_t{-1}), def("eps", AttrType::Float, 1e-5)},
            infer_norm);
  define_op(OpKind::RmsNorm,
            {def("axis", AttrType::Int, int64_t{-1}), def("eps", AttrType::Float, 1e-6)},
            infer_norm);
  define_op(OpKind::Attention, attention_mask_attrs(), infer_attention);
  define_op(OpKind::Rope, {def("layout", AttrType::String, std::string("neox"), {"neox", "gptj"})},
            infer_rope);
  define_op(OpKind::SoftmaxCrossEntropy, {}, infer_softmax_cross_entropy);
}

}  // namespace rlx::detail
