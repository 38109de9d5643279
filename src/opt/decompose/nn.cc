// Decompositions of composite nn ops. (filled in by the op-family work)
#include "decompose.h"

namespace rlx::detail {
void register_decompose_nn() {}
}  // namespace rlx::detail
