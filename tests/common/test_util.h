// Test helpers shared by the ir and opt suites: seeded random tensors and tolerance checks.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <string>

#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/tensor.h"

namespace rlx::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
/// Built with ASan or TSan (scripts/sanitize.sh): shadow memory and ASan's quarantine of freed
/// blocks grow the RSS by design, so tests that bound it skip (LeakSanitizer checks leaks).
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

/// Resident set size of this process in bytes (resident pages of /proc/self/statm); -1 when
/// it cannot be read.
inline int64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = -1;
  statm >> pages >> resident;
  return resident < 0 ? -1 : resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

/// The message of the rlx::Error that `fn` throws, or "" when it throws nothing.
template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

/// Sets (value != nullptr) or unsets environment variable `name` for its lifetime, restoring
/// the previous state on destruction.
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name); old != nullptr) old_ = old;
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~EnvGuard() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

/// Uniform random values in [lo, hi) (integers: rounded), converted to `dtype`.
inline Tensor random_tensor(DType dtype, Shape shape, uint64_t seed, double lo = -2.0,
                            double hi = 2.0) {
  Tensor t(dtype, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = dist(rng);
    if (is_float(dtype))
      t.set_f64(i, v);
    else if (is_bool(dtype))
      t.set_i64(i, v > (lo + hi) / 2);
    else
      t.set_i64(i, static_cast<int64_t>(std::floor(v)));
  }
  return t;
}

/// Per-dtype tolerances used when two computations of the same math are compared (a few ulp
/// of the dtype). The golden suite has its own table with the same rtol values and an atol
/// (tests/golden/golden_test.cc).
inline double default_rtol(DType t) {
  switch (t) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 2e-6;
    case DType::f16:
      return 2e-3;
    case DType::bf16:
      return 1.6e-2;
    default:
      return 0;
  }
}

/// |a - b| <= atol + rtol * |b| elementwise; NaN matches NaN, inf matches the same inf.
inline ::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double rtol,
                                            double atol) {
  if (a.type() != b.type())
    return ::testing::AssertionFailure()
           << "type " << a.type().to_string() << " vs " << b.type().to_string();
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.get_f64(i), y = b.get_f64(i);
    if (!is_float(a.dtype())) {
      if (a.get_i64(i) != b.get_i64(i))
        return ::testing::AssertionFailure()
               << "element " << i << ": " << a.get_i64(i) << " vs " << b.get_i64(i);
      continue;
    }
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y))
        return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs " << y;
      continue;
    }
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y)
        return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs " << y;
      continue;
    }
    if (std::fabs(x - y) > atol + rtol * std::fabs(y))
      return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs " << y
                                           << " (rtol " << rtol << ", atol " << atol << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace rlx::testing
