// Numerical round trips through a real PJRT plugin: every natively lowered op, a BERT-style
// encoder layer under AlwaysF32 and AutoMixedBf16, and repeated compile/run.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <set>

#include "demo.h"
#include "pjrt_test_util.h"
#include "rlx/ir/error.h"

namespace rlx::pjrt::testing {
namespace {

CompileOptions f32_options() {
  CompileOptions o;
  o.precision = PrecisionPolicy{PrecisionMode::AlwaysF32, {}};
  return o;
}

// Feeds for `g`: floats uniform in [lo, hi), integers in [-5, 5] (u8: [0, 10]), bools random.
TensorMap make_feeds(const Graph& g, uint64_t seed, double lo = -2, double hi = 2) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> real(lo, hi);
  std::uniform_int_distribution<int64_t> integer(-5, 5);
  TensorMap feeds;
  for (auto ids : {g.inputs(), g.params()}) {
    for (int32_t id : ids) {
      const TensorType& t = g.node(id).results[0];
      Tensor x(t.dtype, t.shape);
      for (int64_t i = 0; i < x.numel(); ++i) {
        if (is_float(t.dtype))
          x.set_f64(i, real(rng));
        else if (t.dtype == DType::bool_)
          x.set_i64(i, integer(rng) > 0);
        else if (t.dtype == DType::u8)
          x.set_i64(i, integer(rng) + 5);
        else
          x.set_i64(i, integer(rng));
      }
      feeds.emplace(g.node(id).name, x);
    }
  }
  return feeds;
}

// Compiles `g` for the plugin, binds params from `feeds`, runs and compares every output with
// the reference evaluator.
void expect_matches_reference(const Graph& g, const TensorMap& feeds, Tolerance tol,
                              const CompileOptions& options = f32_options()) {
  std::unique_ptr<Executable> exe =
      test_backend()->compile(g, options, Device{DeviceKind::Pjrt, 0});
  TensorMap inputs;
  for (int32_t id : g.params()) exe->set_param(g.node(id).name, feeds.at(g.node(id).name));
  for (int32_t id : g.inputs()) inputs.emplace(g.node(id).name, feeds.at(g.node(id).name));
  std::vector<Tensor> got = exe->run(inputs);
  std::vector<Tensor> want = evaluate(g, feeds);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], tol)) << "output " << i << " of\n" << g.to_string();
}

struct OpCase {
  std::string name;
  std::function<Graph()> build;
  double lo = -2, hi = 2;  // float feed range (positive for log, sqrt, ...)
  Tolerance tol = kF32Tol;
};

Graph unary(const char* name, Value (Graph::*op)(Value), DType t = DType::f32) {
  Graph g(name);
  g.set_outputs({(g.*op)(g.input("x", t, Shape{3, 5}))});
  return g;
}
Graph binary(const char* name, Value (Graph::*op)(Value, Value), DType t = DType::f32) {
  Graph g(name);
  // [3,5] with [5]: exercises the explicit broadcast of the emitter.
  g.set_outputs({(g.*op)(g.input("x", t, Shape{3, 5}), g.input("y", t, Shape{5}))});
  return g;
}

