#include <gtest/gtest.h>

#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

TEST(CpuSmoke, RunsAGraph) {
  Graph g("mlp");
  Value x = g.input("x", DType::f32, Shape{4, 8});
  Value w = g.param("w", DType::f32, Shape{8, 16});
  g.set_outputs({g.softmax(g.gelu(g.matmul(x, w)), -1)});
  Session s;
  auto exe = s.compile(g);
  Tensor xt = Tensor::full(DType::f32, Shape{4, 8}, 0.5), wt = Tensor::full(DType::f32, Shape{8, 16}, 0.25);
  exe->set_param("w", wt);
  auto out = exe->run({{"x", xt}});
  auto ref = evaluate(g, {{"x", xt}, {"w", wt}});
  ASSERT_EQ(out.size(), 1u);
  for (int64_t i = 0; i < out[0].numel(); ++i) EXPECT_NEAR(out[0].get_f64(i), ref[0].get_f64(i), 1e-6);
  std::cout << exe->kernel_report();
}

}  // namespace
}  // namespace rlx
