// Memory planning: exact layouts of small graphs, views, in-place chains, the validator on bad
// plans, execution through the planned arena, and the arena of a BERT-style encoder.
#include "rlx/opt/memory_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../common/test_util.h"
#include "arena_runner.h"
#include "random_graph.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/decompose.h"

namespace rlx {
namespace {

using testing::error_of;
using testing::random_tensor;
using testing::run_in_arena;

const BufferAssignment& buffer(const MemoryPlan& plan, Value v) {
  for (const BufferAssignment& b : plan.buffers)
    if (b.value == v) return b;
  throw Error("no buffer for node " + std::to_string(v.node));
}

BufferAssignment& buffer(MemoryPlan& plan, Value v) {
  return const_cast<BufferAssignment&>(buffer(std::as_const(plan), v));
}

// True when some violation contains `what`.
::testing::AssertionResult has_violation(const std::vector<std::string>& errors,
                                         const std::string& what) {
  for (const std::string& e : errors)
    if (e.find(what) != std::string::npos) return ::testing::AssertionSuccess();
  std::string all;
  for (const std::string& e : errors) all += "\n  " + e;
  return ::testing::AssertionFailure() << "no violation containing '" << what << "' in:" << all;
}

void expect_runs_like_evaluator(const Graph& g, const MemoryPlan& plan, const TensorMap& feeds) {
  std::vector<Tensor> want = evaluate(g, feeds);
  std::vector<Tensor> got = run_in_arena(g, plan, feeds);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_TRUE(got[k].bitwise_equal(want[k]))
        << "output " << k << ": " << got[k].to_string() << " vs " << want[k].to_string();
}

// x -> a -> b -> c with cumsum (not elementwise, so nothing is in place): a and c never live
// together, so two 64-byte slots serve three buffers.
TEST(MemoryPlan, ChainUsesTwoSlots) {
  Graph g("chain");
  Value x = g.input("x", DType::f32, {4, 4});
  Value a = g.cumsum(x, 0), b = g.cumsum(a, 0), c = g.cumsum(b, 0);
  g.set_outputs({c});
  MemoryPlan plan = plan_memory(g);
  EXPECT_TRUE(validate_plan(g, plan).empty());
  ASSERT_EQ(plan.buffers.size(), 3u);  // the input has none
  EXPECT_EQ(buffer(plan, a).offset, 0);
  EXPECT_EQ(buffer(plan, b).offset, 64);
  EXPECT_EQ(buffer(plan, c).offset, 0);
  EXPECT_EQ(buffer(plan, a).first_use, 1);
  EXPECT_EQ(buffer(plan, a).last_use, 2);
  EXPECT_EQ(buffer(plan, b).last_use, 3);
  EXPECT_EQ(buffer(plan, c).last_use, 4);  // an output: one past the last node
  EXPECT_EQ(plan.arena_bytes, 128);
  EXPECT_EQ(plan.naive_bytes, 192);
}

// x -> cumsum -> neg -> exp: neg and exp are elementwise and their operand dies at them, so
// each writes over its operand and the chain takes one slot.
TEST(MemoryPlan, InPlaceElementwiseChainUsesOneSlot) {
  Graph g("inplace");
  Value x = g.input("x", DType::f32, {4, 4});
  Value a = g.cumsum(x, 0), b = g.neg(a), c = g.exp(b);
  g.set_outputs({c});
  MemoryPlan plan = plan_memory(g);
  EXPECT_TRUE(validate_plan(g, plan).empty()) << plan.to_string();
  for (Value v : {a, b, c}) {
    EXPECT_EQ(buffer(plan, v).offset, 0);
    EXPECT_FALSE(buffer(plan, v).is_view);
  }
  EXPECT_EQ(plan.arena_bytes, 64);
  EXPECT_EQ(plan.naive_bytes, 192);
  expect_runs_like_evaluator(g, plan, {{"x", random_tensor(DType::f32, {4, 4}, 1)}});
}

// The input is not in the arena, so neg(x) is not in place over it.
TEST(MemoryPlan, NoInPlaceOverInputs) {
  Graph g("input");
  Value x = g.input("x", DType::f32, {4, 4});
  Value a = g.neg(x);
  g.set_outputs({a});
  MemoryPlan plan = plan_memory(g);
  ASSERT_EQ(plan.buffers.size(), 1u);
  EXPECT_EQ(plan.arena_bytes, 64);
}

TEST(MemoryPlan, NoInPlaceOverOperandThatLivesOn) {
  Graph g("lives_on");
  Value x = g.input("x", DType::f32, {4, 4});
  Value a = g.cumsum(x, 0);
  Value b = g.neg(a);     // a is read again below: b needs its own slot
  Value c = g.add(a, b);  // both die here: c takes the first, a's slot
  g.set_outputs({c});
  MemoryPlan plan = plan_memory(g);
  EXPECT_TRUE(validate_plan(g, plan).empty()) << plan.to_string();
  EXPECT_NE(buffer(plan, b).offset, buffer(plan, a).offset);
  EXPECT_EQ(buffer(plan, c).offset, buffer(plan, a).offset);
  EXPECT_EQ(plan.arena_bytes, 128);
  expect_runs_like_evaluator(g, plan, {{"x", random_tensor(DType::f32, {4, 4}, 2)}});
}

// gt(a f32[1,4], y f32[4,4]) -> bool[4,4]: 16 bytes like a, but a is broadcast (read at other
// positions than the one written), so the result must not overwrite it.
TEST(MemoryPlan, NoInPlaceOverBroadcastOperand) {
  Graph g("broadcast");
  Value x = g.input("x", DType::f32, {1, 4});
  Value y = g.input("y", DType::f32, {4, 4});
  Value a = g.cumsum(x, 1);
  Value c = g.gt(a, y);
  g.set_outputs({c});
  MemoryPlan plan = plan_memory(g);
  EXPECT_EQ(buffer(plan, a).bytes, buffer(plan, c).bytes);
  EXPECT_NE(buffer(plan, a).offset, buffer(plan, c).offset);
  EXPECT_TRUE(validate_plan(g, plan).empty());
  // The validator rejects the in-place layout the planner refused.
  buffer(plan, c).offset = buffer(plan, a).offset;
  EXPECT_TRUE(has_violation(validate_plan(g, plan), "overlaps"));
}

// Two results of one elementwise node never take the same dying storage.
// A KV-cache write: dynamic_update_slice's result takes over the storage of its x when x dies
// at it (the kernel then writes only the update); not when x lives on, is an input, or when
// the update reads the same storage.
TEST(MemoryPlan, DynamicUpdateSliceInPlaceOverDyingCache) {
  Graph g("kv");
  Value x = g.input("x", DType::f32, {8, 16});
  Value row = g.input("row", DType::f32, {1, 16});
  Value pos = g.input("pos", DType::i32, {});
  Value zero = g.scalar(0, DType::i32);
  Value cache = g.cumsum(x, 0);
  Value out = g.dynamic_update_slice(cache, row, {pos, zero});
  g.set_outputs({out});
  MemoryPlan plan = plan_memory(g);
  EXPECT_TRUE(validate_plan(g, plan).empty()) << plan.to_string();
  EXPECT_EQ(buffer(plan, out).offset, buffer(plan, cache).offset);
  EXPECT_EQ(plan.arena_bytes, 512);
  for (int32_t p : {-3, 0, 5, 7, 100}) {
    SCOPED_TRACE(p);
    expect_runs_like_evaluator(
        g, plan,
        {{"x", random_tensor(DType::f32, {8, 16}, 3)},
         {"row", random_tensor(DType::f32, {1, 16}, 4)},
         {"pos", Tensor::from_ints(DType::i32, {}, std::vector<int64_t>{p})}});
  }
}

TEST(MemoryPlan, DynamicUpdateSliceNotInPlaceWhenTheCacheIsReadLater) {
  Graph g("kv_read_later");
  Value x = g.input("x", DType::f32, {8, 16});
  Value row = g.input("row", DType::f32, {1, 16});
  Value zero = g.scalar(0, DType::i32);
  Value cache = g.cumsum(x, 0);
  Value out = g.dynamic_update_slice(cache, row, {zero, zero});
  g.set_outputs({g.add(out, cache)});
  MemoryPlan plan = plan_memory(g);
  EXPECT_TRUE(validate_plan(g, plan).empty()) << plan.to_string();
  EXPECT_NE(buffer(plan, out).offset, buffer(plan, cache).offset);
  // The validator rejects the in-place layout the planner refused.
  buffer(plan, out).offset = buffer(plan, cache).offset;
  EXPECT_TRUE(has_violation(validate_plan(g, plan), "overlaps"));
}

TEST(MemoryPlan, DynamicUpdateSliceNotInPlaceOverInputsOrItsOwnUpdate) {
  Graph g("kv_input");
  Value x = g.input("x", DType::f32, {8, 16});
  Value zero = g.scalar(0, DType::i32);
  Value one = g.scalar(1, DType::i32);
  Value a = g.dynamic_update_slice(x, g.input("row", DType::f32, {1, 16}), {one, zero});
  // The update is a view of the cache (its first row): writing over the cache while copying
  // from it is refused.
  Value cache = g.cumsum(a, 0);
  Value b = g.dynamic_update_slice(cache, g.slice(cache, {0, 0}, {1, 16}), {one, zero});
  g.set_outputs({b});
  MemoryPlan plan = plan_memory(g);
  EXPECT_TRUE(validate_plan(g, plan).empty()) << plan.to_string();
  EXPECT_FALSE(buffer(plan, a).is_view);
  EXPECT_NE(buffer(plan, b).offset, buffer(plan, cache).offset);
  expect_runs_like_evaluator(g, plan,
                             {{"x", random_tensor(DType::f32, {8, 16}, 5)},
                              {"row", random_tensor(DType::f32, {1, 16}, 6)}});
}

TEST(MemoryPlan, RegionResultsTakeDistinctStorage) {
  Graph body("body");
  Value p = body.input("p", DType::f32, {8});
  body.set_outputs({body.neg(p), body.exp(p)});
  Graph g("region");
  Value x = g.input("x", DType::f32, {8});
  Value a = g.cumsum(x, 0);
  std::vector<Value> outs = g.elementwise_region({a}, body);
  g.set_outputs(outs);
  MemoryPlan plan = plan_memory(g);
  EXPECT_TRUE(validate_plan(g, plan).empty()) << plan.to_string();
  EXPECT_EQ(buffer(plan, outs[0]).offset, buffer(plan, a).offset);
  EXPECT_NE(buffer(plan, outs[1]).offset, buffer(plan, a).offset);
  expect_runs_like_evaluator(g, plan, {{"x", random_tensor(DType::f32, {8}, 3)}});
}

TEST(MemoryPlan, ViewsAliasTheirSource) {
  Graph g("views");
  Value x = g.input("x", DType::f32, {4, 6});
  Value a = g.cumsum(x, 0);                         // node 1, 96 bytes
  Value r = g.reshape(a, {24});                     // view at a
  Value s = g.slice(a, {1, 0}, {3, 6});             // rows 1..2: a + 1 * 24 bytes
  Value t = g.slice(a, {0, 1}, {4, 3});             // columns: not contiguous, a copy
  Value e = g.squeeze(g.expand_dims(a, {0}), {0});  // views of views
  Value c = g.emit1(OpKind::Convert, {a}, {{"dtype", DType::f32}});  // same dtype: a no-op
  Value h = g.convert(a, DType::i32);                                // real conversion
  Value rs = g.reshape(s, {12});                                     // view of a slice view
  g.set_outputs({r, t, e, c, h, rs});
  MemoryPlan plan = plan_memory(g);
  EXPECT_TRUE(validate_plan(g, plan).empty()) << plan.to_string();
  const BufferAssignment& ab = buffer(plan, a);
  EXPECT_FALSE(ab.is_view);
  EXPECT_EQ(ab.last_use, static_cast<int64_t>(g.nodes().size()));  // kept alive by its views
  for (Value v : {r, e, c}) {
    EXPECT_TRUE(buffer(plan, v).is_view);
    EXPECT_EQ(buffer(plan, v).alias_of, a);
    EXPECT_EQ(buffer(plan, v).offset, ab.offset);
  }
  EXPECT_TRUE(buffer(plan, s).is_view);
  EXPECT_EQ(buffer(plan, s).offset, ab.offset + 24);
  EXPECT_EQ(buffer(plan, rs).alias_of, a);
  EXPECT_EQ(buffer(plan, rs).offset, ab.offset + 24);
  EXPECT_FALSE(buffer(plan, t).is_view);
  EXPECT_FALSE(buffer(plan, h).is_view);
  // Views take no memory: only a, t and h count.
  EXPECT_EQ(plan.naive_bytes, 128 + 64 + 128);
  expect_runs_like_evaluator(g, plan, {{"x", random_tensor(DType::f32, {4, 6}, 4)}});
}

TEST(MemoryPlan, SliceViewRules) {
  struct Case {
    std::vector<int64_t> start, limit, strides;
    int64_t offset;  // bytes from a, or -1: not a view
  };
  // a is f32[4,5,6] (row strides 120, 24, 4 bytes).
  const Case cases[] = {
      {{2, 1, 0}, {3, 3, 6}, {}, 2 * 120 + 24},      // one block, rows 1..2 of it
      {{1, 2, 1}, {2, 3, 4}, {}, 120 + 2 * 24 + 4},  // one row, a run of it
      {{0, 0, 0}, {4, 5, 6}, {}, 0},                 // the whole tensor
      {{1, 0, 0}, {4, 5, 6}, {2, 1, 1}, -1},         // stride 2 over blocks
      {{3, 0, 0}, {4, 5, 6}, {2, 1, 1}, 360},        // stride 2 but one block left
      {{0, 0, 0}, {2, 5, 5}, {}, -1},                // last dim cut, two rows
      {{0, 1, 0}, {4, 2, 6}, {}, -1},                // one row of every block
      {{2, 2, 6}, {2, 4, 6}, {}, 0},                 // empty
  };
  for (const Case& c : cases) {
    Graph g("slice");
    Value x = g.input("x", DType::f32, {4, 5, 6});
    Value a = g.cumsum(x, 2);
    Value s = g.slice(a, c.start, c.limit, c.strides);
    g.set_outputs({g.neg(s)});
    SCOPED_TRACE(g.to_string());
    MemoryPlan plan = plan_memory(g);
    EXPECT_TRUE(validate_plan(g, plan).empty()) << plan.to_string();
    EXPECT_EQ(buffer(plan, s).is_view, c.offset >= 0);
    if (c.offset >= 0) {
      EXPECT_EQ(buffer(plan, s).offset, buffer(plan, a).offset + c.offset);
    }
    expect_runs_like_evaluator(g, plan, {{"x", random_tensor(DType::f32, {4, 5, 6}, 5)}});
  }
}

// A view of an input lives in the caller's buffer: offset counts from the input's data and it
// takes no arena memory.
TEST(MemoryPlan, ViewOfInputIsOutsideTheArena) {
  Graph g("input_view");
  Value x = g.input("x", DType::f16, {3, 8});
  Value r = g.reshape(x, {24});
  Value s = g.slice(x, {2, 0}, {3, 8});
  g.set_outputs({g.neg(s), r});
  MemoryPlan plan = plan_memory(g);
  EXPECT_TRUE(validate_plan(g, plan).empty()) << plan.to_string();
  EXPECT_TRUE(buffer(plan, r).is_view);
  EXPECT_EQ(buffer(plan, r).alias_of, x);
  EXPECT_EQ(buffer(plan, r).offset, 0);
  EXPECT_EQ(buffer(plan, s).offset, 2 * 8 * 2);
  EXPECT_EQ(plan.arena_bytes, 64);  // only neg(s)
  expect_runs_like_evaluator(g, plan, {{"x", random_tensor(DType::f16, {3, 8}, 6)}});
}

// An output that nothing else reads is still live to the end, so later buffers avoid it.
TEST(MemoryPlan, OutputsLiveToTheEnd) {
  Graph g("outputs");
  Value x = g.input("x", DType::f32, {4, 4});
  Value a = g.cumsum(x, 0);
  Value b = g.cumsum(x, 1), c = g.cumsum(b, 0), d = g.cumsum(c, 1);
  g.set_outputs({a, d});
  MemoryPlan plan = plan_memory(g);
  EXPECT_TRUE(validate_plan(g, plan).empty());
  EXPECT_EQ(buffer(plan, a).last_use, 5);
  for (Value v : {b, c, d}) EXPECT_NE(buffer(plan, v).offset, buffer(plan, a).offset);
  EXPECT_EQ(plan.arena_bytes, 3 * 64);
  // Without a as an output it dies at once and d reuses its slot.
  g.set_outputs({d});
  MemoryPlan short_lived = plan_memory(g);
  EXPECT_EQ(buffer(short_lived, a).last_use, 1);
  EXPECT_EQ(short_lived.arena_bytes, 2 * 64);
}

TEST(MemoryPlan, AlignmentOfOddSizes) {
  Graph g("odd");
  Value x = g.input("x", DType::u8, {3});
  Value a = g.cumsum(x, 0), b = g.cumsum(a, 0), c = g.cumsum(b, 0);
  g.set_outputs({a, b, c});
  MemoryPlan plan = plan_memory(g);
  EXPECT_TRUE(validate_plan(g, plan).empty());
  EXPECT_EQ(buffer(plan, a).bytes, 3);
  std::vector<int64_t> offsets{buffer(plan, a).offset, buffer(plan, b).offset,
                               buffer(plan, c).offset};
  std::sort(offsets.begin(), offsets.end());
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 64, 128}));
  EXPECT_EQ(plan.arena_bytes, 192);
  MemoryPlan wide = plan_memory(g, 256);
  EXPECT_TRUE(validate_plan(g, wide).empty());
  for (const BufferAssignment& buf : wide.buffers) EXPECT_EQ(buf.offset % 256, 0);
  EXPECT_EQ(wide.arena_bytes, 768);
  EXPECT_EQ(error_of([&] { plan_memory(g, 32); }),
            "plan_memory: alignment must be a power of two >= 64, got 32");
  EXPECT_NE(error_of([&] { plan_memory(g, 96); }), "");
}