std::vector<OpCase> op_cases() {
  std::vector<OpCase> c;
  const Tolerance tr = kF32TranscendentalTol;
  c.push_back({"neg", [] { return unary("neg", &Graph::neg); }});
  c.push_back({"neg_i32", [] { return unary("neg_i32", &Graph::neg, DType::i32); }});
  c.push_back({"abs", [] { return unary("abs", &Graph::abs); }});
  c.push_back({"abs_i8", [] { return unary("abs_i8", &Graph::abs, DType::i8); }});
  c.push_back({"abs_u8", [] { return unary("abs_u8", &Graph::abs, DType::u8); }});
  c.push_back({"sign", [] { return unary("sign", &Graph::sign); }});
  c.push_back({"sign_u8", [] { return unary("sign_u8", &Graph::sign, DType::u8); }});
  c.push_back({"exp", [] { return unary("exp", &Graph::exp); }, -2, 2, tr});
  c.push_back({"expm1", [] { return unary("expm1", &Graph::expm1); }, -2, 2, tr});
  c.push_back({"log", [] { return unary("log", &Graph::log); }, 0.1, 3, tr});
  c.push_back({"log1p", [] { return unary("log1p", &Graph::log1p); }, -0.5, 3, tr});
  c.push_back({"sqrt", [] { return unary("sqrt", &Graph::sqrt); }, 0.1, 3});
  c.push_back({"rsqrt", [] { return unary("rsqrt", &Graph::rsqrt); }, 0.1, 3, tr});
  c.push_back({"sin", [] { return unary("sin", &Graph::sin); }, -2, 2, tr});
  c.push_back({"cos", [] { return unary("cos", &Graph::cos); }, -2, 2, tr});
  c.push_back({"tan", [] { return unary("tan", &Graph::tan); }, -1, 1, tr});
  c.push_back({"tanh", [] { return unary("tanh", &Graph::tanh); }, -2, 2, tr});
  c.push_back({"atan", [] { return unary("atan", &Graph::atan); }, -2, 2, tr});
  c.push_back({"logistic", [] { return unary("logistic", &Graph::logistic); }, -2, 2, tr});
  c.push_back({"erf", [] { return unary("erf", &Graph::erf); }, -2, 2, tr});
  c.push_back({"floor", [] { return unary("floor", &Graph::floor); }});
  c.push_back({"ceil", [] { return unary("ceil", &Graph::ceil); }});
  c.push_back({"round", [] {
                 Graph g("round");  // exact halves: ties go to even
                 g.set_outputs({g.round(
                     g.mul(g.input("x", DType::f32, Shape{3, 5}), g.scalar(4, DType::f32)))});
                 return g;
               }});
  c.push_back({"not_bool", [] { return unary("not_bool", &Graph::logical_not, DType::bool_); }});
  c.push_back({"not_i32", [] { return unary("not_i32", &Graph::logical_not, DType::i32); }});
  c.push_back({"add", [] { return binary("add", &Graph::add); }});
  c.push_back({"add_i64", [] { return binary("add_i64", &Graph::add, DType::i64); }});
  c.push_back({"sub", [] { return binary("sub", &Graph::sub); }});
  c.push_back({"mul", [] { return binary("mul", &Graph::mul); }});
  c.push_back({"div", [] { return binary("div", &Graph::div); }});
  c.push_back({"div_i32", [] { return binary("div_i32", &Graph::div, DType::i32); }});
  c.push_back({"pow", [] { return binary("pow", &Graph::pow); }, 0.1, 3, tr});
  c.push_back({"max", [] { return binary("max", &Graph::max); }});
  c.push_back({"min", [] { return binary("min", &Graph::min); }});
  c.push_back({"rem", [] { return binary("rem", &Graph::rem); }});
  c.push_back({"rem_i32", [] { return binary("rem_i32", &Graph::rem, DType::i32); }});
  c.push_back({"and", [] { return binary("and", &Graph::logical_and, DType::bool_); }});
  c.push_back({"or_i32", [] { return binary("or_i32", &Graph::logical_or, DType::i32); }});
  c.push_back({"xor", [] { return binary("xor", &Graph::logical_xor, DType::bool_); }});
  for (auto [name, op] :
       std::vector<std::pair<const char*, Value (Graph::*)(Value, Value)>>{{"eq", &Graph::eq},
                                                                           {"ne", &Graph::ne},
                                                                           {"lt", &Graph::lt},
                                                                           {"le", &Graph::le},
                                                                           {"gt", &Graph::gt},
                                                                           {"ge", &Graph::ge}}) {
    c.push_back({name, [name, op] {
                   Graph g(name);  // rounded feeds so that equal values occur
                   Value x = g.floor(g.input("x", DType::f32, Shape{3, 5}));
                   Value y = g.floor(g.input("y", DType::f32, Shape{5}));
                   Value i = g.convert(x, DType::i32);
                   g.set_outputs({(g.*op)(x, y), (g.*op)(i, g.convert(y, DType::i32))});
                   return g;
                 }});
  }
  c.push_back({"select", [] {
                 Graph g("select");
                 Value x = g.input("x", DType::f32, Shape{3, 5});
                 g.set_outputs({g.select(g.gt(x, g.scalar(0, DType::f32)), x,
                                         g.param("y", DType::f32, Shape{5}))});
                 return g;
               }});
  c.push_back({"clamp", [] {
                 Graph g("clamp");
                 g.set_outputs(
                     {g.clamp(g.scalar(-0.5, DType::f32), g.input("x", DType::f32, Shape{3, 5}),
                              g.input("hi", DType::f32, Shape{5}))});
                 return g;
               }});
  c.push_back({"convert", [] {
                 Graph g("convert");
                 Value x = g.mul(g.input("x", DType::f32, Shape{3, 5}), g.scalar(40, DType::f32));
                 g.set_outputs({g.convert(x, DType::i32), g.convert(x, DType::bf16),
                                g.convert(x, DType::f16), g.convert(x, DType::bool_),
                                g.convert(g.convert(x, DType::i32), DType::f64),
                                g.convert(g.gt(x, g.scalar(0, DType::f32)), DType::f32)});
                 return g;
               }});
  c.push_back(
      {"iota_constant", [] {
         Graph g("iota_constant");
         Tensor k = Tensor::from_doubles(DType::f32, Shape{2, 3},
                                         std::vector<double>{0.1, -2, 3e-8, 1e30, -0.0, 7});
         Tensor b = Tensor::from_ints(DType::bool_, Shape{3}, std::vector<int64_t>{1, 0, 1});
         g.set_outputs({g.add(g.iota(DType::f32, Shape{2, 3}, 1), g.constant(k)),
                        g.iota(DType::i32, Shape{4, 2}, 0), g.constant(b),
                        g.scalar(2.5, DType::bf16)});
         return g;
       }});
  c.push_back({"dot_general",
               [] {
                 Graph g("dot_general");
                 Value a = g.input("a", DType::f32, Shape{2, 3, 4});
                 Value b = g.input("b", DType::f32, Shape{2, 4, 5});
                 g.set_outputs(
                     {g.dot_general(a, b, {0}, {0}, {2}, {1}),
                      g.dot_general(a, g.input("c", DType::f32, Shape{4}), {}, {}, {2}, {0})});
                 return g;
               },
               -2,
               2,
               {1e-5, 1e-4}});
  c.push_back({"dot_general_bf16_f32",
               [] {
                 Graph g("dot_general_bf16_f32");
                 Value a = g.convert(g.input("a", DType::f32, Shape{3, 8}), DType::bf16);
                 Value b = g.convert(g.input("b", DType::f32, Shape{8, 2}), DType::bf16);
                 g.set_outputs({g.dot_general(a, b, {}, {}, {1}, {0}, DType::f32)});
                 return g;
               },
               -2,
               2,
               {1e-5, 1e-4}});
  c.push_back({"reduce",
               [] {
                 Graph g("reduce");
                 Value x = g.input("x", DType::f32, Shape{2, 3, 4});
                 g.set_outputs({g.reduce_sum(x, {1}), g.reduce_max(x, {0, 2}, true),
                                g.reduce_min(x, {-1}), g.reduce_prod(x, {2}),
                                g.reduce_mean(x, {1, 2}), g.reduce_sum(x, {}),
                                g.reduce_max(g.convert(x, DType::i32), {1})});
                 return g;
               },
               -2,
               2,
               {1e-5, 1e-5}});
  c.push_back({"shape_ops", [] {
                 Graph g("shape_ops");
                 Value x = g.input("x", DType::f32, Shape{2, 3, 4});
                 Value pv = g.scalar(-1, DType::f32);
                 g.set_outputs(
                     {g.reshape(x, {4, -1}), g.transpose(x, {2, 0, 1}),
                      g.broadcast_in_dim(g.input("v", DType::f32, Shape{3, 1}), {2, 3, 5}, {1, 2}),
                      g.slice(x, {0, 1, 0}, {2, 3, 4}, {1, 1, 2}), g.concatenate({x, x}, -1),
                      g.pad(x, pv, {1, 0, -1}, {0, 2, 1}, {0, 1, 0}), g.reverse(x, {0, -1})});
                 return g;
               }});
  c.push_back({"cumsum", [] {
                 Graph g("cumsum");
                 Value x = g.input("x", DType::f32, Shape{3, 7});
                 g.set_outputs({g.cumsum(x, 1), g.cumsum(x, 0, true), g.cumsum(x, -1, false, true),
                                g.cumsum(x, 1, true, true),
                                g.cumsum(g.input("k", DType::i32, Shape{5}), 0, true)});
                 return g;
               }});
  c.push_back({"conv",
               [] {
                 Graph g("conv");
                 Value x2 = g.input("x2", DType::f32, Shape{2, 4, 7, 6});
                 Value w2 = g.param("w2", DType::f32, Shape{6, 2, 3, 2});
                 Value x1 = g.input("x1", DType::f32, Shape{1, 3, 9});
                 g.set_outputs({g.conv(x2, w2, {2, 1}, {1, 0}, {0, 1}, {1, 2}, 2),
                                g.conv(x1, g.input("w1", DType::f32, Shape{4, 3, 3}))});
                 return g;
               },
               -2,
               2,
               {1e-5, 1e-4}});
  c.push_back({"argmax_argmin", [] {
                 Graph g("argmax_argmin");  // floored feeds: ties; a NaN row via log(-1)
                 Value x = g.floor(g.input("x", DType::f32, Shape{4, 6}));
                 Value nan_row = g.log(g.scalar(-1, DType::f32));
                 Value y = g.concatenate({x, g.broadcast_in_dim(nan_row, {1, 6}, {})}, 0);
                 Value m = g.select(g.gt(y, g.scalar(0.5, DType::f32)),
                                    g.broadcast_in_dim(nan_row, {5, 6}, {}), y);
                 g.set_outputs({g.argmax(y, 1), g.argmin(y, 0, true, DType::i64), g.argmax(m, -1),
                                g.argmin(m, 1), g.argmax(g.convert(x, DType::i32), 0)});
                 return g;
               }});
  c.push_back({"gather", [] {
                 Graph g("gather");  // indices in [-5, 5]: out-of-range ones are clamped
                 Value x = g.input("x", DType::f32, Shape{4, 3, 6});
                 Value i = g.input("i", DType::i32, Shape{2, 5});
                 g.set_outputs({g.gather(x, i, 0), g.gather(x, i, 1), g.gather(x, i, -1),
                                g.gather(x, g.input("j", DType::i64, Shape{}), 2)});
                 return g;
               }});
  // Feeds put integers (indices included) in [-5, 5], u8 in [0, 10]: every index case below
  // sees negative and too-large indices (clamped by take_along_axis, dropped by scatter_add).
  c.push_back({"take_along_axis", [] {
                 Graph g("take_along_axis");
                 Value x = g.input("x", DType::f32, Shape{3, 4, 5});
                 Value xb = g.input("xb", DType::f32, Shape{3, 1, 5});  // broadcasts over j
                 g.set_outputs({g.take_along_axis(x, g.input("i", DType::i32, Shape{3, 4, 6}), -1),
                                g.take_along_axis(x, g.input("j", DType::i64, Shape{1, 7, 5}), 1),
                                g.take_along_axis(xb, g.input("k", DType::u8, Shape{3, 2, 2}), 2),
                                g.take_along_axis(g.input("n", DType::i32, Shape{4, 3}),
                                                  g.input("m", DType::i8, Shape{2, 3}), 0),
                                g.take_along_axis(g.input("b", DType::bool_, Shape{2, 5}),
                                                  g.input("l", DType::i32, Shape{2, 3}), 1)});
                 return g;
               }});
  c.push_back({"scatter_add", [] {
                 Graph g("scatter_add");  // duplicate indices accumulate
                 Value x = g.input("x", DType::f32, Shape{4, 3});
                 Value i = g.input("i", DType::i32, Shape{2, 5});
                 // Floored feeds: small integers, so f16 / bf16 sums are exact in any order.
                 auto half = [&](const char* name, DType t, Shape s) {
                   return g.convert(g.floor(g.input(name, DType::f32, std::move(s))), t);
                 };
                 g.set_outputs({g.scatter_add(x, i, g.input("u", DType::f32, Shape{2, 5, 3}), 0),
                                g.scatter_add(x, g.input("j", DType::i64, Shape{7}),
                                              g.input("v", DType::f32, Shape{4, 7}), -1),
                                g.scatter_add(g.input("n", DType::i32, Shape{2, 3, 4}),
                                              g.input("k", DType::u8, Shape{6}),
                                              g.input("w", DType::i32, Shape{2, 6, 4}), 1),
                                g.scatter_add(g.input("p", DType::u8, Shape{5}), i,
                                              g.input("q", DType::u8, Shape{2, 5}), 0),
                                g.scatter_add(half("h", DType::f16, Shape{3, 4}),
                                              g.input("m", DType::i8, Shape{2, 2}),
                                              half("hu", DType::f16, Shape{3, 2, 2}), 1),
                                g.scatter_add(half("e", DType::bf16, Shape{6}), i,
                                              half("eu", DType::bf16, Shape{2, 5}), 0),
                                g.scatter_add(g.input("z", DType::i64, Shape{4}),
                                              g.input("o", DType::i32, Shape{}),
                                              g.input("oz", DType::i64, Shape{}), 0)});
                 return g;
               }});
  c.push_back({"top_k", [] {
                 Graph g("top_k");
                 // Floored feeds give ties, floor(x) * 0 gives +0 and -0, log(-1) NaNs.
                 Value x = g.floor(g.input("x", DType::f32, Shape{4, 7}));
                 Value nan = g.broadcast_in_dim(g.log(g.scalar(-1, DType::f32)), {4, 7}, {});
                 Value with_nan = g.select(g.gt(x, g.scalar(0.5, DType::f32)), nan, x);
                 Value zeros = g.mul(x, g.scalar(0, DType::f32));
                 Value y = g.concatenate({x, with_nan, zeros}, 0);
                 std::vector<Value> outs;
                 auto top_k = [&](Value v, int64_t k) {
                   std::pair<Value, Value> r = g.top_k(v, k);
                   outs.push_back(r.first);
                   outs.push_back(r.second);
                 };
                 for (int64_t k : {3, 7, 0}) top_k(y, k);
                 for (DType t : {DType::i32, DType::i8, DType::u8, DType::i64})
                   top_k(g.input("n_" + std::string(dtype_name(t)), t, Shape{2, 3, 6}), 4);
                 for (DType t : {DType::f16, DType::bf16, DType::f64}) top_k(g.convert(y, t), 5);
                 top_k(g.input("s", DType::f32, Shape{9}), 4);  // rank 1
                 g.set_outputs(outs);
                 return g;
               }});
  return c;
}

