// conv, max_pool and avg_pool: inference, error messages and reference-evaluator values.
// Expected numbers come from jax 0.4.38 (x64): lax.conv_general_dilated with
// dimension_numbers ('NCHW', 'OIHW', 'NCHW') (or 'NCH', 'OIH', 'NCH') and feature_group_count,
// and lax.reduce_window (max with -inf padding; add divided by the window size or by a
// reduce_window-summed ones tensor) on the pattern inputs below.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "../common/test_util.h"
#include "rlx/ir/error.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

using testing::error_of;

using Ints = std::vector<int64_t>;
using testing::all_close;

// x[i] = ((7 i) mod 11 - 5) / 4 over the flat index (numpy: ((7*i) % 11 - 5) / 4).
Tensor x_pattern(Shape s, DType t = DType::f32) {
  Tensor x(t, std::move(s));
  for (int64_t i = 0; i < x.numel(); ++i) x.set_f64(i, static_cast<double>((7 * i) % 11 - 5) / 4);
  return x;
}

// w[i] = ((5 i) mod 7 - 3) / 2.
Tensor w_pattern(Shape s, DType t = DType::f32) {
  Tensor w(t, std::move(s));
  for (int64_t i = 0; i < w.numel(); ++i) w.set_f64(i, static_cast<double>((5 * i) % 7 - 3) / 2);
  return w;
}

Tensor run_conv(const Tensor& x, const Tensor& w, Ints strides, Ints lo, Ints hi, Ints dil,
                int64_t groups) {
  Graph g;
  Value out = g.conv(g.input("x", x.dtype(), x.shape()), g.input("w", w.dtype(), w.shape()),
                     strides, lo, hi, dil, groups);
  g.set_outputs({out});
  return evaluate(g, {{"x", x}, {"w", w}})[0];
}

Tensor expected(DType t, Shape s, std::vector<double> v) {
  return Tensor::from_doubles(t, std::move(s), v);
}

TEST(Conv, OneDimStridePadDilation) {
  Tensor out = run_conv(x_pattern({2, 3, 7}), w_pattern({4, 3, 3}), {2}, {1}, {2}, {2}, 1);
  EXPECT_TRUE(all_close(
      out,
      expected(DType::f32, {2, 4, 3}, {-0.5,   -1.25, -0.625, 1.25,   -2.25, 1.375, -0.5,  3.75,
                                       -0.125, -0.5,  -0.75,  1.0,    -3.5,  2.375, -1.25, 0.125,
                                       3.625,  0.0,   1.125,  -3.875, -2.25, 3.0,   0.0,   0.75}),
      0, 0));
}

TEST(Conv, TwoDimGroupsAsymmetricPadding) {
  Tensor out =
      run_conv(x_pattern({1, 4, 5, 6}), w_pattern({6, 2, 3, 2}), {2, 1}, {1, 0}, {0, 2}, {1, 2}, 2);
  EXPECT_TRUE(all_close(
      out,
      expected(
          DType::f32, {1, 6, 2, 6},
          {-1.875, 1.125,  -1.375, -2.5,   0.125,  -1.375, -0.875, -2.25,  -0.875, -0.875, -1.0,
           3.625,  4.5,    1.5,    -0.125, 1.0,    -0.625, 0.375,  4.0,    0.375,  -0.5,   0.0,
           0.25,   -3.5,   -4.0,   -0.75,  1.125,  -2.5,   1.25,   1.25,   -2.5,   1.25,   -1.875,
           -0.875, 1.5,    2.5,    -1.5,   -1.625, -0.375, -0.5,   0.125,  -0.875, -1.625, -2.25,
           -0.125, 2.0,    -1.375, 3.625,  1.0,    1.0,    1.0,    -1.75,  -1.0,   0.5,    2.0,
           -0.125, -2.25,  -1.625, 0.625,  -0.625, 0.0,    0.125,  -1.125, 3.125,  -0.375, 0.125,
           -1.375, -2.375, 3.5,    5.25,   0.0,    -1.375}),
      0, 0));
}

TEST(Conv, DepthwiseWithChannelMultiplier) {
  // groups == C == 3, two output channels per input channel.
  Tensor out = run_conv(x_pattern({1, 3, 3, 3}), w_pattern({6, 1, 2, 2}), {}, {}, {}, {}, 3);
  EXPECT_TRUE(all_close(out,
                        expected(DType::f32, {1, 6, 2, 2},
                                 {2.125, -0.5,   -1.625, -0.125, -2.625, 1.5,    1.5,    1.5,
                                  -0.5,  2.125,  -0.875, 1.75,   -0.75,  2.5,    -0.625, 1.25,
                                  0.0,   -2.375, 1.125,  1.5,    1.25,   -1.875, 1.5,    1.125}),
                        0, 0));
}

