// PassManager: ordering, changed flags, timings, IR dumps (API and environment) and the
// verification that names the pass which broke the graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "../common/test_util.h"
#include "rlx/opt/pass.h"
#include "rlx/opt/passes.h"

namespace rlx {
namespace {

using ::rlx::testing::error_of;

// Appends its name to a shared log (to observe order) and reports a fixed `changed`.
class LogPass : public Pass {
 public:
  LogPass(std::string name, bool changed, std::vector<std::string>* log)
      : name_(std::move(name)), changed_(changed), log_(log) {}
  std::string_view name() const override { return name_; }
  bool run(Graph& g) override {
    log_->push_back(name_ + "@" + std::to_string(g.nodes().size()));
    return changed_;
  }

 private:
  std::string name_;
  bool changed_;
  std::vector<std::string>* log_;
};

// Appends one neg of the first output, so dumps before and after differ.
class NegPass : public Pass {
 public:
  std::string_view name() const override { return "append-neg"; }
  bool run(Graph& g) override {
    g.set_outputs({g.neg(g.outputs()[0])});
    return true;
  }
};

// Builds an elementwise_region whose body it keeps a mutable handle to, then swaps the body's
// output for a bool comparison. The body attribute is documented as immutable; breaking that
// contract leaves a region whose recorded result type (f32) no longer matches what inference
// derives from its body (bool) — a graph only verify() can catch.
class BreakRegionPass : public Pass {
 public:
  std::string_view name() const override { return "break-region"; }
  bool run(Graph& g) override {
    Value x = g.outputs()[0];
    auto body = std::make_shared<Graph>("body");
    Value bx = body->input("x", g.dtype(x), g.shape(x));
    body->set_outputs({body->neg(bx)});
    AttrMap attrs;
    attrs.set("body", std::shared_ptr<const Graph>(body));
    Value r = g.emit1(OpKind::ElementwiseRegion, {x}, attrs, "r");
    g.set_outputs({r});
    body->set_outputs({body->eq(bx, bx)});
    return true;
  }
};

Graph small_graph() {
  Graph g;
  Value x = g.input("x", DType::f32, {2});
  g.set_outputs({g.exp(x)});
  return g;
}

TEST(PassManager, RunsPassesInOrderAndOrsChanged) {
  std::vector<std::string> log;
  PassManager pm;
  pm.add<LogPass>("a", false, &log).add<LogPass>("b", false, &log).add<NegPass>();
  pm.add<LogPass>("c", false, &log);
  EXPECT_EQ(pm.pass_names(), (std::vector<std::string>{"a", "b", "append-neg", "c"}));
  Graph g = small_graph();
  EXPECT_TRUE(pm.run(g));
  // c sees the node NegPass added.
  EXPECT_EQ(log, (std::vector<std::string>{"a@2", "b@2", "c@3"}));

  PassManager none;
  none.add<LogPass>("a", false, &log);
  EXPECT_FALSE(none.run(g));
}

TEST(PassManager, RecordsOneTimingPerPassRun) {
  std::vector<std::string> log;
  PassManager pm;
  pm.add<LogPass>("a", false, &log).add<NegPass>();
  Graph g = small_graph();
  pm.run(g);
  pm.run(g);
  ASSERT_EQ(pm.timings().size(), 4u);
  EXPECT_EQ(pm.timings()[0].pass, "a");
  EXPECT_FALSE(pm.timings()[0].changed);
  EXPECT_EQ(pm.timings()[1].pass, "append-neg");
  EXPECT_TRUE(pm.timings()[1].changed);
  for (const PassTiming& t : pm.timings()) EXPECT_GE(t.ms, 0.0);
  std::string report = pm.timing_report();
  EXPECT_NE(report.find("append-neg"), std::string::npos) << report;
  EXPECT_NE(report.find(" ms"), std::string::npos) << report;
  EXPECT_NE(report.find("unchanged"), std::string::npos) << report;
  EXPECT_EQ(std::count(report.begin(), report.end(), '\n'), 4) << report;
}

struct Dump {
  std::string pass, when, ir;
};

TEST(PassManager, DumpsIrOfNamedPassToSink) {
  std::vector<std::string> log;
  PassManager pm;
  pm.add<LogPass>("a", false, &log).add<NegPass>();
  std::vector<Dump> dumps;
  pm.set_ir_sink([&](std::string_view p, std::string_view w, const Graph& g) {
    dumps.push_back({std::string(p), std::string(w), g.to_string()});
  });
  pm.print_ir_before({"append-neg"});
  pm.print_ir_after({"append-neg"});
  Graph g = small_graph();
  std::string before = g.to_string();
  pm.run(g);
  ASSERT_EQ(dumps.size(), 2u);
  EXPECT_EQ(dumps[0].pass, "append-neg");
  EXPECT_EQ(dumps[0].when, "before");
  EXPECT_EQ(dumps[0].ir, before);
  EXPECT_EQ(dumps[1].when, "after");
  EXPECT_EQ(dumps[1].ir, g.to_string());
  EXPECT_NE(dumps[1].ir.find("neg"), std::string::npos);
}

TEST(PassManager, DumpsAfterEveryPassForAll) {
  std::vector<std::string> log;
  PassManager pm;
  pm.add<LogPass>("a", false, &log).add<NegPass>().add<LogPass>("c", false, &log);
  std::vector<std::string> seen;
  pm.set_ir_sink([&](std::string_view p, std::string_view w, const Graph&) {
    seen.push_back(std::string(w) + ":" + std::string(p));
  });
  pm.print_ir_after({"all"});
  Graph g = small_graph();
  pm.run(g);
  EXPECT_EQ(seen, (std::vector<std::string>{"after:a", "after:append-neg", "after:c"}));
}

TEST(PassManager, EnvironmentSelectsDumpsAtConstruction) {
  ASSERT_EQ(setenv("RLX_PRINT_IR_AFTER", "a, append-neg", 1), 0);
  ASSERT_EQ(setenv("RLX_PRINT_IR_BEFORE", "c", 1), 0);
  PassManager pm;
  unsetenv("RLX_PRINT_IR_AFTER");
  unsetenv("RLX_PRINT_IR_BEFORE");
  std::vector<std::string> log;
  pm.add<LogPass>("a", false, &log).add<NegPass>().add<LogPass>("c", false, &log);
  std::vector<std::string> seen;
  pm.set_ir_sink([&](std::string_view p, std::string_view w, const Graph&) {
    seen.push_back(std::string(w) + ":" + std::string(p));
  });
  Graph g = small_graph();
  pm.run(g);
  EXPECT_EQ(seen, (std::vector<std::string>{"after:a", "after:append-neg", "before:c"}));

  // Read at construction only: a manager built with the variables unset dumps nothing.
  PassManager quiet;
  quiet.add<NegPass>();
  int calls = 0;
  quiet.set_ir_sink([&](std::string_view, std::string_view, const Graph&) { ++calls; });
  quiet.run(g);
  EXPECT_EQ(calls, 0);
}

TEST(PassManager, DefaultSinkWritesHeaderToStderr) {
  PassManager pm;
  pm.add<NegPass>();
  pm.print_ir_after({"append-neg"});
  Graph g = small_graph();
  ::testing::internal::CaptureStderr();
  pm.run(g);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "// ----- IR after append-neg -----\n" + g.to_string() +
                     (g.to_string().back() == '\n' ? "" : "\n"));
}

TEST(PassManager, WarnsWhenADumpNamesNoPass) {
  PassManager pm;
  pm.add<NegPass>();
  pm.print_ir_after({"no-such-pass"});
  Graph g = small_graph();
  ::testing::internal::CaptureStderr();
  pm.run(g);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "rlx: IR dump requested for 'no-such-pass', which is not a pass of this pipeline "
            "(append-neg)\n");
}

