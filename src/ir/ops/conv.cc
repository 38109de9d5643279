// Conv ops: schemas, shape/dtype inference. (filled in by the op-family work)
#include "registry.h"

namespace rlx::detail {
void register_conv_ops() {}
}  // namespace rlx::detail
