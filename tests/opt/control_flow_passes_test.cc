// The passes on graphs holding control flow (cond, while_loop, scan): each treats the op as an
// opaque pure node — DCE drops it only when no result is used, CSE merges identical ones,
// fold-constants never runs a body, AMP leaves its typed carries alone (and re-types inside
// the bodies, idempotently) — so the standard pipeline keeps the values; legalizing for a
// backend without the op names it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "../common/test_util.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/passes.h"
#include "rlx/opt/pipeline.h"
#include "rlx/opt/precision.h"

namespace rlx {
namespace {

using testing::all_close;
using testing::error_of;
using testing::random_tensor;

int count(const Graph& g, OpKind op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == op;
  return n;
}

// An RNN-style scan: consts w f32[4,4], carry h f32[2,4], xs f32[6,2,4];
// h' = tanh(x + h . w), y = h' * 2.
Graph rnn_body() {
  Graph b("cell");
  Value w = b.input("w", DType::f32, {4, 4});
  Value h = b.input("h", DType::f32, {2, 4});
  Value x = b.input("x", DType::f32, {2, 4});
  Value n = b.tanh(b.add(x, b.matmul(h, w)));
  b.set_outputs({n, b.mul(n, b.scalar(2, DType::f32))});
  return b;
}

// while sum(x) < limit: x = x * 1.5 + 0.25 (carry x f32[2,4], const limit f32[]).
std::vector<Value> growth_loop(Graph& g, Value x, Value limit) {
  Graph c("c");
  Value cl = c.input("limit", DType::f32, {});
  Value cx = c.input("x", DType::f32, {2, 4});
  c.set_outputs({c.lt(c.reduce_sum(cx, {0, 1}), cl)});
  Graph b("b");
  b.input("limit", DType::f32, {});
  Value bx = b.input("x", DType::f32, {2, 4});
  b.set_outputs({b.add(b.mul(bx, b.scalar(1.5, DType::f32)), b.scalar(0.25, DType::f32))});
  return g.while_loop(std::move(c), std::move(b), {x}, {limit}, 50);
}

// A graph with work for every pass around the control flow: foldable constants feeding a scan,
// a duplicate scan (CSE), a dead scan and a dead loop (DCE), elementwise chains after them
// (fusion), a cond choosing between them.
Graph mixed_graph() {
  Graph g("mixed");
  Value xs = g.input("xs", DType::f32, {6, 2, 4});
  Value h0 = g.input("h0", DType::f32, {2, 4});
  Value w = g.param("w", DType::f32, {4, 4});
  Value p = g.input("p", DType::bool_, {});
  Value half = g.add(g.scalar(0.25, DType::f32), g.scalar(0.25, DType::f32));  // folds
  Value ws = g.mul(w, half);
  std::vector<Value> a = g.scan(rnn_body(), {h0}, {xs}, {ws});
  std::vector<Value> dup = g.scan(rnn_body(), {h0}, {xs}, {ws});
  g.scan(rnn_body(), {h0}, {g.neg(xs)}, {ws});    // dead
  growth_loop(g, h0, g.scalar(1e3, DType::f32));  // dead
  std::vector<Value> loop = growth_loop(g, a[0], g.add(half, g.scalar(20, DType::f32)));
  Value e1 = g.exp(g.neg(g.abs(a[1])));
  Value e2 = g.sub(g.tanh(dup[1]), g.scalar(1, DType::f32));
  Graph t("t"), f("f");
  {
    Value ta = t.input("a", DType::f32, {6, 2, 4});
    Value tb = t.input("b", DType::f32, {6, 2, 4});
    t.set_outputs({t.add(ta, tb)});
    Value fa = f.input("a", DType::f32, {6, 2, 4});
    f.input("b", DType::f32, {6, 2, 4});
    f.set_outputs({f.neg(fa)});
  }
  std::vector<Value> c = g.cond(p, std::move(t), std::move(f), {e1, e2});
  g.set_outputs({c[0], loop[0], g.mul(dup[0], g.scalar(3, DType::f32))});
  return g;
}

TensorMap mixed_feeds(bool p) {
  return {{"xs", random_tensor(DType::f32, {6, 2, 4}, 1)},
          {"h0", random_tensor(DType::f32, {2, 4}, 2)},
          {"w", random_tensor(DType::f32, {4, 4}, 3, -0.5, 0.5)},
          {"p", Tensor::from_ints(DType::bool_, {}, std::vector<int64_t>{p ? 1 : 0})}};
}

void expect_same_values(const Graph& a, const Graph& b, double tol) {
  for (bool p : {false, true}) {
    SCOPED_TRACE(p);
    std::vector<Tensor> x = evaluate(a, mixed_feeds(p)), y = evaluate(b, mixed_feeds(p));
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(all_close(y[i], x[i], tol, tol)) << i;
  }
}

TEST(ControlFlowPasses, DceDropsOnlyUnusedControlFlow) {
  Graph g = mixed_graph();
  EXPECT_EQ(count(g, OpKind::Scan), 3);
  EXPECT_EQ(count(g, OpKind::WhileLoop), 2);
  Graph d = g;
  EXPECT_TRUE(create_dce_pass()->run(d));
  EXPECT_EQ(count(d, OpKind::Scan), 2);
  EXPECT_EQ(count(d, OpKind::WhileLoop), 1);
  EXPECT_EQ(count(d, OpKind::Cond), 1);
  EXPECT_TRUE(d.verify().empty());
  expect_same_values(g, d, 0);
}

TEST(ControlFlowPasses, CseMergesIdenticalScans) {
  Graph g = mixed_graph();
  ASSERT_TRUE(create_dce_pass()->run(g));
  Graph c = g;
  EXPECT_TRUE(create_cse_pass()->run(c));
  create_dce_pass()->run(c);
  EXPECT_EQ(count(c, OpKind::Scan), 1);
  expect_same_values(g, c, 0);
  // Scans that differ only in their body stay apart.
  Graph h("h");
  Value xs = h.input("xs", DType::f32, {3});
  Graph b1("s"), b2("s");
  for (Graph* b : {&b1, &b2}) {
    Value c0 = b->input("c", DType::f32, {});
    Value x = b->input("x", DType::f32, {});
    b->set_outputs({b == &b1 ? b->add(c0, x) : b->mul(c0, x)});
  }
  Value z = h.scalar(1, DType::f32);
  h.set_outputs({h.scan(b1, {z}, {xs})[0], h.scan(b2, {z}, {xs})[0]});
  EXPECT_FALSE(create_cse_pass()->run(h));
  EXPECT_EQ(count(h, OpKind::Scan), 2);
}

TEST(ControlFlowPasses, FoldConstantsNeverRunsABody) {
  Graph g("consts");
  Value x = g.constant(Tensor::from_doubles(DType::f32, {3}, std::vector<double>{1, 2, 3}));
  Graph b("s");
  Value c0 = b.input("c", DType::f32, {});
  Value xi = b.input("x", DType::f32, {});
  b.set_outputs({b.add(c0, xi)});
  Value r = g.scan(std::move(b), {g.scalar(0, DType::f32)}, {x})[0];
  g.set_outputs({g.add(r, g.add(g.scalar(1, DType::f32), g.scalar(1, DType::f32)))});
  Graph f = g;
  EXPECT_TRUE(create_fold_constants_pass()->run(f));  // 1 + 1 folds
  EXPECT_EQ(count(f, OpKind::Scan), 1);               // the scan stays
  EXPECT_EQ(evaluate(f, {})[0].get_f64(0), 8);
}

TEST(ControlFlowPasses, AmpLeavesCarriesTyped) {
  Graph g = mixed_graph();
  for (const char* mode : {"always-bf16", "auto-mixed-f16"}) {
    SCOPED_TRACE(mode);
    Graph a = g;
    create_amp_pass(parse_precision_policy(mode))->run(a);
    EXPECT_TRUE(a.verify().empty());
    EXPECT_EQ(count(a, OpKind::Scan), 3);
    for (const Node& n : a.nodes()) {
      if (n.op != OpKind::Scan && n.op != OpKind::WhileLoop && n.op != OpKind::Cond) continue;
      for (const TensorType& t : n.results) EXPECT_EQ(t.dtype, DType::f32) << n.name;
    }
    expect_same_values(g, a, 5e-2);
  }
}

TEST(ControlFlowPasses, StandardPipelineKeepsTheValues) {
  Graph g = mixed_graph();
  PipelineOptions o;  // the reference backend: every op supported
  PipelineResult r = run_standard_pipeline(g, o);
  EXPECT_EQ(count(r.graph, OpKind::Scan), 1);
  EXPECT_EQ(count(r.graph, OpKind::WhileLoop), 1);
  EXPECT_EQ(count(r.graph, OpKind::Cond), 1);
  EXPECT_GE(count(r.graph, OpKind::ElementwiseRegion), 1);
  EXPECT_TRUE(r.graph.verify().empty());
  expect_same_values(g, r.graph, 1e-6);
  o.precision = parse_precision_policy("auto-mixed-bf16");
  expect_same_values(g, run_standard_pipeline(g, o).graph, 5e-2);
}

// ---- AMP inside bodies

// h . w for h f32[2,4], w f32[4,4], as a dot_general (preferred absent).
Value dot(Graph& b, Value h, Value w) { return b.dot_general(h, w, {}, {}, {1}, {0}); }

// An RNN cell with a dot_general: consts w, carry h, x_t; h' = tanh(h . w + x), y = exp(h').
Graph dot_cell(const std::string& name) {
  Graph b(name);
  Value w = b.input("w", DType::f32, {4, 4});
  Value h = b.input("h", DType::f32, {2, 4});
  Value x = b.input("x", DType::f32, {2, 4});
  Value n = b.tanh(b.add(dot(b, h, w), x));
  b.set_outputs({n, b.exp(n)});
  return b;
}

// A dot_general in the body of each construct, at two nesting levels: a scan of dot_cell; a
// while_loop h = tanh(h . w) while sum(h * h) > 1e-3 (at most 4 trips); a cond whose true branch
// scans dot_cell (nested) and whose false branch is h . w.
Graph amp_bodies_graph() {
  Graph g("amp_bodies");
  Value w = g.input("w", DType::f32, {4, 4});
  Value h0 = g.input("h0", DType::f32, {2, 4});
  Value xs = g.input("xs", DType::f32, {5, 2, 4});
  Value p = g.input("p", DType::bool_, {});
  std::vector<Value> s = g.scan(dot_cell("cell"), {h0}, {xs}, {w});
  Graph c("c"), b("b");
  {
    c.input("w", DType::f32, {4, 4});
    Value ch = c.input("h", DType::f32, {2, 4});
    c.set_outputs({c.lt(c.scalar(1e-3, DType::f32), c.reduce_sum(c.mul(ch, ch), {0, 1}))});
    Value bw = b.input("w", DType::f32, {4, 4});
    Value bh = b.input("h", DType::f32, {2, 4});
    b.set_outputs({b.tanh(dot(b, bh, bw))});
  }
  std::vector<Value> l = g.while_loop(std::move(c), std::move(b), {h0}, {w}, 4);
  Graph t("t"), f("f");
  {
    Value tw = t.input("w", DType::f32, {4, 4});
    Value th = t.input("h", DType::f32, {2, 4});
    Value tx = t.input("xs", DType::f32, {5, 2, 4});
    t.set_outputs({t.scan(dot_cell("inner"), {th}, {tx}, {tw})[0]});
    Value fw = f.input("w", DType::f32, {4, 4});
    Value fh = f.input("h", DType::f32, {2, 4});
    f.input("xs", DType::f32, {5, 2, 4});
    f.set_outputs({dot(f, fh, fw)});
  }
  std::vector<Value> k = g.cond(p, std::move(t), std::move(f), {w, s[0], xs});
  g.set_outputs({s[0], s[1], l[0], k[0]});
  return g;
}

TensorMap amp_bodies_feeds(bool p) {
  return {{"w", random_tensor(DType::f32, {4, 4}, 21, -0.8, 0.8)},
          {"h0", random_tensor(DType::f32, {2, 4}, 22)},
          {"xs", random_tensor(DType::f32, {5, 2, 4}, 23)},
          {"p", Tensor::from_ints(DType::bool_, {}, std::vector<int64_t>{p ? 1 : 0})}};
}

// Calls fn(body) for every body of the control-flow nodes of `g`, nested ones included (a
// body before the bodies inside it).
void for_each_body(const Graph& g, const std::function<void(const Graph&)>& fn) {
  for (const Node& n : g.nodes()) {
    if (!is_control_flow(n.op)) continue;
    for (const auto& [name, value] : n.attrs.entries()) {
      std::vector<GraphRef> bodies;
      if (const auto* one = std::get_if<GraphRef>(&value)) bodies.push_back(*one);
      if (const auto* list = std::get_if<GraphList>(&value)) bodies = *list;
      for (const GraphRef& body : bodies) {
        fn(*body);
        for_each_body(*body, fn);
      }
    }
  }
}

// The dtypes of each body's inputs and outputs, and of each control-flow node's results, in
// walk order: what AMP must keep.
std::vector<DType> region_signatures(const Graph& g) {
  std::vector<DType> out;
  for (const Node& n : g.nodes())
    if (is_control_flow(n.op))
      for (const TensorType& t : n.results) out.push_back(t.dtype);
  for_each_body(g, [&](const Graph& b) {
    for (int32_t id : b.inputs()) out.push_back(b.node(id).results[0].dtype);
    for (Value v : b.outputs()) out.push_back(b.dtype(v));
    for (const Node& n : b.nodes())
      if (is_control_flow(n.op))
        for (const TensorType& t : n.results) out.push_back(t.dtype);
  });
  return out;
}

std::string bodies_text(const Graph& g) {
  std::string s;
  for_each_body(g, [&](const Graph& b) { s += b.to_string(); });
  return s;
}

// Under auto-mixed-bf16 the standard pipeline's AMP reaches every body at every nesting level:
// each body's dot_generals take bf16 operands and accumulate f32 (preferred=f32), its tanh and
// exp (f32 ops of the policy) stay f32, and the body inputs, outputs and control-flow results
// keep f32. On the evaluator the values stay within bf16's tolerance of the f32 graph (h . w
// over 4 terms of |w| <= 0.8 with both operands rounded to bf16, rel. error <= 2^-8 per
// product, through tanh over <= 5 steps: < 3e-2) yet differ from it by more than f32 rounding
// (so bf16 did run).
TEST(ControlFlowPasses, AmpRunsInsideBodies) {
  Graph g = amp_bodies_graph();
  PipelineOptions o;
  o.precision = parse_precision_policy("auto-mixed-bf16");
  Graph a = run_standard_pipeline(g, o).graph;
  EXPECT_TRUE(a.verify().empty());
  // The pipeline without a policy drops the same unused branch inputs (DCE).
  EXPECT_EQ(region_signatures(a), region_signatures(run_standard_pipeline(g, {}).graph));
  int dots = 0, bodies = 0;
  for_each_body(a, [&](const Graph& b) {
    ++bodies;
    for (const Node& n : b.nodes()) {
      if (n.op == OpKind::DotGeneral) {
        ++dots;
        EXPECT_EQ(b.dtype(n.operands[0]), DType::bf16) << b.to_string();
        EXPECT_EQ(b.dtype(n.operands[1]), DType::bf16) << b.to_string();
        EXPECT_EQ(n.attrs.get_dtype("preferred"), DType::f32) << b.to_string();
        EXPECT_EQ(n.results[0].dtype, DType::f32);
      }
      if (n.op == OpKind::Tanh || n.op == OpKind::Exp) {
        EXPECT_EQ(b.dtype(n.operands[0]), DType::f32) << b.to_string();
      }
    }
  });
  EXPECT_EQ(bodies, 6);  // scan, while cond + body, 2 branches, the scan in a branch
  EXPECT_EQ(dots, 4);
  for (bool p : {false, true}) {
    SCOPED_TRACE(p);
    std::vector<Tensor> want = evaluate(g, amp_bodies_feeds(p)),
                        got = evaluate(a, amp_bodies_feeds(p));
    ASSERT_EQ(got.size(), want.size());
    double max_diff = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(all_close(got[i], want[i], 3e-2, 3e-2)) << i;
      for (int64_t e = 0; e < got[i].numel(); ++e)
        max_diff = std::max(max_diff, std::abs(got[i].get_f64(e) - want[i].get_f64(e)));
    }
    EXPECT_GT(max_diff, 1e-4);
  }
}

// AMP twice gives the same graph, bodies included (the second run changes nothing), under
// each kind of policy; always-f32 leaves an f32 graph's bodies alone; an override applies
// inside bodies (dot_general=f32 keeps them f32); with in_bodies false the bodies stay as they
// were (the CPU backend's pipeline: each body gets AMP in its own compile).
TEST(ControlFlowPasses, AmpInBodiesIsIdempotentAndFollowsThePolicy) {
  const Graph g = amp_bodies_graph();
  for (const char* mode : {"auto-mixed-bf16", "always-bf16", "auto-mixed-f16,tanh=bf16"}) {
    SCOPED_TRACE(mode);
    Graph a = g;
    EXPECT_TRUE(create_amp_pass(parse_precision_policy(mode))->run(a));
    EXPECT_NE(bodies_text(a), bodies_text(g));
    EXPECT_TRUE(a.verify().empty());
    EXPECT_EQ(region_signatures(a), region_signatures(g));
    Graph twice = a;
    EXPECT_FALSE(create_amp_pass(parse_precision_policy(mode))->run(twice));
    EXPECT_EQ(twice.to_string(), a.to_string());
    for (bool p : {false, true}) {
      std::vector<Tensor> x = evaluate(a, amp_bodies_feeds(p)),
                          y = evaluate(twice, amp_bodies_feeds(p));
      for (size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(all_close(y[i], x[i], 0, 0));
    }
  }
  Graph f32 = g;
  EXPECT_FALSE(create_amp_pass(parse_precision_policy("always-f32"))->run(f32));
  EXPECT_EQ(f32.to_string(), g.to_string());

  Graph overridden = g;
  create_amp_pass(parse_precision_policy("auto-mixed-bf16,dot_general=f32"))->run(overridden);
  EXPECT_EQ(bodies_text(overridden), bodies_text(g));

  Graph top_only = g;
  create_amp_pass(parse_precision_policy("always-bf16"), /*in_bodies=*/false)->run(top_only);
  EXPECT_EQ(bodies_text(top_only), bodies_text(g));
  PipelineOptions o;
  o.precision = parse_precision_policy("auto-mixed-bf16");
  o.amp_in_bodies = false;
  EXPECT_EQ(bodies_text(run_standard_pipeline(g, o).graph).find("bf16"), std::string::npos);
}

// A scan body with work for every pass: a dead chain (dce), a duplicate expression (cse),
// constants to fold and a multiply by one (simplify); the same scan also sits inside a cond
// branch, so the passes must reach nested bodies.
Graph body_with_work() {
  Graph b("work");
  Value c = b.input("c", DType::f32, {3});
  Value x = b.input("x", DType::f32, {3});
  b.exp(b.neg(x));  // dead
  Value two = b.add(b.scalar(1, DType::f32), b.scalar(1, DType::f32));
  Value s1 = b.mul(b.add(c, x), two);
  Value s2 = b.mul(b.add(c, x), two);
  Value n = b.mul(b.add(s1, s2), b.scalar(1, DType::f32));
  b.set_outputs({b.tanh(n), n});
  return b;
}

size_t body_nodes(const Graph& g) {
  size_t n = 0;
  for (const Node& node : g.nodes())
    if (node.op == OpKind::Scan) n += node.attrs.get_graph("body").nodes().size();
  return n;
}

Graph graph_with_work() {
  Graph g("work");
  Value xs = g.input("xs", DType::f32, {5, 3});
  Value c0 = g.input("h0", DType::f32, {3});
  Value p = g.input("p", DType::bool_, {});
  std::vector<Value> top = g.scan(body_with_work(), {c0}, {xs});
  Graph t("t"), f("f");
  {
    Value tx = t.input("xs", DType::f32, {5, 3});
    Value tc = t.input("c", DType::f32, {3});
    t.set_outputs({t.scan(body_with_work(), {tc}, {tx})[1]});
    f.input("xs", DType::f32, {5, 3});
    f.input("c", DType::f32, {3});
    f.set_outputs({f.broadcast_in_dim(f.scalar(0, DType::f32), {5, 3}, {})});
  }
  std::vector<Value> c = g.cond(p, std::move(t), std::move(f), {xs, c0});
  g.set_outputs({top[0], top[1], c[0]});
  return g;
}

TEST(ControlFlowPasses, PassesRunInsideBodies) {
  Graph g = graph_with_work();
  const Graph& branch = *g.nodes()[g.outputs()[2].node].attrs.get_graphs("branches")[1];
  size_t before = body_nodes(g), nested_before = body_nodes(branch);
  EXPECT_EQ(nested_before, before);
  for (auto make : {create_dce_pass, create_cse_pass, create_simplify_pass}) {
    std::unique_ptr<Pass> pass = make();
    SCOPED_TRACE(std::string(pass->name()));
    Graph h = g;
    EXPECT_TRUE(pass->run(h));
    EXPECT_TRUE(h.verify().empty());
    const Graph& nested = *h.nodes()[h.outputs()[2].node].attrs.get_graphs("branches")[1];
    EXPECT_LT(body_nodes(h), before);
    EXPECT_EQ(body_nodes(nested), body_nodes(h));  // the nested body changed alike
    TensorMap feeds{{"xs", random_tensor(DType::f32, {5, 3}, 4)},
                    {"h0", random_tensor(DType::f32, {3}, 5)},
                    {"p", Tensor::from_ints(DType::bool_, {}, std::vector<int64_t>{1})}};
    std::vector<Tensor> want = evaluate(g, feeds), got = evaluate(h, feeds);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(all_close(got[i], want[i], 1e-6, 1e-6));
  }
  Graph folded = g;
  EXPECT_TRUE(create_fold_constants_pass()->run(folded));
  auto adds = [](const Graph& h) {
    int n = 0;
    for (const Node& node : h.nodes())
      if (node.op == OpKind::Scan) n += count(node.attrs.get_graph("body"), OpKind::Add);
    return n;
  };
  EXPECT_EQ(adds(folded), adds(g) - 1);  // 1 + 1 became a constant
  // The whole pipeline: dead, duplicate, foldable and identity nodes all go.
  Graph p = run_standard_pipeline(g, PipelineOptions{}).graph;
  EXPECT_LE(body_nodes(p), before - 6) << p.to_string();
}

// DCE drops a scan's unused ys and a cond's unused results from the node and its bodies
// (what computed them goes with them); carries stay.
TEST(ControlFlowPasses, DceDropsUnusedYsAndBranchResults) {
  Graph g("trim");
  Value xs = g.input("xs", DType::f32, {4, 3});
  Value p = g.input("p", DType::bool_, {});
  Graph b("step");
  {
    Value c = b.input("c", DType::f32, {3});
    Value x = b.input("x", DType::f32, {3});
    Value n = b.add(c, x);
    b.set_outputs({n, b.exp(b.neg(x)), b.mul(n, x)});  // carry, y0 (unused), y1
  }
  std::vector<Value> s = g.scan(std::move(b), {g.input("c0", DType::f32, {3})}, {xs});
  Graph t("t"), f("f");
  {
    Value tx = t.input("x", DType::f32, {3});
    t.set_outputs({t.sin(tx), t.cos(tx)});
    Value fx = f.input("x", DType::f32, {3});
    f.set_outputs({f.neg(fx), f.tanh(fx)});
  }
  std::vector<Value> c = g.cond(p, std::move(t), std::move(f), {s[0]});
  g.set_outputs({s[2], c[1]});
  Graph d = g;
  EXPECT_TRUE(create_dce_pass()->run(d));
  EXPECT_TRUE(d.verify().empty());
  for (const Node& n : d.nodes()) {
    if (n.op == OpKind::Scan) {
      EXPECT_EQ(n.results.size(), 2u);  // carry, y1
      EXPECT_EQ(count(n.attrs.get_graph("body"), OpKind::Exp), 0);
      EXPECT_EQ(count(n.attrs.get_graph("body"), OpKind::Neg), 0);
    }
    if (n.op == OpKind::Cond) {
      EXPECT_EQ(n.results.size(), 1u);
      EXPECT_EQ(count(*n.attrs.get_graphs("branches")[0], OpKind::Neg), 0);
      EXPECT_EQ(count(*n.attrs.get_graphs("branches")[1], OpKind::Sin), 0);
    }
  }
  for (bool pv : {false, true}) {
    TensorMap feeds{{"xs", random_tensor(DType::f32, {4, 3}, 7)},
                    {"c0", random_tensor(DType::f32, {3}, 8)},
                    {"p", Tensor::from_ints(DType::bool_, {}, std::vector<int64_t>{pv})}};
    std::vector<Tensor> want = evaluate(g, feeds), got = evaluate(d, feeds);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(want[i].bitwise_equal(got[i])) << i;
  }
  EXPECT_FALSE(create_dce_pass()->run(d));  // nothing left to drop
}

// Both values lists are bitwise equal on `feeds`.
void expect_bitwise_same(const Graph& want, const Graph& got, const TensorMap& feeds) {
  std::vector<Tensor> a = evaluate(want, feeds), b = evaluate(got, feeds);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].bitwise_equal(b[i])) << i;
}

