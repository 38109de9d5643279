// Internal: the reference evaluator's kernel table and the helpers its families share.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rlx/ir/evaluator.h"
#include "rlx/ir/scalar_ops.h"  // the scalar semantics every family computes with

namespace rlx::detail {

/// What an evaluator kernel sees: the node (attrs, result types) and its operand values.
struct EvalContext {
  const Node& node;
  std::span<const Tensor> operands;
  const AttrMap& attrs() const { return node.attrs; }
  const TensorType& result_type(size_t i = 0) const { return node.results[i]; }
};

/// Computes the results of one node; result dtypes/shapes must equal node.results.
using EvalFn = std::vector<Tensor> (*)(const EvalContext& ctx);

/// attention's reference (eval/nn.cc): q [B,Hq,Sq,D], k [B,Hkv,Sk,D], v [B,Hkv,Sk,Dv], the
/// mask tensor (or null) and attention's attributes -> [B,Hq,Sq,Dv] in q's dtype, computed in f64.
Tensor attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask,
                           const AttrMap& attrs);

/// Registers `fn` for `op` (called from the register_eval_*() functions).
void set_eval(OpKind op, EvalFn fn);

// One per family file in src/ir/eval/.
void register_eval_leaf();
void register_eval_elementwise();
void register_eval_linalg();
void register_eval_reduce();
void register_eval_shape();
void register_eval_nn();
void register_eval_conv();
void register_eval_fused();
void register_eval_quant();
void register_eval_random();
void register_eval_control_flow();
void register_eval_collective();
void register_eval_custom();

/// One collective node evaluated over a simulated device axis: `per_device[d]` is device d's
/// operand, the result device d's. Throws rlx::Error naming the op and node when its
/// replica_groups do not cover exactly the devices 0..per_device.size()-1.
std::vector<Tensor> eval_collective(const Node& n, std::span<const Tensor> per_device);
/// The results of collective `n` for one group's members in rank order (xs[r]: rank r's operand).
std::vector<Tensor> group_results(const Node& n, const std::vector<Tensor>& xs);

/// Multi-index helpers for naive loops over row-major tensors.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape);
int64_t ravel(std::span<const int64_t> index, const Shape& shape);
/// Product of dims [begin, end) of `shape` (1 for an empty range). Kernels only run for
/// non-empty results (see run_node), so a product of their dims cannot overflow.
int64_t dims_product(const Shape& shape, int begin, int end);

// The "activation" attribute of fused_matmul_bias_act and quant_matmul ("none", "relu", "gelu",
// "gelu_tanh", "silu") applied to v with the scalar functions of the activation ops (fused.cc).
double apply_activation(const std::string& act, double v);

}  // namespace rlx::detail
