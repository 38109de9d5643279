// Tests of the fold-constants and simplify passes: text in / text out, and outputs preserved
// under the reference evaluator (bit for bit, on inputs full of NaN, -0, inf and range edges).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "../common/test_util.h"
#include "pass_file.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/passes.h"

namespace rlx::testing {
namespace {

constexpr DType kNumeric[] = {DType::f32, DType::f16, DType::bf16, DType::f64,
                              DType::i8,  DType::u8,  DType::i32,  DType::i64};
constexpr DType kAll[] = {DType::f32, DType::f16, DType::bf16, DType::f64,  DType::i8,
                          DType::u8,  DType::i32, DType::i64,  DType::bool_};

/// Random values with the edge cases of `dtype` mixed in: for floats NaN of both signs, ±0,
/// ±inf, values that overflow or underflow f16/bf16/f32 and that do not fit small integers; for
/// integers the dtype's min and max and values that wrap in narrower types.
Tensor edge_tensor(DType dtype, Shape shape, uint64_t seed) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> floats = {nan,  -nan, 0.0,    -0.0,  inf,    -inf,      1e30,
                                      -3e9, 7e4,  -65504, 1e-7,  -1e-40, 300.0,     -129.5,
                                      0.1,  2.5,  -2.5,   255.9, 1e300,  16777217.0};
  const std::vector<int64_t> ints = {std::numeric_limits<int64_t>::min(),
                                     std::numeric_limits<int64_t>::max(),
                                     -1,
                                     0,
                                     1,
                                     127,
                                     -128,
                                     200,
                                     255,
                                     300,
                                     -300,
                                     int64_t{1} << 31,
                                     (int64_t{1} << 24) + 1,
                                     (int64_t{1} << 53) + 1};
  Tensor t = random_tensor(dtype, shape, seed, -300, 300);
  std::mt19937_64 rng(seed + 1);
  // The first elements are every edge value in order, so any tensor of 20 or more elements
  // holds them all; later ones mix random edge values with the random ones.
  for (int64_t i = 0; i < t.numel(); ++i) {
    auto pick = [&](size_t n) {
      return i < static_cast<int64_t>(n) ? static_cast<size_t>(i) : rng() % n;
    };
    if (i >= 20 && rng() % 2 == 0) continue;
    if (is_float(dtype))
      t.set_f64(i, floats[pick(floats.size())]);
    else if (is_bool(dtype))
      t.set_i64(i, static_cast<int64_t>(rng() % 2));
    else
      t.set_i64(i, ints[pick(ints.size())]);  // wraps into narrower dtypes
  }
  return t;
}

/// Edge-case feeds for every input and param of `g`.
TensorMap edge_feeds(const Graph& g, uint64_t seed) {
  TensorMap feeds;
  std::vector<int32_t> leaves = g.inputs(), params = g.params();
  leaves.insert(leaves.end(), params.begin(), params.end());
  for (int32_t id : leaves) {
    const Node& n = g.node(id);
    feeds[n.name] = edge_tensor(n.results[0].dtype, n.results[0].shape, seed++);
  }
  return feeds;
}

/// Equal values: same type and bytes, except that two NaNs of the same sign match (the IR does
/// not define NaN payloads).
::testing::AssertionResult same_values(const Tensor& a, const Tensor& b) {
  if (a.type() != b.type())
    return ::testing::AssertionFailure()
           << "type " << a.type().to_string() << " vs " << b.type().to_string();
  auto size = static_cast<size_t>(dtype_size(a.dtype()));
  for (int64_t i = 0; i < a.numel(); ++i) {
    auto off = static_cast<size_t>(i) * size;
    if (std::memcmp(a.data() + off, b.data() + off, size) == 0) continue;
    double x = a.get_f64(i), y = b.get_f64(i);
    if (std::isnan(x) && std::isnan(y) && std::signbit(x) == std::signbit(y)) continue;
    return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs " << y;
  }
  return ::testing::AssertionSuccess();
}

/// Runs `pass` on a copy of `g`, checks the result verifies and evaluates to the same outputs
/// on several edge-case feeds; returns the rewritten graph.
Graph run_and_compare(Pass& pass, const Graph& g, bool expect_changed) {
  Graph out = g;
  EXPECT_EQ(pass.run(out), expect_changed) << g.to_string();
  EXPECT_TRUE(out.verify().empty()) << out.to_string();
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    TensorMap feeds = edge_feeds(g, seed * 100);
    std::vector<Tensor> want = evaluate(g, feeds), got = evaluate(out, feeds);
    EXPECT_EQ(want.size(), got.size());
    for (size_t i = 0; i < std::min(want.size(), got.size()); ++i)
      EXPECT_TRUE(same_values(got[i], want[i]))
          << "output " << i << ", seed " << seed << "\nbefore:\n"
          << g.to_string() << "after:\n"
          << out.to_string();
  }
  return out;
}

