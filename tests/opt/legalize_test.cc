// Legalization for a fake backend: legal result, semantics, dispatch report counts and text,
// policies and overrides, error messages, RLX_KERNEL_DISPATCH and RLX_DISPATCH_REPORT.
#include "rlx/opt/legalize.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "../common/test_util.h"
#include "random_graph.h"
#include "rlx/ir/evaluator.h"

namespace rlx {
namespace {

using ::rlx::testing::all_close;
using ::rlx::testing::error_of;
using ::rlx::testing::random_tensor;
using Counts = std::map<OpKind, DispatchCounts>;

DispatchOptions with_policy(KernelDispatch policy) {
  DispatchOptions o;
  o.policy = policy;
  return o;
}

DispatchCounts native(int n) { return {n, 0, 0}; }
DispatchCounts decomposed(int n) { return {0, n, 0}; }
DispatchCounts missing(int n) { return {0, 0, n}; }

// The primitives gelu and layer_norm decompose into (f32), but neither composite.
const std::set<OpKind> kPrimitives = {OpKind::Add,       OpKind::Sub,   OpKind::Mul,
                                      OpKind::Div,       OpKind::Erf,   OpKind::Rsqrt,
                                      OpKind::ReduceSum, OpKind::MatMul};

// Sets an environment variable for one scope and restores the previous state.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old != nullptr) old_ = old;
    had_ = old != nullptr;
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// Every non-data node of `g` is an op of `supported`.
::testing::AssertionResult only_claimed(const Graph& g, const std::set<OpKind>& supported) {
  for (const Node& n : g.nodes()) {
    if (n.op == OpKind::Input || n.op == OpKind::Param || n.op == OpKind::Constant) continue;
    if (!supported.contains(n.op))
      return ::testing::AssertionFailure()
             << "unclaimed op '" << op_name(n.op) << "' at %" << n.name << " in\n"
             << g.to_string();
  }
  return ::testing::AssertionSuccess();
}

TensorMap random_feeds(const Graph& g, uint64_t seed) {
  TensorMap feeds;
  for (const Node& n : g.nodes())
    if (n.op == OpKind::Input || n.op == OpKind::Param)
      feeds[n.name] = random_tensor(n.results[0].dtype, n.results[0].shape, seed++);
  return feeds;
}

// `after` evaluates to the outputs of `before` on random feeds (f32: a few ulp per rounding of
// the decomposition's intermediates).
void expect_same_outputs(const Graph& before, const Graph& after, uint64_t seed = 7) {
  ASSERT_TRUE(after.verify().empty()) << after.to_string();
  TensorMap feeds = random_feeds(before, seed);
  auto want = evaluate(before, feeds);
  auto got = evaluate(after, feeds);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], 1e-5, 1e-6)) << "output " << i;
}

// y = gelu(gelu(matmul(x, w))).
Graph gelu_graph() {
  Graph g("mlp");
  Value x = g.input("x", DType::f32, {4, 8});
  Value w = g.param("w", DType::f32, {8, 8});
  g.set_outputs({g.gelu(g.gelu(g.matmul(x, w)))});
  return g;
}

// y = layer_norm(x, scale, bias) + x.
Graph layer_norm_graph() {
  Graph g("ln");
  Value x = g.input("x", DType::f32, {3, 16});
  Value s = g.param("scale", DType::f32, {16});
  Value b = g.param("bias", DType::f32, {16});
  g.set_outputs({g.add(g.layer_norm(x, s, b), x)});
  return g;
}

TEST(Legalize, DecomposesUnclaimedGeluIntoClaimedPrimitives) {
  Graph g = gelu_graph();
  DispatchReport report;
  Graph out = legalize(g, kPrimitives, {}, "fake", &report);
  EXPECT_TRUE(only_claimed(out, kPrimitives));
  expect_same_outputs(g, out);
  // Each gelu is 0.5 * x * (1 + erf(x / sqrt 2)): one div, erf and add, two muls.
  EXPECT_EQ(report.ops, (Counts{{OpKind::Erf, native(2)},
                                {OpKind::Gelu, decomposed(2)},
                                {OpKind::Add, native(2)},
                                {OpKind::Mul, native(4)},
                                {OpKind::Div, native(2)},
                                {OpKind::MatMul, native(1)}}));
  EXPECT_EQ(report.backend, "fake");
  EXPECT_TRUE(report.legal());
  EXPECT_EQ(report.at(OpKind::Gelu), decomposed(2));
  EXPECT_EQ(report.at(OpKind::TopK), DispatchCounts{});
}

