// Semantics preserved: every pass alone, and the standard pipeline, on hundreds of random
// well-typed graphs, evaluated by the reference evaluator before and after.
#include "rlx/opt/pipeline.h"

#include <gtest/gtest.h>

#include <functional>

#include "random_graph.h"
#include "rlx/opt/passes.h"

namespace rlx {
namespace {

using testing::all_close;
using testing::make_random_graph;

void expect_same_outputs(const Graph& before, const Graph& after, const TensorMap& feeds,
                         double rtol, double atol) {
  ASSERT_TRUE(after.verify().empty());
  auto want = evaluate(before, feeds);
  auto got = evaluate(after, feeds);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], rtol, atol)) << "output " << i;
}

// Passes that only move, merge or remove computations keep every value to f32 rounding
// (kExact). Passes that swap a composite for its f32 primitive chain (or the reverse) change
// rounding: the reference kernel of a composite computes in double, its decomposition rounds
// each step to f32, and ill-conditioned spots (layer_norm of a nearly constant row, gelu far
// in the tail) amplify that to ~1e-5 absolute (kRounding).
constexpr double kExact = 1e-6, kRounding = 1e-4;

struct NamedPass {
  const char* name;
  std::function<std::unique_ptr<Pass>()> make;
  double tol;
};

TEST(PassesOnRandomGraphs, EachPassPreservesSemantics) {
  std::vector<NamedPass> passes{
      {"dce", [] { return create_dce_pass(); }, kExact},
      {"cse", [] { return create_cse_pass(); }, kExact},
      {"fold-constants", [] { return create_fold_constants_pass(); }, kExact},
      {"simplify", [] { return create_simplify_pass(); }, kExact},
      {"legalize-broadcast", [] { return create_legalize_broadcast_pass(); }, kExact},
      {"fuse-quant-matmul", [] { return create_fuse_quant_matmul_pass(); }, kRounding},
      {"fuse-matmul-bias-act", [] { return create_fuse_matmul_bias_act_pass(); }, kRounding},
      {"fuse-residual-norm", [] { return create_fuse_residual_norm_pass(); }, kRounding},
      {"fuse-attention", [] { return create_fuse_attention_pass(); }, kRounding},
      {"mark-elementwise-regions", [] { return create_mark_elementwise_regions_pass(); }, kExact},
      {"decompose", [] { return create_decompose_pass(); }, kRounding},
  };
  for (const NamedPass& p : passes) {
    int changed = 0;
    for (uint64_t seed = 0; seed < 200; ++seed) {
      SCOPED_TRACE(std::string(p.name) + " seed " + std::to_string(seed));
      auto r = make_random_graph(seed, 16);
      Graph g = r.graph;
      changed += p.make()->run(g) ? 1 : 0;
      expect_same_outputs(r.graph, g, r.feeds, p.tol, p.tol);
    }
    std::printf("%-26s changed %3d of 200 random graphs\n", p.name, changed);
  }
}

TEST(Pipeline, RandomGraphsAllOpsClaimed) {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto r = make_random_graph(seed, 16);
    PipelineResult out = run_standard_pipeline(r.graph, {});
    expect_same_outputs(r.graph, out.graph, r.feeds, kRounding, kRounding);
    EXPECT_TRUE(validate_plan(out.graph, out.plan).empty());
    EXPECT_LE(out.plan.arena_bytes, out.plan.naive_bytes);
  }
}

TEST(Pipeline, RandomGraphsOnAPrimitiveOnlyBackend) {
  PipelineOptions o;
  o.backend = "primitives";
  for (int i = 0; i < kNumOps; ++i)
    if (!op_info(static_cast<OpKind>(i)).has(kComposite))
      o.supported.insert(static_cast<OpKind>(i));
  for (uint64_t seed = 0; seed < 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto r = make_random_graph(seed, 16);
    PipelineResult out = run_standard_pipeline(r.graph, o);
    for (const Node& n : out.graph.nodes())
      EXPECT_FALSE(op_info(n.op).has(kComposite)) << op_name(n.op);
    expect_same_outputs(r.graph, out.graph, r.feeds, kRounding, kRounding);
  }
}

TEST(Pipeline, InvalidGraphAndUnsupportedOpsAreReported) {
  Graph g;
  Value x = g.input("x", DType::f32, {4});
  g.set_outputs({g.erf(x)});
  PipelineOptions o;
  o.backend = "tiny";
  o.supported = {OpKind::Add};
  try {
    run_standard_pipeline(g, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "backend 'tiny' cannot run: erf (node %0)");
  }
}

