// Native CPU kernels: nn family (being written).
#include "../kernel.h"

namespace rlx::cpu {

void register_nn_kernels() {}

}  // namespace rlx::cpu
