// The Executable contract on the CPU backend: argument errors leave the executable unchanged,
// typed IO converts as the convert op, graphs whose outputs are leaves, views, duplicates or
// results of multi-result nodes, size-0 tensors, graphs without inputs, iota, unused params,
// inputs/params/constants never written, zero-copy params and the kernel report.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <sstream>
#include <vector>

#include "common/test_util.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

using testing::all_close;
using testing::error_of;
using testing::random_tensor;

// Per op mnemonic: nodes that ran a native kernel and nodes that ran the reference kernel,
// from the executable's structured kernel report.
std::map<std::string, std::pair<int, int>> kernel_counts(const Executable& exe) {
  std::map<std::string, std::pair<int, int>> counts;
  for (const auto& [op, c] : exe.kernels().counts())
    counts[std::string(op_name(op))] = {c.native, c.fallback};
  return counts;
}

// `t` converted to `dtype` by the reference convert op.
Tensor converted(const Tensor& t, DType dtype) {
  return evaluate_op(OpKind::Convert, {t}, AttrMap{{"dtype", dtype}})[0];
}

std::span<const std::byte> bytes_of(const Tensor& t) { return {t.data(), t.nbytes()}; }

::testing::AssertionResult all_bitwise_equal(const std::vector<Tensor>& a,
                                             const std::vector<Tensor>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " outputs";
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].bitwise_equal(b[i]))
      return ::testing::AssertionFailure()
             << "output " << i << ": " << a[i].to_string() << " vs " << b[i].to_string();
  return ::testing::AssertionSuccess();
}

// x: f32[2,3], y: i32[3], w: f32[3,4]; out = (x + f32(y)) @ w, and x * 2.
struct ErrorFixture {
  Graph g{"errors"};
  TensorMap feeds;
  ErrorFixture() {
    Value x = g.input("x", DType::f32, Shape{2, 3});
    Value y = g.input("y", DType::i32, Shape{3});
    Value w = g.param("w", DType::f32, Shape{3, 4});
    g.set_outputs(
        {g.matmul(g.add(x, g.convert(y, DType::f32)), w), g.mul(x, g.scalar(2.0, DType::f32))});
    feeds = {{"x", random_tensor(DType::f32, Shape{2, 3}, 1)},
             {"y", random_tensor(DType::i32, Shape{3}, 2, -5, 5)},
             {"w", random_tensor(DType::f32, Shape{3, 4}, 3)}};
  }
  TensorMap inputs() const { return {{"x", feeds.at("x")}, {"y", feeds.at("y")}}; }
};

