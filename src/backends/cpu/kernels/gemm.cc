// Native CPU kernels: gemm family (being written).
#include "../kernel.h"

namespace rlx::cpu {

void register_gemm_kernels() {}

}  // namespace rlx::cpu
