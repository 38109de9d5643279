// rewrite() (rlx/opt/rewrite.h): copying, node replacement, leaf replacement and the type checks
// that keep a rewrite from changing what a graph computes, checked on the evaluator.
#include "rlx/opt/rewrite.h"

#include <gtest/gtest.h>

#include "../common/test_util.h"
#include "rlx/ir/evaluator.h"

namespace rlx {
namespace {

using testing::error_of;

// y = x * 2 + p over f32[4].
Graph scaled_sum() {
  Graph g("g");
  Value x = g.input("x", DType::f32, {4});
  Value p = g.param("p", DType::f32, {4});
  g.set_outputs({g.add(g.mul(x, g.constant(Tensor::full(DType::f32, {4}, 2.0))), p)});
  return g;
}

TEST(Rewrite, LeafFnReplacesAParamWithAnyValueOfItsType) {
  Graph g = scaled_sum();
  // p becomes an f16 param converted back to f32: the declared type is kept downstream.
  Graph r = rewrite(g, {}, nullptr, [](Graph& dst, const Node& n) -> std::optional<Value> {
    if (n.name != "p") return std::nullopt;
    return dst.convert(dst.param("p", DType::f16, {4}), DType::f32);
  });
  EXPECT_EQ(r.type(Value{r.params()[0], 0}).to_string(), "f16[4]");
  const std::vector<double> xs = {1, 2, 3, 4}, ps = {0.5, -1, 8, 0};
  std::vector<Tensor> out = evaluate(r, {{"x", Tensor::from_doubles(DType::f32, {4}, xs)},
                                         {"p", Tensor::from_doubles(DType::f16, {4}, ps)}});
  ASSERT_EQ(out.size(), 1u);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(out[0].get_f64(i), xs[i] * 2 + ps[i]) << i;
}

TEST(Rewrite, LeafFnOfAnotherTypeIsAnError) {
  Graph g = scaled_sum();
  EXPECT_EQ(error_of([&] {
              rewrite(g, {}, nullptr, [](Graph& dst, const Node& n) -> std::optional<Value> {
                if (n.name != "p") return std::nullopt;
                return dst.param("p", DType::f16, {4});
              });
            }),
            "rewrite of leaf %p replaced its type f32[4] with f16[4]");
}

}  // namespace
}  // namespace rlx
