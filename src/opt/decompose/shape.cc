// Decompositions of composite shape ops. (filled in by the op-family work)
#include "decompose.h"

namespace rlx::detail {
void register_decompose_shape() {}
}  // namespace rlx::detail
