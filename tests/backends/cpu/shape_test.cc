// CPU backend: the shape family's native kernels (data movement and iota) against the
// reference evaluator, for every dtype, through the executor and called directly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../../../src/backends/cpu/kernel.h"
#include "common/test_util.h"
#include "common/thread_count_guard.h"
#include "rlx/runtime/session.h"
#include "rlx/runtime/threading.h"

namespace rlx {
namespace {

using testing::random_tensor;
using Ints = std::vector<int64_t>;

const std::vector<DType> kAll = {DType::f32, DType::f16, DType::bf16, DType::f64,  DType::i8,
                                 DType::u8,  DType::i32, DType::i64,  DType::bool_};
const std::vector<DType> kNumeric = {DType::f32, DType::f16, DType::bf16, DType::f64,
                                     DType::i8,  DType::u8,  DType::i32,  DType::i64};
const std::vector<DType> kIndex = {DType::i8, DType::u8, DType::i32, DType::i64};

Session& session() {
  static Session s;
  return s;
}

// Runs the native kernel of g's output node directly, as the executor calls it, on the feeds of
// its operands (all graph inputs). Result memory starts as garbage, so a kernel that skips an
// element is caught. Reshape-like ops and contiguous slices are views in compiled graphs, so
// this is where their copy kernels run.
std::vector<Tensor> run_kernel_directly(const Graph& g, const TensorMap& feeds) {
  const Node& node = g.node(g.outputs()[0]);
  const cpu::KernelEntry* entry = cpu::kernel_table().find(node.op);
  cpu::KernelFactory factory = entry != nullptr ? entry->factory : nullptr;
  EXPECT_NE(factory, nullptr) << op_name(node.op);
  if (factory == nullptr) return {};
  cpu::Kernel kernel = factory(g, node);
  EXPECT_TRUE(static_cast<bool>(kernel)) << op_name(node.op) << " declined " << g.to_string();
  std::vector<const std::byte*> in;
  for (Value v : node.operands) in.push_back(feeds.at(g.node(v).name).data());
  std::vector<Tensor> results;
  std::vector<std::byte*> out;
  bool empty = false;
  for (const TensorType& t : node.results) {
    results.emplace_back(t.dtype, t.shape);
    if (results.back().nbytes() > 0)
      std::memset(results.back().data(), 0xA5, results.back().nbytes());
    out.push_back(results.back().data());
    empty = empty || t.shape.numel() == 0;
  }
  if (kernel && !empty) kernel(cpu::KernelIO{in.data(), out.data()});
  return results;
}

// Checks g (one op over inputs) natively, compiled and called directly, against the reference:
// data movement is bit-exact. Compiled, every computing `op` node must run its native kernel.
void check(const Graph& g, const TensorMap& feeds, const std::string& what) {
  std::vector<Tensor> want = evaluate(g, feeds);
  std::vector<Tensor> direct = run_kernel_directly(g, feeds);
  ASSERT_EQ(direct.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(direct[i].bitwise_equal(want[i])) << "direct " << what << "\n" << g.to_string();

  CompileOptions options;
  options.fold_constants = false;
  auto exe = session().compile(g, options);
  const OpKind op = g.node(g.outputs()[0]).op;
  const Graph& cg = exe->compiled_graph();
  int computing = 0;
  for (const BufferAssignment& b : exe->memory_plan().buffers)
    computing += cg.node(b.value).op == op && b.value.index == 0 && !b.is_view &&
                 cg.type(b.value).shape.numel() > 0;
  auto [native, reference] = exe->kernels().count(op);
  EXPECT_EQ(reference, 0) << what << "\n" << exe->kernel_report();
  EXPECT_EQ(native, computing) << what << "\n" << exe->kernel_report();
  std::vector<Tensor> got = exe->run(feeds);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(got[i].bitwise_equal(want[i])) << "compiled " << what << "\n" << g.to_string();
}

std::string describe(DType t, const Shape& s) { return std::string(dtype_name(t)) + s.to_string(); }

// A random shape of rank [min_rank, max_rank], sometimes with a 0 dim, at most ~3000 elements.
Shape random_shape(std::mt19937_64& rng, int min_rank = 0, int max_rank = 5) {
  const int64_t pool[] = {1, 2, 3, 4, 5, 7, 8, 13, 17, 33};
  for (;;) {
    int rank = min_rank + static_cast<int>(rng() % static_cast<uint64_t>(max_rank - min_rank + 1));
    Shape s;
    for (int i = 0; i < rank; ++i) s.dims().push_back(rng() % 14 == 0 ? 0 : pool[rng() % 10]);
    int64_t n = 1;
    for (int64_t d : s.dims()) n *= std::max<int64_t>(d, 1);
    if (n <= 3000) return s;
  }
}

Tensor random_of(DType t, const Shape& s, std::mt19937_64& rng) {
  return random_tensor(t, s, rng(), t == DType::u8 ? 0 : -100, 100);
}

int64_t signed_axis(std::mt19937_64& rng, int64_t axis, int rank) {
  return rng() % 2 ? axis : axis - rank;
}

// ---------------------------------------------------------------- transpose

TEST(CpuShapeKernels, TransposeEveryDtypeAndPermutation) {
  std::mt19937_64 rng(1);
  for (DType t : kAll) {
    for (int trial = 0; trial < 30; ++trial) {
      Shape s = random_shape(rng);
      Ints perm(static_cast<size_t>(s.rank()));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      Graph g("transpose");
      g.set_outputs({g.transpose(g.input("x", t, s), perm)});
      check(g, {{"x", random_of(t, s, rng)}},
            describe(t, s) + " perm " + ::testing::PrintToString(perm));
    }
  }
}

// Shapes that exercise the tiled path with partial tiles, the memcpy path (last dim kept) and
// general permutations with an outer loop.
TEST(CpuShapeKernels, TransposeTilesAndRuns) {
  struct Case {
    Shape shape;
    Ints perm;
  };
  const Case cases[] = {{{67, 129}, {1, 0}},          {{3, 65, 33}, {0, 2, 1}},
                        {{2, 3, 4, 5}, {3, 1, 2, 0}}, {{130, 2, 70}, {2, 1, 0}},
                        {{5, 6, 7}, {1, 0, 2}},       {{2, 1, 40, 1, 3}, {4, 3, 2, 1, 0}},
                        {{17, 1000}, {1, 0}},         {{9, 8, 7, 6, 5}, {1, 3, 0, 4, 2}}};
  std::mt19937_64 rng(2);
  for (DType t : {DType::f32, DType::f16, DType::u8, DType::f64})
    for (const Case& c : cases) {
      Graph g("transpose");
      g.set_outputs({g.transpose(g.input("x", t, c.shape), c.perm)});
      check(g, {{"x", random_of(t, c.shape, rng)}}, describe(t, c.shape));
    }
}

// ---------------------------------------------------------------- broadcast_in_dim, expand

TEST(CpuShapeKernels, BroadcastInDimEveryDtype) {
  std::mt19937_64 rng(3);
  for (DType t : kAll) {
    for (int trial = 0; trial < 30; ++trial) {
      Shape out = random_shape(rng);
      // x takes a random subset of the result dims, in any order, each full or 1.
      Ints bd;
      for (int d = 0; d < out.rank(); ++d)
        if (rng() % 3) bd.push_back(d);
      std::shuffle(bd.begin(), bd.end(), rng);
      Shape xs;
      for (int64_t d : bd) xs.dims().push_back(rng() % 3 == 0 ? 1 : out[static_cast<int>(d)]);
      Graph g("broadcast");
      g.set_outputs({g.broadcast_in_dim(g.input("x", t, xs), out.dims(), bd)});
      check(g, {{"x", random_of(t, xs, rng)}},
            describe(t, xs) + " -> " + out.to_string() + " bd " + ::testing::PrintToString(bd));
    }
  }
}

// Each element repeated a few times along a new inner dim (nearest upsampling: [.., W] ->
// [.., W, k]), which runs as a tile with input stride 0: every dtype size, k below and above
// one vector, rows not a multiple of the vector.
TEST(CpuShapeKernels, BroadcastRepeatingEachElement) {
  std::mt19937_64 rng(9);
  for (DType t : kAll)
    for (int64_t k : {2, 3, 8, 17})
      for (int64_t w : {7, 32}) {
        Shape xs{2, 3, 5, w};
        Graph g("repeat");
        g.set_outputs({g.broadcast_in_dim(g.input("x", t, xs), {2, 3, 5, 2, w, k}, {0, 1, 2, 4})});
        check(g, {{"x", random_of(t, xs, rng)}},
              describe(t, xs) + " repeated " + std::to_string(k) + " times");
      }
}

TEST(CpuShapeKernels, ExpandEveryDtype) {
  std::mt19937_64 rng(4);
  for (DType t : kAll) {
    for (int trial = 0; trial < 30; ++trial) {
      Shape out = random_shape(rng);
      const int x_rank = static_cast<int>(rng() % static_cast<uint64_t>(out.rank() + 1));
      Shape xs;
      for (int d = out.rank() - x_rank; d < out.rank(); ++d)
        xs.dims().push_back(rng() % 3 == 0 ? 1 : out[d]);
      Graph g("expand");
      g.set_outputs({g.expand(g.input("x", t, xs), out.dims())});
      check(g, {{"x", random_of(t, xs, rng)}}, describe(t, xs) + " -> " + out.to_string());
    }
  }
}

// ---------------------------------------------------------------- slice, reverse

TEST(CpuShapeKernels, SliceEveryDtypeWithStrides) {
  std::mt19937_64 rng(5);
  for (DType t : kAll) {
    for (int trial = 0; trial < 30; ++trial) {
      Shape s = random_shape(rng);
      Ints start, limit, strides;
      for (int64_t d : s.dims()) {
        int64_t a = static_cast<int64_t>(rng() % static_cast<uint64_t>(d + 1));
        int64_t b = static_cast<int64_t>(rng() % static_cast<uint64_t>(d + 1));
        start.push_back(std::min(a, b));
        limit.push_back(std::max(a, b));
        strides.push_back(1 + static_cast<int64_t>(rng() % 3));
      }
      if (rng() % 3 == 0) strides.clear();
      Graph g("slice");
      g.set_outputs({g.slice(g.input("x", t, s), start, limit, strides)});
      check(g, {{"x", random_of(t, s, rng)}},
            describe(t, s) + " start " + ::testing::PrintToString(start) + " limit " +
                ::testing::PrintToString(limit) + " strides " + ::testing::PrintToString(strides));
    }
  }
}

TEST(CpuShapeKernels, ReverseEveryDtype) {
  std::mt19937_64 rng(6);
  for (DType t : kAll) {
    for (int trial = 0; trial < 30; ++trial) {
      Shape s = random_shape(rng);
      Ints axes;
      for (int d = 0; d < s.rank(); ++d)
        if (rng() % 2) axes.push_back(signed_axis(rng, d, s.rank()));
      Graph g("reverse");
      g.set_outputs({g.reverse(g.input("x", t, s), axes)});
      check(g, {{"x", random_of(t, s, rng)}},
            describe(t, s) + " axes " + ::testing::PrintToString(axes));
    }
  }
}

// ---------------------------------------------------------------- concatenate, pad

TEST(CpuShapeKernels, ConcatenateEveryDtype) {
  std::mt19937_64 rng(7);
  for (DType t : kAll) {
    for (int trial = 0; trial < 30; ++trial) {
      Shape s = random_shape(rng, 1, 4);
      const int dim = static_cast<int>(rng() % static_cast<uint64_t>(s.rank()));
      const int count = 1 + static_cast<int>(rng() % 4);
      Graph g("concat");
      std::vector<Value> xs;
      TensorMap feeds;
      for (int i = 0; i < count; ++i) {
        Shape si = s;
        si[dim] = static_cast<int64_t>(rng() % 6);  // 0 included: empty operands
        std::string name = "x" + std::to_string(i);
        xs.push_back(g.input(name, t, si));
        feeds[name] = random_of(t, si, rng);
      }
      g.set_outputs({g.concatenate(xs, signed_axis(rng, dim, s.rank()))});
      check(g, feeds, describe(t, s) + " dim " + std::to_string(dim));
    }
  }
}

TEST(CpuShapeKernels, PadNegativeAndInterior) {
  std::mt19937_64 rng(8);
  for (DType t : kAll) {
    for (int trial = 0; trial < 30;) {
      Shape s = random_shape(rng, 0, 4);
      Ints low, high, interior;
      const bool no_interior = rng() % 3 == 0;
      bool ok = true;
      for (int64_t d : s.dims()) {
        low.push_back(static_cast<int64_t>(rng() % 7) - 3);
        high.push_back(static_cast<int64_t>(rng() % 7) - 3);
        interior.push_back(no_interior ? 0 : static_cast<int64_t>(rng() % 3));
        ok =
            ok && low.back() + high.back() + d + std::max<int64_t>(d - 1, 0) * interior.back() >= 0;
      }
      if (!ok) continue;
      ++trial;
      Graph g("pad");
      Value x = g.input("x", t, s);
      g.set_outputs({g.pad(x, g.input("v", t, Shape{}), low, high, interior)});
      check(g, {{"x", random_of(t, s, rng)}, {"v", random_of(t, Shape{}, rng)}},
            describe(t, s) + " low " + ::testing::PrintToString(low) + " high " +
                ::testing::PrintToString(high) + " interior " + ::testing::PrintToString(interior));
    }
  }
}

// ---------------------------------------------------------------- gather, take_along_axis

// Indices in [-3, n + 3): out-of-range ones clamp (u8 indices cannot be negative).
Tensor random_indices(DType t, const Shape& s, int64_t n, std::mt19937_64& rng) {
  return random_tensor(t, s, rng(), t == DType::u8 ? 0 : -3, static_cast<double>(n + 3));
}

TEST(CpuShapeKernels, GatherEveryDtypeAndIndexType) {
  std::mt19937_64 rng(9);
  for (DType t : kAll) {
    for (DType it : kIndex) {
      for (int trial = 0; trial < 12; ++trial) {
        Shape s = random_shape(rng, 1, 4);
        const int axis = static_cast<int>(rng() % static_cast<uint64_t>(s.rank()));
        Shape is = random_shape(rng, 0, 2);
        if (s[axis] == 0) s[axis] = 2;  // indices into an empty axis are a build-time error
        Graph g("gather");
        g.set_outputs(
            {g.gather(g.input("x", t, s), g.input("i", it, is), signed_axis(rng, axis, s.rank()))});
        check(g, {{"x", random_of(t, s, rng)}, {"i", random_indices(it, is, s[axis], rng)}},
              describe(t, s) + " indices " + describe(it, is) + " axis " + std::to_string(axis));
      }
    }
  }
}

TEST(CpuShapeKernels, GatherEmbeddingRows) {
  std::mt19937_64 rng(10);
  Shape table{1000, 384};
  Graph g("embedding");
  g.set_outputs(
      {g.gather(g.input("x", DType::f32, table), g.input("i", DType::i32, Shape{4, 16}), 0)});
  check(g,
        {{"x", random_of(DType::f32, table, rng)},
         {"i", random_indices(DType::i32, Shape{4, 16}, 1000, rng)}},
        "embedding");
}

TEST(CpuShapeKernels, TakeAlongAxisBroadcastsAndClamps) {
  std::mt19937_64 rng(11);
  for (DType t : kAll) {
    for (DType it : kIndex) {
      for (int trial = 0; trial < 12; ++trial) {
        Shape s = random_shape(rng, 1, 4);
        const int axis = static_cast<int>(rng() % static_cast<uint64_t>(s.rank()));
        if (s[axis] == 0) s[axis] = 3;
        Shape is = s;
        for (int d = 0; d < s.rank(); ++d) {
          if (d == axis) {
            is[d] = static_cast<int64_t>(rng() % 5);
          } else if (rng() % 3 == 0) {
            is[d] = 1;  // broadcast indices
          } else if (rng() % 4 == 0 && s[d] != 0) {
            s[d] = 1;  // broadcast x
            is[d] = 1 + static_cast<int64_t>(rng() % 4);
          }
        }
        Graph g("take");
        g.set_outputs({g.take_along_axis(g.input("x", t, s), g.input("i", it, is),
                                         signed_axis(rng, axis, s.rank()))});
        check(g, {{"x", random_of(t, s, rng)}, {"i", random_indices(it, is, s[axis], rng)}},
              describe(t, s) + " indices " + describe(it, is) + " axis " + std::to_string(axis));
      }
    }
  }
}

// ---------------------------------------------------------------- scatter_add

// Duplicated and out-of-range indices; floats accumulate in double like the reference and
// round once, so the results are bit-identical.
TEST(CpuShapeKernels, ScatterAddDuplicatesAndDroppedIndices) {
  std::mt19937_64 rng(12);
  for (DType t : kNumeric) {
    for (DType it : kIndex) {
      for (int trial = 0; trial < 10; ++trial) {
        Shape s = random_shape(rng, 1, 3);
        const int axis = static_cast<int>(rng() % static_cast<uint64_t>(s.rank()));
        Shape is = random_shape(rng, 0, 2);
        Shape us;
        for (int d = 0; d < axis; ++d) us.dims().push_back(s[d]);
        for (int64_t d : is.dims()) us.dims().push_back(d);
        for (int d = axis + 1; d < s.rank(); ++d) us.dims().push_back(s[d]);
        Graph g("scatter");
        g.set_outputs({g.scatter_add(g.input("x", t, s), g.input("i", it, is), g.input("u", t, us),
                                     signed_axis(rng, axis, s.rank()))});
        // Few distinct targets: duplicates are the common case.
        Tensor idx = random_tensor(it, is, rng(), it == DType::u8 ? 0 : -2,
                                   static_cast<double>(std::min<int64_t>(s[axis], 3) + 2));
        check(g, {{"x", random_of(t, s, rng)}, {"i", idx}, {"u", random_of(t, us, rng)}},
              describe(t, s) + " indices " + describe(it, is) + " axis " + std::to_string(axis));
      }
    }
  }
}

// ---------------------------------------------------------------- dynamic slices

// Random blocks of random shapes with starts in [-3, dim + 3) (clamped by the op), every dtype
// and index dtype, as a standalone op (x is an input, so dynamic_update_slice copies x first).
TEST(CpuShapeKernels, DynamicSliceAndUpdateEveryDtypeAndIndexType) {
  std::mt19937_64 rng(21);
  for (DType t : kAll) {
    for (DType it : kIndex) {
      for (int trial = 0; trial < 6; ++trial) {
        Shape s = random_shape(rng, 0, 4);
        Ints block;
        for (int64_t d : s.dims()) block.push_back(static_cast<int64_t>(rng() % (d + 1)));
        TensorMap feeds{{"x", random_of(t, s, rng)}, {"u", random_of(t, Shape(block), rng)}};
        Graph ds("dynamic_slice"), dus("dynamic_update_slice");
        std::vector<Value> ds_starts, dus_starts;
        for (int k = 0; k < s.rank(); ++k) {
          std::string name = "s" + std::to_string(k);
          feeds[name] = random_indices(it, {}, s[k], rng);
          ds_starts.push_back(ds.input(name, it, {}));
          dus_starts.push_back(dus.input(name, it, {}));
        }
        ds.set_outputs({ds.dynamic_slice(ds.input("x", t, s), ds_starts, block)});
        dus.set_outputs({dus.dynamic_update_slice(dus.input("x", t, s),
                                                  dus.input("u", t, Shape(block)), dus_starts)});
        std::string what = describe(t, s) + " block " + Shape(block).to_string() + " starts " +
                           std::string(dtype_name(it));
        TensorMap ds_feeds = feeds;
        ds_feeds.erase("u");
        check(ds, ds_feeds, what);
        check(dus, feeds, what);
      }
    }
  }
}

// The KV-cache pattern: the cache is computed in the graph and dies at the write, so the plan
// puts the result in the cache's storage and the kernel writes only the row.
TEST(CpuShapeKernels, DynamicUpdateSliceInPlace) {
  for (DType t : {DType::f32, DType::bf16, DType::i8}) {
    Graph g("kv_write");
    Value cache = g.reverse(g.input("x", t, {64, 40}), {0});
    Value row = g.input("row", t, {3, 40});
    Value out = g.dynamic_update_slice(cache, row,
                                       {g.input("pos", DType::i32, {}), g.scalar(0, DType::i32)});
    g.set_outputs({out});
    auto exe = session().compile(g);
    const Graph& cg = exe->compiled_graph();
    const MemoryPlan& plan = exe->memory_plan();
    int64_t dus_offset = -1, cache_offset = -2;
    for (const BufferAssignment& b : plan.buffers) {
      if (cg.node(b.value).op == OpKind::DynamicUpdateSlice) dus_offset = b.offset;
      if (cg.node(b.value).op == OpKind::Reverse) cache_offset = b.offset;
    }
    EXPECT_EQ(dus_offset, cache_offset) << plan.to_string();
    for (int32_t pos : {-5, 0, 17, 61, 62, 1000}) {
      TensorMap feeds{{"x", random_tensor(t, {64, 40}, 30 + pos)},
                      {"row", random_tensor(t, {3, 40}, 31)},
                      {"pos", Tensor::from_ints(DType::i32, {}, std::vector<int64_t>{pos})}};
      std::vector<Tensor> want = evaluate(g, feeds);
      std::vector<Tensor> got = exe->run(feeds);
      EXPECT_TRUE(got[0].bitwise_equal(want[0])) << dtype_name(t) << " pos " << pos;
    }
  }
}

// Sizes large enough for every kernel to split its work over the pool (4 threads here, whatever
// the machine): the results must not change.
TEST(CpuShapeKernels, ParallelSplitsAgreeWithReference) {
  testing::ThreadCountGuard guard;
  set_num_threads(4);
  std::mt19937_64 rng(15);
  const DType t = DType::f32;
  Shape s{300, 500};
  Tensor x = random_of(t, s, rng);
  {
    Graph g("transpose");
    g.set_outputs({g.transpose(g.input("x", t, s), {1, 0})});
    check(g, {{"x", x}}, "transpose");
  }
  {
    Graph g("broadcast");
    g.set_outputs({g.broadcast_in_dim(g.input("x", t, Shape{500}), {300, 500}, {1})});
    check(g, {{"x", random_of(t, Shape{500}, rng)}}, "broadcast");
  }
  {
    Graph g("slice");
    g.set_outputs({g.slice(g.input("x", t, s), {1, 3}, {299, 500}, {1, 2})});
    check(g, {{"x", x}}, "slice");
  }
  {
    Graph g("reshape");
    g.set_outputs({g.reshape(g.input("x", t, Shape{600, 500}), {500, 600})});
    check(g, {{"x", random_of(t, Shape{600, 500}, rng)}}, "reshape");
  }
  {
    Graph g("reverse");
    g.set_outputs({g.reverse(g.input("x", t, s), {0, 1})});
    check(g, {{"x", x}}, "reverse");
  }
  {
    Graph g("concat");
    g.set_outputs({g.concatenate({g.input("x", t, s), g.input("y", t, s)}, 1)});
    check(g, {{"x", x}, {"y", x}}, "concatenate");
  }
  {
    Graph g("pad");
    g.set_outputs({g.pad(g.input("x", t, s), g.input("v", t, Shape{}), {2, -3}, {-1, 4}, {1, 0})});
    check(g, {{"x", x}, {"v", random_of(t, Shape{}, rng)}}, "pad");
  }
  {
    Graph g("gather");
    g.set_outputs({g.gather(g.input("x", t, s), g.input("i", DType::i64, Shape{2000}), 0)});
    check(g, {{"x", x}, {"i", random_indices(DType::i64, Shape{2000}, 300, rng)}}, "gather");
  }
  {
    Graph g("take");
    g.set_outputs({g.take_along_axis(g.input("x", t, s), g.input("i", DType::i32, s), 1)});
    check(g, {{"x", x}, {"i", random_indices(DType::i32, s, 500, rng)}}, "take_along_axis");
  }
  {
    Graph g("scatter");
    g.set_outputs({g.scatter_add(g.input("x", t, s), g.input("i", DType::i32, Shape{2000}),
                                 g.input("u", t, Shape{2000, 500}), 0)});
    check(g,
          {{"x", x},
           {"i", random_indices(DType::i32, Shape{2000}, 300, rng)},
           {"u", random_of(t, Shape{2000, 500}, rng)}},
          "scatter_add");
  }
  {
    Graph g("iota");
    g.set_outputs({g.iota(DType::i32, s, 1)});
    check(g, {}, "iota");
  }
}

// Clones share kernels; scatter_add's per-call scratch (index groups) must be per thread.
TEST(CpuShapeKernels, ScatterAddClonesRunConcurrently) {
  Graph g("clones");
  g.set_outputs(
      {g.scatter_add(g.input("x", DType::f32, Shape{50, 8}), g.input("i", DType::i32, Shape{300}),
                     g.input("u", DType::f32, Shape{300, 8}), 0)});
  std::mt19937_64 rng(13);
  TensorMap feeds{{"x", random_of(DType::f32, Shape{50, 8}, rng)},
                  {"i", random_indices(DType::i32, Shape{300}, 50, rng)},
                  {"u", random_of(DType::f32, Shape{300, 8}, rng)}};
  Tensor want = evaluate(g, feeds)[0];
  auto exe = session().compile(g);
  std::vector<int> ok(4, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i, clone = std::shared_ptr<Executable>(exe->clone())] {
      bool all = true;
      for (int r = 0; r < 50; ++r) all = all && clone->run(feeds)[0].bitwise_equal(want);
      ok[static_cast<size_t>(i)] = all;
    });
  for (std::thread& th : threads) th.join();
  for (int v : ok) EXPECT_TRUE(v);
}

// ---------------------------------------------------------------- iota, reshape-like copies

// Values beyond 2048 round in f16 and beyond 256 in bf16; i8 / u8 wrap past 127 / 255.
TEST(CpuShapeKernels, IotaEveryNumericDtype) {
  for (DType t : kNumeric) {
    for (const auto& [shape, dim] : std::vector<std::pair<Shape, int64_t>>{{{5}, 0},
                                                                           {{3, 4, 5}, 1},
                                                                           {{2, 3, 7}, 2},
                                                                           {{3000, 2}, 0},
                                                                           {{2, 300}, 1},
                                                                           {{1, 1}, 0}}) {
      Graph g("iota");
      g.set_outputs({g.iota(t, shape, dim)});
      check(g, {}, describe(t, shape) + " dim " + std::to_string(dim));
    }
  }
}

TEST(CpuShapeKernels, ReshapeSqueezeExpandDimsCopy) {
  std::mt19937_64 rng(14);
  for (DType t : kAll) {
    Tensor x = random_of(t, Shape{3, 1, 4, 1}, rng);
    for (int op = 0; op < 3; ++op) {
      Graph g("flat");
      Value xv = g.input("x", t, x.shape());
      Value y = op == 0   ? g.reshape(xv, {2, -1})
                : op == 1 ? g.squeeze(xv, {1, -1})
                          : g.expand_dims(xv, {0, 5});
      g.set_outputs({y});
      check(g, {{"x", x}}, describe(t, x.shape()) + " op " + std::to_string(op));
    }
  }
}

}  // namespace
}  // namespace rlx
