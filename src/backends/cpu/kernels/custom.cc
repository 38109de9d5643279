// custom_call on the CPU: the custom op's registered CPU kernel on the node's buffers; an op
// without one runs its reference kernel (rlx/ir/custom_op.h; legalization already replaced the
// custom ops that have a decomposition but no CPU kernel).
#include <vector>

#include "../kernel.h"
#include "rlx/ir/custom_op.h"

namespace rlx::cpu {
namespace {

Kernel custom_call_kernel(const Graph& g, const Node& node) {
  const CustomOpDef& def = custom_op_of(node);
  if (!def.cpu_kernel) return {};  // declined: the executor runs the reference kernel
  std::vector<TensorType> operand_types;
  for (Value v : node.operands) operand_types.push_back(g.type(v));
  return [fn = def.cpu_kernel, operand_types, result_types = node.results,
          attrs = node.attrs](const KernelIO& io) {
    fn(CustomKernelIO{operand_types, result_types, io.in, io.out, attrs});
  };
}

}  // namespace

void register_custom_kernels() {
  register_native(OpKind::CustomCall, custom_call_kernel,
                  "a custom op registered without a CPU kernel runs its reference kernel");
}

}  // namespace rlx::cpu
