// The control-flow ops cond, while_loop and scan in the IR: builders and the reference evaluator
// (lax semantics, including the empty scan and the zero-trip loop), every verifier rule with its
// diagnostic, and the text form of nested regions. Values against JAX: tests/golden.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../common/test_util.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

using testing::error_of;

Tensor f32(Shape s, std::vector<double> v) { return Tensor::from_doubles(DType::f32, s, v); }
Tensor scalar_i32(int64_t v) { return Tensor::from_ints(DType::i32, {}, std::vector<int64_t>{v}); }
Tensor scalar_bool(bool v) {
  return Tensor::from_ints(DType::bool_, {}, std::vector<int64_t>{v ? 1 : 0});
}
std::vector<double> values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.get_f64(i));
  return v;
}

// A body graph of one f32[n] input returning x * k.
Graph scale_body(const std::string& name, double k, Shape shape = {2}) {
  Graph b(name);
  Value x = b.input("x", DType::f32, shape);
  b.set_outputs({b.mul(x, b.scalar(k, DType::f32))});
  return b;
}

// Cumulative sum as a scan: carry c f32[], x f32[] -> (c + x, c + x).
Graph cumsum_body() {
  Graph b("step");
  Value c = b.input("c", DType::f32, {});
  Value x = b.input("x", DType::f32, {});
  Value s = b.add(c, x);
  b.set_outputs({s, s});
  return b;
}

// ---------------------------------------------------------------- builders and evaluator

TEST(ControlFlow, CondRunsTheBranchOfThePredicate) {
  Graph g;
  Value p = g.input("p", DType::bool_, {});
  Value x = g.input("x", DType::f32, {2});
  std::vector<Value> r = g.cond(p, scale_body("t", 2), scale_body("f", -1), {x});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(g.type(r[0]), (TensorType{DType::f32, {2}}));
  g.set_outputs(r);
  EXPECT_TRUE(g.verify().empty());
  Tensor xv = f32({2}, {1.5, -3});
  EXPECT_EQ(values(evaluate(g, {{"p", scalar_bool(true)}, {"x", xv}})[0]),
            (std::vector<double>{3, -6}));
  EXPECT_EQ(values(evaluate(g, {{"p", scalar_bool(false)}, {"x", xv}})[0]),
            (std::vector<double>{-1.5, 3}));
  // Stored as jax's cond_p: branches [false, true].
  const GraphList& br = g.node(r[0]).attrs.get_graphs("branches");
  EXPECT_EQ(br[0]->name(), "f");
  EXPECT_EQ(br[1]->name(), "t");
}

TEST(ControlFlow, SwitchClampsTheIndexAsJax) {
  Graph g;
  Value i = g.input("i", DType::i32, {});
  Value x = g.input("x", DType::f32, {2});
  std::vector<Graph> branches;
  for (int k = 0; k < 3; ++k) branches.push_back(scale_body("b" + std::to_string(k), k + 1));
  g.set_outputs(g.switch_case(i, std::move(branches), {x}));
  Tensor xv = f32({2}, {1, 2});
  auto run = [&](int64_t idx) {
    return values(evaluate(g, {{"i", scalar_i32(idx)}, {"x", xv}})[0]);
  };
  EXPECT_EQ(run(0), (std::vector<double>{1, 2}));
  EXPECT_EQ(run(1), (std::vector<double>{2, 4}));
  EXPECT_EQ(run(2), (std::vector<double>{3, 6}));
  EXPECT_EQ(run(-7), (std::vector<double>{1, 2}));  // clamped to 0
  EXPECT_EQ(run(99), (std::vector<double>{3, 6}));  // clamped to N-1
}

// while i < n: (i + 1, x * 2), with n a const operand.
std::vector<Value> doubling_loop(Graph& g, Value n, Value i, Value x,
                                 std::optional<int64_t> max_trips = std::nullopt) {
  Graph cond("c");
  {
    Value cn = cond.input("n", DType::i32, {});
    Value ci = cond.input("i", DType::i32, {});
    cond.input("x", DType::f32, {2});
    cond.set_outputs({cond.lt(ci, cn)});
  }
  Graph body("b");
  {
    body.input("n", DType::i32, {});
    Value bi = body.input("i", DType::i32, {});
    Value bx = body.input("x", DType::f32, {2});
    body.set_outputs(
        {body.add(bi, body.scalar(1, DType::i32)), body.mul(bx, body.scalar(2, DType::f32))});
  }
  return g.while_loop(std::move(cond), std::move(body), {i, x}, {n}, max_trips);
}

