// Reference kernels for leaf ops: constant, iota.
#include "eval.h"

namespace rlx::detail {
namespace {

std::vector<Tensor> eval_constant(const EvalContext& ctx) {
  return {ctx.attrs().get_tensor("value")};
}

std::vector<Tensor> eval_iota(const EvalContext& ctx) {
  const TensorType& t = ctx.result_type();
  Tensor out(t.dtype, t.shape);
  int dim = static_cast<int>(ctx.attrs().get_int("dimension"));
  for (int64_t i = 0; i < out.numel(); ++i)
    out.set_i64(i, unravel(i, t.shape)[static_cast<size_t>(dim)]);
  return {out};
}

}  // namespace

void register_eval_leaf() {
  set_eval(OpKind::Constant, eval_constant);
  set_eval(OpKind::Iota, eval_iota);
}

}  // namespace rlx::detail
