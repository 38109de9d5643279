// "amp" pass: text-in/text-out files, a BERT-like block under every policy against the f32
// reference, cast hygiene, kept signatures, the precision table, overrides and policy parsing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "../common/test_util.h"
#include "pass_file.h"
#include "random_graph.h"
#include "rlx/ir/collective.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/pipeline.h"
#include "rlx/opt/precision.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

using ::rlx::testing::all_close;
using ::rlx::testing::error_of;
using ::rlx::testing::random_tensor;
using ::rlx::testing::run_pass_files;

PrecisionPolicy policy(PrecisionMode mode) { return PrecisionPolicy{mode, {}}; }

// Runs the amp pass once; returns its changed flag.
bool run_amp(Graph& g, const PrecisionPolicy& p) { return create_amp_pass(p)->run(g); }

// A BERT-like encoder block (batch 2, seq 16, hidden 64, 4 heads, FFN 128): embedding gather
// with i32 ids, q/k/v projections, attention with a bool mask, output projection, residual +
// layer_norm, gelu FFN, residual + layer_norm; plus a hand-written attention path (dot_general
// scores, scale, softmax, matmul) and a softmax classifier head.
Graph bert_block() {
  Graph g("bert_block");
  const int64_t B = 2, S = 16, H = 64, N = 4, D = 16, F = 128, C = 8;
  Value ids = g.input("ids", DType::i32, {B, S});
  Value mask = g.input("mask", DType::bool_, {B, 1, 1, S});
  Value x = g.gather(g.param("emb", DType::f32, {50, H}), ids, 0);
  auto linear = [&](Value in, const std::string& name, int64_t n_in, int64_t n_out) {
    Value w = g.param(name + ".w", DType::f32, {n_in, n_out});
    Value b = g.param(name + ".b", DType::f32, {n_out});
    return g.add(g.matmul(in, w), b);
  };
  auto heads = [&](Value t) { return g.transpose(g.reshape(t, {B, S, N, D}), {0, 2, 1, 3}); };
  Value q = heads(linear(x, "q", H, H));
  Value k = heads(linear(x, "k", H, H));
  Value v = heads(linear(x, "v", H, H));
  Graph::AttentionOptions options;
  options.mask = "bool";
  Value a = g.attention(q, k, v, options, mask);
  a = g.reshape(g.transpose(a, {0, 2, 1, 3}), {B, S, H});
  Value h = g.layer_norm(g.add(x, linear(a, "o", H, H)), g.param("ln1.g", DType::f32, {H}),
                         g.param("ln1.b", DType::f32, {H}));
  Value f = linear(g.gelu(linear(h, "ff1", H, F)), "ff2", F, H);
  Value y = g.layer_norm(g.add(h, f), g.param("ln2.g", DType::f32, {H}),
                         g.param("ln2.b", DType::f32, {H}));
  Value scores = g.dot_general(q, k, {0, 1}, {0, 1}, {3}, {3});
  Value p = g.softmax(g.mul(scores, g.scalar(0.25, DType::f32)));
  Value ctx = g.matmul(p, v);
  Value probs = g.softmax(linear(y, "cls", H, C));
  g.set_outputs({y, probs, ctx});
  return g;
}

// Feeds with weights scaled like a trained model's (|w| ~ 1/sqrt(fan_in)), norm gains near 1.
TensorMap bert_feeds(const Graph& g, uint64_t seed) {
  TensorMap feeds;
  for (const Node& n : g.nodes()) {
    if (n.op != OpKind::Input && n.op != OpKind::Param) continue;
    const TensorType& t = n.results[0];
    double lo = -1, hi = 1;
    if (n.name == "ids") lo = 0, hi = 50;
    if (n.name.ends_with(".w")) lo = -0.25, hi = 0.25;
    if (n.name.ends_with(".b")) lo = -0.1, hi = 0.1;
    if (n.name.ends_with(".g")) lo = 0.5, hi = 1.5;
    feeds[n.name] = random_tensor(t.dtype, t.shape, seed++, lo, hi);
  }
  return feeds;
}

