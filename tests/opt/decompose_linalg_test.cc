// matmul == its decomposition (reshape / broadcast_in_dim / dot_general) on the reference
// evaluator, for 2-D, batched, broadcast and 1-D operands.
#include <gtest/gtest.h>

#include "decompose_util.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

using testing::default_rtol;
using testing::expect_decomposition_matches;
using testing::random_tensor;

// Builds x @ y, checks composite == decomposition and that the decomposition contracts with a
// single dot_general.
void check_matmul(DType t, Shape xs, Shape ys, Shape expected) {
  SCOPED_TRACE(xs.to_string() + " @ " + ys.to_string());
  Graph g;
  Value x = g.input("x", t, xs);
  Value y = g.input("y", t, ys);
  Value out = g.matmul(x, y);
  ASSERT_EQ(g.shape(out), expected);
  g.set_outputs({out});
  TensorMap feeds{{"x", random_tensor(t, xs, 1)}, {"y", random_tensor(t, ys, 2)}};
  // Both sides accumulate the same products in double and round once, so they agree exactly.
  expect_decomposition_matches(g, feeds, 0, 0);
  Graph d = decompose(g);
  int dots = 0;
  for (const Node& n : d.nodes()) dots += n.op == OpKind::DotGeneral;
  EXPECT_EQ(dots, 1);
}

TEST(DecomposeMatMul, TwoDAndBatched) {
  check_matmul(DType::f32, {2, 3}, {3, 4}, {2, 4});
  check_matmul(DType::f32, {2, 2, 3}, {2, 3, 4}, {2, 2, 4});
  check_matmul(DType::f64, {1, 1}, {1, 1}, {1, 1});
}

TEST(DecomposeMatMul, BroadcastBatchDims) {
  check_matmul(DType::f32, {3, 1, 2, 4}, {5, 4, 6}, {3, 5, 2, 6});
  check_matmul(DType::f32, {2, 3}, {4, 3, 5}, {4, 2, 5});
  check_matmul(DType::f32, {4, 2, 3}, {3, 5}, {4, 2, 5});
  check_matmul(DType::f32, {1, 2, 3}, {4, 3, 5}, {4, 2, 5});
}

TEST(DecomposeMatMul, OneDimensionalOperands) {
  check_matmul(DType::f32, {3}, {3}, {});
  check_matmul(DType::f32, {3}, {3, 4}, {4});
  check_matmul(DType::f32, {2, 3}, {3}, {2});
  check_matmul(DType::f32, {3}, {2, 3, 4}, {2, 4});
  check_matmul(DType::f32, {2, 5, 3}, {3}, {2, 5});
}

TEST(DecomposeMatMul, OtherDtypesAndEmpty) {
  check_matmul(DType::bf16, {2, 2, 8}, {8, 3}, {2, 2, 3});
  check_matmul(DType::f16, {8}, {8, 3}, {3});
  check_matmul(DType::i32, {3, 4}, {2, 4, 2}, {2, 3, 2});
  check_matmul(DType::i8, {4}, {4}, {});
  check_matmul(DType::f32, {2, 0}, {0, 3}, {2, 3});
  check_matmul(DType::f32, {0, 2, 3}, {3, 4}, {0, 2, 4});
}

TEST(DecomposeMatMul, NoBroadcastWhenBatchDimsMatch) {
  Graph g;
  Value out = g.matmul(g.input("x", DType::f32, {2, 2, 3}), g.input("y", DType::f32, {2, 3, 4}));
  g.set_outputs({out});
  Graph d = decompose(g);
  for (const Node& n : d.nodes()) {
    EXPECT_NE(n.op, OpKind::BroadcastInDim);
    EXPECT_NE(n.op, OpKind::Reshape);
  }
}

}  // namespace
}  // namespace rlx