// Names the case in gtest's output instead of dumping its bytes.
void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

class PjrtOpTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(PjrtOpTest, MatchesReferenceEvaluator) {
  RLX_REQUIRE_PJRT_PLUGIN();
  const OpCase& c = GetParam();
  Graph g = c.build();
  expect_matches_reference(g, make_feeds(g, 7, c.lo, c.hi), c.tol);
}

INSTANTIATE_TEST_SUITE_P(NativeOps, PjrtOpTest, ::testing::ValuesIn(op_cases()),
                         [](const auto& info) { return info.param.name; });

// Every natively lowered op kind is exercised by some case above (so adding a lowering without
// a round-trip case fails here).
TEST(PjrtOps, EveryNativeOpHasARoundTripCase) {
  std::set<OpKind> covered;
  for (const OpCase& c : op_cases()) {
    Graph g = c.build();
    for (const Node& n : g.nodes()) covered.insert(n.op);
  }
  for (OpKind op : native_ops())
    EXPECT_TRUE(covered.count(op)) << "no round-trip case uses " << op_name(op);
  // The coverage summary docs/pjrt.md quotes: native, decomposed (composites), missing.
  int composite = 0;
  std::string missing;
  for (int i = 0; i < kNumOps; ++i) {
    OpKind op = static_cast<OpKind>(i);
    if (native_ops().count(op)) continue;
    if (op_info(op).has(kComposite))
      ++composite;
    else
      missing += " " + std::string(op_name(op));
  }
  std::cout << "[ coverage ] of " << kNumOps << " ops: " << native_ops().size() << " native, "
            << composite << " decomposed, missing:" << missing << "\n";
}

