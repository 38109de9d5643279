// Fused ops: schemas, shape/dtype inference and builder methods. (filled in by the op-family work)
#include "registry.h"
#include "rlx/ir/graph.h"

namespace rlx::detail {
void register_fused_ops() {}
}  // namespace rlx::detail
