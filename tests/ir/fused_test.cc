// Fused ops: inference, error messages, hand/numpy values and agreement with the unfused
// builder graphs on the reference evaluator. Hand values were computed with numpy 2.x / jax
// 0.4.38 (x64): x @ w + b then jax.nn.{relu, gelu(approximate=False/True), silu}; layer norm as
// (h - mean) / sqrt(var + eps) * scale + bias with the two-pass variance; rms norm as
// h / sqrt(mean(h^2) + eps) * scale.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "../common/test_util.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

using testing::error_of;

using testing::all_close;
using testing::default_rtol;
using testing::random_tensor;

Tensor f64(Shape s, std::vector<double> v) {
  return Tensor::from_doubles(DType::f64, std::move(s), v);
}

// The unfused form of activation(x @ w + b) built from the separate ops.
Value unfused_matmul_bias_act(Graph& g, Value x, Value w, Value b, const std::string& act) {
  Value y = g.add(g.matmul(x, w), b);
  if (act == "relu") return g.relu(y);
  if (act == "gelu") return g.gelu(y);
  if (act == "gelu_tanh") return g.gelu_tanh(y);
  if (act == "silu") return g.silu(y);
  return y;
}

const char* const kActivations[] = {"none", "relu", "gelu", "gelu_tanh", "silu"};

TEST(FusedMatMulBiasAct, HandValuesEachActivation) {
  // x [[1, 2], [-0.5, 3]] @ w [[1, -1, 0.25], [2, 0.5, -1]] + b [-6, 0, 1]
  //   = [[-1, 0, -0.75], [-0.5, 2, -2.125]]
  std::vector<std::pair<std::string, std::vector<double>>> cases = {
      {"none", {-1.0, 0.0, -0.75, -0.5, 2.0, -2.125}},
      {"relu", {0.0, 0.0, 0.0, 0.0, 2.0, 0.0}},
      {"gelu",
       {-0.15865525393145707, 0.0, -0.16997051428265114, -0.15426876936299344, 1.9544997361036416,
        -0.0356857762029537}},
      {"gelu_tanh",
       {-0.15880800939172324, 0.0, -0.17003944483437966, -0.15428599017485606, 1.954597694087775,
        -0.035480400482868206}},
      {"silu",
       {-0.2689414213699951, 0.0, -0.24061597561845527, -0.1887703343990727, 1.7615941559557646,
        -0.22671751213450878}}};
  Tensor x = f64({2, 2}, {1, 2, -0.5, 3});
  Tensor w = f64({2, 3}, {1, -1, 0.25, 2, 0.5, -1});
  Tensor b = f64({3}, {-6, 0, 1});
  for (const auto& [act, want] : cases) {
    Graph g;
    Value out =
        g.fused_matmul_bias_act(g.input("x", DType::f64, {2, 2}), g.input("w", DType::f64, {2, 3}),
                                g.input("b", DType::f64, {3}), act);
    g.set_outputs({out});
    EXPECT_TRUE(
        all_close(evaluate(g, {{"x", x}, {"w", w}, {"b", b}})[0], f64({2, 3}, want), 1e-14, 1e-15))
        << act;
  }
}

TEST(FusedMatMulBiasAct, MatchesUnfusedWithBatchBroadcast) {
  for (const char* act : kActivations) {
    Graph g;
    Value x = g.input("x", DType::f32, {2, 1, 3, 4});
    Value w = g.input("w", DType::f32, {3, 4, 5});
    Value b = g.input("b", DType::f32, {3, 1, 5});
    Value fused = g.fused_matmul_bias_act(x, w, b, act);
    EXPECT_EQ(g.type(fused).to_string(), "f32[2,3,3,5]");
    g.set_outputs({fused, unfused_matmul_bias_act(g, x, w, b, act)});
    auto r = evaluate(g, {{"x", random_tensor(DType::f32, {2, 1, 3, 4}, 1)},
                          {"w", random_tensor(DType::f32, {3, 4, 5}, 2)},
                          {"b", random_tensor(DType::f32, {3, 1, 5}, 3)}});
    EXPECT_TRUE(all_close(r[0], r[1], 1e-5, 1e-6)) << act;
  }
}

