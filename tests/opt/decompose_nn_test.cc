// Composite == decomposition for the nn ops: every op, every attention mask kind, both rope
// layouts, on the reference evaluator (the composite kernels compute directly in double).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "decompose_util.h"

namespace rlx {
namespace {

using ::rlx::testing::expect_decomposition_matches;
using ::rlx::testing::random_tensor;

constexpr double kInf = std::numeric_limits<double>::infinity();

// f32 tolerances: the decomposition rounds each intermediate to f32.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

TEST(DecomposeNn, SoftmaxAndLogSoftmaxEveryAxis) {
  for (int64_t axis : {-1, 0, 1}) {
    Graph g;
    Value x = g.input("x", DType::f32, {2, 3, 4});
    g.set_outputs({g.softmax(x, axis), g.log_softmax(x, axis)});
    Tensor xv = random_tensor(DType::f32, {2, 3, 4}, 11, -5, 5);
    xv.set_f64(0, -kInf);  // a single -inf entry gets weight 0
    expect_decomposition_matches(g, {{"x", xv}}, kRtol, kAtol);
  }
}

// An all -inf row is NaN both ways; [1000, 1001]-sized rows stay finite.
TEST(DecomposeNn, SoftmaxEdgeRows) {
  Graph g;
  Value x = g.input("x", DType::f32, {3, 2});
  g.set_outputs({g.softmax(x), g.log_softmax(x)});
  Tensor xv = Tensor::from_doubles(DType::f32, {3, 2},
                                   std::vector<double>{-kInf, -kInf, 1000, 1001, -3e38, 3e38});
  expect_decomposition_matches(g, {{"x", xv}}, kRtol, kAtol);
  auto out = evaluate(decompose(g), {{"x", xv}});
  EXPECT_TRUE(std::isnan(out[0].get_f64(0)));
  for (int64_t i = 2; i < 6; ++i) EXPECT_TRUE(std::isfinite(out[0].get_f64(i))) << i;
}

// f16 inputs near 1000 (e^1000 overflows even double): the decomposition subtracts the max
// first, so every intermediate stays in f16 range.
TEST(DecomposeNn, SoftmaxF16LargeInputs) {
  Graph g;
  Value x = g.input("x", DType::f16, {4, 6});
  g.set_outputs({g.softmax(x), g.log_softmax(x)});
  Tensor xv = random_tensor(DType::f16, {4, 6}, 12, 1000, 1008);
  expect_decomposition_matches(g, {{"x", xv}}, 4e-3, 1e-3);
  auto out = evaluate(decompose(g), {{"x", xv}});
  double row_sum = 0;
  for (int64_t i = 0; i < 6; ++i) {
    ASSERT_TRUE(std::isfinite(out[0].get_f64(i))) << i;
    row_sum += out[0].get_f64(i);
  }
  EXPECT_NEAR(row_sum, 1.0, 1e-2);
}

TEST(DecomposeNn, LayerNormAndRmsNorm) {
  for (int64_t axis : {-1, 1}) {
    Graph g;
    Value x = g.input("x", DType::f32, {2, 3, 4});
    Shape ps = axis == 1 ? Shape{3, 4} : Shape{4};
    Value s = g.input("s", DType::f32, ps);
    Value b = g.input("b", DType::f32, ps);
    g.set_outputs({g.layer_norm(x, s, b, axis, 1e-3), g.rms_norm(x, s, axis, 1e-4)});
    TensorMap feeds{{"x", random_tensor(DType::f32, {2, 3, 4}, 13)},
                    {"s", random_tensor(DType::f32, ps, 14)},
                    {"b", random_tensor(DType::f32, ps, 15)}};
    expect_decomposition_matches(g, feeds, kRtol, kAtol);
  }
}

// Mean 1e4 with spread 0.5: the two-pass decomposition keeps f32 accuracy.
TEST(DecomposeNn, LayerNormLargeMean) {
  Graph g;
  Value x = g.input("x", DType::f32, {3, 8});
  Value s = g.input("s", DType::f32, {8});
  Value b = g.input("b", DType::f32, {8});
  g.set_outputs({g.layer_norm(x, s, b)});
  TensorMap feeds{{"x", random_tensor(DType::f32, {3, 8}, 16, 1e4 - 0.5, 1e4 + 0.5)},
                  {"s", random_tensor(DType::f32, {8}, 17)},
                  {"b", random_tensor(DType::f32, {8}, 18)}};
  // The f32 mean is off by up to ulp(1e4) / 2 = 2^-11, so each centred value is off by that
  // much: |error| <= 2^-11 / std (~0.29) * |scale| (< 2) ~ 3.4e-3. A one-pass variance
  // (E[x^2] ~ 1e8, ulp 8) would be wrong by orders of magnitude or NaN.
  expect_decomposition_matches(g, feeds, 1e-3, 4e-3);
}

// f16 / bf16 normalisations compute their statistics in f32 (issue 18): NumPy in double gives
// layer_norm([60000, 60032, 60064, 60096]) = [-1.342, -0.4473, 0.4473, 1.342] (an f16 mean,
// 60032, gave [-0.816, 0, 0.816, 1.633]) and rms_norm([300] * 4) = 1 (300^2 overflows f16: 0).
// The evaluator rounds every op of the decomposed graph to its dtype, so it sees the difference.
TEST(DecomposeNn, HalfNormsComputeStatisticsInF32) {
  const std::vector<double> ln = {-1.3416407812590894, -0.44721359375302983, 0.44721359375302983,
                                  1.3416407812590894};
  Graph g;
  Value x = g.input("x", DType::f16, {2, 4});
  Value s = g.constant(Tensor::full(DType::f16, {4}, 1));
  Value b = g.constant(Tensor::full(DType::f16, {4}, 0));
  g.set_outputs({g.layer_norm(x, s, b), g.rms_norm(x, s), g.softmax(x), g.log_softmax(x)});
  Tensor xv = Tensor::from_doubles(
      DType::f16, {2, 4}, std::vector<double>{60000, 60032, 60064, 60096, 300, 300, 300, 300});
  Graph d = decompose(g);
  for (const Node& n : d.nodes())
    if (op_info(n.op).has(kReduction)) {
      EXPECT_EQ(n.results[0].dtype, DType::f32) << "statistic %" << n.name << " of\n"
                                                << d.to_string();
    }
  std::vector<Tensor> out = evaluate(d, {{"x", xv}});
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(out[0].get_f64(i), ln[static_cast<size_t>(i)], 2e-3) << "layer_norm " << i;
    EXPECT_NEAR(out[1].get_f64(4 + i), 1.0, 1e-3) << "rms_norm " << i;
    EXPECT_NEAR(out[2].get_f64(4 + i), 0.25, 1e-3) << "softmax " << i;
  }
  expect_decomposition_matches(g, {{"x", xv}}, 2e-3, 2e-3);
}

struct AttentionCase {
  std::string mask;
  int64_t window = 0;
  std::optional<double> scale;
  Shape mask_shape = {};  // bool / bias only
};

// GQA shapes (Hq = 4, Hkv = 2) for every case; Sq = 3 < Sk = 5 and Sq = 5 > Sk = 3 both run.
void check_attention(const AttentionCase& c, int64_t sq, int64_t sk, uint64_t seed) {
  SCOPED_TRACE(c.mask + " Sq=" + std::to_string(sq) + " Sk=" + std::to_string(sk));
  Graph g;
  Value q = g.input("q", DType::f32, {2, 4, sq, 3});
  Value k = g.input("k", DType::f32, {2, 2, sk, 3});
  Value v = g.input("v", DType::f32, {2, 2, sk, 2});
  TensorMap feeds{{"q", random_tensor(DType::f32, {2, 4, sq, 3}, seed)},
                  {"k", random_tensor(DType::f32, {2, 2, sk, 3}, seed + 1)},
                  {"v", random_tensor(DType::f32, {2, 2, sk, 2}, seed + 2)}};
  Graph::AttentionOptions o{c.mask, c.scale, c.window};
  std::optional<Value> m;
  if (c.mask == "bool" || c.mask == "bias") {
    DType t = c.mask == "bool" ? DType::bool_ : DType::f32;
    m = g.input("m", t, c.mask_shape);
    Tensor mv = random_tensor(t, c.mask_shape, seed + 3);
    auto mask_out = [&](int64_t i) {
      if (c.mask == "bool")
        mv.set_i64(i, 0);
      else
        mv.set_f64(i, -kInf);
    };
    // A rank-1 key mask loses key 1 for every query; a [.., Sq, Sk] mask loses all keys of its
    // first row (which must come out 0 both ways) and key 1 of the second.
    int64_t row = c.mask_shape.dims().back();
    mask_out(1);
    if (c.mask_shape.rank() >= 2) {
      for (int64_t j = 0; j < row; ++j) mask_out(j);
      mask_out(row + 1);
    }
    feeds["m"] = mv;
  }
  g.set_outputs({g.attention(q, k, v, o, m)});
  expect_decomposition_matches(g, feeds, kRtol, kAtol);
}

TEST(DecomposeNn, AttentionEveryMaskKind) {
  std::vector<AttentionCase> cases = {
      {"none", 0, std::nullopt, {}},
      {"none", 0, 0.25, {}},
      {"causal", 0, std::nullopt, {}},
      {"sliding_window", 1, std::nullopt, {}},
      {"sliding_window", 2, std::nullopt, {}},
      {"bool", 0, std::nullopt, Shape{2, 4, 0, 0}},  // shape filled in below per Sq, Sk
      {"bool", 0, std::nullopt, Shape{0, 0}},
      {"bias", 0, 0.5, Shape{2, 1, 0, 0}},
      {"bias", 0, std::nullopt, Shape{0}},
  };
  uint64_t seed = 100;
  for (auto [sq, sk] : {std::pair<int64_t, int64_t>{3, 5}, {5, 3}, {4, 4}}) {
    for (AttentionCase c : cases) {
      // Trailing [Sq, Sk] of the mask shape; a rank-1 mask is a key mask [Sk].
      auto& d = c.mask_shape.dims();
      if (d.size() >= 2) {
        d[d.size() - 2] = sq;
        d.back() = sk;
      } else if (d.size() == 1) {
        d.back() = sk;
      }
      check_attention(c, sq, sk, seed);
      seed += 10;
    }
  }
}

// A masked key with k = [inf, 0, 0] gives +inf / NaN scores; masking must remove them exactly.
TEST(DecomposeNn, AttentionMaskedInfScores) {
  for (std::string kind : {"bool", "causal"}) {
    SCOPED_TRACE(kind);
    Graph g;
    Value q = g.input("q", DType::f32, {1, 2, 3, 3});
    Value k = g.input("k", DType::f32, {1, 1, 3, 3});
    Value v = g.input("v", DType::f32, {1, 1, 3, 2});
    Graph::AttentionOptions o;
    o.mask = kind;
    std::optional<Value> m;
    TensorMap feeds{{"q", random_tensor(DType::f32, {1, 2, 3, 3}, 41)},
                    {"v", random_tensor(DType::f32, {1, 1, 3, 2}, 42)}};
    Tensor kv = random_tensor(DType::f32, {1, 1, 3, 3}, 43);
    // bool masks key 0; causal masks key 2 for queries 0 and 1.
    int64_t bad = kind == "bool" ? 0 : 2;
    kv.set_f64(bad * 3, kInf);
    kv.set_f64(bad * 3 + 1, 0);
    kv.set_f64(bad * 3 + 2, 0);
    feeds["k"] = kv;
    if (kind == "bool") {
      m = g.input("m", DType::bool_, {3});
      feeds["m"] = Tensor::from_ints(DType::bool_, {3}, std::vector<int64_t>{0, 1, 1});
    }
    g.set_outputs({g.attention(q, k, v, o, m)});
    expect_decomposition_matches(g, feeds, kRtol, kAtol);
    auto out = evaluate(decompose(g), feeds);
    // Every query of the bool case, and queries 0 and 1 of the causal case, stay finite.
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < (kind == "bool" ? 3 : 2); ++i)
        for (int64_t e = 0; e < 2; ++e)
          EXPECT_TRUE(std::isfinite(out[0].get_f64((h * 3 + i) * 2 + e))) << h << " " << i;
  }
}