TEST(PjrtOps, CompositesAreDecomposed) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g("composites");
  Value x = g.input("x", DType::f32, Shape{2, 4, 6});
  Value s = g.param("s", DType::f32, Shape{6});
  Value b = g.param("b", DType::f32, Shape{6});
  Value w = g.param("w", DType::f32, Shape{6, 6});
  Value h = g.layer_norm(g.gelu(g.matmul(x, w)), s, b);
  g.set_outputs({g.softmax(h, -1), g.log_softmax(h, 1), g.silu(h), g.relu(h), g.rms_norm(h, s),
                 g.gelu_tanh(h), g.squeeze(g.expand_dims(h, {0}), {0})});
  expect_matches_reference(g, make_feeds(g, 3), kF32LayerTol);
}

TEST(PjrtOps, AttentionWithCausalMaskIsDecomposed) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g("attention");
  Value q = g.input("q", DType::f32, Shape{1, 2, 5, 4});
  Value k = g.input("k", DType::f32, Shape{1, 2, 5, 4});
  Value v = g.input("v", DType::f32, Shape{1, 2, 5, 4});
  Graph::AttentionOptions opts;
  opts.mask = "causal";
  g.set_outputs({g.attention(q, k, v, opts)});
  expect_matches_reference(g, make_feeds(g, 5), kF32LayerTol);
}

