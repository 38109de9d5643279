// Shorthands shared by the op-case family files.
#pragma once

#include "../op_case.h"

namespace rlx::testing::cases {

using Ints = std::vector<int64_t>;

/// Cases that only the CPU sweep (and the cheap text round trip) runs: large and odd sizes.
inline constexpr uint32_t kSizedSuites = kCpuSuite | kTextSuite;
inline constexpr const char* kSizedWhy =
    "sizes for the CPU kernels' vector tails and thread splits; the other suites run the "
    "small cases of the op";
/// Every suite but the PJRT round trip, for cases with special values.
inline constexpr uint32_t kNoPjrt = kAllSuites & ~kPjrtSuite;
inline constexpr const char* kSpecialsWhy =
    "NaN / inf / 1e30 inputs: XLA's fast f32 approximations are not pinned there (the CPU and "
    "Python suites check the evaluator at special values)";

}  // namespace rlx::testing::cases
