// cond / while_loop / scan on the CPU backend (src/backends/cpu/kernels/control_flow.cc): every
// golden control-flow case against JAX's values (tests/golden/ops.json), nested regions, large
// carries and 1000-iteration loops against the reference evaluator, no allocation per
// iteration (a counting operator new: a run allocates as much at 1000 steps as at 10), the step
// profiler's body rows (calls per iteration, times inside the op's), the memory-limit check
// counting bodies once, and the region kernel's error without a body compiler. The CPU parity sweep
// (parity_test.cc) runs the golden and op-table cases against the evaluator too.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "../../../src/backends/cpu/kernel.h"
#include "alloc_count.h"
#include "common/exe_util.h"
#include "common/scoped_env.h"
#include "common/test_util.h"
#include "golden/golden_data.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/precision.h"
#include "rlx/runtime/memory_limit.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

using testing::json;
using testing::random_tensor;

Session& session() {
  static Session s(Device::cpu(), SessionOptions{.cache_capacity = 0});
  return s;
}

// The tolerance of the CPU parity suite: f32 kernels differ from the evaluator (and JAX) by
// summation order and vectorized transcendentals; f64 by a few ulp; integers exactly.
double rtol_of(DType t) { return t == DType::f64 ? 1e-12 : t == DType::f32 ? 1e-5 : 0; }
double atol_of(DType t) { return t == DType::f64 ? 1e-12 : t == DType::f32 ? 1e-6 : 0; }

// Compiles `g` on the CPU, checks that its control-flow nodes run natively, runs it on
// `feeds` and compares every output with the reference evaluator.
void expect_matches_evaluator(const Graph& g, const TensorMap& feeds, double rtol_floor = 0) {
  std::shared_ptr<Executable> exe = session().compile(g);
  for (const KernelReport::Node& n : exe->kernels().nodes) {
    if (n.op == OpKind::Cond || n.op == OpKind::WhileLoop || n.op == OpKind::Scan) {
      EXPECT_TRUE(n.native) << op_name(n.op) << ": " << n.fallback_reason;
    }
  }
  std::vector<Tensor> got = exe->run(feeds), want = evaluate(g, feeds);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    DType t = want[i].dtype();
    EXPECT_TRUE(testing::all_close(got[i], want[i], std::max(rtol_of(t), rtol_floor), atol_of(t)))
        << "output " << i;
  }
}

// ---- golden: every control-flow case of tests/golden/ops.json on the CPU equals JAX.

TEST(ControlFlowGolden, EveryCaseMatchesJax) {
  std::ifstream in(RLX_TEST_DATA_DIR "/golden/ops.json");
  ASSERT_TRUE(in.good());
  json doc = json::parse(in);
  int seen = 0;
  for (const json& c : doc.at("cases")) {
    std::string name = c.at("name").get<std::string>();
    std::string op = name.substr(0, name.find('/'));
    if (op != "cond" && op != "while_loop" && op != "scan") continue;
    ++seen;
    SCOPED_TRACE(name);
    Graph g = Graph::parse(c.at("ir").get<std::string>());
    TensorMap feeds;
    for (const auto& [k, t] : c.at("inputs").items()) feeds.emplace(k, testing::json_tensor(t));
    std::shared_ptr<Executable> exe = session().compile(g);
    int native = 0;
    for (const KernelReport::Node& n : exe->kernels().nodes)
      native += n.native && n.op == op_from_name(op);
    // A scan whose ys are empty (length 0) runs on the reference kernel (every native kernel
    // has non-empty results).
    EXPECT_EQ(native, name == "scan/f32/empty" ? 0 : 1) << exe->kernel_report();
    std::vector<Tensor> got = exe->run(feeds);
    const json& outs = c.at("outputs");
    ASSERT_EQ(got.size(), outs.size());
    for (size_t i = 0; i < got.size(); ++i) {
      Tensor want = testing::json_tensor(outs[i]);
      DType t = want.dtype();
      double rtol = std::max(rtol_of(t), c.value("rtol", 0.0));
      double atol = std::max(atol_of(t), c.value("atol", 0.0));
      EXPECT_TRUE(testing::all_close(got[i], want, rtol, atol)) << "output " << i;
    }
  }
  EXPECT_GE(seen, 16);
}

// ---- builders of test bodies

// (i, v) -> i < n: the cond of a counting loop.
Graph count_below(int32_t n, const std::vector<TensorType>& carry) {
  Graph c("below");
  Value i = c.input("i", DType::i32, {});
  for (size_t k = 1; k < carry.size(); ++k)
    c.input("c" + std::to_string(k), carry[k].dtype, carry[k].shape);
  c.set_outputs({c.lt(i, c.scalar(n, DType::i32))});
  return c;
}

