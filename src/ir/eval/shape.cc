// Reference kernels for shape ops. (filled in by the op-family work)
#include "eval.h"

namespace rlx::detail {
void register_eval_shape() {}
}  // namespace rlx::detail
