// Reference kernels for reduce ops. (filled in by the op-family work)
#include "eval.h"

namespace rlx::detail {
void register_eval_reduce() {}
}  // namespace rlx::detail
