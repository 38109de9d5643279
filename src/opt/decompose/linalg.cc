// Decompositions of composite linalg ops. (filled in by the op-family work)
#include "decompose.h"

namespace rlx::detail {
void register_decompose_linalg() {}
}  // namespace rlx::detail