TEST(ExecutableErrors, RunRejectsBadInputsAndStillRuns) {
  ErrorFixture f;
  Session s;
  auto exe = s.compile(f.g);
  EXPECT_EQ(error_of([&] { exe->run(f.inputs()); }), "run: param 'w' (f32[3,4]) was never set");
  exe->set_param("w", f.feeds.at("w"));
  std::vector<Tensor> good = exe->run(f.inputs());
  std::vector<Tensor> kept;
  for (const Tensor& t : good) kept.push_back(t.clone());
  std::vector<Tensor> want = evaluate(f.g, f.feeds);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(all_close(good[i], want[i], 1e-5, 1e-6)) << "output " << i;

  struct Case {
    TensorMap feeds;
    std::string message;
  };
  Tensor x = f.feeds.at("x"), y = f.feeds.at("y");
  std::vector<Case> cases{
      {{{"x", x}, {"y", y}, {"z", x}}, "run: unknown input 'z' (inputs: x, y)"},
      {{{"x", x}}, "run: missing input 'y' (i32[3])"},
      {{}, "run: missing input 'x' (f32[2,3])"},
      {{{"x", converted(x, DType::f16)}, {"y", y}},
       "run: input 'x': expected f32[2,3], got f16[2,3]"},
      {{{"x", random_tensor(DType::f32, Shape{3, 2}, 4)}, {"y", y}},
       "run: input 'x': expected f32[2,3], got f32[3,2]"},
      {{{"x", x}, {"y", random_tensor(DType::i32, Shape{1, 3}, 5)}},
       "run: input 'y': expected i32[3], got i32[1,3]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    EXPECT_EQ(error_of([&] { exe->run(c.feeds); }), c.message);
    // Nothing changed: the next run gives the same results, and results handed out earlier
    // are the caller's own storage.
    EXPECT_TRUE(all_bitwise_equal(exe->run(f.inputs()), kept));
    EXPECT_TRUE(all_bitwise_equal(good, kept));
  }
}

TEST(ExecutableErrors, SetParamRejectsBadValuesAndKeepsTheBinding) {
  ErrorFixture f;
  Session s;
  auto exe = s.compile(f.g);
  exe->set_param("w", f.feeds.at("w"));
  std::vector<Tensor> before = exe->run(f.inputs());
  Tensor w = f.feeds.at("w");
  std::vector<uint16_t> ten_bytes(5);
  std::span<const std::byte> short_span(reinterpret_cast<const std::byte*>(ten_bytes.data()), 10);
  std::vector<std::pair<std::function<void()>, std::string>> cases{
      {[&] { exe->set_param("v", w); }, "set_param: unknown param 'v' (params: w)"},
      {[&] { exe->set_param("x", f.feeds.at("x")); }, "set_param: unknown param 'x' (params: w)"},
      {[&] { exe->set_param("w", converted(w, DType::f16)); },
       "set_param 'w': expected f32[3,4], got f16[3,4]"},
      {[&] {
         exe->set_param("w", random_tensor(DType::f32, Shape{4, 3}, 9));
       },
       "set_param 'w': expected f32[3,4], got f32[4,3]"},
      {[&] {
         exe->set_param_typed("v", DType::f32, Shape{3, 4}, bytes_of(w));
       },
       "set_param_typed: unknown param 'v' (params: w)"},
      {[&] {
         exe->set_param_typed("w", DType::f32, Shape{4, 3}, bytes_of(w));
       },
       "set_param_typed 'w': expected shape [3,4], got [4,3]"},
      {[&] {
         exe->set_param_typed("w", DType::bf16, Shape{3, 4}, short_span);
       },
       "set_param_typed 'w': 10 bytes for bf16[3,4], which needs 24"},
      {[&] {
         exe->set_param_typed("w", DType::f32, Shape{3, 4}, {});
       },
       "set_param_typed 'w': 0 bytes for f32[3,4], which needs 48"},
      {[&] {
         exe->set_param_typed("w", DType::f64, Shape{3, 4}, bytes_of(w));
       },
       "set_param_typed 'w': 48 bytes for f64[3,4], which needs 96"},
  };
  for (const auto& [call, message] : cases) {
    SCOPED_TRACE(message);
    EXPECT_EQ(error_of(call), message);
    EXPECT_TRUE(all_bitwise_equal(exe->run(f.inputs()), before));
  }
}

TEST(ExecutableErrors, RunTypedRejectsBadInputsAndStillRuns) {
  ErrorFixture f;
  Session s;
  auto exe = s.compile(f.g);
  exe->set_param("w", f.feeds.at("w"));
  std::vector<Tensor> before = exe->run(f.inputs());
  Tensor x = f.feeds.at("x"), y = f.feeds.at("y");
  std::vector<std::pair<TensorMap, std::string>> cases{
      {{{"x", x}, {"y", y}, {"q", y}}, "run_typed: unknown input 'q' (inputs: x, y)"},
      {{{"x", random_tensor(DType::f64, Shape{3, 2}, 4)}, {"y", y}},
       "run_typed: input 'x': expected shape [2,3], got [3,2]"},
      {{{"y", converted(y, DType::f32)}}, "run: missing input 'x' (f32[2,3])"},
  };
  for (const auto& [feeds, message] : cases) {
    SCOPED_TRACE(message);
    EXPECT_EQ(error_of([&] { exe->run_typed(feeds, DType::f64); }), message);
    EXPECT_TRUE(all_bitwise_equal(exe->run_typed(f.inputs()), before));
  }
}

TEST(ExecutableTypedIo, SetParamTypedEqualsConvertingFirst) {
  ErrorFixture f;
  Session s;
  auto typed = s.compile(f.g);
  auto plain = typed->clone();
  for (DType dt : {DType::bf16, DType::f16, DType::f64, DType::i32, DType::i8, DType::u8,
                   DType::i64, DType::bool_, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor w = random_tensor(dt, Shape{3, 4}, 40 + static_cast<uint64_t>(dt), -3, 3);
    // Bytes at an odd address: set_param_typed must not assume alignment.
    std::vector<std::byte> buffer(w.nbytes() + 1);
    std::memcpy(buffer.data() + 1, w.data(), w.nbytes());
    typed->set_param_typed("w", dt, Shape{3, 4}, {buffer.data() + 1, w.nbytes()});
    plain->set_param("w", converted(w, DType::f32));
    EXPECT_TRUE(all_bitwise_equal(typed->run(f.inputs()), plain->run(f.inputs())));
    // The bytes were copied: changing them afterwards changes nothing.
    std::vector<Tensor> first = typed->run(f.inputs());
    std::memset(buffer.data(), 0x7f, buffer.size());
    EXPECT_TRUE(all_bitwise_equal(typed->run(f.inputs()), first));
  }
}

TEST(ExecutableTypedIo, RunTypedConvertsInputsAndOutputs) {
  ErrorFixture f;
  Session s;
  auto exe = s.compile(f.g);
  exe->set_param("w", f.feeds.at("w"));
  for (DType xt : {DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    for (DType yt : {DType::f32, DType::i64, DType::u8}) {
      SCOPED_TRACE(std::string(dtype_name(xt)) + " " + std::string(dtype_name(yt)));
      Tensor x = random_tensor(xt, Shape{2, 3}, 7, -4, 4);
      Tensor y = random_tensor(yt, Shape{3}, 8, 0, 9);
      std::vector<Tensor> want =
          exe->run({{"x", converted(x, DType::f32)}, {"y", converted(y, DType::i32)}});
      EXPECT_TRUE(all_bitwise_equal(exe->run_typed({{"x", x}, {"y", y}}), want));
      for (DType out : {DType::f64, DType::bf16, DType::i32}) {
        std::vector<Tensor> got = exe->run_typed({{"x", x}, {"y", y}}, out);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_TRUE(got[i].bitwise_equal(converted(want[i], out))) << dtype_name(out);
      }
    }
  }
}

TEST(ExecutableTypedIo, ConversionsFollowTheConvertOp) {
  Graph g("identity");
  Value x = g.input("x", DType::f32, Shape{4});
  Value i = g.input("i", DType::i32, Shape{4});
  g.set_outputs({g.neg(x), g.neg(i)});
  Session s;
  auto exe = s.compile(g);
  // i64 -> f32 rounds once: 2^60 + 2^36 + 1 is above the midpoint of two floats; rounding
  // through double first would land on the midpoint and tie to 2^60.
  std::vector<int64_t> big{(int64_t{1} << 60) + (int64_t{1} << 36) + 1, -1, 0, 3};
  // f64 -> i32 saturates, NaN -> 0, truncation toward zero.
  std::vector<double> wide{NAN, 1e10, -1e10, -3.7};
  std::vector<Tensor> out =
      exe->run_typed({{"x", Tensor::from_ints(DType::i64, Shape{4}, big)},
                      {"i", Tensor::from_doubles(DType::f64, Shape{4}, wide)}});
  EXPECT_EQ(out[0].get_f64(0), -std::ldexp(1.0, 60) - std::ldexp(1.0, 37));
  EXPECT_EQ(out[1].get_i64(0), 0);
  EXPECT_EQ(out[1].get_i64(1), -2147483647);
  EXPECT_EQ(out[1].get_i64(2), std::numeric_limits<int32_t>::min());  // neg wraps
  EXPECT_EQ(out[1].get_i64(3), 3);
  // Output conversion: f32 -> bool is x != 0 (NaN -> true).
  std::vector<Tensor> b = exe->run_typed(
      {{"x", Tensor::from_doubles(DType::f32, Shape{4}, std::vector<double>{0, NAN, -0.0, 2})},
       {"i", Tensor(DType::i32, Shape{4})}},
      DType::bool_);
  EXPECT_EQ(b[0].dtype(), DType::bool_);
  EXPECT_EQ(b[0].get_i64(0), 0);
  EXPECT_EQ(b[0].get_i64(1), 1);
  EXPECT_EQ(b[0].get_i64(2), 0);
  EXPECT_EQ(b[0].get_i64(3), 1);
}

TEST(ExecutableGraphs, LeavesViewsAndDuplicatesAsOutputs) {
  Graph g("leaves");
  Value x = g.input("x", DType::f32, Shape{2, 3});
  Value w = g.param("w", DType::f32, Shape{4});
  Value c = g.constant(random_tensor(DType::f32, Shape{2, 2}, 11), "c");
  Value y = g.exp(x);
  g.set_outputs({x, w, c, x, y, y, g.reshape(x, {3, 2}),  // view of an input
                 g.slice(w, {1}, {3}),                    // view at an offset of a param
                 g.slice(g.reshape(c, {4}), {2}, {4}),    // view of a view of a constant
                 g.squeeze(g.expand_dims(x, {0}), {0}),   // a chain of views
                 g.slice(g.reshape(y, {6}), {3}, {6}),    // view into the arena
                 g.iota(DType::i32, Shape{2, 3}, 1)});
  TensorMap feeds{{"x", random_tensor(DType::f32, Shape{2, 3}, 12)},
                  {"w", random_tensor(DType::f32, Shape{4}, 13)}};
  Session s;
  auto exe = s.compile(g);
  exe->set_param("w", feeds.at("w"));
  ASSERT_EQ(exe->outputs().size(), g.outputs().size());
  EXPECT_EQ(exe->outputs()[0].name, "x");
  EXPECT_EQ(exe->outputs()[1].name, "w");
  EXPECT_EQ(exe->outputs()[2].name, "c");
  for (int run = 0; run < 2; ++run) {
    std::vector<Tensor> got = exe->run({{"x", feeds.at("x")}});
    std::vector<Tensor> want = evaluate(g, feeds);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].type(), exe->outputs()[i].type) << "output " << i;
      if (i == 4 || i == 5 || i == 10)
        EXPECT_TRUE(all_close(got[i], want[i], 2e-6, 0)) << "output " << i;
      else
        EXPECT_TRUE(got[i].bitwise_equal(want[i])) << "output " << i;
    }
    // Every output has its own storage: not the feed's, the param's or another output's.
    EXPECT_NE(got[0].data(), feeds.at("x").data());
    EXPECT_NE(got[1].data(), feeds.at("w").data());
    EXPECT_NE(got[4].data(), got[5].data());
    got[4].set_f64(0, 123.0);
    EXPECT_NE(got[5].get_f64(0), 123.0);
  }
}