// Largest |got - want| over all elements, and the largest share of the allowed error
// tol * (1 + |want|) used (all_close with rtol = atol = tol passes iff it is <= 1).
std::pair<double, double> max_errors(const Tensor& got, const Tensor& want, double tol) {
  double abs_err = 0, share = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double e = std::fabs(got.get_f64(i) - want.get_f64(i));
    abs_err = std::max(abs_err, e);
    share = std::max(share, e / (tol * (1 + std::fabs(want.get_f64(i)))));
  }
  return {abs_err, share};
}

// A convert whose operand is a convert that it undoes exactly: convert(convert(x, m), t) with
// dtype(x) == t and m holding every value of t.
int cancelling_cast_pairs(const Graph& g) {
  auto widens = [](DType from, DType to) {
    return to == DType::f32 && (from == DType::f16 || from == DType::bf16);
  };
  int pairs = 0;
  for (const Node& n : g.nodes()) {
    if (n.op != OpKind::Convert || g.node(n.operands[0]).op != OpKind::Convert) continue;
    Value inner = n.operands[0];
    DType x = g.dtype(g.node(inner).operands[0]);
    if (x == n.results[0].dtype && widens(x, g.dtype(inner))) ++pairs;
  }
  return pairs;
}

int count_casts_of_casts(const Graph& g) {
  int n = 0;
  for (const Node& node : g.nodes())
    n += node.op == OpKind::Convert && g.node(node.operands[0]).op == OpKind::Convert;
  return n;
}

// Inputs, params (names, order, types) and output types of `g`.
std::vector<std::string> signature(const Graph& g) {
  std::vector<std::string> s;
  for (int32_t id : g.inputs())
    s.push_back("input " + g.node(id).name + " " + g.node(id).results[0].to_string());
  for (int32_t id : g.params())
    s.push_back("param " + g.node(id).name + " " + g.node(id).results[0].to_string());
  for (Value v : g.outputs()) s.push_back("output " + g.type(v).to_string());
  return s;
}

// The dtypes of the float operands and results of every node of kind `op`.
std::vector<DType> float_dtypes_of(const Graph& g, OpKind op) {
  std::vector<DType> d;
  for (const Node& n : g.nodes()) {
    if (n.op != op) continue;
    for (Value v : n.operands)
      if (is_float(g.dtype(v))) d.push_back(g.dtype(v));
    for (const TensorType& t : n.results)
      if (is_float(t.dtype)) d.push_back(t.dtype);
  }
  return d;
}

bool all_are(const std::vector<DType>& d, DType t) {
  return !d.empty() && std::all_of(d.begin(), d.end(), [&](DType x) { return x == t; });
}

TEST(PassFiles, Amp) {
  EXPECT_GE(run_pass_files("amp",
                           [] {
                             PassManager pm;
                             pm.add(create_amp_pass(parse_precision_policy("auto-mixed-bf16")));
                             return pm;
                           }),
            12);
}

// Each policy against the f32 graph on the reference evaluator. Tolerance per policy (rtol and
// atol alike, outputs are O(1)): bf16 has 8 significand bits (ulp 2^-8 = 3.9e-3), f16 11 (ulp
// 2^-11 = 4.9e-4); the block rounds ~6 times on the longest path.
struct ToleranceCase {
  const char* policy;
  double tol;
};

class AmpBertBlock : public ::testing::TestWithParam<ToleranceCase> {};