TEST(FusedMatMulBiasAct, OneDimOperands) {
  // [1, 2] . [3, 4] + 0.5 = 11.5 (by hand), a scalar as in numpy.
  Graph g;
  Value x = g.input("x", DType::f64, {2});
  Value w = g.input("w", DType::f64, {2});
  Value b = g.input("b", DType::f64, {});
  Value vv = g.fused_matmul_bias_act(x, w, b);
  EXPECT_EQ(g.type(vv).to_string(), "f64[]");
  // relu([1, 2] @ [[1, 0, 2], [3, -1, 1]] + 0.5) = relu([7.5, -1.5, 4.5]) = [7.5, 0, 4.5]
  Value m = g.input("m", DType::f64, {2, 3});
  Value vm = g.fused_matmul_bias_act(x, m, b, "relu");
  EXPECT_EQ(g.type(vm).to_string(), "f64[3]");
  // [[1, 3], [0, -1], [2, 1]] @ [1, 2] + 0.5 = [7.5, -1.5, 4.5]
  Value mt = g.input("mt", DType::f64, {3, 2});
  Value mv = g.fused_matmul_bias_act(mt, x, b);
  EXPECT_EQ(g.type(mv).to_string(), "f64[3]");
  g.set_outputs({vv, vm, mv});
  auto r = evaluate(g, {{"x", f64({2}, {1, 2})},
                        {"w", f64({2}, {3, 4})},
                        {"b", f64({}, {0.5})},
                        {"m", f64({2, 3}, {1, 0, 2, 3, -1, 1})},
                        {"mt", f64({3, 2}, {1, 3, 0, -1, 2, 1})}});
  EXPECT_EQ(r[0].get_f64(0), 11.5);
  EXPECT_TRUE(all_close(r[1], f64({3}, {7.5, 0, 4.5}), 0, 0));
  EXPECT_TRUE(all_close(r[2], f64({3}, {7.5, -1.5, 4.5}), 0, 0));
}

TEST(FusedMatMulBiasAct, Errors) {
  Graph g;
  Value x = g.input("x", DType::f32, {3, 4});
  Value w = g.input("w", DType::f32, {4, 5});
  Value b = g.input("b", DType::f32, {2, 3, 5});
  std::string e = error_of([&] { g.fused_matmul_bias_act(x, w, b); });
  EXPECT_NE(e.find("bias [2,3,5] must broadcast to the matmul result [3,5]"), std::string::npos)
      << e;
  Value b2 = g.input("b2", DType::f32, {4});
  e = error_of([&] { g.fused_matmul_bias_act(x, w, b2); });
  EXPECT_NE(e.find("bias [4] must broadcast to the matmul result [3,5]"), std::string::npos) << e;
  Value w3 = g.input("w3", DType::f32, {3, 5});
  Value b5 = g.input("b5", DType::f32, {5});
  e = error_of([&] { g.fused_matmul_bias_act(x, w3, b5); });
  EXPECT_NE(e.find("matmul of [3,4] and [3,5]: contracting sizes differ (4 vs 3)"),
            std::string::npos)
      << e;
  Value xb = g.input("xb", DType::f32, {2, 3, 4});
  Value wb = g.input("wb", DType::f32, {3, 4, 5});
  e = error_of([&] { g.fused_matmul_bias_act(xb, wb, b5); });
  EXPECT_NE(e.find("matmul of [2,3,4] and [3,4,5]: batch dims [2] and [3] do not broadcast"),
            std::string::npos)
      << e;
  Value s = g.input("s", DType::f32, {});
  e = error_of([&] { g.fused_matmul_bias_act(s, w, b5); });
  EXPECT_NE(e.find("matmul operands must have rank >= 1"), std::string::npos) << e;
  Value bh = g.input("bh", DType::f16, {5});
  e = error_of([&] { g.fused_matmul_bias_act(x, w, bh); });
  EXPECT_NE(e.find("operands must have the same dtype, got f32 and f16"), std::string::npos) << e;
  Value xi = g.input("xi", DType::i32, {3, 4});
  Value wi = g.input("wi", DType::i32, {4, 5});
  Value bi = g.input("bi", DType::i32, {5});
  e = error_of([&] { g.fused_matmul_bias_act(xi, wi, bi); });
  EXPECT_NE(e.find("operands must be a float type (f32, f16, bf16, f64), got i32"),
            std::string::npos)
      << e;
  e = error_of([&] { g.fused_matmul_bias_act(x, w, b5, "tanh"); });
  EXPECT_NE(e.find("expected one of none, relu, gelu, gelu_tanh, silu"), std::string::npos) << e;
}

