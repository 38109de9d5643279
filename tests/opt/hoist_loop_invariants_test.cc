// "hoist-loop-invariants": each rewrite happens (counted in the bodies, new captured consts,
// new xs) and the rewritten graph gives the original's values on the reference evaluator
// (bitwise where the same ops run on the same values; 1e-6 where a GEMM is batched over the
// steps); negatives: variant, size-inflating, unseeded-rng and custom_call nodes stay.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "../common/test_util.h"
#include "pass_file.h"
#include "rlx/ir/custom_op.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/passes.h"
#include "rlx/opt/pipeline.h"

namespace rlx {
namespace {

using testing::all_close;
using testing::random_tensor;

int count(const Graph& g, OpKind op) {
  return static_cast<int>(std::ranges::count(g.nodes(), op, &Node::op));
}

const Node& only(const Graph& g, OpKind op) {
  for (const Node& n : g.nodes())
    if (n.op == op) return n;
  throw Error("no node of op " + std::string(op_name(op)));
}

/// Runs the pass on a copy of `g`, checks it changed (or not) and verifies; returns the copy.
Graph hoisted(const Graph& g, bool expect_change = true) {
  Graph h = g;
  EXPECT_EQ(create_hoist_loop_invariants_pass()->run(h), expect_change);
  std::vector<std::string> problems = h.verify();
  EXPECT_TRUE(problems.empty()) << (problems.empty() ? "" : problems[0]);
  return h;
}

void expect_same_values(const Graph& a, const Graph& b, const TensorMap& feeds, double tol) {
  std::vector<Tensor> x = evaluate(a, feeds), y = evaluate(b, feeds);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(all_close(y[i], x[i], tol, tol)) << i;
}

// while sum(x) < limit * 2: x = x * 1.5 + reduce_sum(w * 0.5 + 1) (consts limit f32[], w
// f32[4]; carry x f32[2,4]). Invariant: limit * 2 (cond), the reduce of w (body).
Graph growth(float start) {
  Graph g("growth");
  Value limit = g.input("limit", DType::f32, {});
  Value w = g.input("w", DType::f32, {4});
  Graph c("c");
  Value cl = c.input("limit", DType::f32, {});
  c.input("w", DType::f32, {4});
  Value cx = c.input("x", DType::f32, {2, 4});
  c.set_outputs({c.lt(c.reduce_sum(cx, {0, 1}), c.mul(cl, c.scalar(2, DType::f32)))});
  Graph b("b");
  b.input("limit", DType::f32, {});
  Value bw = b.input("w", DType::f32, {4});
  Value bx = b.input("x", DType::f32, {2, 4});
  Value inv =
      b.reduce_sum(b.add(b.mul(bw, b.scalar(0.5, DType::f32)), b.scalar(1, DType::f32)), {0});
  b.set_outputs({b.add(b.mul(bx, b.scalar(1.5, DType::f32)), inv)});
  Value x0 = g.add(g.input("x0", DType::f32, {2, 4}), g.scalar(start, DType::f32));
  g.set_outputs(g.while_loop(std::move(c), std::move(b), {x0}, {limit, w}));
  return g;
}

TEST(HoistLoopInvariants, WhileLoopHoistsBodyAndCondInvariants) {
  Graph g = growth(0);
  Graph h = hoisted(g);
  const Node& loop = only(h, OpKind::WhileLoop);
  // Two new consts (cond's limit * 2, body's reduce): each region gets both inputs; limit and w,
  // read by nothing left in the loop, leave it.
  EXPECT_EQ(loop.attrs.get_int("num_consts"), 2);
  const Graph& body = loop.attrs.get_graph("body");
  const Graph& cond = loop.attrs.get_graph("cond");
  EXPECT_EQ(body.inputs().size(), 3U);
  EXPECT_EQ(cond.inputs().size(), 3U);
  EXPECT_EQ(count(body, OpKind::ReduceSum), 0);  // hoisted with the chain under it
  EXPECT_EQ(count(body, OpKind::Mul), 1);        // x * 1.5: variant, stays
  EXPECT_EQ(count(cond, OpKind::Mul), 0);
  EXPECT_EQ(count(cond, OpKind::ReduceSum), 1);  // sum(x): variant, stays
  EXPECT_EQ(count(h, OpKind::ReduceSum), 1);     // the hoisted one, now outside
  // Idempotent: nothing left to move.
  hoisted(h, false);
  TensorMap feeds{{"limit", Tensor::from_doubles(DType::f32, {}, std::vector<double>{40})},
                  {"w", random_tensor(DType::f32, {4}, 1)},
                  {"x0", random_tensor(DType::f32, {2, 4}, 2, 0.1, 1)}};
  expect_same_values(g, h, feeds, 0);
  // Zero trips: the hoisted values are computed, the loop returns init.
  Graph z = growth(100);
  Graph zh = hoisted(z);
  expect_same_values(z, zh, feeds, 0);
}

// scan over xs [T,2,4] with consts w [4,4], b [4]: h' = tanh(h @ transpose(w) + bcast(b)) + x.
Graph licm_scan(int64_t t) {
  Graph g("licm");
  Value xs = g.input("xs", DType::f32, {t, 2, 4});
  Value h0 = g.input("h0", DType::f32, {2, 4});
  Value w = g.input("w", DType::f32, {4, 4});
  Value bias = g.input("b", DType::f32, {4});
  Graph b("cell");
  Value bw = b.input("w", DType::f32, {4, 4});
  Value bb = b.input("b", DType::f32, {4});
  Value h = b.input("h", DType::f32, {2, 4});
  Value x = b.input("x", DType::f32, {2, 4});
  Value wt = b.transpose(b.mul(bw, b.scalar(0.5, DType::f32)), {1, 0});
  Value bcast = b.broadcast_in_dim(b.neg(bb), {2, 4}, {1});  // size-inflating
  Value n = b.add(b.tanh(b.add(b.dot_general(h, wt, {}, {}, {1}, {0}), bcast)), x);
  b.set_outputs({n, n});
  g.set_outputs(g.scan(std::move(b), {h0}, {xs}, {w, bias}));
  return g;
}

TEST(HoistLoopInvariants, ScanHoistsInvariantsButNotSizeInflatingOps) {
  for (int64_t t : {5, 0}) {
    SCOPED_TRACE(t);
    Graph g = licm_scan(t);
    Graph h = hoisted(g);
    const Node& scan = only(h, OpKind::Scan);
    // transpose(w * .5), neg(b) replace w and b (now unused)
    EXPECT_EQ(scan.attrs.get_int("num_consts"), 2);
    const Graph& body = scan.attrs.get_graph("body");
    EXPECT_EQ(count(body, OpKind::Transpose), 0);
    EXPECT_EQ(count(body, OpKind::Neg), 0);
    EXPECT_EQ(count(body, OpKind::BroadcastInDim), 1);  // larger than its operand: stays
    EXPECT_EQ(count(body, OpKind::DotGeneral), 1);      // reads the carry: stays
    EXPECT_EQ(count(h, OpKind::Transpose), 1);
    TensorMap feeds{{"xs", random_tensor(DType::f32, {t, 2, 4}, 3)},
                    {"h0", random_tensor(DType::f32, {2, 4}, 4)},
                    {"w", random_tensor(DType::f32, {4, 4}, 5)},
                    {"b", random_tensor(DType::f32, {4}, 6)}};
    expect_same_values(g, h, feeds, 0);
  }
}

// The RNN cell h' = tanh(h @ W + (x_t @ U + b)): x_t @ U + b depends on no carry.
// `form` 0: dot_general(x, U); 1: matmul(x, U); 2: dot_general(U^T, x^T) transposed back (the
// step operand on the rhs); 3: a batch dim (x [2,3,4] . U [2,4,4]).
Graph rnn(int64_t t, int form, bool reverse) {
  Graph g("rnn");
  bool batched = form == 3;
  Shape xshape = batched ? Shape{t, 2, 3, 4} : Shape{t, 3, 4};
  Shape hshape = batched ? Shape{2, 3, 4} : Shape{3, 4};
  Value xs = g.input("xs", DType::f32, xshape);
  Value h0 = g.input("h0", DType::f32, hshape);
  Value w = g.input("w", DType::f32, {4, 4});
  Value u = g.input("u", DType::f32, batched ? Shape{2, 4, 4} : Shape{4, 4});
  Value bias = g.input("b", DType::f32, {4});
  Graph b("cell");
  Value bw = b.input("w", DType::f32, {4, 4});
  Value bu = b.input("u", DType::f32, batched ? Shape{2, 4, 4} : Shape{4, 4});
  Value bb = b.input("b", DType::f32, {4});
  Value h = b.input("h", DType::f32, hshape);
  Value x = b.input("x", DType::f32, batched ? Shape{2, 3, 4} : Shape{3, 4});
  Value xu;
  if (form == 0) xu = b.dot_general(x, bu, {}, {}, {1}, {0});
  if (form == 1) xu = b.matmul(x, bu);
  if (form == 2)
    xu = b.transpose(b.dot_general(bu, b.transpose(x, {1, 0}), {}, {}, {0}, {0}), {1, 0});
  if (form == 3) xu = b.dot_general(x, bu, {0}, {0}, {2}, {1});
  Value hw = batched ? b.dot_general(h, bw, {}, {}, {2}, {0}) : b.matmul(h, bw);
  Value n = b.tanh(b.add(hw, b.add(xu, bb)));
  b.set_outputs({n, b.mul(n, b.scalar(2, DType::f32))});
  ScanOptions o;
  o.reverse = reverse;
  g.set_outputs(g.scan(std::move(b), {h0}, {xs}, {w, u, bias}, o));
  return g;
}

TEST(HoistLoopInvariants, ScanBatchesStepIndependentGemms) {
  for (int form : {0, 1, 2, 3})
    for (int64_t t : {6, 0})
      for (bool reverse : {false, true}) {
        SCOPED_TRACE("form " + std::to_string(form) + " length " + std::to_string(t) +
                     (reverse ? " reverse" : ""));
        Graph g = rnn(t, form, reverse);
        Graph h = hoisted(g);
        const Node& scan = only(h, OpKind::Scan);
        const Graph& body = scan.attrs.get_graph("body");
        // One new xs [T, ...h's shape] (x_t @ U + b) replaces xs, u and b (now unused); only
        // h @ W stays in the body.
        ASSERT_EQ(scan.operands.size(), 3U);
        Shape want = form == 3 ? Shape{t, 2, 3, 4} : Shape{t, 3, 4};
        EXPECT_EQ(h.shape(scan.operands[2]), want);
        EXPECT_EQ(count(body, OpKind::DotGeneral) + count(body, OpKind::MatMul), 1);
        EXPECT_EQ(count(body, OpKind::Add), 1);
        EXPECT_EQ(count(body, OpKind::Transpose), 0);
        bool b3 = form == 3;
        TensorMap feeds{
            {"xs", random_tensor(DType::f32, b3 ? Shape{t, 2, 3, 4} : Shape{t, 3, 4}, 7)},
            {"h0", random_tensor(DType::f32, b3 ? Shape{2, 3, 4} : Shape{3, 4}, 8)},
            {"w", random_tensor(DType::f32, {4, 4}, 9, -0.5, 0.5)},
            {"u", random_tensor(DType::f32, b3 ? Shape{2, 4, 4} : Shape{4, 4}, 10, -0.5, 0.5)},
            {"b", random_tensor(DType::f32, {4}, 11)}};
        expect_same_values(g, h, feeds, 1e-6);
      }
}

// h' = tanh(h + x_t @ U) over xs [5, rows, 4], `scans` times in one graph (each scan reads the
// previous one's final carry).
Graph rows_rnn(int64_t rows, int scans) {
  Graph g("rows");
  Value xs = g.input("xs", DType::f32, {5, rows, 4});
  Value u = g.input("u", DType::f32, {4, 4});
  Value h = g.input("h0", DType::f32, {rows, 4});
  std::vector<Value> outs;
  for (int i = 0; i < scans; ++i) {
    Graph b("cell");
    Value bu = b.input("u", DType::f32, {4, 4});
    Value bh = b.input("h", DType::f32, {rows, 4});
    Value bx = b.input("x", DType::f32, {rows, 4});
    Value n = b.tanh(b.add(bh, b.dot_general(bx, bu, {}, {}, {1}, {0})));
    b.set_outputs({n, n});
    std::vector<Value> r = g.scan(std::move(b), {h}, {xs}, {u});
    h = r[0];
    outs.push_back(r[1]);
  }
  g.set_outputs(outs);
  return g;
}

// A step's product is batched when it has fewer than 8 rows (kBatchGemmMaxRows), or when the
// graph holds another loop (whose same product the following cse may merge); a lone loop's
// product of 8 rows or more stays in the body.
TEST(HoistLoopInvariants, ScanBatchesGemmsWithFewRowsOrAnotherLoop) {
  for (auto [rows, scans, batched] : {std::tuple{7, 1, true}, std::tuple{8, 1, false},
                                      std::tuple{8, 2, true}, std::tuple{64, 2, true}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + ", scans " + std::to_string(scans));
    Graph g = rows_rnn(rows, scans);
    Graph h = hoisted(g, batched);
    for (const Node& n : h.nodes()) {
      if (n.op != OpKind::Scan) continue;
      EXPECT_EQ(count(n.attrs.get_graph("body"), OpKind::DotGeneral), batched ? 0 : 1);
    }
    EXPECT_EQ(count(h, OpKind::DotGeneral), batched ? scans : 0);
    TensorMap feeds{{"xs", random_tensor(DType::f32, {5, rows, 4}, 12)},
                    {"u", random_tensor(DType::f32, {4, 4}, 13, -0.5, 0.5)},
                    {"h0", random_tensor(DType::f32, {rows, 4}, 14)}};
    expect_same_values(g, h, feeds, 1e-6);
  }
}

TEST(HoistLoopInvariants, ScanBatchesLowerRankStepOperands) {
  // h' = tanh(h + (x_t @ U) * s_t): s_t f32[4] (a second xs) broadcasts against [3,4] in the
  // body, so its batched form [T,4] gets a unit dim ([T,1,4]) before the multiply.
  Graph g("rank");
  Value xs = g.input("xs", DType::f32, {5, 3, 4});
  Value ss = g.input("ss", DType::f32, {5, 4});
  Graph b("cell");
  Value u = b.input("u", DType::f32, {4, 4});
  Value h = b.input("h", DType::f32, {3, 4});
  Value x = b.input("x", DType::f32, {3, 4});
  Value sv = b.input("s", DType::f32, {4});
  Value n = b.tanh(b.add(h, b.mul(b.matmul(x, u), sv)));
  b.set_outputs({n});
  g.set_outputs(g.scan(std::move(b), {g.input("h0", DType::f32, {3, 4})}, {xs, ss},
                       {g.input("u", DType::f32, {4, 4})}));
  Graph h2 = hoisted(g);
  const Node& scan = only(h2, OpKind::Scan);
  ASSERT_EQ(scan.operands.size(), 2U);  // h0 and the batched product: u, xs and ss left
  EXPECT_EQ(h2.shape(scan.operands[1]), (Shape{5, 3, 4}));
  EXPECT_EQ(count(scan.attrs.get_graph("body"), OpKind::Mul), 0);
  TensorMap feeds{{"xs", random_tensor(DType::f32, {5, 3, 4}, 22)},
                  {"ss", random_tensor(DType::f32, {5, 4}, 23)},
                  {"h0", random_tensor(DType::f32, {3, 4}, 24)},
                  {"u", random_tensor(DType::f32, {4, 4}, 25, -0.5, 0.5)}};
  expect_same_values(g, h2, feeds, 1e-6);
}

TEST(HoistLoopInvariants, StepDependentWorkWithoutGemmStays) {
  // y = tanh(h + x * 2 + c): x * 2 depends on no carry but holds no GEMM, so it stays (moving
  // it would only trade T small ops for one large buffer).
  Graph g("nogemm");
  Value xs = g.input("xs", DType::f32, {5, 3});
  Graph b("cell");
  Value c = b.input("c", DType::f32, {3});
  Value h = b.input("h", DType::f32, {3});
  Value x = b.input("x", DType::f32, {3});
  Value n = b.tanh(b.add(h, b.add(b.mul(x, b.scalar(2, DType::f32)), c)));
  b.set_outputs({n});
  g.set_outputs(g.scan(std::move(b), {g.input("h0", DType::f32, {3})}, {xs},
                       {g.input("c", DType::f32, {3})}));
  Graph h2 = hoisted(g, false);
  EXPECT_EQ(only(h2, OpKind::Scan).operands.size(), 3U);
}

void register_hoist_test_op() {
  static std::once_flag once;
  std::call_once(once, [] {
    CustomOpDef d;
    d.name = "test.hoist_twice";
    d.doc = "2 x on the host";
    d.num_operands = 1;
    d.infer = [](const InferContext& ctx) { return std::vector<TensorType>{ctx.operands[0]}; };
    d.reference = [](std::span<const Tensor> in, const AttrMap&) {
      Tensor out(in[0].dtype(), in[0].shape());
      for (int64_t i = 0; i < in[0].numel(); ++i) out.set_f64(i, 2 * in[0].get_f64(i));
      return std::vector<Tensor>{out};
    };
    register_custom_op(std::move(d));
  });
}

TEST(HoistLoopInvariants, UnseededRngAndCustomCallsStay) {
  register_hoist_test_op();
  // carry h f32[2]: h' = h + convert(rng_key()) + custom(c) + convert(rng_key(seed 7)) * c0.
  Graph g("impure");
  Value cst = g.input("c", DType::f32, {2});
  Graph b("cell");
  Value bc = b.input("c", DType::f32, {2});
  Value h = b.input("h", DType::f32, {2});
  Value unseeded = b.convert(b.rng_key(), DType::f32);
  Value seeded = b.neg(b.convert(b.rng_key(7), DType::f32));
  Value user = custom_call(b, "test.hoist_twice", {bc})[0];
  b.set_outputs({b.add(b.add(b.add(h, unseeded), user), seeded)});
  g.set_outputs(
      g.scan(std::move(b), {g.input("h0", DType::f32, {2})}, {}, {cst}, ScanOptions{.length = 3}));
  Graph h2 = hoisted(g);
  const Node& scan = only(h2, OpKind::Scan);
  const Graph& body = scan.attrs.get_graph("body");
  EXPECT_EQ(scan.attrs.get_int("num_consts"), 2);  // only -convert(rng_key(7)) moved
  EXPECT_EQ(count(body, OpKind::RngKey), 1);
  EXPECT_EQ(count(body, OpKind::Convert), 1);  // of the unseeded key
  EXPECT_EQ(count(body, OpKind::CustomCall), 1);
  EXPECT_EQ(count(body, OpKind::Neg), 0);
  TensorMap feeds{{"c", random_tensor(DType::f32, {2}, 12)},
                  {"h0", random_tensor(DType::f32, {2}, 13)}};
  expect_same_values(g, h2, feeds, 0);
}

TEST(HoistLoopInvariants, NestedLoopsHoistLevelByLevel) {
  // An outer scan over xs [3,4] whose body runs an inner scan of 2 steps; the inner body's
  // w * w depends only on the outer consts, so it climbs both levels.
  Graph inner("inner");
  Value iw = inner.input("w", DType::f32, {4});
  Value ic = inner.input("c", DType::f32, {4});
  inner.set_outputs({inner.sin(inner.add(ic, inner.mul(iw, iw)))});
  Graph outer("outer");
  Value ow = outer.input("w", DType::f32, {4});
  Value oc = outer.input("c", DType::f32, {4});
  Value ox = outer.input("x", DType::f32, {4});
  Value r =
      outer.scan(std::move(inner), {outer.add(oc, ox)}, {}, {ow}, ScanOptions{.length = 2})[0];
  outer.set_outputs({r, r});
  Graph g("nested");
  Value w = g.input("w", DType::f32, {4});
  g.set_outputs(g.scan(std::move(outer), {g.input("c0", DType::f32, {4})},
                       {g.input("xs", DType::f32, {3, 4})}, {w}));
  Graph h = hoisted(g);
  EXPECT_EQ(count(h, OpKind::Mul), 1);  // at the top level now
  const Graph& ob = only(h, OpKind::Scan).attrs.get_graph("body");
  EXPECT_EQ(count(ob, OpKind::Mul), 0);
  const Graph& ib = only(ob, OpKind::Scan).attrs.get_graph("body");
  EXPECT_EQ(count(ib, OpKind::Mul), 0);
  EXPECT_EQ(count(ib, OpKind::Sin), 1);
  TensorMap feeds{{"w", random_tensor(DType::f32, {4}, 14)},
                  {"c0", random_tensor(DType::f32, {4}, 15)},
                  {"xs", random_tensor(DType::f32, {3, 4}, 16)}};
  expect_same_values(g, h, feeds, 0);
}

TEST(HoistLoopInvariants, StandardPipelineHoists) {
  Graph g = rnn(6, 1, false);
  PipelineResult r = run_standard_pipeline(g, PipelineOptions{});
  const Node& scan = only(r.graph, OpKind::Scan);
  ASSERT_EQ(scan.operands.size(), 3U);  // w, h0 and the batched x @ U + b as the only xs
  EXPECT_EQ(r.graph.shape(scan.operands[2]), (Shape{6, 3, 4}));
  // Two scans of the cell that differ in their outputs (so they stay two): what both hoist is
  // computed once after the pipeline's cse.
  Graph two = g;
  const Node& first = only(two, OpKind::Scan);
  Graph cell = first.attrs.get_graph("body");
  cell.set_outputs({cell.outputs()[0], cell.outputs()[0]});
  AttrMap attrs = first.attrs;
  attrs.set("body", GraphRef(std::make_shared<const Graph>(std::move(cell))));
  std::vector<Value> other = two.emit(OpKind::Scan, first.operands, attrs);
  std::vector<Value> outs = two.outputs();
  outs.push_back(other[1]);
  two.set_outputs(outs);
  PipelineResult r2 = run_standard_pipeline(two, PipelineOptions{});
  EXPECT_EQ(count(r2.graph, OpKind::Scan), 2);
  // xs @ U, once (batched as dot_general)
  EXPECT_EQ(count(r2.graph, OpKind::DotGeneral), 1);
  EXPECT_EQ(count(r2.graph, OpKind::MatMul), 0);
  TensorMap feeds{{"xs", random_tensor(DType::f32, {6, 3, 4}, 17)},
                  {"h0", random_tensor(DType::f32, {3, 4}, 18)},
                  {"w", random_tensor(DType::f32, {4, 4}, 19, -0.5, 0.5)},
                  {"u", random_tensor(DType::f32, {4, 4}, 20, -0.5, 0.5)},
                  {"b", random_tensor(DType::f32, {4}, 21)}};
  expect_same_values(g, r.graph, feeds, 1e-6);
  expect_same_values(two, r2.graph, feeds, 1e-6);
}

TEST(HoistLoopInvariants, PassFiles) {
  EXPECT_GE(testing::run_pass_files("hoist-loop-invariants",
                                    [] {
                                      PassManager pm;
                                      pm.add(create_hoist_loop_invariants_pass());
                                      return pm;
                                    }),
            2);
}

}  // namespace
}  // namespace rlx