TEST(Legalize, ReportTableIsAligned) {
  DispatchReport report;
  legalize(gelu_graph(), kPrimitives, {}, "fake", &report);
  EXPECT_EQ(report.to_string(),
            "dispatch report for backend 'fake'\n"
            "op      native  decomposed  missing\n"
            "erf          2           0        0\n"
            "gelu         0           2        0\n"
            "add          2           0        0\n"
            "mul          4           0        0\n"
            "div          2           0        0\n"
            "matmul       1           0        0\n"
            "total       11           2        0\n");
}

// Text in, text out: the decomposition is spliced in place, other names are kept.
TEST(Legalize, TextInTextOut) {
  Graph g = Graph::parse(R"(graph @main {
    %x = input : f32[4]
    %r = relu %x : f32[4]
    %n = neg %r : f32[4]
    return %n
  })");
  Graph want = Graph::parse(R"(graph @main {
    %x = input : f32[4]
    %0 = constant {value=dense<f32[]: 0.0>} : f32[]
    %1 = max %x, %0 : f32[4]
    %n = neg %1 : f32[4]
    return %n
  })");
  EXPECT_EQ(legalize(g, {OpKind::Max, OpKind::Neg}, {}, "fake").to_string(), want.to_string());
}

TEST(Legalize, ClaimedCompositeRunsNativelyAndGraphIsUnchanged) {
  Graph g = layer_norm_graph();
  DispatchReport report;
  Graph out = legalize(g, {OpKind::LayerNorm, OpKind::Add}, {}, "fake", &report);
  EXPECT_EQ(out, g);
  EXPECT_EQ(report.ops, (Counts{{OpKind::Add, native(1)}, {OpKind::LayerNorm, native(1)}}));
}

TEST(Legalize, LeavesAreAlwaysLegal) {
  Graph g;
  Value x = g.input("x", DType::f32, {2});
  Value p = g.param("p", DType::f32, {2});
  Value c = g.scalar(1.0, DType::f32);
  g.set_outputs({x, p, c});
  DispatchReport report;
  EXPECT_EQ(legalize(g, {}, {}, "empty", &report), g);
  EXPECT_TRUE(report.ops.empty());
}

// iota is a leaf but computes its value, so a backend has to claim it.
TEST(Legalize, IotaMustBeClaimed) {
  Graph g;
  Value i = g.iota(DType::i32, {4}, 0);
  g.set_outputs({i});
  EXPECT_EQ(error_of([&] { legalize(g, {}, {}, "empty"); }),
            "backend 'empty' cannot run: iota (node %" + g.node(i).name + ")");
  EXPECT_NO_THROW(legalize(g, {OpKind::Iota}, {}, "fake"));
}

TEST(Legalize, ForceCommonDecomposesClaimedCompositesRecursively) {
  Graph g = layer_norm_graph();
  std::set<OpKind> supported = kPrimitives;
  supported.insert({OpKind::LayerNorm, OpKind::ReduceMean});
  DispatchReport report;
  Graph out = legalize(g, supported, with_policy(KernelDispatch::ForceCommon), "fake", &report);
  for (const Node& n : out.nodes()) EXPECT_FALSE(op_info(n.op).has(kComposite)) << n.name;
  expect_same_outputs(g, out);
  // layer_norm -> two reduce_mean (each reduce_sum / n), sub, mul(c, c), add eps, rsqrt, two
  // muls, add bias; plus the graph's own add.
  EXPECT_EQ(report.ops, (Counts{{OpKind::Rsqrt, native(1)},
                                {OpKind::Add, native(3)},
                                {OpKind::Sub, native(1)},
                                {OpKind::Mul, native(3)},
                                {OpKind::Div, native(2)},
                                {OpKind::ReduceSum, native(2)},
                                {OpKind::ReduceMean, decomposed(2)},
                                {OpKind::LayerNorm, decomposed(1)}}));
}