// Nested: a scan over xs[T,3] whose body runs a while_loop (3 trips of v = 0.5 v + x) and a
// cond on the step's sum; carry c += result.
Graph nested_graph() {
  Graph g("nested");
  Value xs = g.input("xs", DType::f32, {6, 3});
  Value c0 = g.input("c0", DType::f32, {3});
  Graph step("step");
  Value c = step.input("c", DType::f32, {3});
  Value x = step.input("x", DType::f32, {3});
  Graph body("halve");
  Value bx = body.input("x", DType::f32, {3});
  Value bi = body.input("i", DType::i32, {});
  Value bv = body.input("v", DType::f32, {3});
  body.set_outputs({body.add(bi, body.scalar(1, DType::i32)),
                    body.add(body.mul(bv, body.scalar(0.5, DType::f32)), bx)});
  Graph cond("below");
  cond.input("x", DType::f32, {3});
  Value ci = cond.input("i", DType::i32, {});
  cond.input("v", DType::f32, {3});
  cond.set_outputs({cond.lt(ci, cond.scalar(3, DType::i32))});
  std::vector<Value> loop =
      step.while_loop(std::move(cond), std::move(body), {step.scalar(0, DType::i32), c}, {x});
  Graph pos("pos"), neg("neg");
  Value pv = pos.input("v", DType::f32, {3});
  pos.set_outputs({pos.exp(pv)});
  Value nv = neg.input("v", DType::f32, {3});
  neg.set_outputs({neg.neg(nv)});
  Value p = step.gt(step.reduce_sum(x, {0}), step.scalar(0.0, DType::f32));
  Value r = step.cond(p, std::move(pos), std::move(neg), {loop[1]})[0];
  step.set_outputs({step.add(c, step.mul(r, step.scalar(0.1, DType::f32))), r});
  std::vector<Value> out = g.scan(std::move(step), {c0}, {xs});
  g.set_outputs(out);
  return g;
}

TensorMap nested_feeds() {
  return {{"xs", random_tensor(DType::f32, {6, 3}, 1, -1, 1)},
          {"c0", random_tensor(DType::f32, {3}, 2, -1, 1)}};
}

TEST(ControlFlowCpu, WhileAndCondInsideScan) {
  expect_matches_evaluator(nested_graph(), nested_feeds());
}

// Every kind of body output: computed (written in place by the body), a passthrough input
// (swapped carries), a view of a computed value, a constant, an xs slice, one value returned
// twice; in a scan (forward and reversed), a while_loop and a cond.
Graph output_kinds_body(const std::string& name, bool with_x) {
  Graph b(name);
  Value c0 = b.input("c0", DType::f32, {2, 3});
  Value c1 = b.input("c1", DType::f32, {2, 3});
  Value x = with_x ? b.input("x", DType::f32, {2, 3}) : c1;
  Value h = b.tanh(b.add(c0, x));
  Value n = b.neg(c0);
  std::vector<Value> outs{c1, h};
  if (with_x)
    for (Value y : {b.reshape(h, {6}), b.constant(Tensor::full(DType::f32, {3}, 1.5)), x, n, n})
      outs.push_back(y);
  b.set_outputs(outs);
  return b;
}

TEST(ControlFlowCpu, EveryKindOfBodyOutput) {
  for (bool reverse : {false, true}) {
    Graph g("kinds");
    Value a = g.input("a", DType::f32, {2, 3});
    Value b = g.input("b", DType::f32, {2, 3});
    Value xs = g.input("xs", DType::f32, {5, 2, 3});
    ScanOptions o;
    o.reverse = reverse;
    std::vector<Value> outs = g.scan(output_kinds_body("step", true), {a, b}, {xs}, {}, o);
    Graph cond("c");
    Value i = cond.input("i", DType::i32, {});
    cond.input("c0", DType::f32, {2, 3});
    cond.input("c1", DType::f32, {2, 3});
    cond.set_outputs({cond.lt(i, cond.scalar(5, DType::i32))});
    Graph body("b");
    Value bi = body.input("i", DType::i32, {});
    Value bc0 = body.input("c0", DType::f32, {2, 3});
    Value bc1 = body.input("c1", DType::f32, {2, 3});
    body.set_outputs(
        {body.add(bi, body.scalar(1, DType::i32)), bc1, body.tanh(body.add(bc0, bc1))});
    for (Value v : g.while_loop(std::move(cond), std::move(body), {g.scalar(0, DType::i32), a, b}))
      outs.push_back(v);
    Value p = g.input("p", DType::bool_, {});
    for (Value v : g.cond(p, output_kinds_body("t", false), output_kinds_body("f", false), {a, b}))
      outs.push_back(v);
    g.set_outputs(outs);
    for (bool pv : {false, true}) {
      Tensor pt(DType::bool_, {});
      pt.set_i64(0, pv);
      expect_matches_evaluator(g, {{"a", random_tensor(DType::f32, {2, 3}, 21)},
                                   {"b", random_tensor(DType::f32, {2, 3}, 22)},
                                   {"xs", random_tensor(DType::f32, {5, 2, 3}, 23)},
                                   {"p", pt}});
    }
  }
}

