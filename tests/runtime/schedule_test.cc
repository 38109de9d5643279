// The device-neutral schedule (make_schedule): steps, locations of leaves, arena buffers and
// views, skipped nodes, index mapping through the executable's specs, errors; and that the CPU
// backend runs exactly its steps.
#include "rlx/runtime/schedule.h"

#include <gtest/gtest.h>

#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "rlx/runtime/backend_core.h"
#include "rlx/runtime/session.h"

namespace rlx {

// Readable failures: gtest finds these by argument-dependent lookup.
void PrintTo(const Location& l, std::ostream* os) { *os << l.to_string(); }

namespace {

using testing::error_of;
using Kind = Location::Kind;

// The offset the plan gives value `v`.
const BufferAssignment& buffer_of(const MemoryPlan& plan, Value v) {
  for (const BufferAssignment& b : plan.buffers)
    if (b.value == v) return b;
  throw Error("no buffer");
}

Schedule schedule_of(const Graph& g, const MemoryPlan& plan) {
  IoSpecs specs = io_specs_of(g);
  return make_schedule(g, plan, specs.inputs, specs.params);
}

TEST(Schedule, LeavesArenaAndOutputs) {
  Graph g("s");
  Value x = g.input("x", DType::f32, Shape{2, 3});
  Value w = g.param("w", DType::f32, Shape{2, 3});
  Value c = g.constant(testing::random_tensor(DType::f32, Shape{2, 3}, 1), "c");
  Value t = g.tanh(x);
  Value m = g.mul(t, w);
  Value y = g.add(m, c);
  g.set_outputs({y, t});
  MemoryPlan plan = plan_memory(g);
  Schedule s = schedule_of(g, plan);

  EXPECT_EQ(s.arena_bytes, plan.arena_bytes);
  EXPECT_EQ(s.constants, std::vector<int32_t>{c.node});
  EXPECT_TRUE(s.empty.empty());
  ASSERT_EQ(s.steps.size(), 3u);
  EXPECT_EQ(s.steps[0].node, t.node);
  EXPECT_EQ(s.steps[1].node, m.node);
  EXPECT_EQ(s.steps[2].node, y.node);
  auto arena = [&](Value v) { return Location{Kind::Arena, 0, buffer_of(plan, v).offset}; };
  EXPECT_EQ(s.steps[0].operands, std::vector<Location>{(Location{Kind::Input, 0, 0})});
  EXPECT_EQ(s.steps[0].results, std::vector<Location>{arena(t)});
  EXPECT_EQ(s.steps[1].operands, (std::vector<Location>{arena(t), {Kind::Param, 0, 0}}));
  EXPECT_EQ(s.steps[1].results, std::vector<Location>{arena(m)});
  EXPECT_EQ(s.steps[2].operands, (std::vector<Location>{arena(m), {Kind::Constant, 0, 0}}));
  EXPECT_EQ(s.outputs, (std::vector<Location>{arena(y), arena(t)}));
  for (const ScheduleStep& step : s.steps)
    for (const Location& l : step.results) EXPECT_EQ(l.kind, Kind::Arena);
  EXPECT_EQ(s.to_string(g),
            "schedule: 3 steps, arena " + std::to_string(plan.arena_bytes) +
                " bytes\n"
                "  %" +
                g.node(t.node).name + " = tanh (node 3): [input0] -> [arena+" +
                std::to_string(arena(t).offset) + "]\n" + "  %" + g.node(m.node).name +
                " = mul (node 4): [arena+" + std::to_string(arena(t).offset) +
                ", param0] -> [arena+" + std::to_string(arena(m).offset) + "]\n" + "  %" +
                g.node(y.node).name + " = add (node 5): [arena+" + std::to_string(arena(m).offset) +
                ", constant0] -> [arena+" + std::to_string(arena(y).offset) + "]\n" +
                "  outputs [arena+" + std::to_string(arena(y).offset) + ", arena+" +
                std::to_string(arena(t).offset) + "]\n");
}

TEST(Schedule, ViewsHaveNoStepAndPointIntoTheirSource) {
  Graph g("v");
  Value x = g.input("x", DType::f32, Shape{4, 3});
  Value p = g.param("p", DType::f32, Shape{4, 3});
  Value xr = g.reshape(x, {3, 4});        // a view of an input
  Value ps = g.slice(p, {2, 0}, {4, 3});  // a contiguous slice of a param: rows 2..3
  Value n = g.neg(xr);                    // computes into the arena
  Value nr = g.reshape(n, {12});          // a view of an arena value
  Value a = g.add(g.reshape(ps, {6}), g.slice(nr, {0}, {6}));
  g.set_outputs({a, nr, xr});
  MemoryPlan plan = plan_memory(g);
  Schedule s = schedule_of(g, plan);

  std::set<int32_t> stepped;
  for (const ScheduleStep& step : s.steps) stepped.insert(step.node);
  EXPECT_EQ(stepped, (std::set<int32_t>{n.node, a.node}));
  ASSERT_EQ(s.steps.size(), 2u);
  const ScheduleStep& neg = s.steps[0];
  EXPECT_EQ(neg.operands, std::vector<Location>{(Location{Kind::Input, 0, 0})});
  const ScheduleStep& add = s.steps[1];
  // reshape(slice(p)) reads the param's data from row 2: 2 * 3 * 4 bytes in.
  EXPECT_EQ(add.operands[0], (Location{Kind::Param, 0, 24}));
  // slice(reshape(neg)) is the arena buffer of neg itself (the first 6 elements).
  EXPECT_EQ(add.operands[1], (Location{Kind::Arena, 0, buffer_of(plan, n).offset}));
  EXPECT_EQ(s.outputs[1], (Location{Kind::Arena, 0, buffer_of(plan, n).offset}));
  EXPECT_EQ(s.outputs[2], (Location{Kind::Input, 0, 0}));
  EXPECT_EQ(s.outputs[0], (Location{Kind::Arena, 0, buffer_of(plan, a).offset}));
}

TEST(Schedule, EmptyNodesAreSkippedIotaAndMultiResultNodesCompute) {
  Graph g("e");
  Value x = g.input("x", DType::f32, Shape{0, 3});
  Value e = g.neg(x);                            // every result empty: nothing to compute
  Value i = g.iota(DType::f32, Shape{2, 5}, 1);  // a leaf in the IR, but computed at run time
  auto [vals, idx] = g.top_k(i, 2);
  g.set_outputs({e, vals, idx});
  MemoryPlan plan = plan_memory(g);
  Schedule s = schedule_of(g, plan);
  EXPECT_EQ(s.empty, std::vector<int32_t>{e.node});
  ASSERT_EQ(s.steps.size(), 2u);
  EXPECT_EQ(s.steps[0].node, i.node);
  EXPECT_TRUE(s.steps[0].operands.empty());
  EXPECT_EQ(s.steps[1].node, vals.node);
  EXPECT_EQ(s.steps[1].results,
            (std::vector<Location>{{Kind::Arena, 0, buffer_of(plan, vals).offset},
                                   {Kind::Arena, 0, buffer_of(plan, idx).offset}}));
  // An empty output still has a location (a zero-byte buffer); nothing reads it.
  EXPECT_EQ(s.outputs[0].kind, Kind::Arena);
}

TEST(Schedule, IndicesFollowTheExecutableSpecs) {
  Graph g("order");
  Value b = g.input("b", DType::f32, Shape{2});
  Value a = g.input("a", DType::f32, Shape{2});
  Value v = g.param("v", DType::f32, Shape{2});
  Value u = g.param("u", DType::f32, Shape{2});
  Value au = g.mul(a, u);
  Value bv = g.mul(b, v);
  g.set_outputs({g.add(au, bv)});
  MemoryPlan plan = plan_memory(g);
  // Specs in another order than the graph's, as after a pipeline that reorders leaves.
  std::vector<IoSpec> inputs{{"a", {DType::f32, Shape{2}}}, {"b", {DType::f32, Shape{2}}}};
  std::vector<IoSpec> params{{"u", {DType::f32, Shape{2}}}, {"v", {DType::f32, Shape{2}}}};
  Schedule s = make_schedule(g, plan, inputs, params);
  ASSERT_EQ(s.steps.size(), 3u);
  EXPECT_EQ(s.steps[0].operands, (std::vector<Location>{{Kind::Input, 0, 0}, {Kind::Param, 0, 0}}));
  EXPECT_EQ(s.steps[1].operands, (std::vector<Location>{{Kind::Input, 1, 0}, {Kind::Param, 1, 0}}));
}

TEST(Schedule, Errors) {
  Graph g("err");
  Value x = g.input("x", DType::f32, Shape{2});
  Value w = g.param("w", DType::f32, Shape{2});
  g.set_outputs({g.add(x, w)});
  MemoryPlan plan = plan_memory(g);
  std::vector<IoSpec> inputs{{"x", {DType::f32, Shape{2}}}};
  std::vector<IoSpec> params{{"w", {DType::f32, Shape{2}}}};
  EXPECT_EQ(error_of([&] { make_schedule(g, plan, {}, params); }),
            "schedule: input 'x' of the compiled graph is not an executable input");
  EXPECT_EQ(error_of([&] { make_schedule(g, plan, inputs, {}); }),
            "schedule: param 'w' of the compiled graph is not an executable param");
  MemoryPlan no_buffers = plan;
  no_buffers.buffers.clear();
  EXPECT_EQ(
      error_of([&] { make_schedule(g, no_buffers, inputs, params); }),
      "schedule: no buffer for %" + g.node(g.outputs()[0].node).name + "#0 in the memory plan");
}

// The CPU backend creates one kernel per step of make_schedule's schedule of its compiled
// graph: its kernel report lists exactly the steps' nodes, in order.
TEST(Schedule, CpuBackendRunsItsSteps) {
  Graph g("cpu");
  Value x = g.input("x", DType::f32, Shape{2, 8});
  Value w = g.param("w", DType::f32, Shape{8, 4});
  Value h = g.reshape(g.matmul(x, w), {4, 2});
  g.set_outputs({g.softmax(g.add(h, g.scalar(1.0, DType::f32)), -1), g.slice(h, {0, 0}, {0, 2})});
  Session session;
  auto exe = session.compile(g);
  Schedule s =
      make_schedule(exe->compiled_graph(), exe->memory_plan(), exe->inputs(), exe->params());
  const KernelReport& k = exe->kernels();
  ASSERT_EQ(k.nodes.size(), s.steps.size());
  for (size_t i = 0; i < s.steps.size(); ++i) EXPECT_EQ(k.nodes[i].node, s.steps[i].node);
  EXPECT_GE(s.steps.size(), 2u);
}

}  // namespace
}  // namespace rlx
