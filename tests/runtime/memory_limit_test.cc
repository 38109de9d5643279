// Memory limits of compiles: RLX_MEMORY_LIMIT / CompileOptions::memory_limit parsing and
// resolution, what planned memory counts, and graphs that would need terabytes rejected at
// compile with the planned sizes instead of being allocated (and killed by the OS).
#include "rlx/runtime/memory_limit.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "common/test_util.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

using testing::EnvGuard;
using testing::error_of;

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(MemoryLimit, ParsesByteCountsWithBinarySuffixes) {
  EXPECT_EQ(parse_memory_size("1", "m"), 1);
  EXPECT_EQ(parse_memory_size("1048576", "m"), kMiB);
  EXPECT_EQ(parse_memory_size("64K", "m"), 64 << 10);
  EXPECT_EQ(parse_memory_size("512M", "m"), 512 * kMiB);
  EXPECT_EQ(parse_memory_size("512m", "m"), 512 * kMiB);
  EXPECT_EQ(parse_memory_size("8G", "m"), int64_t{8} << 30);
  EXPECT_EQ(parse_memory_size("8GiB", "m"), int64_t{8} << 30);
  EXPECT_EQ(parse_memory_size("8gb", "m"), int64_t{8} << 30);
  EXPECT_EQ(parse_memory_size("2T", "m"), int64_t{2} << 40);
  EXPECT_EQ(parse_memory_size("8388607T", "m"), int64_t{8388607} << 40);
  EXPECT_EQ(parse_memory_size("9223372036854775807", "m"), std::numeric_limits<int64_t>::max());
  const std::string malformed =
      "RLX_MEMORY_LIMIT: expected a positive byte count with an optional K, M, G or T suffix "
      "(powers of 1024), e.g. 512M or 8G; found '";
  for (const char* bad :
       {"", "abc", "0", "0M", "-1", "+5", "1.5G", "8 G", "12Q", "8GiBs", "M", "8B", " 8G", "8G "})
    EXPECT_EQ(error_of([&] { parse_memory_size(bad, "RLX_MEMORY_LIMIT"); }), malformed + bad + "'")
        << bad;
  for (const char* big : {"9223372036854775808", "8388608T", "99999999999999999999999"})
    EXPECT_EQ(error_of([&] { parse_memory_size(big, "RLX_MEMORY_LIMIT"); }),
              std::string("RLX_MEMORY_LIMIT: '") + big + "' is more than 2^63 - 1 bytes")
        << big;
}

TEST(MemoryLimit, PhysicalMemoryIsTheDefault) {
  const int64_t phys = physical_memory_bytes();
  EXPECT_GT(phys, 64 * kMiB);
  EXPECT_LT(phys, std::numeric_limits<int64_t>::max());
  PlannedMemory fits;
  fits.arena = phys;
  check_memory_limit("cpu", fits, std::nullopt);  // equal to the limit: fits
  PlannedMemory over;
  over.arena = phys;
  over.outputs = 1;
  std::string msg = error_of([&] { check_memory_limit("cpu", over, std::nullopt); });
  EXPECT_NE(msg.find("(" + std::to_string(phys) +
                     " bytes, physical memory; RLX_MEMORY_LIMIT sets another)"),
            std::string::npos)
      << msg;
}