// A scan's results are computed straight into the tensors a run returns (the top level's
// Bases::outputs): forward and reversed, lengths 0, 1 and 5, a y that is also the carry (written
// once into ys[t]), a y that is the xs slice (copied), a carry that is a passthrough; the
// results also read by a later step, one returned twice, an input returned as is. Every value
// equals the evaluator's; a second run with other inputs leaves the first run's tensors as
// they were (each run returns storage of its own, 64-byte aligned).
TEST(ControlFlowCpu, ScanResultsComputedIntoReturnedTensors) {
  for (bool reverse : {false, true}) {
    for (int64_t length : {0, 1, 5}) {
      SCOPED_TRACE("reverse " + std::to_string(reverse) + ", length " + std::to_string(length));
      Graph g("direct");
      Value h0 = g.input("h0", DType::f32, {2, 3});
      Value k0 = g.input("k0", DType::f32, {2, 3});
      Value xs = g.input("xs", DType::f32, {length, 2, 3});
      Graph step("step");
      Value h = step.input("h", DType::f32, {2, 3});
      Value k = step.input("k", DType::f32, {2, 3});
      Value x = step.input("x", DType::f32, {2, 3});
      Value h2 = step.tanh(step.add(step.mul(h, step.scalar(0.5, DType::f32)), x));
      step.set_outputs({h2, k, h2, x});
      ScanOptions o;
      o.reverse = reverse;
      std::vector<Value> r = g.scan(std::move(step), {h0, k0}, {xs}, {}, o);
      g.set_outputs({r[0], r[1], r[2], r[3], g.neg(r[2]), r[2], xs});
      TensorMap feeds{{"h0", random_tensor(DType::f32, {2, 3}, 31)},
                      {"k0", random_tensor(DType::f32, {2, 3}, 32)},
                      {"xs", random_tensor(DType::f32, {length, 2, 3}, 33)}};
      std::shared_ptr<Executable> exe = session().compile(g);
      if (length > 0) expect_matches_evaluator(g, feeds);  // length 0: the reference kernel
      std::vector<Tensor> first = exe->run(feeds), want = evaluate(g, feeds);
      TensorMap other = feeds;
      other["h0"] = random_tensor(DType::f32, {2, 3}, 34);
      other["xs"] = random_tensor(DType::f32, {length, 2, 3}, 35);
      std::vector<Tensor> second = exe->run(other), want2 = evaluate(g, other);
      for (size_t i = 0; i < first.size(); ++i) {
        EXPECT_TRUE(testing::all_close(first[i], want[i], 1e-5, 1e-6)) << "output " << i;
        EXPECT_TRUE(testing::all_close(second[i], want2[i], 1e-5, 1e-6)) << "output " << i;
        EXPECT_NE(first[i].data(), second[i].data()) << "output " << i;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(first[i].data()) % 64, 0u) << "output " << i;
      }
    }
  }
}

// Large carries: a 1 MiB f32 carry and an i32 one, a reversed 20-step scan with ys.
TEST(ControlFlowCpu, LargeCarries) {
  Graph g("large");
  Value h0 = g.input("h0", DType::f32, {256, 1024});
  Value n0 = g.input("n0", DType::i32, {7});
  Value xs = g.input("xs", DType::f32, {20, 1024});
  Graph step("step");
  Value h = step.input("h", DType::f32, {256, 1024});
  Value n = step.input("n", DType::i32, {7});
  Value x = step.input("x", DType::f32, {1024});
  Value h2 = step.tanh(step.add(step.mul(h, step.scalar(0.9, DType::f32)), x));
  step.set_outputs({h2, step.add(n, step.scalar(3, DType::i32)), step.reduce_sum(h2, {0})});
  ScanOptions o;
  o.reverse = true;
  g.set_outputs(g.scan(std::move(step), {h0, n0}, {xs}, {}, o));
  expect_matches_evaluator(g, {{"h0", random_tensor(DType::f32, {256, 1024}, 3, -1, 1)},
                               {"n0", random_tensor(DType::i32, {7}, 4, -9, 9)},
                               {"xs", random_tensor(DType::f32, {20, 1024}, 5, -1, 1)}});
}

// 1000 iterations: a while_loop counting to 1000 (acc += 0.5 in f64: exactly 500), one bounded
// by max_trip_count with a cond that stays true, and a 1000-step scan equal to cumsum.
TEST(ControlFlowCpu, ThousandIterations) {
  Graph g("thousand");
  Value x = g.input("x", DType::f64, {1000});
  std::vector<TensorType> carry{{DType::i32, {}}, {DType::f64, {}}};
  Graph body("inc");
  Value i = body.input("i", DType::i32, {});
  Value acc = body.input("acc", DType::f64, {});
  body.set_outputs(
      {body.add(i, body.scalar(1, DType::i32)), body.add(acc, body.scalar(0.5, DType::f64))});
  Graph body2 = body;
  std::vector<Value> a = g.while_loop(count_below(1000, carry), std::move(body),
                                      {g.scalar(0, DType::i32), g.scalar(0.0, DType::f64)});
  std::vector<Value> b =
      g.while_loop(count_below(1 << 30, carry), std::move(body2),
                   {g.scalar(0, DType::i32), g.scalar(1.0, DType::f64)}, {}, 1000);
  Graph sum("sum");
  Value s = sum.input("s", DType::f64, {});
  Value v = sum.input("v", DType::f64, {});
  Value s2 = sum.add(s, v);
  sum.set_outputs({s2, s2});
  std::vector<Value> c = g.scan(std::move(sum), {g.scalar(0.0, DType::f64)}, {x});
  g.set_outputs({a[0], a[1], b[0], b[1], c[0], c[1], g.cumsum(x, 0)});
  TensorMap feeds{{"x", random_tensor(DType::f64, {1000}, 6, -1, 1)}};
  std::shared_ptr<Executable> exe = session().compile(g);
  std::vector<Tensor> got = exe->run(feeds);
  EXPECT_EQ(got[0].get_i64(0), 1000);
  EXPECT_EQ(got[1].get_f64(0), 500.0);
  EXPECT_EQ(got[2].get_i64(0), 1000);
  EXPECT_EQ(got[3].get_f64(0), 501.0);
  EXPECT_TRUE(testing::all_close(got[5], got[6], 1e-12, 1e-12));
  expect_matches_evaluator(g, feeds);
}