/// Number of nodes of kind `op` that some output depends on.
int live_count(const Graph& g, OpKind op) {
  std::vector<bool> live(g.nodes().size(), false);
  for (Value v : g.outputs()) live[static_cast<size_t>(v.node)] = true;
  int count = 0;
  for (size_t i = g.nodes().size(); i-- > 0;) {
    if (!live[i]) continue;
    if (g.nodes()[i].op == op) ++count;
    for (Value v : g.nodes()[i].operands) live[static_cast<size_t>(v.node)] = true;
  }
  return count;
}

// ---------------------------------------------------------------- text in / text out

TEST(FoldConstantsPass, TextFiles) {
  int n = run_pass_files("fold-constants", [] {
    PassManager pm;
    pm.add(create_fold_constants_pass(16));
    return pm;
  });
  EXPECT_GE(n, 4);
}

TEST(SimplifyPass, TextFiles) {
  int n = run_pass_files("simplify", [] {
    PassManager pm;
    pm.add(create_simplify_pass());
    return pm;
  });
  EXPECT_GE(n, 6);
}

// ---------------------------------------------------------------- fold-constants

TEST(FoldConstantsPass, NameAndBadLimit) {
  EXPECT_EQ(create_fold_constants_pass()->name(), "fold-constants");
  EXPECT_EQ(error_of([] { create_fold_constants_pass(-1); }),
            "fold-constants: max_elements must be >= 0, got -1");
}

TEST(FoldConstantsPass, DefaultLimitIsTwoToTheSixteen) {
  Graph g;
  Value c = g.scalar(1.5, DType::f32);
  Value fits = g.broadcast_in_dim(c, {256, 256}, {});
  Value over = g.broadcast_in_dim(c, {257, 256}, {});
  g.set_outputs({fits, over});
  auto pass = create_fold_constants_pass();
  Graph out = run_and_compare(*pass, g, true);
  EXPECT_EQ(out.node(out.outputs()[0]).op, OpKind::Constant);
  EXPECT_EQ(out.node(out.outputs()[1]).op, OpKind::BroadcastInDim);
}

TEST(FoldConstantsPass, LimitCountsEveryResult) {
  // top_k of 8 elements with k = 8 has 16 result elements: folds at 16, not at 15.
  Graph g;
  Value c = g.constant(random_tensor(DType::f32, {8}, 7));
  auto [values, indices] = g.top_k(c, 8);
  g.set_outputs({values, indices});
  auto at16 = create_fold_constants_pass(16);
  Graph out = run_and_compare(*at16, g, true);
  EXPECT_EQ(live_count(out, OpKind::TopK), 0);
  EXPECT_EQ(live_count(out, OpKind::Constant), 2);
  auto at15 = create_fold_constants_pass(15);
  Graph kept = run_and_compare(*at15, g, false);
  EXPECT_EQ(kept.to_string(), g.to_string());
}

