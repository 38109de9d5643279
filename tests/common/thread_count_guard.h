// Restores the pool size a test changed (rlx::set_num_threads), also when an assertion ends
// the test early.
#pragma once

#include "rlx/runtime/threading.h"

namespace rlx::testing {

class ThreadCountGuard {
 public:
  ThreadCountGuard() : saved_(num_threads()) {}
  ~ThreadCountGuard() { set_num_threads(saved_); }
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int saved_;
};

}  // namespace rlx::testing