// A [B,H] tanh-RNN scan of `length` steps (h' = tanh(h W + x_t U + b)) with a matmul, adds and
// a tanh per step.
Graph rnn(int64_t length, int64_t batch, int64_t hidden) {
  Graph g("rnn");
  Value xs = g.input("xs", DType::f32, {length, batch, hidden});
  Value h0 = g.input("h0", DType::f32, {batch, hidden});
  Value w = g.input("w", DType::f32, {hidden, hidden});
  Value u = g.input("u", DType::f32, {hidden, hidden});
  Value b = g.input("b", DType::f32, {hidden});
  Graph cell("cell");
  Value cw = cell.input("w", DType::f32, {hidden, hidden});
  Value cu = cell.input("u", DType::f32, {hidden, hidden});
  Value cb = cell.input("b", DType::f32, {hidden});
  Value h = cell.input("h", DType::f32, {batch, hidden});
  Value x = cell.input("x", DType::f32, {batch, hidden});
  Value h2 = cell.tanh(cell.add(cell.add(cell.matmul(h, cw), cell.matmul(x, cu)), cb));
  cell.set_outputs({h2, h2});
  g.set_outputs(g.scan(std::move(cell), {h0}, {xs}, {w, u, b}));
  return g;
}

TensorMap rnn_feeds(int64_t length, int64_t batch, int64_t hidden) {
  return {{"xs", random_tensor(DType::f32, {length, batch, hidden}, 7, -1, 1)},
          {"h0", random_tensor(DType::f32, {batch, hidden}, 8, -1, 1)},
          {"w", random_tensor(DType::f32, {hidden, hidden}, 9, -0.2, 0.2)},
          {"u", random_tensor(DType::f32, {hidden, hidden}, 10, -0.2, 0.2)},
          {"b", random_tensor(DType::f32, {hidden}, 11, -0.1, 0.1)}};
}

TEST(ControlFlowCpu, RnnScanMatchesEvaluator) {
  expect_matches_evaluator(rnn(50, 4, 32), rnn_feeds(50, 4, 32), 1e-4);
}

// A body goes through the CPU pipeline as a top-level graph does: its matmul + add is fused
// into fused_matmul_bias_act and, under auto-mixed-bf16, its matmuls compute in bf16. The
// enclosing graph has no matmul outside the scan, so these forms in the IR dumps
// (RLX_PRINT_IR_AFTER=all) come from compiling the body; the result stays within bf16's
// tolerance of the evaluator.
TEST(ControlFlowCpu, BodiesRunTheCpuPipeline) {
  Graph g = rnn(8, 4, 32);
  TensorMap feeds = rnn_feeds(8, 4, 32);
  CompileOptions options;
  options.precision = parse_precision_policy("auto-mixed-bf16");
  std::shared_ptr<Executable> exe;
  std::string dumps;
  {
    testing::ScopedEnv env;
    env.set("RLX_PRINT_IR_AFTER", "all");
    ::testing::internal::CaptureStderr();
    exe = session().compile(g, options);
    dumps = ::testing::internal::GetCapturedStderr();
  }
  EXPECT_EQ(g.to_string().find("fused_matmul_bias_act"), std::string::npos);
  EXPECT_NE(dumps.find("fused_matmul_bias_act"), std::string::npos);
  EXPECT_NE(dumps.find("bf16["), std::string::npos);
  std::vector<Tensor> got = exe->run(feeds), want = evaluate(g, feeds);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(testing::all_close(got[i], want[i], 5e-2, 5e-2)) << "output " << i;
}

// No allocation per iteration: the bodies are compiled once and their blocks live in the
// executable's arena, so the loop machinery allocates nothing per step. A run counts every
// operator new of the process (after a warm-up run).
int64_t allocations_of_run(Executable& exe, const TensorMap& feeds) {
  if (!RLX_COUNT_ALLOCATIONS) return 0;
  exe.run(feeds);  // warm: lazily created library state is not per run
  return testing::allocations_of([&] { exe.run(feeds); });
}

// A scan and a while_loop whose bodies run allocation-free kernels (elementwise; reduce_sum's
// kernel allocates once per call, a gemm on oneDNN twice per argument inside oneDNN): a
// run of 1000 steps allocates exactly as often as a run of 10 (only the executor's per-run
// allocations: output tensors, the feed table).
TEST(ControlFlowCpu, NoAllocationPerIteration) {
  if (!RLX_COUNT_ALLOCATIONS) GTEST_SKIP() << "a sanitizer owns operator new in this build";
  auto scan = [](int64_t n) {
    Graph g("scan");
    Value xs = g.input("xs", DType::f32, {n, 64});
    Graph step("step");
    Value c = step.input("c", DType::f32, {64});
    Value x = step.input("x", DType::f32, {64});
    Value c2 = step.tanh(step.add(step.mul(c, x), x));
    step.set_outputs({c2, step.neg(c2)});
    g.set_outputs(g.scan(std::move(step), {g.input("c0", DType::f32, {64})}, {xs}));
    return session().compile(g);
  };
  Tensor c0 = random_tensor(DType::f32, {64}, 2);
  int64_t a =
      allocations_of_run(*scan(10), {{"xs", random_tensor(DType::f32, {10, 64}, 1)}, {"c0", c0}});
  int64_t b = allocations_of_run(*scan(1000),
                                 {{"xs", random_tensor(DType::f32, {1000, 64}, 1)}, {"c0", c0}});
  EXPECT_EQ(a, b) << "a 10-step scan run allocates " << a << " times, a 1000-step one " << b;
  EXPECT_LT(a, 20);
  std::vector<TensorType> carry{{DType::i32, {}}, {DType::f32, {64}}};
  auto loop = [&](int32_t n) {
    Graph g("loop");
    Value v = g.input("v", DType::f32, {64});
    Graph body("inc");
    Value i = body.input("i", DType::i32, {});
    Value acc = body.input("acc", DType::f32, {64});
    body.set_outputs({body.add(i, body.scalar(1, DType::i32)),
                      body.tanh(body.add(acc, body.scalar(0.25, DType::f32)))});
    g.set_outputs(
        g.while_loop(count_below(n, carry), std::move(body), {g.scalar(0, DType::i32), v}));
    return session().compile(g);
  };
  TensorMap feeds{{"v", random_tensor(DType::f32, {64}, 12)}};
  EXPECT_EQ(allocations_of_run(*loop(10), feeds), allocations_of_run(*loop(1000), feeds));
}

