// Executable state (CompileOptions::state) on the CPU backend: the shared cases of
// common/state_cases.h, the memory plan of a KV-cache write (in place in the state's storage,
// so a run copies no cache), the plan validator on state, and the compile cache key.
#include <gtest/gtest.h>

#include "common/state_cases.h"
#include "rlx/opt/memory_plan.h"
#include "rlx/runtime/schedule.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

using testing::error_of;

std::unique_ptr<Executable> cpu_compile(const Graph& g, const CompileOptions& o) {
  return backend_for(DeviceKind::Cpu)->compile(g, o, Device::cpu());
}

TEST(StateTest, RunningSum) { testing::check_running_sum(cpu_compile); }
TEST(StateTest, CacheWrite) { testing::check_cache_write(cpu_compile); }
TEST(StateTest, Errors) { testing::check_state_errors(cpu_compile); }

// The buffer of the node named `name` in `exe`'s plan.
const BufferAssignment& buffer_of(const Executable& exe, const std::string& name) {
  int32_t id = exe.compiled_graph().find(name);
  EXPECT_GE(id, 0) << name;
  for (const BufferAssignment& b : exe.memory_plan().buffers)
    if (b.value.node == id) return b;
  throw Error("no buffer for " + name);
}

// The dynamic_update_slice of a KV-cache step is planned in the state's own storage: its
// kernel writes only the new row there, and the write-back after the run finds the output
// already in place (no copy of the cache). When the old cache is also read after the update,
// the update cannot be in place, and the plan says so.
TEST(StateTest, CacheUpdateIsPlannedInPlace) {
  const int64_t ctx = 4096;
  std::unique_ptr<Executable> exe =
      cpu_compile(testing::cache_write_graph(ctx), testing::cache_write_options());
  const MemoryPlan& plan = exe->memory_plan();
  ASSERT_EQ(plan.state_inputs.size(), 1u);
  EXPECT_EQ(exe->compiled_graph().node(plan.state_inputs[0]).name, "cache");
  const BufferAssignment& next = buffer_of(*exe, "next");
  EXPECT_EQ(next.state, 0) << plan.to_string();
  EXPECT_EQ(next.offset, 0);
  EXPECT_FALSE(next.is_view);
  // Nothing of the cache is in the arena: it holds only the reduction's result.
  EXPECT_LT(plan.arena_bytes, 1024 * 64) << plan.to_string();
  EXPECT_TRUE(validate_plan(exe->compiled_graph(), plan).empty());

  // The old cache read after the update: the update is a copy in the arena.
  Graph g("cache_read_after");
  Value cache = g.input("cache", DType::f32, Shape{1, 2, ctx, 4});
  Value row = g.input("row", DType::f32, Shape{1, 2, 1, 4});
  Value zero = g.scalar(0.0, DType::i32);
  Value upd =
      testing::named(g, g.dynamic_update_slice(cache, row, {zero, zero, zero, zero}), "next");
  g.set_outputs({upd, g.reduce_sum(g.sub(upd, cache), {0, 1, 2, 3})});
  std::unique_ptr<Executable> copied = cpu_compile(g, testing::cache_write_options());
  EXPECT_EQ(buffer_of(*copied, "next").state, -1);
  EXPECT_GE(copied->memory_plan().arena_bytes, 2 * ctx * 4 * 4);
  Tensor r = Tensor::full(DType::f32, Shape{1, 2, 1, 4}, 2.0);
  copied->set_state("cache", Tensor::full(DType::f32, Shape{1, 2, ctx, 4}, 1.0));
  EXPECT_EQ(copied->run({{"row", r}})[0].get_f64(0), 8.0);  // (2 - 1) * 8 elements
  EXPECT_EQ(copied->get_state("cache").get_f64(0), 2.0);
  EXPECT_EQ(copied->get_state("cache").get_f64(8), 1.0);
}

// validate_plan checks state buffers: a tampered plan that moves the in-place update out of
// the state's storage, or past its end, is reported.
TEST(StateTest, ValidatorChecksStateStorage) {
  Graph g = testing::cache_write_graph(16);
  std::vector<int32_t> state{g.find("cache")};
  MemoryPlan plan = plan_memory(g, 64, state);
  std::vector<std::string> problems = validate_plan(g, plan);
  ASSERT_TRUE(problems.empty()) << plan.to_string() << (problems.empty() ? "" : problems[0]);
  MemoryPlan bad = plan;
  for (BufferAssignment& b : bad.buffers)
    if (b.value.node == g.find("cache")) b.state = -1;
  std::vector<std::string> errors = validate_plan(g, bad);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].find("%cache is in the storage of state 0 but its buffer says state -1"),
            std::string::npos)
      << errors[0];
  // The update moved into the arena: it overlaps the reduction's result there.
  bad = plan;
  for (BufferAssignment& b : bad.buffers)
    if (b.value.node == g.find("next")) b.state = -1;
  errors = validate_plan(g, bad);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors.back().find("overlaps"), std::string::npos) << errors.back();
  bad = plan;
  for (BufferAssignment& b : bad.buffers)
    if (b.value.node == g.find("next")) b.offset = 64;
  errors = validate_plan(g, bad);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].find("is outside the storage of state 0 of 512 bytes"), std::string::npos)
      << errors[0];
  EXPECT_EQ(error_of([&] {
              plan_memory(g, 64, {g.find("pos"), g.find("pos")});
            }),
            "plan_memory: input %pos is listed twice as state");
  EXPECT_EQ(error_of([&] { plan_memory(g, 64, {g.find("next")}); }),
            "plan_memory: state 0 (node " + std::to_string(g.find("next")) +
                ") is not an input node of the graph");
}

// State bindings are part of the compile cache key: the same graph with and without state is
// two executables.
TEST(StateTest, SessionCachesByState) {
  Session session;
  Graph g = testing::running_sum_graph();
  std::shared_ptr<Executable> a = session.compile(g, testing::running_sum_options());
  std::shared_ptr<Executable> b = session.compile(g);
  std::shared_ptr<Executable> c = session.compile(g, testing::running_sum_options());
  EXPECT_NE(a.get(), b.get());
  EXPECT_EQ(a.get(), c.get());
  EXPECT_EQ(a->state().size(), 1u);
  EXPECT_TRUE(b->state().empty());
}

}  // namespace
}  // namespace rlx