TEST(FoldConstantsPass, ConstantSubgraphsFoldAndEvaluateTheSame) {
  // Constant parts of a graph with inputs, over several dtypes and op families; everything
  // that does not depend on %x folds in one run, and a second run finds nothing to do.
  for (DType t : {DType::f32, DType::bf16, DType::f64, DType::i32}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Graph g;
    Value x = g.input("x", t, {3, 4});
    Value a = g.constant(random_tensor(t, {4, 3}, 1));
    Value b = g.constant(random_tensor(t, {4}, 2));
    Value at = g.transpose(a, {1, 0});
    Value s = g.add(at, b);
    Value r = g.reduce_max(s, {0}, true);
    Value io = g.convert(g.iota(DType::i32, {3, 4}, 1), t);
    Value k = g.mul(g.sub(s, r), io);
    Value y = g.add(x, k);
    g.set_outputs({y, g.concatenate({k, s}, 0)});
    auto pass = create_fold_constants_pass();
    Graph out = run_and_compare(*pass, g, true);
    EXPECT_EQ(live_count(out, OpKind::Constant), 2) << out.to_string();
    EXPECT_EQ(live_count(out, OpKind::Add), 1);
    EXPECT_FALSE(pass->run(out));
  }
}

TEST(FoldConstantsPass, ZeroLimitFoldsOnlyEmptyResults) {
  Graph g;
  Value c = g.constant(random_tensor(DType::f32, {0, 3}, 3));
  Value e = g.neg(c);
  Value one = g.neg(g.scalar(2, DType::f32));
  g.set_outputs({e, one});
  auto pass = create_fold_constants_pass(0);
  Graph out = run_and_compare(*pass, g, true);
  EXPECT_EQ(out.node(out.outputs()[0]).op, OpKind::Constant);
  EXPECT_EQ(out.node(out.outputs()[1]).op, OpKind::Neg);
}

// ---------------------------------------------------------------- simplify: neutral elements

/// A constant of `type` with every element `v` (converted as the convert op does).
Value splat_const(Graph& g, DType t, Shape shape, double v) {
  return g.constant(Tensor::full(t, std::move(shape), v));
}

TEST(SimplifyPass, NeutralElementsAreRemovedForEveryDtype) {
  auto pass = create_simplify_pass();
  EXPECT_EQ(pass->name(), "simplify");
  for (DType t : kNumeric) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    // Floats need -0.0 for add and +0.0 for sub; integers have one zero.
    double add_zero = is_float(t) ? -0.0 : 0.0;
    for (Shape cshape : {Shape{}, Shape{5}, Shape{4, 1}}) {
      Graph g;
      Value x = g.input("x", t, {4, 5});
      Value a = g.add(x, splat_const(g, t, cshape, add_zero));
      Value b = g.add(splat_const(g, t, cshape, add_zero), a);
      Value c = g.sub(b, splat_const(g, t, cshape, 0.0));
      Value d = g.mul(c, splat_const(g, t, cshape, 1.0));
      Value e = g.mul(splat_const(g, t, cshape, 1.0), d);
      Value f = g.div(e, splat_const(g, t, cshape, 1.0));
      g.set_outputs({f});
      Graph out = run_and_compare(*pass, g, true);
      EXPECT_EQ(out.outputs()[0], (Value{out.find("x"), 0})) << out.to_string();
    }
  }
}