// Legalization runs before AMP, so the converts AMP inserts must be checked too: a backend
// that does not claim convert gets an error, not a graph it cannot run.
TEST(Pipeline, ConvertsAddedByAmpMustBeClaimed) {
  Graph g;
  Value x = g.input("x", DType::f32, {2, 8});
  Value w = g.param("w", DType::f32, {8, 8});
  g.set_outputs({g.matmul(x, w)});
  PipelineOptions o;
  o.backend = "no-convert";
  for (int i = 0; i < kNumOps; ++i)
    if (static_cast<OpKind>(i) != OpKind::Convert) o.supported.insert(static_cast<OpKind>(i));
  EXPECT_NO_THROW(run_standard_pipeline(g, o));
  o.precision = parse_precision_policy("always-f32");  // nothing to convert on an f32 graph
  EXPECT_NO_THROW(run_standard_pipeline(g, o));
  o.precision = parse_precision_policy("auto-mixed-bf16");
  EXPECT_EQ(testing::error_of([&] { run_standard_pipeline(g, o); }),
            "backend 'no-convert' cannot run: convert (nodes %x.bf16, %w.bf16, %0.f32), added by "
            "precision policy 'auto-mixed-bf16'");
  o.supported.insert(OpKind::Convert);
  EXPECT_NO_THROW(run_standard_pipeline(g, o));
}

TEST(Pipeline, AutoMixedBf16KeepsTheUserDtypes) {
  auto r = make_random_graph(7, 16);
  PipelineOptions o;
  o.precision = parse_precision_policy("auto-mixed-bf16");
  PipelineResult out = run_standard_pipeline(r.graph, o);
  ASSERT_EQ(out.graph.outputs().size(), r.graph.outputs().size());
  for (size_t i = 0; i < r.graph.outputs().size(); ++i)
    EXPECT_EQ(out.graph.type(out.graph.outputs()[i]), r.graph.type(r.graph.outputs()[i]));
  for (int32_t id : out.graph.inputs()) EXPECT_EQ(out.graph.node(id).results[0].dtype, DType::f32);
}

TEST(Pipeline, ForceCommonAttentionIsNotRefused) {
  // q k^T -> softmax -> v written out: fused when attention may run natively, left as
  // primitives (and the attention composite decomposed) under attention=force_common.
  Graph g;
  Value q = g.input("q", DType::f32, {1, 2, 4, 8});
  Value k = g.input("k", DType::f32, {1, 2, 4, 8});
  Value v = g.input("v", DType::f32, {1, 2, 4, 8});
  Value s = g.matmul(q, g.transpose(k, {0, 1, 3, 2}));
  g.set_outputs({g.matmul(g.softmax(s, -1), v)});
  auto count = [](const Graph& x, OpKind op) {
    int n = 0;
    for (const Node& node : x.nodes()) n += node.op == op;
    return n;
  };
  PipelineOptions o;
  EXPECT_EQ(count(run_standard_pipeline(g, o).graph, OpKind::Attention), 1);
  o.dispatch = DispatchOptions::parse("attention=force_common");
  PipelineResult r = run_standard_pipeline(g, o);
  EXPECT_EQ(count(r.graph, OpKind::Attention), 0);
  EXPECT_EQ(count(r.graph, OpKind::Softmax), 1);
}

