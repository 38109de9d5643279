// Fused ops (fused_matmul_bias_act, fused_residual_{layer,rms}_norm, packed_qkv_attention,
// elementwise_region):
// attribute schemas and shape/dtype inference. Their builders are in src/ir/builder.cc.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "registry.h"
#include "rlx/ir/graph.h"

namespace rlx::detail {
namespace {

std::vector<TensorType> infer_matmul_bias_act(const InferContext& ctx) {
  DType t = common_dtype(ctx);
  ctx.require_op_dtype(t, "operands");
  Shape out = matmul_shape(ctx, ctx.operands[0].shape, ctx.operands[1].shape);
  const Shape& bias = ctx.operands[2].shape;
  auto b = broadcast_shapes(out, bias);
  if (!b || *b != out)
    ctx.fail("bias " + bias.to_string() + " must broadcast to the matmul result " +
             out.to_string());
  return {{t, out}};
}

// Shared by both residual norms: x and residual of one type, per-feature params of shape
// x.shape[axis:].
std::vector<TensorType> infer_residual_norm(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  const TensorType& r = ctx.operands[1];
  ctx.require_op_dtype(x.dtype, "x");
  if (r != x)
    ctx.fail("residual must have the type of x, " + x.to_string() + ", got " + r.to_string());
  int axis = normalize_axis(ctx, ctx.attrs.get_int("axis"), x.shape.rank());
  // Same rule as layer_norm / rms_norm, which the decomposition emits.
  double eps = ctx.attrs.get_float("eps");
  if (!(eps >= 0) || std::isinf(eps))
    ctx.fail("eps must be finite and >= 0, got " + std::to_string(eps));
  Shape feat(std::vector<int64_t>(x.shape.dims().begin() + axis, x.shape.dims().end()));
  const char* names[] = {"", "", "scale", "bias"};
  for (size_t i = 2; i < ctx.operands.size(); ++i) {
    const TensorType& p = ctx.operands[i];
    if (p.dtype != x.dtype || p.shape != feat)
      ctx.fail(std::string(names[i]) + " must be " + TensorType{x.dtype, feat}.to_string() +
               " (x.shape[axis:]), got " + p.to_string());
  }
  return {x, x};
}

// qkv [B, S, (Hq + 2 Hkv) D] -> [B, S, Hq D]; heads = Hq, kv_heads = Hkv (default Hq), D from
// the width; the mask as attention's over the scores [B, Hq, S, S].
std::vector<TensorType> infer_packed_qkv_attention(const InferContext& ctx) {
  check_attention_operands(ctx, 1, "qkv");
  const TensorType& qkv = ctx.operands[0];
  ctx.require_op_dtype(qkv.dtype, "qkv");
  if (qkv.shape.rank() != 3)
    ctx.fail("qkv [B,S,(Hq+2*Hkv)*D] must have rank 3, got " + qkv.shape.to_string());
  const int64_t hq = ctx.attrs.get_int("heads");
  const int64_t hkv = ctx.attrs.has("kv_heads") ? ctx.attrs.get_int("kv_heads") : hq;
  if (hq < 1 || hkv < 1 || hq % hkv != 0)
    ctx.fail("heads = " + std::to_string(hq) + " and kv_heads = " + std::to_string(hkv) +
             " must be >= 1 with heads a multiple of kv_heads");
  const int64_t width = qkv.shape[2], parts = hq + 2 * hkv;
  if (width % parts != 0 || width == 0)
    ctx.fail("qkv width " + std::to_string(width) + " of " + qkv.shape.to_string() +
             " must be (heads + 2 * kv_heads) * D = " + std::to_string(parts) +
             " * D with head dim D >= 1");
  const int64_t b = qkv.shape[0], s = qkv.shape[1], dim = width / parts;
  check_attention_mask(ctx, 1, qkv.dtype, Shape{b, hq, s, s});
  return {{qkv.dtype, Shape{b, s, hq * dim}}};
}

std::vector<TensorType> infer_elementwise_region(const InferContext& ctx) {
  const Graph& body = ctx.attrs.get_graph("body");
  std::vector<int32_t> ins = body.inputs();
  if (ins.size() != ctx.operands.size())
    ctx.fail("body has " + std::to_string(ins.size()) + " inputs but the region has " +
             std::to_string(ctx.operands.size()) + " operands");
  for (size_t i = 0; i < ins.size(); ++i) {
    const TensorType& want = body.node(ins[i]).results[0];
    if (want != ctx.operands[i])
      ctx.fail("operand " + std::to_string(i) + " has type " + ctx.operands[i].to_string() +
               " but body input " + std::to_string(i) + " (%" + body.node(ins[i]).name + ") is " +
               want.to_string());
  }
  for (const Node& n : body.nodes()) {
    bool ok = n.op == OpKind::Input || n.op == OpKind::Constant ||
              (op_info(n.op).has(kElementwise) && n.op != OpKind::ElementwiseRegion);
    if (!ok)
      ctx.fail("body node %" + n.name + " is a '" + std::string(op_name(n.op)) +
               "'; a region body may hold only inputs, constants and elementwise ops "
               "(no params, no nested regions)");
  }
  if (body.outputs().empty()) ctx.fail("body has no outputs; a region needs at least one");
  std::vector<TensorType> out;
  for (Value v : body.outputs()) out.push_back(body.type(v));
  return out;
}

}  // namespace

AttrSpec activation_attr() {
  return def("activation", AttrType::String, std::string("none"),
             {"none", "relu", "gelu", "gelu_tanh", "silu"});
}

void register_fused_ops() {
  define_op(OpKind::FusedMatMulBiasAct, {activation_attr()}, infer_matmul_bias_act);
  define_op(OpKind::FusedResidualLayerNorm,
            {def("axis", AttrType::Int, int64_t{-1}), def("eps", AttrType::Float, 1e-5)},
            infer_residual_norm);
  define_op(OpKind::FusedResidualRmsNorm,
            {def("axis", AttrType::Int, int64_t{-1}), def("eps", AttrType::Float, 1e-6)},
            infer_residual_norm);
  std::vector<AttrSpec> attn = attention_mask_attrs();
  attn.insert(attn.begin(), {req("heads", AttrType::Int), opt("kv_heads", AttrType::Int)});
  define_op(OpKind::PackedQkvAttention, std::move(attn), infer_packed_qkv_attention);
  define_op(OpKind::ElementwiseRegion, {req("body", AttrType::Graph)}, infer_elementwise_region);
}

}  // namespace rlx::detail
