// Test helper for Highway kernels: runs a check once per x86 target the CPU backend compiles.
#pragma once

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cstdint>

namespace rlx::testing {

/// Calls fn(target) for each Highway target rlx's kernels are compiled for (AVX-512, AVX2 and the
/// portable scalar fallback of older CPUs) that this CPU runs, each forced in turn through
/// Highway's target mock (so HWY_DYNAMIC_DISPATCH picks it) under a SCOPED_TRACE of its name;
/// restores the normal choice afterwards.
template <class F>
void for_each_hwy_target(F&& fn) {
  const int64_t supported = hwy::SupportedTargets();
  for (int64_t target : {int64_t{HWY_AVX3}, int64_t{HWY_AVX2}, int64_t{HWY_SCALAR}}) {
    if (target != HWY_SCALAR && (supported & target) == 0) continue;
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    hwy::GetChosenTarget().Update(hwy::SupportedTargets());
    fn(target);
  }
  hwy::SetSupportedTargetsForTest(0);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

}  // namespace rlx::testing
