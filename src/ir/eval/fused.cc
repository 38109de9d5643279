// Reference kernels for fused ops. (filled in by the op-family work)
#include "eval.h"

namespace rlx::detail {
void register_eval_fused() {}
}  // namespace rlx::detail