// A BERT-style encoder layer (tools/rlx/demo.h) under both precision policies.
TEST(PjrtEncoder, MatchesReferenceUnderF32AndBf16) {
  RLX_REQUIRE_PJRT_PLUGIN();
  tools::BlockConfig cfg;  // batch 2, seq 16, hidden 64, 4 heads, ffn 256
  Graph g = tools::build_encoder_block(cfg);
  TensorMap feeds = tools::random_feeds(g, 11);
  std::vector<Tensor> want = evaluate(g, feeds);
  for (PrecisionMode mode : {PrecisionMode::AlwaysF32, PrecisionMode::AutoMixedBf16}) {
    CompileOptions o;
    o.precision = PrecisionPolicy{mode, {}};
    std::unique_ptr<Executable> exe = test_backend()->compile(g, o, Device{DeviceKind::Pjrt, 0});
    TensorMap inputs;
    for (int32_t id : g.params()) exe->set_param(g.node(id).name, feeds.at(g.node(id).name));
    for (int32_t id : g.inputs()) inputs.emplace(g.node(id).name, feeds.at(g.node(id).name));
    std::vector<Tensor> got = exe->run(inputs);
    double err = 0;
    Tolerance tol = mode == PrecisionMode::AlwaysF32 ? kF32LayerTol : kBf16LayerTol;
    EXPECT_TRUE(all_close(got[0], want[0], tol, &err)) << precision_mode_name(mode);
    std::cout << "[ encoder ] " << precision_mode_name(mode) << " max |err| = " << err << "\n";
  }
}