// A branch x -> (op(x), x * k): distinct per branch so the taken one shows in the values.
Graph branch(const std::string& name, int k) {
  Graph b(name);
  Value x = b.input("x", DType::f32, {3});
  Value y = k == 0 ? b.sin(x) : k == 1 ? b.cos(x) : b.tanh(x);
  b.set_outputs({y, b.mul(x, b.scalar(k + 2, DType::f32))});
  return b;
}

TEST(ControlFlowPasses, SimplifyInlinesConstantCond) {
  TensorMap feeds{{"x", random_tensor(DType::f32, {3}, 11)}};
  auto check = [&](const Graph& g, int want_conds) {
    Graph s = g;
    EXPECT_TRUE(create_simplify_pass()->run(s));
    EXPECT_TRUE(s.verify().empty());
    EXPECT_EQ(count(s, OpKind::Cond), want_conds);
    expect_bitwise_same(g, s, feeds);
  };
  for (bool p : {false, true}) {  // lax.cond: branch int(pred)
    SCOPED_TRACE(p);
    Graph g("c");
    Value x = g.input("x", DType::f32, {3});
    Value pred = g.constant(Tensor::from_ints(DType::bool_, {}, std::vector<int64_t>{p}));
    g.set_outputs(g.cond(pred, branch("t", 1), branch("f", 0), {x}));
    check(g, 0);
    Graph s = g;
    create_simplify_pass()->run(s);
    EXPECT_EQ(count(s, p ? OpKind::Cos : OpKind::Sin), 1);
    EXPECT_EQ(count(s, p ? OpKind::Sin : OpKind::Cos), 0);
  }
  for (int64_t index : {-5, 0, 1, 2, 9}) {  // lax.switch clamps to [0, 2]
    SCOPED_TRACE(index);
    Graph g("s");
    Value x = g.input("x", DType::f32, {3});
    Value i = g.constant(Tensor::from_ints(DType::i32, {}, std::vector<int64_t>{index}));
    g.set_outputs(g.switch_case(i, {branch("b0", 0), branch("b1", 1), branch("b2", 2)}, {x}));
    check(g, 0);
  }
  // Inside a scan body (the constant predicate is the body's own), next to a cond whose
  // predicate is an input, which stays.
  Graph body("step");
  {
    Value c = body.input("c", DType::f32, {3});
    Value p = body.constant(Tensor::from_ints(DType::bool_, {}, std::vector<int64_t>{1}));
    body.set_outputs({body.cond(p, branch("t", 2), branch("f", 0), {c})[0]});
  }
  Graph g("nested");
  Value x = g.input("x", DType::f32, {3});
  Value q = g.input("q", DType::bool_, {});
  Value h = g.scan(std::move(body), {x}, {}, {}, ScanOptions{.length = 4})[0];
  g.set_outputs(g.cond(q, branch("t", 1), branch("f", 0), {h}));
  for (bool qv : {false, true}) {
    feeds["q"] = Tensor::from_ints(DType::bool_, {}, std::vector<int64_t>{qv});
    check(g, 1);
  }
  Graph s = g;
  create_simplify_pass()->run(s);
  for (const Node& n : s.nodes()) {
    if (n.op == OpKind::Scan) {
      EXPECT_EQ(count(n.attrs.get_graph("body"), OpKind::Cond), 0);
    }
  }
  EXPECT_FALSE(create_simplify_pass()->run(s));
}

