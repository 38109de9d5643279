// Custom ops on XLA (through PJRT): a custom op runs as its decomposition, equal to the
// reference evaluator on the XLA CPU plugin; one without a decomposition fails to compile with
// an error naming it. The test ops are tests/ops/cases/custom.cc.
#include "rlx/ir/custom_op.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "ops/op_case.h"
#include "pjrt_test_util.h"

namespace rlx::pjrt {
namespace {

using testing::f32_options;
using testing::test_backend;

TEST(PjrtCustomOp, RunsTheDecomposition) {
  RLX_REQUIRE_PJRT_PLUGIN();
  rlx::testing::register_test_custom_ops();
  Graph g("c");
  Value x = g.input("x", DType::f32, {6, 7});
  AttrMap a;
  a.set("beta", 0.5);
  Value sp = custom_call(g, "test.softplus", {x}, a)[0];
  std::vector<Value> sc = custom_call(g, "test.sincos", {sp});
  g.set_outputs({sp, sc[0], sc[1]});
  TensorMap feeds{{"x", rlx::testing::random_tensor(DType::f32, {6, 7}, 11, -6.0, 6.0)}};
  auto exe = test_backend()->compile(g, f32_options(), Device::parse("pjrt:0"));
  EXPECT_EQ(exe->dispatch_report().at(OpKind::CustomCall).decomposed, 2);
  std::vector<Tensor> got = exe->run(feeds), want = evaluate(g, feeds);
  for (size_t o = 0; o < want.size(); ++o)
    for (int64_t i = 0; i < want[o].numel(); ++i)
      EXPECT_NEAR(got[o].get_f64(i), want[o].get_f64(i), 2e-6 * (1 + std::fabs(want[o].get_f64(i))))
          << "output " << o << " element " << i;
}

TEST(PjrtCustomOp, WithoutDecompositionTheErrorNamesTheOp) {
  RLX_REQUIRE_PJRT_PLUGIN();
  rlx::testing::register_test_custom_ops();
  Graph g("c");
  Value x = g.input("x", DType::f32, {3});
  g.set_outputs({custom_call(g, "test.host_cube", {x}, {}, "cube")[0]});
  std::string err = rlx::testing::error_of(
      [&] { test_backend()->compile(g, f32_options(), Device::parse("pjrt:0")); });
  EXPECT_NE(err.find("custom op 'test.host_cube' (node %cube) has no decomposition: it cannot "
                     "run on backend 'pjrt"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace rlx::pjrt