// The default policy is AutoMixedBf16: the compiled graph's matmuls run in bf16.
TEST(PjrtEncoder, DefaultPrecisionIsAutoMixedBf16) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (const char* env = std::getenv("RLX_PRECISION"); env != nullptr && *env != '\0')
    GTEST_SKIP() << "RLX_PRECISION is set";
  Graph g("mm");
  g.set_outputs(
      {g.matmul(g.input("x", DType::f32, Shape{4, 8}), g.param("w", DType::f32, Shape{8, 3}))});
  std::unique_ptr<Executable> exe =
      test_backend()->compile(g, CompileOptions{}, Device{DeviceKind::Pjrt, 0});
  bool has_bf16 = false;
  for (const Node& n : exe->compiled_graph().nodes())
    has_bf16 = has_bf16 || (n.op == OpKind::Convert && n.results[0].dtype == DType::bf16);
  EXPECT_TRUE(has_bf16) << exe->compiled_graph().to_string();
  EXPECT_NE(exe->kernel_report().find("bf16"), std::string::npos);
}

// The kernel report names the one XLA executable: every computing node of the compiled graph
// is part of it (native, kernel "xla"), and its text is the StableHLO module.
TEST(PjrtRuntime, KernelReportIsTheOneXlaExecutable) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g("rep");
  Value x = g.input("x", DType::f32, Shape{4, 8});
  g.set_outputs({g.tanh(g.matmul(x, g.param("w", DType::f32, Shape{8, 3})))});
  CompileOptions f32;
  f32.precision = parse_precision_policy("always-f32");
  std::unique_ptr<Executable> exe = test_backend()->compile(g, f32, Device{DeviceKind::Pjrt, 0});
  const KernelReport& r = exe->kernels();
  EXPECT_EQ(r.backend, "pjrt");
  const Graph& cg = exe->compiled_graph();
  size_t computing = 0;
  for (const Node& n : cg.nodes())
    computing += n.op != OpKind::Input && n.op != OpKind::Param && n.op != OpKind::Constant;
  EXPECT_EQ(r.nodes.size(), computing);
  for (const KernelReport::Node& n : r.nodes) {
    EXPECT_EQ(n.kernel, "xla");
    EXPECT_TRUE(n.native);
    EXPECT_EQ(n.op, cg.node(n.node).op);
  }
  EXPECT_EQ(r.total(), (KernelCounts{static_cast<int>(computing), 0}));
  EXPECT_EQ(r.count(OpKind::Tanh), (KernelCounts{1, 0}));
  EXPECT_EQ(exe->kernel_report(), r.program);
  EXPECT_EQ(r.program.rfind("pjrt: one XLA executable compiled from StableHLO:\nmodule @rep", 0),
            0u)
      << r.program;
}