TEST(MemoryPlan, SizeZeroTensors) {
  Graph g("empty");
  Value x = g.input("x", DType::f32, {0, 4});
  Value a = g.cumsum(x, 0);
  Value b = g.neg(a);
  Value r = g.reshape(b, {4, 0});
  g.set_outputs({r});
  MemoryPlan plan = plan_memory(g);
  EXPECT_TRUE(validate_plan(g, plan).empty()) << plan.to_string();
  for (const BufferAssignment& buf : plan.buffers) EXPECT_EQ(buf.bytes, 0);
  EXPECT_EQ(plan.arena_bytes, 0);
  EXPECT_EQ(plan.naive_bytes, 0);
  expect_runs_like_evaluator(g, plan, {{"x", Tensor(DType::f32, {0, 4})}});
}

// Legal shapes whose byte sizes reach the int64 limit: planned exactly while they fit, a clear
// rlx::Error (never a wrapped negative size or arena) once a value or the arena does not.
TEST(MemoryPlan, HugeSizesPlanExactlyOrFailClearly) {
  Graph big("big");
  Value x = big.input("x", DType::f32, {int64_t{1} << 20, int64_t{1} << 20});
  Value a = big.neg(x);
  big.set_outputs({big.neg(a), a});
  MemoryPlan plan = plan_memory(big);
  EXPECT_TRUE(validate_plan(big, plan).empty());
  EXPECT_EQ(plan.arena_bytes, int64_t{1} << 43);
  EXPECT_EQ(plan.naive_bytes, int64_t{1} << 43);

  Graph value("value");  // 2^62 elements of 8 bytes
  value.set_outputs({value.neg(value.input("x", DType::f64, {int64_t{1} << 62}))});
  EXPECT_EQ(error_of([&] { plan_memory(value); }),
            "plan_memory: a value of type f64[4611686018427387904] needs more than 2^63 - 1 "
            "bytes");

  Graph arena("arena");  // two live values of 2^62 bytes each
  Value y = arena.input("y", DType::f32, {int64_t{1} << 60});
  Value b = arena.neg(y);
  arena.set_outputs({b, arena.neg(b)});
  EXPECT_EQ(error_of([&] { plan_memory(arena); }),
            "plan_memory: the arena would need more than 2^63 - 1 bytes");

  Graph unaligned("unaligned");  // fits, but rounding up to the alignment does not
  Value z = unaligned.input("z", DType::u8, {std::numeric_limits<int64_t>::max()});
  unaligned.set_outputs({unaligned.neg(z)});
  EXPECT_EQ(error_of([&] { plan_memory(unaligned); }),
            "plan_memory: the arena would need more than 2^63 - 1 bytes");
}

