// CPU backend: the reduce family's native kernels (reduce_*, argmax/argmin, cumsum, top_k)
// against the reference evaluator, for every dtype each op accepts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/test_util.h"
#include "common/thread_count_guard.h"
#include "rlx/runtime/session.h"
#include "rlx/runtime/threading.h"

namespace rlx {
namespace {

using testing::all_close;
using testing::default_rtol;
using testing::random_tensor;

const std::vector<DType> kNumeric = {DType::f32, DType::f16, DType::bf16, DType::f64,
                                     DType::i8,  DType::u8,  DType::i32,  DType::i64};
const std::vector<DType> kFloats = {DType::f32, DType::f16, DType::bf16, DType::f64};

// Compiles g for the CPU, checks that every `op` node of the compiled graph that computes
// (results with elements) ran a native kernel, none the reference fallback, and returns the
// outputs of running it on `feeds`.
std::vector<Tensor> run_native(const Graph& g, const TensorMap& feeds, OpKind op) {
  static Session session;
  CompileOptions options;
  options.fold_constants = false;
  auto exe = session.compile(g, options);
  int nodes = 0;
  for (const Node& n : exe->compiled_graph().nodes())
    nodes += n.op == op && n.results[0].shape.numel() > 0;
  auto [native, reference] = exe->kernels().count(op);
  EXPECT_EQ(reference, 0) << exe->kernel_report();
  EXPECT_EQ(native, nodes) << exe->kernel_report();
  if (g.type(g.outputs()[0]).shape.numel() > 0) {
    EXPECT_GE(native, 1) << exe->kernel_report();
  }
  return exe->run(feeds);
}

// Elements of a NaN / inf test input: about one in eight special.
Tensor with_specials(Tensor t, uint64_t seed) {
  if (!is_float(t.dtype())) return t;
  std::mt19937_64 rng(seed);
  const double specials[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0};
  for (int64_t i = 0; i < t.numel(); ++i)
    if (rng() % 8 == 0) t.set_f64(i, specials[rng() % 5]);
  return t;
}

// A random shape of rank 0..5, sometimes with a 0 dim, at most ~4000 elements.
Shape random_shape(std::mt19937_64& rng, int min_rank = 0) {
  const int64_t pool[] = {1, 2, 3, 4, 5, 7, 9, 16, 17, 33};
  for (;;) {
    int rank = min_rank + static_cast<int>(rng() % static_cast<uint64_t>(6 - min_rank));
    Shape s;
    for (int i = 0; i < rank; ++i) s.dims().push_back(rng() % 12 == 0 ? 0 : pool[rng() % 10]);
    int64_t n = 1;
    for (int64_t d : s.dims()) n *= std::max<int64_t>(d, 1);
    if (n <= 4000) return s;
  }
}

// A random subset of [0, rank) in random order, each axis given as a or a - rank at random.
std::vector<int64_t> random_axes(std::mt19937_64& rng, int rank) {
  std::vector<int64_t> axes;
  for (int a = 0; a < rank; ++a)
    if (rng() % 2) axes.push_back(rng() % 2 ? a : a - rank);
  std::shuffle(axes.begin(), axes.end(), rng);
  return axes;
}

// Tolerances of a native sum of `count` elements of magnitude < 2 against the reference's
// double sum: f32 partial sums (see reduce.cc) plus rounding of the result to its dtype.
std::pair<double, double> sum_tolerance(DType t, double count) {
  if (!is_float(t)) return {0, 0};
  double atol = 2e-6 * 2 * count;
  return {std::max(default_rtol(t), 1e-5), t == DType::f64 ? 1e-12 * count : atol};
}

using Builder = Value (Graph::*)(Value, std::vector<int64_t>, bool);

struct ReduceCase {
  const char* name;
  OpKind op;
  Builder build;
  bool floats_only;
};

const ReduceCase kReductions[] = {
    {"reduce_sum", OpKind::ReduceSum, &Graph::reduce_sum, false},
    {"reduce_mean", OpKind::ReduceMean, &Graph::reduce_mean, true},
    {"reduce_max", OpKind::ReduceMax, &Graph::reduce_max, false},
    {"reduce_min", OpKind::ReduceMin, &Graph::reduce_min, false},
    {"reduce_prod", OpKind::ReduceProd, &Graph::reduce_prod, false},
};

// Runs one reduction natively and through the reference and compares them.
void check_reduction(const ReduceCase& rc, const Tensor& x, const std::vector<int64_t>& axes,
                     bool keepdims) {
  Graph g("reduce");
  Value xv = g.input("x", x.dtype(), x.shape());
  g.set_outputs({(g.*rc.build)(xv, axes, keepdims)});
  TensorMap feeds{{"x", x}};
  Tensor got = run_native(g, feeds, rc.op)[0];
  Tensor want = evaluate(g, feeds)[0];
  double count = 1;
  for (int64_t a : axes) count *= static_cast<double>(x.shape()[x.shape().normalize_axis(a)]);
  double rtol = 0, atol = 0;
  if (rc.op == OpKind::ReduceSum || rc.op == OpKind::ReduceMean) {
    std::tie(rtol, atol) = sum_tolerance(x.dtype(), count);
    if (rc.op == OpKind::ReduceMean) atol /= std::max(count, 1.0);
  } else if (rc.op == OpKind::ReduceProd) {
    rtol = default_rtol(x.dtype());  // the same double products, rounded once
  }
  EXPECT_TRUE(all_close(got, want, rtol, atol))
      << rc.name << " " << dtype_name(x.dtype()) << x.shape().to_string() << " axes "
      << ::testing::PrintToString(axes) << " keepdims " << keepdims;
}

TEST(CpuReduceKernels, EveryReductionDtypeAndRandomShape) {
  std::mt19937_64 rng(7);
  for (const ReduceCase& rc : kReductions) {
    for (DType t : rc.floats_only ? kFloats : kNumeric) {
      for (int trial = 0; trial < 24; ++trial) {
        Shape s = random_shape(rng);
        // Products of many elements over/underflow; keep them meaningful.
        double lo = rc.op == OpKind::ReduceProd ? 0.5 : -2,
               hi = rc.op == OpKind::ReduceProd ? 1.6 : 2;
        if (!is_float(t) && rc.op != OpKind::ReduceProd) lo = -100, hi = 100;
        if (t == DType::u8) lo = std::max(lo, 0.0);
        Tensor x = random_tensor(t, s, rng(), lo, hi);
        check_reduction(rc, x, random_axes(rng, s.rank()), rng() % 2);
      }
    }
  }
}

TEST(CpuReduceKernels, NanAndInfinityPropagate) {
  std::mt19937_64 rng(11);
  for (const ReduceCase& rc : kReductions) {
    for (DType t : kFloats) {
      for (int trial = 0; trial < 12; ++trial) {
        Shape s = random_shape(rng, 1);
        Tensor x = with_specials(random_tensor(t, s, rng()), rng());
        check_reduction(rc, x, random_axes(rng, s.rank()), rng() % 2);
      }
    }
  }
}

// Each layout path of the kernel: a contiguous row (inner == 1), columns (inner > 1), one
// reduced run between kept dims, non-adjacent reduced dims (the general loop), all dims, none.
TEST(CpuReduceKernels, EveryLayoutPath) {
  struct Layout {
    Shape shape;
    std::vector<int64_t> axes;
  };
  const Layout layouts[] = {
      {{5, 37}, {1}},
      {{37, 5}, {0}},
      {{4, 33, 19}, {1}},
      {{3, 4, 5, 6}, {0, 2}},
      {{3, 4, 5, 6}, {1, 3}},
      {{2, 3, 4, 5, 6}, {0, 2, 4}},
      {{6, 1, 5, 1}, {0, 3}},
      {{7, 9, 11}, {0, 1, 2}},
      {{7, 9, 11}, {}},
      {{1, 1}, {0, 1}},
      {{}, {}},
      {{130, 3}, {-2}},
      {{3, 4, 70}, {-1, 0}},
      {{2, 3, 0, 4}, {2}},
      {{2, 0, 4}, {0, 2}},
  };
  std::mt19937_64 rng(3);
  for (const ReduceCase& rc : kReductions)
    for (DType t : rc.floats_only ? kFloats : kNumeric)
      for (const Layout& l : layouts) {
        double lo = rc.op == OpKind::ReduceProd ? 0.5 : -2,
               hi = rc.op == OpKind::ReduceProd ? 1.6 : 2;
        if (t == DType::u8) lo = 0;
        for (bool keepdims : {false, true})
          check_reduction(rc, random_tensor(t, l.shape, rng(), lo, hi), l.axes, keepdims);
      }
}

TEST(CpuReduceKernels, EmptyExtentsGiveIdentities) {
  for (const ReduceCase& rc : kReductions) {
    for (DType t : rc.floats_only ? kFloats : kNumeric) {
      Graph g("empty");
      Value x = g.input("x", t, Shape{3, 0, 2});
      g.set_outputs({(g.*rc.build)(x, {1}, false)});
      TensorMap feeds{{"x", Tensor(t, Shape{3, 0, 2})}};
      Tensor got = run_native(g, feeds, rc.op)[0];
      Tensor want = evaluate(g, feeds)[0];
      EXPECT_TRUE(got.bitwise_equal(want) || all_close(got, want, 0, 0))
          << rc.name << " " << dtype_name(t);
      if (rc.op == OpKind::ReduceMean) {
        EXPECT_TRUE(std::isnan(got.get_f64(0)));
      }
      if (rc.op == OpKind::ReduceMax && is_float(t)) {
        EXPECT_EQ(got.get_f64(0), -INFINITY);
      }
      if (rc.op == OpKind::ReduceMin && t == DType::i8) {
        EXPECT_EQ(got.get_i64(0), 127);
      }
    }
  }
}

// The stated accuracy: f32 sums of 1e5 (and 3e5, which the kernel splits into parallel chunks)
// elements within rtol 1e-5 of the reference's double sum, along rows and down columns.
TEST(CpuReduceKernels, LongF32SumsStayAccurate) {
  struct Case {
    Shape shape;
    int64_t axis;
  };
  for (const Case& c : {Case{{2, 100000}, 1}, Case{{100000, 3}, 0}, Case{{3, 300000}, 1},
                        Case{{1, 100000, 20}, 1}}) {
    Tensor x = random_tensor(DType::f32, c.shape, 99, 0.0, 1.0);
    for (const ReduceCase& rc : {kReductions[0], kReductions[1]}) {
      Graph g("long");
      Value xv = g.input("x", DType::f32, c.shape);
      g.set_outputs({(g.*rc.build)(xv, {c.axis}, false)});
      Tensor got = run_native(g, {{"x", x}}, rc.op)[0];
      Tensor want = evaluate(g, {{"x", x}})[0];
      EXPECT_TRUE(all_close(got, want, 1e-5, 0)) << rc.name << " " << c.shape.to_string();
    }
  }
  // Mixed signs cancel: compare against the sum of magnitudes instead.
  Tensor x = random_tensor(DType::f32, Shape{100000}, 5);
  Graph g("cancel");
  g.set_outputs({g.reduce_sum(g.input("x", DType::f32, Shape{100000}), {0})});
  double got = run_native(g, {{"x", x}}, OpKind::ReduceSum)[0].get_f64(0);
  double want = evaluate(g, {{"x", x}})[0].get_f64(0), magnitude = 0;
  for (int64_t i = 0; i < x.numel(); ++i) magnitude += std::fabs(x.get_f64(i));
  EXPECT_NEAR(got, want, 1e-6 * magnitude);
}

TEST(CpuReduceKernels, IntegerSumsAndProductsWrap) {
  for (DType t : {DType::i8, DType::u8, DType::i32, DType::i64}) {
    double lo = t == DType::u8 ? 0 : -120, hi = 120;
    if (t == DType::i32 || t == DType::i64) lo = -2e9, hi = 2e9;
    Tensor x = random_tensor(t, Shape{3, 1000}, 17, lo, hi);
    for (const ReduceCase& rc : {kReductions[0], kReductions[4]}) {
      for (int64_t axis : {0, 1}) {
        Graph g("wrap");
        Value xv = g.input("x", t, x.shape());
        g.set_outputs({(g.*rc.build)(xv, {axis}, false)});
        Tensor got = run_native(g, {{"x", x}}, rc.op)[0];
        EXPECT_TRUE(got.bitwise_equal(evaluate(g, {{"x", x}})[0]))
            << rc.name << " " << dtype_name(t);
      }
    }
  }
}

// ---------------------------------------------------------------- argmax / argmin

TEST(CpuReduceKernels, ArgMaxArgMinEveryDtype) {
  std::mt19937_64 rng(23);
  std::vector<DType> dtypes = kNumeric;
  dtypes.push_back(DType::bool_);
  for (bool is_max : {true, false}) {
    for (DType t : dtypes) {
      for (int trial = 0; trial < 30; ++trial) {
        Shape s = random_shape(rng, 1);
        int axis = static_cast<int>(rng() % static_cast<uint64_t>(s.rank()));
        if (s[axis] == 0) s[axis] = 3;  // an empty axis is a build-time error
        // Few distinct values, so ties (first index wins) are common.
        Tensor x = random_tensor(t, s, rng(), t == DType::u8 ? 0 : -3, 3);
        if (is_float(t)) {
          for (int64_t i = 0; i < x.numel(); ++i) x.set_f64(i, std::floor(x.get_f64(i)));
          if (trial % 2) x = with_specials(x, rng());
        }
        Graph g("arg");
        Value xv = g.input("x", t, s);
        int64_t a = rng() % 2 ? axis : axis - s.rank();
        DType index = rng() % 2 ? DType::i32 : DType::i64;
        bool keepdims = rng() % 2;
        g.set_outputs(
            {is_max ? g.argmax(xv, a, keepdims, index) : g.argmin(xv, a, keepdims, index)});
        Tensor got = run_native(g, {{"x", x}}, is_max ? OpKind::ArgMax : OpKind::ArgMin)[0];
        EXPECT_TRUE(got.bitwise_equal(evaluate(g, {{"x", x}})[0]))
            << (is_max ? "argmax " : "argmin ") << dtype_name(t) << s.to_string() << " axis " << a;
      }
    }
  }
}

TEST(CpuReduceKernels, ArgMaxTakesTheFirstNan) {
  Tensor x = Tensor::from_doubles(DType::f32, Shape{2, 5},
                                  std::vector<double>{1, NAN, 7, NAN, INFINITY,  //
                                                      -INFINITY, 2, 2, 1, -1});
  for (OpKind op : {OpKind::ArgMax, OpKind::ArgMin}) {
    Graph g("nan");
    Value xv = g.input("x", DType::f32, x.shape());
    g.set_outputs({op == OpKind::ArgMax ? g.argmax(xv, 1) : g.argmin(xv, 1)});
    Tensor got = run_native(g, {{"x", x}}, op)[0];
    EXPECT_EQ(got.get_i64(0), 1);
    EXPECT_EQ(got.get_i64(1), op == OpKind::ArgMax ? 1 : 0);
  }
}

// ---------------------------------------------------------------- cumsum

TEST(CpuReduceKernels, CumSumEveryDtypeAndFlag) {
  std::mt19937_64 rng(31);
  for (DType t : kNumeric) {
    for (int trial = 0; trial < 24; ++trial) {
      Shape s = random_shape(rng, 1);
      int axis = static_cast<int>(rng() % static_cast<uint64_t>(s.rank()));
      Tensor x = random_tensor(t, s, rng(), t == DType::u8 ? 0 : -100, 100);
      if (is_float(t) && trial % 3 == 0) x = with_specials(x, rng());
      for (bool exclusive : {false, true}) {
        for (bool reverse : {false, true}) {
          Graph g("cumsum");
          Value xv = g.input("x", t, s);
          g.set_outputs({g.cumsum(xv, rng() % 2 ? axis : axis - s.rank(), exclusive, reverse)});
          Tensor got = run_native(g, {{"x", x}}, OpKind::CumSum)[0];
          // The running sum is the reference's (double / wrapping), so results are identical.
          EXPECT_TRUE(all_close(got, evaluate(g, {{"x", x}})[0], 0, 0))
              << dtype_name(t) << s.to_string() << " axis " << axis << " exclusive " << exclusive
              << " reverse " << reverse;
        }
      }
    }
  }
}

// ---------------------------------------------------------------- top_k

TEST(CpuReduceKernels, TopKEveryDtypeWithTiesAndNan) {
  std::mt19937_64 rng(41);
  for (DType t : kNumeric) {
    for (int trial = 0; trial < 24; ++trial) {
      Shape s = random_shape(rng, 1);
      const int64_t n = s[s.rank() - 1];
      const int64_t k = n == 0 ? 0 : static_cast<int64_t>(rng() % static_cast<uint64_t>(n + 1));
      Tensor x = random_tensor(t, s, rng(), t == DType::u8 ? 0 : -4, 4);
      if (is_float(t)) {
        for (int64_t i = 0; i < x.numel(); ++i)
          if (trial % 2) x.set_f64(i, std::floor(x.get_f64(i)));  // many ties
        x = with_specials(x, rng());
      }
      Graph g("topk");
      Value xv = g.input("x", t, s);
      auto [values, indices] = g.top_k(xv, k);
      g.set_outputs({values, indices});
      std::vector<Tensor> got = run_native(g, {{"x", x}}, OpKind::TopK);
      std::vector<Tensor> want = evaluate(g, {{"x", x}});
      EXPECT_TRUE(got[0].bitwise_equal(want[0]) || all_close(got[0], want[0], 0, 0))
          << dtype_name(t) << s.to_string() << " k " << k;
      EXPECT_TRUE(got[1].bitwise_equal(want[1])) << dtype_name(t) << s.to_string() << " k " << k;
    }
  }
}

// k small against n takes the heap scan, large k the selection: both with ties and NaN.
TEST(CpuReduceKernels, TopKHeapAndSelectionPaths) {
  std::mt19937_64 rng(43);
  for (DType t : kNumeric) {
    for (int64_t k : {1, 7, 18, 150, 300}) {
      Tensor x = random_tensor(t, Shape{3, 300}, rng(), t == DType::u8 ? 0 : -20, 20);
      if (is_float(t)) x = with_specials(x, rng());
      Graph g("topk");
      auto [values, indices] = g.top_k(g.input("x", t, x.shape()), k);
      g.set_outputs({values, indices});
      std::vector<Tensor> got = run_native(g, {{"x", x}}, OpKind::TopK);
      std::vector<Tensor> want = evaluate(g, {{"x", x}});
      EXPECT_TRUE(all_close(got[0], want[0], 0, 0)) << dtype_name(t) << " k " << k;
      EXPECT_TRUE(got[1].bitwise_equal(want[1])) << dtype_name(t) << " k " << k;
    }
  }
}

TEST(CpuReduceKernels, TopKOrdersNanAboveInfAndPositiveZeroAboveNegative) {
  Tensor x = Tensor::from_doubles(DType::f32, Shape{7},
                                  std::vector<double>{-0.0, 1, NAN, INFINITY, 0.0, -NAN, 1});
  Graph g("order");
  auto [values, indices] = g.top_k(g.input("x", DType::f32, Shape{7}), 7);
  g.set_outputs({values, indices});
  std::vector<Tensor> got = run_native(g, {{"x", x}}, OpKind::TopK);
  const int64_t order[] = {2, 5, 3, 1, 6, 4, 0};
  for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(got[1].get_i64(j), order[j]) << j;
  EXPECT_TRUE(got[1].bitwise_equal(evaluate(g, {{"x", x}})[1]));
}

// Sizes large enough for every kernel to split its work over the pool (4 threads here, whatever
// the machine): the results must not change.
TEST(CpuReduceKernels, ParallelSplitsAgreeWithReference) {
  testing::ThreadCountGuard guard;
  set_num_threads(4);
  std::mt19937_64 rng(51);
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
  };
  for (const Case& c : {Case{{64, 3000}, {1}}, Case{{8, 3000, 300}, {1}}, Case{{3000, 64}, {0}},
                        Case{{40, 30, 50}, {0, 2}}}) {
    for (const ReduceCase& rc : kReductions) {
      Tensor x = random_tensor(DType::f32, c.shape, rng(), 0.9, 1.1);
      check_reduction(rc, x, c.axes, false);
    }
  }
  Tensor x = random_tensor(DType::f32, Shape{300, 400}, rng());
  for (int64_t axis : {0, 1}) {
    Graph g("parallel");
    Value xv = g.input("x", DType::f32, x.shape());
    auto [values, indices] = g.top_k(xv, 5);
    g.set_outputs({g.argmax(xv, axis), g.argmin(xv, axis), g.cumsum(xv, axis, axis == 1, axis == 0),
                   values, indices});
    Session session;
    std::vector<Tensor> got = session.compile(g)->run({{"x", x}});
    std::vector<Tensor> want = evaluate(g, {{"x", x}});
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(all_close(got[i], want[i], 0, 0)) << "output " << i << " axis " << axis;
  }
}

// Clones of one executable share its kernels; top_k's per-call scratch must be per thread.
TEST(CpuReduceKernels, TopKClonesRunConcurrently) {
  Graph g("clones");
  auto [values, indices] = g.top_k(g.input("x", DType::f32, Shape{64, 500}), 10);
  g.set_outputs({values, indices});
  Session session;
  auto exe = session.compile(g);
  Tensor x = random_tensor(DType::f32, Shape{64, 500}, 8);
  std::vector<Tensor> want = evaluate(g, {{"x", x}});
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i, clone = std::shared_ptr<Executable>(exe->clone())] {
      bool all = true;
      for (int r = 0; r < 20; ++r) {
        std::vector<Tensor> got = clone->run({{"x", x}});
        all = all && got[0].bitwise_equal(want[0]) && got[1].bitwise_equal(want[1]);
      }
      ok[static_cast<size_t>(i)] = all;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int v : ok) EXPECT_TRUE(v);
}

}  // namespace
}  // namespace rlx