// Compiling and running 50 times frees every executable and buffer: the process's resident
// memory stays bounded (a leak of one executable or a buffer per run would grow it steadily).
TEST(PjrtLifetime, RepeatedCompileAndRunDoesNotLeak) {
  RLX_REQUIRE_PJRT_PLUGIN();
  auto rss_kib = [] {
    std::ifstream f("/proc/self/statm");
    long pages = 0, resident = 0;
    f >> pages >> resident;
    return resident * 4;
  };
  Graph g("loop");
  Value x = g.input("x", DType::f32, Shape{256, 256});
  g.set_outputs({g.tanh(g.matmul(x, g.param("w", DType::f32, Shape{256, 256})))});
  TensorMap feeds = make_feeds(g, 1);
  long after_warmup = 0;
  for (int i = 0; i < 50; ++i) {
    std::unique_ptr<Executable> exe =
        test_backend()->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
    exe->set_param("w", feeds.at("w"));
    for (int r = 0; r < 3; ++r) exe->run({{"x", feeds.at("x")}});
    if (i == 4) after_warmup = rss_kib();
  }
  long growth = rss_kib() - after_warmup;
  // 45 leaked executables plus 135 leaked 256 KiB outputs would be tens of MiB.
  EXPECT_LT(growth, 16 * 1024) << "resident memory grew by " << growth << " KiB";
}