// A graph that is only leaves and views of them needs no arena.
TEST(MemoryPlan, NoArenaForLeavesOnly) {
  Graph g("leaves");
  Value x = g.input("x", DType::f32, {2, 3});
  Value k = g.constant(Tensor::full(DType::f32, {6}, 1.0));
  g.set_outputs({g.reshape(x, {6}), k});
  MemoryPlan plan = plan_memory(g);
  EXPECT_TRUE(validate_plan(g, plan).empty());
  EXPECT_EQ(plan.arena_bytes, 0);
  ASSERT_EQ(plan.buffers.size(), 1u);
  EXPECT_TRUE(plan.buffers[0].is_view);
}

TEST(MemoryPlan, ToString) {
  Graph g("text");
  Value x = g.input("x", DType::f32, {4, 4});
  Value a = g.cumsum(x, 0);
  g.set_outputs({g.reshape(a, {16})});
  EXPECT_EQ(plan_memory(g).to_string(),
            "memory plan: arena 64 bytes, naive 64 bytes, alignment 64\n"
            "  n1#0 offset 0 bytes 64 live [1, 3]\n"
            "  n2#0 offset 0 bytes 64 live [2, 3] view of n1#0\n");
}

// ---- the validator on hand-made plans

// a = cumsum(x), b = cumsum(a), c = cumsum(b), output c (as ChainUsesTwoSlots).
struct Chain {
  Graph g{"chain"};
  Value x, a, b, c;
  Chain() {
    x = g.input("x", DType::f32, {4, 4});
    a = g.cumsum(x, 0);
    b = g.cumsum(a, 0);
    c = g.cumsum(b, 0);
    g.set_outputs({c});
  }
  MemoryPlan plan(int64_t off_a, int64_t off_b, int64_t off_c, int64_t arena) const {
    MemoryPlan p;
    p.alignment = 64;
    p.arena_bytes = arena;
    p.buffers = {{a, off_a, 64, 1, 2, false, {}},
                 {b, off_b, 64, 2, 3, false, {}},
                 {c, off_c, 64, 3, 4, false, {}}};
    return p;
  }
};