TEST(ControlFlowPasses, DceDropsDeadCarries) {
  // while i < 5: (i, x, junk, echo) = (i + 1, x * 1.5, junk * 2 + 1, echo + x); only x is
  // used. i stays (the cond reads it); junk feeds only itself and echo only itself: both go.
  Graph g("carries");
  Value x0 = g.input("x0", DType::f32, {3});
  Value j0 = g.input("j0", DType::f32, {2});
  Graph c("c"), b("b");
  {
    Value ci = c.input("i", DType::i32, {});
    c.input("x", DType::f32, {3});
    c.input("junk", DType::f32, {2});
    c.input("echo", DType::f32, {3});
    c.set_outputs({c.lt(ci, c.scalar(5, DType::i32))});
    Value i = b.input("i", DType::i32, {});
    Value x = b.input("x", DType::f32, {3});
    Value junk = b.input("junk", DType::f32, {2});
    Value echo = b.input("echo", DType::f32, {3});
    b.set_outputs({b.add(i, b.scalar(1, DType::i32)), b.mul(x, b.scalar(1.5, DType::f32)),
                   b.add(b.mul(junk, b.scalar(2, DType::f32)), b.scalar(1, DType::f32)),
                   b.add(echo, x)});
  }
  std::vector<Value> w =
      g.while_loop(std::move(c), std::move(b), {g.scalar(0, DType::i32), x0, j0, x0});
  // scan carries (a, e, junk, d, y) over xs: a' = a + e, e' = e * 0.5, junk' = junk + d,
  // d' = d * x, y' = y + x; ys = y * 2. Only a and the ys are used: e (feeds a) and y (feeds
  // the ys) stay, junk and d (feeding only dead carries) go.
  Graph sb("step");
  {
    Value a = sb.input("a", DType::f32, {3});
    Value e = sb.input("e", DType::f32, {3});
    Value junk = sb.input("junk", DType::f32, {3});
    Value d = sb.input("d", DType::f32, {3});
    Value y = sb.input("y", DType::f32, {3});
    Value x = sb.input("x", DType::f32, {3});
    sb.set_outputs({sb.add(a, e), sb.mul(e, sb.scalar(0.5, DType::f32)), sb.add(junk, d),
                    sb.mul(d, x), sb.add(y, x), sb.mul(y, sb.scalar(2, DType::f32))});
  }
  Value xs = g.input("xs", DType::f32, {4, 3});
  std::vector<Value> s = g.scan(std::move(sb), {x0, x0, x0, x0, x0}, {xs});
  g.set_outputs({w[1], s[0], s[5]});
  Graph d = g;
  EXPECT_TRUE(create_dce_pass()->run(d));
  EXPECT_TRUE(d.verify().empty()) << d.to_string();
  for (const Node& n : d.nodes()) {
    if (n.op == OpKind::WhileLoop) {
      ASSERT_EQ(n.results.size(), 2u);  // i, x
      EXPECT_EQ(n.results[0].dtype, DType::i32);
      EXPECT_EQ(n.attrs.get_graph("cond").inputs().size(), 2u);
      EXPECT_EQ(n.attrs.get_graph("body").inputs().size(), 2u);
    }
    if (n.op == OpKind::Scan) {
      EXPECT_EQ(n.attrs.get_int("num_carry"), 3);  // a, e, y
      EXPECT_EQ(n.results.size(), 4u);
      EXPECT_EQ(n.attrs.get_graph("body").inputs().size(), 4u);
      EXPECT_EQ(count(n.attrs.get_graph("body"), OpKind::Mul), 2);  // e * 0.5, y * 2
    }
  }
  TensorMap feeds{{"x0", random_tensor(DType::f32, {3}, 12)},
                  {"j0", random_tensor(DType::f32, {2}, 13)},
                  {"xs", random_tensor(DType::f32, {4, 3}, 14)}};
  expect_bitwise_same(g, d, feeds);
  EXPECT_FALSE(create_dce_pass()->run(d));  // nothing left to drop
}

TEST(ControlFlowPasses, LegalizingForABackendWithoutThemNamesTheOps) {
  Graph g = mixed_graph();
  PipelineOptions o;
  o.backend = "toy";
  for (int i = 0; i < kNumOps; ++i) o.supported.insert(static_cast<OpKind>(i));
  o.supported.erase(OpKind::Scan);
  o.supported.erase(OpKind::Cond);
  std::string m = error_of([&] { run_standard_pipeline(g, o); });
  EXPECT_NE(m.find("backend 'toy' cannot run: "), std::string::npos) << m;
  EXPECT_NE(m.find("cond (node %"), std::string::npos) << m;
  EXPECT_NE(m.find("scan (nodes %"), std::string::npos) << m;
}

}  // namespace
}  // namespace rlx
