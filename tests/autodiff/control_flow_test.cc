// Autodiff and vmap on graphs holding control flow (cond, while_loop, scan): scan checkpointing
// (bitwise equal gradients, fewer stacked residual bytes), the vjp of a bounded while_loop
// against the same loop written as a scan, the errors (an unbounded while_loop, a checkpoint
// interval that does not divide the length), and vmap with batched predicates against the
// per-example loop. Finite differences of every rule (grad, jvp, hvp) and the generic vmap
// combinations run from the op cases (fd_test.cc, vmap_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <string>

#include "common/test_util.h"
#include "rlx/autodiff/grad.h"
#include "rlx/autodiff/vmap.h"
#include "rlx/ir/evaluator.h"

namespace rlx::autodiff {
namespace {

using rlx::testing::error_of;
using rlx::testing::random_tensor;

// The 50-step tanh RNN of the golden data: h' = tanh(h w + x_t), loss = sum(h_T^2) + sum(ys).
Graph rnn_loss(DType t, int64_t steps, int64_t batch, int64_t n, bool reverse = false) {
  Graph g("rnn");
  Value w = g.param("w", t, {n, n});
  Value h0 = g.input("h0", t, {batch, n});
  Value xs = g.input("xs", t, {steps, batch, n});
  Graph cell("cell");
  Value cw = cell.input("w", t, {n, n});
  Value ch = cell.input("h", t, {batch, n});
  Value cx = cell.input("x", t, {batch, n});
  Value h2 = cell.tanh(cell.add(cell.matmul(ch, cw), cx));
  cell.set_outputs({h2, cell.mul(cell.sin(h2), cx)});
  ScanOptions o;
  o.reverse = reverse;
  std::vector<Value> r = g.scan(std::move(cell), {h0}, {xs}, {w}, o);
  Value loss = g.add(g.reduce_sum(g.mul(r[0], r[0]), {0, 1}), g.reduce_sum(r[1], {0, 1, 2}));
  g.set_outputs({loss});
  return g;
}

TensorMap rnn_feeds(DType t, int64_t steps, int64_t batch, int64_t n) {
  return {{"w", random_tensor(t, {n, n}, 1, -0.8, 0.8)},
          {"h0", random_tensor(t, {batch, n}, 2, -1, 1)},
          {"xs", random_tensor(t, {steps, batch, n}, 3, -1, 1)}};
}

// Bytes of the values the backward pass keeps across steps: the stacked carries, that is the ys
// whose body output is a carry input, of the scans running in the forward direction `reverse`
// (the residual scan, or the checkpoint scan and the tail's residual scan) plus, with
// checkpointing, the residuals one segment recomputes inside the backward body (live one
// segment at a time). The forward scan's own ys and the backward scans (the other direction)
// are not counted. Read from the graph's types: no backend needed.
int64_t stacked_residual_bytes(const Graph& g, bool reverse) {
  int64_t total = 0;
  for (const Node& n : g.nodes()) {
    if (n.op != OpKind::Scan) continue;
    const Graph& body = n.attrs.get_graph("body");
    if (n.attrs.get_bool("reverse") != reverse) {  // a backward scan: its body may recompute
      total += stacked_residual_bytes(body, reverse);
      continue;
    }
    const auto nc = static_cast<size_t>(n.attrs.get_int("num_consts"));
    const auto nk = static_cast<size_t>(n.attrs.get_int("num_carry"));
    const std::vector<int32_t> ins = body.inputs();
    for (size_t r = nk; r < n.results.size(); ++r) {
      const auto carry = ins.begin() + static_cast<ptrdiff_t>(nc);
      if (std::find(carry, carry + static_cast<ptrdiff_t>(nk), body.outputs()[r].node) ==
          carry + static_cast<ptrdiff_t>(nk))
        continue;
      total += n.results[r].shape.numel() * static_cast<int64_t>(dtype_size(n.results[r].dtype));
    }
  }
  return total;
}

// Steps of the body the top-level scans running in direction `reverse` take, a scan whose body
// holds scans counting theirs (the checkpoint scan's segments): the forward passes a gradient
// graph runs. Nested scans in the other direction are not forward work and not counted.
int64_t scan_steps(const Graph& g, bool reverse) {
  int64_t total = 0;
  for (const Node& n : g.nodes()) {
    if (n.op != OpKind::Scan || n.attrs.get_bool("reverse") != reverse) continue;
    const int64_t inner = scan_steps(n.attrs.get_graph("body"), reverse);
    total += n.attrs.get_int("length") * std::max<int64_t>(inner, 1);
  }
  return total;
}

Tensor ints(DType t, Shape s, std::vector<double> v) { return Tensor::from_doubles(t, s, v); }

int count_ops(const Graph& g, OpKind op) {
  int total = 0;
  for (const Node& n : g.nodes()) total += n.op == op ? 1 : 0;
  return total;
}

// while n < trips: (n, x) = (n + 1, step(body, a, x)) from n = 0, with `a` a const of x's type:
// the loop's final (n, x).
std::vector<Value> counted_while(Graph& g, Value a, Value x, int trips,
                                 const std::function<Value(Graph&, Value, Value)>& step,
                                 std::optional<int64_t> max_trip_count = std::nullopt) {
  const TensorType t = g.type(x);
  Graph c("c"), b("b");
  c.input("a", t.dtype, t.shape);
  Value cn = c.input("n", DType::i32, {});
  c.input("x", t.dtype, t.shape);
  c.set_outputs({c.lt(cn, c.scalar(trips, DType::i32))});
  Value ba = b.input("a", t.dtype, t.shape);
  Value bn = b.input("n", DType::i32, {});
  Value bx = b.input("x", t.dtype, t.shape);
  b.set_outputs({b.add(bn, b.scalar(1, DType::i32)), step(b, ba, bx)});
  return g.while_loop(std::move(c), std::move(b), {g.scalar(0, DType::i32), x}, {a},
                      max_trip_count);
}

TEST(ControlFlowAutodiff, CheckpointedScanGradientsAreBitwiseEqualAndKeepLess) {
  for (DType t : {DType::f32, DType::f64})
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (reverse ? " reverse" : ""));
      Graph g = rnn_loss(t, 50, 4, 8, reverse);
      TensorMap feeds = rnn_feeds(t, 50, 4, 8);
      Graph plain = grad(g, {"w", "h0", "xs"});
      std::vector<Tensor> want = evaluate(plain, feeds);
      const int64_t carry_bytes = 4 * 8 * static_cast<int64_t>(dtype_size(t));
      const int64_t plain_bytes = stacked_residual_bytes(plain, reverse);
      EXPECT_EQ(plain_bytes, 50 * carry_bytes);  // 50 carries of [4, 8]
      // One forward pass: the residual scan computes the loss's carry and ys too (the primal
      // scan is gone), then one backward scan.
      EXPECT_EQ(count_ops(plain, OpKind::Scan), 2);
      EXPECT_EQ(scan_steps(plain, reverse), 50);
      EXPECT_EQ(scan_steps(plain, !reverse), 50);
      // Intervals dividing 50 and not (a tail of 50 % k steps is differentiated unchecked).
      for (int64_t k : {1, 3, 5, 7, 10, 25, 49, 50, 64}) {
        GradOptions o;
        o.scan_checkpoint_every = k;
        Graph ck = grad(g, {"w", "h0", "xs"}, {}, o);
        ASSERT_TRUE(ck.verify().empty()) << ck.verify()[0];
        std::vector<Tensor> got = evaluate(ck, feeds);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_EQ(got[i].type(), want[i].type());
          EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), want[i].nbytes()), 0)
              << "k " << k << " output " << i << " differs bitwise";
        }
        // k < length: 50 / k checkpoints, k recomputed carries and the 50 % k of the tail.
        const int64_t carries = k < 50 ? 50 / k + k + 50 % k : 50;
        EXPECT_EQ(stacked_residual_bytes(ck, reverse), carries * carry_bytes) << "k " << k;
        // The checkpoint scan (and the tail's residual scan) are the one forward pass.
        EXPECT_EQ(scan_steps(ck, reverse), 50) << "k " << k;
      }
    }
}

