// Decompositions of composite fused ops. (filled in by the op-family work)
#include "decompose.h"

namespace rlx::detail {
void register_decompose_fused() {}
}  // namespace rlx::detail