TEST(SimplifyPass, FloatZerosThatAreNotNeutralAreKept) {
  // Each kept form really differs from x: evaluation shows it, so the rule must not fire.
  auto pass = create_simplify_pass();
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Graph g;
    Value x = g.input("x", t, {24});
    Value plus_zero = g.add(x, splat_const(g, t, {}, 0.0));
    Value minus_neg_zero = g.sub(x, splat_const(g, t, {}, -0.0));
    Value times_zero = g.mul(x, splat_const(g, t, {}, 0.0));
    g.set_outputs({plus_zero, minus_neg_zero, times_zero});
    Graph out = run_and_compare(*pass, g, false);
    EXPECT_EQ(out.to_string(), g.to_string());

    std::vector<double> values(24, 1.0);
    values[0] = -0.0, values[1] = -1.0, values[2] = INFINITY;
    Tensor feed = Tensor::from_doubles(t, {24}, values);
    std::vector<Tensor> r = evaluate(g, {{"x", feed}});
    EXPECT_FALSE(std::signbit(r[0].get_f64(0)));  // -0 + 0 = +0
    EXPECT_FALSE(std::signbit(r[1].get_f64(0)));  // -0 - (-0) = +0
    EXPECT_TRUE(std::signbit(r[2].get_f64(1)));   // -1 * 0 = -0
    EXPECT_TRUE(std::isnan(r[2].get_f64(2)));     // inf * 0 = NaN
  }
}

TEST(SimplifyPass, IntegerTimesZeroIsZero) {
  auto pass = create_simplify_pass();
  for (DType t : {DType::i8, DType::u8, DType::i32, DType::i64}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Graph g;
    Value x = g.input("x", t, {3, 1});
    Value a = g.mul(x, splat_const(g, t, {1, 4}, 0.0));  // broadcasts: zeros of [3,4]
    Value b = g.mul(splat_const(g, t, {}, 0.0), x);
    g.set_outputs({a, b});
    Graph out = run_and_compare(*pass, g, true);
    EXPECT_EQ(live_count(out, OpKind::Mul), 0);
    EXPECT_EQ(out.type(out.outputs()[0]), (TensorType{t, {3, 4}}));
  }
}

TEST(SimplifyPass, BroadcastingNeutralElementIsKept) {
  auto pass = create_simplify_pass();
  Graph g;
  Value x = g.input("x", DType::f32, {3, 1});
  Value a = g.mul(x, splat_const(g, DType::f32, {1, 4}, 1.0));
  Value b = g.add(splat_const(g, DType::f32, {2, 3, 1}, -0.0), x);
  g.set_outputs({a, b});
  Graph out = run_and_compare(*pass, g, false);
  EXPECT_EQ(out.to_string(), g.to_string());
}

TEST(SimplifyPass, NonSplatNeutralConstantsWork) {
  // A constant built from a list whose elements are all neutral folds; one with a single
  // other element does not.
  auto pass = create_simplify_pass();
  Graph g;
  Value x = g.input("x", DType::i32, {3});
  Value ones = g.constant(Tensor::from_ints(DType::i32, {3}, std::vector<int64_t>{1, 1, 1}));
  Value almost = g.constant(Tensor::from_ints(DType::i32, {3}, std::vector<int64_t>{1, 2, 1}));
  g.set_outputs({g.mul(x, ones), g.mul(x, almost)});
  Graph out = run_and_compare(*pass, g, true);
  EXPECT_EQ(out.outputs()[0], (Value{out.find("x"), 0}));
  EXPECT_EQ(out.node(out.outputs()[1]).op, OpKind::Mul);
}

// ---------------------------------------------------------------- simplify: shape chains

TEST(SimplifyPass, TransposeChainsCompose) {
  auto pass = create_simplify_pass();
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    int rank = 1 + static_cast<int>(rng() % 4);
    std::vector<int64_t> dims(static_cast<size_t>(rank));
    for (auto& d : dims) d = 1 + static_cast<int64_t>(rng() % 3);
    Graph g;
    Value v = g.input("x", DType::f32, Shape(dims));
    int chain = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < chain; ++i) {
      std::vector<int64_t> perm(static_cast<size_t>(rank));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      v = g.transpose(v, perm);
    }
    g.set_outputs({v});
    Graph out = g;
    pass->run(out);
    run_and_compare(*create_simplify_pass(), g, !(out == g));
    EXPECT_LE(live_count(out, OpKind::Transpose), 1) << out.to_string();
    // The identity leaves no transpose at all.
    if (out.type(out.outputs()[0]) == g.type(g.outputs()[0]) &&
        live_count(out, OpKind::Transpose) == 1) {
      const auto& p = out.node(out.outputs()[0]).attrs.get_ints("permutation");
      EXPECT_FALSE(std::is_sorted(p.begin(), p.end()));
    }
  }
}

