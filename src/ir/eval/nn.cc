// Reference kernels for nn ops. (filled in by the op-family work)
#include "eval.h"

namespace rlx::detail {
void register_eval_nn() {}
}  // namespace rlx::detail
