// Allocation counting for the CPU backend's tests: rlx_cpu_tests replaces the global operator
// new and delete (alloc_count.cc) with versions that count every operator new of the process
// while counting is on. Not under a sanitizer, which has its own operator new and delete (and
// checks them): there counting is off and tests that need it skip.
#pragma once

#include <cstdint>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RLX_COUNT_ALLOCATIONS 0
#else
#define RLX_COUNT_ALLOCATIONS 1
#endif

namespace rlx::testing {

/// Starts counting operator new calls of every thread from zero.
void start_counting_allocations();
/// Stops counting; returns the calls since start_counting_allocations (0 when
/// RLX_COUNT_ALLOCATIONS is 0).
int64_t stop_counting_allocations();

/// The operator new calls of one call of `fn` (0 when RLX_COUNT_ALLOCATIONS is 0).
template <class F>
int64_t allocations_of(F&& fn) {
  start_counting_allocations();
  fn();
  return stop_counting_allocations();
}

}  // namespace rlx::testing
