// cond / while_loop / scan on XLA (issue 16): every golden control-flow case of
// tests/golden/ops.json run on pjrt:0 against JAX's values, the committed StableHLO of a scan and
// a cond (stablehlo.while / stablehlo.case regions, not unrolled or selected), a composite inside
// a body decomposed by legalization, nested regions, and a bounded while_loop's trip counter.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <span>
#include <sstream>

#include "common/test_util.h"
#include "golden/golden_data.h"
#include "pjrt_test_util.h"
#include "rlx/autodiff/grad.h"
#include "rlx/ir/collective.h"
#include "rlx/ir/error.h"
#include "rlx/opt/precision.h"

namespace rlx::pjrt::testing {
namespace {

using rlx::testing::json;

// ---- the golden control-flow cases (JAX's values), as golden_test.cc reads them.

struct GoldenCase {
  std::string name;
  Graph graph;
  TensorMap inputs;
  std::vector<Tensor> outputs;
  std::optional<double> rtol, atol;
};

bool has_control_flow(const Graph& g) {
  for (const Node& n : g.nodes())
    if (n.op == OpKind::Cond || n.op == OpKind::WhileLoop || n.op == OpKind::Scan) return true;
  return false;
}

const std::vector<GoldenCase>& golden_cases() {
  static const std::vector<GoldenCase> cases = [] {
    std::vector<GoldenCase> out;
    std::ifstream in(RLX_TEST_DATA_DIR "/golden/ops.json");
    json doc = json::parse(in);
    for (const json& c : doc.at("cases")) {
      Graph g = Graph::parse(c.at("ir").get<std::string>());
      if (!has_control_flow(g)) continue;
      GoldenCase gc{c.at("name").get<std::string>(), std::move(g), {}, {}, {}, {}};
      for (const auto& [k, v] : c.at("inputs").items())
        gc.inputs.emplace(k, rlx::testing::json_tensor(v));
      for (const json& o : c.at("outputs")) gc.outputs.push_back(rlx::testing::json_tensor(o));
      if (c.contains("rtol")) gc.rtol = c.at("rtol").get<double>();
      if (c.contains("atol")) gc.atol = c.at("atol").get<double>();
      out.push_back(std::move(gc));
    }
    return out;
  }();
  return cases;
}

// golden_test.cc's tolerance: a few ulp of the dtype, or the case's own.
Tolerance golden_tolerance(DType t, const GoldenCase& c) {
  Tolerance d{0, 0};
  if (t == DType::f64) d = {1e-12, 1e-12};
  if (t == DType::f32) d = {1e-6, 2e-6};
  return {c.atol.value_or(d.atol), c.rtol.value_or(d.rtol)};
}

class PjrtGoldenControlFlow : public ::testing::TestWithParam<size_t> {};

TEST_P(PjrtGoldenControlFlow, MatchesJax) {
  RLX_REQUIRE_PJRT_PLUGIN();
  const GoldenCase& c = golden_cases()[GetParam()];
  SCOPED_TRACE(c.name + "\n" + c.graph.to_string());
  std::unique_ptr<Executable> exe =
      test_backend()->compile(c.graph, f32_options(), Device{DeviceKind::Pjrt, 0});
  std::vector<Tensor> got = exe->run(c.inputs);
  ASSERT_EQ(got.size(), c.outputs.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(all_close(got[i], c.outputs[i], golden_tolerance(c.outputs[i].dtype(), c)))
        << "output " << i;
}

INSTANTIATE_TEST_SUITE_P(Golden, PjrtGoldenControlFlow,
                         ::testing::Range(size_t{0}, golden_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string s = golden_cases()[info.param].name;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

TEST(PjrtGoldenControlFlow, EveryConstructHasCases) {
  std::set<OpKind> seen;
  for (const GoldenCase& c : golden_cases())
    for (const Node& n : c.graph.nodes()) seen.insert(n.op);
  for (OpKind op : {OpKind::Cond, OpKind::WhileLoop, OpKind::Scan})
    EXPECT_TRUE(seen.count(op)) << op_name(op);
}

// ---- the emitted modules

// A cumulative sum over 5 steps (carry f32[2], ys f32[5,2]) with a composite (softmax) in the
// body, and a 3-way switch whose branches hold a scan.
Graph scan_graph() {
  Graph b("step");
  Value c = b.input("c", DType::f32, {2});
  Value x = b.input("x", DType::f32, {2});
  Value s = b.add(c, b.softmax(x, -1));
  b.set_outputs({s, s});
  Graph g("scan_softmax");
  Value init = g.input("init", DType::f32, {2});
  Value xs = g.input("xs", DType::f32, {5, 2});
  g.set_outputs(g.scan(std::move(b), {init}, {xs}));
  return g;
}

Graph switch_graph() {
  Graph g("switch_of_scans");
  Value i = g.input("i", DType::i32, {});
  Value x = g.input("x", DType::f32, {3, 2});
  std::vector<Graph> branches;
  for (int k = 0; k < 3; ++k) {
    Graph br("b" + std::to_string(k));
    Value bx = br.input("x", DType::f32, {3, 2});
    Graph step("step" + std::to_string(k));
    Value c = step.input("c", DType::f32, {2});
    Value xt = step.input("xt", DType::f32, {2});
    Value n = step.mul(step.add(c, xt), step.scalar(static_cast<double>(k + 1), DType::f32));
    step.set_outputs({n});
    ScanOptions o;
    o.reverse = k == 2;
    std::vector<Value> r =
        br.scan(std::move(step), {br.constant(Tensor::full(DType::f32, Shape{2}, 0))}, {bx}, {}, o);
    br.set_outputs({r[0]});
    branches.push_back(std::move(br));
  }
  g.set_outputs(g.switch_case(i, std::move(branches), {x}));
  return g;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The committed modules (tests/backends/pjrt/golden/). RLX_PRINT_GOLDEN=1 prints the current
// text; RLX_WRITE_GOLDEN=DIR writes it to DIR/<file>.
TEST(PjrtControlFlowEmit, GoldenModules) {
  for (auto [g, file] : {std::pair{scan_graph(), "scan_softmax.mlir"},
                         std::pair{switch_graph(), "switch_of_scans.mlir"}}) {
    std::string got = lower_to_stablehlo(g, f32_options());
    if (std::getenv("RLX_PRINT_GOLDEN") != nullptr) std::cout << got;
    if (const char* dir = std::getenv("RLX_WRITE_GOLDEN"))
      std::ofstream(std::filesystem::path(dir) / file, std::ios::binary) << got;
    EXPECT_EQ(got, read_file(std::filesystem::path(RLX_TEST_DATA_DIR) / "backends" / "pjrt" /
                             "golden" / file))
        << file;
  }
}

// Loops stay loops: one stablehlo.while per scan with the body emitted once (no unrolling),
// one stablehlo.case per cond; the softmax inside the body is decomposed (its reduce is there).
TEST(PjrtControlFlowEmit, LoopsAndBranchesAreRegions) {
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
    return n;
  };
  std::string scan = lower_to_stablehlo(scan_graph(), f32_options());
  EXPECT_EQ(count(scan, "\"stablehlo.while\""), 1u) << scan;
  EXPECT_EQ(count(scan, "\"stablehlo.exponential\""), 1u) << scan;
  EXPECT_EQ(count(scan, "\"stablehlo.dynamic_slice\""), 1u) << scan;
  EXPECT_EQ(count(scan, "\"stablehlo.dynamic_update_slice\""), 1u) << scan;
  std::string sw = lower_to_stablehlo(switch_graph(), f32_options());
  EXPECT_EQ(count(sw, "\"stablehlo.case\""), 1u) << sw;
  EXPECT_EQ(count(sw, "\"stablehlo.while\""), 3u) << sw;
  EXPECT_EQ(count(sw, "\"stablehlo.clamp\""), 1u) << sw;
}

// A collective inside a body is refused, naming it (channel handles number one graph's
// collectives).
TEST(PjrtControlFlowEmit, CollectiveInABodyIsAnError) {
  Graph b("step");
  Value c = b.input("c", DType::f32, {2});
  Value x = b.input("x", DType::f32, {2});
  AttrMap attrs = collective_attrs({{0, 1}}, "data");
  attrs.set("reduce", std::string("sum"));
  b.set_outputs({b.add(c, b.emit1(OpKind::AllReduce, {x}, attrs, "ar"))});
  Graph g("scan_all_reduce");
  Value init = g.input("init", DType::f32, {2});
  Value xs = g.input("xs", DType::f32, {3, 2});
  g.set_outputs({g.scan(std::move(b), {init}, {xs})[0]});
  EXPECT_EQ(rlx::testing::error_of([&] { lower_to_stablehlo(g, f32_options()); }),
            "pjrt: collective all_reduce (node %ar in region @step) inside a cond / while_loop "
            "/ scan body is not supported; apply it to the op's operands or results");
}

// ---- runs against the reference evaluator (nested regions, a composite in a body, every
// switch index including out-of-range ones, a bounded loop whose cond stays true)

TEST(PjrtControlFlow, ScanWithCompositeInBodyMatchesEvaluator) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g = scan_graph();
  TensorMap feeds = random_feeds(g, 3);
  std::unique_ptr<Executable> exe =
      test_backend()->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
  std::vector<Tensor> got = exe->run(feeds), want = evaluate(g, feeds);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], kF32TranscendentalTol)) << "output " << i;
}

TEST(PjrtControlFlow, SwitchOfScansClampsTheIndex) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g = switch_graph();
  TensorMap feeds = random_feeds(g, 5);  // "i" is set below
  std::unique_ptr<Executable> exe =
      test_backend()->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
  for (int32_t index : {-4, 0, 1, 2, 3, 100}) {
    feeds.insert_or_assign("i", Tensor::full(DType::i32, Shape{}, index));
    std::vector<Tensor> got = exe->run(feeds), want = evaluate(g, feeds);
    EXPECT_TRUE(all_close(got[0], want[0], kF32Tol)) << "index " << index;
  }
}