// The scan that replaces the primal one takes its name, so a scan result that is an output of
// value_and_grad is named as before ("out_1"), checkpointed (with and without a tail) or not.
TEST(ControlFlowAutodiff, ReplacedScanKeepsTheOutputName) {
  Graph g = rnn_loss(DType::f32, 10, 2, 3);
  std::vector<Value> outs = g.outputs();
  const Node& loss = g.node(outs[0]);
  Value sum = loss.operands[0];  // reduce_sum(h_T^2): its mul's operand is h_T
  outs.push_back(g.node(g.node(sum).operands[0]).operands[0]);
  ASSERT_EQ(g.node(outs[1]).op, OpKind::Scan);
  g.set_outputs(outs);
  for (int64_t k : {0, 5, 3}) {
    GradOptions o;
    o.scan_checkpoint_every = k;
    Graph vg = value_and_grad(g, {"w"}, 0, o);
    EXPECT_EQ(vg.node(vg.outputs()[1]).name, "out_1") << "k " << k;
    EXPECT_EQ(count_ops(vg, OpKind::Scan), k == 3 ? 4 : 2) << "k " << k;  // + the tail's two
  }
}

TEST(ControlFlowAutodiff, NegativeCheckpointIntervalIsAnError) {
  Graph g = rnn_loss(DType::f32, 10, 2, 3);
  GradOptions o;
  o.scan_checkpoint_every = -1;
  std::string m = error_of([&] { grad(g, {"w"}, {}, o); });
  EXPECT_NE(m.find("grad: scan_checkpoint_every must be >= 0, found -1"), std::string::npos) << m;
}

