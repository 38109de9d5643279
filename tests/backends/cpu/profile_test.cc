// The CPU backend's step profiler (CompileOptions::profile, RLX_PROFILE; rlx/runtime/
// profile.h): exact call counts per op kind and node against the executable's kernel report
// (one entry per schedule step), times non-negative and within the measured wall time of the
// runs, off by default, results unchanged by profiling, clones with their own profile, the
// RLX_PROFILE values (1, 0, a bad one naming the variable) and the table printed at
// destruction.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/scoped_env.h"
#include "common/test_util.h"
#include "rlx/ir/error.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

using testing::random_tensor;
using testing::ScopedEnv;

// x[8,16] -> matmul -> tanh -> exp/add -> matmul -> reduce_sum: GEMMs, elementwise (maybe
// fused) and a reduction.
Graph small_graph() {
  Graph g("profiled");
  Value x = g.input("x", DType::f32, {8, 16});
  Value w = g.param("w", DType::f32, {16, 16});
  Value y = g.tanh(g.matmul(x, w));
  Value z = g.add(y, g.exp(y));
  g.set_outputs({g.reduce_sum(g.matmul(z, w), {1})});
  return g;
}

// `count` matmuls in a chain: `count` steps that no pass fuses.
Graph matmul_chain(int count) {
  Graph g("chain");
  Value x = g.input("x", DType::f32, {4, 8});
  Value w = g.param("w", DType::f32, {8, 8});
  for (int i = 0; i < count; ++i) x = g.matmul(x, w);
  g.set_outputs({x});
  return g;
}

std::shared_ptr<Executable> compile(Session& s, const Graph& g, std::optional<ProfileMode> mode) {
  CompileOptions o;
  o.profile = mode;
  std::shared_ptr<Executable> exe = s.compile(g, o);
  for (const IoSpec& p : exe->params())
    exe->set_param(p.name, random_tensor(p.type.dtype, p.type.shape, 7, -0.5, 0.5));
  return exe;
}

TensorMap inputs_for(const Executable& exe) {
  TensorMap in;
  for (const IoSpec& i : exe.inputs()) in[i.name] = random_tensor(i.type.dtype, i.type.shape, 3);
  return in;
}

TEST(CpuProfile, CallsPerOpKindAndNodeAreRunsTimesSteps) {
  ScopedEnv env;
  env.set("RLX_PROFILE", std::nullopt);
  Session s;
  auto exe = compile(s, small_graph(), ProfileMode::Collect);
  const KernelReport& steps = exe->kernels();  // one entry per schedule step
  ASSERT_GE(steps.nodes.size(), 3u);

  // Before any run: every step listed, nothing timed.
  ExecutionProfile before = exe->profile();
  EXPECT_TRUE(before.empty());
  EXPECT_EQ(before.nodes.size(), steps.nodes.size());

  TensorMap in = inputs_for(*exe);
  constexpr int kRuns = 7;
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < kRuns; ++r) exe->run(in);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  ExecutionProfile prof = exe->profile();
  EXPECT_EQ(prof.runs, kRuns);
  std::map<OpKind, int64_t> want_calls;
  for (const KernelReport::Node& n : steps.nodes) want_calls[n.op] += kRuns;
  std::map<OpKind, int64_t> got_calls;
  for (const ExecutionProfile::OpTotal& o : prof.ops) {
    EXPECT_EQ(got_calls.count(o.op), 0u) << "op listed twice: " << op_name(o.op);
    got_calls[o.op] = o.calls;
    EXPECT_GE(o.seconds, 0.0);
  }
  EXPECT_EQ(got_calls, want_calls);
  EXPECT_TRUE(got_calls.count(OpKind::MatMul) == 1) << prof.to_string();
  EXPECT_EQ(got_calls[OpKind::MatMul], 2 * kRuns);  // the two matmuls (native composite)

  // Every step's node, in schedule order, with its name and op from the compiled graph.
  ASSERT_EQ(prof.nodes.size(), steps.nodes.size());
  double node_sum = 0;
  for (size_t i = 0; i < prof.nodes.size(); ++i) {
    const ExecutionProfile::NodeTotal& n = prof.nodes[i];
    EXPECT_EQ(n.node, steps.nodes[i].node);
    EXPECT_EQ(n.op, exe->compiled_graph().node(n.node).op);
    EXPECT_EQ(n.name, exe->compiled_graph().node(n.node).name);
    EXPECT_EQ(n.calls, kRuns);
    EXPECT_GE(n.seconds, 0.0);
    node_sum += n.seconds;
  }
  double op_sum = 0;
  for (const ExecutionProfile::OpTotal& o : prof.ops) op_sum += o.seconds;
  EXPECT_NEAR(op_sum, node_sum, 1e-12);
  EXPECT_DOUBLE_EQ(prof.kernel_seconds(), node_sum);
  EXPECT_LE(node_sum, prof.run_seconds);
  EXPECT_LE(prof.run_seconds, wall);
  EXPECT_GT(prof.run_seconds, 0.0);
  for (size_t i = 1; i < prof.ops.size(); ++i)  // sorted by time, most first
    EXPECT_GE(prof.ops[i - 1].seconds, prof.ops[i].seconds);
}

