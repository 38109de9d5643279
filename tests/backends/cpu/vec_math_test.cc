// Accuracy of the CPU backend's vectorized f32 math (src/backends/cpu/kernels/vec_math.h) and
// its f16 / bf16 array conversions (half.h), against double-precision libm and the reference
// conversions: max ulp errors over dense f32 sweeps, special values and signed zeros.
#include "../../../src/backends/cpu/kernels/vec_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "../../../src/backends/cpu/kernels/half.h"
#include "common/hwy_targets.h"

namespace rlx::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// |got - want| in ulp of the f32 grid at want (2^-149 below the normal range); infinite when
// NaN-ness differs or an infinity does not match the rounded value exactly.
double ulp_error(float got, double want) {
  if (std::isnan(want) || std::isnan(got))
    return std::isnan(want) && std::isnan(got) ? 0 : std::numeric_limits<double>::infinity();
  auto rounded = static_cast<float>(want);
  if (std::isinf(rounded) || std::isinf(got))
    return got == rounded ? 0 : std::numeric_limits<double>::infinity();
  int e = 0;
  std::frexp(want, &e);
  double ulp = std::ldexp(1.0, std::max(e - 24, -149));
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

// The exact functions in double (accurate to far below an f32 ulp; gelu through erfc so the
// negative tail keeps its relative accuracy).
double ref_logistic(double x) {
  return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
}
double ref_gelu(double x) { return 0.5 * x * std::erfc(-x / std::numbers::sqrt2); }
// x/2 (1 + tanh u) = x logistic(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
double ref_gelu_tanh(double x) {
  return x * ref_logistic(2.0 * std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x));
}

struct Fn {
  VecFn fn;
  const char* name;
  std::function<double(double)> ref;
  double max_ulp;
};

const std::vector<Fn>& functions() {
  static const std::vector<Fn> fns = {
      {VecFn::kExp, "exp", [](double x) { return std::exp(x); }, 1},
      {VecFn::kExpm1, "expm1", [](double x) { return std::expm1(x); }, 4},
      {VecFn::kLog, "log", [](double x) { return std::log(x); }, 1},
      {VecFn::kLog1p, "log1p", [](double x) { return std::log1p(x); }, 3},
      {VecFn::kSin, "sin", [](double x) { return std::sin(x); }, 1},
      {VecFn::kCos, "cos", [](double x) { return std::cos(x); }, 1},
      {VecFn::kTan, "tan", [](double x) { return std::tan(x); }, 1},
      {VecFn::kTanh, "tanh", [](double x) { return std::tanh(x); }, 3},
      {VecFn::kAtan, "atan", [](double x) { return std::atan(x); }, 3},
      {VecFn::kLogistic, "logistic", ref_logistic, 3},
      {VecFn::kErf, "erf", [](double x) { return std::erf(x); }, 2},
      {VecFn::kGelu, "gelu", ref_gelu, 6},
      {VecFn::kGeluTanh, "gelu_tanh", ref_gelu_tanh, 4},
      {VecFn::kSilu, "silu", [](double x) { return x * ref_logistic(x); }, 4},
      {VecFn::kSoftplus, "softplus",
       [](double x) { return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0); }, 4},
      {VecFn::kSqrt, "sqrt", [](double x) { return std::sqrt(x); }, 0.5},
  };
  return fns;
}

// Every `stride`-th f32 bit pattern (all signs, binades, subnormals, inf, NaN), plus windows of
// 2 * `window` consecutive floats around the points where the implementations switch pieces or
// the result overflows / underflows.
std::vector<float> sweep_inputs(uint64_t stride, uint32_t window) {
  std::vector<float> xs;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += stride)
    xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  for (float center :
       {0.0f,        1.0f,         -1.0f,      0.5f,        -0.5f,  0.70710678f, -0.70710678f,
        1.41421356f, -1.41421356f, 3.92f,      -3.92f,      10.5f,  -15.0f,      14.3f,
        -14.3f,      88.72283f,    -87.33654f, -103.97208f, -17.4f, 9.1f,        18.7f,
        1.5707964f,  3.1415927f,   1048576.0f, -2.5f,       -80.0f, -10.2f}) {
    uint32_t c = std::bit_cast<uint32_t>(center);
    for (uint32_t d = 0; d < 2 * window; ++d) xs.push_back(std::bit_cast<float>(c - window + d));
  }
  return xs;
}