// A primitive cannot be decomposed: under force_common it runs natively when claimed and is
// missing otherwise.
TEST(Legalize, ForceCommonKeepsClaimedPrimitivesAndReportsUnclaimedOnes) {
  Graph g;
  Value x = g.input("x", DType::f32, {4});
  Value t = g.emit1(OpKind::Tanh, {x}, {}, "t");
  Value e = g.emit1(OpKind::Exp, {t}, {}, "e");
  g.set_outputs({e});
  DispatchOptions force_common = with_policy(KernelDispatch::ForceCommon);
  DispatchReport report;
  Graph out = legalize(g, {OpKind::Tanh, OpKind::Exp}, force_common, "fake", &report);
  EXPECT_EQ(out, g);
  EXPECT_EQ(report.ops, (Counts{{OpKind::Exp, native(1)}, {OpKind::Tanh, native(1)}}));
  EXPECT_EQ(error_of([&] { legalize(g, {OpKind::Tanh}, force_common, "fake"); }),
            "backend 'fake' cannot run: exp (node %e)");
}

TEST(Legalize, ForceNativeFailsInsteadOfDecomposing) {
  Graph g;
  Value x = g.input("x", DType::f32, {2, 8});
  Value s = g.param("s", DType::f32, {8});
  Value b = g.param("b", DType::f32, {8});
  Value ln = g.emit1(OpKind::LayerNorm, {x, s, b}, {}, "ln");
  Value ge = g.emit1(OpKind::Gelu, {ln}, {}, "g");
  Value r = g.emit1(OpKind::Relu, {ge}, {}, "r");
  g.set_outputs({g.emit1(OpKind::Add, {r, x}, {}, "sum")});
  DispatchOptions force_native = with_policy(KernelDispatch::ForceNative);
  std::set<OpKind> supported = kPrimitives;
  supported.insert(OpKind::Relu);
  DispatchReport report;
  EXPECT_EQ(error_of([&] { legalize(g, supported, force_native, "fake", &report); }),
            "backend 'fake' cannot run: gelu (node %g, kept by force_native), layer_norm (node "
            "%ln, kept by force_native)");
  // The report is filled on failure too.
  EXPECT_EQ(report.ops, (Counts{{OpKind::Relu, native(1)},
                                {OpKind::Gelu, missing(1)},
                                {OpKind::Add, native(1)},
                                {OpKind::LayerNorm, missing(1)}}));
  EXPECT_FALSE(report.legal());
  // Claimed, the same graph is legal as it is.
  supported.insert({OpKind::LayerNorm, OpKind::Gelu});
  EXPECT_EQ(legalize(g, supported, force_native, "fake"), g);
}

// Overrides beat the default in both directions.
TEST(Legalize, PerOpOverrides) {
  Graph g = layer_norm_graph();
  Value y = g.outputs()[0];
  g.set_outputs({g.gelu(y)});
  std::set<OpKind> supported = kPrimitives;
  supported.insert({OpKind::LayerNorm, OpKind::Gelu, OpKind::ReduceMean});

  // Default prefer_native, gelu forced through its decomposition.
  DispatchOptions opts;
  opts.overrides[OpKind::Gelu] = KernelDispatch::ForceCommon;
  DispatchReport report;
  Graph out = legalize(g, supported, opts, "fake", &report);
  expect_same_outputs(g, out);
  EXPECT_EQ(report.at(OpKind::Gelu), decomposed(1));
  EXPECT_EQ(report.at(OpKind::LayerNorm), native(1));
  EXPECT_EQ(report.at(OpKind::Erf), native(1));

  // Default force_common, layer_norm kept native.
  opts = with_policy(KernelDispatch::ForceCommon);
  opts.overrides[OpKind::LayerNorm] = KernelDispatch::ForceNative;
  out = legalize(g, supported, opts, "fake", &report);
  expect_same_outputs(g, out);
  EXPECT_EQ(report.at(OpKind::Gelu), decomposed(1));
  EXPECT_EQ(report.at(OpKind::LayerNorm), native(1));
  EXPECT_EQ(report.at(OpKind::ReduceMean), DispatchCounts{});

  // force_native on layer_norm only: unclaimed, it fails while gelu is still decomposed.
  supported.erase(OpKind::LayerNorm);
  EXPECT_EQ(error_of([&] { legalize(g, supported, opts, "fake", &report); }),
            "backend 'fake' cannot run: layer_norm (node %" + g.nodes()[3].name +
                ", kept by force_native)");
  EXPECT_EQ(report.at(OpKind::Gelu), decomposed(1));
}