TEST(ValidatePlan, AcceptsAHandMadeGoodPlan) {
  Chain ch;
  EXPECT_TRUE(validate_plan(ch.g, ch.plan(0, 64, 0, 128)).empty());
  EXPECT_TRUE(validate_plan(ch.g, ch.plan(128, 0, 64, 192)).empty());  // not tight, but valid
}

TEST(ValidatePlan, FindsOverlaps) {
  Chain ch;
  std::vector<std::string> errors = validate_plan(ch.g, ch.plan(0, 0, 64, 128));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "%0 [0, 64) live [1, 2] overlaps %1 [0, 64) live [2, 3]");
  // A partial overlap counts too (b at 64 is aligned but c at 64 + 0 overlaps it).
  EXPECT_TRUE(has_violation(validate_plan(ch.g, ch.plan(0, 64, 64, 128)), "overlaps"));
  // a and c are never live together: sharing bytes is fine.
  EXPECT_TRUE(validate_plan(ch.g, ch.plan(0, 64, 0, 128)).empty());
}

TEST(ValidatePlan, FindsMisplacedBuffers) {
  Chain ch;
  EXPECT_TRUE(has_violation(validate_plan(ch.g, ch.plan(0, 32, 0, 128)),
                            "%1 at offset 32 is not aligned to 64"));
  EXPECT_TRUE(has_violation(validate_plan(ch.g, ch.plan(0, 64, 0, 100)),
                            "%1 at [64, 128) is outside the arena of 100 bytes"));
  MemoryPlan p = ch.plan(0, 64, 0, 128);
  p.alignment = 16;
  EXPECT_TRUE(has_violation(validate_plan(ch.g, p), "alignment 16 is not a power of two >= 64"));
}