// A body kernel that allocates per call (a gemm on oneDNN: inside dnnl_primitive_execute; this
// cell's small gemm does not) does so in a loop as in a top-level graph: a scan step allocates
// no more than one run of the cell compiled as a graph of its own.
TEST(ControlFlowCpu, ScanStepAllocatesNoMoreThanItsBodyKernels) {
  if (!RLX_COUNT_ALLOCATIONS) GTEST_SKIP() << "a sanitizer owns operator new in this build";
  int64_t a = allocations_of_run(*session().compile(rnn(10, 4, 32)), rnn_feeds(10, 4, 32));
  int64_t b = allocations_of_run(*session().compile(rnn(1000, 4, 32)), rnn_feeds(1000, 4, 32));
  Graph one = rnn(1, 4, 32);
  Graph cell = one.node(one.outputs()[0].node).attrs.get_graph("body");
  TensorMap cell_feeds{{"w", random_tensor(DType::f32, {32, 32}, 9)},
                       {"u", random_tensor(DType::f32, {32, 32}, 10)},
                       {"b", random_tensor(DType::f32, {32}, 11)},
                       {"h", random_tensor(DType::f32, {4, 32}, 8)},
                       {"x", random_tensor(DType::f32, {4, 32}, 7)}};
  int64_t per_cell_run = allocations_of_run(*session().compile(cell), cell_feeds);
  EXPECT_LE((b - a) / 990, per_cell_run)
      << "10 steps: " << a << ", 1000 steps: " << b << ", one run of the cell: " << per_cell_run;
}

// The rows of `prof` whose parent is row `parent`.
std::vector<const ExecutionProfile::NodeTotal*> children_of(const ExecutionProfile& prof,
                                                            int32_t parent) {
  std::vector<const ExecutionProfile::NodeTotal*> rows;
  for (const ExecutionProfile::NodeTotal& n : prof.nodes)
    if (n.parent == parent) rows.push_back(&n);
  return rows;
}

// Checks the profile's invariants: each body row follows its control-flow row, one level
// deeper, its name qualified by the parent's; the rows under a node take no more time than it
// (self = total - bodies); op totals are self times (summing to kernel_seconds, the top-level
// rows' sum, within the run time).
void expect_consistent(const ExecutionProfile& prof) {
  double top = 0;
  for (size_t i = 0; i < prof.nodes.size(); ++i) {
    const ExecutionProfile::NodeTotal& n = prof.nodes[i];
    SCOPED_TRACE(n.name);
    double inside = 0;
    for (const ExecutionProfile::NodeTotal* c : children_of(prof, static_cast<int32_t>(i)))
      inside += c->seconds;
    EXPECT_LE(inside, n.seconds);
    EXPECT_NEAR(n.self_seconds, n.seconds - inside, 1e-12);
    if (n.parent < 0) {
      EXPECT_EQ(n.depth, 0);
      top += n.seconds;
      continue;
    }
    ASSERT_LT(n.parent, static_cast<int32_t>(i));
    const ExecutionProfile::NodeTotal& up = prof.nodes[static_cast<size_t>(n.parent)];
    EXPECT_TRUE(is_control_flow(up.op));
    EXPECT_EQ(n.depth, up.depth + 1);
    EXPECT_EQ(n.name.rfind(up.name + ".", 0), 0u) << "parent " << up.name;
  }
  EXPECT_DOUBLE_EQ(prof.kernel_seconds(), top);
  double ops = 0;
  for (const ExecutionProfile::OpTotal& o : prof.ops) ops += o.seconds;
  EXPECT_NEAR(ops, top, 1e-9);
  EXPECT_LE(top, prof.run_seconds);
}