// One error lists every op kind that cannot run, each with its nodes; nodes that come from a
// decomposition are named by the node they were decomposed from.
TEST(Legalize, MissingPrimitivesAreListedInOneError) {
  Graph g;
  Value x = g.input("x", DType::f32, {2, 8});
  Value e = g.emit1(OpKind::Erf, {x}, {}, "e");
  Value g1 = g.emit1(OpKind::Gelu, {e}, {}, "g1");
  Value g2 = g.emit1(OpKind::Gelu, {g1}, {}, "g2");
  auto top = g.emit(OpKind::TopK, {g2}, AttrMap{{"k", int64_t{2}}}, "t");
  Value f = g.emit1(OpKind::Floor, {top[0]}, {}, "f");
  g.set_outputs({f, top[1]});
  std::set<OpKind> supported = {OpKind::Add, OpKind::Mul, OpKind::Div};
  DispatchReport report;
  EXPECT_EQ(error_of([&] { legalize(g, supported, {}, "fake", &report); }),
            "backend 'fake' cannot run: erf (nodes %e, %g1 via gelu, %g2 via gelu), floor (node "
            "%f), top_k (node %t)");
  EXPECT_EQ(report.ops, (Counts{{OpKind::Erf, missing(3)},
                                {OpKind::Floor, missing(1)},
                                {OpKind::Gelu, decomposed(2)},
                                {OpKind::Add, native(2)},
                                {OpKind::Mul, native(4)},
                                {OpKind::Div, native(2)},
                                {OpKind::TopK, missing(1)}}));
}

// fused_matmul_bias_act(gelu) -> add(matmul, bias) + gelu -> dot_general + primitives: three
// levels, every composite counted once.
TEST(Legalize, NestedCompositesAreDecomposedLevelByLevel) {
  Graph g;
  Value x = g.input("x", DType::f32, {4, 8});
  Value w = g.param("w", DType::f32, {8, 6});
  Value b = g.param("b", DType::f32, {6});
  g.set_outputs({g.fused_matmul_bias_act(x, w, b, "gelu")});
  std::set<OpKind> supported = {OpKind::DotGeneral, OpKind::Add, OpKind::Mul, OpKind::Div,
                                OpKind::Erf};
  DispatchReport report;
  Graph out = legalize(g, supported, {}, "fake", &report);
  EXPECT_TRUE(only_claimed(out, supported));
  expect_same_outputs(g, out);
  EXPECT_EQ(report.ops, (Counts{{OpKind::Erf, native(1)},
                                {OpKind::Gelu, decomposed(1)},
                                {OpKind::Add, native(2)},
                                {OpKind::Mul, native(2)},
                                {OpKind::Div, native(1)},
                                {OpKind::DotGeneral, native(1)},
                                {OpKind::MatMul, decomposed(1)},
                                {OpKind::FusedMatMulBiasAct, decomposed(1)}}));
}