TEST(ValidatePlan, FindsMissingAndWrongBuffers) {
  Chain ch;
  MemoryPlan p = ch.plan(0, 64, 0, 128);
  p.buffers.pop_back();
  EXPECT_EQ(validate_plan(ch.g, p), std::vector<std::string>{"%2 has no buffer"});
  p = ch.plan(0, 64, 0, 128);
  p.buffers.push_back({ch.x, 128, 64, 0, 1, false, {}});
  EXPECT_TRUE(has_violation(validate_plan(ch.g, p),
                            "%x is an input/param/constant and must not have a buffer"));
  p = ch.plan(0, 64, 0, 128);
  p.buffers.push_back(p.buffers[0]);
  EXPECT_TRUE(has_violation(validate_plan(ch.g, p), "%0 has two buffers (0 and 3)"));
  p = ch.plan(0, 64, 0, 128);
  p.buffers[1].bytes = 32;
  EXPECT_TRUE(has_violation(validate_plan(ch.g, p), "%1 has 32 bytes, its type needs 64"));
  p = ch.plan(0, 64, 0, 128);
  p.buffers[1].last_use = 2;  // claims b dies before c reads it
  EXPECT_TRUE(
      has_violation(validate_plan(ch.g, p), "%1 is live [2, 3] but its buffer only [2, 2]"));
  p = ch.plan(0, 64, 0, 128);
  p.buffers.push_back({Value{9, 0}, 0, 4, 0, 0, false, {}});
  EXPECT_TRUE(has_violation(validate_plan(ch.g, p),
                            "buffer 3 is for value n9#0, which is not in the graph"));
}