// A bounded while_loop's gradient equals that of the same computation as a scan of exactly
// the trips it runs (the remaining bounded trips are masked off).
TEST(ControlFlowAutodiff, BoundedWhileGradientEqualsTheScanOfItsTrips) {
  const DType t = DType::f64;
  auto step = [&](Graph& b, Value a, Value x) { return b.add(b.mul(b.sin(x), a), x); };
  Graph g("loop");
  Value a = g.input("a", t, {3});
  Value x0 = g.input("x", t, {3});
  Value r = counted_while(g, a, x0, 4, step, 9)[1];
  g.set_outputs({g.reduce_sum(g.mul(r, r), {0})});

  Graph s("as_scan");
  Value sa = s.input("a", t, {3});
  Value sx0 = s.input("x", t, {3});
  Graph sb("b");
  Value sba = sb.input("a", t, {3});
  Value sbx = sb.input("x", t, {3});
  sb.set_outputs({step(sb, sba, sbx)});
  ScanOptions o;
  o.length = 4;
  Value sr = s.scan(std::move(sb), {sx0}, {}, {sa}, o)[0];
  s.set_outputs({s.reduce_sum(s.mul(sr, sr), {0})});

  TensorMap feeds{{"a", random_tensor(t, {3}, 4, -1, 1)}, {"x", random_tensor(t, {3}, 5, -1, 1)}};
  Graph dg = grad(g, {"a", "x"});
  // The bounded scan the rule runs for its residuals also gives the loop's result: the loop
  // itself is gone, one forward scan of 9 trips and one backward scan remain.
  EXPECT_EQ(count_ops(dg, OpKind::WhileLoop), 0);
  EXPECT_EQ(scan_steps(dg, false), 9);
  EXPECT_EQ(scan_steps(dg, true), 9);
  std::vector<Tensor> got = evaluate(dg, feeds);
  std::vector<Tensor> want = evaluate(grad(s, {"a", "x"}), feeds);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(rlx::testing::all_close(got[i], want[i], 1e-14, 1e-14)) << "output " << i;
  // Checkpointing applies to the loop's scan too (9 trips, every 3rd carry).
  GradOptions ck;
  ck.scan_checkpoint_every = 3;
  std::vector<Tensor> got_ck = evaluate(grad(g, {"a", "x"}, {}, ck), feeds);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(std::memcmp(got_ck[i].data(), got[i].data(), got[i].nbytes()), 0) << i;
}

