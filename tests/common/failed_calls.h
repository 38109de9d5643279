// A backend-neutral check that failed calls change nothing the caller owns: every argument
// error of run / run_typed / set_param / set_param_typed and a set of compile errors, each
// followed by byte-for-byte comparisons of the caller's tensors and graph with snapshots taken
// before the call, and by a run that must still give the first run's results.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/backend.h"

namespace rlx::testing {

/// A tensor as the caller gave it: type, storage address and bytes.
struct TensorSnapshot {
  TensorType type;
  const std::byte* data = nullptr;
  std::string bytes;
};

inline TensorSnapshot snapshot(const Tensor& t) {
  return {t.type(), t.data(), std::string(reinterpret_cast<const char*>(t.data()), t.nbytes())};
}

/// Whether `t` still has the snapshot's type, storage and bytes.
inline ::testing::AssertionResult unchanged(const Tensor& t, const TensorSnapshot& s) {
  if (!(t.type() == s.type))
    return ::testing::AssertionFailure()
           << "type " << t.type().to_string() << ", was " << s.type.to_string();
  if (t.data() != s.data) return ::testing::AssertionFailure() << "storage moved";
  if (t.nbytes() > 0 && std::memcmp(t.data(), s.bytes.data(), t.nbytes()) != 0)
    return ::testing::AssertionFailure() << "bytes changed: " << t.to_string();
  return ::testing::AssertionSuccess();
}

/// Compiles a graph for the backend under test (a Session or a Backend directly).
using CompileFn =
    std::function<std::shared_ptr<Executable>(const Graph&, const CompileOptions& options)>;

/// Runs every failing call against executables of `compile`, on x: f32[2,3], y: i32[3],
/// w: param f32[3,4] -> ((x + f32(y)) @ w, x * 2). After each failure: the message is the
/// expected one (or, for compile errors, contains it), every tensor the caller passed (good
/// and bad ones) and the graph are unchanged, and the executable still gives its first run's
/// results bit for bit. `options` are the base compile options (e.g. a precision policy);
/// `ops` are the ops the backend claims (its supported_ops()), to find one it cannot run
/// natively; `backend` is its name as errors give it; results are compared with the reference
/// evaluator within `atol`.
inline void expect_failed_calls_change_nothing(const CompileFn& compile,
                                               const CompileOptions& options,
                                               const std::set<OpKind>& ops,
                                               const std::string& backend, double atol) {
  Graph g("unchanged");
  Value xv = g.input("x", DType::f32, Shape{2, 3});
  Value yv = g.input("y", DType::i32, Shape{3});
  Value wv = g.param("w", DType::f32, Shape{3, 4});
  g.set_outputs(
      {g.matmul(g.add(xv, g.convert(yv, DType::f32)), wv), g.mul(xv, g.scalar(2.0, DType::f32))});
  const std::string graph_text = g.to_string();
  const Graph graph_copy = g;

  const Tensor x = random_tensor(DType::f32, Shape{2, 3}, 1);
  const Tensor y = random_tensor(DType::i32, Shape{3}, 2, -5, 5);
  const Tensor w = random_tensor(DType::f32, Shape{3, 4}, 3);
  const Tensor x_f16 = evaluate_op(OpKind::Convert, {x}, AttrMap{{"dtype", DType::f16}})[0];
  const Tensor x_t = random_tensor(DType::f32, Shape{3, 2}, 4);
  const Tensor y_2d = random_tensor(DType::i32, Shape{1, 3}, 5, -5, 5);
  const Tensor w_bad_shape = random_tensor(DType::f32, Shape{4, 3}, 6);
  const Tensor w_bad_dtype = random_tensor(DType::f64, Shape{3, 4}, 7);
  const Tensor x_f64 = random_tensor(DType::f64, Shape{3, 2}, 8);
  const std::vector<const Tensor*> all = {&x,    &y,           &w,           &x_f16, &x_t,
                                          &y_2d, &w_bad_shape, &w_bad_dtype, &x_f64};
  std::vector<TensorSnapshot> before;
  before.reserve(all.size());
  for (const Tensor* t : all) before.push_back(snapshot(*t));
  auto expect_all_unchanged = [&] {
    for (size_t i = 0; i < all.size(); ++i) EXPECT_TRUE(unchanged(*all[i], before[i])) << i;
    EXPECT_EQ(g.to_string(), graph_text);
    EXPECT_TRUE(g == graph_copy);
  };

  std::shared_ptr<Executable> exe = compile(g, options);
  const TensorMap good{{"x", x}, {"y", y}};
  EXPECT_EQ(error_of([&] { exe->run(good); }), "run: param 'w' (f32[3,4]) was never set");
  expect_all_unchanged();
  exe->set_param("w", w);
  const std::vector<Tensor> first = exe->run(good);
  const std::vector<Tensor> want = evaluate(g, {{"x", x}, {"y", y}, {"w", w}});
  ASSERT_EQ(first.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(all_close(first[i], want[i], atol, atol)) << "output " << i;
  auto expect_still_runs = [&] {
    std::vector<Tensor> again = exe->run(good);
    ASSERT_EQ(again.size(), first.size());
    for (size_t i = 0; i < first.size(); ++i)
      EXPECT_TRUE(again[i].bitwise_equal(first[i])) << "output " << i;
  };

  struct Case {
    std::string message;
    std::function<void()> call;
  };
  std::vector<uint16_t> ten_bytes(5);
  std::span<const std::byte> short_span(reinterpret_cast<const std::byte*>(ten_bytes.data()), 10);
  std::span<const std::byte> w_bytes(w.data(), w.nbytes());
  const std::vector<Case> cases{
      {"run: unknown input 'z' (inputs: x, y)",
       [&] {
         exe->run({{"x", x}, {"y", y}, {"z", x}});
       }},
      {"run: missing input 'y' (i32[3])",
       [&] {
         exe->run({{"x", x}});
       }},
      {"run: input 'x': expected f32[2,3], got f16[2,3]",
       [&] {
         exe->run({{"x", x_f16}, {"y", y}});
       }},
      {"run: input 'x': expected f32[2,3], got f32[3,2]",
       [&] {
         exe->run({{"x", x_t}, {"y", y}});
       }},
      {"run: input 'y': expected i32[3], got i32[1,3]",
       [&] {
         exe->run({{"x", x}, {"y", y_2d}});
       }},
      {"run_typed: input 'x': expected shape [2,3], got [3,2]",
       [&] {
         exe->run_typed({{"x", x_f64}, {"y", y}});
       }},
      {"run_typed: unknown input 'q' (inputs: x, y)",
       [&] {
         exe->run_typed({{"q", x}});
       }},
      {"set_param: unknown param 'v' (params: w)", [&] { exe->set_param("v", w); }},
      {"set_param 'w': expected f32[3,4], got f32[4,3]", [&] { exe->set_param("w", w_bad_shape); }},
      {"set_param 'w': expected f32[3,4], got f64[3,4]", [&] { exe->set_param("w", w_bad_dtype); }},
      {"set_param_typed 'w': expected shape [3,4], got [4,3]",
       [&] {
         exe->set_param_typed("w", DType::f32, Shape{4, 3}, w_bytes);
       }},
      {"set_param_typed 'w': 10 bytes for bf16[3,4], which needs 24",
       [&] {
         exe->set_param_typed("w", DType::bf16, Shape{3, 4}, short_span);
       }},
      {"set_param_typed: unknown param 'v' (params: w)",
       [&] {
         exe->set_param_typed("v", DType::f32, Shape{3, 4}, w_bytes);
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    EXPECT_EQ(error_of(c.call), c.message);
    expect_all_unchanged();
    expect_still_runs();
  }

  // Compile errors: the graph (and every tensor) as before, the executable compiled earlier
  // still runs, and the good graph still compiles.
  std::vector<Case> compile_cases;
  {
    CompileOptions q = options;
    q.quantized_params["w"] = {QuantFormat::kQ8_0, -1};
    compile_cases.push_back(
        {"quantized param 'w' (f32[3,4] as q8_0): axis 1 has 4 elements, "
         "not a multiple of the block size 32",
         [&, q] { compile(g, q); }});
    CompileOptions unknown = options;
    unknown.quantized_params["v"] = {QuantFormat::kQ4_0, 0};
    compile_cases.push_back(
        {"has no param 'v' (params: w)", [&, unknown] { compile(g, unknown); }});
    CompileOptions tiny = options;
    tiny.memory_limit = 64;
    compile_cases.push_back(
        {backend + " backend: planned memory", [&, tiny] { compile(g, tiny); }});
  }
  // An op the backend does not claim, under force_native: legalization's report.
  bool found_unclaimed = false;
  for (int i = 0; i < kNumOps && !found_unclaimed; ++i) {
    const auto op = static_cast<OpKind>(i);
    if (ops.count(op) != 0 || op_info(op).num_operands != 1) continue;
    Graph u = g;  // the caller's graph, grown by that op on x * 2
    try {
      u.set_outputs({u.emit1(op, {u.outputs()[1]})});
    } catch (const Error&) {
      continue;  // needs attributes or another dtype
    }
    found_unclaimed = true;
    CompileOptions native = options;
    native.dispatch = DispatchOptions{KernelDispatch::ForceNative, {}};
    compile_cases.push_back({"backend '" + backend + "' cannot run: " + std::string(op_name(op)),
                             [&compile, u, native] {
                               const std::string u_text = u.to_string();
                               try {
                                 compile(u, native);
                               } catch (...) {
                                 EXPECT_EQ(u.to_string(), u_text);
                                 throw;
                               }
                             }});
  }
  EXPECT_TRUE(found_unclaimed) << backend << " claims every unary op: no legalization error";
  for (const Case& c : compile_cases) {
    SCOPED_TRACE(c.message);
    std::string msg = error_of(c.call);
    EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
    expect_all_unchanged();
    expect_still_runs();
  }
  std::shared_ptr<Executable> again = compile(g, options);
  again->set_param("w", w);
  std::vector<Tensor> out = again->run(good);
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(out[i].bitwise_equal(first[i])) << i;
  expect_all_unchanged();
}

}  // namespace rlx::testing