TEST(ControlFlow, WhileLoopCarriesUntilTheCondFails) {
  Graph g;
  Value n = g.input("n", DType::i32, {});
  Value i = g.input("i", DType::i32, {});
  Value x = g.input("x", DType::f32, {2});
  std::vector<Value> r = doubling_loop(g, n, i, x);
  ASSERT_EQ(r.size(), 2u);
  g.set_outputs(r);
  EXPECT_TRUE(g.verify().empty());
  Tensor xv = f32({2}, {1, -0.5});
  auto out = evaluate(g, {{"n", scalar_i32(3)}, {"i", scalar_i32(0)}, {"x", xv}});
  EXPECT_EQ(out[0].get_i64(0), 3);
  EXPECT_EQ(values(out[1]), (std::vector<double>{8, -4}));
  // Zero trips: the cond is false at once and the loop returns its init.
  out = evaluate(g, {{"n", scalar_i32(3)}, {"i", scalar_i32(5)}, {"x", xv}});
  EXPECT_EQ(out[0].get_i64(0), 5);
  EXPECT_EQ(values(out[1]), (std::vector<double>{1, -0.5}));
}

TEST(ControlFlow, WhileLoopStopsAtItsMaximumTripCount) {
  for (int64_t max : {0, 2, 10}) {
    SCOPED_TRACE(max);
    Graph g;
    Value n = g.input("n", DType::i32, {});
    Value i = g.input("i", DType::i32, {});
    Value x = g.input("x", DType::f32, {2});
    std::vector<Value> r = doubling_loop(g, n, i, x, max);
    EXPECT_EQ(g.node(r[0]).attrs.get_int("max_trip_count"), max);
    g.set_outputs(r);
    auto out = evaluate(g, {{"n", scalar_i32(4)}, {"i", scalar_i32(0)}, {"x", f32({2}, {1, 1})}});
    EXPECT_EQ(out[0].get_i64(0), std::min<int64_t>(max, 4));
  }
}

TEST(ControlFlow, ScanIsCumulativeSum) {
  Graph g;
  Value x = g.input("x", DType::f32, {5});
  std::vector<Value> r = g.scan(cumsum_body(), {g.scalar(0, DType::f32)}, {x});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(g.type(r[0]), (TensorType{DType::f32, {}}));
  EXPECT_EQ(g.type(r[1]), (TensorType{DType::f32, {5}}));
  EXPECT_EQ(g.node(r[0]).attrs.get_int("length"), 5);
  g.set_outputs({r[0], r[1], g.cumsum(x, 0)});
  EXPECT_TRUE(g.verify().empty());
  auto out = evaluate(g, {{"x", f32({5}, {1, 2, 3, 4, 5})}});
  EXPECT_EQ(out[0].get_f64(0), 15);
  EXPECT_EQ(values(out[1]), (std::vector<double>{1, 3, 6, 10, 15}));
  EXPECT_TRUE(out[1].bitwise_equal(out[2]));
}

TEST(ControlFlow, ReverseScanVisitsStepsBackwardsAndKeepsYsByStep) {
  Graph g;
  Value x = g.input("x", DType::f32, {4});
  ScanOptions o;
  o.reverse = true;
  std::vector<Value> r = g.scan(cumsum_body(), {g.scalar(0, DType::f32)}, {x}, {}, o);
  g.set_outputs({r[0], r[1], g.cumsum(x, 0, false, true)});
  auto out = evaluate(g, {{"x", f32({4}, {1, 2, 3, 4})}});
  EXPECT_EQ(out[0].get_f64(0), 10);
  EXPECT_EQ(values(out[1]), (std::vector<double>{10, 9, 7, 4}));
  EXPECT_TRUE(out[1].bitwise_equal(out[2]));
}