// packed_qkv_attention: the output type, values equal to attention on the column blocks
// transposed (both through the reference evaluator, GQA and a bool mask), and every error
// naming the op and node.
TEST(PackedQkvAttention, EqualsAttentionOnTheColumnBlocks) {
  const int64_t b = 2, s = 5, hq = 4, hkv = 2, d = 3;
  Graph g;
  Value qkv = g.input("qkv", DType::f64, {b, s, (hq + 2 * hkv) * d});
  Value m = g.input("m", DType::bool_, {b, 1, 1, s});
  Graph::AttentionOptions o{"bool", 0.7, 0};
  Value packed = g.packed_qkv_attention(qkv, hq, hkv, o, m);
  EXPECT_EQ(g.type(packed).to_string(), "f64[2,5,12]");
  auto heads = [&](int64_t c0, int64_t n) {
    return g.transpose(g.reshape(g.slice(qkv, {0, 0, c0 * d}, {b, s, (c0 + n) * d}), {b, s, n, d}),
                       {0, 2, 1, 3});
  };
  Value a = g.attention(heads(0, hq), heads(hq, hkv), heads(hq + hkv, hkv), o, m);
  g.set_outputs({packed, g.reshape(g.transpose(a, {0, 2, 1, 3}), {b, s, hq * d})});
  Tensor mask(DType::bool_, {b, 1, 1, s});
  for (int64_t i = 0; i < mask.numel(); ++i) mask.set_i64(i, i % s != 3 && i < 8);
  auto r =
      evaluate(g, {{"qkv", random_tensor(DType::f64, {b, s, (hq + 2 * hkv) * d}, 5)}, {"m", mask}});
  EXPECT_TRUE(all_close(r[0], r[1], 0, 0));
}

TEST(PackedQkvAttention, Errors) {
  Graph g;
  Graph::AttentionOptions none;
  Value x = g.input("x", DType::f32, {2, 3, 24});
  auto expect = [&](const std::function<void()>& f, const std::string& what) {
    std::string e = error_of(f);
    EXPECT_NE(e.find("packed_qkv_attention"), std::string::npos) << e;
    EXPECT_NE(e.find(what), std::string::npos) << e;
  };
  expect(
      [&] {
        g.packed_qkv_attention(g.input("r2", DType::f32, {3, 24}), 2, 0, none);
      },
      "qkv [B,S,(Hq+2*Hkv)*D] must have rank 3, got [3,24]");
  expect(
      [&] {
        g.packed_qkv_attention(g.input("i", DType::i32, {2, 3, 24}), 2, 0, none);
      },
      "qkv must be a float type");
  expect([&] { g.packed_qkv_attention(x, 5, 0, none); },
         "qkv width 24 of [2,3,24] must be (heads + 2 * kv_heads) * D = 15 * D");
  expect([&] { g.packed_qkv_attention(x, 3, 2, none); },
         "heads = 3 and kv_heads = 2 must be >= 1 with heads a multiple of kv_heads");
  expect([&] { g.packed_qkv_attention(x, 0, 0, none); }, "heads = 0 and kv_heads = 0");
  Graph::AttentionOptions masked{"bool", std::nullopt, 0};
  expect([&] { g.packed_qkv_attention(x, 2, 0, masked); },
         "mask \"bool\" needs a 2nd operand (the mask tensor), got 1 operands");
  expect(
      [&] {
        g.packed_qkv_attention(x, 2, 0, none, g.input("m", DType::bool_, {2, 1, 1, 3}));
      },
      "mask \"none\" takes no mask operand");
  expect(
      [&] {
        g.packed_qkv_attention(x, 2, 0, masked, g.input("m4", DType::bool_, {2, 1, 1, 4}));
      },
      "mask shape [2,1,1,4] does not broadcast to the scores shape [B,Hq,Sq,Sk] = [2,2,3,3]");
  expect(
      [&] {
        g.packed_qkv_attention(x, 2, 0, masked, g.input("mf", DType::f32, {2, 1, 1, 3}));
      },
      "the mask tensor of mask \"bool\" must be bool");
}

