// Failed calls change nothing the caller owns, on the XLA backend (the CPU suite runs the same
// check, tests/common/failed_calls.h), and a graph planned beyond the memory limit is rejected
// before the plugin compiles it or any device buffer exists.
#include "common/failed_calls.h"

#include <gtest/gtest.h>

#include "common/test_util.h"
#include "pjrt_test_util.h"

namespace rlx::pjrt::testing {
namespace {

using rlx::testing::error_of;

CompileOptions always_f32() {
  CompileOptions o;
  o.precision = PrecisionPolicy{PrecisionMode::AlwaysF32, {}};
  return o;
}

TEST(PjrtFailedCalls, ChangeNothing) {
  RLX_REQUIRE_PJRT_PLUGIN();
  std::shared_ptr<Backend> b = test_backend();
  rlx::testing::expect_failed_calls_change_nothing(
      [&](const Graph& g, const CompileOptions& o) -> std::shared_ptr<Executable> {
        return b->compile(g, o, Device{DeviceKind::Pjrt, 0});
      },
      always_f32(), b->supported_ops(), "pjrt", 1e-5);
}

TEST(PjrtFailedCalls, TerabyteGraphIsRejectedAtCompile) {
  RLX_REQUIRE_PJRT_PLUGIN();
  const int64_t m = int64_t{1} << 20;
  Graph g("tera");
  g.set_outputs({g.tanh(g.exp(g.input("x", DType::f32, Shape{m, m})))});
  std::string msg = error_of([&] {
    test_backend()->compile(g, always_f32(), Device{DeviceKind::Pjrt, 0});
  });
  EXPECT_EQ(msg.rfind("pjrt backend: planned memory ", 0), 0u) << msg;
  EXPECT_NE(msg.find("outputs 4194304.0 MiB; "), std::string::npos) << msg;
  EXPECT_NE(msg.find("physical memory; RLX_MEMORY_LIMIT sets another)"), std::string::npos) << msg;
}

}  // namespace
}  // namespace rlx::pjrt::testing
