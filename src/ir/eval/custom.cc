// Reference evaluation of custom_call: the registered custom op's reference kernel.
#include "eval.h"
#include "rlx/ir/custom_op.h"

namespace rlx::detail {
namespace {

std::vector<Tensor> eval_custom_call(const EvalContext& ctx) {
  return custom_op_of(ctx.node).reference(ctx.operands, ctx.attrs());
}

}  // namespace

void register_eval_custom() { set_eval(OpKind::CustomCall, eval_custom_call); }

}  // namespace rlx::detail