// The step profiler breaks a scan's body out: after the scan's row come its body's steps
// (the cell compiled on its own has the same steps), each called once per iteration, their
// times inside the scan's; the op totals count the scan's own time only. Results do not change
// under profiling.
TEST(ControlFlowCpu, ProfileBreaksOutTheScanBody) {
  constexpr int64_t kLength = 10;
  Graph g = rnn(kLength, 4, 16);
  TensorMap feeds = rnn_feeds(kLength, 4, 16);
  CompileOptions options;
  options.profile = ProfileMode::Collect;
  std::shared_ptr<Executable> exe = session().compile(g, options);
  // The body as the pipeline left it (hoist-loop-invariants computes x @ U before the loop).
  Graph cell;
  for (const Node& n : exe->compiled_graph().nodes())
    if (n.op == OpKind::Scan) cell = n.attrs.get_graph("body");
  std::shared_ptr<Executable> alone = session().compile(cell);
  const std::vector<KernelReport::Node>& cell_steps = alone->kernels().nodes;

  std::vector<Tensor> a = exe->run(feeds);
  ExecutionProfile prof = exe->profile();
  ASSERT_EQ(prof.nodes.size(), exe->kernels().nodes.size() + cell_steps.size());
  int32_t scan = -1;
  for (size_t i = 0; i < prof.nodes.size(); ++i)
    if (prof.nodes[i].op == OpKind::Scan) scan = static_cast<int32_t>(i);
  ASSERT_GE(scan, 0);
  const ExecutionProfile::NodeTotal& s = prof.nodes[static_cast<size_t>(scan)];
  EXPECT_EQ(s.calls, 1);
  EXPECT_EQ(s.depth, 0);
  std::vector<const ExecutionProfile::NodeTotal*> body = children_of(prof, scan);
  ASSERT_EQ(body.size(), cell_steps.size());
  double body_seconds = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    EXPECT_EQ(body[i], &prof.nodes[static_cast<size_t>(scan) + 1 + i]);  // right after the scan
    EXPECT_EQ(body[i]->op, cell_steps[i].op);
    EXPECT_EQ(body[i]->node, cell_steps[i].node);
    EXPECT_EQ(body[i]->name, s.name + ".body/" + alone->compiled_graph().node(body[i]->node).name);
    EXPECT_EQ(body[i]->calls, kLength);
    EXPECT_EQ(body[i]->depth, 1);
    EXPECT_GT(body[i]->seconds, 0.0);
    body_seconds += body[i]->seconds;
  }
  EXPECT_LE(body_seconds, s.seconds);
  EXPECT_GT(s.seconds, 0.0);
  expect_consistent(prof);
  for (const ExecutionProfile::OpTotal& o : prof.ops)
    if (o.op == OpKind::Scan) {
      EXPECT_DOUBLE_EQ(o.seconds, s.self_seconds);
    }

  // A second run: body steps count runs × length.
  std::vector<Tensor> b = exe->run(feeds);
  prof = exe->profile();
  body = children_of(prof, scan);  // the rows of the new profile (the old ones are gone)
  for (const ExecutionProfile::NodeTotal* n : body) EXPECT_EQ(n->calls, 2 * kLength);
  std::map<OpKind, int64_t> want_calls;
  for (const ExecutionProfile::NodeTotal& n : prof.nodes) want_calls[n.op] += n.calls;
  for (const ExecutionProfile::OpTotal& o : prof.ops) EXPECT_EQ(o.calls, want_calls[o.op]);

  // The table: the body's steps indented under the scan.
  std::string text = prof.to_string();
  EXPECT_NE(text.find("  " + body[0]->name + " "), std::string::npos) << text;
  EXPECT_NE(text.find("body steps indented"), std::string::npos) << text;

  std::vector<Tensor> plain = session().compile(g)->run(feeds);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(testing::all_close(a[i], plain[i], 0, 0));
    EXPECT_TRUE(testing::all_close(b[i], plain[i], 0, 0));
  }
}

