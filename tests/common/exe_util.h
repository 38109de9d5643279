// Test helpers for suites that run compiled executables.
#pragma once

#include "rlx/runtime/executable.h"

namespace rlx::testing {

/// Binds every feed that names a param of `exe` with set_param and returns the others (the
/// run's inputs).
inline TensorMap bind_params(Executable& exe, const TensorMap& feeds) {
  TensorMap inputs;
  for (const auto& [name, t] : feeds) {
    bool is_param = false;
    for (const IoSpec& p : exe.params()) is_param = is_param || p.name == name;
    if (is_param)
      exe.set_param(name, t);
    else
      inputs.emplace(name, t);
  }
  return inputs;
}

}  // namespace rlx::testing