// Semantics preserved on generated graphs, for a backend with every primitive (force_common
// leaves no composite) and for one that claims the composites too but not tanh.
TEST(Legalize, RandomGraphsKeepTheirOutputs) {
  std::set<OpKind> primitives, all_but_tanh;
  for (int i = 0; i < kNumOps; ++i) {
    auto op = static_cast<OpKind>(i);
    if (!op_info(op).has(kComposite)) primitives.insert(op);
    if (op != OpKind::Tanh) all_but_tanh.insert(op);
  }
  int decomposed_nodes = 0, with_tanh = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    testing::RandomGraph r = testing::make_random_graph(seed);
    DispatchReport report;
    Graph common =
        legalize(r.graph, primitives, with_policy(KernelDispatch::ForceCommon), "cpu", &report);
    for (const Node& n : common.nodes()) ASSERT_FALSE(op_info(n.op).has(kComposite));
    for (const auto& [op, c] : report.ops) decomposed_nodes += c.decomposed;
    ASSERT_TRUE(common.verify().empty());
    auto want = evaluate(r.graph, r.feeds);
    auto got = evaluate(common, r.feeds);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(all_close(got[i], want[i], 1e-5, 1e-5)) << "output " << i;
    bool has_tanh = false;
    for (const Node& n : r.graph.nodes()) has_tanh = has_tanh || n.op == OpKind::Tanh;
    if (has_tanh) {
      ++with_tanh;
      EXPECT_NE(error_of([&] { legalize(r.graph, all_but_tanh, {}, "no-tanh"); }).find("tanh ("),
                std::string::npos);
    } else {
      EXPECT_EQ(legalize(r.graph, all_but_tanh, {}, "no-tanh"), r.graph);
    }
  }
  // Both branches ran: the generator produces composites, and tanh in some graphs only.
  EXPECT_GT(decomposed_nodes, 100);
  EXPECT_GT(with_tanh, 10);
  EXPECT_LT(with_tanh, 190);
}

TEST(Legalize, PassWrapper) {
  DispatchReport report;
  auto pass = create_legalize_pass(kPrimitives, {}, "fake", &report);
  EXPECT_EQ(pass->name(), "legalize");
  Graph g = gelu_graph();
  EXPECT_TRUE(pass->run(g));
  EXPECT_TRUE(only_claimed(g, kPrimitives));
  EXPECT_EQ(report.at(OpKind::Gelu), decomposed(2));
  EXPECT_FALSE(pass->run(g));  // already legal
  EXPECT_EQ(report.at(OpKind::Gelu), DispatchCounts{});
  EXPECT_EQ(report.at(OpKind::Erf), native(2));

  // On failure the graph is unchanged and the report still filled.
  auto strict = create_legalize_pass({OpKind::Add}, {}, "strict", &report);
  Graph before = gelu_graph(), h = before;
  EXPECT_EQ(error_of([&] { strict->run(h); }).rfind("backend 'strict' cannot run: erf (nodes", 0),
            0u);
  EXPECT_EQ(h, before);
  EXPECT_EQ(report.at(OpKind::MatMul), decomposed(1));
  EXPECT_EQ(report.at(OpKind::DotGeneral), missing(1));
  EXPECT_TRUE(create_legalize_pass(kPrimitives, {}, "no-report")->run(h));
}

// A cond whose true branch holds a scan whose body applies gelu; bodies are legalized like the
// top level, nested ones included, and counted in the same report.
const char* kGeluInScanInCond = R"(graph @g {
  %p = input : bool[]
  %x = input : f32[3,2]
  %c = cond %p, %x {branches=[graph @f {
    %a = input : f32[3,2]
    %r = reduce_sum %a {axes=[0], keepdims=false} : f32[2]
    return %r
  }, graph @t {
    %a = input : f32[3,2]
    %z = constant {value=splat<f32[2]: 0.0>} : f32[2]
    %s:2 = scan %z, %a {body=graph @step {
      %h = input : f32[2]
      %v = input : f32[2]
      %e = gelu %v : f32[2]
      %n = add %h, %e : f32[2]
      return %n, %n
    }, num_consts=0, num_carry=1, length=3, reverse=false, unroll=1} : f32[2], f32[3,2]
    return %s#0
  }]} : f32[2]
  return %c
})";