TEST(FusedResidualLayerNorm, HandValues) {
  // h = x + residual = [[1, 2, 3, 4], [-1, 0.5, 0.5, 2]].
  Graph g;
  auto [y, h] = g.fused_residual_layer_norm(
      g.input("x", DType::f64, {2, 4}), g.input("r", DType::f64, {2, 4}),
      g.input("scale", DType::f64, {4}), g.input("bias", DType::f64, {4}));
  EXPECT_EQ(g.type(y).to_string(), "f64[2,4]");
  EXPECT_EQ(g.type(h).to_string(), "f64[2,4]");
  EXPECT_EQ(g.node(y).attrs.get_float("eps"), 1e-5);
  g.set_outputs({y, h});
  auto r = evaluate(g, {{"x", f64({2, 4}, {0.5, 2, 2, 4.25, -1, 0, 1, 1})},
                        {"r", f64({2, 4}, {0.5, 0, 1, -0.25, 0, 0.5, -0.5, 1})},
                        {"scale", f64({4}, {1, 2, 0.5, -1})},
                        {"bias", f64({4}, {0, 1, 0, -0.5})}});
  EXPECT_TRUE(all_close(
      r[0],
      f64({2, 4}, {-1.3416354199689269, 0.105576386687382, 0.2236059033281545, -1.8416354199689269,
                   -1.414207277021387, 1.0, 0.0, -1.914207277021387}),
      1e-14, 1e-15));
  EXPECT_TRUE(all_close(r[1], f64({2, 4}, {1, 2, 3, 4, -1, 0.5, 0.5, 2}), 0, 0));
}

TEST(FusedResidualLayerNorm, MatchesUnfusedOverTwoAxes) {
  Graph g;
  Value x = g.input("x", DType::f32, {2, 3, 4});
  Value res = g.input("r", DType::f32, {2, 3, 4});
  Value scale = g.input("scale", DType::f32, {3, 4});
  Value bias = g.input("bias", DType::f32, {3, 4});
  auto [y, h] = g.fused_residual_layer_norm(x, res, scale, bias, 1, 1e-3);
  Value h2 = g.add(x, res);
  g.set_outputs({y, h, g.layer_norm(h2, scale, bias, 1, 1e-3), h2});
  auto r = evaluate(g, {{"x", random_tensor(DType::f32, {2, 3, 4}, 4)},
                        {"r", random_tensor(DType::f32, {2, 3, 4}, 5)},
                        {"scale", random_tensor(DType::f32, {3, 4}, 6)},
                        {"bias", random_tensor(DType::f32, {3, 4}, 7)}});
  EXPECT_TRUE(all_close(r[0], r[2], 1e-5, 1e-6));
  EXPECT_TRUE(all_close(r[1], r[3], 0, 0));
}

TEST(FusedResidualLayerNorm, SumIsRoundedBeforeNormalising) {
  // In f16, 1 + 2^-11 rounds to 1 (tie to even), so h = [1, 1], the row is constant and the
  // output is exactly the bias. Normalising the unrounded sum would give about +-0.077.
  Graph g;
  auto [y, h] = g.fused_residual_layer_norm(
      g.input("x", DType::f16, {1, 2}), g.input("r", DType::f16, {1, 2}),
      g.input("scale", DType::f16, {2}), g.input("bias", DType::f16, {2}));
  g.set_outputs({y, h});
  auto r = evaluate(g, {{"x", Tensor::full(DType::f16, {1, 2}, 1.0)},
                        {"r", Tensor::from_doubles(DType::f16, {1, 2},
                                                   std::vector<double>{std::ldexp(1.0, -11), 0})},
                        {"scale", Tensor::full(DType::f16, {2}, 1.0)},
                        {"bias", Tensor::full(DType::f16, {2}, 0.0)}});
  EXPECT_EQ(r[1].get_f64(0), 1.0);
  EXPECT_EQ(r[0].get_f64(0), 0.0);
  EXPECT_EQ(r[0].get_f64(1), 0.0);
}

