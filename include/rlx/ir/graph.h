// SSA tensor graph and its builder: nodes in topological order, typed values, named leaves.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rlx/ir/attr.h"
#include "rlx/ir/op.h"
#include "rlx/ir/quant.h"
#include "rlx/ir/tensor.h"

namespace rlx {

/// A value of the graph: result `index` of node `node`.
struct Value {
  int32_t node = -1;
  int32_t index = 0;
  bool valid() const { return node >= 0; }
  bool operator==(const Value& o) const = default;
};

/// One operation. Operands refer to earlier nodes only (topological order by construction).
struct Node {
  OpKind op;
  std::string name;  ///< unique in the graph; for input/param it is the feed/weight name
  std::vector<Value> operands;
  AttrMap attrs;
  std::vector<TensorType> results;
};

/// Options of Graph::scan (lax.scan's keywords).
struct ScanOptions {
  /// Number of steps; required when there are no xs, else it must equal xs' leading dim
  /// (taken from the first xs when absent).
  std::optional<int64_t> length;
  bool reverse = false;  ///< visit steps length-1 .. 0 (ys still indexed by step)
  int64_t unroll = 1;    ///< >= 1; a hint to backends, no effect on results
};

/// An SSA graph plus the builder that grows it. Every builder method infers the result types
/// and throws rlx::Error at once for an ill-typed node, naming the op, node and operand types.
/// Binary builders apply jnp type promotion (inserting `convert`) so add(i32, f32) works; the
/// ops themselves require equal dtypes. Copying a Graph is a deep copy of its node list.
class Graph {
 public:
  /// Throws rlx::Error if `name` is empty or has characters outside [A-Za-z0-9_./-].
  explicit Graph(std::string name = "main");