// A loop whose cond is always true, ended by max_trip_count: the counter is part of the loop.
TEST(PjrtControlFlow, BoundedWhileStopsAtMaxTripCount) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph c("c");
  c.input("k", DType::f32, {});
  c.input("x", DType::f32, {2});
  c.set_outputs({c.constant(Tensor::full(DType::bool_, Shape{}, 1))});
  Graph b("b");
  Value k = b.input("k", DType::f32, {});
  Value x = b.input("x", DType::f32, {2});
  b.set_outputs({b.add(x, k)});
  Graph g("bounded");
  Value gk = g.input("k", DType::f32, {});
  Value gx = g.input("x", DType::f32, {2});
  g.set_outputs(g.while_loop(std::move(c), std::move(b), {gx}, {gk}, 7));
  TensorMap feeds{{"k", Tensor::full(DType::f32, Shape{}, 0.5)},
                  {"x", Tensor::full(DType::f32, Shape{2}, 1.0)}};
  std::unique_ptr<Executable> exe =
      test_backend()->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
  std::vector<Tensor> got = exe->run(feeds);
  EXPECT_TRUE(all_close(got[0], Tensor::full(DType::f32, Shape{2}, 4.5), kF32Tol));
}

// ---- AMP inside bodies: the default policy (auto-mixed-bf16) reaches a scan body

