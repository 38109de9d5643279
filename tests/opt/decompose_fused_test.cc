// Fused ops == their decompositions (matmul + add + activation, add + norm, inlined region).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "decompose_util.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

using testing::default_rtol;
using testing::expect_decomposition_matches;
using testing::random_tensor;

TEST(DecomposeFused, MatMulBiasActEachActivation) {
  for (const char* act : {"none", "relu", "gelu", "gelu_tanh", "silu"}) {
    SCOPED_TRACE(act);
    Graph g;
    Value x = g.input("x", DType::f32, {2, 1, 3, 4});
    Value w = g.input("w", DType::f32, {3, 4, 5});
    Value b = g.input("b", DType::f32, {5});
    g.set_outputs({g.fused_matmul_bias_act(x, w, b, act)});
    expect_decomposition_matches(g,
                                 {{"x", random_tensor(DType::f32, {2, 1, 3, 4}, 21)},
                                  {"w", random_tensor(DType::f32, {3, 4, 5}, 22)},
                                  {"b", random_tensor(DType::f32, {5}, 23)}},
                                 1e-5, 1e-6);
  }
}

TEST(DecomposeFused, MatMulBiasActOneDimAndF16) {
  Graph g;
  Value v = g.input("v", DType::f16, {8});
  Value m = g.input("m", DType::f16, {8, 6});
  Value b = g.input("b", DType::f16, {6});
  g.set_outputs({g.fused_matmul_bias_act(v, m, b, "gelu_tanh")});
  expect_decomposition_matches(g,
                               {{"v", random_tensor(DType::f16, {8}, 24)},
                                {"m", random_tensor(DType::f16, {8, 6}, 25)},
                                {"b", random_tensor(DType::f16, {6}, 26)}},
                               8 * default_rtol(DType::f16), 1e-2);
}

TEST(DecomposeFused, ResidualLayerNorm) {
  for (int64_t axis : {-1, 1}) {
    Graph g;
    Shape feat = axis == 1 ? Shape{3, 8} : Shape{8};
    Value x = g.input("x", DType::f32, {2, 3, 8});
    Value r = g.input("r", DType::f32, {2, 3, 8});
    auto [y, h] = g.fused_residual_layer_norm(x, r, g.input("scale", DType::f32, feat),
                                              g.input("bias", DType::f32, feat), axis, 1e-4);
    g.set_outputs({y, h});
    expect_decomposition_matches(g,
                                 {{"x", random_tensor(DType::f32, {2, 3, 8}, 31)},
                                  {"r", random_tensor(DType::f32, {2, 3, 8}, 32)},
                                  {"scale", random_tensor(DType::f32, feat, 33)},
                                  {"bias", random_tensor(DType::f32, feat, 34)}},
                                 1e-5, 1e-5);
  }
}

TEST(DecomposeFused, ResidualRmsNorm) {
  Graph g;
  Value x = g.input("x", DType::f32, {4, 16});
  Value r = g.input("r", DType::f32, {4, 16});
  auto [y, h] = g.fused_residual_rms_norm(x, r, g.input("scale", DType::f32, {16}));
  g.set_outputs({y, h});
  expect_decomposition_matches(g,
                               {{"x", random_tensor(DType::f32, {4, 16}, 41)},
                                {"r", random_tensor(DType::f32, {4, 16}, 42)},
                                {"scale", random_tensor(DType::f32, {16}, 43)}},
                               1e-5, 1e-6);
}

TEST(DecomposeFused, ElementwiseRegionInlinesBody) {
  // Body with a broadcast operand, a constant, a composite (gelu, expanded recursively) and an
  // output that is a body input.
  Graph body("body");
  Value a = body.input("a", DType::f32, {2, 3});
  Value b = body.input("b", DType::f32, {3});
  Value t = body.gelu(body.mul(body.sub(a, b), body.scalar(0.5, DType::f32)));
  body.set_outputs({t, body.max(t, b), a});
  Graph g;
  auto outs =
      g.elementwise_region({g.input("x", DType::f32, {2, 3}), g.input("y", DType::f32, {3})}, body);
  g.set_outputs(outs);
  expect_decomposition_matches(
      g, {{"x", random_tensor(DType::f32, {2, 3}, 51)}, {"y", random_tensor(DType::f32, {3}, 52)}},
      default_rtol(DType::f32), 1e-7);
  Graph d = decompose(g);
  for (const Node& n : d.nodes()) EXPECT_NE(n.op, OpKind::ElementwiseRegion);
}

}  // namespace
}  // namespace rlx
