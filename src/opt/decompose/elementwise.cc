// Decompositions of composite elementwise ops. (filled in by the op-family work)
#include "decompose.h"

namespace rlx::detail {
void register_decompose_elementwise() {}
}  // namespace rlx::detail
