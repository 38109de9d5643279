// Native CPU kernels: reduce family (being written).
#include "../kernel.h"

namespace rlx::cpu {

void register_reduce_kernels() {}

}  // namespace rlx::cpu
