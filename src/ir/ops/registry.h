// Internal: how op families fill the registry, and helpers shared by inference functions.
#pragma once

#include <string>
#include <vector>

#include "rlx/ir/error.h"
#include "rlx/ir/op.h"

namespace rlx::detail {

/// Mutable registry entry; only register_*_ops() use it, during the one-time registry build.
OpInfo& mutable_op_info(OpKind kind);
/// Sets schema and inference of `kind` in one call.
void define_op(OpKind kind, std::vector<AttrSpec> attrs, InferFn infer);

// One per family file in src/ir/ops/.
void register_leaf_ops();
void register_elementwise_ops();
void register_linalg_ops();
void register_reduce_ops();
void register_shape_ops();
void register_nn_ops();
void register_conv_ops();
void register_fused_ops();
void register_quant_ops();
void register_random_ops();
void register_control_flow_ops();
void register_collective_ops();
void register_custom_ops();
/// The "activation" attribute of fused_matmul_bias_act and quant_matmul (fused.cc): "none"
/// (the default), "relu", "gelu", "gelu_tanh" or "silu", applied after the bias.
AttrSpec activation_attr();
/// attention's mask attributes (nn.cc): "mask" (none / causal / sliding_window / causal_lengths /
/// bool / bias), optional "scale" and "window"; shared by attention and packed_qkv_attention.
std::vector<AttrSpec> attention_mask_attrs();
/// Fails unless the operand count is `data` data operands (named `names`) plus the mask tensor
/// exactly when the "mask" attribute needs one (bool, bias, causal_lengths).
void check_attention_operands(const InferContext& ctx, size_t data, const char* names);
/// attention's mask rules: the "window" attribute, and operand `at` (if present) as the mask
/// tensor: integer lengths [B] (causal_lengths), bool (bool) or `dtype` (bias) broadcasting to
/// `scores` [B,Hq,Sq,Sk].
void check_attention_mask(const InferContext& ctx, size_t at, DType dtype, const Shape& scores);
/// The schema of the custom op a custom_call's attributes name (custom.cc); throws naming
/// the node for a missing or unknown name.
const OpInfo& custom_call_schema(std::string_view node, const AttrMap& attrs);

// ---- schema shorthands
inline AttrSpec req(std::string name, AttrType t) {
  return {std::move(name), t, AttrPresence::Required};
}
inline AttrSpec opt(std::string name, AttrType t) {
  return {std::move(name), t, AttrPresence::Optional};
}
inline AttrSpec def(std::string name, AttrType t, Attr value,
                    std::vector<std::string> choices = {}) {
  return {std::move(name), t, AttrPresence::Default, std::move(value), std::move(choices)};
}

// ---- inference helpers (each fails through ctx with a located message)
/// An int-list attribute as diagnostics print it: "[1,-2,3]" (its text-form spelling).
inline std::string ints_to_string(const std::vector<int64_t>& v) { return Shape(v).to_string(); }
/// Broadcast shape of all operands' shapes (numpy rules).
Shape broadcast_operands(const InferContext& ctx, size_t first = 0, size_t count = SIZE_MAX);
/// Fails unless every operand (from `first`) has the same dtype; returns it.
DType common_dtype(const InferContext& ctx, size_t first = 0, size_t count = SIZE_MAX);
/// Fails unless dtype `t` of `what` satisfies `ok` ("float", "integer or bool", ...).
void require_dtype(const InferContext& ctx, DType t, bool ok, const char* expected,
                   const std::string& what);
/// Normalises axes against rank (negative allowed), fails on out-of-range or duplicates.
std::vector<int> normalize_axes(const InferContext& ctx, const std::vector<int64_t>& axes, int rank,
                                const char* attr = "axes");
int normalize_axis(const InferContext& ctx, int64_t axis, int rank, const char* attr = "axis");
/// a + b and a * b on dims/attribute values; fails "shape arithmetic overflows int64" instead of
/// overflowing, so absurd attributes give an error rather than UB.
int64_t checked_add(const InferContext& ctx, int64_t a, int64_t b);
int64_t checked_mul(const InferContext& ctx, int64_t a, int64_t b);
/// numpy.matmul result shape of x and y (rank >= 1): 1-D operands are promoted ([k] -> [1,k] on
/// the left, [k,1] on the right) and the added dim removed; leading batch dims broadcast.
Shape matmul_shape(const InferContext& ctx, const Shape& x, const Shape& y);

}  // namespace rlx::detail
