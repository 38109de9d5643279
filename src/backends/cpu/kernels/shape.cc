// Native CPU kernels: shape family (being written).
#include "../kernel.h"

namespace rlx::cpu {

void register_shape_kernels() {}

}  // namespace rlx::cpu