// A while_loop without max_trip_count: grad fails naming the op and saying forward mode works;
// jvp carries the tangents alongside (also through two loops in a row, the second fed by the
// first, and a loop inside a scan body or a cond branch) and matches f64 differences.
TEST(ControlFlowAutodiff, UnboundedWhileHasJvpButNoVjp) {
  const DType t = DType::f64;
  // while sum(x) < lim: x = 1.5 x + a sin(x); `a` and `lim` consts.
  auto loop = [&](Graph& g, Value a, Value x) {
    Graph c("c"), b("b");
    c.input("a", t, {3});
    Value cx = c.input("x", t, {3});
    c.set_outputs({c.lt(c.reduce_sum(cx, {0}), c.scalar(20, t))});
    Value ba = b.input("a", t, {3});
    Value bx = b.input("x", t, {3});
    b.set_outputs({b.add(b.mul(bx, b.scalar(1.5, t)), b.mul(ba, b.sin(bx)))});
    return g.while_loop(std::move(c), std::move(b), {x}, {a})[0];
  };
  Graph g("unbounded");
  Value a = g.input("a", t, {3});
  Value x = g.input("x", t, {3});
  Value r1 = loop(g, a, x);
  Value r2 = loop(g, g.mul(a, g.scalar(0.5, t)), g.mul(r1, g.scalar(0.01, t)));
  g.set_outputs({g.add(g.reduce_sum(g.mul(r1, r1), {0}), g.reduce_sum(g.sin(r2), {0}))});
  std::string m = error_of([&] { grad(g, {"x"}); });
  EXPECT_NE(m.find("grad: op 'while_loop' (node %"), std::string::npos) << m;
  EXPECT_NE(m.find("has no max_trip_count"), std::string::npos) << m;
  EXPECT_NE(m.find("forward mode (jvp) works without one"), std::string::npos) << m;

  TensorMap feeds{{"a", random_tensor(t, {3}, 21, 0.1, 0.5)},
                  {"x", random_tensor(t, {3}, 22, 0.5, 1)}};
  Tensor da = random_tensor(t, {3}, 23, -1, 1), dx = random_tensor(t, {3}, 24, -1, 1);
  Graph jg = jvp(g, {"a", "x"});
  ASSERT_TRUE(jg.verify().empty()) << jg.verify()[0];
  TensorMap jf = feeds;
  jf["tangent.a"] = da;
  jf["tangent.x"] = dx;
  std::vector<Tensor> got = evaluate(jg, jf);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].get_f64(0), evaluate(g, feeds)[0].get_f64(0));
  const double h = 1e-6;
  auto moved = [&](double s) {
    TensorMap f = feeds;
    for (const char* n : {"a", "x"}) {
      Tensor v = feeds.at(n).clone();
      const Tensor& d = std::string(n) == "a" ? da : dx;
      for (int64_t e = 0; e < 3; ++e) v.set_f64(e, v.get_f64(e) + s * d.get_f64(e));
      f[n] = v;
    }
    return evaluate(g, f)[0].get_f64(0);
  };
  const double fd = (moved(h) - moved(-h)) / (2 * h);
  EXPECT_NEAR(got[1].get_f64(0), fd, 1e-6 * (1 + std::abs(fd)));
  EXPECT_GT(std::abs(fd), 1e-3);  // the loops do depend on the inputs

  // A loop inside a scan body and inside a cond branch: grad fails (the scan's vjp
  // differentiates the body); jvp runs the scan / cond in forward mode, carrying the tangents,
  // with the loop's tangent loop built in the body as at the top level.
  Graph s("scan_of_loop");
  Value xs = s.input("xs", t, {4, 3});
  Graph body("step");
  Value bc = body.input("c", t, {3});
  Value bx = body.input("x", t, {3});
  Value lr = loop(body, bx, bc);
  body.set_outputs({body.mul(lr, body.scalar(0.01, t)), body.sin(lr)});
  Value init = s.broadcast_in_dim(s.scalar(0.7, t), {3}, {});
  std::vector<Value> sr = s.scan(std::move(body), {init}, {xs});
  s.set_outputs({s.add(s.reduce_sum(sr[0], {0}), s.reduce_sum(sr[1], {0, 1}))});
  EXPECT_NE(error_of([&] { grad(s, {"xs"}); }).find("has no max_trip_count"), std::string::npos);

  Graph k("cond_of_loop");
  Value kp = k.input("p", DType::bool_, {});
  Value ka = k.input("a", t, {3});
  Value kx = k.input("x", t, {3});
  Graph on("on"), off("off");
  Value oa = on.input("a", t, {3});
  on.set_outputs({loop(on, oa, on.input("x", t, {3}))});
  off.input("a", t, {3});
  Value fx = off.input("x", t, {3});
  off.set_outputs({off.mul(fx, fx)});
  Value kr = k.cond(kp, std::move(on), std::move(off), {ka, kx})[0];
  k.set_outputs({k.reduce_sum(k.sin(kr), {0})});

  // jvp of a scalar-output graph against f64 central differences along `dirs`.
  auto expect_jvp_is_fd = [&](const Graph& f, const TensorMap& at, const TensorMap& dirs) {
    std::vector<std::string> names;
    TensorMap jf = at;
    for (const auto& [n, d] : dirs) {
      names.push_back(n);
      jf["tangent." + n] = d;
    }
    Graph jf_graph = jvp(f, names);
    ASSERT_TRUE(jf_graph.verify().empty()) << jf_graph.verify()[0];
    std::vector<Tensor> out = evaluate(jf_graph, jf);
    ASSERT_EQ(out.size(), 2u);
    auto moved_by = [&](double step) {
      TensorMap m = at;
      for (const auto& [n, d] : dirs) {
        Tensor v = at.at(n).clone();
        for (int64_t e = 0; e < v.shape().numel(); ++e)
          v.set_f64(e, v.get_f64(e) + step * d.get_f64(e));
        m[n] = v;
      }
      return evaluate(f, m)[0].get_f64(0);
    };
    const double d = (moved_by(h) - moved_by(-h)) / (2 * h);
    EXPECT_EQ(out[0].get_f64(0), evaluate(f, at)[0].get_f64(0));
    EXPECT_NEAR(out[1].get_f64(0), d, 1e-6 * (1 + std::abs(d))) << f.name();
    EXPECT_GT(std::abs(d), 1e-3) << f.name();
  };
  expect_jvp_is_fd(s, {{"xs", random_tensor(t, {4, 3}, 25, 0.1, 0.5)}},
                   {{"xs", random_tensor(t, {4, 3}, 26, -1, 1)}});
  // A bounded loop (2 of at most 3 trips) whose body runs the unbounded one: forward mode too.
  Graph wl("loop_of_loop");
  Value wa = wl.input("a", t, {3});
  Value wx = wl.input("x", t, {3});
  Value wr = counted_while(
      wl, wa, wx, 2,
      [&](Graph& b, Value ba, Value bx) { return b.mul(loop(b, ba, bx), b.scalar(0.05, t)); },
      3)[1];
  wl.set_outputs({wl.reduce_sum(wl.sin(wr), {0})});
  EXPECT_NE(error_of([&] { grad(wl, {"x"}); }).find("has no max_trip_count"), std::string::npos);
  expect_jvp_is_fd(
      wl, {{"a", random_tensor(t, {3}, 31, 0.1, 0.5)}, {"x", random_tensor(t, {3}, 32, 0.5, 1)}},
      {{"a", random_tensor(t, {3}, 33, -1, 1)}, {"x", random_tensor(t, {3}, 34, -1, 1)}});
  for (double p : {1.0, 0.0})
    expect_jvp_is_fd(
        k,
        {{"p", ints(DType::bool_, {}, {p})},
         {"a", random_tensor(t, {3}, 27, 0.1, 0.5)},
         {"x", random_tensor(t, {3}, 28, 0.5, 1)}},
        {{"a", random_tensor(t, {3}, 29, -1, 1)}, {"x", random_tensor(t, {3}, 30, -1, 1)}});
}

