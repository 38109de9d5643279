// Native CPU kernels: elementwise family (being written).
#include "../kernel.h"

namespace rlx::cpu {

void register_elementwise_kernels() {}

}  // namespace rlx::cpu