TEST_P(AmpBertBlock, OutputsWithinToleranceOfF32) {
  Graph ref = bert_block();
  Graph g = ref;
  PrecisionPolicy p = parse_precision_policy(GetParam().policy);
  EXPECT_TRUE(run_amp(g, p));
  EXPECT_TRUE(g.verify().empty()) << g.to_string();
  EXPECT_EQ(signature(g), signature(ref));
  for (uint64_t seed : {1u, 2u, 3u}) {
    TensorMap feeds = bert_feeds(ref, seed * 100);
    std::vector<Tensor> want = evaluate(ref, feeds), got = evaluate(g, feeds);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      auto [abs_err, share] = max_errors(got[i], want[i], GetParam().tol);
      std::printf("[amp] %s seed %d output %zu: max abs error %.3g (%.0f%% of tolerance)\n",
                  GetParam().policy, static_cast<int>(seed), i, abs_err, 100 * share);
      EXPECT_TRUE(all_close(got[i], want[i], GetParam().tol, GetParam().tol)) << "output " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, AmpBertBlock,
                         ::testing::Values(ToleranceCase{"auto-mixed-bf16", 3e-2},
                                           ToleranceCase{"auto-mixed-f16", 5e-3},
                                           ToleranceCase{"always-bf16", 5e-2},
                                           ToleranceCase{"always-f16", 1e-2}),
                         [](const auto& info) {
                           std::string s = info.param.policy;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// The tolerances above can fail: an f32 graph differing by one bf16 rounding of a wide value
// is outside the f16 tolerance.
TEST(AmpBertBlock, ToleranceDetectsBf16UnderF16Bound) {
  Graph ref = bert_block();
  Graph g = ref;
  run_amp(g, policy(PrecisionMode::AlwaysBf16));
  TensorMap feeds = bert_feeds(ref, 100);
  EXPECT_FALSE(all_close(evaluate(g, feeds)[0], evaluate(ref, feeds)[0], 5e-3, 5e-3));
}

TEST(Amp, AutoPoliciesKeepSensitiveOpsInF32AndMatmulsLow) {
  for (PrecisionMode mode : {PrecisionMode::AutoMixedBf16, PrecisionMode::AutoMixedF16}) {
    Graph g = bert_block();
    run_amp(g, policy(mode));
    DType low = policy(mode).low_dtype();
    SCOPED_TRACE(std::string(precision_mode_name(mode)));
    for (OpKind op : {OpKind::Softmax, OpKind::LayerNorm, OpKind::Add, OpKind::Gelu})
      EXPECT_TRUE(all_are(float_dtypes_of(g, op), DType::f32)) << op_name(op);
    EXPECT_TRUE(all_are(float_dtypes_of(g, OpKind::MatMul), low));
    EXPECT_TRUE(all_are(float_dtypes_of(g, OpKind::Attention), low));
    // dot_general: low operands, f32 accumulation and result.
    for (const Node& n : g.nodes()) {
      if (n.op != OpKind::DotGeneral) continue;
      EXPECT_EQ(g.dtype(n.operands[0]), low);
      EXPECT_EQ(g.dtype(n.operands[1]), low);
      EXPECT_EQ(n.attrs.get_dtype("preferred"), DType::f32);
      EXPECT_EQ(n.results[0].dtype, DType::f32);
    }
    // Data movement follows its operand and adds no casts: the heads of the attention result
    // are merged in the low dtype, those of the f32 bias adds in f32.
    for (const Node& n : g.nodes()) {
      if (n.op != OpKind::Transpose && n.op != OpKind::Reshape) continue;
      EXPECT_NE(g.node(n.operands[0]).op, OpKind::Convert) << n.name;
      bool after_attention = g.node(n.operands[0]).op == OpKind::Attention ||
                             g.node(g.node(n.operands[0]).operands[0]).op == OpKind::Attention;
      EXPECT_EQ(n.results[0].dtype, after_attention ? low : DType::f32) << n.name;
    }
    // The embedding gather stays on the f32 param; ids and mask are never converted.
    EXPECT_TRUE(all_are(float_dtypes_of(g, OpKind::Gather), DType::f32));
    for (const Node& n : g.nodes())
      if (n.op == OpKind::Convert) {
        EXPECT_TRUE(is_float(g.dtype(n.operands[0]))) << n.name;
      }
  }
}

TEST(Amp, NoCancellingCastPairsAndEachValueCastOnce) {
  for (const char* p : {"auto-mixed-bf16", "auto-mixed-f16", "always-bf16", "always-f16"}) {
    SCOPED_TRACE(p);
    Graph g = bert_block();
    run_amp(g, parse_precision_policy(p));
    EXPECT_EQ(cancelling_cast_pairs(g), 0);
    std::vector<std::pair<Value, DType>> casts;
    for (const Node& n : g.nodes())
      if (n.op == OpKind::Convert) casts.push_back({n.operands[0], n.results[0].dtype});
    for (size_t i = 0; i < casts.size(); ++i)
      for (size_t j = i + 1; j < casts.size(); ++j)
        EXPECT_FALSE(casts[i] == casts[j]) << "value cast twice to one dtype";
    // Every cast is used: unused ones are removed.
    std::vector<std::vector<int>> uses = use_counts(g);
    for (size_t i = 0; i < g.nodes().size(); ++i)
      if (g.nodes()[i].op == OpKind::Convert) {
        EXPECT_GT(uses[i][0], 0) << g.nodes()[i].name;
      }
  }
  // Under auto policies the low results flow straight into the next low op: no cast of a cast.
  Graph g = bert_block();
  run_amp(g, policy(PrecisionMode::AutoMixedBf16));
  EXPECT_EQ(count_casts_of_casts(g), 0) << g.to_string();
}

// Seeded random graphs (matmul, softmax, layer_norm, elementwise, reductions, shape ops):
// well-typed results, kept signatures, no cancelling casts, a fixed point after one run, and
// outputs within a bf16 tolerance of f32 wherever the f32 graph is well conditioned.
constexpr double kRandomTol = 2e-2;

TEST(Amp, RandomGraphs) {
  int compared = 0, changed = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    rlx::testing::RandomGraph r = rlx::testing::make_random_graph(seed, 14);
    Graph f32 = r.graph;
    EXPECT_FALSE(run_amp(f32, policy(PrecisionMode::AlwaysF32)));
    for (const char* p : {"auto-mixed-bf16", "always-f16"}) {
      SCOPED_TRACE(p);
      Graph g = r.graph;
      changed += run_amp(g, parse_precision_policy(p));
      ASSERT_TRUE(g.verify().empty()) << g.to_string();
      EXPECT_EQ(signature(g), signature(r.graph));
      EXPECT_EQ(cancelling_cast_pairs(g), 0);
      EXPECT_FALSE(run_amp(g, parse_precision_policy(p))) << g.to_string();
      std::vector<Tensor> want = evaluate(r.graph, r.feeds), got = evaluate(g, r.feeds);
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_TRUE(all_close(got[i], want[i], kRandomTol, kRandomTol)) << "output " << i;
        ++compared;
      }
    }
  }
  std::printf("[amp] random graphs: %d of 400 runs changed, %d outputs compared\n", changed,
              compared);
  EXPECT_GT(changed, 200);
  EXPECT_GT(compared, 400);
}

TEST(Amp, SecondRunChangesNothing) {
  for (const char* p : {"auto-mixed-bf16", "always-f16", "auto-mixed-f16,softmax=bf16"}) {
    SCOPED_TRACE(p);
    Graph g = bert_block();
    EXPECT_TRUE(run_amp(g, parse_precision_policy(p)));
    Graph once = g;
    EXPECT_FALSE(run_amp(g, parse_precision_policy(p)));
    EXPECT_EQ(g.to_string(), once.to_string());
  }
}

TEST(Amp, AlwaysF32OnAnF32GraphChangesNothing) {
  Graph g = bert_block();
  std::string before = g.to_string();
  EXPECT_FALSE(run_amp(g, policy(PrecisionMode::AlwaysF32)));
  EXPECT_EQ(g.to_string(), before);
}

TEST(Amp, AlwaysF32UpcastsALowPrecisionGraph) {
  Graph g("g");
  Value x = g.input("x", DType::bf16, {4, 8});
  Value w = g.param("w", DType::bf16, {8, 3});
  g.set_outputs({g.softmax(g.matmul(x, w))});
  Graph ref = g;
  EXPECT_TRUE(run_amp(g, policy(PrecisionMode::AlwaysF32)));
  EXPECT_TRUE(all_are(float_dtypes_of(g, OpKind::MatMul), DType::f32));
  EXPECT_TRUE(all_are(float_dtypes_of(g, OpKind::Softmax), DType::f32));
  EXPECT_EQ(signature(g), signature(ref));
  TensorMap feeds = {{"x", random_tensor(DType::bf16, {4, 8}, 1)},
                     {"w", random_tensor(DType::bf16, {8, 3}, 2)}};
  // One bf16 rounding less than the bf16 graph: within one bf16 ulp of it.
  EXPECT_TRUE(all_close(evaluate(g, feeds)[0], evaluate(ref, feeds)[0], 8e-3, 1e-3));
}

TEST(Amp, CustomOverridesReplaceTheBasePolicy) {
  Graph g = bert_block();
  run_amp(g, parse_precision_policy("auto-mixed-bf16,matmul=f32,softmax=bf16,add=f16"));
  EXPECT_TRUE(all_are(float_dtypes_of(g, OpKind::MatMul), DType::f32));
  EXPECT_TRUE(all_are(float_dtypes_of(g, OpKind::Softmax), DType::bf16));
  EXPECT_TRUE(all_are(float_dtypes_of(g, OpKind::Add), DType::f16));
  EXPECT_TRUE(all_are(float_dtypes_of(g, OpKind::Attention), DType::bf16));
  EXPECT_TRUE(all_are(float_dtypes_of(g, OpKind::LayerNorm), DType::f32));
  // An override to f32 under an Always policy keeps that op in f32.
  Graph h = bert_block();
  PrecisionPolicy p = policy(PrecisionMode::AlwaysBf16);
  p.overrides[OpKind::LayerNorm] = DType::f32;
  run_amp(h, p);
  EXPECT_TRUE(all_are(float_dtypes_of(h, OpKind::LayerNorm), DType::f32));
  EXPECT_TRUE(all_are(float_dtypes_of(h, OpKind::Softmax), DType::bf16));
}

TEST(Amp, AlwaysPoliciesRoundDotGeneralsF32AccumulationToTheLowDtype) {
  Graph g = bert_block();
  run_amp(g, policy(PrecisionMode::AlwaysF16));
  int dots = 0;
  for (const Node& n : g.nodes()) {
    if (n.op != OpKind::DotGeneral) continue;
    ++dots;
    EXPECT_EQ(n.attrs.get_dtype("preferred"), DType::f32);
    EXPECT_EQ(g.dtype(n.operands[0]), DType::f16);
  }
  EXPECT_EQ(dots, 1);
  EXPECT_TRUE(all_are(float_dtypes_of(g, OpKind::Softmax), DType::f16));
  EXPECT_TRUE(all_are(float_dtypes_of(g, OpKind::LayerNorm), DType::f16));
}

TEST(Amp, MultiResultOpsConvertOnlyTheirFloatResults) {
  Graph g("g");
  Value x = g.input("x", DType::f32, {4, 8});
  Value r = g.input("r", DType::f32, {4, 8});
  auto [normed, sum] = g.fused_residual_rms_norm(x, r, g.param("s", DType::f32, {8}));
  auto [values, indices] = g.top_k(g.mul(normed, sum), 3);
  g.set_outputs({values, indices, g.argmax(sum, 1)});
  Graph ref = g;
  EXPECT_TRUE(run_amp(g, policy(PrecisionMode::AlwaysBf16)));
  ASSERT_TRUE(g.verify().empty()) << g.to_string();
  EXPECT_EQ(signature(g), signature(ref));
  EXPECT_TRUE(all_are(float_dtypes_of(g, OpKind::TopK), DType::bf16));
  EXPECT_TRUE(all_are(float_dtypes_of(g, OpKind::FusedResidualRmsNorm), DType::bf16));
  for (const Node& n : g.nodes())
    if (n.op == OpKind::Convert) {
      EXPECT_TRUE(is_float(g.dtype(n.operands[0]))) << n.name;
    }
  TensorMap feeds = {{"x", random_tensor(DType::f32, {4, 8}, 1)},
                     {"r", random_tensor(DType::f32, {4, 8}, 2)},
                     {"s", random_tensor(DType::f32, {8}, 3, 0.5, 1.5)}};
  EXPECT_TRUE(all_close(evaluate(g, feeds)[0], evaluate(ref, feeds)[0], 3e-2, 3e-2));
}

TEST(Amp, CastNamesNeverTakeTheNameOfALaterLeaf) {
  Graph g("g");
  Value x = g.input("x", DType::f32, {2, 4});
  Value m = g.matmul(x, g.param("w", DType::f32, {4, 4}));
  g.set_outputs({g.add(m, g.param("x.bf16", DType::f32, {4}))});
  run_amp(g, policy(PrecisionMode::AutoMixedBf16));
  ASSERT_TRUE(g.verify().empty());
  EXPECT_EQ(g.node(g.find("x.bf16")).op, OpKind::Param);
  EXPECT_EQ(g.node(g.find("x.bf16.amp")).op, OpKind::Convert);
}

// An additive attention bias narrowed to bf16 / f16 saturates (issue 18): f32's lowest stays
// finite, so a row whose keys all carry it is uniform (the mean of V, as in f32) instead of
// fully masked (0); -inf still masks.
TEST(Amp, AttentionBiasSaturatesInsteadOfBecomingInfinite) {
  Graph g("lowest_bias");
  Value q = g.input("q", DType::f32, {1, 1, 3, 2});
  Value k = g.input("k", DType::f32, {1, 1, 3, 2});
  Value v = g.input("v", DType::f32, {1, 1, 3, 2});
  Value bias = g.input("bias", DType::f32, {1, 1, 3, 3});
  Graph::AttentionOptions ao;
  ao.mask = "bias";
  g.set_outputs({g.attention(q, k, v, ao, bias)});
  const double lo = std::numeric_limits<float>::lowest(),
               inf = std::numeric_limits<double>::infinity();
  TensorMap feeds{
      // q = 0: every score is 0, so a uniform row is the mean of V in any arithmetic.
      {"q", Tensor::full(DType::f32, {1, 1, 3, 2}, 0)},
      {"k", random_tensor(DType::f32, {1, 1, 3, 2}, 2)},
      {"v", Tensor::from_doubles(DType::f32, {1, 1, 3, 2}, std::vector<double>{1, 2, 3, 4, 5, 9})},
      {"bias", Tensor::from_doubles(DType::f32, {1, 1, 3, 3},
                                    std::vector<double>{lo, lo, lo, -inf, 0, -inf, 0, 0, lo})}};
  for (PrecisionMode m : {PrecisionMode::AutoMixedBf16, PrecisionMode::AutoMixedF16,
                          PrecisionMode::AlwaysBf16, PrecisionMode::AlwaysF16}) {
    Graph a = g;
    run_amp(a, policy(m));
    std::vector<Tensor> out = evaluate(a, feeds);
    std::string what(precision_mode_name(m));
    EXPECT_NEAR(out[0].get_f64(0), 3, 5e-2) << what;  // mean of V
    EXPECT_NEAR(out[0].get_f64(1), 5, 5e-2) << what;
    EXPECT_NEAR(out[0].get_f64(2), 3, 5e-2) << what;  // only key 1: v[1]
    EXPECT_NEAR(out[0].get_f64(3), 4, 5e-2) << what;
    EXPECT_NEAR(out[0].get_f64(4), 2, 5e-2) << what;  // keys 0 and 1 (key 2's bias is lowest)
    EXPECT_NEAR(out[0].get_f64(5), 3, 5e-2) << what;
  }
}

TEST(Amp, PrecisionTable) {
  EXPECT_EQ(amp_op_class(OpKind::MatMul), AmpOpClass::LowPrecision);
  EXPECT_EQ(amp_op_class(OpKind::FusedMatMulBiasAct), AmpOpClass::LowPrecision);
  EXPECT_EQ(amp_op_class(OpKind::Softmax), AmpOpClass::Sensitive);
  EXPECT_EQ(amp_op_class(OpKind::ReduceMax), AmpOpClass::Sensitive);  // from kReduction
  EXPECT_EQ(amp_op_class(OpKind::ScatterAdd), AmpOpClass::Sensitive);
  EXPECT_EQ(amp_op_class(OpKind::Transpose), AmpOpClass::DataMovement);  // from kShapeOp
  EXPECT_EQ(amp_op_class(OpKind::Tanh), AmpOpClass::Default);
  EXPECT_EQ(amp_op_class(OpKind::Convert), AmpOpClass::Typed);
  EXPECT_EQ(amp_op_class(OpKind::Constant), AmpOpClass::Typed);
  EXPECT_EQ(amp_op_class_name(AmpOpClass::DataMovement), "data_movement");
  // Collectives: sums across devices are sensitive, max / min / gather / exchange move data.
  AttrMap r;
  for (const char* reduce : {"sum", "mean", "max", "min"}) {
    r.set("reduce", std::string(reduce));
    bool moves = std::string(reduce) == "max" || std::string(reduce) == "min";
    EXPECT_EQ(amp_node_class(OpKind::AllReduce, r),
              moves ? AmpOpClass::DataMovement : AmpOpClass::Sensitive)
        << reduce;
  }
  EXPECT_EQ(amp_op_class(OpKind::AllReduce), AmpOpClass::Sensitive);
  EXPECT_EQ(amp_op_class(OpKind::ReduceScatter), AmpOpClass::Sensitive);
  EXPECT_EQ(amp_op_class(OpKind::AllGather), AmpOpClass::DataMovement);
  EXPECT_EQ(amp_op_class(OpKind::AllToAll), AmpOpClass::DataMovement);
  EXPECT_EQ(amp_node_class(OpKind::Tanh, {}), AmpOpClass::Default);
}

// The standard pipeline's output graph under the auto policies: the collectives that sum
// across devices (all_reduce sum / mean, reduce_scatter) get f32 operands even from a bf16
// value, and give the declared dtype back after one rounding; all_reduce max / min, all_gather
// and all_to_all run on the bf16 value as it is (no convert around them). Under always-bf16
// every collective runs in bf16.
TEST(Amp, CollectivesInThePipelinesOutputGraph) {
  Graph g("collectives");
  Value x = g.input("x", DType::bf16, Shape{4, 8});
  AttrMap all = collective_attrs({}, "i", 4);
  auto with = [&](const char* k, Attr v) {
    AttrMap a = all;
    a.set(k, std::move(v));
    return a;
  };
  std::vector<Value> outs;
  for (const char* reduce : {"sum", "mean", "max", "min"})
    outs.push_back(g.emit1(OpKind::AllReduce, {x}, with("reduce", std::string(reduce))));
  outs.push_back(g.emit1(OpKind::ReduceScatter, {x}, with("scatter_dimension", int64_t{1})));
  outs.push_back(g.emit1(OpKind::AllGather, {x}, with("axis", int64_t{0})));
  AttrMap a2a = with("split_axis", int64_t{1});
  a2a.set("concat_axis", int64_t{0});
  outs.push_back(g.emit1(OpKind::AllToAll, {x}, a2a));
  g.set_outputs(outs);
  for (PrecisionMode mode :
       {PrecisionMode::AutoMixedBf16, PrecisionMode::AutoMixedF16, PrecisionMode::AlwaysBf16}) {
    SCOPED_TRACE(std::string(precision_mode_name(mode)));
    PipelineOptions o;
    o.precision = policy(mode);
    Graph out = run_standard_pipeline(g, o).graph;
    int seen = 0;
    for (const Node& n : out.nodes()) {
      if (!op_info(n.op).has(kCollective)) continue;
      ++seen;
      bool sums = n.op == OpKind::ReduceScatter ||
                  (n.op == OpKind::AllReduce && (n.attrs.get_string("reduce") == "sum" ||
                                                 n.attrs.get_string("reduce") == "mean"));
      DType want = sums && mode != PrecisionMode::AlwaysBf16 ? DType::f32 : DType::bf16;
      EXPECT_EQ(out.dtype(n.operands[0]), want) << op_name(n.op) << " %" << n.name;
      EXPECT_EQ(n.results[0].dtype, want) << op_name(n.op) << " %" << n.name;
    }
    EXPECT_EQ(seen, 7);
    for (Value v : out.outputs()) EXPECT_EQ(out.dtype(v), DType::bf16);  // signatures kept
  }
}

TEST(Amp, PolicyTextRoundTrips) {
  for (int m = 0; m < 5; ++m) {
    PrecisionPolicy p = policy(static_cast<PrecisionMode>(m));
    EXPECT_EQ(parse_precision_policy(to_string(p)), p);
  }
  PrecisionPolicy p = parse_precision_policy("auto-mixed-bf16,softmax=bf16,matmul=f32");
  EXPECT_EQ(p.mode, PrecisionMode::AutoMixedBf16);
  EXPECT_EQ(p.overrides.at(OpKind::MatMul), DType::f32);
  EXPECT_EQ(p.overrides.at(OpKind::Softmax), DType::bf16);
  EXPECT_EQ(to_string(p), "auto-mixed-bf16,matmul=f32,softmax=bf16");
  EXPECT_EQ(parse_precision_policy(to_string(p)), p);
  EXPECT_TRUE(p.is_auto());
  EXPECT_EQ(p.low_dtype(), DType::bf16);
  EXPECT_EQ(policy(PrecisionMode::AlwaysF32).low_dtype(), DType::f32);
}

TEST(Amp, PolicyParseErrors) {
  EXPECT_EQ(error_of([] { parse_precision_policy("mixed-bf16"); }),
            "unknown precision policy 'mixed-bf16'; expected one of always-f32, always-f16, "
            "always-bf16, auto-mixed-f16, auto-mixed-bf16");
  EXPECT_EQ(error_of([] { parse_precision_policy(""); }),
            "unknown precision policy ''; expected one of always-f32, always-f16, always-bf16, "
            "auto-mixed-f16, auto-mixed-bf16");
  EXPECT_EQ(error_of([] { parse_precision_policy("always-f16,softmax"); }),
            "precision override 'softmax' must have the form op=dtype");
  EXPECT_EQ(error_of([] { parse_precision_policy("always-f16,=f32"); }),
            "precision override '=f32' must have the form op=dtype");
  EXPECT_EQ(error_of([] { parse_precision_policy("always-f16,softmaxx=f32"); }),
            "precision override 'softmaxx=f32': unknown op 'softmaxx'");
  EXPECT_EQ(error_of([] { parse_precision_policy("always-f16,softmax=i32"); }),
            "precision override 'softmax=i32': dtype must be f32, f16 or bf16, found 'i32'");
  EXPECT_EQ(error_of([] { parse_precision_policy("always-f16,softmax=f64"); }),
            "precision override 'softmax=f64': dtype must be f32, f16 or bf16, found 'f64'");
  EXPECT_EQ(error_of([] { parse_precision_policy("always-f16,convert=f32"); }),
            "precision override 'convert=f32': op 'convert' has typed semantics and cannot be "
            "re-typed");
  EXPECT_EQ(error_of([] { parse_precision_policy("always-f16,exp=f32,exp=bf16"); }),
            "precision override 'exp=bf16': op 'exp' given twice");
  EXPECT_EQ(error_of([] { parse_precision_policy("auto-mixed-bf16,"); }),
            "precision override '' must have the form op=dtype");
}

TEST(Amp, PassRejectsInvalidOverrides) {
  PrecisionPolicy p = policy(PrecisionMode::AutoMixedF16);
  p.overrides[OpKind::Iota] = DType::f16;
  EXPECT_EQ(error_of([&] { create_amp_pass(p); }),
            "amp pass override for 'iota': op 'iota' has typed semantics and cannot be re-typed");
  p.overrides = {{OpKind::Exp, DType::i8}};
  EXPECT_EQ(error_of([&] { create_amp_pass(p); }),
            "amp pass override for 'exp': dtype must be f32, f16 or bf16, found 'i8'");
}

TEST(Amp, PassName) { EXPECT_EQ(create_amp_pass({})->name(), "amp"); }

}  // namespace
}  // namespace rlx
