// Shared helpers of the PJRT tests: the plugin under test, tolerances, comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/backend.h"

namespace rlx::pjrt::testing {

/// The plugin under test: RLX_PJRT_PLUGIN, else the one CMake found (lammps-jax-pjrt-cpu).
inline std::string test_plugin() {
  if (const char* env = std::getenv("RLX_PJRT_PLUGIN"); env != nullptr && *env != '\0') return env;
  return RLX_PJRT_DEFAULT_PLUGIN;
}

/// Uniform [-1, 1) f32 values (seeded) for every input and param of the f32 graph `g`, by name.
inline TensorMap random_feeds(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  TensorMap m;
  for (const std::vector<int32_t>& leaves : {g.inputs(), g.params()})
    for (int32_t id : leaves) {
      const Node& n = g.node(id);
      Tensor t(n.results[0].dtype, n.results[0].shape);
      for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = u(rng);
      m.emplace(n.name, std::move(t));
    }
  return m;
}

/// Skips the test with a clear message when no plugin is available.
#define RLX_REQUIRE_PJRT_PLUGIN()                                           \
  do {                                                                      \
    if (::rlx::pjrt::testing::test_plugin().empty())                        \
      GTEST_SKIP() << "no PJRT plugin: set RLX_PJRT_PLUGIN or pip install " \
                      "lammps-jax-pjrt-cpu and re-run cmake";               \
  } while (0)

/// One backend (one client) for the whole test binary.
inline std::shared_ptr<Backend> test_backend() {
  static std::shared_ptr<Backend> backend = make_pjrt_backend(test_plugin());
  return backend;
}

/// Options that keep every op in f32 (PJRT's default policy is AutoMixedBf16).
inline CompileOptions f32_options() {
  CompileOptions o;
  o.precision = PrecisionPolicy{PrecisionMode::AlwaysF32, {}};
  return o;
}

/// Tolerances, in one place. AlwaysF32: XLA's f32 kernels vs the reference evaluator (which
/// computes in double then rounds) differ by a few ulp per op, more for transcendentals
/// (XLA's fast polynomial approximations): |d| <= atol + rtol * |ref|.
struct Tolerance {
  double atol, rtol;
};
inline constexpr Tolerance kF32Tol{1e-5, 1e-5};
/// Transcendental approximations of XLA CPU (exp/log/tanh/erf/...): a few ulp of f32.
inline constexpr Tolerance kF32TranscendentalTol{1e-5, 3e-5};
/// An encoder layer in f32 (sums over hundreds of terms, two layer norms).
inline constexpr Tolerance kF32LayerTol{2e-4, 2e-4};
/// AutoMixedBf16: matmul operands rounded to bf16 (8 significant bits, rel. error 2^-9 each);
/// through an encoder layer with layer norms that gives errors of order 1e-2 on O(1) outputs.
inline constexpr Tolerance kBf16LayerTol{5e-2, 5e-2};

/// Largest |a - b| and whether every element is within `tol` (NaN == NaN, inf == inf).
inline ::testing::AssertionResult all_close(const Tensor& got, const Tensor& want, Tolerance tol,
                                            double* max_err = nullptr) {
  if (got.type() != want.type())
    return ::testing::AssertionFailure()
           << "type " << got.type().to_string() << " vs " << want.type().to_string();
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double a = got.get_f64(i), b = want.get_f64(i);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (a == b) continue;
    double d = std::fabs(a - b);
    if (!(d <= tol.atol + tol.rtol * std::fabs(b)))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << a << ", want " << b << " (|d| = " << d << ")";
    worst = std::max(worst, d);
  }
  if (max_err) *max_err = worst;
  return ::testing::AssertionSuccess();
}

}  // namespace rlx::pjrt::testing
