// grad / value_and_grad / vjp API behaviour: outputs and types, and the errors on bad requests.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "rlx/autodiff/grad.h"
#include "rlx/ir/evaluator.h"

namespace rlx::autodiff {
namespace {

using rlx::testing::error_of;

// loss = sum(tanh(x @ w)), with an integer input and a non-scalar second output.
Graph small_graph() {
  Graph g("small");
  Value x = g.input("x", DType::f32, {2, 3});
  Value w = g.param("w", DType::f32, {3, 4});
  Value ids = g.input("ids", DType::i32, {2});
  Value y = g.tanh(g.matmul(x, w));
  g.set_outputs({g.reduce_sum(y, {0, 1}), y, g.convert(ids, DType::f32)});
  return g;
}

TEST(GradErrors, UnknownName) {
  EXPECT_EQ(error_of([] {
              grad(small_graph(), {"x", "nope"});
            }),
            "grad: no input or param named 'nope' in graph @small (inputs and params: x, ids, w)");
}

TEST(GradErrors, IntegerLeaf) {
  EXPECT_EQ(error_of([] { grad(small_graph(), {"ids"}); }),
            "grad: cannot differentiate with respect to 'ids' of type i32[2]: only float inputs "
            "and params have gradients");
}

TEST(GradErrors, NonScalarLoss) {
  std::string msg = error_of([] { grad(small_graph(), {"x"}, 1); });
  EXPECT_EQ(msg.rfind("grad: the loss must be a scalar float (rank 0), found f32[2,4]", 0), 0u)
      << msg;
  EXPECT_NE(error_of([] { value_and_grad(small_graph(), {"x"}, 2); }).find("found f32[2]"),
            std::string::npos);
}

TEST(GradErrors, BadOutputIndexAndDuplicateName) {
  EXPECT_EQ(error_of([] { grad(small_graph(), {"x"}, 3); }),
            "grad: loss output index 3 is out of range: graph @small has 3 outputs");
  EXPECT_EQ(error_of([] { grad(small_graph(), {"x", "x"}); }), "grad: 'x' appears twice in wrt");
  EXPECT_EQ(error_of([] {
              grad(small_graph(), {"x"}, Value{999, 0});
            }),
            "grad: the loss value %999#0 is not a value of graph @small");
}

TEST(Grad, OutputsAndTypes) {
  Graph g = small_graph();
  Graph dg = grad(g, {"w", "x"});
  ASSERT_EQ(dg.outputs().size(), 3u);
  EXPECT_EQ(dg.type(dg.outputs()[0]), (TensorType{DType::f32, {}}));
  EXPECT_EQ(dg.type(dg.outputs()[1]), (TensorType{DType::f32, {3, 4}}));
  EXPECT_EQ(dg.type(dg.outputs()[2]), (TensorType{DType::f32, {2, 3}}));
  // Inputs and params are kept with their names and kinds.
  EXPECT_EQ(dg.node(dg.find("w")).op, OpKind::Param);
  EXPECT_EQ(dg.node(dg.find("ids")).op, OpKind::Input);

  Graph vg = value_and_grad(g, {"x"});
  ASSERT_EQ(vg.outputs().size(), 4u);  // the 3 forward outputs, then d/dx
  TensorMap feeds{{"x", rlx::testing::random_tensor(DType::f32, {2, 3}, 1)},
                  {"w", rlx::testing::random_tensor(DType::f32, {3, 4}, 2)},
                  {"ids", Tensor::from_ints(DType::i32, {2}, std::vector<int64_t>{4, -1})}};
  std::vector<Tensor> fwd = evaluate(g, feeds), vr = evaluate(vg, feeds), dr = evaluate(dg, feeds);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(vr[i].bitwise_equal(fwd[i])) << i;
  EXPECT_TRUE(vr[3].bitwise_equal(dr[2]));
}

// A leaf the loss does not depend on gets zeros of its own type; the loss may be any value.
TEST(Grad, UnreachableLeafAndLossValue) {
  Graph g("g");
  Value x = g.input("x", DType::f16, {3});
  Value unused = g.param("unused", DType::bf16, {2});
  Value l = g.reduce_sum(g.mul(x, x), {0});
  g.set_outputs({x, unused});
  Graph dg = grad(g, {"x", "unused"}, l);
  TensorMap feeds{{"x", Tensor::from_doubles(DType::f16, {3}, std::vector<double>{1, -2, 0.5})},
                  {"unused", Tensor::full(DType::bf16, {2}, 1)}};
  std::vector<Tensor> r = evaluate(dg, feeds);
  EXPECT_EQ(r[1].dtype(), DType::f16);  // differentiated in the primal's own dtype
  EXPECT_EQ(r[1].get_f64(1), -4.0);
  EXPECT_EQ(r[2].type(), (TensorType{DType::bf16, {2}}));
  EXPECT_EQ(r[2].get_f64(0), 0.0);
}

TEST(Vjp, CotangentInputsPerFloatOutput) {
  Graph g = small_graph();
  Graph v = vjp(g, {"x"});
  EXPECT_GE(v.find("ct.0"), 0);
  EXPECT_GE(v.find("ct.1"), 0);
  EXPECT_GE(v.find("ct.2"), 0);  // convert(ids) is a float output (its cotangent reaches nothing)
  ASSERT_EQ(v.outputs().size(), 4u);
  // <ct, d out / dx> with ct.0 = 1 and ct.1 = ct.2 = 0 equals grad's d/dx.
  TensorMap feeds{{"x", rlx::testing::random_tensor(DType::f32, {2, 3}, 1)},
                  {"w", rlx::testing::random_tensor(DType::f32, {3, 4}, 2)},
                  {"ids", Tensor::from_ints(DType::i32, {2}, std::vector<int64_t>{1, 2})},
                  {"ct.0", Tensor::full(DType::f32, {}, 1)},
                  {"ct.1", Tensor::full(DType::f32, {2, 4}, 0)},
                  {"ct.2", Tensor::full(DType::f32, {2}, 0)}};
  std::vector<Tensor> a = evaluate(v, feeds);
  for (const char* ct : {"ct.0", "ct.1", "ct.2"}) feeds.erase(ct);
  std::vector<Tensor> b = evaluate(grad(g, {"x"}), feeds);
  EXPECT_TRUE(rlx::testing::all_close(a[3], b[1], 1e-6, 1e-7));
}

}  // namespace
}  // namespace rlx::autodiff
