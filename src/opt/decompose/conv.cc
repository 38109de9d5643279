// Decompositions of composite conv ops. (filled in by the op-family work)
#include "decompose.h"

namespace rlx::detail {
void register_decompose_conv() {}
}  // namespace rlx::detail