TEST(MemoryLimit, ResolvedFromTheEnvironmentBySessionOnly) {
  {
    EnvGuard unset("RLX_MEMORY_LIMIT", nullptr);
    EXPECT_FALSE(memory_limit_from_env().has_value());
    EXPECT_FALSE(resolve_environment({}).memory_limit.has_value());
  }
  {
    EnvGuard empty("RLX_MEMORY_LIMIT", "");
    EXPECT_FALSE(resolve_environment({}).memory_limit.has_value());
  }
  EnvGuard set("RLX_MEMORY_LIMIT", "2M");
  EXPECT_EQ(resolve_environment({}).memory_limit, 2 * kMiB);
  CompileOptions mine;
  mine.memory_limit = 5;
  EXPECT_EQ(resolve_environment(mine).memory_limit, 5);  // explicit options win

  // A 4 MiB arena: over RLX_MEMORY_LIMIT under a Session; a direct Backend::compile reads no
  // environment and gets physical memory.
  Graph g("four_mib");
  g.set_outputs({g.exp(g.input("x", DType::f32, Shape{1024, 1024}))});
  std::string msg = error_of([&] { Session().compile(g); });
  EXPECT_EQ(msg.rfind("cpu backend: planned memory 8.0 MiB (arena 4.0 MiB, params 0.0 MiB, "
                      "constants 0.0 MiB, outputs 4.0 MiB; ",
                      0),
            0u)
      << msg;
  EXPECT_NE(msg.find(") exceeds the limit 2.0 MiB (2097152 bytes, RLX_MEMORY_LIMIT / "
                     "CompileOptions::memory_limit)"),
            std::string::npos)
      << msg;
  EXPECT_NO_THROW(backend_for(DeviceKind::Cpu)->compile(g, {}, Device::cpu()));
  CompileOptions roomy;
  roomy.memory_limit = 64 * kMiB;
  std::shared_ptr<Executable> exe = Session().compile(g, roomy);
  EXPECT_EQ(exe->run({{"x", Tensor::full(DType::f32, Shape{1024, 1024}, 0.0)}})[0].get_f64(7), 1.0);
}

TEST(MemoryLimit, MalformedEnvironmentFailsAtSessionCompile) {
  EnvGuard bad("RLX_MEMORY_LIMIT", "lots");
  Graph g("g");
  g.set_outputs({g.neg(g.input("x", DType::f32, Shape{2}))});
  const std::string want =
      "RLX_MEMORY_LIMIT: expected a positive byte count with an optional K, M, G or T suffix "
      "(powers of 1024), e.g. 512M or 8G; found 'lots'";
  EXPECT_EQ(error_of([&] { resolve_environment({}); }), want);
  EXPECT_EQ(error_of([&] { Session().compile(g); }), want);
  CompileOptions given;
  given.memory_limit = kMiB;  // an explicit limit: the variable is not read
  EXPECT_NO_THROW(Session().compile(g, given));
}

TEST(MemoryLimit, CountsArenaParamsConstantsAndOutputs) {
  Graph g("parts");
  Value x = g.input("x", DType::f32, Shape{256, 256});   // 256 KiB, not counted
  Value w = g.param("w", DType::f32, Shape{256, 1024});  // 1 MiB
  Value c = g.constant(testing::random_tensor(DType::f32, Shape{256, 1024}, 1), "c");  // 1 MiB
  g.set_outputs({g.add(g.matmul(x, w), c)});  // 1 MiB output
  std::unique_ptr<Executable> exe = backend_for(DeviceKind::Cpu)->compile(g, {}, Device::cpu());
  PlannedMemory m =
      planned_memory(exe->compiled_graph(), exe->memory_plan(), exe->params(), exe->outputs());
  EXPECT_EQ(m.arena, exe->memory_plan().arena_bytes);
  EXPECT_GE(m.arena, kMiB);
  EXPECT_EQ(m.params, kMiB);
  EXPECT_EQ(m.constants, kMiB);
  EXPECT_EQ(m.outputs, kMiB);
  EXPECT_EQ(m.total(), m.arena + m.params + m.constants + m.outputs);
  // What the executable reports is what the check saw: no control flow, no bodies.
  PlannedMemory reported = exe->planned_memory();
  EXPECT_EQ(reported.bodies, 0);
  EXPECT_EQ(reported.total(), m.total());

  CompileOptions just_over;
  just_over.memory_limit = m.total() - 1;
  std::string msg =
      error_of([&] { backend_for(DeviceKind::Cpu)->compile(g, just_over, Device::cpu()); });
  EXPECT_NE(msg.find("params 1.0 MiB, constants 1.0 MiB, outputs 1.0 MiB; " +
                     std::to_string(m.total()) + " bytes) exceeds the limit"),
            std::string::npos)
      << msg;
  CompileOptions exact;
  exact.memory_limit = m.total();
  EXPECT_NO_THROW(backend_for(DeviceKind::Cpu)->compile(g, exact, Device::cpu()));
}