TEST(FusedResidualRmsNorm, HandValuesAndUnfused) {
  Graph g;
  Value x = g.input("x", DType::f64, {2, 4});
  Value res = g.input("r", DType::f64, {2, 4});
  Value scale = g.input("scale", DType::f64, {4});
  auto [y, h] = g.fused_residual_rms_norm(x, res, scale);
  EXPECT_EQ(g.node(y).attrs.get_float("eps"), 1e-6);
  g.set_outputs({y, h, g.rms_norm(g.add(x, res), scale)});
  auto r = evaluate(g, {{"x", f64({2, 4}, {0.5, 2, 2, 4.25, -1, 0, 1, 1})},
                        {"r", f64({2, 4}, {0.5, 0, 1, -0.25, 0, 0.5, -0.5, 1})},
                        {"scale", f64({4}, {1, 2, 0.5, -1})}});
  Tensor want = f64(
      {2, 4}, {0.3651483473268884, 1.4605933893075536, 0.5477225209903326, -1.4605933893075536,
               -0.8528025553124781, 0.8528025553124781, 0.21320063882811952, -1.7056051106249561});
  EXPECT_TRUE(all_close(r[0], want, 1e-14, 1e-15));
  EXPECT_TRUE(all_close(r[1], f64({2, 4}, {1, 2, 3, 4, -1, 0.5, 0.5, 2}), 0, 0));
  EXPECT_TRUE(all_close(r[2], want, 1e-14, 1e-15));
}

TEST(FusedResidualNorm, Errors) {
  Graph g;
  Value x = g.input("x", DType::f32, {2, 3, 4});
  Value r = g.input("r", DType::f32, {3, 4});
  Value s = g.input("s", DType::f32, {4});
  std::string e = error_of([&] { g.fused_residual_layer_norm(x, r, s, s); });
  EXPECT_NE(e.find("residual must have the type of x, f32[2,3,4], got f32[3,4]"), std::string::npos)
      << e;
  Value rh = g.input("rh", DType::f16, {2, 3, 4});
  e = error_of([&] { g.fused_residual_rms_norm(x, rh, s); });
  EXPECT_NE(e.find("residual must have the type of x, f32[2,3,4], got f16[2,3,4]"),
            std::string::npos)
      << e;
  e = error_of([&] { g.fused_residual_layer_norm(x, x, s, s, 1); });
  EXPECT_NE(e.find("scale must be f32[3,4] (x.shape[axis:]), got f32[4]"), std::string::npos) << e;
  Value b = g.input("b", DType::f32, {3});
  e = error_of([&] { g.fused_residual_layer_norm(x, x, s, b); });
  EXPECT_NE(e.find("bias must be f32[4] (x.shape[axis:]), got f32[3]"), std::string::npos) << e;
  e = error_of([&] { g.fused_residual_rms_norm(x, x, s, 3); });
  EXPECT_NE(e.find("axis 3 is out of range for rank 3"), std::string::npos) << e;
  Value xi = g.input("xi", DType::i32, {4});
  e = error_of([&] { g.fused_residual_rms_norm(xi, xi, xi); });
  EXPECT_NE(e.find("x must be a float type (f32, f16, bf16, f64), got i32"), std::string::npos)
      << e;
}

