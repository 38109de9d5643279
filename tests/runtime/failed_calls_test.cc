// Failed calls change nothing the caller owns, on the CPU backend: every argument error of
// run / run_typed / set_param / set_param_typed and compile errors through a Session and a
// direct Backend::compile (tests/common/failed_calls.h; the PJRT suite runs the same check).
#include "common/failed_calls.h"

#include <gtest/gtest.h>

#include "common/test_util.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

TEST(FailedCalls, CpuSessionChangesNothing) {
  testing::EnvGuard limit("RLX_MEMORY_LIMIT", nullptr);
  Session session(Device::cpu(), SessionOptions{.cache_capacity = 0});
  testing::expect_failed_calls_change_nothing(
      [&](const Graph& g, const CompileOptions& o) { return session.compile(g, o); }, {},
      session.backend().supported_ops(), "cpu", 1e-5);
}

TEST(FailedCalls, CpuBackendChangesNothing) {
  std::shared_ptr<Backend> cpu = backend_for(DeviceKind::Cpu);
  testing::expect_failed_calls_change_nothing(
      [&](const Graph& g, const CompileOptions& o) -> std::shared_ptr<Executable> {
        return cpu->compile(g, o, Device::cpu());
      },
      {}, cpu->supported_ops(), "cpu", 1e-5);
}

}  // namespace
}  // namespace rlx