// Control-flow bodies (the CPU backend's scratch beyond the arena) are part of the total and
// named in the message only when there are some (tests/backends/cpu/control_flow_test.cc
// checks what a scan's bodies plan).
TEST(MemoryLimit, BodiesAddToTheTotal) {
  PlannedMemory m{.arena = kMiB, .bodies = 2 * kMiB, .params = kMiB};
  EXPECT_EQ(m.total(), 4 * kMiB);
  std::string msg = error_of([&] { check_memory_limit("cpu", m, 3 * kMiB); });
  EXPECT_NE(msg.find("cpu backend: planned memory 4.0 MiB (arena 1.0 MiB, bodies 2.0 MiB, params "
                     "1.0 MiB, constants 0.0 MiB, outputs 0.0 MiB; 4194304 bytes) exceeds the "
                     "limit 3.0 MiB"),
            std::string::npos)
      << msg;
  m.bodies = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(m.total(), std::numeric_limits<int64_t>::max());
  m.bodies = 0;
  EXPECT_NO_THROW(check_memory_limit("cpu", m, 2 * kMiB));
  EXPECT_EQ(error_of([&] { check_memory_limit("cpu", m, kMiB); }).find("bodies"),
            std::string::npos);
}

TEST(MemoryLimit, SaturatesInsteadOfOverflowing) {
  Graph g("huge_params");
  const int64_t big = int64_t{1} << 60;
  TensorType t{DType::f64, Shape{big}};  // 2^63 bytes: more than int64 holds
  PlannedMemory m = planned_memory(g, MemoryPlan{}, {{"a", t}, {"b", t}}, {{"o", t}});
  EXPECT_EQ(m.params, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(m.total(), std::numeric_limits<int64_t>::max());
  std::string msg = error_of([&] { check_memory_limit("cpu", m, kMiB); });
  EXPECT_NE(msg.find("; 9223372036854775807+ bytes) exceeds the limit 1.0 MiB"), std::string::npos)
      << msg;
}

// Graphs that would need terabytes. Before the limit existed these compiled and then tried to
// allocate the arena (or the constants) at once; now compile fails with the planned sizes and
// nothing is allocated. Run under the default limit (physical memory), as a user would.
TEST(MemoryLimit, TerabyteGraphsAreRejectedAtCompile) {
  EnvGuard unset("RLX_MEMORY_LIMIT", nullptr);
  const int64_t m = int64_t{1} << 20;
  {
    Graph g("tera_arena");  // exp of f32[2^20, 2^20]: a 4 TiB arena and a 4 TiB output
    g.set_outputs({g.tanh(g.exp(g.input("x", DType::f32, Shape{m, m})))});
    std::string msg = error_of([&] { Session().compile(g); });
    EXPECT_EQ(msg.rfind("cpu backend: planned memory ", 0), 0u) << msg;
    EXPECT_NE(msg.find("params 0.0 MiB, constants 0.0 MiB, outputs 4194304.0 MiB; "),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("physical memory; RLX_MEMORY_LIMIT sets another)"), std::string::npos)
        << msg;
  }
  {
    Graph g("tera_params");  // a 4 TiB weight, a tiny result
    Value w = g.param("w", DType::f32, Shape{m, m});
    g.set_outputs({g.reduce_sum(w, {0, 1})});
    std::string msg = error_of([&] { Session().compile(g); });
    EXPECT_NE(msg.find("params 4194304.0 MiB"), std::string::npos) << msg;
  }
  {
    // From a text file: a few bytes declare 4 TiB; parsing allocates nothing, compile refuses.
    Graph g = Graph::parse(
        "graph @tera_text {\n  %x = input : f32[1048576,1048576]\n  %y = exp %x : "
        "f32[1048576,1048576]\n  return %y\n}\n");
    std::string msg = error_of([&] { Session().compile(g); });
    EXPECT_NE(msg.find("outputs 4194304.0 MiB; "), std::string::npos) << msg;
  }
  {
    Graph g("tera_iota");  // no input at all: iota fills the arena at run time
    g.set_outputs({g.reduce_sum(g.iota(DType::f32, Shape{m, m}, 1), {0, 1})});
    std::string msg = error_of([&] { Session().compile(g); });
    EXPECT_NE(msg.find("planned memory"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace rlx