TEST(ElementwiseRegion, BroadcastOperandTwoOutputs) {
  Graph body("body");
  Value a = body.input("a", DType::f32, {2, 3});
  Value b = body.input("b", DType::f32, {3});
  body.set_outputs({body.add(body.mul(a, b), body.scalar(2.0, DType::f32)), body.max(a, b)});
  Graph g;
  std::vector<Value> outs =
      g.elementwise_region({g.input("x", DType::f32, {2, 3}), g.input("y", DType::f32, {3})}, body);
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(g.type(outs[1]).to_string(), "f32[2,3]");
  g.set_outputs(outs);
  auto r = evaluate(
      g, {{"x", Tensor::from_doubles(DType::f32, {2, 3}, std::vector<double>{1, 2, 3, 4, 5, 6})},
          {"y", Tensor::from_doubles(DType::f32, {3}, std::vector<double>{10, -1, 0.5})}});
  // By hand: a * b + 2 and max(a, b) with b broadcast over rows.
  EXPECT_TRUE(all_close(
      r[0], Tensor::from_doubles(DType::f32, {2, 3}, std::vector<double>{12, 0, 3.5, 42, -3, 5}), 0,
      0));
  EXPECT_TRUE(all_close(
      r[1], Tensor::from_doubles(DType::f32, {2, 3}, std::vector<double>{10, 2, 3, 10, 5, 6}), 0,
      0));
}

TEST(ElementwiseRegion, OutputMayBeAnInputAndResultTypeIsBroadcast) {
  Graph body("body");
  Value a = body.input("a", DType::f32, {3});
  Value b = body.input("b", DType::f32, {2, 1});
  body.set_outputs({a, body.sub(a, b)});
  Graph g;
  auto outs =
      g.elementwise_region({g.input("x", DType::f32, {3}), g.input("y", DType::f32, {2, 1})}, body);
  EXPECT_EQ(g.type(outs[0]).to_string(), "f32[3]");
  EXPECT_EQ(g.type(outs[1]).to_string(), "f32[2,3]");
}

TEST(ElementwiseRegion, ErrorNonElementwiseBodyOp) {
  Graph g;
  Value x = g.input("x", DType::f32, {2, 3});
  {
    Graph body("body");
    Value a = body.input("a", DType::f32, {2, 3});
    body.set_outputs({body.reduce_sum(a, {1}, true)});
    std::string e = error_of([&] { g.elementwise_region({x}, body); });
    EXPECT_NE(e.find("is a 'reduce_sum'; a region body may hold only inputs, constants and "
                     "elementwise ops"),
              std::string::npos)
        << e;
  }
  {
    Graph body("body");
    Value a = body.input("a", DType::f32, {1, 2, 3});
    body.set_outputs({body.max_pool(a, {1})});
    Value x3 = g.input("x3", DType::f32, {1, 2, 3});
    std::string e = error_of([&] { g.elementwise_region({x3}, body); });
    EXPECT_NE(e.find("a region body may hold only inputs"), std::string::npos) << e;
  }
  {
    Graph body("body");
    Value p = body.param("p", DType::f32, {2, 3});
    body.set_outputs({p});
    std::string e = error_of([&] { g.elementwise_region({}, body); });
    EXPECT_NE(e.find("body node %p is a 'param'"), std::string::npos) << e;
  }
  {
    Graph inner("inner");
    inner.set_outputs({inner.input("a", DType::f32, {2, 3})});
    Graph body("body");
    Value a = body.input("a", DType::f32, {2, 3});
    body.set_outputs(body.elementwise_region({a}, inner));
    std::string e = error_of([&] { g.elementwise_region({x}, body); });
    EXPECT_NE(e.find("is a 'elementwise_region'"), std::string::npos) << e;
  }
}

TEST(ElementwiseRegion, ErrorBodyInputMismatch) {
  Graph g;
  Value x = g.input("x", DType::f32, {2, 3});
  Value y = g.input("y", DType::f32, {3});
  Graph body("body");
  Value a = body.input("a", DType::f32, {2, 3});
  Value b = body.input("b", DType::f16, {3});
  body.set_outputs({a, b});
  std::string e = error_of([&] { g.elementwise_region({x, y}, body); });
  EXPECT_NE(e.find("operand 1 has type f32[3] but body input 1 (%b) is f16[3]"), std::string::npos)
      << e;
  e = error_of([&] { g.elementwise_region({x}, body); });
  EXPECT_NE(e.find("body has 2 inputs but the region has 1 operands"), std::string::npos) << e;
  Graph empty("body");
  empty.input("a", DType::f32, {2, 3});
  e = error_of([&] { g.elementwise_region({x}, empty); });
  EXPECT_NE(e.find("body has no outputs; a region needs at least one"), std::string::npos) << e;
}

}  // namespace
}  // namespace rlx