// An RNN over 6 steps with its only matmul in the scan body: h' = tanh(h W + x), ys = h';
// `loss` adds the output sum(ys * ys) (for grad).
Graph amp_rnn(bool loss) {
  Graph cell("cell");
  Value w = cell.input("w", DType::f32, {8, 8});
  Value h = cell.input("h", DType::f32, {2, 8});
  Value x = cell.input("x", DType::f32, {2, 8});
  Value n = cell.tanh(cell.add(cell.matmul(h, w), x));
  cell.set_outputs({n, n});
  Graph g(loss ? "rnn_loss" : "rnn");
  Value gw = g.input("w", DType::f32, {8, 8});
  Value gh = g.input("h0", DType::f32, {2, 8});
  Value gx = g.input("xs", DType::f32, {6, 2, 8});
  std::vector<Value> s = g.scan(std::move(cell), {gh}, {gx}, {gw});
  if (loss)
    g.set_outputs({g.reduce_sum(g.mul(s[1], s[1]), {0, 1, 2})});
  else
    g.set_outputs(s);
  return g;
}

// Lines of a module holding a stablehlo.dot_general over bf16 operands.
size_t bf16_dot_generals(const std::string& module) {
  size_t n = 0;
  std::istringstream lines(module);
  for (std::string line; std::getline(lines, line);)
    n += line.find("stablehlo.dot_general") != std::string::npos &&
         line.find("xbf16>") != std::string::npos;
  return n;
}

// The emitted module under the default policy computes the body's matmul as a bf16
// dot_general (the graph has no other matmul); under always-f32 the module holds no bf16.
TEST(PjrtControlFlowEmit, DefaultPolicyRunsTheScanBodysMatmulInBf16) {
  std::string mixed = lower_to_stablehlo(amp_rnn(false));
  EXPECT_EQ(bf16_dot_generals(mixed), 1u) << mixed;
  std::string f32 = lower_to_stablehlo(amp_rnn(false), f32_options());
  EXPECT_EQ(f32.find("bf16"), std::string::npos) << f32;
}