// always-f16 / always-bf16 round every float value, so a backend that decomposes layer_norm
// and rms_norm gets them decomposed after AMP: their reductions stay f32 and f16
// layer_norm([60000, 60032, 60064, 60096]) is [-1.342, -0.447, 0.447, 1.342] (NumPy in double;
// [-0.816, 0, 0.816, 1.633] with an f16 mean), rms_norm([300] * 4) is 1 (0 with an f16 x^2).
TEST(Pipeline, AlwaysLowPoliciesKeepF32StatisticsOfDecomposedNorms) {
  Graph g("norms");
  Value x = g.input("x", DType::f16, {2, 4});
  Value one = g.constant(Tensor::full(DType::f16, {4}, 1));
  Value zero = g.constant(Tensor::full(DType::f16, {4}, 0));
  g.set_outputs({g.layer_norm(x, one, zero), g.rms_norm(x, one)});
  Tensor xv = Tensor::from_doubles(
      DType::f16, {2, 4}, std::vector<double>{60000, 60032, 60064, 60096, 300, 300, 300, 300});
  const double ln[] = {-1.3416407812590894, -0.44721359375302983, 0.44721359375302983,
                       1.3416407812590894};
  for (const char* policy : {"always-f16", "always-bf16", "always-f32", "auto-mixed-f16"}) {
    PipelineOptions o;
    o.backend = "primitives";
    for (int i = 0; i < kNumOps; ++i)
      if (!op_info(static_cast<OpKind>(i)).has(kComposite))
        o.supported.insert(static_cast<OpKind>(i));
    o.precision = parse_precision_policy(policy);
    PipelineResult r = run_standard_pipeline(g, o);
    int reductions = 0;
    for (const Node& n : r.graph.nodes()) {
      EXPECT_FALSE(op_info(n.op).has(kComposite)) << policy << ": " << op_name(n.op);
      if (n.op == OpKind::ReduceSum) {
        ++reductions;
        EXPECT_EQ(n.results[0].dtype, DType::f32) << policy << ": %" << n.name;
      }
    }
    EXPECT_EQ(reductions, 3) << policy;  // mean, variance, mean square
    EXPECT_EQ(r.report.at(OpKind::LayerNorm).decomposed, 1) << policy;
    EXPECT_EQ(r.report.at(OpKind::RmsNorm).decomposed, 1) << policy;
    std::vector<Tensor> out = evaluate(r.graph, {{"x", xv}});
    // always-bf16 rounds x to bf16 first: 60000.. become 59904 / 60160 (a different row).
    if (std::string(policy) == "always-bf16") continue;
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_NEAR(out[0].get_f64(i), ln[i], 2e-3) << policy << " layer_norm " << i;
      EXPECT_NEAR(out[1].get_f64(4 + i), 1.0, 1e-3) << policy << " rms_norm " << i;
    }
  }
}

// RLX_PRECISION reaches the pipeline only through its options (precision_from_env, which
// Session calls): the pipeline itself reads no environment.
TEST(Pipeline, PrecisionFromTheEnvironment) {
  auto r = make_random_graph(3, 16);
  auto has_f16 = [](const Graph& g) {
    for (const Node& n : g.nodes())
      for (const TensorType& t : n.results)
        if (t.dtype == DType::f16) return true;
    return false;
  };
  setenv("RLX_PRECISION", "always-f16", 1);
  PipelineOptions from_env;
  from_env.precision = precision_from_env();
  EXPECT_EQ(from_env.precision, parse_precision_policy("always-f16"));
  EXPECT_TRUE(has_f16(run_standard_pipeline(r.graph, from_env).graph));
  EXPECT_FALSE(has_f16(run_standard_pipeline(r.graph, {}).graph));
  setenv("RLX_PRECISION", "always-f17", 1);
  EXPECT_NE(testing::error_of([&] { precision_from_env(); }).find("RLX_PRECISION: "),
            std::string::npos);
  EXPECT_EQ(testing::error_of([&] { run_standard_pipeline(r.graph, {}); }), "");
  setenv("RLX_PRECISION", "", 1);
  EXPECT_EQ(precision_from_env(), std::nullopt);
  unsetenv("RLX_PRECISION");
  EXPECT_EQ(precision_from_env(), std::nullopt);
}

TEST(Pipeline, OnStageSeesTheGraphAfterEachPass) {
  Graph g("stages");
  Value x = g.input("x", DType::f32, Shape{2, 4});
  Value y = g.softmax(g.add(x, g.scalar(0.0, DType::f32)), -1);
  g.add(x, x);  // dead: DCE removes it
  g.set_outputs({y});
  PipelineOptions o;
  std::vector<std::pair<std::string, std::string>> stages;
  o.on_stage = [&](std::string_view pass, const Graph& after) {
    stages.emplace_back(std::string(pass), after.to_string());
  };
  PipelineResult r = run_standard_pipeline(g, o);
  ASSERT_FALSE(stages.empty());
  EXPECT_EQ(stages.front().first, "legalize");
  EXPECT_NE(stages.front().second.find("add"), std::string::npos);
  EXPECT_EQ(stages.back().second, r.graph.to_string());  // the last stage is the result
  std::vector<std::string> names;
  for (const auto& s : stages) names.push_back(s.first);
  std::vector<std::string> timed;
  for (const PassTiming& t : r.timings)
    if (t.pass != "memory-plan") timed.push_back(t.pass);
  EXPECT_EQ(names, timed);  // one call per pass run, in order
}

}  // namespace
}  // namespace rlx
