// SSA tensor graph and its builder: nodes in topological order, typed values, named leaves.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rlx/ir/attr.h"
#include "rlx/ir/op.h"
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

  // ---- leaves
  Value input(std::string name, DType dtype, Shape shape);
  Value param(std::string name, DType dtype, Shape shape);
  /// A literal; the graph keeps its own copy of `value`.
  Value constant(const Tensor& value, std::string name = "");
  /// Rank-0 constant of `dtype` holding `v` (converted as the convert op does).
  Value scalar(double v, DType dtype);
  /// Rank-0 constant of x's dtype: a "weak" scalar as in jnp (x * 0.5 keeps x's dtype).
  Value scalar_like(Value x, double v) { return scalar(v, dtype(x)); }
  Value iota(DType dtype, Shape shape, int64_t dimension);

  // ---- elementwise unary
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
  Value floor(Value x);
  Value ceil(Value x);
  Value round(Value x);
  Value logical_not(Value x);
  Value convert(Value x, DType dtype);
  Value relu(Value x);
  Value gelu(Value x);
  Value gelu_tanh(Value x);
  Value silu(Value x);
  Value softplus(Value x);
  Value leaky_relu(Value x, double alpha = 0.01);

  // ---- elementwise binary (numpy broadcasting, jnp promotion)
  Value add(Value x, Value y);
  Value sub(Value x, Value y);
  Value mul(Value x, Value y);
  Value div(Value x, Value y);
  Value pow(Value x, Value y);
  Value max(Value x, Value y);
  Value min(Value x, Value y);
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
  Value dot_general(Value lhs, Value rhs, std::vector<int64_t> lhs_batch,
                    std::vector<int64_t> rhs_batch, std::vector<int64_t> lhs_contract,
                    std::vector<int64_t> rhs_contract,
                    std::optional<DType> preferred = std::nullopt);
  Value matmul(Value x, Value y);

  // ---- reductions
  Value reduce_sum(Value x, std::vector<int64_t> axes, bool keepdims = false);
  Value reduce_mean(Value x, std::vector<int64_t> axes, bool keepdims = false);
  Value reduce_max(Value x, std::vector<int64_t> axes, bool keepdims = false);
  Value reduce_min(Value x, std::vector<int64_t> axes, bool keepdims = false);
  Value reduce_prod(Value x, std::vector<int64_t> axes, bool keepdims = false);
  Value argmax(Value x, int64_t axis, bool keepdims = false, DType index_dtype = DType::i32);
  Value argmin(Value x, int64_t axis, bool keepdims = false, DType index_dtype = DType::i32);
  Value cumsum(Value x, int64_t axis, bool exclusive = false, bool reverse = false);

  // ---- shape ops
  Value reshape(Value x, std::vector<int64_t> shape);
  Value transpose(Value x, std::vector<int64_t> permutation);
  Value broadcast_in_dim(Value x, std::vector<int64_t> shape,
                         std::vector<int64_t> broadcast_dimensions);
  Value expand(Value x, std::vector<int64_t> shape);
  Value slice(Value x, std::vector<int64_t> start, std::vector<int64_t> limit,
              std::vector<int64_t> strides = {});
  Value concatenate(std::vector<Value> xs, int64_t dimension);
  Value pad(Value x, Value padding_value, std::vector<int64_t> low, std::vector<int64_t> high,
            std::vector<int64_t> interior = {});
  Value gather(Value x, Value indices, int64_t axis);
  Value take_along_axis(Value x, Value indices, int64_t axis);
  Value scatter_add(Value x, Value indices, Value updates, int64_t axis);
  Value reverse(Value x, std::vector<int64_t> axes);
  Value squeeze(Value x, std::vector<int64_t> axes);
  Value expand_dims(Value x, std::vector<int64_t> axes);
  Value unsqueeze(Value x, std::vector<int64_t> axes) { return expand_dims(x, std::move(axes)); }

  // ---- neural-network ops
  Value softmax(Value x, int64_t axis = -1);
  Value log_softmax(Value x, int64_t axis = -1);
  Value layer_norm(Value x, Value scale, Value bias, int64_t axis = -1, double eps = 1e-5);
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
  Value rope(Value x, Value cos, Value sin, std::string layout = "neox");
  Value conv(Value x, Value w, std::vector<int64_t> strides = {}, std::vector<int64_t> pad_low = {},
             std::vector<int64_t> pad_high = {}, std::vector<int64_t> dilation = {},
             int64_t groups = 1);
  Value max_pool(Value x, std::vector<int64_t> window, std::vector<int64_t> strides = {},
                 std::vector<int64_t> pad_low = {}, std::vector<int64_t> pad_high = {});
  Value avg_pool(Value x, std::vector<int64_t> window, std::vector<int64_t> strides = {},
                 std::vector<int64_t> pad_low = {}, std::vector<int64_t> pad_high = {},
                 bool count_include_pad = true);
  /// (values, indices) of the k largest along the last axis.
  std::pair<Value, Value> top_k(Value x, int64_t k);
  Value softmax_cross_entropy(Value logits, Value labels);

  // ---- fused forms
  Value fused_matmul_bias_act(Value x, Value w, Value bias, std::string activation = "none");
  /// (norm, x + residual)
  std::pair<Value, Value> fused_residual_layer_norm(Value x, Value residual, Value scale,
                                                    Value bias, int64_t axis = -1,
                                                    double eps = 1e-5);
  std::pair<Value, Value> fused_residual_rms_norm(Value x, Value residual, Value scale,
                                                  int64_t axis = -1, double eps = 1e-6);
  /// Applies `body` (a graph of elementwise ops whose inputs match `operands` in order and
  /// type) to broadcast operands; returns the body's outputs.
  std::vector<Value> elementwise_region(std::vector<Value> operands, Graph body);

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