// Values: under the default policy XLA computes what the pipeline's graph says (the evaluator
// on the compiled graph, bf16 operands included, to f32 tolerance), within bf16 tolerance of
// the CPU backend under auto-mixed-bf16 and of the f32 evaluator (6 steps of a tanh RNN,
// |W| <= 0.5, 8 products per dot rounded to bf16 (rel. 2^-9 each): errors well below 2e-2),
// and measurably away from f32 (so bf16 did run); always-f32 stays at f32 tolerance.
TEST(PjrtControlFlow, DefaultPolicyScanMatchesCpuWithinBf16) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g = amp_rnn(false);
  TensorMap feeds = random_feeds(g, 17);
  for (float& v : std::span(feeds.at("w").data_as<float>(), 64)) v *= 0.5f;
  std::unique_ptr<Executable> exe = test_backend()->compile(g, {}, Device{DeviceKind::Pjrt, 0});
  CompileOptions mixed;
  mixed.precision = parse_precision_policy("auto-mixed-bf16");
  std::vector<Tensor>
      got = exe->run(feeds),
      cpu = backend_for(DeviceKind::Cpu)->compile(g, mixed, Device::cpu())->run(feeds),
      amp = evaluate(exe->compiled_graph(), feeds), want = evaluate(g, feeds);
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(all_close(got[i], amp[i], kF32TranscendentalTol));
    EXPECT_TRUE(all_close(got[i], cpu[i], {2e-2, 2e-2}));
    EXPECT_TRUE(all_close(got[i], want[i], {2e-2, 2e-2}));
    EXPECT_FALSE(all_close(got[i], want[i], {1e-4, 1e-4}));
  }
  std::vector<Tensor> f32 =
      test_backend()->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0})->run(feeds);
  for (size_t i = 0; i < f32.size(); ++i)
    EXPECT_TRUE(all_close(f32[i], want[i], kF32TranscendentalTol)) << i;
}

// The gradient of a scan under a mixed policy compiles and runs: on pjrt:0 (default policy)
// the forward (residual) scan and the reverse scan both hold bf16 dot_generals, and the
// gradients agree with the CPU backend under auto-mixed-bf16 and with the f32 evaluator within
// bf16 tolerance (d loss / d W sums 6 steps x 2 rows of O(1) terms: 5e-2).
TEST(PjrtControlFlow, GradOfAScanUnderTheDefaultPolicy) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g = autodiff::grad(amp_rnn(true), {"w", "h0"});
  EXPECT_GE(bf16_dot_generals(lower_to_stablehlo(g)), 3u);
  TensorMap feeds = random_feeds(g, 19);
  for (float& v : std::span(feeds.at("w").data_as<float>(), 64)) v *= 0.5f;
  CompileOptions mixed;
  mixed.precision = parse_precision_policy("auto-mixed-bf16");
  std::vector<Tensor>
      got = test_backend()->compile(g, {}, Device{DeviceKind::Pjrt, 0})->run(feeds),
      cpu = backend_for(DeviceKind::Cpu)->compile(g, mixed, Device::cpu())->run(feeds),
      want = evaluate(g, feeds);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(all_close(got[i], cpu[i], kBf16LayerTol));
    EXPECT_TRUE(all_close(got[i], want[i], kBf16LayerTol));
  }
}

// The sharded path: a scan (an RNN over 6 steps, batch split over "data") on a 2x2 mesh in
// both sharding forms equals the one-device run; the loop state carries no annotation, XLA's
// partitioner propagates the argument shardings into it.
TEST(PjrtControlFlow, ShardedScanEqualsOneDevice) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (describe_plugin(test_plugin()).devices.size() < 4)
    GTEST_SKIP() << "needs a plugin with 4 devices";
  Graph cell("cell");
  Value w = cell.input("w", DType::f32, {4, 4});
  Value h = cell.input("h", DType::f32, {4, 4});
  Value x = cell.input("x", DType::f32, {4, 4});
  Value n = cell.tanh(cell.add(x, cell.matmul(h, w)));
  cell.set_outputs({n, n});
  Graph g("rnn");
  Value gw = g.input("w", DType::f32, {4, 4});
  Value gh = g.input("h0", DType::f32, {4, 4});
  Value gx = g.input("xs", DType::f32, {6, 4, 4});
  g.set_outputs(g.scan(std::move(cell), {gh}, {gx}, {gw}));
  TensorMap feeds = random_feeds(g, 9);
  std::vector<Tensor> want =
      test_backend()->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0})->run(feeds);
  for (ShardingForm form : {ShardingForm::Shardy, ShardingForm::Gspmd}) {
    ShardingConfig c{Mesh({{"data", 2}, {"model", 2}}),
                     {{"h0", PartitionSpec({"data"})}, {"xs", PartitionSpec({"", "data"})}},
                     {},
                     {},
                     form};
    std::vector<Tensor> got = make_pjrt_spmd_backend(c, test_plugin())
                                  ->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0})
                                  ->run(feeds);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(all_close(got[i], want[i], kF32Tol))
          << sharding_form_name(form) << " output " << i;
  }
}

}  // namespace
}  // namespace rlx::pjrt::testing
