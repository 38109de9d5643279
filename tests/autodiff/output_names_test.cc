// The names transforms give their outputs (grad.h, "Output names"): what Executable::outputs()
// and Python's exe.outputs report instead of node numbers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/test_util.h"
#include "rlx/autodiff/grad.h"

namespace rlx::autodiff {
namespace {

using rlx::testing::error_of;

std::vector<std::string> output_names(const Graph& g) {
  std::vector<std::string> out;
  for (Value v : g.outputs()) out.push_back(g.node(v).name);
  return out;
}

// loss = sum(tanh(x @ w)) (builder-numbered), and y = tanh(x @ w) as a second output.
Graph forward() {
  Graph g("f");
  Value x = g.input("x", DType::f32, {2, 3});
  Value w = g.param("w", DType::f32, {3, 4});
  Value y = g.tanh(g.matmul(x, w));
  g.set_outputs({g.reduce_sum(y, {0, 1}), y});
  return g;
}

using Names = std::vector<std::string>;

TEST(OutputNames, EachTransformNamesWhatItAdds) {
  EXPECT_EQ(output_names(grad(forward(), {"w", "x"})), (Names{"loss", "grad_w", "grad_x"}));
  EXPECT_EQ(output_names(value_and_grad(forward(), {"w"})), (Names{"loss", "out_1", "grad_w"}));
  EXPECT_EQ(output_names(vjp(forward(), {"x"})), (Names{"out_0", "out_1", "vjp_x"}));
  EXPECT_EQ(output_names(jvp(forward(), {"x"})), (Names{"out_0", "out_1", "jvp_0", "jvp_1"}));
  EXPECT_EQ(output_names(hvp(forward(), {"w"})), (Names{"loss", "hvp_w"}));
}

TEST(OutputNames, UserNamesLeavesAndTakenNames) {
  Graph g("u");
  Value x = g.input("x", DType::f32, {});
  Value loss_input = g.input("loss", DType::f32, {});  // takes the name "loss"
  g.set_outputs({g.emit1(OpKind::Mul, {x, loss_input}, {}, "total")});
  // A name the user gave is kept; a taken name gets a suffix.
  EXPECT_EQ(output_names(grad(g, {"x", "loss"})), (Names{"total", "grad_x", "grad_loss"}));
  Graph h("v");
  Value a = h.input("a", DType::f32, {});
  Value b = h.input("b", DType::f32, {});
  h.set_outputs({h.mul(h.add(a, b), h.scalar(2, DType::f32))});
  Graph named = grad(h, {"a"});
  EXPECT_EQ(output_names(named)[0], "loss");
  Graph again = value_and_grad(named, {"b"});  // "loss" is now taken by a node that is kept
  EXPECT_EQ(output_names(again), (Names{"loss", "grad_a", "grad_b"}));
  // An input returned as is keeps its feed name.
  Graph id("id");
  Value s = id.input("s", DType::f32, {});
  id.set_outputs({s});
  EXPECT_EQ(output_names(grad(id, {"s"}))[0], "s");
}

TEST(GraphRename, RenamesNonLeafNodes) {
  Graph g("r");
  Value x = g.input("x", DType::f32, {2});
  Value e = g.exp(x);
  Value t = g.tanh(x);
  EXPECT_EQ(g.rename(e.node, "y"), "y");
  EXPECT_EQ(g.find("y"), e.node);
  EXPECT_EQ(g.rename(t.node, "y"), "y_1");  // taken: suffixed as emit() does
  EXPECT_EQ(g.rename(e.node, "y"), "y");    // its own name
  EXPECT_EQ(error_of([&] { g.rename(x.node, "z"); }),
            "rename: node %x is an input, whose name is its feed name");
  EXPECT_EQ(error_of([&] { g.rename(99, "z"); }),
            "rename: node id 99 is out of range: graph @r has 3 nodes");
  EXPECT_NE(error_of([&] { g.rename(e.node, "bad name"); }), "");
  EXPECT_TRUE(g.verify().empty());
  EXPECT_EQ(Graph::parse(g.to_string()), g);
}

}  // namespace
}  // namespace rlx::autodiff