// AMP reaches a body once, in the body's own compile after its fusions, as for a top-level graph:
// the top-level pipeline leaves the bodies to it (PipelineOptions::amp_in_bodies = false), so
// there is no second round of converts and no AMP before the body's fusions (which would turn
// its fused_matmul_bias_act back into a bf16 matmul plus f32 adds, other values). Under
// auto-mixed-bf16 the scan of an RNN cell (h' = tanh(h W + b) + x) therefore equals, bitwise,
// its cell compiled on its own under the same policy and run step by step, which is what the
// CPU computed before AMP learnt to recurse; the scan's body steps are the lone cell's kernels.
TEST(ControlFlowCpu, AmpRunsOnceInABodyAfterItsFusions) {
  constexpr int64_t kLength = 4, kBatch = 2, kHidden = 8;
  Graph cell("cell");
  {
    Value w = cell.input("w", DType::f32, {kHidden, kHidden});
    Value b = cell.input("b", DType::f32, {kHidden});
    Value h = cell.input("h", DType::f32, {kBatch, kHidden});
    Value x = cell.input("x", DType::f32, {kBatch, kHidden});
    Value n = cell.add(cell.tanh(cell.add(cell.matmul(h, w), b)), x);
    cell.set_outputs({n, n});
  }
  Graph g("rnn");
  Value xs = g.input("xs", DType::f32, {kLength, kBatch, kHidden});
  Value h0 = g.input("h0", DType::f32, {kBatch, kHidden});
  Value w = g.input("w", DType::f32, {kHidden, kHidden});
  Value b = g.input("b", DType::f32, {kHidden});
  g.set_outputs(g.scan(cell, {h0}, {xs}, {w, b}));
  TensorMap feeds{{"xs", random_tensor(DType::f32, {kLength, kBatch, kHidden}, 31, -1, 1)},
                  {"h0", random_tensor(DType::f32, {kBatch, kHidden}, 32, -1, 1)},
                  {"w", random_tensor(DType::f32, {kHidden, kHidden}, 33, -0.5, 0.5)},
                  {"b", random_tensor(DType::f32, {kHidden}, 34, -0.1, 0.1)}};
  CompileOptions options;
  options.precision = parse_precision_policy("auto-mixed-bf16");
  options.profile = ProfileMode::Collect;
  std::shared_ptr<Executable> exe = session().compile(g, options);
  for (const Node& n : exe->compiled_graph().nodes())
    if (n.op == OpKind::Scan) {
      EXPECT_EQ(n.attrs.get_graph("body").to_string().find("bf16"), std::string::npos);
    }
  std::shared_ptr<Executable> alone = session().compile(cell, options);
  bool fused = false;
  for (const KernelReport::Node& n : alone->kernels().nodes)
    fused = fused || n.op == OpKind::FusedMatMulBiasAct;
  EXPECT_TRUE(fused);
  EXPECT_NE(alone->compiled_graph().to_string().find("bf16"), std::string::npos);

  std::vector<Tensor> got = exe->run(feeds);
  Tensor h = feeds.at("h0");
  const Tensor& all_xs = feeds.at("xs");
  const int64_t step = kBatch * kHidden;
  for (int64_t t = 0; t < kLength; ++t) {
    Tensor x(DType::f32, Shape{kBatch, kHidden});
    std::copy_n(all_xs.data_as<float>() + t * step, step, x.data_as<float>());
    std::vector<Tensor> out =
        alone->run({{"w", feeds.at("w")}, {"b", feeds.at("b")}, {"h", h}, {"x", x}});
    for (int64_t i = 0; i < step; ++i)
      ASSERT_EQ(got[1].data_as<float>()[t * step + i], out[1].data_as<float>()[i])
          << "step " << t << " element " << i;
    h = out[0];
  }
  EXPECT_TRUE(testing::all_close(got[0], h, 0, 0));

  ExecutionProfile prof = exe->profile();
  int32_t scan = -1;
  for (size_t i = 0; i < prof.nodes.size(); ++i)
    if (prof.nodes[i].op == OpKind::Scan) scan = static_cast<int32_t>(i);
  ASSERT_GE(scan, 0);
  std::vector<OpKind> body_ops, alone_ops;
  for (const ExecutionProfile::NodeTotal* n : children_of(prof, scan)) body_ops.push_back(n->op);
  for (const KernelReport::Node& n : alone->kernels().nodes) alone_ops.push_back(n.op);
  EXPECT_EQ(body_ops, alone_ops);
}

// Nested bodies: a while_loop and a cond inside a scan of 6 steps. Per run the loop's cond
// runs 4 times and its body 3 times per step; the cond's branches run once per step between
// them, the `pos` branch on the steps whose x sums to more than 0.
TEST(ControlFlowCpu, ProfileCountsNestedBodies) {
  Graph g = nested_graph();
  // Step sums 0.6, -0.6, 1.5, 0.3, -0.9, 0.6: four steps take `pos`.
  const int64_t positive = 4;
  TensorMap feeds{{"xs", Tensor::from_doubles(
                             DType::f32, {6, 3},
                             std::vector<double>{0.1, 0.2, 0.3, -0.1, -0.2, -0.3, 0.5, 0.5, 0.5,
                                                 0.3, -0.2, 0.2, -0.3, -0.3, -0.3, 0.2, 0.2, 0.2})},
                  {"c0", random_tensor(DType::f32, {3}, 2, -1, 1)}};
  CompileOptions options;
  options.profile = ProfileMode::Collect;
  std::shared_ptr<Executable> exe = session().compile(g, options);
  exe->run(feeds);
  exe->run(feeds);
  ExecutionProfile prof = exe->profile();
  expect_consistent(prof);
  int32_t loop = -1, cond = -1;
  for (size_t i = 0; i < prof.nodes.size(); ++i) {
    if (prof.nodes[i].op == OpKind::WhileLoop) loop = static_cast<int32_t>(i);
    if (prof.nodes[i].op == OpKind::Cond) cond = static_cast<int32_t>(i);
  }
  ASSERT_GE(loop, 0);
  ASSERT_GE(cond, 0);
  for (int32_t id : {loop, cond}) {
    const ExecutionProfile::NodeTotal& n = prof.nodes[static_cast<size_t>(id)];
    EXPECT_EQ(n.depth, 1);
    EXPECT_EQ(n.calls, 2 * 6);
    EXPECT_EQ(prof.nodes[static_cast<size_t>(n.parent)].op, OpKind::Scan);
  }
  std::map<std::string, int64_t> calls_by_region;  // the largest call count per region
  for (std::string parent : {"while", "cond"}) {
    int32_t id = parent == "while" ? loop : cond;
    const std::string prefix = prof.nodes[static_cast<size_t>(id)].name + ".";
    for (const ExecutionProfile::NodeTotal* n : children_of(prof, id)) {
      EXPECT_EQ(n->depth, 2);
      std::string region =
          n->name.substr(prefix.size(), n->name.find('/', prefix.size()) - prefix.size());
      int64_t& c = calls_by_region[parent + "." + region];
      c = std::max(c, n->calls);
    }
  }
  EXPECT_EQ(calls_by_region["while.cond"], 2 * 6 * 4);
  EXPECT_EQ(calls_by_region["while.body"], 2 * 6 * 3);
  EXPECT_EQ(calls_by_region["cond.branches[1]"], 2 * positive);
  EXPECT_EQ(calls_by_region["cond.branches[0]"], 2 * (6 - positive));
}