TEST(ExecutableGraphs, MultiResultNodes) {
  Graph g("multi");
  Value x = g.input("x", DType::f32, Shape{3, 7});
  Value r = g.input("r", DType::f32, Shape{3, 7});
  Value scale = g.param("scale", DType::f32, Shape{7});
  Value bias = g.param("bias", DType::f32, Shape{7});
  auto [values, indices] = g.top_k(x, 3);
  auto [ln, h] = g.fused_residual_layer_norm(x, r, scale, bias);
  auto [rms, h2] = g.fused_residual_rms_norm(r, x, scale);
  Value mixed = g.add(values, g.convert(indices, DType::f32));
  g.set_outputs({indices, values, mixed, h, ln, h2, rms, indices});
  TensorMap feeds{{"x", random_tensor(DType::f32, Shape{3, 7}, 21)},
                  {"r", random_tensor(DType::f32, Shape{3, 7}, 22)},
                  {"scale", random_tensor(DType::f32, Shape{7}, 23, 0.5, 1.5)},
                  {"bias", random_tensor(DType::f32, Shape{7}, 24)}};
  Session s;
  auto exe = s.compile(g);
  exe->set_param("scale", feeds.at("scale"));
  exe->set_param("bias", feeds.at("bias"));
  std::string topk = g.node(indices).name;
  EXPECT_EQ(exe->outputs()[0].name, topk + "#1");
  EXPECT_EQ(exe->outputs()[1].name, topk + "#0");
  std::vector<Tensor> got = exe->run({{"x", feeds.at("x")}, {"r", feeds.at("r")}});
  std::vector<Tensor> want = evaluate(g, feeds);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], 1e-5, 1e-5)) << "output " << i;
}