TEST(SimplifyPass, ReshapeChainsCollapse) {
  auto pass = create_simplify_pass();
  Graph g;
  Value x = g.input("x", DType::bf16, {2, 3, 4});
  Value a = g.reshape(g.reshape(g.reshape(x, {6, 4}), {-1}), {4, 6});
  Value b = g.reshape(g.reshape(x, {24}), {2, 3, 4});
  g.set_outputs({a, b});
  Graph out = run_and_compare(*pass, g, true);
  EXPECT_EQ(live_count(out, OpKind::Reshape), 1);
  const Node& r = out.node(out.outputs()[0]);
  EXPECT_EQ(r.operands[0], (Value{out.find("x"), 0}));
  EXPECT_EQ(r.attrs.get_ints("shape"), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(out.outputs()[1], (Value{out.find("x"), 0}));
}

// ---------------------------------------------------------------- simplify: convert chains

TEST(SimplifyPass, ConvertChainsFoldOnlyWhenExact) {
  // Every dtype triple: where the pass shortens convert(convert(x, mid), to), the result must
  // equal the chain on edge-case inputs (NaN, ±0, ±inf, out-of-range values).
  int folded = 0;
  for (DType from : kAll)
    for (DType mid : kAll)
      for (DType to : kAll) {
        if (from == mid || mid == to) continue;
        SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(mid)) +
                     " -> " + std::string(dtype_name(to)));
        Graph g;
        Value x = g.input("x", from, {64});
        g.set_outputs({g.convert(g.convert(x, mid), to)});
        Graph out = g;
        bool changed = create_simplify_pass()->run(out);
        run_and_compare(*create_simplify_pass(), g, changed);
        if (changed) {
          ++folded;
          EXPECT_EQ(live_count(out, OpKind::Convert), from == to ? 0 : 1);
        }
      }
  // Pinned so a rule change shows. Per (from, mid) pair with mid holding from, 8 choices of
  // `to`: bool 8 mids * 8 = 64; i8 and u8 6 * 8 - 4 each (float mid, to u8 resp. i8 would
  // saturate instead of wrap) = 44 + 44; i32 2 * 8 - 2 (f64 mid, to i8/u8) = 14; f16 and bf16
  // 2 * 8 = 16 + 16; f32 8. Total 206.
  EXPECT_EQ(folded, 206);
}

TEST(SimplifyPass, ConvertChainExamples) {
  struct Case {
    DType from, mid, to;
    bool folds;
  };
  const Case cases[] = {
      {DType::i8, DType::i32, DType::f32, true},    {DType::f16, DType::f32, DType::f64, true},
      {DType::bf16, DType::f32, DType::f16, true},  {DType::u8, DType::bf16, DType::u8, true},
      {DType::i32, DType::f64, DType::i64, true},   {DType::bool_, DType::f16, DType::i8, true},
      {DType::f32, DType::f16, DType::f32, false},  {DType::i32, DType::f64, DType::i8, false},
      {DType::i8, DType::f32, DType::u8, false},    {DType::i32, DType::f32, DType::f64, false},
      {DType::f16, DType::bf16, DType::f32, false}, {DType::f32, DType::i32, DType::f32, false},
      {DType::i8, DType::u8, DType::i32, false},    {DType::f32, DType::bool_, DType::f32, false},
  };
  for (const Case& c : cases) {
    Graph g;
    Value x = g.input("x", c.from, {2});
    g.set_outputs({g.convert(g.convert(x, c.mid), c.to)});
    EXPECT_EQ(create_simplify_pass()->run(g), c.folds)
        << dtype_name(c.from) << " -> " << dtype_name(c.mid) << " -> " << dtype_name(c.to);
  }
}