TEST(ValidatePlan, FindsBadViews) {
  Graph g("views");
  Value x = g.input("x", DType::f32, {4, 4});
  Value a = g.cumsum(x, 0);
  Value s = g.slice(a, {1, 0}, {2, 4});
  Value t = g.transpose(a, {1, 0});
  g.set_outputs({s, t});
  MemoryPlan good = plan_memory(g);
  ASSERT_TRUE(validate_plan(g, good).empty()) << good.to_string();
  MemoryPlan p = good;
  buffer(p, s).offset = buffer(p, a).offset;
  EXPECT_TRUE(has_violation(
      validate_plan(g, p),
      "%1 at offset " + std::to_string(buffer(p, a).offset) + " must be at %0's offset"));
  p = good;
  buffer(p, s).is_view = false;
  EXPECT_TRUE(has_violation(validate_plan(g, p), "%1 is a view but its buffer is not marked"));
  p = good;
  buffer(p, t).is_view = true;
  buffer(p, t).alias_of = a;
  EXPECT_TRUE(has_violation(validate_plan(g, p), "%2 is not a view but its buffer is marked"));
  p = good;
  buffer(p, s).alias_of = x;
  EXPECT_TRUE(has_violation(validate_plan(g, p), "%1 is a view of %0 but its buffer aliases %x"));
  // A view keeps its source alive: a plan that ends a at t's node while s is an output is wrong.
  p = good;
  buffer(p, a).last_use = 3;
  EXPECT_TRUE(has_violation(validate_plan(g, p), "%0 is live [1, 4] but its buffer only [1, 3]"));
}

