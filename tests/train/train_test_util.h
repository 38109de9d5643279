// Shared by the train tests: the tolerances (stated once), an f32 tensor helper, an error check.
#pragma once

#include <string>
#include <vector>

#include "common/test_util.h"
#include "rlx/ir/error.h"
#include "rlx/ir/tensor.h"

namespace rlx::testing {

/// f32 results of a few optimizer steps or a loss/gradient vs a float64 reference (PyTorch or
/// host double arithmetic): a few f32 ulps per op over ~20 ops, plus an absolute floor for
/// values that pass near zero (e.g. -0.062 after SGD with momentum).
inline constexpr double kTrainRtol = 1e-5;
inline constexpr double kTrainAtol = 1e-6;

/// An f32 tensor of `shape` with the values `v` (row-major).
inline Tensor f32(Shape shape, std::vector<double> v) {
  return Tensor::from_doubles(DType::f32, std::move(shape), v);
}

/// Asserts that `f` throws an rlx::Error whose message contains every string of `parts`.
template <class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected an rlx::Error";
  } catch (const Error& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << p << "' not in: " << e.what();
  }
}

}  // namespace rlx::testing