TEST(ExecutableGraphs, SizeZeroTensors) {
  Graph g("empty");
  Value x = g.input("x", DType::f32, Shape{0, 3});
  Value y = g.input("y", DType::f32, Shape{2, 0});
  Value z = g.input("z", DType::f32, Shape{4, 3});
  Value n = g.input("n", DType::i32, Shape{0});
  g.set_outputs({g.neg(x), g.reduce_sum(x, {0}), g.reduce_max(x, {0}), g.reduce_prod(x, {0}),
                 g.matmul(y, g.constant(Tensor(DType::f32, Shape{0, 3}))),
                 g.concatenate({x, z, x}, 0), g.softmax(x, -1), g.add(n, n), g.transpose(x, {1, 0}),
                 g.reduce_sum(g.exp(x), {0, 1}),
                 g.pad(y, g.scalar(1.5, DType::f32), {1, 0}, {0, 2})});
  TensorMap feeds{{"x", Tensor(DType::f32, Shape{0, 3})},
                  {"y", Tensor(DType::f32, Shape{2, 0})},
                  {"z", random_tensor(DType::f32, Shape{4, 3}, 31)},
                  {"n", Tensor(DType::i32, Shape{0})}};
  Session s;
  auto exe = s.compile(g);
  std::vector<Tensor> got = exe->run(feeds);
  std::vector<Tensor> want = evaluate(g, feeds);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(got[i].bitwise_equal(want[i]))
        << "output " << i << ": " << got[i].to_string() << " vs " << want[i].to_string();
}