// ---- execution through the arena and random graphs

TEST(MemoryPlan, RandomGraphsRunThroughTheArena) {
  int64_t arena = 0, naive = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    testing::RandomGraph r = testing::make_random_graph(seed, 16);
    SCOPED_TRACE(r.graph.to_string());
    MemoryPlan plan = plan_memory(r.graph);
    std::vector<std::string> errors = validate_plan(r.graph, plan);
    ASSERT_TRUE(errors.empty()) << errors[0] << "\n" << plan.to_string();
    ASSERT_LE(plan.arena_bytes, plan.naive_bytes);
    expect_runs_like_evaluator(r.graph, plan, r.feeds);
    // The same after decomposition: many more elementwise nodes, so many in-place chances.
    Graph d = decompose(r.graph);
    MemoryPlan dplan = plan_memory(d);
    errors = validate_plan(d, dplan);
    ASSERT_TRUE(errors.empty()) << errors[0] << "\n" << dplan.to_string();
    expect_runs_like_evaluator(d, dplan, r.feeds);
    arena += plan.arena_bytes;
    naive += plan.naive_bytes;
  }
  EXPECT_LT(arena, naive);  // reuse actually happens on these graphs
}

// ---- BERT-style encoder

struct Encoder {
  Graph g{"encoder"};
  TensorMap feeds;
};