TEST(SimplifyPass, LossyChainReallyDiffers) {
  // The kept chains are not identities: i32 300 -> f64 -> i8 saturates to 127, i32 -> i8 wraps
  // to 44; f32 0.1 -> f16 -> f32 is not 0.1.
  Graph g;
  Value i = g.input("i", DType::i32, {1});
  Value f = g.input("f", DType::f32, {1});
  g.set_outputs({g.convert(g.convert(i, DType::f64), DType::i8), g.convert(i, DType::i8),
                 g.convert(g.convert(f, DType::f16), DType::f32)});
  std::vector<Tensor> r =
      evaluate(g, {{"i", Tensor::from_ints(DType::i32, {1}, std::vector<int64_t>{300})},
                   {"f", Tensor::full(DType::f32, {1}, 0.1)}});
  EXPECT_EQ(r[0].get_i64(0), 127);
  EXPECT_EQ(r[1].get_i64(0), 44);
  EXPECT_NE(r[2].get_f64(0), static_cast<double>(0.1f));
}

// ---------------------------------------------------------------- simplify: broadcasts

TEST(SimplifyPass, BroadcastOfSplatConstantIsBitExact) {
  auto pass = create_simplify_pass();
  for (DType t : kAll) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Graph g;
    Tensor s = edge_tensor(t, {}, 5);
    if (t == DType::i64) s.set_i64(0, (int64_t{1} << 53) + 1);  // not exact as a double
    if (is_float(t)) s.set_f64(0, -std::numeric_limits<double>::quiet_NaN());
    Value c = g.constant(s);
    Value b = g.broadcast_in_dim(c, {2, 3}, {});
    Value big = g.broadcast_in_dim(c, {(int64_t{1} << 16) + 1}, {});
    g.set_outputs({b, big});
    Graph out = run_and_compare(*pass, g, true);
    const Node& folded = out.node(out.outputs()[0]);
    ASSERT_EQ(folded.op, OpKind::Constant);
    EXPECT_TRUE(folded.attrs.get_tensor("value").bitwise_equal(evaluate(g, {})[0]));
    EXPECT_EQ(out.node(out.outputs()[1]).op, OpKind::BroadcastInDim);
  }
}

// ---------------------------------------------------------------- simplify: pass contract

TEST(SimplifyPass, ReachesAFixedPointInOneRun) {
  Graph g;
  Value x = g.input("x", DType::i32, {2, 3});
  Value t = g.transpose(g.transpose(g.reshape(x, {3, 2}), {1, 0}), {1, 0});
  Value r = g.reshape(t, {2, 3});
  Value m = g.mul(g.add(r, g.scalar(0, DType::i32)), g.scalar(1, DType::i32));
  Value c = g.convert(g.convert(m, DType::i64), DType::i32);
  g.set_outputs({c});
  auto pass = create_simplify_pass();
  Graph out = run_and_compare(*pass, g, true);
  EXPECT_EQ(out.outputs()[0], (Value{out.find("x"), 0}));
  Graph again = out;
  EXPECT_FALSE(pass->run(again));
  EXPECT_EQ(again.to_string(), out.to_string());
}

TEST(SimplifyPass, MultiResultAndUnrelatedNodesAreCopied) {
  Graph g;
  Value x = g.input("x", DType::f32, {2, 5});
  auto [v, i] = g.top_k(g.tanh(x), 2);
  g.set_outputs({v, i, g.softmax(x)});
  Graph out = run_and_compare(*create_simplify_pass(), g, false);
  EXPECT_EQ(out.to_string(), g.to_string());
}

}  // namespace
}  // namespace rlx::testing
