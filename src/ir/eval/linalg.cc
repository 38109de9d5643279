// Reference kernels for linalg ops. (filled in by the op-family work)
#include "eval.h"

namespace rlx::detail {
void register_eval_linalg() {}
}  // namespace rlx::detail