TEST(Conv, SamePaddingF64) {
  Tensor out = run_conv(x_pattern({1, 2, 3, 3}, DType::f64), w_pattern({2, 2, 3, 3}, DType::f64),
                        {}, {1, 1}, {1, 1}, {}, 1);
  EXPECT_TRUE(
      all_close(out,
                expected(DType::f64, {1, 2, 3, 3},
                         {-2.75, 1.625, -0.25, -0.625, -4.125, -1.5, 2.5, -1.75, -4.75, 0.125,
                          -1.875, -2.25, 0.25, -4.375, -2.25, -1.125, 4.875, -3.625}),
                0, 0));
}

TEST(Conv, F16AccumulatesInDouble) {
  // 1 + 2^-11 + 2^-11 = 1 + 2^-10 exactly (an f16 value); summing in f16 would round
  // 1 + 2^-11 down to 1 (tie to even) twice and give 1.
  double tiny = std::ldexp(1.0, -11);
  Tensor x = Tensor::from_doubles(DType::f16, {1, 1, 3}, std::vector<double>{1.0, tiny, tiny});
  Tensor w = Tensor::full(DType::f16, {1, 1, 3}, 1.0);
  Tensor out = run_conv(x, w, {}, {}, {}, {}, 1);
  ASSERT_EQ(out.type().to_string(), "f16[1,1,1]");
  EXPECT_EQ(out.get_f64(0), 1.0 + std::ldexp(1.0, -10));
}

TEST(Conv, InferenceShapes) {
  Graph g;
  Value x = g.input("x", DType::bf16, {2, 4, 9, 9});
  Value w = g.input("w", DType::bf16, {8, 4, 3, 3});
  // floor((9 + 1 + 1 - 2*2 - 1) / 3) + 1 = 3
  EXPECT_EQ(g.type(g.conv(x, w, {3, 3}, {1, 1}, {1, 1}, {2, 2})).to_string(), "bf16[2,8,3,3]");
  // A padded input one short of the kernel extent: floor(-1 / 1) + 1 = 0 outputs.
  Value x1 = g.input("x1", DType::f32, {0, 2, 4});
  Value w1 = g.input("w1", DType::f32, {3, 2, 5});
  Value empty = g.conv(x1, w1);
  EXPECT_EQ(g.type(empty).to_string(), "f32[0,3,0]");
  g.set_outputs({empty});
  EXPECT_EQ(evaluate(g, {{"x", Tensor(DType::bf16, {2, 4, 9, 9})},
                         {"w", Tensor(DType::bf16, {8, 4, 3, 3})},
                         {"x1", Tensor(DType::f32, {0, 2, 4})},
                         {"w1", Tensor(DType::f32, {3, 2, 5})}})[0]
                .numel(),
            0);
  Node n = g.node(empty);
  EXPECT_EQ(n.attrs.get_ints("strides"), Ints{});
  EXPECT_EQ(n.attrs.get_int("groups"), 1);
}

TEST(Conv, ErrorChannelMismatchWithGroups) {
  Graph g;
  Value x = g.input("x", DType::f32, {1, 4, 5, 5});
  Value w = g.input("w", DType::f32, {6, 3, 3, 3});
  std::string e = error_of([&] { g.conv(x, w, {}, {}, {}, {}, 2); });
  EXPECT_NE(e.find("kernel input channels must be C/groups = 4/2 = 2, got 3"), std::string::npos)
      << e;
  EXPECT_NE(e.find("f32[6,3,3,3]"), std::string::npos) << e;
  Value w3 = g.input("w3", DType::f32, {6, 1, 3, 3});
  e = error_of([&] { g.conv(x, w3, {}, {}, {}, {}, 3); });
  EXPECT_NE(e.find("input channels 4 are not divisible by groups 3"), std::string::npos) << e;
  Value w4 = g.input("w4", DType::f32, {5, 2, 3, 3});
  e = error_of([&] { g.conv(x, w4, {}, {}, {}, {}, 2); });
  EXPECT_NE(e.find("output channels 5 are not divisible by groups 2"), std::string::npos) << e;
  e = error_of([&] { g.conv(x, w, {}, {}, {}, {}, 0); });
  EXPECT_NE(e.find("groups must be >= 1, got 0"), std::string::npos) << e;
}

TEST(Conv, ErrorNegativeOutputSize) {
  Graph g;
  Value x = g.input("x", DType::f32, {1, 1, 2});
  Value w = g.input("w", DType::f32, {1, 1, 5});
  std::string e = error_of([&] { g.conv(x, w); });
  EXPECT_NE(e.find("negative output size -2 in spatial dim 0"), std::string::npos) << e;
  EXPECT_NE(e.find("padded input 2 is smaller than the dilated kernel extent 5"), std::string::npos)
      << e;
  // Dilation counts: kernel 2 dilated by 4 spans 5.
  Value w2 = g.input("w2", DType::f32, {1, 1, 2});
  e = error_of([&] { g.conv(x, w2, {}, {}, {}, {4}); });
  EXPECT_NE(e.find("dilated kernel extent 5"), std::string::npos) << e;
}