// ~4.2M values: every 1021st pattern and windows of 20000.
const std::vector<float>& inputs() {
  static const std::vector<float> xs = sweep_inputs(1021, 10000);
  return xs;
}

// Every function's max ulp error over xs is within its bound.
void expect_bounds(const std::vector<float>& xs, bool print) {
  std::vector<float> ys(xs.size());
  for (const Fn& f : functions()) {
    vec_apply(f.fn, xs.data(), ys.data(), static_cast<int64_t>(xs.size()));
    double worst = 0;
    float at = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      double e = ulp_error(ys[i], f.ref(static_cast<double>(xs[i])));
      if (e > worst) worst = e, at = xs[i];
    }
    if (print) std::printf("  %-9s max %.3f ulp (at x = %.9g)\n", f.name, worst, at);
    EXPECT_LE(worst, f.max_ulp) << f.name << " at x = " << at;
  }
}

TEST(VecMath, MaxUlpOverDenseSweeps) { expect_bounds(inputs(), true); }

// Near the zeros of sin, cos and tan (multiples of pi/2 up to 2^20) the reduction must keep
// full relative accuracy: every float within 64 ulp of k pi/2.
TEST(VecMath, TrigNearMultiplesOfHalfPi) {
  std::vector<float> xs;
  for (int64_t k = 1; k < (int64_t{1} << 20); k = k * 5 / 4 + 1) {
    uint32_t c = std::bit_cast<uint32_t>(static_cast<float>(k * std::numbers::pi / 2));
    for (uint32_t d = 0; d < 128; ++d) xs.push_back(std::bit_cast<float>(c - 64 + d));
  }
  std::vector<float> ys(xs.size());
  for (const Fn& f : functions()) {
    if (f.fn != VecFn::kSin && f.fn != VecFn::kCos && f.fn != VecFn::kTan) continue;
    vec_apply(f.fn, xs.data(), ys.data(), static_cast<int64_t>(xs.size()));
    double worst = 0;
    for (size_t i = 0; i < xs.size(); ++i)
      worst = std::max(worst, ulp_error(ys[i], f.ref(static_cast<double>(xs[i]))));
    EXPECT_LE(worst, 1.0) << f.name;
  }
}