  const std::string& name() const { return name_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(Value v) const { return nodes_.at(static_cast<size_t>(v.node)); }
  const Node& node(int32_t id) const { return nodes_.at(static_cast<size_t>(id)); }
  /// Type of a value; throws rlx::Error for a value not in this graph.
  const TensorType& type(Value v) const;
  const Shape& shape(Value v) const { return type(v).shape; }
  DType dtype(Value v) const { return type(v).dtype; }
  /// The dtype that `n`'s op dtype class (ops.def) constrains: select's branches (operand 1),
  /// the result of a leaf (input, param, constant, iota), else operand 0. Backend kernel
  /// tables state their native dtypes in these terms.
  DType class_dtype(const Node& n) const;
  /// Node id by name, or -1.
  int32_t find(std::string_view name) const;
  /// Input / param node ids in creation order.
  std::vector<int32_t> inputs() const;
  std::vector<int32_t> params() const;

  const std::vector<Value>& outputs() const { return outputs_; }
  /// Sets the graph results (each must be a value of this graph).
  void set_outputs(std::vector<Value> outs);

  // ---- generic construction
  /// Appends a node of kind `op`: checks arity and attributes (filling defaults), infers result
  /// types and returns its results. `name` is a hint: it is made unique with a suffix; empty
  /// means the next free number. Throws rlx::Error without changing the graph on failure.
  std::vector<Value> emit(OpKind op, std::vector<Value> operands, AttrMap attrs = {},
                          std::string name = "");
  /// emit() for a single-result op.
  Value emit1(OpKind op, std::vector<Value> operands, AttrMap attrs = {}, std::string name = "");
  /// Appends a leaf input/param with an explicit type. The name must be new.
  Value add_leaf(OpKind op, std::string name, TensorType type);
  /// Renames node `id` to `name`, made unique with a suffix as emit() does, and returns the
  /// name it got. Inputs and params keep theirs (they are feed and weight names): renaming one
  /// throws rlx::Error, as do an id out of range and a name with characters outside
  /// [A-Za-z0-9_./-].
  std::string rename(int32_t id, std::string name);

  // Every builder below mirrors the op of the same name in ops.def (semantics, jax.lax source)
  // and docs/ops.md (attributes). Each throws rlx::Error — naming the op, the node and the
  // operand types — when operands or attributes are ill-typed, and then leaves the graph as it
  // was. Axes may be negative (counted from the end) unless said otherwise.

  // ---- leaves
  /// A graph input fed per run, named `name` (must be new; letters, digits, _ . - /).
  Value input(std::string name, DType dtype, Shape shape);
  /// A named weight, set once per executable (same naming rules as input).
  Value param(std::string name, DType dtype, Shape shape);
  /// A literal; the graph keeps its own copy of `value`.
  Value constant(const Tensor& value, std::string name = "");
  /// Rank-0 constant of `dtype` holding `v` (converted as the convert op does).
  Value scalar(double v, DType dtype);
  /// Rank-0 constant of x's dtype: a "weak" scalar as in jnp (x * 0.5 keeps x's dtype).
  Value scalar_like(Value x, double v) { return scalar(v, dtype(x)); }
  /// lax.broadcasted_iota: a numeric `dtype` tensor of `shape` whose element is its index along
  /// `dimension` (0 <= dimension < rank).
  Value iota(DType dtype, Shape shape, int64_t dimension);
  /// The threefry key i32[2] of `seed` ([seed >> 32, seed & 0xffffffff] as i32 bit patterns,
  /// jax.random.key_data(jax.random.PRNGKey(seed))); without a seed, the key of the compile
  /// seed (CompileOptions::seed, bound by the pipeline; 0 in the reference evaluator).
  /// Higher-level draws (bits, uniform, fold_in, split) are in rlx/ir/random.h.
  Value rng_key(std::optional<uint64_t> seed = std::nullopt);

  // ---- elementwise unary: result has x's type. Transcendentals, rounding and activations need
  // a float dtype; neg/abs/sign take floats or integers; logical_not takes bool or integers
  // (bitwise); relu takes any numeric dtype.
  Value neg(Value x);
  Value abs(Value x);
  Value sign(Value x);
  Value exp(Value x);
  Value expm1(Value x);
  Value log(Value x);
  Value log1p(Value x);
  Value sqrt(Value x);
  Value rsqrt(Value x);
  Value sin(Value x);
  Value cos(Value x);
  Value tan(Value x);
  Value tanh(Value x);
  Value atan(Value x);
  Value logistic(Value x);
  Value erf(Value x);
  /// lax.cbrt: the real cube root of float x (negative for negative x).
  Value cbrt(Value x);
  Value floor(Value x);
  Value ceil(Value x);
  /// Round half to even (jnp.round).
  Value round(Value x);
  Value logical_not(Value x);
  /// lax.convert_element_type: float -> int truncates and saturates (NaN -> 0), -> f16/bf16
  /// rounds to nearest even (overflow -> inf), int -> int wraps, -> bool is x != 0.
  Value convert(Value x, DType dtype);
  /// lax.stop_gradient: x unchanged (any dtype); autodiff gives it a zero cotangent, so no
  /// gradient flows into x through this use. Decomposes to x itself on every backend.
  Value stop_gradient(Value x);
  Value relu(Value x);
  /// Exact (erf) GELU, jax.nn.gelu(approximate=False).
  Value gelu(Value x);
  /// tanh-approximate GELU, jax.nn.gelu(approximate=True).
  Value gelu_tanh(Value x);
  Value silu(Value x);
  Value softplus(Value x);
  /// x >= 0 ? x : alpha * x (jax.nn.leaky_relu).
  Value leaky_relu(Value x, double alpha = 0.01);

  // ---- elementwise binary: operands broadcast by numpy rules (the result has the broadcast
  // shape) and are first promoted to a common dtype by jnp.promote_types (a `convert` is
  // inserted). Arithmetic needs numeric dtypes; logical_and/or/xor take bool (logical) or
  // integers (bitwise); comparisons take any dtype and return bool.
  Value add(Value x, Value y);
  Value sub(Value x, Value y);
  Value mul(Value x, Value y);
  /// Integers truncate toward zero; x/0 = -1 and INT_MIN/-1 = INT_MIN (XLA).
  Value div(Value x, Value y);
  Value pow(Value x, Value y);
  /// lax.max / lax.min: NaN if either operand is NaN.
  Value max(Value x, Value y);
  Value min(Value x, Value y);
  /// Remainder with the sign of x (C fmod, lax.rem); integer x rem 0 = x.
  Value rem(Value x, Value y);
  Value logical_and(Value x, Value y);
  Value logical_or(Value x, Value y);
  Value logical_xor(Value x, Value y);
  Value eq(Value x, Value y);
  Value ne(Value x, Value y);
  Value lt(Value x, Value y);
  Value le(Value x, Value y);
  Value gt(Value x, Value y);
  Value ge(Value x, Value y);
  /// jnp.where(pred, on_true, on_false); on_true/on_false are promoted to a common dtype.
  Value select(Value pred, Value on_true, Value on_false);
  /// lax.clamp(lo, x, hi).
  Value clamp(Value lo, Value x, Value hi);

  // ---- linear algebra
  /// lax.dot_general: lhs/rhs of one numeric dtype; `*_batch` dims pair up (equal sizes), as do
  /// `*_contract` dims; result [batch..., lhs free..., rhs free...] of dtype `preferred` if
  /// given (e.g. f32 for bf16 operands), else the operand dtype.
  Value dot_general(Value lhs, Value rhs, std::vector<int64_t> lhs_batch,
                    std::vector<int64_t> rhs_batch, std::vector<int64_t> lhs_contract,
                    std::vector<int64_t> rhs_contract,
                    std::optional<DType> preferred = std::nullopt);
  /// numpy.matmul: x [..., M, K] @ y [..., K, N] -> [..., M, N], batch dims broadcast, 1-D
  /// operands promoted and squeezed as numpy does; operands promoted to a common dtype.
  Value matmul(Value x, Value y);

  // ---- reductions over `axes` (empty: no reduction), dropping them unless keepdims. An empty
  // reduced extent gives the identity: sum 0, prod 1, max -inf / int min, min +inf / int max,
  // mean NaN. Numeric dtypes; reduce_mean needs a float.
  Value reduce_sum(Value x, std::vector<int64_t> axes, bool keepdims = false);
  Value reduce_mean(Value x, std::vector<int64_t> axes, bool keepdims = false);
  Value reduce_max(Value x, std::vector<int64_t> axes, bool keepdims = false);
  Value reduce_min(Value x, std::vector<int64_t> axes, bool keepdims = false);
  Value reduce_prod(Value x, std::vector<int64_t> axes, bool keepdims = false);
  /// jnp.argmax / argmin: index (i32 or i64) of the first extremum along `axis`; NaN counts as
  /// the extremum. Any dtype; an empty axis is an error.
  Value argmax(Value x, int64_t axis, bool keepdims = false, DType index_dtype = DType::i32);
  Value argmin(Value x, int64_t axis, bool keepdims = false, DType index_dtype = DType::i32);
  /// lax.cumsum along `axis` (numeric); `exclusive` shifts by one (first element 0), `reverse`
  /// sums from the end.
  Value cumsum(Value x, int64_t axis, bool exclusive = false, bool reverse = false);

  // ---- shape ops (any dtype unless said)
  /// Row-major reshape; one dim may be -1 (inferred). Element counts must match.
  Value reshape(Value x, std::vector<int64_t> shape);
  /// out.dim[i] = x.dim[permutation[i]].
  Value transpose(Value x, std::vector<int64_t> permutation);
  /// lax.broadcast_in_dim: x's dim i becomes result dim broadcast_dimensions[i] (size equal
  /// or 1); the other result dims are new.
  Value broadcast_in_dim(Value x, std::vector<int64_t> shape,
                         std::vector<int64_t> broadcast_dimensions);
  /// ONNX Expand: broadcast x to numpy.broadcast_shapes(x.shape, shape).
  Value expand(Value x, std::vector<int64_t> shape);
  /// lax.slice: 0 <= start <= limit <= dim per dim; strides >= 1 ({} = all 1).
  Value slice(Value x, std::vector<int64_t> start, std::vector<int64_t> limit,
              std::vector<int64_t> strides = {});
  /// lax.concatenate of >= 1 operands of one dtype and rank, equal except along `dimension`.
  Value concatenate(std::vector<Value> xs, int64_t dimension);
  /// lax.pad with a rank-0 `padding_value` of x's dtype; low/high may be negative (crop),
  /// interior >= 0 ({} = none).
  Value pad(Value x, Value padding_value, std::vector<int64_t> low, std::vector<int64_t> high,
            std::vector<int64_t> interior = {});
  /// jnp.take(x, indices, axis): result x.shape[:axis] + indices.shape + x.shape[axis+1:];
  /// integer indices are clamped to [0, n-1] (StableHLO gather semantics).
  Value gather(Value x, Value indices, int64_t axis);
  /// jnp.take_along_axis: indices have x's rank (other dims broadcast); clamped like gather.
  Value take_along_axis(Value x, Value indices, int64_t axis);
  /// Adjoint of gather: x with updates (shape x.shape[:axis] + indices.shape +
  /// x.shape[axis+1:]) added at the indexed positions; out-of-range indices are dropped.
  Value scatter_add(Value x, Value indices, Value updates, int64_t axis);
  /// lax.dynamic_slice: the [slice_sizes] block of x starting at `start_indices` (one rank-0
  /// integer Value per dim of x, all of one dtype), each start clamped to [0, dim - size] so
  /// the block fits; 0 <= slice_sizes[i] <= x.dim[i]. Result: x's dtype, shape slice_sizes.
  Value dynamic_slice(Value x, std::vector<Value> start_indices, std::vector<int64_t> slice_sizes);
  /// lax.dynamic_update_slice: x with `update` (x's dtype and rank, update.dim[i] <= x.dim[i])
  /// written at `start_indices` (as dynamic_slice's, clamped to [0, x.dim - update.dim]).
  Value dynamic_update_slice(Value x, Value update, std::vector<Value> start_indices);
  /// lax.rev: reverse element order along `axes`.
  Value reverse(Value x, std::vector<int64_t> axes);
  /// Remove the listed size-1 dims (lax.squeeze).
  Value squeeze(Value x, std::vector<int64_t> axes);
  /// jnp.expand_dims: insert size-1 dims; `axes` index the result.
  Value expand_dims(Value x, std::vector<int64_t> axes);
  Value unsqueeze(Value x, std::vector<int64_t> axes) { return expand_dims(x, std::move(axes)); }

  // ---- neural-network ops (float dtypes)
  /// jax.nn.softmax along `axis`, max-subtracted; an all -inf row gives NaN.
  Value softmax(Value x, int64_t axis = -1);
  /// jax.nn.log_softmax: x - max - log(sum(exp(x - max))).
  Value log_softmax(Value x, int64_t axis = -1);
  /// (x - mean) * rsqrt(var + eps) * scale + bias over dims [axis, rank) (two-pass variance);
  /// scale and bias have shape x.shape[axis:] (ONNX LayerNormalization).
  Value layer_norm(Value x, Value scale, Value bias, int64_t axis = -1, double eps = 1e-5);
  /// x * rsqrt(mean(x^2) + eps) * scale over dims [axis, rank); scale is x.shape[axis:].
  Value rms_norm(Value x, Value scale, int64_t axis = -1, double eps = 1e-6);
  /// Attention options; `mask` is "none", "causal", "sliding_window", "bool" or "bias".
  struct AttentionOptions {
    std::string mask = "none";
    std::optional<double> scale;  ///< default 1/sqrt(D)
    int64_t window = 0;           ///< sliding_window only
  };
  /// q [B,Hq,Sq,D], k [B,Hkv,Sk,D], v [B,Hkv,Sk,Dv] -> [B,Hq,Sq,Dv]; `mask_tensor` (bool for
  /// "bool", float for "bias") broadcasts to [B,Hq,Sq,Sk].
  Value attention(Value q, Value k, Value v, const AttentionOptions& options,
                  std::optional<Value> mask_tensor = std::nullopt);
  /// Self-attention straight from a packed QKV projection: qkv [B,S,(Hq+2*Hkv)*D] holds per
  /// token the columns q | k | v (Hq, Hkv, Hkv heads of D, the layout of one Linear [H, 3H]);
  /// the result is token-major [B,S,Hq*D]. Equals reshape(transpose(attention(q, k, v), {0,2,
  /// 1,3}), [B,S,Hq*D]) with q/k/v the three column blocks as [B,heads,S,D] (its decomposition);
  /// `kv_heads` 0 means Hq. The mask is attention's over [B,Hq,S,S]. The fuse-packed-attention
  /// pass creates it on CPU (ONNX Runtime's com.microsoft Attention reads the packed QKV too).
  /// Errors: rank != 3, a width not (Hq+2*Hkv)*D, Hq not a multiple of Hkv, attention's masks.
  Value packed_qkv_attention(Value qkv, int64_t heads, int64_t kv_heads,
                             const AttentionOptions& options,
                             std::optional<Value> mask_tensor = std::nullopt);
  /// Rotary embedding of x [..., S, D] with tables cos/sin [S, R/2] (numpy-broadcastable to
  /// x[..., S, R/2]); layout "neox" rotates pairs (i, i + R/2), "gptj" pairs (2i, 2i + 1);
  /// dims >= R pass through (partial rotary). Su et al., RoFormer (2021).
  Value rope(Value x, Value cos, Value sin, std::string layout = "neox");
  /// lax.conv_general_dilated over x [N,C,W] / [N,C,H,W] with w [O,C/groups,kW] /
  /// [O,C/groups,kH,kW] (PyTorch/ONNX layout); empty lists mean strides 1, pads 0, dilation 1.
  Value conv(Value x, Value w, std::vector<int64_t> strides = {}, std::vector<int64_t> pad_low = {},
             std::vector<int64_t> pad_high = {}, std::vector<int64_t> dilation = {},
             int64_t groups = 1);
  /// Max over windows of the spatial dims of x [N,C,W] / [N,C,H,W]; padding counts as -inf;
  /// empty strides mean 1 (ONNX MaxPool).
  Value max_pool(Value x, std::vector<int64_t> window, std::vector<int64_t> strides = {},
                 std::vector<int64_t> pad_low = {}, std::vector<int64_t> pad_high = {});
  /// Mean over windows like max_pool; the divisor is the window size (count_include_pad) or
  /// the number of non-padding elements (ONNX AveragePool).
  Value avg_pool(Value x, std::vector<int64_t> window, std::vector<int64_t> strides = {},
                 std::vector<int64_t> pad_low = {}, std::vector<int64_t> pad_high = {},
                 bool count_include_pad = true);
  /// lax.top_k: (values, i32 indices) of the k largest along the last axis, descending, ties
  /// by lower index; 0 <= k <= last dim.
  std::pair<Value, Value> top_k(Value x, int64_t k);
  /// Threefry-2x32 (20 rounds, jax's threefry2x32_p): the counters (x0, x1) encrypted under
  /// the key (k0, k1), returning (y0, y1). All four are i32 (u32 words as bit patterns) and
  /// broadcast (numpy rules) to the results' shape.
  std::pair<Value, Value> threefry2x32(Value k0, Value k1, Value x0, Value x1);
  /// Per-example loss logsumexp(logits) - logits[label] for logits [..., C] (float) and
  /// integer labels [...] (clamped into [0, C-1]); result [...].
  Value softmax_cross_entropy(Value logits, Value labels);

  // ---- quantized weights (ggml block formats, rlx/ir/quant.h; docs/ir.md "Quantized weights")
  /// Unpacks w u8[..., R], each last-dim row ggml's packed blocks of `k` elements in `format`
  /// (R must be quant_row_bytes(format, k), k a multiple of the block size), to f32[..., k],
  /// exactly as ggml's dequantize_row_* (bit-equal to gguf-py). Not differentiable (w is
  /// integer data). Throws rlx::Error naming the op, node and shapes otherwise.
  Value dequantize(Value w, QuantFormat format, int64_t k);
  /// x[..., K] (float) times the transpose of the quantized weight w u8[N, R] (N rows of K
  /// elements in `format`, ggml's [out, in] layout): x . dequantize(w)^T -> [..., N] in x's
  /// dtype, i.e. a Linear layer without bias (ggml_mul_mat). k = K is x's last dim.
  /// `act_quant` says what x is multiplied as (ONNX MatMulNBits' accuracy_level in spirit):
  /// "none": x itself, so every backend computes x . dequantize(w)^T up to f32 summation order;
  /// "int8": x rounded per 32-element block to int8 with an f32 scale first
  /// (round_activations_int8 in rlx/ir/quant.h), what llama.cpp's kernels compute and what lets
  /// the CPU backend multiply integers (src/backends/cpu/kernels/quant_matmul.h); it needs a
  /// block-quantized format (else rlx::Error). Decomposes to [the rounding +] dequantize +
  /// convert (non-f32 x) + dot_general, so the evaluator, the XLA backend and the CPU kernels
  /// give the same values for either choice. With `bias` (x's dtype, [N]) and `activation`
  /// ("none", "relu", "gelu", "gelu_tanh", "silu"): activation(x . dequantize(w)^T + bias), the
  /// epilogue fused_matmul_bias_act has (the fuse-matmul-bias-act pass folds a following bias
  /// add and activation into a quant_matmul); the decomposition adds the bias and applies the
  /// activation after the dot_general.
  Value quant_matmul(Value x, Value w, QuantFormat format, std::string act_quant = "none",
                     std::optional<Value> bias = std::nullopt, std::string activation = "none");

  // ---- fused forms (created by fusion passes; each decomposes to its unfused ops)
  /// activation(matmul(x, w) + bias), activation "none", "relu", "gelu", "gelu_tanh" or
  /// "silu"; bias broadcasts to the matmul result.
  Value fused_matmul_bias_act(Value x, Value w, Value bias, std::string activation = "none");
  /// h = x + residual (same type); returns (layer_norm(h, scale, bias), h).
  std::pair<Value, Value> fused_residual_layer_norm(Value x, Value residual, Value scale,
                                                    Value bias, int64_t axis = -1,
                                                    double eps = 1e-5);
  /// h = x + residual (same type); returns (rms_norm(h, scale), h).
  std::pair<Value, Value> fused_residual_rms_norm(Value x, Value residual, Value scale,
                                                  int64_t axis = -1, double eps = 1e-6);
  /// Applies `body` (a graph of elementwise ops whose inputs match `operands` in order and
  /// type) to broadcast operands; returns the body's outputs.
  std::vector<Value> elementwise_region(std::vector<Value> operands, Graph body);

  // ---- control flow (docs/ir.md "Regions"). A body is a self-contained Graph: its inputs, in
  // creation order, receive the values listed for it by position (values of this graph a body
  // needs are passed explicitly, as captured operands), it holds no params and returns at
  // least one value. The body is copied into the node (shared by copies of this graph). Each
  // builder throws rlx::Error naming the op, the node, the branch or body and both types when
  // a body's inputs or results do not match, and then leaves the graph as it was.

  /// lax.cond(pred, true_fun, false_fun, *operands): `pred` a bool[] scalar; runs
  /// `true_branch` or `false_branch` on `operands` and returns its results. Both branches take
  /// inputs of exactly the operands' types and return identical result types. Stored as a
  /// `cond` node with branches [false_branch, true_branch] (branch int(pred), as jax's cond_p).
  std::vector<Value> cond(Value pred, Graph true_branch, Graph false_branch,
                          std::vector<Value> operands);
  /// lax.switch(index, branches, *operands): `index` an i32[] scalar, clamped to
  /// [0, branches.size() - 1] as jax does; runs that branch on `operands`. >= 1 branches, all
  /// with inputs of the operands' types and identical result types.
  std::vector<Value> switch_case(Value index, std::vector<Graph> branches,
                                 std::vector<Value> operands);
  /// lax.while_loop(cond_fun, body_fun, init): carry = init; while cond(consts..., carry...)
  /// (a bool[] result) and fewer than `max_trip_count` iterations have run (>= 0; none: no
  /// bound), carry = body(consts..., carry...). Both bodies take inputs of the types of
  /// consts then init; body returns exactly init's types. Returns the final carry (init itself
  /// when the loop runs zero times). A loop whose cond never turns false and has no
  /// max_trip_count does not terminate, as in jax.
  std::vector<Value> while_loop(Graph cond, Graph body, std::vector<Value> init,
                                std::vector<Value> consts = {},
                                std::optional<int64_t> max_trip_count = std::nullopt);
  /// lax.scan(f, init, xs, length, reverse, unroll): for t = 0 .. length-1 (reversed when
  /// options.reverse), (carry..., y_t...) = body(consts..., carry..., x_t...) where x_t is
  /// xs[t] (each xs has the leading dim `length`; the body's input is its slice). Body
  /// inputs: consts, then init's types, then the slices; outputs: exactly init's types, then
  /// any ys. Returns (final carry..., ys...) with each y stacked on a new leading axis of size
  /// length. length 0 returns init and empty ys [0, ...] without running the body.
  std::vector<Value> scan(Graph body, std::vector<Value> init, std::vector<Value> xs,
                          std::vector<Value> consts = {}, ScanOptions options = {});

  // ---- checking and text
  /// Re-infers every node and checks names, operand order and outputs. Returns one diagnostic
  /// per problem ("node %3 (op 'add'): ..."); empty when the graph is valid.
  std::vector<std::string> verify() const;
  /// The text form (docs/ir.md); parse(to_string()) reproduces the graph exactly.
  std::string to_string() const;
  /// Parses the text form. Throws rlx::Error "line L:C: expected X, found Y" on bad input.
  static Graph parse(std::string_view text);

  bool operator==(const Graph& o) const;

 private:
  friend class GraphParser;
  std::string unique_name(std::string hint);
  std::vector<Value> emit_named(OpKind op, std::vector<Value> operands, AttrMap attrs,
                                std::string name);
  /// emit1() after converting operands[first..] to their jnp-promoted common dtype; a failure
  /// removes the converts again.
  Value emit_promoted(OpKind op, std::vector<Value> operands, size_t first = 0);
  /// Drops the nodes after the first `num_nodes` and restores next_id_ (undoes a builder call).
  void truncate(size_t num_nodes, int64_t next_id);
  /// Runs `build` (a builder that may emit several nodes, e.g. converts and then the op); if it
  /// throws, the graph is restored to its state before the call.
  template <class F>
  auto atomically(F&& build) {
    size_t num_nodes = nodes_.size();
    int64_t next_id = next_id_;
    try {
      return build();
    } catch (...) {
      truncate(num_nodes, next_id);
      throw;
    }
  }
  Value reduce(OpKind op, Value x, std::vector<int64_t> axes, bool keepdims);

  std::string name_;
  std::vector<Node> nodes_;
  std::vector<Value> outputs_;
  std::unordered_map<std::string, int32_t> by_name_;
  int64_t next_id_ = 0;
};

}  // namespace rlx