TEST(Conv, ErrorBadOperandsAndAttributes) {
  Graph g;
  Value x = g.input("x", DType::f32, {1, 2, 5, 5});
  Value w = g.input("w", DType::f32, {3, 2, 3, 3});
  std::string e = error_of([&] { g.conv(x, w, {1}); });
  EXPECT_NE(e.find("strides [1] must have one entry per spatial dim (2) or be empty"),
            std::string::npos)
      << e;
  e = error_of([&] { g.conv(x, w, {}, {0, -1}); });
  EXPECT_NE(e.find("pad_low [0,-1] must have entries >= 0"), std::string::npos) << e;
  e = error_of([&] { g.conv(x, w, {}, {}, {}, {1, 0}); });
  EXPECT_NE(e.find("dilation [1,0] must have entries >= 1"), std::string::npos) << e;
  Value wi = g.input("wi", DType::f16, {3, 2, 3, 3});
  e = error_of([&] { g.conv(x, wi); });
  EXPECT_NE(e.find("kernel dtype must equal the input dtype f32, got f16"), std::string::npos) << e;
  Value xi = g.input("xi", DType::i32, {1, 2, 5, 5});
  e = error_of([&] { g.conv(xi, w); });
  EXPECT_NE(e.find("input must be a float type (f32, f16, bf16, f64), got i32"), std::string::npos)
      << e;
  Value w3 = g.input("w3", DType::f32, {3, 2, 3});
  e = error_of([&] { g.conv(x, w3); });
  EXPECT_NE(e.find("kernel must be OIHW (rank 4) to match the input rank, got shape [3,2,3]"),
            std::string::npos)
      << e;
  Value w0 = g.input("w0", DType::f32, {3, 2, 0, 3});
  e = error_of([&] { g.conv(x, w0); });
  EXPECT_NE(e.find("kernel spatial dims must be >= 1, got kernel shape [3,2,0,3]"),
            std::string::npos)
      << e;
  e = error_of([&] { g.conv(x, w, {}, {int64_t{1} << 62, 0}, {int64_t{1} << 62, 0}); });
  EXPECT_NE(e.find("shape arithmetic overflows int64"), std::string::npos) << e;
  Value x5 = g.input("x5", DType::f32, {1, 2, 3, 3, 3});
  e = error_of([&] { g.conv(x5, w); });
  EXPECT_NE(e.find("input must be NCW (rank 3) or NCHW (rank 4), got shape [1,2,3,3,3]"),
            std::string::npos)
      << e;
}

Tensor run_pool(bool max, const Tensor& x, Ints window, Ints strides, Ints lo, Ints hi,
                bool include_pad = true) {
  Graph g;
  Value in = g.input("x", x.dtype(), x.shape());
  g.set_outputs({max ? g.max_pool(in, window, strides, lo, hi)
                     : g.avg_pool(in, window, strides, lo, hi, include_pad)});
  return evaluate(g, {{"x", x}})[0];
}

TEST(Pool, MaxPool2DWithPadding) {
  Tensor out = run_pool(true, x_pattern({1, 2, 4, 5}), {2, 3}, {2, 2}, {1, 1}, {0, 1});
  EXPECT_TRUE(all_close(out,
                        expected(DType::f32, {1, 2, 2, 3},
                                 {0.5, 1.25, 1.25, 1.0, 1.0, 1.25, 0.75, 0.5, 0.5, 1.25, 1.0, 1.0}),
                        0, 0));
}

TEST(Pool, AvgPool2DCountIncludePad) {
  Tensor out = run_pool(false, x_pattern({1, 2, 4, 5}), {2, 3}, {2, 2}, {1, 1}, {0, 1}, true);
  EXPECT_TRUE(all_close(
      out,
      expected(DType::f32, {1, 2, 2, 3},
               {-0.125, 0.20833333333333334, 0.25, -0.20833333333333334, -0.20833333333333334,
                0.08333333333333333, 0.08333333333333333, -0.16666666666666666, 0.0,
                0.20833333333333334, -0.041666666666666664, 0.041666666666666664}),
      testing::default_rtol(DType::f32), 0));
}

TEST(Pool, AvgPool2DExcludePad) {
  Tensor out = run_pool(false, x_pattern({1, 2, 4, 5}), {2, 3}, {2, 2}, {1, 1}, {0, 1}, false);
  EXPECT_TRUE(
      all_close(out,
                expected(DType::f32, {1, 2, 2, 3},
                         {-0.375, 0.4166666666666667, 0.75, -0.3125, -0.20833333333333334, 0.125,
                          0.25, -0.3333333333333333, 0.0, 0.3125, -0.041666666666666664, 0.0625}),
                testing::default_rtol(DType::f32), 0));
}

