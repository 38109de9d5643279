// reduce_mean == reduce_sum / n on the reference evaluator, including keepdims, negative and
// empty axis lists, size-0 axes (NaN) and low-precision dtypes.
#include <gtest/gtest.h>

#include <cmath>

#include "decompose_util.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

using testing::default_rtol;
using testing::expect_decomposition_matches;
using testing::random_tensor;

Graph mean_graph(DType t, Shape s, std::vector<int64_t> axes, bool keepdims) {
  Graph g;
  g.set_outputs({g.reduce_mean(g.input("x", t, s), axes, keepdims)});
  return g;
}

void check_mean(DType t, Shape s, std::vector<int64_t> axes, bool keepdims) {
  SCOPED_TRACE(std::string(dtype_name(t)) + s.to_string());
  Graph g = mean_graph(t, s, axes, keepdims);
  TensorMap feeds{{"x", random_tensor(t, s, 3)}};
  expect_decomposition_matches(g, feeds, 2 * default_rtol(t), 1e-6);
}

TEST(DecomposeReduceMean, AxesAndKeepdims) {
  check_mean(DType::f32, {2, 3, 4}, {1}, false);
  check_mean(DType::f32, {2, 3, 4}, {0, 2}, true);
  check_mean(DType::f32, {2, 3, 4}, {-1, -3}, false);
  check_mean(DType::f64, {5, 7}, {0, 1}, false);
  check_mean(DType::f64, {}, {}, false);
  check_mean(DType::f32, {2, 3}, {}, true);
}

TEST(DecomposeReduceMean, LowPrecision) {
  check_mean(DType::f16, {4, 33}, {1}, false);
  check_mean(DType::bf16, {3, 300}, {-1}, true);
}

TEST(DecomposeReduceMean, EmptyAxisIsNan) {
  Graph g = mean_graph(DType::f32, {2, 0}, {1}, false);
  TensorMap feeds{{"x", Tensor(DType::f32, {2, 0})}};
  expect_decomposition_matches(g, feeds, 0, 0);
  Tensor out = evaluate(decompose(g), feeds)[0];
  EXPECT_TRUE(std::isnan(out.get_f64(0)) && std::isnan(out.get_f64(1)));
  // Reducing the non-empty axis of an empty tensor: an empty result on both paths.
  Graph e = mean_graph(DType::f32, {2, 0}, {0}, false);
  expect_decomposition_matches(e, feeds, 0, 0);
}

TEST(DecomposeReduceMean, UsesReduceSum) {
  Graph d = decompose(mean_graph(DType::f32, {2, 3}, {1}, false));
  int sums = 0;
  for (const Node& n : d.nodes()) sums += n.op == OpKind::ReduceSum;
  EXPECT_EQ(sums, 1);
}

}  // namespace
}  // namespace rlx