TEST(PassManager, VerificationNamesTheBreakingPass) {
  PassManager pm;
  pm.add<NegPass>().add<BreakRegionPass>();
  pm.set_verify(true);
  Graph g = small_graph();
  std::string err = error_of([&] { pm.run(g); });
  EXPECT_EQ(err.rfind("pass 'break-region' produced an invalid graph: node %r (op "
                      "'elementwise_region'): result types (f32[2]) differ from inferred "
                      "(bool[2])",
                      0),
            0u)
      << err;
  // The passes before the failure completed on g.
  ASSERT_EQ(pm.timings().size(), 2u);
  EXPECT_EQ(g.find("r"), static_cast<int32_t>(g.nodes().size()) - 1);

  PassManager lax;
  lax.add<BreakRegionPass>();
  lax.set_verify(false);
  Graph h = small_graph();
  EXPECT_EQ(error_of([&] { lax.run(h); }), "");
  EXPECT_FALSE(h.verify().empty());
}

// Verification defaults to on in debug builds and, in release builds, only with
// RLX_VERIFY_IR=1 (read at construction).
TEST(PassManager, VerifyDefaultFollowsBuildAndEnvironment) {
  ASSERT_EQ(setenv("RLX_VERIFY_IR", "1", 1), 0);
  PassManager on;
  unsetenv("RLX_VERIFY_IR");
  on.add<BreakRegionPass>();
  Graph g = small_graph();
  EXPECT_NE(error_of([&] { on.run(g); }).find("pass 'break-region' produced an invalid graph"),
            std::string::npos);

  PassManager by_build;
  by_build.add<BreakRegionPass>();
  Graph h = small_graph();
  std::string err = error_of([&] { by_build.run(h); });
#ifdef NDEBUG
  EXPECT_EQ(err, "");
#else
  EXPECT_NE(err, "");
#endif
}

TEST(PassManager, RejectsNullPass) {
  PassManager pm;
  EXPECT_EQ(error_of([&] { pm.add(std::unique_ptr<Pass>()); }), "PassManager::add: null pass");
}

TEST(DecomposePass, ExpandsOnlyUnkeptComposites) {
  Graph g;
  Value x = g.input("x", DType::f32, {2, 3});
  g.set_outputs({g.relu(g.softmax(x))});
  Graph d = g;
  auto pass = create_decompose_pass([](OpKind op) { return op == OpKind::Softmax; }, "unrelu");
  EXPECT_EQ(pass->name(), "unrelu");
  EXPECT_TRUE(pass->run(d));
  bool softmax = false;
  for (const Node& n : d.nodes()) {
    EXPECT_NE(n.op, OpKind::Relu);
    softmax = softmax || n.op == OpKind::Softmax;
  }
  EXPECT_TRUE(softmax);
  EXPECT_FALSE(pass->run(d));  // nothing left to expand

  Tensor xv = ::rlx::testing::random_tensor(DType::f32, {2, 3}, 5);
  auto want = evaluate(g, {{"x", xv}});
  auto got = evaluate(d, {{"x", xv}});
  EXPECT_TRUE(::rlx::testing::all_close(got[0], want[0], 0, 0));
  EXPECT_EQ(create_decompose_pass()->name(), "decompose");
}

}  // namespace
}  // namespace rlx