// Integer carries and consts get no cotangent; a scan without a carry and a cond whose float
// operand reaches only one branch still differentiate.
TEST(ControlFlowAutodiff, MixedDtypesAndNoCarry) {
  Graph g("mixed");
  Value xs = g.input("xs", DType::f64, {4, 3});
  Value k = g.input("k", DType::i32, {});
  Graph b("sq");
  Value bx = b.input("x", DType::f64, {3});
  b.set_outputs({b.mul(bx, bx)});
  Value ys = g.scan(std::move(b), {}, {xs})[0];  // no carry: ys = xs^2
  Graph t("t"), f("f");
  t.input("k", DType::i32, {});
  Value tv = t.input("v", DType::f64, {4, 3});
  t.set_outputs({t.mul(tv, t.scalar(3, DType::f64))});
  Value fk = f.input("k", DType::i32, {});
  f.input("v", DType::f64, {4, 3});
  f.set_outputs({f.broadcast_in_dim(f.convert(fk, DType::f64), {4, 3}, {})});
  Value r = g.cond(g.gt(k, g.scalar(0, DType::i32)), std::move(t), std::move(f), {k, ys})[0];
  g.set_outputs({g.reduce_sum(r, {0, 1})});
  Tensor xv = random_tensor(DType::f64, {4, 3}, 9, -1, 1);
  for (int kv : {1, 0}) {
    TensorMap feeds{{"xs", xv},
                    {"k", Tensor::from_doubles(DType::i32, {}, std::vector<double>{double(kv)})}};
    std::vector<Tensor> out = evaluate(grad(g, {"xs"}), feeds);
    for (int64_t e = 0; e < 12; ++e)  // d/dx sum(3 x^2) = 6 x, or 0 on the false branch
      EXPECT_DOUBLE_EQ(out[1].get_f64(e), kv ? 6 * xv.get_f64(e) : 0.0);
  }
}

// f64 central difference of output 0 of g along `dir` of input `name`.
double central_difference(const Graph& g, TensorMap feeds, const std::string& name,
                          const Tensor& dir) {
  const double h = 1e-6;
  Tensor x = feeds.at(name);
  auto at = [&](double s) {
    Tensor m = x.clone();
    for (int64_t e = 0; e < m.numel(); ++e) m.set_f64(e, x.get_f64(e) + s * dir.get_f64(e));
    feeds[name] = m;
    return evaluate(g, feeds)[0].get_f64(0);
  };
  return (at(h) - at(-h)) / (2 * h);
}

