// Reference kernels for conv ops. (filled in by the op-family work)
#include "eval.h"

namespace rlx::detail {
void register_eval_conv() {}
}  // namespace rlx::detail