TEST(Legalize, BodiesOfControlFlowAreLegalized) {
  Graph g = Graph::parse(kGeluInScanInCond);
  std::set<OpKind> supported = kPrimitives;
  supported.insert({OpKind::Cond, OpKind::Scan});
  DispatchReport report;
  Graph out = legalize(g, supported, {}, "fake", &report);
  const Node& cond = out.node(out.find("c"));
  const Graph& branch = *cond.attrs.get_graphs("branches")[1];
  const Graph& step = branch.node(branch.find("s")).attrs.get_graph("body");
  EXPECT_TRUE(only_claimed(step, supported)) << step.to_string();
  EXPECT_EQ(report.ops, (Counts{{OpKind::Cond, native(1)},
                                {OpKind::Scan, native(1)},
                                {OpKind::ReduceSum, native(1)},
                                {OpKind::Gelu, decomposed(1)},
                                {OpKind::Erf, native(1)},
                                {OpKind::Add, native(2)},
                                {OpKind::Mul, native(2)},
                                {OpKind::Div, native(1)}}));
  for (bool p : {false, true}) {
    TensorMap feeds = random_feeds(g, 3);
    feeds["p"] = Tensor::full(DType::bool_, Shape{}, p ? 1 : 0);
    auto want = evaluate(g, feeds), got = evaluate(out, feeds);
    EXPECT_TRUE(all_close(got[0], want[0], 1e-5, 1e-6)) << "pred " << p;
  }
  // Nothing to decompose: the graph is returned as it was.
  std::set<OpKind> all = supported;
  all.insert(OpKind::Gelu);
  EXPECT_EQ(legalize(g, all, {}, "fake").to_string(), g.to_string());
}

TEST(Legalize, MissingOpInABodyIsNamedWithItsEnclosingNodes) {
  Graph g = Graph::parse(kGeluInScanInCond);
  std::set<OpKind> supported = kPrimitives;
  supported.insert(OpKind::Cond);
  supported.erase(OpKind::Erf);
  EXPECT_EQ(error_of([&] { legalize(g, supported, {}, "fake"); }),
            "backend 'fake' cannot run: erf (node %e via gelu in %s.body in %c.branches[1]), "
            "scan (node %s in %c.branches[1])");
  supported.insert(OpKind::Scan);
  EXPECT_EQ(error_of([&] { legalize(g, supported, {}, "fake"); }),
            "backend 'fake' cannot run: erf (node %e via gelu in %s.body in %c.branches[1])");
}

TEST(DispatchOptions, ParsesPoliciesAndOverrides) {
  DispatchOptions o = DispatchOptions::parse("");
  EXPECT_EQ(o.policy, KernelDispatch::PreferNative);
  EXPECT_TRUE(o.overrides.empty());
  EXPECT_EQ(DispatchOptions::parse("force_common").policy, KernelDispatch::ForceCommon);
  o = DispatchOptions::parse(" force_native , attention=force_common,layer_norm = prefer_native");
  EXPECT_EQ(o.policy, KernelDispatch::ForceNative);
  EXPECT_EQ(o.overrides,
            (std::map<OpKind, KernelDispatch>{{OpKind::Attention, KernelDispatch::ForceCommon},
                                              {OpKind::LayerNorm, KernelDispatch::PreferNative}}));
  EXPECT_EQ(o.policy_for(OpKind::Attention), KernelDispatch::ForceCommon);
  EXPECT_EQ(o.policy_for(OpKind::Gelu), KernelDispatch::ForceNative);
  o = DispatchOptions::parse("attention=force_common,layer_norm=force_native");
  EXPECT_EQ(o.policy, KernelDispatch::PreferNative);
  EXPECT_EQ(o.overrides.size(), 2u);
  for (KernelDispatch p :
       {KernelDispatch::PreferNative, KernelDispatch::ForceCommon, KernelDispatch::ForceNative})
    EXPECT_EQ(DispatchOptions::parse(kernel_dispatch_name(p)).policy, p);
}