// Nested regions: a scan whose body holds a cond on the step's sign, inside a cond branch;
// grad, jvp and vmap(grad) (per-example gradients) against f64 differences.
TEST(ControlFlowAutodiff, NestedRegionsDifferentiateAndBatch) {
  const DType t = DType::f64;
  Graph g("nested");
  Value p = g.input("p", DType::bool_, {});
  Value xs = g.input("xs", t, {6, 2});
  Graph step("step");
  Value c = step.input("c", t, {2});
  Value x = step.input("x", t, {2});
  Graph pos("pos"), neg("neg");
  Value pc = pos.input("c", t, {2}), px = pos.input("x", t, {2});
  pos.set_outputs({pos.add(pos.mul(pos.sin(pc), px), pc)});
  Value nc = neg.input("c", t, {2}), nx = neg.input("x", t, {2});
  neg.set_outputs({neg.sub(neg.mul(nc, nx), neg.tanh(nx))});
  Value positive = step.gt(step.reduce_sum(x, {0}), step.scalar(0, t));
  Value next = step.cond(positive, std::move(pos), std::move(neg), {c, x})[0];
  step.set_outputs({next, step.mul(next, next)});
  Graph with_scan("with_scan"), plain("plain");
  Value wx = with_scan.input("xs", t, {6, 2});
  Value init = with_scan.broadcast_in_dim(with_scan.scalar(0.5, t), {2}, {});
  std::vector<Value> r = with_scan.scan(std::move(step), {init}, {wx});
  with_scan.set_outputs(
      {with_scan.add(with_scan.reduce_sum(r[0], {0}), with_scan.reduce_sum(r[1], {0, 1}))});
  Value px2 = plain.input("xs", t, {6, 2});
  plain.set_outputs({plain.reduce_sum(plain.mul(px2, px2), {0, 1})});
  g.set_outputs({g.cond(p, std::move(with_scan), std::move(plain), {xs})[0]});

  Tensor xv = random_tensor(t, {6, 2}, 11, -1, 1);
  Tensor dir = random_tensor(t, {6, 2}, 12, -1, 1);
  for (int pv : {1, 0}) {
    SCOPED_TRACE(pv);
    TensorMap feeds{{"p", Tensor::from_doubles(DType::bool_, {}, std::vector<double>{double(pv)})},
                    {"xs", xv}};
    const double fd = central_difference(g, feeds, "xs", dir);
    std::vector<Tensor> dg = evaluate(grad(g, {"xs"}), feeds);
    double ad = 0;
    for (int64_t e = 0; e < 12; ++e) ad += dg[1].get_f64(e) * dir.get_f64(e);
    EXPECT_NEAR(ad, fd, 1e-6 * (1 + std::abs(fd)));
    TensorMap jf = feeds;
    jf["tangent.xs"] = dir;
    EXPECT_NEAR(evaluate(jvp(g, {"xs"}), jf)[1].get_f64(0), fd, 1e-6 * (1 + std::abs(fd)));
  }
  // Per-example gradients: vmap of the gradient graph over a batch of (p, xs).
  Graph per_example = vmap(grad(g, {"xs"}), {0, 0}, {}, 2);
  Tensor ps = Tensor::from_doubles(DType::bool_, {2}, std::vector<double>{1, 0});
  Tensor xb(t, {2, 6, 2});
  for (int64_t e = 0; e < 24; ++e) xb.set_f64(e, xv.get_f64(e % 12) * (e < 12 ? 1 : -1));
  std::vector<Tensor> pe = evaluate(per_example, {{"p", ps}, {"xs", xb}});
  for (int64_t b = 0; b < 2; ++b) {
    Tensor xb1(t, {6, 2});
    for (int64_t e = 0; e < 12; ++e) xb1.set_f64(e, xb.get_f64(b * 12 + e));
    std::vector<Tensor> one = evaluate(
        grad(g, {"xs"}),
        {{"p", Tensor::from_doubles(DType::bool_, {}, std::vector<double>{b == 0 ? 1.0 : 0.0})},
         {"xs", xb1}});
    for (int64_t e = 0; e < 12; ++e)
      EXPECT_EQ(pe[1].get_f64(b * 12 + e), one[1].get_f64(e))
          << "example " << b << " [" << e << "]";
  }
}

// vmap(g) with every input batched at axis 0 (or shared, `shared`) against g run per example:
// bitwise equal on the evaluator (the same ops on the same values).
void expect_vmap_is_per_example(const Graph& g, const TensorMap& feeds, int64_t size,
                                const std::set<std::string>& shared = {}) {
  std::vector<BatchAxis> in_axes;
  for (int32_t id : g.inputs())
    in_axes.push_back(shared.count(g.node(id).name) ? BatchAxis{} : BatchAxis{0});
  Graph v = vmap(g, in_axes, {}, size);
  ASSERT_TRUE(v.verify().empty()) << v.verify()[0];
  std::vector<Tensor> got = evaluate(v, feeds);
  for (int64_t b = 0; b < size; ++b) {
    TensorMap one;
    for (const auto& [n, t] : feeds) {
      if (shared.count(n)) {
        one[n] = t;
        continue;
      }
      Tensor s(t.dtype(),
               Shape(std::vector<int64_t>(t.shape().dims().begin() + 1, t.shape().dims().end())));
      std::memcpy(s.data(), t.data() + static_cast<size_t>(b) * s.nbytes(), s.nbytes());
      one[n] = s;
    }
    std::vector<Tensor> want = evaluate(g, one);
    ASSERT_EQ(got.size(), want.size());
    for (size_t j = 0; j < want.size(); ++j)
      EXPECT_EQ(std::memcmp(got[j].data() + static_cast<size_t>(b) * want[j].nbytes(),
                            want[j].data(), want[j].nbytes()),
                0)
          << "example " << b << " output " << j;
  }
}