TEST(PjrtExecutable, TypedIoClonesAndErrors) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g("typed");
  Value x = g.input("x", DType::f32, Shape{2, 3});
  g.set_outputs({g.add(x, g.param("b", DType::f32, Shape{3}))});
  std::unique_ptr<Executable> exe =
      test_backend()->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
  EXPECT_THROW(exe->run({{"x", Tensor::full(DType::f32, Shape{2, 3}, 1)}}), Error);  // b unset
  Tensor b = Tensor::from_doubles(DType::bf16, Shape{3}, std::vector<double>{1, 2, 3});
  exe->set_param_typed("b", DType::bf16, Shape{3}, std::span(b.data(), b.nbytes()));
  Tensor xi = Tensor::from_ints(DType::i32, Shape{2, 3}, std::vector<int64_t>{1, 2, 3, 4, 5, 6});
  std::vector<Tensor> y = exe->run_typed({{"x", xi}}, DType::f64);
  ASSERT_EQ(y[0].dtype(), DType::f64);
  EXPECT_EQ(y[0].get_f64(5), 9);
  std::unique_ptr<Executable> c = exe->clone();
  c->set_param("b", Tensor::full(DType::f32, Shape{3}, 0));  // copy on write
  EXPECT_EQ(c->run({{"x", Tensor::full(DType::f32, Shape{2, 3}, 1)}})[0].get_f64(0), 1);
  EXPECT_EQ(exe->run({{"x", Tensor::full(DType::f32, Shape{2, 3}, 1)}})[0].get_f64(0), 2);
  try {
    exe->run({{"x", Tensor::full(DType::f32, Shape{3, 2}, 1)}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected f32[2,3], got f32[3,2]"), std::string::npos)
        << e.what();
  }
}

// Median wall time of 20 runs of the encoder layer through XLA CPU and rlx's CPU backend
// (printed; the numbers go to docs/pjrt.md). Checks only that both agree.
TEST(PjrtEncoder, TimingAgainstCpuBackend) {
  RLX_REQUIRE_PJRT_PLUGIN();
  tools::BlockConfig cfg;
  cfg.batch = 1;
  cfg.seq = 128;
  cfg.hidden = 384;
  cfg.heads = 12;
  cfg.ffn = 1536;
  Graph g = tools::build_encoder_block(cfg);
  TensorMap feeds = tools::random_feeds(g, 2);
  auto median_ms = [&](Executable& exe, std::vector<Tensor>* out) {
    for (int32_t id : g.params()) exe.set_param(g.node(id).name, feeds.at(g.node(id).name));
    TensorMap in{{"x", feeds.at("x")}};
    *out = exe.run(in);  // warm-up
    std::vector<double> ms;
    for (int i = 0; i < 20; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      exe.run(in);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[10];
  };
  std::vector<Tensor> xla_out, cpu_out;
  auto xla = test_backend()->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
  auto cpu = backend_for(DeviceKind::Cpu)->compile(g, f32_options(), Device::cpu());
  double xla_ms = median_ms(*xla, &xla_out), cpu_ms = median_ms(*cpu, &cpu_out);
  std::cout << "[ encoder 1x128x384 f32 ] median of 20: xla cpu " << xla_ms << " ms, rlx cpu "
            << cpu_ms << " ms\n";
  EXPECT_TRUE(all_close(xla_out[0], cpu_out[0], kF32LayerTol));
}

}  // namespace
}  // namespace rlx::pjrt::testing
