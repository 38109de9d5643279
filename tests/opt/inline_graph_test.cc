// inline_graph (rlx/opt/decompose.h): a region's nodes emitted into another graph with its
// inputs bound by position, and its errors.
#include <gtest/gtest.h>

#include <vector>

#include "../common/test_util.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/decompose.h"

namespace rlx {
namespace {

TEST(InlineGraph, BindsInputsByPositionAndReturnsOutputs) {
  Graph body("body");
  Value a = body.input("a", DType::f32, {2});
  Value b = body.input("b", DType::f32, {2});
  body.set_outputs({body.sub(a, b), body.mul(a, body.scalar(2, DType::f32))});
  Graph g("g");
  Value x = g.input("x", DType::f32, {2});
  Value y = g.input("y", DType::f32, {2});
  std::vector<Value> out = inline_graph(g, body, std::vector<Value>{y, x});  // a = y, b = x
  g.set_outputs(out);
  auto r = evaluate(g, {{"x", Tensor::from_doubles(DType::f32, {2}, std::vector<double>{1, 2})},
                        {"y", Tensor::from_doubles(DType::f32, {2}, std::vector<double>{5, 7})}});
  EXPECT_EQ(r[0].get_f64(0), 4);
  EXPECT_EQ(r[0].get_f64(1), 5);
  EXPECT_EQ(r[1].get_f64(1), 14);
}

TEST(InlineGraph, Errors) {
  Graph body("body");
  Value a = body.input("a", DType::f32, {2});
  Value w = body.param("w", DType::f32, {2});
  body.set_outputs({body.add(a, w)});
  Graph g("g");
  Value x = g.input("x", DType::f32, {2});
  EXPECT_EQ(testing::error_of([&] {
              inline_graph(g, body, std::vector<Value>{x, x});
            }),
            "inline_graph: graph @body has 1 inputs, given 2");
  EXPECT_EQ(testing::error_of([&] { inline_graph(g, body, std::vector<Value>{x}); }),
            "inline_graph: graph @body holds param %w");
}

}  // namespace
}  // namespace rlx
