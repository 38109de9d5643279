// Hostile input to the builder, the text parser and the evaluator: each must fail with a located
// rlx::Error (or succeed) without UB, without changing the graph or the caller's tensors, and in
// time linear in the input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../common/test_util.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"

namespace rlx {
namespace {

using testing::error_of;

using Ints = std::vector<int64_t>;

constexpr int64_t k2p40 = int64_t{1} << 40;
constexpr int64_t k2p62 = int64_t{1} << 62;

// ---- builder: a failed call leaves the graph exactly as it was

TEST(Robustness, FailedPromotingBuilderRemovesItsConverts) {
  Graph g;
  Value a = g.input("a", DType::i32, {2});
  Value b = g.input("b", DType::f32, {3});
  Value p = g.input("p", DType::bool_, {4});
  Graph before = g;
  EXPECT_NE(error_of([&] {
              g.add(a, b);
            }).find("op 'add' (node %1): shapes [2] and [3] do not broadcast"),
            std::string::npos);
  EXPECT_NE(error_of([&] { g.matmul(a, b); }).find("contracting sizes differ"), std::string::npos);
  EXPECT_NE(error_of([&] { g.select(p, a, b); }).find("do not broadcast"), std::string::npos);
  EXPECT_NE(error_of([&] { g.clamp(a, b, a); }).find("do not broadcast"), std::string::npos);
  EXPECT_TRUE(g == before) << g.to_string();
  // Not even the next generated name moves: the same build gives the same graph.
  g.neg(b);
  before.neg(b);
  EXPECT_EQ(g.to_string(), before.to_string());
}

TEST(Robustness, Emit1OfMultiResultOpLeavesGraphUnchanged) {
  Graph g;
  Value x = g.input("x", DType::f32, {4});
  Graph before = g;
  EXPECT_NE(error_of([&] {
              g.emit1(OpKind::TopK, {x}, {{"k", int64_t{2}}});
            }).find("op 'top_k' has 2 results; use emit() for multi-result ops"),
            std::string::npos);
  EXPECT_TRUE(g == before) << g.to_string();
}

// ---- builder: results whose element count overflows int64 are rejected, located

TEST(Robustness, ResultWithMoreThan2To63ElementsIsAnError) {
  Graph g;
  EXPECT_NE(error_of([&] {
              g.iota(DType::f32, Shape{k2p40, k2p40}, 0);
            })
                .find("op 'iota' (node %0): result f32[1099511627776,1099511627776]: shape "
                      "[1099511627776,1099511627776] has more than 2^63 elements"),
            std::string::npos);
  Value x = g.input("x", DType::f32, {k2p40, 0});
  Value y = g.input("y", DType::f32, {0, k2p40});
  EXPECT_NE(error_of([&] { g.matmul(x, y); }).find("op 'matmul'"), std::string::npos);
  Value img = g.input("img", DType::f32, {1, 1, 1, 1});
  EXPECT_NE(error_of([&] {
              g.conv(img, img, {}, {k2p40, k2p40}, {});
            }).find("op 'conv' (node %0): result f32[1,1,1099511627777,1099511627777]"),
            std::string::npos);
  // What the builder accepts always prints to text that parses back.
  EXPECT_EQ(g.nodes().size(), 3u);
  EXPECT_TRUE(Graph::parse(g.to_string()) == g);
}

TEST(Robustness, EmptyShapeWithHugeDimsIsValidInAnyOrder) {
  EXPECT_EQ((Shape{0, k2p62, 4}).numel(), 0);
  EXPECT_EQ((Shape{4, k2p62, 0}).numel(), 0);
  EXPECT_EQ((Shape{0, k2p62, 4}).strides(), (Ints{0, 4, 1}));  // no overflow (UB) in strides
  Graph g;
  Value x = g.input("x", DType::f32, {0, k2p62, 4});
  Value t = g.transpose(x, {2, 1, 0});
  EXPECT_EQ(g.shape(t), (Shape{4, k2p62, 0}));
  g.set_outputs({t, g.reduce_sum(x, {1})});
  auto out = evaluate(g, {{"x", Tensor(DType::f32, Shape{0, k2p62, 4})}});
  EXPECT_EQ(out[0].numel(), 0);
}

TEST(Robustness, RopeWithHugeCosDimDoesNotOverflow) {
  Graph g;
  Value x = g.input("x", DType::f32, {1, 4});
  Value c = g.input("c", DType::f32, {1, k2p62});
  EXPECT_NE(error_of([&] { g.rope(x, c, c); })
                .find("rotary dims R = 2 * cos.shape[-1] = 2 * 4611686018427387904 exceed the "
                      "head dim D = 4"),
            std::string::npos);
}

TEST(Robustness, FusedResidualNormsCheckEpsLikeTheNormsTheyDecomposeTo) {
  Graph g;
  Value x = g.input("x", DType::f32, {2, 4});
  Value s = g.input("s", DType::f32, {4});
  EXPECT_NE(error_of([&] {
              g.fused_residual_layer_norm(x, x, s, s, -1, -1.0);
            }).find("op 'fused_residual_layer_norm' (node %0): eps must be finite and >= 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              g.fused_residual_rms_norm(x, x, s, -1, std::nan(""));
            }).find("op 'fused_residual_rms_norm' (node %0): eps must be finite and >= 0, got nan"),
            std::string::npos);
}

// ---- evaluator

TEST(Robustness, SlidingWindowLargerThanTheSequenceIsCausal) {
  // window = INT64_MAX with Sq > Sk made `pos - window` overflow.
  Graph g;
  Value q = g.input("q", DType::f32, {1, 1, 3, 2});
  Value k = g.input("k", DType::f32, {1, 1, 2, 2});
  Graph::AttentionOptions sw{"sliding_window", std::nullopt, INT64_MAX};
  Graph::AttentionOptions causal{"causal", std::nullopt, 0};
  g.set_outputs({g.attention(q, k, k, sw), g.attention(q, k, k, causal)});
  TensorMap feeds{{"q", Tensor::full(DType::f32, Shape{1, 1, 3, 2}, 0.5)},
                  {"k", Tensor::full(DType::f32, Shape{1, 1, 2, 2}, 0.25)}};
  auto out = evaluate(g, feeds);
  EXPECT_TRUE(out[0].bitwise_equal(out[1])) << out[0].to_string() << " vs " << out[1].to_string();
}

TEST(Robustness, EmptyOperandsWithHugeDimsEvaluate) {
  // Products of such dims overflowed int64 in kernels (UB), and fused_matmul_bias_act threw on
  // the batch [2^40,2^40] of its empty result.
  Graph g;
  Value x = g.input("x", DType::f32, {k2p40, k2p40, 0});
  Value a = g.input("a", DType::f32, {k2p40, 1, 0, 3});
  Value w = g.input("w", DType::f32, {1, k2p40, 3, 0});
  Value b = g.input("b", DType::f32, {1});
  g.set_outputs({g.reduce_mean(x, {0, 1, 2}), g.softmax(x, -1), g.max_pool(x, {1}),
                 g.fused_matmul_bias_act(a, w, b, "relu")});
  auto out = evaluate(g, {{"x", Tensor(DType::f32, Shape{k2p40, k2p40, 0})},
                          {"a", Tensor(DType::f32, Shape{k2p40, 1, 0, 3})},
                          {"w", Tensor(DType::f32, Shape{1, k2p40, 3, 0})},
                          {"b", Tensor(DType::f32, Shape{1})}});
  EXPECT_TRUE(std::isnan(out[0].get_f64(0)));  // the mean of no elements
  EXPECT_EQ(out[1].shape(), (Shape{k2p40, k2p40, 0}));
  EXPECT_EQ(out[2].shape(), (Shape{k2p40, k2p40, 0}));
  EXPECT_EQ(out[3].shape(), (Shape{k2p40, k2p40, 0, 0}));
}

TEST(Robustness, OutputsNeverAliasFeedsOrConstants) {
  Graph g;
  Value x = g.input("x", DType::f32, {2});
  Value c = g.constant(Tensor::full(DType::f32, Shape{2}, 1.0));
  g.set_outputs({x, c});
  Tensor feed = Tensor::full(DType::f32, Shape{2}, 3.0);
  auto out = evaluate(g, {{"x", feed}});
  out[0].set_f64(0, 5.0);
  out[1].set_f64(0, 5.0);
  EXPECT_EQ(feed.get_f64(0), 3.0);
  EXPECT_EQ(evaluate(g, {{"x", feed}})[1].get_f64(0), 1.0);
}

// ---- text parser

TEST(Robustness, SplatTooLargeToAllocateIsALocatedError) {
  std::string err = error_of([] {
    Graph::parse(
        "graph @g {\n  %c = constant {value=splat<f32[1000000,1000000]: 1.0>} : "
        "f32[1000000,1000000]\n  return %c\n}\n");
  });
  EXPECT_EQ(err.rfind("line 2:", 0), 0u) << err;
  EXPECT_NE(err.find("f32[1000000,1000000]"), std::string::npos) << err;
}

TEST(Robustness, LargeSplatIsRefusedBeforeAllocating) {
  // 4 GB from 60 bytes of text: refused with a pointer to params, not allocated.
  std::string err = error_of([] {
    Graph::parse(
        "graph @g {\n  %c = constant {value=splat<f32[1000000000]: 0.5>} : f32[1000000000]\n"
        "  return %c\n}\n");
  });
  EXPECT_EQ(err,
            "line 2:24: splat<f32[1000000000]> has 1000000000 elements; text constants are "
            "limited to 16777216 (use a param for large tensors)");
  // 90 bytes of text at the old cap of 2^28: 2 GB and 20 s in the fuzz build (an OOM finding).
  err = error_of([] {
    Graph::parse(
        "graph @g {\n  %c = constant {value=splat<f32[268435456]: 1.5>} : f32[268435456]\n"
        "  return %c\n}\n");
  });
  EXPECT_NE(err.find("has 268435456 elements; text constants are limited to 16777216"),
            std::string::npos)
      << err;
}

// Inputs that were quadratic in their size (a message built per dim / per character, nested
// loops over the rank); each now parses in milliseconds.
TEST(Robustness, HugeRanksAndNamesParseInLinearTime) {
  const int n = 100000;
  std::string ones, axes;
  for (int i = 0; i < n; ++i) {
    ones += (i ? ",1" : "1");
    axes += (i ? "," : "") + std::to_string(i);
  }
  Graph r = Graph::parse(
      "graph @g {\n  %x = input : f32[" + ones + "]\n  %y = reduce_sum %x {axes=[" + axes +
      "], keepdims=false} : f32[]\n  %z = dot_general %x, %x {lhs_batch=[" + axes +
      "], rhs_batch=[" + axes + "], lhs_contract=[], rhs_contract=[]} : f32[" + ones +
      "]\n  %w = reshape %x {shape=[" + ones + "]} : f32[" + ones + "]\n  return %y, %z, %w\n}\n");
  EXPECT_EQ(r.nodes().size(), 4u);
  std::string name(1000000, 'a');
  Graph l =
      Graph::parse("graph @g {\n  %" + name + " = input : f32[1]\n  return %" + name + "\n}\n");
  EXPECT_EQ(l.nodes()[0].name.size(), name.size());
}

TEST(Robustness, HugePoolWindowsCostNoMoreThanTheInput) {
  // Huge padding makes a huge window legal; the evaluator visits only the window's
  // intersection with the input. Output positions: floor((4 + 2*(2^40-2) - 2^40)/2^40) + 1 = 2;
  // window 0 covers inputs 0..1 and window 1 inputs 2..3; padding counts in the divisor.
  const int64_t k = int64_t{1} << 40;
  Graph g;
  Value x = g.input("x", DType::f64, {1, 1, 4});
  g.set_outputs({g.avg_pool(x, {k}, {k}, {k - 2}, {k - 2})});
  Tensor in = Tensor::from_doubles(DType::f64, Shape{1, 1, 4}, std::vector<double>{1, 2, 3, 4});
  Tensor out = evaluate(g, {{"x", in}})[0];
  EXPECT_EQ(out.shape(), (Shape{1, 1, 2}));
  EXPECT_EQ(out.get_f64(0), 3.0 / static_cast<double>(k));
  EXPECT_EQ(out.get_f64(1), 7.0 / static_cast<double>(k));
}

}  // namespace
}  // namespace rlx