// A batched bool predicate selects per lane; a batched switch index too, clamped per lane.
TEST(ControlFlowVmap, BatchedPredicateSelectsPerLane) {
  Graph g("cond");
  Value p = g.input("p", DType::bool_, {});
  Value x = g.input("x", DType::f32, {3});
  Graph t("t"), f("f");
  t.set_outputs({t.sin(t.input("x", DType::f32, {3}))});
  Value fx = f.input("x", DType::f32, {3});
  f.set_outputs({f.mul(fx, fx)});
  g.set_outputs({g.cond(p, std::move(t), std::move(f), {x})[0]});
  TensorMap feeds{{"p", ints(DType::bool_, {4}, {1, 0, 0, 1})},
                  {"x", random_tensor(DType::f32, {4, 3}, 1, -1, 1)}};
  expect_vmap_is_per_example(g, feeds, 4);
  expect_vmap_is_per_example(g, {{"p", ints(DType::bool_, {}, {0})}, {"x", feeds["x"]}}, 4, {"p"});

  Graph s("switch");
  Value i = s.input("i", DType::i32, {});
  Value sx = s.input("x", DType::f32, {2});
  std::vector<Graph> bs;
  for (int k = 0; k < 3; ++k) {
    Graph b("b" + std::to_string(k));
    Value bx = b.input("x", DType::f32, {2});
    b.set_outputs({b.add(bx, b.scalar(10.0 * k, DType::f32)), b.convert(bx, DType::i32)});
    bs.push_back(std::move(b));
  }
  std::vector<Value> r = s.switch_case(i, std::move(bs), {sx});
  s.set_outputs(r);
  expect_vmap_is_per_example(s,
                             {{"i", ints(DType::i32, {5}, {-2, 0, 1, 2, 9})},
                              {"x", random_tensor(DType::f32, {5, 2}, 2, -3, 3)}},
                             5);
}

// A batched while predicate: each lane runs its own number of trips (Newton's sqrt to a
// per-lane tolerance and a doubling loop with per-lane limits), finished lanes frozen.
TEST(ControlFlowVmap, BatchedWhileRunsEachLaneItsTrips) {
  Graph g("doubling");
  Value lim = g.input("lim", DType::f32, {});
  Value x0 = g.input("x", DType::f32, {2});
  Graph c("c"), b("b");
  Value cl = c.input("lim", DType::f32, {});
  c.input("n", DType::i32, {});
  Value cx = c.input("x", DType::f32, {2});
  c.set_outputs({c.lt(c.reduce_sum(cx, {0}), cl)});
  b.input("lim", DType::f32, {});
  Value bn = b.input("n", DType::i32, {});
  Value bx = b.input("x", DType::f32, {2});
  b.set_outputs({b.add(bn, b.scalar(1, DType::i32)), b.add(bx, bx)});
  std::vector<Value> r =
      g.while_loop(std::move(c), std::move(b), {g.scalar(0, DType::i32), x0}, {lim});
  g.set_outputs(r);
  TensorMap feeds{{"lim", ints(DType::f32, {4}, {1, 10, 1000, -5})},
                  {"x", ints(DType::f32, {4, 2}, {0.25, 0.5, 1, 1, 0.5, 0.5, 1, 2})}};
  expect_vmap_is_per_example(g, feeds, 4);
  std::vector<Tensor> out = evaluate(vmap(g, {0, 0}, {}, 4), feeds);
  EXPECT_EQ(out[0].get_i64(0), 1);  // trips per lane: 1, 3, 10, 0
  EXPECT_EQ(out[0].get_i64(1), 3);
  EXPECT_EQ(out[0].get_i64(2), 10);
  EXPECT_EQ(out[0].get_i64(3), 0);
}

// scan: shared init with a batched const (the carry becomes batched), batched xs, reverse.
TEST(ControlFlowVmap, ScanBatchesBodyAndMovesTheStepAxis) {
  Graph g("scan");
  Value w = g.input("w", DType::f64, {3, 3});
  Value h0 = g.input("h0", DType::f64, {3});
  Value xs = g.input("xs", DType::f64, {6, 3});
  Graph cell("cell");
  Value cw = cell.input("w", DType::f64, {3, 3});
  Value ch = cell.input("h", DType::f64, {3});
  Value cx = cell.input("x", DType::f64, {3});
  Value h2 = cell.tanh(cell.add(cell.dot_general(ch, cw, {}, {}, {0}, {0}), cx));
  cell.set_outputs({h2, cell.sin(h2)});
  ScanOptions o;
  o.reverse = true;
  g.set_outputs(g.scan(std::move(cell), {h0}, {xs}, {w}, o));
  TensorMap feeds{{"w", random_tensor(DType::f64, {2, 3, 3}, 3, -1, 1)},
                  {"h0", random_tensor(DType::f64, {3}, 4, -1, 1)},
                  {"xs", random_tensor(DType::f64, {2, 6, 3}, 5, -1, 1)}};
  expect_vmap_is_per_example(g, feeds, 2, {"h0"});
  feeds["xs"] = random_tensor(DType::f64, {6, 3}, 6, -1, 1);
  expect_vmap_is_per_example(g, feeds, 2, {"h0", "xs"});
}