TEST(DispatchOptions, ParseErrorsNameTheWordAndTheAllowedValues) {
  EXPECT_EQ(error_of([] { DispatchOptions::parse("fast"); }),
            "RLX_KERNEL_DISPATCH: unknown policy 'fast' in 'fast' (allowed: prefer_native, "
            "force_common, force_native)");
  EXPECT_EQ(error_of([] { DispatchOptions::parse("gelu=native"); }),
            "RLX_KERNEL_DISPATCH: unknown policy 'native' in 'gelu=native' (allowed: "
            "prefer_native, force_common, force_native)");
  EXPECT_EQ(error_of([] { DispatchOptions::parse("layernorm=force_native"); }),
            "RLX_KERNEL_DISPATCH: unknown op 'layernorm' in 'layernorm=force_native' (expected "
            "an op mnemonic such as layer_norm or attention, then =prefer_native, force_common, "
            "force_native)");
  EXPECT_EQ(error_of([] { DispatchOptions::parse("prefer_native,,gelu=force_common"); }),
            "RLX_KERNEL_DISPATCH: empty entry in 'prefer_native,,gelu=force_common'");
  EXPECT_EQ(error_of([] { DispatchOptions::parse("force_common,prefer_native"); }),
            "RLX_KERNEL_DISPATCH: default policy given twice in 'force_common,prefer_native'");
  EXPECT_EQ(error_of([] { DispatchOptions::parse("gelu=force_common,gelu=force_native"); }),
            "RLX_KERNEL_DISPATCH: op 'gelu' given twice in 'gelu=force_common,gelu=force_native'");
  EXPECT_EQ(error_of([] { DispatchOptions::parse("bogus", "--dispatch"); }),
            "--dispatch: unknown policy 'bogus' in 'bogus' (allowed: prefer_native, force_common, "
            "force_native)");
}

TEST(DispatchOptions, FromEnv) {
  {
    ScopedEnv env("RLX_KERNEL_DISPATCH", nullptr);
    DispatchOptions o = DispatchOptions::from_env();
    EXPECT_EQ(o.policy, KernelDispatch::PreferNative);
    EXPECT_TRUE(o.overrides.empty());
  }
  {
    ScopedEnv env("RLX_KERNEL_DISPATCH", "force_common,layer_norm=force_native");
    DispatchOptions o = DispatchOptions::from_env();
    EXPECT_EQ(o.policy, KernelDispatch::ForceCommon);
    EXPECT_EQ(o.policy_for(OpKind::LayerNorm), KernelDispatch::ForceNative);
    // The environment drives legalization end to end.
    Graph g = layer_norm_graph();
    std::set<OpKind> supported = kPrimitives;
    supported.insert(OpKind::LayerNorm);
    DispatchReport report;
    legalize(g, supported, DispatchOptions::from_env(), "fake", &report);
    EXPECT_EQ(report.at(OpKind::LayerNorm), native(1));
  }
  {
    ScopedEnv env("RLX_KERNEL_DISPATCH", "top_k=sometimes");
    EXPECT_EQ(error_of([] { DispatchOptions::from_env(); }),
              "RLX_KERNEL_DISPATCH: unknown policy 'sometimes' in 'top_k=sometimes' (allowed: "
              "prefer_native, force_common, force_native)");
  }
}

TEST(DispatchReportEnv, PrintsTheReportToStderrWhenAsked) {
  Graph g = gelu_graph();
  DispatchReport report;
  {
    ScopedEnv env("RLX_DISPATCH_REPORT", "1");
    ::testing::internal::CaptureStderr();
    legalize(g, kPrimitives, {}, "fake", &report);
    std::string printed = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(printed, report.to_string());
    EXPECT_NE(printed.find("gelu         0           2        0\n"), std::string::npos);
  }
  {
    // Printed on failure too, before the error is thrown.
    ScopedEnv env("RLX_DISPATCH_REPORT", "1");
    ::testing::internal::CaptureStderr();
    EXPECT_NE(error_of([&] { legalize(g, {OpKind::Add}, {}, "strict", &report); }), "");
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), report.to_string());
    EXPECT_EQ(report.at(OpKind::DotGeneral), missing(1));
  }
  for (const char* off : {"0", "", static_cast<const char*>(nullptr)}) {
    ScopedEnv env("RLX_DISPATCH_REPORT", off);
    ::testing::internal::CaptureStderr();
    legalize(g, kPrimitives, {}, "fake");
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  }
}

}  // namespace
}  // namespace rlx