TEST(ExecutableGraphs, NoInputsConstantsAndIota) {
  Graph g("no_inputs");
  Value i = g.iota(DType::f32, Shape{3, 5}, 1);
  Value c = g.constant(random_tensor(DType::f32, Shape{5}, 41));
  Value j = g.iota(DType::i64, Shape{4}, 0);
  g.set_outputs(
      {g.add(g.mul(i, i), c), j, i, g.reduce_sum(g.iota(DType::i32, Shape{6, 2}, 0), {0})});
  Session s;
  CompileOptions no_folding;
  no_folding.fold_constants = false;
  auto exe = s.compile(g, no_folding);
  EXPECT_TRUE(exe->inputs().empty());
  std::vector<Tensor> want = evaluate(g, {});
  for (int run = 0; run < 3; ++run) {  // iota is recomputed into an arena that other values reuse
    std::vector<Tensor> got = exe->run({});
    EXPECT_TRUE(all_bitwise_equal(got, want));
  }
  // With folding, the whole graph is constant.
  EXPECT_TRUE(all_bitwise_equal(s.compile(g)->run({}), want));
}

TEST(ExecutableGraphs, ParamUnusedAfterDceMustStillBeSet) {
  Graph g("unused");
  Value x = g.input("x", DType::f32, Shape{3});
  g.param("unused", DType::f32, Shape{2});
  Value w = g.param("w", DType::f32, Shape{3});
  g.set_outputs({g.mul(x, w)});
  Session s;
  auto exe = s.compile(g);
  ASSERT_EQ(exe->params().size(), 2u);
  EXPECT_EQ(exe->params()[0].name, "unused");
  Tensor xt = random_tensor(DType::f32, Shape{3}, 51), wt = random_tensor(DType::f32, Shape{3}, 52);
  exe->set_param("w", wt);
  EXPECT_EQ(error_of([&] { exe->run({{"x", xt}}); }), "run: param 'unused' (f32[2]) was never set");
  exe->set_param("unused", Tensor(DType::f32, Shape{2}));
  EXPECT_TRUE(all_bitwise_equal(
      exe->run({{"x", xt}}),
      evaluate(g, {{"x", xt}, {"w", wt}, {"unused", Tensor(DType::f32, Shape{2})}})));
}