// The node of kind `op` in g's top level (exactly one expected).
const Node& only(const Graph& g, OpKind op) {
  const Node* found = nullptr;
  for (const Node& n : g.nodes())
    if (n.op == op) {
      EXPECT_EQ(found, nullptr) << "two " << op_name(op) << " nodes";
      found = &n;
    }
  EXPECT_NE(found, nullptr) << "no " << op_name(op) << " node";
  return *found;
}

// jax's fixed point: a scan carry is batched only when its init is or the body makes it so
// (also through another carry, found on the second round: p' = q, q' = q + x); the rest, and
// the ys computed from them, stay unbatched in the batched graph.
TEST(ControlFlowVmap, ScanBatchesOnlyTheCarriesThatNeedIt) {
  const DType t = DType::f64;
  Graph g("fixed_point");
  Value w = g.input("w", t, {3});
  Value xs = g.input("xs", t, {5, 3});
  Graph b("b");
  Value bw = b.input("w", t, {3});
  Value bn = b.input("n", DType::i32, {});
  Value bacc = b.input("acc", t, {3});
  Value bp = b.input("p", t, {3});
  Value bq = b.input("q", t, {3});
  Value bx = b.input("x", t, {3});
  Value acc2 = b.add(b.mul(bacc, bw), bw);
  b.set_outputs({b.add(bn, b.scalar(1, DType::i32)), acc2, bq, b.add(b.sin(bq), bx), b.cos(acc2),
                 b.mul(bp, bq)});
  Value zero = g.constant(ints(t, {3}, {0.5, -0.25, 1}));
  std::vector<Value> r =
      g.scan(std::move(b), {g.scalar(0, DType::i32), zero, zero, zero}, {xs}, {w}, ScanOptions{});
  g.set_outputs(r);
  TensorMap feeds{{"w", random_tensor(t, {3}, 7, -1, 1)},
                  {"xs", random_tensor(t, {2, 5, 3}, 8, -1, 1)}};
  expect_vmap_is_per_example(g, feeds, 2, {"w"});
  const Graph v = vmap(g, {BatchAxis{}, BatchAxis{0}}, {}, 2);
  const Node& s = only(v, OpKind::Scan);
  ASSERT_EQ(s.results.size(), 6u);
  EXPECT_EQ(s.results[0].to_string(), "i32[]");       // n: unbatched
  EXPECT_EQ(s.results[1].to_string(), "f64[3]");      // acc: unbatched (w is shared)
  EXPECT_EQ(s.results[2].to_string(), "f64[2,3]");    // p: batched on the second round
  EXPECT_EQ(s.results[3].to_string(), "f64[2,3]");    // q: batched by x
  EXPECT_EQ(s.results[4].to_string(), "f64[5,3]");    // ys of acc: unbatched
  EXPECT_EQ(s.results[5].to_string(), "f64[5,2,3]");  // ys of p q: batched (step axis first)
}

// A while_loop whose predicate reads only unbatched carries stays a plain loop (no any-lane
// cond, no per-lane select) with its counter unbatched; a batched const in the body batches
// only the carry it reaches.
TEST(ControlFlowVmap, WhileWithUnbatchedPredicateStaysPlain) {
  const DType t = DType::f64;
  Graph g("counted");
  Value a = g.input("a", t, {2});
  Value x0 = g.input("x", t, {2});
  g.set_outputs(counted_while(g, a, x0, 5, [&](Graph& b, Value ba, Value bx) {
    return b.add(b.mul(bx, b.scalar(1.5, t)), ba);
  }));
  TensorMap feeds{{"a", random_tensor(t, {3, 2}, 9, -1, 1)},
                  {"x", random_tensor(t, {2}, 10, -1, 1)}};
  expect_vmap_is_per_example(g, feeds, 3, {"x"});
  const Graph v = vmap(g, {BatchAxis{0}, BatchAxis{}}, {}, 3);
  const Node& w = only(v, OpKind::WhileLoop);
  EXPECT_EQ(w.results[0].to_string(), "i32[]");
  EXPECT_EQ(w.results[1].to_string(), "f64[3,2]");
  for (const Node& n : w.attrs.get_graph("body").nodes()) EXPECT_NE(n.op, OpKind::Select);
  for (const Node& n : w.attrs.get_graph("cond").nodes()) EXPECT_NE(n.op, OpKind::ReduceSum);
}

}  // namespace
}  // namespace rlx::autodiff