TEST(ControlFlow, EmptyScanReturnsInitAndEmptyYs) {
  Graph g;
  Value x = g.input("x", DType::f32, {0, 3});
  Value c0 = g.input("c", DType::f32, {3});
  Graph body("step");
  Value c = body.input("c", DType::f32, {3});
  Value xi = body.input("x", DType::f32, {3});
  body.set_outputs({body.add(c, xi), body.mul(c, xi)});
  std::vector<Value> r = g.scan(std::move(body), {c0}, {x});
  EXPECT_EQ(g.type(r[1]), (TensorType{DType::f32, {0, 3}}));
  g.set_outputs(r);
  auto out = evaluate(g, {{"x", Tensor(DType::f32, {0, 3})}, {"c", f32({3}, {1, 2, 3})}});
  EXPECT_EQ(values(out[0]), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(out[1].type(), (TensorType{DType::f32, {0, 3}}));
}

TEST(ControlFlow, ScanWithoutXsNeedsALengthAndPassesConsts) {
  Graph g;
  Value k = g.input("k", DType::f32, {});
  Graph body("step");
  Value bk = body.input("k", DType::f32, {});
  Value c = body.input("c", DType::f32, {});
  Value n = body.add(c, bk);
  body.set_outputs({n, body.mul(n, n)});
  EXPECT_EQ(error_of([&] { g.scan(body, {g.scalar(0, DType::f32)}, {}, {k}); }),
            "op 'scan': length is required when there are no xs (lax.scan)");
  ScanOptions o;
  o.length = 3;
  std::vector<Value> r = g.scan(std::move(body), {g.scalar(1, DType::f32)}, {}, {k}, o);
  g.set_outputs(r);
  auto out = evaluate(g, {{"k", Tensor::from_doubles(DType::f32, {}, std::vector<double>{2})}});
  EXPECT_EQ(out[0].get_f64(0), 7);
  EXPECT_EQ(values(out[1]), (std::vector<double>{9, 25, 49}));
}

// ---------------------------------------------------------------- verifier rules

// Each rule's message names the op, the node, the branch or body and both types.
void expect_error(const std::string& msg, const std::string& want) {
  EXPECT_NE(msg.find(want), std::string::npos) << "got: " << msg << "\nwant: " << want;
}

TEST(ControlFlowVerify, CondPredicateMustBeABoolOrI32Scalar) {
  Graph g;
  Value x = g.input("x", DType::f32, {2});
  Value p = g.input("p", DType::f32, {});
  Value pv = g.input("pv", DType::bool_, {2});
  size_t before = g.nodes().size();
  std::string m = error_of([&] { g.cond(p, scale_body("t", 1), scale_body("f", 2), {x}); });
  expect_error(m, "op 'cond' (node %");
  expect_error(m,
               "operand 0 must be a bool[] predicate (lax.cond) or an i32[] branch index "
               "(lax.switch), got f32[]");
  m = error_of([&] { g.cond(pv, scale_body("t", 1), scale_body("f", 2), {x}); });
  expect_error(m, "got bool[2]");
  EXPECT_EQ(g.nodes().size(), before);  // failed builders leave the graph as it was
}

TEST(ControlFlowVerify, CondBranchCounts) {
  Graph g;
  Value x = g.input("x", DType::f32, {2});
  Value p = g.input("p", DType::bool_, {});
  Value i = g.input("i", DType::i32, {});
  expect_error(error_of([&] { g.switch_case(i, {}, {x}); }), "needs at least one branch");
  std::vector<Graph> three{scale_body("a", 1), scale_body("b", 2), scale_body("c", 3)};
  expect_error(error_of([&] { g.switch_case(p, three, {x}); }),
               "a bool predicate selects between exactly 2 branches ([false, true]), got 3");
}

TEST(ControlFlowVerify, CondBranchInputsMustMatchTheOperands) {
  Graph g;
  Value x = g.input("x", DType::f32, {2});
  Value p = g.input("p", DType::bool_, {});
  std::string m = error_of([&] { g.cond(p, scale_body("t", 1), scale_body("f", 2, {3}), {x}); });
  expect_error(m, "op 'cond' (node %");
  expect_error(m, "branch 0 (@f) input 0 (%x) is f32[3] but operand 1 is f32[2]");
  m = error_of([&] { g.cond(p, scale_body("t", 1), scale_body("f", 2), {x, x}); });
  expect_error(m, "branch 0 (@f) has 1 inputs but is passed 2 values");
}

TEST(ControlFlowVerify, CondBranchResultsMustMatch) {
  Graph g;
  Value x = g.input("x", DType::f32, {2});
  Value p = g.input("p", DType::bool_, {});
  Graph t("t");
  Value tx = t.input("x", DType::f32, {2});
  t.set_outputs({t.convert(tx, DType::f64)});
  std::string m = error_of([&] { g.cond(p, t, scale_body("f", 2), {x}); });
  expect_error(m, "op 'cond' (node %");
  expect_error(m, "branch 1 (@t) result 0 is f64[2] but branch 0 (@f) result 0 is f32[2]");
  Graph t2("t2");
  Value t2x = t2.input("x", DType::f32, {2});
  t2.set_outputs({t2x, t2x});
  expect_error(error_of([&] { g.cond(p, t2, scale_body("f", 2), {x}); }),
               "branch 1 (@t2) returns 2 values but branch 0 (@f) returns 1");
}

TEST(ControlFlowVerify, BodiesHoldNoParamsAndReturnSomething) {
  Graph g;
  Value x = g.input("x", DType::f32, {2});
  Value p = g.input("p", DType::bool_, {});
  Graph w("w");
  Value wx = w.input("x", DType::f32, {2});
  w.set_outputs({w.mul(wx, w.param("weight", DType::f32, {2}))});
  expect_error(error_of([&] { g.cond(p, w, scale_body("f", 2), {x}); }),
               "branch 1 (@w) holds param %weight; a body sees only its inputs (pass the weight "
               "as an operand)");
  Graph none("none");
  none.input("x", DType::f32, {2});
  expect_error(error_of([&] { g.cond(p, none, none, {x}); }), "branch 0 (@none) returns no values");
}

TEST(ControlFlowVerify, WhileLoopRules) {
  Graph g;
  Value i = g.input("i", DType::i32, {});
  Value f = g.input("f", DType::f32, {});
  auto cond_of = [](DType carry, DType out) {
    Graph c("c");
    Value v = c.input("v", carry, {});
    c.set_outputs({out == DType::bool_ ? c.lt(v, c.scalar(3, carry)) : c.convert(v, out)});
    return c;
  };
  auto body_of = [](DType carry, DType out) {
    Graph b("b");
    Value v = b.input("v", carry, {});
    b.set_outputs({b.convert(b.add(v, b.scalar(1, carry)), out)});
    return b;
  };
  EXPECT_EQ(
      g.while_loop(cond_of(DType::f32, DType::bool_), body_of(DType::f32, DType::f32), {f}).size(),
      1u);
  std::string m = error_of([&] {
    g.while_loop(cond_of(DType::f32, DType::bool_), body_of(DType::f32, DType::f64), {f});
  });
  expect_error(m, "op 'while_loop' (node %");
  expect_error(m, "body (@b) result 0 is f64[] but carry 0 is f32[]");
  m = error_of(
      [&] { g.while_loop(cond_of(DType::f32, DType::i32), body_of(DType::f32, DType::f32), {f}); });
  expect_error(m, "cond (@c) must return one bool[] value, got i32[]");
  m = error_of([&] {
    g.while_loop(cond_of(DType::i32, DType::bool_), body_of(DType::f32, DType::f32), {f});
  });
  expect_error(m, "cond (@c) input 0 (%v) is i32[] but operand 0 (carry 0) is f32[]");
  m = error_of([&] {
    g.while_loop(cond_of(DType::f32, DType::bool_), body_of(DType::f32, DType::f32), {f}, {}, -1);
  });
  expect_error(m, "max_trip_count must be >= 0, got -1");
  // Consts only, no carry.
  Graph c0("c0");
  c0.input("v", DType::i32, {});
  c0.set_outputs({c0.constant(Tensor::from_ints(DType::bool_, {}, std::vector<int64_t>{0}))});
  m = error_of([&] { g.while_loop(c0, body_of(DType::i32, DType::i32), {}, {i}); });
  expect_error(m, "needs at least one carried value (operands after the 1 consts)");
  // Body returning a different number of values than the carry.
  Graph b2("b2");
  Value v2 = b2.input("v", DType::f32, {});
  b2.set_outputs({v2, v2});
  m = error_of([&] { g.while_loop(cond_of(DType::f32, DType::bool_), b2, {f}); });
  expect_error(m, "body (@b2) returns 2 values but the loop carries 1");
  // num_consts out of range (through emit, as a parser or a hand-built node would give it).
  AttrMap a{{"cond", std::make_shared<const Graph>(cond_of(DType::f32, DType::bool_))},
            {"body", std::make_shared<const Graph>(body_of(DType::f32, DType::f32))},
            {"num_consts", int64_t{2}}};
  expect_error(error_of([&] { g.emit(OpKind::WhileLoop, {f}, a); }),
               "num_consts must be in [0, 1], got 2");
}

TEST(ControlFlowVerify, ScanRules) {
  Graph g;
  Value x = g.input("x", DType::f32, {5});
  Value x4 = g.input("x4", DType::f32, {4});
  Value s = g.input("s", DType::f32, {});
  Value zero = g.scalar(0, DType::f32);
  // xs whose leading dims disagree with the length.
  std::string m = error_of([&] { g.scan(cumsum_body(), {zero}, {x}, {}, {.length = 4}); });
  expect_error(m, "op 'scan' (node %");
  expect_error(m, "operand 1 (xs 0) is f32[5]; each xs needs a leading axis of the scan length 4");
  m = error_of([&] { g.scan(cumsum_body(), {zero}, {s}, {}, {.length = 1}); });
  expect_error(m, "operand 1 (xs 0) is f32[]");
  // Carry type mismatch between init and the body's result.
  Graph b("step");
  Value c = b.input("c", DType::f32, {});
  Value xi = b.input("x", DType::f32, {});
  b.set_outputs({b.convert(b.add(c, xi), DType::f64)});
  m = error_of([&] { g.scan(b, {zero}, {x}); });
  expect_error(m, "body (@step) result 0 is f64[] but carry 0 is f32[]");
  // Body input not matching the slice of xs.
  m = error_of([&] { g.scan(cumsum_body(), {zero}, {g.reshape(x4, {2, 2})}); });
  expect_error(m, "body (@step) input 1 (%x) is f32[] but the slice of operand 1 (xs 0) is f32[2]");
  // A body returning fewer values than the carry.
  Graph few("few");
  few.input("c", DType::f32, {});
  Value fx = few.input("x", DType::f32, {});
  few.set_outputs({fx});
  m = error_of([&] { g.scan(few, {zero, zero}, {}, {}, {.length = 2}); });
  expect_error(m, "body (@few) returns 1 values but the scan carries 2");
  // Attributes through emit.
  AttrMap a{{"body", std::make_shared<const Graph>(cumsum_body())},
            {"num_carry", int64_t{1}},
            {"length", int64_t{-1}}};
  expect_error(error_of([&] {
                 g.emit(OpKind::Scan, {zero, x}, a);
               }),
               "length must be >= 0, got -1");
  a.set("length", int64_t{5});
  a.set("unroll", int64_t{0});
  expect_error(error_of([&] { g.emit(OpKind::Scan, {zero, x}, a); }), "unroll must be >= 1, got 0");
  a.set("unroll", int64_t{1});
  a.set("num_carry", int64_t{3});
  expect_error(error_of([&] {
                 g.emit(OpKind::Scan, {zero, x}, a);
               }),
               "num_carry must be in [0, 2], got 3");
  Graph onlyc("onlyc");
  Value oc = onlyc.input("c", DType::f32, {});
  onlyc.input("x", DType::f32, {});
  onlyc.set_outputs({oc});
  a.set("num_carry", int64_t{1});
  a.set("body", std::make_shared<const Graph>(onlyc));
  EXPECT_EQ(g.emit(OpKind::Scan, {zero, x}, a).size(), 1u);  // ys are optional
}

// ---------------------------------------------------------------- text form

// A scan inside a cond branch inside the main graph: nested regions print, parse and print to
// the same text, and the parsed graph equals the built one and computes the same.
Graph nested_graph() {
  Graph g("nested");
  Value p = g.input("p", DType::bool_, {});
  Value x = g.input("x", DType::f32, {4});
  Graph t("sum_branch");
  {
    Value tx = t.input("x", DType::f32, {4});
    std::vector<Value> r = t.scan(cumsum_body(), {t.scalar(0, DType::f32)}, {tx});
    t.set_outputs({r[1]});
  }
  Graph f("neg_branch");
  {
    Value fx = f.input("x", DType::f32, {4});
    f.set_outputs({f.neg(fx)});
  }
  g.set_outputs(g.cond(p, std::move(t), std::move(f), {x}));
  return g;
}

TEST(ControlFlowText, NestedRegionsRoundTrip) {
  Graph g = nested_graph();
  std::string text = g.to_string();
  EXPECT_NE(text.find("branches=[graph @neg_branch {"), std::string::npos) << text;
  EXPECT_NE(text.find("}, graph @sum_branch {"), std::string::npos) << text;
  EXPECT_NE(text.find("scan %"), std::string::npos) << text;
  EXPECT_NE(text.find("body=graph @step {"), std::string::npos) << text;
  Graph parsed = Graph::parse(text);
  EXPECT_EQ(parsed.to_string(), text);
  EXPECT_TRUE(parsed == g);
  EXPECT_TRUE(parsed.verify().empty());
  Tensor xv = f32({4}, {1, 2, 3, 4});
  auto out = evaluate(parsed, {{"p", scalar_bool(true)}, {"x", xv}});
  EXPECT_EQ(values(out[0]), (std::vector<double>{1, 3, 6, 10}));
  out = evaluate(parsed, {{"p", scalar_bool(false)}, {"x", xv}});
  EXPECT_EQ(values(out[0]), (std::vector<double>{-1, -2, -3, -4}));
}

TEST(ControlFlowText, WhileLoopRoundTripsWithItsMaximumTripCount) {
  Graph g("loop");
  Value n = g.input("n", DType::i32, {});
  Value i = g.input("i", DType::i32, {});
  Value x = g.input("x", DType::f32, {2});
  g.set_outputs(doubling_loop(g, n, i, x, 7));
  std::string text = g.to_string();
  EXPECT_NE(text.find("num_consts=1, max_trip_count=7}"), std::string::npos) << text;
  Graph parsed = Graph::parse(text);
  EXPECT_EQ(parsed.to_string(), text);
  EXPECT_TRUE(parsed == g);
}

TEST(ControlFlowText, ParsedBodyMismatchIsALocatedError) {
  std::string text = R"(graph @g {
  %p = input : bool[]
  %x = input : f32[2]
  %r = cond %p, %x {branches=[graph @f {
    %a = input : f32[2]
    return %a
  }, graph @t {
    %a = input : f32[2]
    %b = convert %a {dtype=i32} : i32[2]
    return %b
  }]} : f32[2]
  return %r
})";
  std::string m = error_of([&] { Graph::parse(text); });
  expect_error(m,
               "line 4:8: op 'cond' (node %r): branch 1 (@t) result 0 is i32[2] but branch 0 "
               "(@f) result 0 is f32[2]");
  // A graph list where a single graph is expected, and the reverse.
  std::string single = R"(graph @g {
  %x = input : f32[2]
  %r = cond %x {branches=graph @f {
    %a = input : f32[2]
    return %a
  }} : f32[2]
  return %r
})";
  expect_error(error_of([&] { Graph::parse(single); }),
               "attribute 'branches' of op 'cond' must be a graph list, found a graph");
}

TEST(ControlFlowText, VerifyReportsDiagnosticsInsideBodies) {
  // Bodies are verified as graphs of their own; a valid nested graph has no diagnostics.
  EXPECT_TRUE(nested_graph().verify().empty());
}

}  // namespace
}  // namespace rlx
