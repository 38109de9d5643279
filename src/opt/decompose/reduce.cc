// Decompositions of composite reduce ops. (filled in by the op-family work)
#include "decompose.h"

namespace rlx::detail {
void register_decompose_reduce() {}
}  // namespace rlx::detail
