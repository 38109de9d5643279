// CPU conv-family kernels (conv, max_pool, avg_pool) against the reference evaluator: 1-D and
// 2-D, strides, asymmetric padding, dilation, groups, every float dtype, size-0 dims, NaN/inf
// and windows lying wholly in the padding. Each case checks which kernel ran.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

using testing::random_tensor;
using Ints = std::vector<int64_t>;

// Compiles `g` (inputs "x" and optionally "w") for the CPU and runs it; checks that the op ran
// natively or, when `native` is false, through the reference fallback.
Tensor run_cpu(const Graph& g, const TensorMap& feeds, const std::string& op, bool native = true) {
  Session session;
  auto exe = session.compile(g);
  // An empty result needs no kernel (the pipeline folds it to a constant).
  if (g.type(g.outputs()[0]).shape.numel() > 0) {
    auto counts = exe->kernels().count(*op_from_name(op));
    EXPECT_EQ(counts, (native ? KernelCounts{1, 0} : KernelCounts{0, 1})) << exe->kernel_report();
  }
  return exe->run(feeds)[0];
}

Tensor abs_of(const Tensor& t) {
  Tensor a = t;
  for (int64_t i = 0; i < a.numel(); ++i) a.set_f64(i, std::fabs(t.get_f64(i)));
  return a;
}

// |got - want| <= out_rtol * |want| + acc_rtol * scale (scale: the sum of |products| of that
// element); NaN must match NaN and inf the same inf.
::testing::AssertionResult matches(const Tensor& got, const Tensor& want, const Tensor& scale,
                                   double out_rtol, double acc_rtol) {
  if (got.type() != want.type())
    return ::testing::AssertionFailure()
           << "type " << got.type().to_string() << " vs " << want.type().to_string();
  for (int64_t i = 0; i < got.numel(); ++i) {
    double x = got.get_f64(i), y = want.get_f64(i);
    bool ok;
    if (std::isnan(y) || std::isinf(y))
      ok = std::isnan(y) ? std::isnan(x) : x == y;
    else
      ok = std::fabs(x - y) <= out_rtol * std::fabs(y) + acc_rtol * scale.get_f64(i);
    if (!ok)
      return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs " << y
                                           << " (scale " << scale.get_f64(i) << ")";
  }
  return ::testing::AssertionSuccess();
}

// The rounding of a result of dtype t relative to its value.
double out_rtol(DType t) {
  switch (t) {
    case DType::f64:
      return 1e-15;
    case DType::f32:
      return 1e-6;
    case DType::f16:
      return 1e-3;
    default:
      return 8e-3;
  }
}

const DType kFloatDtypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64};

// ---- conv

struct ConvCase {
  Shape x, w;
  Ints strides, lo, hi, dilation;
  int64_t groups;
};