TEST(CpuProfile, ProfilingDoesNotChangeResults) {
  ScopedEnv env;
  env.set("RLX_PROFILE", std::nullopt);
  Session s;
  auto on = compile(s, small_graph(), ProfileMode::Collect);
  auto off = compile(s, small_graph(), ProfileMode::Off);
  EXPECT_NE(on.get(), off.get());  // the mode is part of the compile-cache key
  TensorMap in = inputs_for(*on);
  std::vector<Tensor> a = on->run(in), b = off->run(in);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].bitwise_equal(b[i]));
  EXPECT_TRUE(off->profile().empty());
  EXPECT_TRUE(off->profile().nodes.empty());
}

TEST(CpuProfile, OffByDefault) {
  ScopedEnv env;
  env.set("RLX_PROFILE", std::nullopt);
  Session s;
  auto exe = compile(s, small_graph(), std::nullopt);
  exe->run(inputs_for(*exe));
  ExecutionProfile prof = exe->profile();
  EXPECT_TRUE(prof.empty());
  EXPECT_TRUE(prof.nodes.empty());
  EXPECT_TRUE(prof.ops.empty());
  EXPECT_EQ(prof.run_seconds, 0.0);
}

TEST(CpuProfile, CloneHasItsOwnProfile) {
  ScopedEnv env;
  env.set("RLX_PROFILE", std::nullopt);
  Session s;
  auto exe = compile(s, small_graph(), ProfileMode::Collect);
  TensorMap in = inputs_for(*exe);
  exe->run(in);
  exe->run(in);
  std::unique_ptr<Executable> copy = exe->clone();
  EXPECT_TRUE(copy->profile().empty());
  copy->run(in);
  EXPECT_EQ(copy->profile().runs, 1);
  EXPECT_EQ(exe->profile().runs, 2);
}

TEST(CpuProfile, TableListsOpsOverheadAndTop20Nodes) {
  ScopedEnv env;
  env.set("RLX_PROFILE", std::nullopt);
  Session s;
  auto exe = compile(s, matmul_chain(25), ProfileMode::Collect);
  ASSERT_EQ(exe->kernels().nodes.size(), 25u);
  TensorMap in = inputs_for(*exe);
  for (int r = 0; r < 3; ++r) exe->run(in);
  std::string text = exe->profile().to_string();
  EXPECT_NE(text.find("rlx profile: 3 runs"), std::string::npos) << text;
  EXPECT_NE(text.find("matmul"), std::string::npos) << text;
  EXPECT_NE(text.find("(outside kernels)"), std::string::npos) << text;
  EXPECT_NE(text.find("top 20 nodes:"), std::string::npos) << text;
  // The op line: 25 steps x 3 runs.
  EXPECT_NE(text.find(" 75 "), std::string::npos) << text;
  // 20 node lines after the node table's header, each with 3 calls.
  size_t at = text.find("top 20 nodes:");
  at = text.find('\n', text.find('\n', at) + 1) + 1;
  int lines = 0;
  for (size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    std::string line = text.substr(at, nl - at);
    EXPECT_NE(line.find("matmul"), std::string::npos) << line;
    ++lines;
  }
  EXPECT_EQ(lines, 20) << text;
}

TEST(CpuProfile, EnvironmentVariable) {
  ScopedEnv env;
  env.set("RLX_PROFILE", std::nullopt);
  EXPECT_EQ(profile_from_env(), std::nullopt);
  env.set("RLX_PROFILE", "");
  EXPECT_EQ(profile_from_env(), std::nullopt);
  env.set("RLX_PROFILE", "0");
  EXPECT_EQ(profile_from_env(), ProfileMode::Off);
  env.set("RLX_PROFILE", "1");
  EXPECT_EQ(profile_from_env(), ProfileMode::Report);

  Session s;
  {
    env.set("RLX_PROFILE", "1");
    auto exe = compile(s, small_graph(), std::nullopt);
    exe->run(inputs_for(*exe));
    EXPECT_EQ(exe->profile().runs, 1);
    s.clear_cache();  // the session's reference goes; ours is the last
    ::testing::internal::CaptureStderr();
    exe.reset();  // Report: the table goes to stderr here
    std::string printed = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(printed.find("rlx profile of graph 'profiled' (cpu)"), std::string::npos) << printed;
    EXPECT_NE(printed.find("(outside kernels)"), std::string::npos) << printed;
  }
  {
    env.set("RLX_PROFILE", "0");
    auto exe = compile(s, small_graph(), std::nullopt);
    exe->run(inputs_for(*exe));
    EXPECT_TRUE(exe->profile().empty());
    s.clear_cache();
    ::testing::internal::CaptureStderr();
    exe.reset();
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  }
  for (const char* bad : {"yes", "2", "true", " 1"}) {
    env.set("RLX_PROFILE", bad);
    try {
      compile(s, small_graph(), std::nullopt);
      ADD_FAILURE() << "no error for RLX_PROFILE='" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "RLX_PROFILE must be 0 or 1, found '" + std::string(bad) + "'");
    }
    // The option wins over the variable (it is then not read).
    s.clear_cache();
    auto exe = compile(s, small_graph(), ProfileMode::Collect);
    exe->run(inputs_for(*exe));
    EXPECT_EQ(exe->profile().runs, 1);
  }
  // Collect never prints.
  env.set("RLX_PROFILE", std::nullopt);
  {
    Session quiet;
    auto exe = compile(quiet, small_graph(), ProfileMode::Collect);
    exe->run(inputs_for(*exe));
    quiet.clear_cache();
    ::testing::internal::CaptureStderr();
    exe.reset();
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  }
}

}  // namespace
}  // namespace rlx
