// The kernel factory table and the reference-evaluator fallback kernel.
#include <array>
#include <cstring>

#include "kernel.h"
#include "rlx/ir/evaluator.h"

namespace rlx::cpu {
namespace {

std::array<KernelFactory, kNumOps>& table() {
  static std::array<KernelFactory, kNumOps> t{};
  return t;
}

}  // namespace

void set_kernel_factory(OpKind op, KernelFactory factory) {
  table()[static_cast<size_t>(op)] = factory;
}

KernelFactory kernel_factory(OpKind op) { return table()[static_cast<size_t>(op)]; }

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