// Special values and signed zeros, as the reference's double formulas give them.
void expect_special_values() {
  struct Case {
    VecFn fn;
    float x, want;
  };
  const Case cases[] = {
      {VecFn::kExp, -kInf, 0},
      {VecFn::kExp, kInf, kInf},
      {VecFn::kExp, 89.0f, kInf},
      {VecFn::kExp, -104.0f, 0},
      {VecFn::kExp, 1e30f, kInf},
      {VecFn::kExp, -1e30f, 0},
      {VecFn::kExpm1, -kInf, -1},
      {VecFn::kExpm1, kInf, kInf},
      {VecFn::kExpm1, -0.0f, -0.0f},
      {VecFn::kExpm1, 1e30f, kInf},
      {VecFn::kLog, 0.0f, -kInf},
      {VecFn::kLog, -0.0f, -kInf},
      {VecFn::kLog, -1.0f, kNaN},
      {VecFn::kLog, kInf, kInf},
      {VecFn::kLog, -kInf, kNaN},
      {VecFn::kLog1p, -1.0f, -kInf},
      {VecFn::kLog1p, -2.0f, kNaN},
      {VecFn::kLog1p, kInf, kInf},
      {VecFn::kLog1p, -0.0f, -0.0f},
      {VecFn::kSin, kInf, kNaN},
      {VecFn::kSin, -0.0f, -0.0f},
      {VecFn::kCos, -kInf, kNaN},
      {VecFn::kCos, -0.0f, 1},
      {VecFn::kTan, -0.0f, -0.0f},
      {VecFn::kTan, kInf, kNaN},
      {VecFn::kTanh, kInf, 1},
      {VecFn::kTanh, -kInf, -1},
      {VecFn::kTanh, -0.0f, -0.0f},
      {VecFn::kAtan, kInf, static_cast<float>(std::numbers::pi / 2)},
      {VecFn::kAtan, -0.0f, -0.0f},
      {VecFn::kLogistic, -kInf, 0},
      {VecFn::kLogistic, kInf, 1},
      {VecFn::kErf, kInf, 1},
      {VecFn::kErf, -kInf, -1},
      {VecFn::kErf, -0.0f, -0.0f},
      {VecFn::kGelu, -kInf, kNaN},
      {VecFn::kGelu, kInf, kInf},
      {VecFn::kGelu, -0.0f, -0.0f},
      {VecFn::kGelu, -20.0f, -0.0f},
      {VecFn::kGelu, -1e30f, -0.0f},
      {VecFn::kGeluTanh, -kInf, kNaN},
      {VecFn::kGeluTanh, kInf, kInf},
      {VecFn::kGeluTanh, -0.0f, -0.0f},
      {VecFn::kSilu, -kInf, kNaN},
      {VecFn::kSilu, kInf, kInf},
      {VecFn::kSilu, -0.0f, -0.0f},
      {VecFn::kSoftplus, -kInf, 0},
      {VecFn::kSoftplus, kInf, kInf},
      {VecFn::kRelu, -0.0f, 0.0f},
      {VecFn::kRelu, kNaN, kNaN},
      {VecFn::kSign, -0.0f, -0.0f},
      {VecFn::kSign, kNaN, kNaN},
      {VecFn::kSign, -3.0f, -1},
      {VecFn::kSqrt, -0.0f, -0.0f},
      {VecFn::kSqrt, -1.0f, kNaN},
      {VecFn::kRound, 2.5f, 2},
      {VecFn::kRound, -0.5f, -0.0f},
      {VecFn::kFloor, -0.0f, -0.0f},
      {VecFn::kCeil, -0.5f, -0.0f},
  };
  for (const Case& c : cases) {
    // Every lane position, and the masked tail, see the value.
    for (int n : {1, 5, 16, 37}) {
      std::vector<float> x(static_cast<size_t>(n), c.x), y(static_cast<size_t>(n));
      vec_apply(c.fn, x.data(), y.data(), n);
      for (float v : y) {
        std::string what = "fn " + std::to_string(static_cast<int>(c.fn)) +
                           " x=" + std::to_string(c.x) + " got " + std::to_string(v);
        if (std::isnan(c.want)) {
          EXPECT_TRUE(std::isnan(v)) << what;
        } else {
          EXPECT_EQ(v, c.want) << what;
          EXPECT_EQ(std::signbit(v), std::signbit(c.want)) << what;
        }
      }
    }
  }
  // NaN in -> NaN out for every function.
  for (int f = 0; f <= static_cast<int>(VecFn::kSoftplus); ++f) {
    float x[3] = {kNaN, -kNaN, 1.0f}, y[3];
    vec_apply(static_cast<VecFn>(f), x, y, 3);
    EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1])) << "fn " << f;
  }
}

TEST(VecMath, SpecialValues) { expect_special_values(); }