// Post-norm BERT encoder layers: QKV projections, 12-head attention, output projection,
// residual + layer_norm, FFN with gelu, residual + layer_norm. x is f32[batch, seq, hidden].
Encoder make_encoder(int64_t layers, int64_t batch, int64_t seq, int64_t hidden, int64_t heads,
                     int64_t ffn, bool with_feeds) {
  Encoder e;
  Graph& g = e.g;
  uint64_t seed = 100;
  auto param = [&](const std::string& name, Shape shape) {
    if (with_feeds) e.feeds[name] = random_tensor(DType::f32, shape, seed++, -0.2, 0.2);
    return g.param(name, DType::f32, shape);
  };
  Value x = g.input("x", DType::f32, {batch, seq, hidden});
  if (with_feeds) e.feeds["x"] = random_tensor(DType::f32, {batch, seq, hidden}, seed++);
  int64_t dh = hidden / heads;
  for (int64_t l = 0; l < layers; ++l) {
    std::string p = "l" + std::to_string(l) + ".";
    auto dense = [&](Value in, const std::string& name, int64_t k, int64_t n) {
      return g.add(g.matmul(in, param(p + name + ".w", {k, n})), param(p + name + ".b", {n}));
    };
    auto split_heads = [&](Value t) {
      return g.transpose(g.reshape(t, {batch, seq, heads, dh}), {0, 2, 1, 3});
    };
    Value q = split_heads(dense(x, "q", hidden, hidden));
    Value k = split_heads(dense(x, "k", hidden, hidden));
    Value v = split_heads(dense(x, "v", hidden, hidden));
    Value ctx = g.attention(q, k, v, {});
    Value merged = g.reshape(g.transpose(ctx, {0, 2, 1, 3}), {batch, seq, hidden});
    Value h = g.layer_norm(g.add(x, dense(merged, "o", hidden, hidden)),
                           param(p + "ln1.scale", {hidden}), param(p + "ln1.bias", {hidden}));
    Value f = dense(g.gelu(dense(h, "ffn1", hidden, ffn)), "ffn2", ffn, hidden);
    x = g.layer_norm(g.add(h, f), param(p + "ln2.scale", {hidden}),
                     param(p + "ln2.bias", {hidden}));
  }
  g.set_outputs({x});
  return e;
}

TEST(MemoryPlan, SmallEncoderRunsThroughTheArena) {
  Encoder e = make_encoder(2, 2, 8, 32, 4, 64, true);
  for (const Graph& g : {e.g, decompose(e.g)}) {
    MemoryPlan plan = plan_memory(g);
    std::vector<std::string> errors = validate_plan(g, plan);
    ASSERT_TRUE(errors.empty()) << errors[0];
    EXPECT_LT(plan.arena_bytes, plan.naive_bytes);
    expect_runs_like_evaluator(g, plan, e.feeds);
  }
}

// The numbers asked for by the compile-pipeline issue: arena vs naive for a 6-layer encoder
// (hidden 384, 12 heads, FFN 1536, seq 128), as built and after decomposing the composites.
TEST(MemoryPlan, BertEncoderArena) {
  for (int64_t batch : {1, 32}) {
    Encoder e = make_encoder(6, batch, 128, 384, 12, 1536, false);
    for (bool decomposed : {false, true}) {
      Graph g = decomposed ? decompose(e.g) : e.g;
      MemoryPlan plan = plan_memory(g);
      std::vector<std::string> errors = validate_plan(g, plan);
      ASSERT_TRUE(errors.empty()) << errors[0];
      EXPECT_LE(plan.arena_bytes, plan.naive_bytes);
      // The widest tensor is the FFN activation [batch, 128, 1536] f32; at least it and the
      // layer input must fit, and reuse must bring the arena far below the naive sum.
      int64_t ffn_bytes = batch * 128 * 1536 * 4;
      EXPECT_GE(plan.arena_bytes, ffn_bytes);
      EXPECT_LT(plan.arena_bytes * 5, plan.naive_bytes);
      std::printf(
          "bert-6L batch %2lld %-10s nodes %5zu  arena %11lld bytes (%8.2f MiB)  naive "
          "%11lld bytes (%8.2f MiB)  ratio %.1fx\n",
          static_cast<long long>(batch), decomposed ? "decomposed" : "composite", g.nodes().size(),
          static_cast<long long>(plan.arena_bytes),
          static_cast<double>(plan.arena_bytes) / (1 << 20),
          static_cast<long long>(plan.naive_bytes),
          static_cast<double>(plan.naive_bytes) / (1 << 20),
          static_cast<double>(plan.naive_bytes) / static_cast<double>(plan.arena_bytes));
    }
  }
}

}  // namespace
}  // namespace rlx
