// The CPU kernel table, the choice of a node's kernel and the reference-evaluator fallback.
#include <cstring>

#include "kernel.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"

namespace rlx::cpu {
namespace {

OpTable<KernelEntry>& table() {
  static OpTable<KernelEntry> t("cpu kernel table", [](OpTable<KernelEntry>&) {
    register_elementwise_kernels();
    register_gemm_kernels();
    register_nn_kernels();
    register_reduce_kernels();
    register_shape_kernels();
    register_quant_kernels();
    register_random_kernels();
    register_collective_kernels();
    register_control_flow_kernels();
    register_custom_kernels();
  });
  return t;
}

}  // namespace

void register_kernel(OpKind op, KernelEntry entry) {
  check(entry.fallback.empty() == (entry.native == op_info(op).dtypes),
        "cpu kernel table: op '" + std::string(op_name(op)) +
            "' must state a fallback reason exactly when some dtype of its class is not native");
  table().set(op, std::move(entry));
}

const OpTable<KernelEntry>& kernel_table() { return table(); }

KernelChoice choose_kernel(const Graph& g, const Node& node, const BodyCompiler* bodies) {
  const KernelEntry* e = kernel_table().find(node.op);
  check(e != nullptr, "cpu backend: no kernel table entry for op '" +
                          std::string(op_name(node.op)) + "' (node %" + node.name + ")");
  if (e->region != nullptr) {
    check(bodies != nullptr, "cpu backend: op '" + std::string(op_name(node.op)) + "' (node %" +
                                 node.name + ") needs a body compiler");
    RegionKernel k = e->region(g, node, *bodies);
    return {std::move(k.kernel), true, "", k.scratch_bytes, std::move(k.bodies)};
  }
  if (e->factory != nullptr && e->native.contains(g.class_dtype(node))) {
    if (Kernel k = e->factory(g, node)) return {std::move(k), true, ""};
    return {reference_kernel(g, node), false,
            e->declines.empty() ? "UNDECLARED: the native kernel declined the node" : e->declines};
  }
  return {reference_kernel(g, node), false, e->fallback};
}

Kernel reference_kernel(const Graph& g, const Node& node) {
  std::vector<TensorType> operand_types;
  for (Value v : node.operands) operand_types.push_back(g.type(v));
  return [op = node.op, attrs = node.attrs, operand_types,
          results = node.results](const KernelIO& io) {
    std::vector<Tensor> operands;
    operands.reserve(operand_types.size());
    for (size_t i = 0; i < operand_types.size(); ++i)
      operands.push_back(Tensor::borrow(operand_types[i].dtype, operand_types[i].shape, io.in[i]));
    std::vector<Tensor> outs = evaluate_op(op, operands, attrs);
    for (size_t i = 0; i < results.size(); ++i)
      std::memcpy(io.out[i], outs[i].data(), outs[i].nbytes());
  };
}

}  // namespace rlx::cpu