// rsqrt and leaky_relu compute in f64 and round once: to f32 directly, and to f16 / bf16
// through the round-to-odd f32 intermediate, so both equal rounding the f64 value directly.
void expect_f64_computed_round_once(const std::vector<float>& xs) {
  const auto n = static_cast<int64_t>(xs.size());
  std::vector<float> y(xs.size());
  std::vector<f16> h(xs.size());
  std::vector<bf16> b(xs.size());
  auto same = [](float got, double want) {
    return std::isnan(want) ? std::isnan(got)
                            : got == want && std::signbit(got) == std::signbit(want);
  };
  const double alpha = 0.01;
  auto rsqrt = [](double x) { return 1.0 / std::sqrt(x); };
  auto leaky = [alpha](double x) { return x >= 0 ? x : alpha * x; };
  vec_rsqrt(xs.data(), y.data(), n, DType::f32);
  for (size_t i = 0; i < xs.size(); ++i)
    ASSERT_TRUE(same(y[i], static_cast<float>(rsqrt(xs[i])))) << xs[i];
  vec_leaky_relu(alpha, xs.data(), y.data(), n, DType::f32);
  for (size_t i = 0; i < xs.size(); ++i)
    ASSERT_TRUE(same(y[i], static_cast<float>(leaky(xs[i])))) << xs[i];
  for (int f = 0; f < 2; ++f) {
    auto ref = [&](double x) { return f == 0 ? rsqrt(x) : leaky(x); };
    if (f == 0)
      vec_rsqrt(xs.data(), y.data(), n, DType::f16);
    else
      vec_leaky_relu(alpha, xs.data(), y.data(), n, DType::f16);
    store_f32(y.data(), h.data(), n);
    for (size_t i = 0; i < xs.size(); ++i)
      ASSERT_TRUE(same(f16_to_float(h[i]), f16_to_float(f16_from_double(ref(xs[i])))))
          << f << " " << xs[i];
    if (f == 0)
      vec_rsqrt(xs.data(), y.data(), n, DType::bf16);
    else
      vec_leaky_relu(alpha, xs.data(), y.data(), n, DType::bf16);
    store_f32(y.data(), b.data(), n);
    for (size_t i = 0; i < xs.size(); ++i) {
      double want = ref(xs[i]);
      if (std::fabs(want) < 0x1p-126) continue;  // the documented f32-subnormal exception
      ASSERT_TRUE(same(bf16_to_float(b[i]), bf16_to_float(bf16_from_double(want))))
          << f << " " << xs[i];
    }
  }
}

// lax.max / lax.min: NaN when either is NaN, else a > b ? a : b (so max(-0, +0) = +0 and
// max(+0, -0) = -0, as the reference); compare is IEEE; select copies bits.
void expect_binary_compare_select_clamp() {
  const float vals[] = {0.0f, -0.0f, 1.0f, -1.0f, kInf, -kInf, kNaN, 2.5f, 1e-45f};
  std::vector<float> a, b;
  for (float u : vals)
    for (float v : vals) a.push_back(u), b.push_back(v);
  const auto n = static_cast<int64_t>(a.size());
  std::vector<float> y(a.size());
  std::vector<uint8_t> p(a.size());
  auto same = [](float x, float y) {
    return std::isnan(x) ? std::isnan(y) : (x == y && std::signbit(x) == std::signbit(y));
  };
  auto max_nan = [](float x, float y) {
    return std::isnan(x) || std::isnan(y) ? kNaN : x > y ? x : y;
  };
  auto min_nan = [](float x, float y) {
    return std::isnan(x) || std::isnan(y) ? kNaN : x < y ? x : y;
  };
  vec_binary(VecBinary::kMax, a.data(), b.data(), y.data(), n);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same(y[i], max_nan(a[i], b[i]))) << i;
  vec_binary(VecBinary::kMin, a.data(), b.data(), y.data(), n);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same(y[i], min_nan(a[i], b[i]))) << i;
  vec_binary(VecBinary::kDiv, a.data(), b.data(), y.data(), n);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same(y[i], a[i] / b[i])) << i;
  vec_compare(VecCompare::kNe, a.data(), b.data(), p.data(), n);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(p[i], a[i] != b[i]) << i;
  vec_compare(VecCompare::kLe, a.data(), b.data(), p.data(), n);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(p[i], a[i] <= b[i]) << i;
  vec_select(p.data(), a.data(), b.data(), y.data(), n);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(p[i] ? a[i] : b[i])) << i;
  std::vector<float> hi(a.size(), 1.0f);
  vec_clamp(a.data(), b.data(), hi.data(), y.data(), n);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(same(y[i], min_nan(max_nan(b[i], a[i]), 1.0f))) << i;
}