TEST(Pool, OneDimAllKinds) {
  Tensor x = x_pattern({1, 1, 5});
  EXPECT_TRUE(all_close(run_pool(true, x, {3}, {1}, {1}, {1}),
                        expected(DType::f32, {1, 1, 5}, {0.5, 0.5, 1.25, 1.25, 1.25}), 0, 0));
  EXPECT_TRUE(
      all_close(run_pool(false, x, {3}, {1}, {1}, {1}, true),
                expected(DType::f32, {1, 1, 5},
                         {-0.25, -0.4166666666666667, 0.4166666666666667, 0.3333333333333333, 0.5}),
                testing::default_rtol(DType::f32), 0));
  EXPECT_TRUE(all_close(
      run_pool(false, x, {3}, {1}, {1}, {1}, false),
      expected(DType::f32, {1, 1, 5},
               {-0.375, -0.4166666666666667, 0.4166666666666667, 0.3333333333333333, 0.75}),
      testing::default_rtol(DType::f32), 0));
}

TEST(Pool, WindowsWhollyInPadding) {
  // x = [3, -1] padded low by 3: windows [P,P], [P,P], [P,3], [3,-1]. By hand: max gives -inf
  // for an all-padding window; avg divides 0 by 2 (include) or by 0 (exclude: NaN).
  Tensor x = Tensor::from_doubles(DType::f32, {1, 1, 2}, std::vector<double>{3, -1});
  double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  EXPECT_TRUE(all_close(run_pool(true, x, {2}, {}, {3}, {}),
                        expected(DType::f32, {1, 1, 4}, {-inf, -inf, 3, 3}), 0, 0));
  EXPECT_TRUE(all_close(run_pool(false, x, {2}, {}, {3}, {}, true),
                        expected(DType::f32, {1, 1, 4}, {0, 0, 1.5, 1}), 0, 0));
  EXPECT_TRUE(all_close(run_pool(false, x, {2}, {}, {3}, {}, false),
                        expected(DType::f32, {1, 1, 4}, {nan, nan, 3, 1}), 0, 0));
}

TEST(Pool, MaxPoolPropagatesNaN) {
  Tensor x = Tensor::from_doubles(DType::f32, {1, 1, 3}, std::vector<double>{1, std::nan(""), 2});
  Tensor out = run_pool(true, x, {2}, {}, {}, {});
  EXPECT_TRUE(std::isnan(out.get_f64(0)));
  EXPECT_TRUE(std::isnan(out.get_f64(1)));
}

TEST(Pool, InferenceAndErrors) {
  Graph g;
  Value x = g.input("x", DType::f16, {2, 3, 7, 6});
  // floor((7 + 1 + 0 - 3) / 2) + 1 = 3, floor((6 - 2) / 1) + 1 = 5
  EXPECT_EQ(g.type(g.max_pool(x, {3, 2}, {2, 1}, {1, 0}, {0, 0})).to_string(), "f16[2,3,3,5]");
  Value ap = g.avg_pool(x, {2, 2});
  EXPECT_EQ(g.type(ap).to_string(), "f16[2,3,6,5]");
  EXPECT_TRUE(g.node(ap).attrs.get_bool("count_include_pad"));
  std::string e = error_of([&] { g.max_pool(x, {3}); });
  EXPECT_NE(e.find("window [3] must have one entry per spatial dim (2)"), std::string::npos) << e;
  e = error_of([&] { g.avg_pool(x, {0, 1}); });
  EXPECT_NE(e.find("window [0,1] must have entries >= 1"), std::string::npos) << e;
  e = error_of([&] { g.max_pool(x, {9, 1}); });
  EXPECT_NE(e.find("negative output size -1 in spatial dim 0: padded input 7 is smaller than "
                   "the window 9"),
            std::string::npos)
      << e;
  e = error_of([&] { g.avg_pool(x, {2, 2}, {0, 1}); });
  EXPECT_NE(e.find("strides [0,1] must have entries >= 1"), std::string::npos) << e;
  Value xi = g.input("xi", DType::i8, {1, 1, 4});
  e = error_of([&] { g.max_pool(xi, {2}); });
  EXPECT_NE(e.find("input must be a float type (f32, f16, bf16, f64), got i8"), std::string::npos)
      << e;
  e = error_of([&] { g.emit(OpKind::MaxPool, {x}, {}); });
  EXPECT_NE(e.find("missing required attribute 'window'"), std::string::npos) << e;
}

}  // namespace
}  // namespace rlx