const ConvCase kConvCases[] = {
    // 2-D
    {Shape{2, 3, 9, 11}, Shape{4, 3, 3, 3}, {}, {}, {}, {}, 1},
    {Shape{2, 3, 9, 11}, Shape{4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, {}, 1},       // same pad
    {Shape{2, 5, 13, 12}, Shape{6, 5, 3, 2}, {2, 3}, {0, 2}, {1, 0}, {}, 1},      // asymmetric
    {Shape{1, 4, 15, 15}, Shape{8, 4, 3, 3}, {1, 1}, {2, 2}, {2, 2}, {2, 2}, 1},  // dilated
    {Shape{2, 6, 10, 10}, Shape{9, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, {}, 3},      // groups
    {Shape{2, 8, 12, 12}, Shape{8, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, {}, 8},      // depthwise
    {Shape{2, 16, 7, 9}, Shape{24, 16, 1, 1}, {}, {}, {}, {}, 1},                 // 1x1
    {Shape{1, 17, 8, 8}, Shape{5, 17, 1, 1}, {2, 2}, {}, {}, {}, 1},              // strided 1x1
    {Shape{1, 3, 20, 20}, Shape{16, 3, 7, 7}, {2, 2}, {3, 3}, {3, 3}, {}, 1},     // stem
    {Shape{2, 32, 14, 14}, Shape{32, 32, 3, 3}, {1, 1}, {1, 1}, {1, 1}, {}, 1},
    {Shape{1, 2, 3, 3}, Shape{3, 2, 3, 3}, {}, {4, 4}, {4, 4}, {}, 1},  // pad > kernel
    // 1-D
    {Shape{2, 3, 17}, Shape{5, 3, 4}, {}, {}, {}, {}, 1},
    {Shape{2, 4, 31}, Shape{6, 2, 5}, {3}, {2}, {1}, {2}, 2},
    {Shape{1, 6, 9}, Shape{6, 1, 3}, {1}, {1}, {1}, {}, 6},
    // size 0
    {Shape{0, 3, 9, 9}, Shape{4, 3, 3, 3}, {}, {}, {}, {}, 1},  // empty batch
    {Shape{2, 0, 9}, Shape{4, 0, 3}, {}, {}, {}, {}, 1},        // no channels
    {Shape{2, 3, 0}, Shape{4, 3, 1}, {}, {1}, {1}, {}, 1},      // no input
};

// Each case with the weight as an input and as a constant (which the kernel converts and
// reorders to oneDNN's layout once, when it is built).
TEST(CpuConv, ConvEveryFloatDtype) {
  uint64_t seed = 1;
  for (const ConvCase& c : kConvCases)
    for (DType t : kFloatDtypes)
      for (bool constant_w : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + c.x.to_string() + " * " + c.w.to_string() +
                     " groups " + std::to_string(c.groups) +
                     (constant_w ? " constant weight" : ""));
        Tensor xt = random_tensor(t, c.x, seed++), wt = random_tensor(t, c.w, seed++);
        Graph g("conv");
        Value x = g.input("x", t, c.x);
        Value w = constant_w ? g.constant(wt) : g.input("w", t, c.w);
        g.set_outputs({g.conv(x, w, c.strides, c.lo, c.hi, c.dilation, c.groups)});
        TensorMap feeds{{"x", xt}};
        if (!constant_w) feeds.emplace("w", wt);
        // oneDNN has no f64 convolution: f64 runs the reference kernel.
        Tensor got = run_cpu(g, feeds, "conv", t != DType::f64);
        Graph ref("conv");
        Value rx = ref.input("x", t, c.x), rw = ref.input("w", t, c.w);
        ref.set_outputs({ref.conv(rx, rw, c.strides, c.lo, c.hi, c.dilation, c.groups)});
        Tensor want = evaluate(ref, {{"x", xt}, {"w", wt}})[0];
        Tensor scale = evaluate(ref, {{"x", abs_of(xt)}, {"w", abs_of(wt)}})[0];
        EXPECT_TRUE(matches(got, want, scale, out_rtol(t), 1e-5));
      }
}

TEST(CpuConv, ConvPropagatesNaNAndInf) {
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Graph g("conv");
    Value x = g.input("x", t, Shape{1, 2, 6, 6});
    Value w = g.input("w", t, Shape{3, 2, 3, 3});
    g.set_outputs({g.conv(x, w, {}, {1, 1}, {1, 1})});
    Tensor xt = random_tensor(t, Shape{1, 2, 6, 6}, 3), wt = random_tensor(t, Shape{3, 2, 3, 3}, 4);
    xt.set_f64(7, std::numeric_limits<double>::quiet_NaN());
    xt.set_f64(36 + 28, std::numeric_limits<double>::infinity());
    Tensor got = run_cpu(g, {{"x", xt}, {"w", wt}}, "conv");
    Tensor want = evaluate(g, {{"x", xt}, {"w", wt}})[0];
    Tensor scale = evaluate(g, {{"x", abs_of(xt)}, {"w", abs_of(wt)}})[0];
    EXPECT_TRUE(matches(got, want, scale, out_rtol(t), 1e-5));
  }
}

// ---- pooling

struct PoolCase {
  Shape x;
  Ints window, strides, lo, hi;
};

const PoolCase kPoolCases[] = {
    {Shape{2, 3, 8, 8}, {2, 2}, {2, 2}, {}, {}},
    {Shape{2, 3, 9, 11}, {3, 3}, {1, 1}, {1, 1}, {1, 1}},
    {Shape{1, 4, 13, 10}, {3, 2}, {2, 3}, {1, 0}, {2, 1}},  // asymmetric
    {Shape{1, 2, 5, 5}, {2, 2}, {1, 1}, {3, 3}, {3, 3}},    // windows wholly in padding
    {Shape{1, 2, 7, 300}, {1, 3}, {1, 1}, {0, 1}, {0, 1}},  // wider than one chunk
    {Shape{2, 3, 17}, {3}, {2}, {1}, {1}},                  // 1-D
    {Shape{1, 2, 9}, {4}, {1}, {5}, {0}},
    {Shape{0, 3, 8, 8}, {2, 2}, {2, 2}, {}, {}},  // empty
    {Shape{1, 2, 0}, {1}, {1}, {1}, {1}},         // no input: padding only
};

enum class PoolKind { Max, AvgIncludePad, AvgExcludePad };

Value pool(Graph& g, Value x, const PoolCase& c, PoolKind kind) {
  if (kind == PoolKind::Max) return g.max_pool(x, c.window, c.strides, c.lo, c.hi);
  return g.avg_pool(x, c.window, c.strides, c.lo, c.hi, kind == PoolKind::AvgIncludePad);
}

TEST(CpuConv, PoolingEveryFloatDtypeWithNaNAndInf) {
  uint64_t seed = 100;
  for (const PoolCase& c : kPoolCases)
    for (PoolKind kind : {PoolKind::Max, PoolKind::AvgIncludePad, PoolKind::AvgExcludePad})
      for (DType t : kFloatDtypes)
        for (bool specials : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " " + c.x.to_string() + " kind " +
                       std::to_string(static_cast<int>(kind)) + (specials ? " specials" : ""));
          Graph g("pool");
          Value x = g.input("x", t, c.x);
          g.set_outputs({pool(g, x, c, kind)});
          Tensor xt = random_tensor(t, c.x, seed++);
          if (specials)  // a sprinkling of NaN, inf and -inf
            for (int64_t i = 0; i < xt.numel(); i += 7)
              xt.set_f64(i, i % 3 == 0   ? std::numeric_limits<double>::quiet_NaN()
                            : i % 3 == 1 ? std::numeric_limits<double>::infinity()
                                         : -std::numeric_limits<double>::infinity());
          std::string op = kind == PoolKind::Max ? "max_pool" : "avg_pool";
          Tensor got = run_cpu(g, {{"x", xt}}, op);
          Tensor want = evaluate(g, {{"x", xt}})[0];
          // Max is exact; the average sums in f32 (f64 for f64) and rounds once.
          double rtol = kind == PoolKind::Max ? 0 : t == DType::f64 ? 1e-14 : out_rtol(t) + 1e-6;
          EXPECT_TRUE(testing::all_close(got, want, rtol, kind == PoolKind::Max ? 0 : 1e-6));
        }
}

// Max pooling is NaN-propagating and pads with -inf: a window holding a NaN is NaN even next
// to +inf, and a window with no input at all is -inf (oneDNN's pooling would give a finite
// lowest value and drop the NaN).
TEST(CpuConv, MaxPoolNaNWinsAndEmptyWindowsAreMinusInf) {
  Graph g("pool");
  Value x = g.input("x", DType::f32, Shape{1, 1, 4});
  g.set_outputs({g.max_pool(x, {2}, {2}, {2}, {2})});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  Tensor xt =
      Tensor::from_doubles(DType::f32, Shape{1, 1, 4}, std::vector<double>{inf, nan, 1, -inf});
  Tensor got = run_cpu(g, {{"x", xt}}, "max_pool");
  ASSERT_EQ(got.numel(), 4);
  EXPECT_EQ(got.get_f64(0), -inf);
  EXPECT_TRUE(std::isnan(got.get_f64(1)));
  EXPECT_EQ(got.get_f64(2), 1.0);
  EXPECT_EQ(got.get_f64(3), -inf);
}

}  // namespace
}  // namespace rlx