// The SIMD f16 / bf16 conversions equal the scalar ones of rlx_ir (bit for bit; NaN: NaN of
// the same sign), and vec_round_to equals a round trip through the 16-bit type.
void expect_half_conversions() {
  std::vector<f16> h(65536);
  std::vector<bf16> hb(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    h[i].bits = static_cast<uint16_t>(i);
    hb[i].bits = static_cast<uint16_t>(i);
  }
  std::vector<float> w(65536);
  load_f32(h.data(), w.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    float want = f16_to_float(h[i]);
    ASSERT_TRUE(std::isnan(want) ? std::isnan(w[i])
                                 : std::bit_cast<uint32_t>(want) == std::bit_cast<uint32_t>(w[i]))
        << i;
    float scalar = to_f32(h[i]);
    ASSERT_TRUE(std::isnan(want) ? std::isnan(scalar)
                                 : std::bit_cast<uint32_t>(want) == std::bit_cast<uint32_t>(scalar))
        << i;
  }
  load_f32(hb.data(), w.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(w[i]), std::bit_cast<uint32_t>(bf16_to_float(hb[i]))) << i;

  // f32 -> 16 bits: a strided sweep of all f32 patterns plus every tie of both grids.
  std::vector<float> xs;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099)
    xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  for (uint32_t i = 0; i < 65536; ++i) {
    xs.push_back(std::bit_cast<float>((i << 16) | 0x8000u));  // bf16 ties
    float lo = f16_to_float(f16{static_cast<uint16_t>(i)});
    float up = f16_to_float(f16{static_cast<uint16_t>(i + 1)});
    if (std::isfinite(lo) && std::isfinite(up) && (i & 0x7fffu) != 0x7bffu)
      xs.push_back(static_cast<float>((static_cast<double>(lo) + up) / 2));  // f16 ties
  }
  const auto n = static_cast<int64_t>(xs.size());
  std::vector<f16> o16(xs.size());
  std::vector<bf16> ob(xs.size());
  std::vector<float> r16(xs), rb(xs);
  store_f32(xs.data(), o16.data(), n);
  store_f32(xs.data(), ob.data(), n);
  vec_round_to(DType::f16, r16.data(), n);
  vec_round_to(DType::bf16, rb.data(), n);
  auto same16 = [](uint16_t got, uint16_t want, uint16_t exp_mask) {
    bool nan_want = (want & exp_mask) == exp_mask && (want & ~exp_mask & 0x7fffu) != 0;
    bool nan_got = (got & exp_mask) == exp_mask && (got & ~exp_mask & 0x7fffu) != 0;
    if (nan_want) return nan_got && (got & 0x8000u) == (want & 0x8000u);
    return got == want;
  };
  for (size_t i = 0; i < xs.size(); ++i) {
    f16 want = f16_from_float(xs[i]);
    bf16 wantb = bf16_from_float(xs[i]);
    ASSERT_TRUE(same16(o16[i].bits, want.bits, 0x7c00u)) << xs[i];
    ASSERT_TRUE(same16(from_f32<f16>(xs[i]).bits, want.bits, 0x7c00u)) << xs[i];
    ASSERT_TRUE(same16(ob[i].bits, wantb.bits, 0x7f80u)) << xs[i];
    float back = f16_to_float(want), backb = bf16_to_float(wantb);
    ASSERT_TRUE(std::isnan(back) ? std::isnan(r16[i]) : r16[i] == back) << xs[i];
    ASSERT_TRUE(std::isnan(backb) ? std::isnan(rb[i]) : rb[i] == backb) << xs[i];
  }
}

TEST(VecMath, F64ComputedFunctionsRoundOnce) { expect_f64_computed_round_once(inputs()); }
TEST(VecMath, BinaryCompareSelectClamp) { expect_binary_compare_select_clamp(); }
TEST(VecMath, HalfConversions) { expect_half_conversions(); }

// Every Highway target compiled into vec_math.cc (AVX-512, AVX2 and the portable fallback for
// older CPUs) holds the same bounds, special values and exact results: each is forced in turn
// through Highway's target mock, then the normal choice is restored.
TEST(VecMath, EveryCompiledTarget) {
  const std::vector<float> xs = sweep_inputs(65521, 500);
  testing::for_each_hwy_target([&](int64_t) {
    expect_bounds(xs, false);
    expect_special_values();
    expect_f64_computed_round_once(xs);
    expect_binary_compare_select_clamp();
    expect_half_conversions();
  });
}

}  // namespace
}  // namespace rlx::cpu