// A body that needs a large arena: consts w1[512,4], w2[4,512], carry h[4,256] ->
// w2 · tanh(w1 · h) ([512,256] f32 inside, 512 KiB) + bias (a 1 KiB constant).
Graph wide_cell() {
  Graph cell("wide_cell");
  Value a = cell.input("w1", DType::f32, {512, 4});
  Value b = cell.input("w2", DType::f32, {4, 512});
  Value h = cell.input("h", DType::f32, {4, 256});
  Value bias = cell.constant(random_tensor(DType::f32, {256}, 5, -0.1, 0.1), "bias");
  cell.set_outputs({cell.add(cell.matmul(b, cell.tanh(cell.matmul(a, h))), bias)});
  return cell;
}

// Inputs w1[512,4], w2[4,512], h0[4,256] -> the carry of `length` steps of `body` (consts w1,
// w2; carry h) from h0.
Graph scan_of(const std::string& name, Graph body, int64_t length) {
  Graph g(name);
  Value w1 = g.input("w1", DType::f32, {512, 4});
  Value w2 = g.input("w2", DType::f32, {4, 512});
  Value h0 = g.input("h0", DType::f32, {4, 256});
  g.set_outputs(g.scan(std::move(body), {h0}, {}, {w1, w2}, ScanOptions{.length = length}));
  return g;
}

// The memory-limit check counts what bodies plan: at least the body's own arena (the cell
// compiled alone), once (less than twice it), nested bodies inside their enclosing one, and
// the body's constants; a limit between the top-level figure and the whole one fails.
TEST(ControlFlowCpu, MemoryLimitCountsBodies) {
  constexpr int64_t kKiB = 1024;
  Graph g = scan_of("wide", wide_cell(), 3);
  const int64_t body_arena = session().compile(wide_cell())->memory_plan().arena_bytes;
  ASSERT_GE(body_arena, 512 * kKiB);

  std::shared_ptr<Executable> exe = session().compile(g);
  PlannedMemory m = exe->planned_memory();
  EXPECT_EQ(m.arena, exe->memory_plan().arena_bytes);
  EXPECT_LT(m.arena, 64 * kKiB);
  EXPECT_GE(m.bodies, body_arena);
  // Pointer tables, the 4 KiB carry slot and alignment on top of the body's arena.
  EXPECT_LE(m.bodies, body_arena + 8 * kKiB);
  EXPECT_GE(m.constants, kKiB);  // the body's bias (the top level has no constant)
  EXPECT_EQ(m.outputs, 4 * kKiB);
  EXPECT_EQ(m.total(), m.arena + m.bodies + m.params + m.constants + m.outputs + m.state);

  const int64_t top_level = m.total() - m.bodies - m.constants;
  for (int64_t limit : {top_level, top_level + m.bodies / 2, m.total() - 1}) {
    CompileOptions o;
    o.memory_limit = limit;
    std::string msg;
    try {
      session().compile(g, o);
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("bodies "), std::string::npos) << "limit " << limit << ": " << msg;
    EXPECT_NE(msg.find("; " + std::to_string(m.total()) + " bytes) exceeds the limit"),
              std::string::npos)
        << msg;
  }
  CompileOptions exact;
  exact.memory_limit = m.total();
  EXPECT_NO_THROW(session().compile(g, exact));

  // Nested: the outer scan's body holds the inner scan, whose body's block lies inside the
  // outer body's block: the figure grows by the outer body's small arena, not by a second copy
  // of the inner block.
  PlannedMemory outer =
      session().compile(scan_of("outer", scan_of("inner", wide_cell(), 3), 2))->planned_memory();
  EXPECT_GE(outer.bodies, m.bodies);
  EXPECT_LE(outer.bodies, m.bodies + 16 * kKiB);
  EXPECT_GE(outer.constants, kKiB);
}

// Clones share the compiled bodies (read-only) and each has its own arena, so they run a scan
// concurrently.
TEST(ControlFlowCpu, ClonesRunConcurrently) {
  Graph g = rnn(40, 4, 32);
  TensorMap feeds = rnn_feeds(40, 4, 32);
  std::shared_ptr<Executable> exe = session().compile(g);
  std::vector<Tensor> want = exe->run(feeds);
  std::vector<std::unique_ptr<Executable>> clones;
  for (int i = 0; i < 4; ++i) clones.push_back(exe->clone());
  std::vector<std::vector<Tensor>> got(clones.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < clones.size(); ++i)
    threads.emplace_back([&, i] {
      for (int r = 0; r < 5; ++r) got[i] = clones[i]->run(feeds);
    });
  for (std::thread& t : threads) t.join();
  for (const std::vector<Tensor>& out : got)
    for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(testing::all_close(out[k], want[k], 0, 0));
}

// A region op's kernel needs the backend's body compiler (choose_kernel without one is an
// error naming the op and node).
TEST(ControlFlowCpu, RegionKernelWithoutBodyCompilerIsAnError) {
  Graph g = rnn(3, 2, 4);
  const Node* scan = nullptr;
  for (const Node& n : g.nodes())
    if (n.op == OpKind::Scan) scan = &n;
  ASSERT_NE(scan, nullptr);
  std::string msg = testing::error_of([&] { cpu::choose_kernel(g, *scan); });
  EXPECT_NE(msg.find("op 'scan' (node %" + scan->name + ") needs a body compiler"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace rlx