TEST(DecomposeNn, RopeLayoutsPartialAndBroadcastTables) {
  struct Case {
    std::string layout;
    Shape x, table;
  };
  std::vector<Case> cases = {
      {"neox", {2, 3, 5, 8}, {5, 4}},       {"gptj", {2, 3, 5, 8}, {5, 4}},
      {"neox", {2, 3, 5, 10}, {5, 3}},      {"gptj", {2, 3, 5, 10}, {5, 3}},
      {"neox", {2, 3, 5, 8}, {2, 1, 5, 2}}, {"gptj", {5, 6}, {5, 1}},
  };
  uint64_t seed = 200;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.layout + " x" + c.x.to_string() + " table" + c.table.to_string());
    Graph g;
    Value x = g.input("x", DType::f32, c.x);
    Value cs = g.input("cos", DType::f32, c.table);
    Value sn = g.input("sin", DType::f32, c.table);
    g.set_outputs({g.rope(x, cs, sn, c.layout)});
    TensorMap feeds{{"x", random_tensor(DType::f32, c.x, seed)},
                    {"cos", random_tensor(DType::f32, c.table, seed + 1, -1, 1)},
                    {"sin", random_tensor(DType::f32, c.table, seed + 2, -1, 1)}};
    expect_decomposition_matches(g, feeds, kRtol, kAtol);
    seed += 10;
  }
}

TEST(DecomposeNn, SoftmaxCrossEntropy) {
  for (DType lt : {DType::i32, DType::i64}) {
    Graph g;
    Value logits = g.input("logits", DType::f32, {2, 3, 5});
    Value labels = g.input("labels", lt, {2, 3});
    g.set_outputs({g.softmax_cross_entropy(logits, labels)});
    // Out-of-range labels (-2, 9) clamp to 0 and 4 on both sides.
    TensorMap feeds{
        {"logits", random_tensor(DType::f32, {2, 3, 5}, 300, -4, 4)},
        {"labels", Tensor::from_ints(lt, {2, 3}, std::vector<int64_t>{0, 4, 2, -2, 9, 1})}};
    expect_decomposition_matches(g, feeds, kRtol, kAtol);
  }
}

}  // namespace
}  // namespace rlx
