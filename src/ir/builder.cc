// Graph builder methods: thin, typed front doors to Graph::emit for every op. Attribute names
// here are the op schemas' names (src/ir/ops/<family>.cc); inference happens in emit().
#include <memory>

#include "rlx/ir/error.h"
#include "rlx/ir/graph.h"

namespace rlx {

using Ints = std::vector<int64_t>;

// ---- elementwise unary
Value Graph::neg(Value x) { return emit1(OpKind::Neg, {x}); }
Value Graph::abs(Value x) { return emit1(OpKind::Abs, {x}); }
Value Graph::sign(Value x) { return emit1(OpKind::Sign, {x}); }
Value Graph::exp(Value x) { return emit1(OpKind::Exp, {x}); }
Value Graph::expm1(Value x) { return emit1(OpKind::Expm1, {x}); }
Value Graph::log(Value x) { return emit1(OpKind::Log, {x}); }
Value Graph::log1p(Value x) { return emit1(OpKind::Log1p, {x}); }
Value Graph::sqrt(Value x) { return emit1(OpKind::Sqrt, {x}); }
Value Graph::rsqrt(Value x) { return emit1(OpKind::Rsqrt, {x}); }
Value Graph::sin(Value x) { return emit1(OpKind::Sin, {x}); }
Value Graph::cos(Value x) { return emit1(OpKind::Cos, {x}); }
Value Graph::tan(Value x) { return emit1(OpKind::Tan, {x}); }
Value Graph::tanh(Value x) { return emit1(OpKind::Tanh, {x}); }
Value Graph::atan(Value x) { return emit1(OpKind::Atan, {x}); }
Value Graph::logistic(Value x) { return emit1(OpKind::Logistic, {x}); }
Value Graph::erf(Value x) { return emit1(OpKind::Erf, {x}); }
Value Graph::cbrt(Value x) { return emit1(OpKind::Cbrt, {x}); }
Value Graph::floor(Value x) { return emit1(OpKind::Floor, {x}); }
Value Graph::ceil(Value x) { return emit1(OpKind::Ceil, {x}); }
Value Graph::round(Value x) { return emit1(OpKind::Round, {x}); }
Value Graph::logical_not(Value x) { return emit1(OpKind::Not, {x}); }
Value Graph::convert(Value x, DType dtype) {
  return emit1(OpKind::Convert, {x}, {{"dtype", dtype}});
}
Value Graph::stop_gradient(Value x) { return emit1(OpKind::StopGradient, {x}); }
Value Graph::relu(Value x) { return emit1(OpKind::Relu, {x}); }
Value Graph::gelu(Value x) { return emit1(OpKind::Gelu, {x}); }
Value Graph::gelu_tanh(Value x) { return emit1(OpKind::GeluTanh, {x}); }
Value Graph::silu(Value x) { return emit1(OpKind::Silu, {x}); }
Value Graph::softplus(Value x) { return emit1(OpKind::Softplus, {x}); }
Value Graph::leaky_relu(Value x, double alpha) {
  return emit1(OpKind::LeakyRelu, {x}, {{"alpha", alpha}});
}

// ---- elementwise binary
Value Graph::add(Value x, Value y) { return emit_promoted(OpKind::Add, {x, y}); }
Value Graph::sub(Value x, Value y) { return emit_promoted(OpKind::Sub, {x, y}); }
Value Graph::mul(Value x, Value y) { return emit_promoted(OpKind::Mul, {x, y}); }
Value Graph::div(Value x, Value y) { return emit_promoted(OpKind::Div, {x, y}); }
Value Graph::pow(Value x, Value y) { return emit_promoted(OpKind::Pow, {x, y}); }
Value Graph::max(Value x, Value y) { return emit_promoted(OpKind::Max, {x, y}); }
Value Graph::min(Value x, Value y) { return emit_promoted(OpKind::Min, {x, y}); }
Value Graph::rem(Value x, Value y) { return emit_promoted(OpKind::Rem, {x, y}); }
Value Graph::logical_and(Value x, Value y) { return emit_promoted(OpKind::And, {x, y}); }
Value Graph::logical_or(Value x, Value y) { return emit_promoted(OpKind::Or, {x, y}); }
Value Graph::logical_xor(Value x, Value y) { return emit_promoted(OpKind::Xor, {x, y}); }
Value Graph::eq(Value x, Value y) { return emit_promoted(OpKind::Eq, {x, y}); }
Value Graph::ne(Value x, Value y) { return emit_promoted(OpKind::Ne, {x, y}); }
Value Graph::lt(Value x, Value y) { return emit_promoted(OpKind::Lt, {x, y}); }
Value Graph::le(Value x, Value y) { return emit_promoted(OpKind::Le, {x, y}); }
Value Graph::gt(Value x, Value y) { return emit_promoted(OpKind::Gt, {x, y}); }
Value Graph::ge(Value x, Value y) { return emit_promoted(OpKind::Ge, {x, y}); }

Value Graph::select(Value pred, Value on_true, Value on_false) {
  return emit_promoted(OpKind::Select, {pred, on_true, on_false}, 1);
}

Value Graph::clamp(Value lo, Value x, Value hi) {
  return emit_promoted(OpKind::Clamp, {lo, x, hi});
}

// ---- linear algebra
Value Graph::dot_general(Value lhs, Value rhs, Ints lhs_batch, Ints rhs_batch, Ints lhs_contract,
                         Ints rhs_contract, std::optional<DType> preferred) {
  AttrMap a{{"lhs_batch", std::move(lhs_batch)},
            {"rhs_batch", std::move(rhs_batch)},
            {"lhs_contract", std::move(lhs_contract)},
            {"rhs_contract", std::move(rhs_contract)}};
  if (preferred) a.set("preferred", *preferred);
  return emit1(OpKind::DotGeneral, {lhs, rhs}, std::move(a));
}

Value Graph::matmul(Value x, Value y) { return emit_promoted(OpKind::MatMul, {x, y}); }

// ---- reductions
Value Graph::reduce(OpKind op, Value x, Ints axes, bool keepdims) {
  return emit1(op, {x}, {{"axes", std::move(axes)}, {"keepdims", keepdims}});
}
Value Graph::reduce_sum(Value x, Ints axes, bool keepdims) {
  return reduce(OpKind::ReduceSum, x, std::move(axes), keepdims);
}
Value Graph::reduce_mean(Value x, Ints axes, bool keepdims) {
  return reduce(OpKind::ReduceMean, x, std::move(axes), keepdims);
}
Value Graph::reduce_max(Value x, Ints axes, bool keepdims) {
  return reduce(OpKind::ReduceMax, x, std::move(axes), keepdims);
}
Value Graph::reduce_min(Value x, Ints axes, bool keepdims) {
  return reduce(OpKind::ReduceMin, x, std::move(axes), keepdims);
}
Value Graph::reduce_prod(Value x, Ints axes, bool keepdims) {
  return reduce(OpKind::ReduceProd, x, std::move(axes), keepdims);
}
Value Graph::argmax(Value x, int64_t axis, bool keepdims, DType index_dtype) {
  return emit1(OpKind::ArgMax, {x},
               {{"axis", axis}, {"keepdims", keepdims}, {"index_dtype", index_dtype}});
}
Value Graph::argmin(Value x, int64_t axis, bool keepdims, DType index_dtype) {
  return emit1(OpKind::ArgMin, {x},
               {{"axis", axis}, {"keepdims", keepdims}, {"index_dtype", index_dtype}});
}
Value Graph::cumsum(Value x, int64_t axis, bool exclusive, bool reverse) {
  return emit1(OpKind::CumSum, {x},
               {{"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}});
}

// ---- shape ops
Value Graph::reshape(Value x, Ints shape) {
  return emit1(OpKind::Reshape, {x}, {{"shape", std::move(shape)}});
}
Value Graph::transpose(Value x, Ints permutation) {
  return emit1(OpKind::Transpose, {x}, {{"permutation", std::move(permutation)}});
}
Value Graph::broadcast_in_dim(Value x, Ints shape, Ints broadcast_dimensions) {
  return emit1(
      OpKind::BroadcastInDim, {x},
      {{"shape", std::move(shape)}, {"broadcast_dimensions", std::move(broadcast_dimensions)}});
}
Value Graph::expand(Value x, Ints shape) {
  return emit1(OpKind::Expand, {x}, {{"shape", std::move(shape)}});
}
Value Graph::slice(Value x, Ints start, Ints limit, Ints strides) {
  return emit1(
      OpKind::Slice, {x},
      {{"start", std::move(start)}, {"limit", std::move(limit)}, {"strides", std::move(strides)}});
}
Value Graph::concatenate(std::vector<Value> xs, int64_t dimension) {
  return emit1(OpKind::Concatenate, std::move(xs), {{"dimension", dimension}});
}
Value Graph::pad(Value x, Value padding_value, Ints low, Ints high, Ints interior) {
  return emit1(
      OpKind::Pad, {x, padding_value},
      {{"low", std::move(low)}, {"high", std::move(high)}, {"interior", std::move(interior)}});
}
Value Graph::gather(Value x, Value indices, int64_t axis) {
  return emit1(OpKind::Gather, {x, indices}, {{"axis", axis}});
}
Value Graph::take_along_axis(Value x, Value indices, int64_t axis) {
  return emit1(OpKind::TakeAlongAxis, {x, indices}, {{"axis", axis}});
}
Value Graph::scatter_add(Value x, Value indices, Value updates, int64_t axis) {
  return emit1(OpKind::ScatterAdd, {x, indices, updates}, {{"axis", axis}});
}
Value Graph::dynamic_slice(Value x, std::vector<Value> start_indices, Ints slice_sizes) {
  start_indices.insert(start_indices.begin(), x);
  return emit1(OpKind::DynamicSlice, std::move(start_indices),
               {{"slice_sizes", std::move(slice_sizes)}});
}
Value Graph::dynamic_update_slice(Value x, Value update, std::vector<Value> start_indices) {
  start_indices.insert(start_indices.begin(), {x, update});
  return emit1(OpKind::DynamicUpdateSlice, std::move(start_indices), {});
}
Value Graph::reverse(Value x, Ints axes) {
  return emit1(OpKind::Reverse, {x}, {{"axes", std::move(axes)}});
}
Value Graph::squeeze(Value x, Ints axes) {
  return emit1(OpKind::Squeeze, {x}, {{"axes", std::move(axes)}});
}
Value Graph::expand_dims(Value x, Ints axes) {
  return emit1(OpKind::ExpandDims, {x}, {{"axes", std::move(axes)}});
}

// ---- neural-network ops
Value Graph::softmax(Value x, int64_t axis) {
  return emit1(OpKind::Softmax, {x}, {{"axis", axis}});
}
Value Graph::log_softmax(Value x, int64_t axis) {
  return emit1(OpKind::LogSoftmax, {x}, {{"axis", axis}});
}
Value Graph::layer_norm(Value x, Value scale, Value bias, int64_t axis, double eps) {
  return emit1(OpKind::LayerNorm, {x, scale, bias}, {{"axis", axis}, {"eps", eps}});
}
Value Graph::rms_norm(Value x, Value scale, int64_t axis, double eps) {
  return emit1(OpKind::RmsNorm, {x, scale}, {{"axis", axis}, {"eps", eps}});
}
Value Graph::attention(Value q, Value k, Value v, const AttentionOptions& o,
                       std::optional<Value> mask_tensor) {
  AttrMap a{{"mask", o.mask}, {"window", o.window}};
  if (o.scale) a.set("scale", *o.scale);
  std::vector<Value> operands{q, k, v};
  if (mask_tensor) operands.push_back(*mask_tensor);
  return emit1(OpKind::Attention, std::move(operands), std::move(a));
}
Value Graph::packed_qkv_attention(Value qkv, int64_t heads, int64_t kv_heads,
                                  const AttentionOptions& o, std::optional<Value> mask_tensor) {
  AttrMap a{{"heads", heads}, {"mask", o.mask}, {"window", o.window}};
  if (kv_heads != 0) a.set("kv_heads", kv_heads);
  if (o.scale) a.set("scale", *o.scale);
  std::vector<Value> operands{qkv};
  if (mask_tensor) operands.push_back(*mask_tensor);
  return emit1(OpKind::PackedQkvAttention, std::move(operands), std::move(a));
}
Value Graph::dequantize(Value w, QuantFormat format, int64_t k) {
  return emit1(OpKind::Dequantize, {w},
               {{"format", std::string(quant_format_info(format).name)}, {"k", k}});
}
Value Graph::quant_matmul(Value x, Value w, QuantFormat format, std::string act_quant,
                          std::optional<Value> bias, std::string activation) {
  const Shape& xs = shape(x);
  const int64_t k = xs.rank() > 0 ? xs[xs.rank() - 1] : 0;
  std::vector<Value> operands{x, w};
  if (bias) operands.push_back(*bias);
  AttrMap attrs{{"format", std::string(quant_format_info(format).name)},
                {"k", k},
                {"act_quant", std::move(act_quant)}};
  if (activation != "none") attrs.set("activation", std::move(activation));
  return emit1(OpKind::QuantMatMul, operands, std::move(attrs));
}
Value Graph::rope(Value x, Value cos, Value sin, std::string layout) {
  return emit1(OpKind::Rope, {x, cos, sin}, {{"layout", std::move(layout)}});
}
Value Graph::conv(Value x, Value w, Ints strides, Ints pad_low, Ints pad_high, Ints dilation,
                  int64_t groups) {
  return emit1(OpKind::Conv, {x, w},
               {{"strides", std::move(strides)},
                {"pad_low", std::move(pad_low)},
                {"pad_high", std::move(pad_high)},
                {"dilation", std::move(dilation)},
                {"groups", groups}});
}
Value Graph::max_pool(Value x, Ints window, Ints strides, Ints pad_low, Ints pad_high) {
  return emit1(OpKind::MaxPool, {x},
               {{"window", std::move(window)},
                {"strides", std::move(strides)},
                {"pad_low", std::move(pad_low)},
                {"pad_high", std::move(pad_high)}});
}
Value Graph::avg_pool(Value x, Ints window, Ints strides, Ints pad_low, Ints pad_high,
                      bool count_include_pad) {
  return emit1(OpKind::AvgPool, {x},
               {{"window", std::move(window)},
                {"strides", std::move(strides)},
                {"pad_low", std::move(pad_low)},
                {"pad_high", std::move(pad_high)},
                {"count_include_pad", count_include_pad}});
}
std::pair<Value, Value> Graph::top_k(Value x, int64_t k) {
  auto r = emit(OpKind::TopK, {x}, {{"k", k}});
  return {r[0], r[1]};
}
Value Graph::softmax_cross_entropy(Value logits, Value labels) {
  return emit1(OpKind::SoftmaxCrossEntropy, {logits, labels});
}

// ---- fused forms
Value Graph::fused_matmul_bias_act(Value x, Value w, Value bias, std::string activation) {
  return emit1(OpKind::FusedMatMulBiasAct, {x, w, bias}, {{"activation", std::move(activation)}});
}
std::pair<Value, Value> Graph::fused_residual_layer_norm(Value x, Value residual, Value scale,
                                                         Value bias, int64_t axis, double eps) {
  auto r = emit(OpKind::FusedResidualLayerNorm, {x, residual, scale, bias},
                {{"axis", axis}, {"eps", eps}});
  return {r[0], r[1]};
}
std::pair<Value, Value> Graph::fused_residual_rms_norm(Value x, Value residual, Value scale,
                                                       int64_t axis, double eps) {
  auto r = emit(OpKind::FusedResidualRmsNorm, {x, residual, scale}, {{"axis", axis}, {"eps", eps}});
  return {r[0], r[1]};
}
std::vector<Value> Graph::elementwise_region(std::vector<Value> operands, Graph body) {
  return emit(OpKind::ElementwiseRegion, std::move(operands),
              {{"body", std::make_shared<const Graph>(std::move(body))}});
}

// ---- control flow
namespace {
GraphRef share(Graph g) { return std::make_shared<const Graph>(std::move(g)); }
}  // namespace

std::vector<Value> Graph::cond(Value pred, Graph true_branch, Graph false_branch,
                               std::vector<Value> operands) {
  operands.insert(operands.begin(), pred);
  return emit(
      OpKind::Cond, std::move(operands),
      {{"branches", GraphList{share(std::move(false_branch)), share(std::move(true_branch))}}});
}

std::vector<Value> Graph::switch_case(Value index, std::vector<Graph> branches,
                                      std::vector<Value> operands) {
  GraphList gs;
  for (Graph& b : branches) gs.push_back(share(std::move(b)));
  operands.insert(operands.begin(), index);
  return emit(OpKind::Cond, std::move(operands), {{"branches", std::move(gs)}});
}

std::vector<Value> Graph::while_loop(Graph cond, Graph body, std::vector<Value> init,
                                     std::vector<Value> consts,
                                     std::optional<int64_t> max_trip_count) {
  AttrMap attrs{{"cond", share(std::move(cond))},
                {"body", share(std::move(body))},
                {"num_consts", static_cast<int64_t>(consts.size())}};
  if (max_trip_count) attrs.set("max_trip_count", *max_trip_count);
  consts.insert(consts.end(), init.begin(), init.end());
  return emit(OpKind::WhileLoop, std::move(consts), std::move(attrs));
}

std::vector<Value> Graph::scan(Graph body, std::vector<Value> init, std::vector<Value> xs,
                               std::vector<Value> consts, ScanOptions options) {
  if (!options.length) {
    if (xs.empty()) throw Error("op 'scan': length is required when there are no xs (lax.scan)");
    const Shape& s = shape(xs[0]);
    if (s.rank() == 0)
      throw Error("op 'scan': xs 0 is " + type(xs[0]).to_string() +
                  "; each xs needs a leading axis to scan over");
    options.length = s[0];
  }
  AttrMap attrs{{"body", share(std::move(body))},
                {"num_consts", static_cast<int64_t>(consts.size())},
                {"num_carry", static_cast<int64_t>(init.size())},
                {"length", *options.length},
                {"reverse", options.reverse},
                {"unroll", options.unroll}};
  consts.insert(consts.end(), init.begin(), init.end());
  consts.insert(consts.end(), xs.begin(), xs.end());
  return emit(OpKind::Scan, std::move(consts), std::move(attrs));
}

}  // namespace rlx
