// vjp rule of custom_call: the custom op's registered vjp rule (rlx/ir/custom_op.h). A custom op
// without one but with a decomposition never reaches it: grad differentiates the decomposition.
#include "rlx/ir/custom_op.h"
#include "rlx/ir/error.h"
#include "rules.h"

namespace rlx::autodiff::detail {
namespace {

std::vector<Value> vjp_custom_call(VjpContext& ctx) {
  const CustomOpDef& def = custom_op_of(ctx.node);
  check(static_cast<bool>(def.vjp), "grad: custom op '" + def.name + "' (node %" + ctx.node.name +
                                        ") has no vjp rule and no decomposition to differentiate");
  std::vector<Value> cts;
  for (size_t i = 0; i < ctx.results.size(); ++i) cts.push_back(ctx.ct(i));
  return def.vjp(ctx.g, ctx.node, ctx.operands, ctx.results, cts);
}

}  // namespace

void register_vjp_custom() { set_vjp(OpKind::CustomCall, vjp_custom_call); }

}  // namespace rlx::autodiff::detail
