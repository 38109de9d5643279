// Reference kernels for elementwise ops. (filled in by the op-family work)
#include "eval.h"

namespace rlx::detail {
void register_eval_elementwise() {}
}  // namespace rlx::detail