TEST(ExecutableGraphs, InputsParamsAndConstantsAreNeverWritten) {
  // Elementwise chains that the memory plan runs in place wherever an operand dies; none of
  // them may write into a feed, a param or a constant, also not through a view.
  Graph g("in_place");
  Value x = g.input("x", DType::f32, Shape{4, 33});
  Value w = g.param("w", DType::f32, Shape{4, 33});
  Value c = g.constant(random_tensor(DType::f32, Shape{4, 33}, 61));
  Value xv = g.reshape(x, {132});
  Value wv = g.reshape(w, {132});
  Value cv = g.reshape(c, {132});
  Value a = g.neg(xv);
  Value b = g.exp(g.tanh(wv));
  Value d = g.mul(g.add(a, b), cv);
  Value e = g.select(g.gt(d, g.scalar(0.0, DType::f32)), d, g.neg(d));
  g.set_outputs({g.sub(e, xv), g.convert(g.logistic(g.neg(cv)), DType::bf16), g.abs(g.neg(wv))});
  TensorMap feeds{{"x", random_tensor(DType::f32, Shape{4, 33}, 62)},
                  {"w", random_tensor(DType::f32, Shape{4, 33}, 63)}};
  Tensor x0 = feeds.at("x").clone(), w0 = feeds.at("w").clone();
  Session s;
  auto exe = s.compile(g);
  exe->set_param("w", feeds.at("w"));
  std::vector<Tensor> first = exe->run({{"x", feeds.at("x")}});
  std::vector<Tensor> want = evaluate(g, feeds);
  for (size_t i = 0; i < first.size(); ++i)
    EXPECT_TRUE(all_close(first[i], want[i], testing::default_rtol(want[i].dtype()) * 4, 1e-6))
        << "output " << i;
  EXPECT_TRUE(feeds.at("x").bitwise_equal(x0));
  EXPECT_TRUE(feeds.at("w").bitwise_equal(w0));
  // A second run reads the same constants and gives the same results.
  EXPECT_TRUE(all_bitwise_equal(exe->run({{"x", feeds.at("x")}}), first));
}

TEST(ExecutableGraphs, RepeatedRunsDoNotReuseStaleResults) {
  Graph g("repeat");
  Value x = g.input("x", DType::f32, Shape{8, 16});
  Value w = g.param("w", DType::f32, Shape{16, 8});
  g.set_outputs({g.softmax(g.matmul(x, w), -1), g.reduce_sum(x, {1})});
  Session s;
  auto exe = s.compile(g);
  exe->set_param("w", random_tensor(DType::f32, Shape{16, 8}, 71));
  Tensor x1 = random_tensor(DType::f32, Shape{8, 16}, 72),
         x2 = random_tensor(DType::f32, Shape{8, 16}, 73);
  std::vector<Tensor> r1 = exe->run({{"x", x1}});
  std::vector<Tensor> r1_copy;
  for (const Tensor& t : r1) r1_copy.push_back(t.clone());
  std::vector<Tensor> r2 = exe->run({{"x", x2}});
  EXPECT_FALSE(r1[0].bitwise_equal(r2[0]));
  EXPECT_TRUE(all_bitwise_equal(r1, r1_copy));  // outputs are the caller's, not the arena's
  EXPECT_TRUE(all_bitwise_equal(exe->run({{"x", x1}}), r1_copy));
}

TEST(ExecutableParams, ZeroCopyParamsSeeWritesBetweenRuns) {
  Graph g("zero_copy");
  Value x = g.input("x", DType::f32, Shape{2, 3});
  Value w = g.param("w", DType::f32, Shape{2, 3});
  g.set_outputs({g.mul(x, w), w});
  Session s;
  auto exe = s.compile(g);
  ASSERT_TRUE(exe->capabilities().zero_copy_params);
  Tensor xt = Tensor::full(DType::f32, Shape{2, 3}, 2.0);
  std::vector<float> storage(6, 1.0f);
  exe->set_param("w", Tensor::borrow(DType::f32, Shape{2, 3},
                                     reinterpret_cast<const std::byte*>(storage.data())));
  EXPECT_EQ(exe->run({{"x", xt}})[0].get_f64(4), 2.0);
  storage[4] = 5.0f;  // documented: the executable reads the caller's memory on every run
  std::vector<Tensor> out = exe->run({{"x", xt}});
  EXPECT_EQ(out[0].get_f64(4), 10.0);
  EXPECT_EQ(out[1].get_f64(4), 5.0);
  // An owned tensor is bound the same way: no copy, so writes through it are seen too.
  Tensor owned = Tensor::full(DType::f32, Shape{2, 3}, 3.0);
  exe->set_param("w", owned);
  EXPECT_EQ(exe->run({{"x", xt}})[0].get_f64(0), 6.0);
  owned.set_f64(0, -1.0);
  EXPECT_EQ(exe->run({{"x", xt}})[0].get_f64(0), -2.0);
}

TEST(ExecutableReport, KernelReportCountsEveryComputedNode) {
  Graph g("report");
  Value x = g.input("x", DType::f32, Shape{4, 8});
  Value w = g.param("w", DType::f32, Shape{8, 8});
  Value h =
      g.layer_norm(g.gelu(g.matmul(x, w)), g.constant(Tensor::full(DType::f32, Shape{8}, 1.0)),
                   g.constant(Tensor(DType::f32, Shape{8})));
  g.set_outputs({g.reshape(g.softmax(g.add(h, x), -1), {32}), g.reduce_max(h, {1})});
  Session s;
  auto exe = s.compile(g);
  // One report entry per node that computes (views and leaves compute nothing), by op kind.
  std::map<std::string, int> nodes;
  const Graph& cg = exe->compiled_graph();
  std::set<int32_t> views;
  for (const BufferAssignment& b : exe->memory_plan().buffers)
    if (b.is_view) views.insert(b.value.node);
  for (int32_t id = 0; id < static_cast<int32_t>(cg.nodes().size()); ++id) {
    const Node& n = cg.node(id);
    if (op_info(n.op).has(kLeaf) && n.op != OpKind::Iota) continue;
    if (views.count(id)) continue;
    ++nodes[std::string(op_name(n.op))];
  }
  std::map<std::string, int> reported;
  for (const auto& [op, c] : kernel_counts(*exe)) reported[op] = c.first + c.second;
  EXPECT_EQ(reported, nodes) << exe->kernel_report() << cg.to_string();
}

}  // namespace
}  // namespace rlx
