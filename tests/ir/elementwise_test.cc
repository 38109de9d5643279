// Elementwise ops: values per dtype, pinned edge semantics, broadcasting, promotion, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../common/test_util.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

using testing::error_of;

using testing::all_close;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t k2p53 = int64_t{1} << 53;

// 1-D tensors from literal values (converted as the convert op does).
Tensor fvec(DType t, std::vector<double> v) {
  auto n = static_cast<int64_t>(v.size());
  return Tensor::from_doubles(t, Shape{n}, v);
}
Tensor ivec(DType t, std::vector<int64_t> v) {
  auto n = static_cast<int64_t>(v.size());
  return Tensor::from_ints(t, Shape{n}, v);
}
Tensor fscalar(DType t, double v) { return Tensor::full(t, Shape{}, v); }

Tensor run(OpKind op, std::vector<Tensor> operands, AttrMap attrs = {}) {
  return evaluate_op(op, operands, attrs).at(0);
}

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.get_i64(i));
  return out;
}

// Exact float comparison where NaN matches NaN (all_close with zero tolerance).
::testing::AssertionResult same(const Tensor& got, const Tensor& want) {
  return all_close(got, want, 0.0, 0.0);
}

// ---------------------------------------------------------------- unary math

struct UnaryCase {
  OpKind op;
  std::vector<double> want;  // at kUnaryInputs
};

const std::vector<double> kUnaryInputs = {-2.5, -0.5, 0.0, 0.5, 1.5, 2.5};

// Expected values: numpy float64 (math.erf for erf, 1/(1+exp(-x)) for logistic,
// np.round (half to even) for round), printed with repr.
const std::vector<UnaryCase> kUnaryCases = {
    {OpKind::Exp,
     {0.0820849986238988, 0.6065306597126334, 1.0, 1.6487212707001282, 4.4816890703380645,
      12.182493960703473}},
    {OpKind::Expm1,
     {-0.9179150013761012, -0.3934693402873666, 0.0, 0.6487212707001282, 3.481689070338065,
      11.182493960703473}},
    {OpKind::Log, {kNaN, kNaN, -kInf, -0.6931471805599453, 0.4054651081081644, 0.9162907318741551}},
    {OpKind::Log1p,
     {kNaN, -0.6931471805599453, 0.0, 0.4054651081081644, 0.9162907318741551, 1.252762968495368}},
    {OpKind::Sqrt, {kNaN, kNaN, 0.0, 0.7071067811865476, 1.224744871391589, 1.5811388300841898}},
    {OpKind::Rsqrt, {kNaN, kNaN, kInf, 1.414213562373095, 0.8164965809277261, 0.6324555320336759}},
    {OpKind::Sin,
     {-0.5984721441039565, -0.479425538604203, 0.0, 0.479425538604203, 0.9974949866040544,
      0.5984721441039565}},
    {OpKind::Cos,
     {-0.8011436155469337, 0.8775825618903728, 1.0, 0.8775825618903728, 0.0707372016677029,
      -0.8011436155469337}},
    {OpKind::Tan,
     {0.7470222972386603, -0.5463024898437905, 0.0, 0.5463024898437905, 14.101419947171719,
      -0.7470222972386603}},
    {OpKind::Tanh,
     {-0.9866142981514303, -0.46211715726000974, 0.0, 0.46211715726000974, 0.9051482536448665,
      0.9866142981514303}},
    {OpKind::Atan,
     {-1.1902899496825317, -0.4636476090008061, 0.0, 0.4636476090008061, 0.982793723247329,
      1.1902899496825317}},
    {OpKind::Logistic,
     {0.07585818002124355, 0.3775406687981454, 0.5, 0.6224593312018546, 0.8175744761936437,
      0.9241418199787566}},
    {OpKind::Erf,
     {-0.999593047982555, -0.5204998778130465, 0.0, 0.5204998778130465, 0.9661051464753108,
      0.999593047982555}},
    {OpKind::Floor, {-3.0, -1.0, 0.0, 0.0, 1.0, 2.0}},
    {OpKind::Ceil, {-2.0, -0.0, 0.0, 1.0, 2.0, 3.0}},
    {OpKind::Round, {-2.0, -0.0, 0.0, 0.0, 2.0, 2.0}},
};

TEST(ElementwiseUnary, FloatOpsMatchFloat64ReferenceInEveryFloatDtype) {
  for (const UnaryCase& c : kUnaryCases) {
    SCOPED_TRACE(std::string(op_name(c.op)));
    // f64 is computed natively; the others are the f64 value rounded once to the dtype, so
    // they equal the reference rounded to that dtype (within 1 ulp of numpy's libm).
    EXPECT_TRUE(all_close(run(c.op, {fvec(DType::f64, kUnaryInputs)}), fvec(DType::f64, c.want),
                          1e-14, 0.0));
    EXPECT_TRUE(all_close(run(c.op, {fvec(DType::f32, kUnaryInputs)}), fvec(DType::f32, c.want),
                          1.2e-7, 0.0));
    EXPECT_TRUE(
        all_close(run(c.op, {fvec(DType::f16, kUnaryInputs)}), fvec(DType::f16, c.want), 0.0, 0.0));
    EXPECT_TRUE(all_close(run(c.op, {fvec(DType::bf16, kUnaryInputs)}), fvec(DType::bf16, c.want),
                          0.0, 0.0));
  }
}

TEST(ElementwiseUnary, F16ResultsAreRoundedOnceFromDouble) {
  // Inputs found by searching all f16 values with numpy: rounding the float64 result to f16
  // directly gives the first value; going through f32 first would give the second.
  //   exp(0.007297515869140625) = 1.007324207626408 -> 1.0068359375 (via f32: 1.0078125)
  //   sin(0.2093505859375) = 0.20782470890336813 -> 0.2078857421875 (via f32: 0.207763671875)
  //   log(0.005340576171875) = -5.232421734475666 -> -5.23046875 (via f32: -5.234375)
  EXPECT_EQ(run(OpKind::Exp, {fvec(DType::f16, {0.007297515869140625})}).get_f64(0), 1.0068359375);
  EXPECT_EQ(run(OpKind::Sin, {fvec(DType::f16, {0.2093505859375})}).get_f64(0), 0.2078857421875);
  EXPECT_EQ(run(OpKind::Log, {fvec(DType::f16, {0.005340576171875})}).get_f64(0), -5.23046875);
}

TEST(ElementwiseUnary, OverflowAndEdgeValues) {
  // exp(100) = 2.6881171418161356e43 (math.exp) fits f64, overflows f32; exp(12) > 65504.
  EXPECT_EQ(run(OpKind::Exp, {fvec(DType::f64, {100})}).get_f64(0), 2.6881171418161356e43);
  EXPECT_EQ(run(OpKind::Exp, {fvec(DType::f32, {100})}).get_f64(0), kInf);
  EXPECT_EQ(run(OpKind::Exp, {fvec(DType::f16, {12})}).get_f64(0), kInf);
  // Accurate near 0 (math.expm1 / math.log1p): naive exp(x)-1 would lose most digits.
  EXPECT_NEAR(run(OpKind::Expm1, {fvec(DType::f64, {1e-10})}).get_f64(0), 1.00000000005e-10, 1e-25);
  EXPECT_NEAR(run(OpKind::Log1p, {fvec(DType::f64, {1e-10})}).get_f64(0), 9.999999999500001e-11,
              1e-25);
  // sqrt(-0) = -0 and rsqrt(-0) = -inf keep the sign; log(0) = -inf.
  Tensor s = run(OpKind::Sqrt, {fvec(DType::f32, {-0.0})});
  EXPECT_EQ(s.get_f64(0), 0.0);
  EXPECT_TRUE(std::signbit(s.get_f64(0)));
  EXPECT_EQ(run(OpKind::Rsqrt, {fvec(DType::f32, {-0.0})}).get_f64(0), -kInf);
  EXPECT_EQ(run(OpKind::Log, {fvec(DType::bf16, {0.0})}).get_f64(0), -kInf);
  // logistic saturates without NaN; tanh too.
  EXPECT_TRUE(same(run(OpKind::Logistic, {fvec(DType::f32, {-1000, 1000, kNaN})}),
                   fvec(DType::f32, {0, 1, kNaN})));
  EXPECT_TRUE(
      same(run(OpKind::Tanh, {fvec(DType::f16, {-1000, 1000})}), fvec(DType::f16, {-1, 1})));
  // ceil(-0.5) = -0.
  EXPECT_TRUE(std::signbit(run(OpKind::Ceil, {fvec(DType::f32, {-0.5})}).get_f64(0)));
}

TEST(ElementwiseUnary, RoundIsHalfToEven) {
  std::vector<double> x = {-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 2.4, 2.6};
  std::vector<double> want = {-4, -2, -2, -0.0, 0, 2, 2, 4, 2, 3};  // np.round
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64})
    EXPECT_TRUE(same(run(OpKind::Round, {fvec(t, x)}), fvec(t, want))) << dtype_name(t);
  EXPECT_TRUE(std::signbit(run(OpKind::Round, {fvec(DType::f32, {-0.5})}).get_f64(0)));
}

TEST(ElementwiseUnary, NegAbsFloat) {
  EXPECT_TRUE(same(run(OpKind::Neg, {fvec(DType::bf16, {1.5, -2, 0})}),
                   fvec(DType::bf16, {-1.5, 2, -0.0})));
  EXPECT_TRUE(std::signbit(run(OpKind::Neg, {fvec(DType::f32, {0.0})}).get_f64(0)));
  EXPECT_TRUE(same(run(OpKind::Abs, {fvec(DType::f16, {-1.5, 2, -kInf, kNaN})}),
                   fvec(DType::f16, {1.5, 2, kInf, kNaN})));
  EXPECT_FALSE(std::signbit(run(OpKind::Abs, {fvec(DType::f64, {-0.0})}).get_f64(0)));
}

TEST(ElementwiseUnary, NegAbsIntegersWrap) {
  // jax: lax.neg(int8[-128, 5]) = [-128, -5]; lax.abs(int8 -128) = -128; uint8 neg wraps.
  EXPECT_EQ(ints(run(OpKind::Neg, {ivec(DType::i8, {-128, 5})})), (std::vector<int64_t>{-128, -5}));
  EXPECT_EQ(ints(run(OpKind::Neg, {ivec(DType::u8, {5, 0, 255})})),
            (std::vector<int64_t>{251, 0, 1}));
  EXPECT_EQ(ints(run(OpKind::Neg, {ivec(DType::i64, {kI64Min, 7})})),
            (std::vector<int64_t>{kI64Min, -7}));
  EXPECT_EQ(ints(run(OpKind::Abs, {ivec(DType::i8, {-128, -5, 5})})),
            (std::vector<int64_t>{-128, 5, 5}));
  EXPECT_EQ(ints(run(OpKind::Abs, {ivec(DType::i32, {kI32Min, -3})})),
            (std::vector<int64_t>{kI32Min, 3}));
  EXPECT_EQ(ints(run(OpKind::Abs, {ivec(DType::i64, {kI64Min, -k2p53 - 1})})),
            (std::vector<int64_t>{kI64Min, k2p53 + 1}));
  EXPECT_EQ(ints(run(OpKind::Abs, {ivec(DType::u8, {200})})), (std::vector<int64_t>{200}));
}

TEST(ElementwiseUnary, Sign) {
  // jax: lax.sign(f32[-0., nan, -3.5, 2., 0.]) = [-0., nan, -1., 1., 0.]
  Tensor s = run(OpKind::Sign, {fvec(DType::f32, {-0.0, kNaN, -3.5, 2.0, 0.0, -kInf})});
  EXPECT_TRUE(same(s, fvec(DType::f32, {0.0, kNaN, -1, 1, 0, -1})));
  EXPECT_TRUE(std::signbit(s.get_f64(0)));
  EXPECT_FALSE(std::signbit(s.get_f64(4)));
  EXPECT_TRUE(same(run(OpKind::Sign, {fvec(DType::bf16, {-7, 0.25})}), fvec(DType::bf16, {-1, 1})));
  EXPECT_EQ(ints(run(OpKind::Sign, {ivec(DType::i32, {-5, 0, 7, kI32Min})})),
            (std::vector<int64_t>{-1, 0, 1, -1}));
  EXPECT_EQ(ints(run(OpKind::Sign, {ivec(DType::u8, {0, 200})})), (std::vector<int64_t>{0, 1}));
}

TEST(ElementwiseUnary, NotIsLogicalOnBoolAndBitwiseOnIntegers) {
  // jax: bitwise_not(int8[5, -1]) = [-6, 0]; uint8[5, 0] -> [250, 255].
  EXPECT_EQ(ints(run(OpKind::Not, {ivec(DType::bool_, {1, 0})})), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(ints(run(OpKind::Not, {ivec(DType::i8, {5, -1})})), (std::vector<int64_t>{-6, 0}));
  EXPECT_EQ(ints(run(OpKind::Not, {ivec(DType::u8, {5, 0})})), (std::vector<int64_t>{250, 255}));
  EXPECT_EQ(ints(run(OpKind::Not, {ivec(DType::i64, {0, kI64Max})})),
            (std::vector<int64_t>{-1, kI64Min}));
}

// ---------------------------------------------------------------- convert

Tensor convert(const Tensor& x, DType to) { return run(OpKind::Convert, {x}, {{"dtype", to}}); }

TEST(ElementwiseConvert, FloatToIntTruncatesAndSaturates) {
  // jax: f32[3e9, -3e9, nan, -2.7, 2.7].astype(int32) = [2147483647, -2147483648, 0, -2, 2]
  EXPECT_EQ(ints(convert(fvec(DType::f32, {3e9, -3e9, kNaN, -2.7, 2.7}), DType::i32)),
            (std::vector<int64_t>{kI32Max, kI32Min, 0, -2, 2}));
  // jax: f32[-5, 300, 254.9] -> uint8 [0, 255, 254]; -> int8 [-5, 127, ...]
  EXPECT_EQ(ints(convert(fvec(DType::f32, {-5, 300, 254.9}), DType::u8)),
            (std::vector<int64_t>{0, 255, 254}));
  EXPECT_EQ(ints(convert(fvec(DType::bf16, {-5, 300, -300}), DType::i8)),
            (std::vector<int64_t>{-5, 127, -128}));
  // jax: f64[1e19, -1e19, inf, -inf] -> int64 saturates.
  EXPECT_EQ(ints(convert(fvec(DType::f64, {1e19, -1e19, kInf, -kInf}), DType::i64)),
            (std::vector<int64_t>{kI64Max, kI64Min, kI64Max, kI64Min}));
}

TEST(ElementwiseConvert, FloatToNarrowFloatRoundsToNearestEven) {
  // jax: f64[2049, 2051, 70000, 65519, 65520, 1e-8] -> f16 [2048, 2052, inf, 65504, inf, 0]
  EXPECT_TRUE(same(convert(fvec(DType::f64, {2049, 2051, 70000, 65519, 65520, 1e-8}), DType::f16),
                   fvec(DType::f16, {2048, 2052, kInf, 65504, kInf, 0})));
  // 1 + 2^-8 + 2^-40 lies just above the bf16 midpoint 1 + 2^-8, so it rounds up to
  // 1 + 2^-7 (by hand); rounding through f32 first would make it a tie and give 1.
  EXPECT_EQ(convert(fvec(DType::f64, {1 + std::ldexp(1, -8) + std::ldexp(1, -40)}), DType::bf16)
                .get_f64(0),
            1 + std::ldexp(1, -7));
  // bf16 max is (2 - 2^-7) 2^127 = 3.3895313892515355e38; the overflow midpoint is about
  // 3.3962e38, so 3.39e38 stays finite and 3.4e38 becomes inf.
  EXPECT_TRUE(same(convert(fvec(DType::f64, {-3.39e38, 3.4e38}), DType::bf16),
                   fvec(DType::bf16, {-3.3895313892515355e38, kInf})));
}

TEST(ElementwiseConvert, IntToIntWrapsAndToBoolIsNonzero) {
  // jax: int32[300, -129, 128] -> int8 [44, 127, -128]; int32[-1, 256] -> uint8 [255, 0].
  EXPECT_EQ(ints(convert(ivec(DType::i32, {300, -129, 128}), DType::i8)),
            (std::vector<int64_t>{44, 127, -128}));
  EXPECT_EQ(ints(convert(ivec(DType::i32, {-1, 256}), DType::u8)), (std::vector<int64_t>{255, 0}));
  EXPECT_EQ(ints(convert(ivec(DType::u8, {255}), DType::i8)), (std::vector<int64_t>{-1}));
  EXPECT_EQ(ints(convert(ivec(DType::i8, {-1}), DType::i64)), (std::vector<int64_t>{-1}));
  EXPECT_EQ(ints(convert(ivec(DType::i64, {k2p53 + 1}), DType::i32)), (std::vector<int64_t>{1}));
  // jax: f32[nan, -0., 0.5, 0.] -> bool [T, F, T, F]; int32[256, 0, -1] -> bool [T, F, T].
  EXPECT_EQ(ints(convert(fvec(DType::f32, {kNaN, -0.0, 0.5, 0.0}), DType::bool_)),
            (std::vector<int64_t>{1, 0, 1, 0}));
  EXPECT_EQ(ints(convert(ivec(DType::i32, {256, 0, -1}), DType::bool_)),
            (std::vector<int64_t>{1, 0, 1}));
  EXPECT_TRUE(same(convert(ivec(DType::bool_, {1, 0}), DType::bf16), fvec(DType::bf16, {1, 0})));
  EXPECT_EQ(ints(convert(ivec(DType::bool_, {1, 0}), DType::u8)), (std::vector<int64_t>{1, 0}));
}

TEST(ElementwiseConvert, LargeIntToFloatRoundsOnce) {
  // 2^60 + 2^36 + 1 is just above the f32 midpoint 2^60 + 2^36 (f32 ulp there is 2^37), so
  // the correct f32 is 2^60 + 2^37 (jax int64 -> float32 agrees). Rounding via double first
  // would land on the midpoint and tie to 2^60.
  int64_t v = (int64_t{1} << 60) + (int64_t{1} << 36) + 1;
  EXPECT_EQ(convert(ivec(DType::i64, {v, -v}), DType::f32).get_f64(0),
            std::ldexp(1, 60) + std::ldexp(1, 37));
  EXPECT_EQ(convert(ivec(DType::i64, {v, -v}), DType::f32).get_f64(1),
            -(std::ldexp(1, 60) + std::ldexp(1, 37)));
  // Same for bf16 (ulp 2^53 at 2^60): 2^60 + 2^52 + 1 -> 2^60 + 2^53 (by hand; jax on CPU
  // gives 2^60 here because it converts through f32 — rlx pins a single rounding).
  int64_t w = (int64_t{1} << 60) + (int64_t{1} << 52) + 1;
  EXPECT_EQ(convert(ivec(DType::i64, {w}), DType::bf16).get_f64(0),
            std::ldexp(1, 60) + std::ldexp(1, 53));
  // To f64 the usual correctly rounded conversion; INT64_MIN is exact.
  EXPECT_EQ(convert(ivec(DType::i64, {kI64Min, k2p53 + 1}), DType::f64).get_f64(0),
            -std::ldexp(1, 63));
  EXPECT_EQ(convert(ivec(DType::i64, {kI64Min, k2p53 + 1}), DType::f64).get_f64(1),
            std::ldexp(1, 53));
  EXPECT_EQ(convert(ivec(DType::i32, {70000, -65519}), DType::f16).get_f64(0), kInf);
  EXPECT_EQ(convert(ivec(DType::i32, {70000, -65519}), DType::f16).get_f64(1), -65504);
}

// ---------------------------------------------------------------- binary arithmetic

TEST(ElementwiseBinary, FloatArithmeticRoundsOnceToTheDtype) {
  // numpy float16: 2048 + 1 = 2048 and 2048 + 3 = 2052 (ties to even); 0.1 + 0.2 -> 0.2998046875.
  EXPECT_TRUE(
      same(run(OpKind::Add, {fvec(DType::f16, {2048, 2048, 0.1}), fvec(DType::f16, {1, 3, 0.2})}),
           fvec(DType::f16, {2048, 2052, 0.2998046875})));
  // ml_dtypes bfloat16: 256 + 1 = 256, 256 + 3 = 260.
  EXPECT_TRUE(same(run(OpKind::Add, {fvec(DType::bf16, {256, 256}), fvec(DType::bf16, {1, 3})}),
                   fvec(DType::bf16, {256, 260})));
  // numpy float32: 0.1f + 0.2f = 0.30000001192092896.
  EXPECT_EQ(run(OpKind::Add, {fvec(DType::f32, {0.1}), fvec(DType::f32, {0.2})}).get_f64(0),
            0.30000001192092896);
  EXPECT_TRUE(same(run(OpKind::Sub, {fvec(DType::f32, {1e8, 1.5}), fvec(DType::f32, {-1, 2})}),
                   fvec(DType::f32, {1e8, -0.5})));
  EXPECT_TRUE(same(run(OpKind::Mul, {fvec(DType::f16, {300, -1.5}), fvec(DType::f16, {300, 2})}),
                   fvec(DType::f16, {kInf, -3})));
  EXPECT_TRUE(
      same(run(OpKind::Div, {fvec(DType::f32, {1, -1, 0, 7}), fvec(DType::f32, {0, 0, 0, 2})}),
           fvec(DType::f32, {kInf, -kInf, kNaN, 3.5})));
  EXPECT_TRUE(same(run(OpKind::Div, {fvec(DType::f64, {1}), fvec(DType::f64, {3})}),
                   fvec(DType::f64, {1.0 / 3.0})));
}

TEST(ElementwiseBinary, IntegerArithmeticWraps) {
  EXPECT_EQ(
      ints(run(OpKind::Add, {ivec(DType::i8, {100, -100, 127}), ivec(DType::i8, {100, -100, 1})})),
      (std::vector<int64_t>{-56, 56, -128}));
  EXPECT_EQ(ints(run(OpKind::Add, {ivec(DType::u8, {200, 0}), ivec(DType::u8, {100, 255})})),
            (std::vector<int64_t>{44, 255}));
  EXPECT_EQ(ints(run(OpKind::Add, {ivec(DType::i32, {kI32Max}), ivec(DType::i32, {1})})),
            (std::vector<int64_t>{kI32Min}));
  EXPECT_EQ(ints(run(OpKind::Add, {ivec(DType::i64, {kI64Max, k2p53}), ivec(DType::i64, {1, 1})})),
            (std::vector<int64_t>{kI64Min, k2p53 + 1}));
  EXPECT_EQ(ints(run(OpKind::Sub, {ivec(DType::u8, {5}), ivec(DType::u8, {10})})),
            (std::vector<int64_t>{251}));
  EXPECT_EQ(ints(run(OpKind::Sub, {ivec(DType::i64, {kI64Min}), ivec(DType::i64, {1})})),
            (std::vector<int64_t>{kI64Max}));
  // 46341^2 = 2147488281 wraps to -2147479015 in i32; (2^32+1)^2 mod 2^64 = 8589934593.
  EXPECT_EQ(
      ints(run(OpKind::Mul, {ivec(DType::i32, {65536, 46341}), ivec(DType::i32, {65536, 46341})})),
      (std::vector<int64_t>{0, -2147479015}));
  int64_t big = (int64_t{1} << 32) + 1;
  EXPECT_EQ(ints(run(OpKind::Mul, {ivec(DType::i64, {big}), ivec(DType::i64, {big})})),
            (std::vector<int64_t>{8589934593}));
  EXPECT_EQ(ints(run(OpKind::Mul, {ivec(DType::i8, {16}), ivec(DType::i8, {16})})),
            (std::vector<int64_t>{0}));
  EXPECT_EQ(ints(run(OpKind::Mul, {ivec(DType::u8, {200}), ivec(DType::u8, {2})})),
            (std::vector<int64_t>{144}));
}

TEST(ElementwiseBinary, IntegerDivisionEdges) {
  // jax lax.div: int32[7, -7, 7, INT_MIN] / [-2, 2, 0, -1] = [-3, -3, -1, INT_MIN].
  EXPECT_EQ(ints(run(OpKind::Div,
                     {ivec(DType::i32, {7, -7, 7, kI32Min}), ivec(DType::i32, {-2, 2, 0, -1})})),
            (std::vector<int64_t>{-3, -3, -1, kI32Min}));
  EXPECT_EQ(ints(run(OpKind::Div, {ivec(DType::i8, {-128, -128}), ivec(DType::i8, {-1, 0})})),
            (std::vector<int64_t>{-128, -1}));
  EXPECT_EQ(ints(run(OpKind::Div, {ivec(DType::i64, {kI64Min, 5}), ivec(DType::i64, {-1, 0})})),
            (std::vector<int64_t>{kI64Min, -1}));
  // jax: uint8[7, 0] / [0, 0] = [255, 255]; 200 / 7 = 28.
  EXPECT_EQ(ints(run(OpKind::Div, {ivec(DType::u8, {7, 0, 200}), ivec(DType::u8, {0, 0, 7})})),
            (std::vector<int64_t>{255, 255, 28}));
}

TEST(ElementwiseBinary, RemainderHasTheSignOfTheDividend) {
  // jax lax.rem: int32[7, -7, 7, INT_MIN, -7] rem [-2, 2, 0, -1, 0] = [1, -1, 7, 0, -7].
  EXPECT_EQ(ints(run(OpKind::Rem, {ivec(DType::i32, {7, -7, 7, kI32Min, -7}),
                                   ivec(DType::i32, {-2, 2, 0, -1, 0})})),
            (std::vector<int64_t>{1, -1, 7, 0, -7}));
  EXPECT_EQ(ints(run(OpKind::Rem, {ivec(DType::i64, {kI64Min}), ivec(DType::i64, {-1})})),
            (std::vector<int64_t>{0}));
  EXPECT_EQ(ints(run(OpKind::Rem, {ivec(DType::u8, {200, 9}), ivec(DType::u8, {7, 0})})),
            (std::vector<int64_t>{4, 9}));
  // jax: f32[-7.5, 5, 7.5] rem [2, 0, -2] = [-1.5, nan, 1.5].
  EXPECT_TRUE(
      same(run(OpKind::Rem, {fvec(DType::f32, {-7.5, 5, 7.5}), fvec(DType::f32, {2, 0, -2})}),
           fvec(DType::f32, {-1.5, kNaN, 1.5})));
  EXPECT_TRUE(same(run(OpKind::Rem, {fvec(DType::f16, {5.5}), fvec(DType::f16, {-2})}),
                   fvec(DType::f16, {1.5})));
}

TEST(ElementwiseBinary, Pow) {
  // C pow: 2^0.5 = f32(sqrt 2), (-8)^(1/3) = nan, 0^-1 = inf, 2^10 = 1024.
  EXPECT_TRUE(same(run(OpKind::Pow, {fvec(DType::f32, {2, -8, 0, 2}),
                                     fvec(DType::f32, {0.5, 1.0 / 3.0, -1, 10})}),
                   fvec(DType::f32, {1.4142135381698608, kNaN, kInf, 1024})));
  EXPECT_TRUE(same(run(OpKind::Pow, {fvec(DType::f16, {10}), fvec(DType::f16, {5})}),
                   fvec(DType::f16, {kInf})));
  // jnp.power(int32[3,2,2,1,-1,-1,0,5], [4,31,-1,-5,-3,-4,-1,0]) = [81,INT_MIN,0,1,-1,1,0,1].
  EXPECT_EQ(ints(run(OpKind::Pow, {ivec(DType::i32, {3, 2, 2, 1, -1, -1, 0, 5}),
                                   ivec(DType::i32, {4, 31, -1, -5, -3, -4, -1, 0})})),
            (std::vector<int64_t>{81, kI32Min, 0, 1, -1, 1, 0, 1}));
  // jnp.power(int8[2, 3], [7, 5]) = [-128, -13]; int64 3^40 = -6289078614652622815.
  EXPECT_EQ(ints(run(OpKind::Pow, {ivec(DType::i8, {2, 3}), ivec(DType::i8, {7, 5})})),
            (std::vector<int64_t>{-128, -13}));
  EXPECT_EQ(ints(run(OpKind::Pow, {ivec(DType::i64, {3}), ivec(DType::i64, {40})})),
            (std::vector<int64_t>{-6289078614652622815}));
  EXPECT_EQ(ints(run(OpKind::Pow, {ivec(DType::u8, {2, 3}), ivec(DType::u8, {8, 5})})),
            (std::vector<int64_t>{0, 243}));
}

TEST(ElementwiseBinary, MaxMinPropagateNaNAndKeepIntegersExact) {
  Tensor x = fvec(DType::f32, {kNaN, 1, 2, -1});
  Tensor y = fvec(DType::f32, {1, kNaN, -3, -1});
  EXPECT_TRUE(same(run(OpKind::Max, {x, y}), fvec(DType::f32, {kNaN, kNaN, 2, -1})));
  EXPECT_TRUE(same(run(OpKind::Min, {x, y}), fvec(DType::f32, {kNaN, kNaN, -3, -1})));
  EXPECT_TRUE(same(run(OpKind::Max, {fvec(DType::bf16, {-kInf}), fvec(DType::bf16, {-1})}),
                   fvec(DType::bf16, {-1})));
  // Values that a double round-trip would merge.
  Tensor a = ivec(DType::i64, {k2p53 + 1, -5}), b = ivec(DType::i64, {k2p53, -7});
  EXPECT_EQ(ints(run(OpKind::Max, {a, b})), (std::vector<int64_t>{k2p53 + 1, -5}));
  EXPECT_EQ(ints(run(OpKind::Min, {a, b})), (std::vector<int64_t>{k2p53, -7}));
  EXPECT_EQ(ints(run(OpKind::Max, {ivec(DType::u8, {200, 3}), ivec(DType::u8, {100, 4})})),
            (std::vector<int64_t>{200, 4}));
  EXPECT_EQ(ints(run(OpKind::Min, {ivec(DType::i8, {-128, 3}), ivec(DType::i8, {127, 4})})),
            (std::vector<int64_t>{-128, 3}));
}

TEST(ElementwiseBinary, LogicalAndBitwise) {
  Tensor p = ivec(DType::bool_, {1, 1, 0, 0}), q = ivec(DType::bool_, {1, 0, 1, 0});
  EXPECT_EQ(ints(run(OpKind::And, {p, q})), (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(ints(run(OpKind::Or, {p, q})), (std::vector<int64_t>{1, 1, 1, 0}));
  EXPECT_EQ(ints(run(OpKind::Xor, {p, q})), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(run(OpKind::And, {p, q}).dtype(), DType::bool_);
  // Python ints: -1&5=5, 12&10=8, -128&127=0; | gives -1, 14, -1; ^ gives -6, 6, -1.
  Tensor a = ivec(DType::i8, {-1, 12, -128}), b = ivec(DType::i8, {5, 10, 127});
  EXPECT_EQ(ints(run(OpKind::And, {a, b})), (std::vector<int64_t>{5, 8, 0}));
  EXPECT_EQ(ints(run(OpKind::Or, {a, b})), (std::vector<int64_t>{-1, 14, -1}));
  EXPECT_EQ(ints(run(OpKind::Xor, {a, b})), (std::vector<int64_t>{-6, 6, -1}));
  EXPECT_EQ(ints(run(OpKind::Xor, {ivec(DType::u8, {255, 12}), ivec(DType::u8, {5, 10})})),
            (std::vector<int64_t>{250, 6}));
  EXPECT_EQ(ints(run(OpKind::Or, {ivec(DType::i64, {k2p53}), ivec(DType::i64, {1})})),
            (std::vector<int64_t>{k2p53 + 1}));
}

TEST(ElementwiseCompare, FloatsFollowIeee) {
  Tensor x = fvec(DType::f32, {1, kNaN, 2, -0.0});
  Tensor y = fvec(DType::f32, {1, kNaN, 3, 0.0});
  EXPECT_EQ(ints(run(OpKind::Eq, {x, y})), (std::vector<int64_t>{1, 0, 0, 1}));
  EXPECT_EQ(ints(run(OpKind::Ne, {x, y})), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(ints(run(OpKind::Lt, {x, y})), (std::vector<int64_t>{0, 0, 1, 0}));
  EXPECT_EQ(ints(run(OpKind::Le, {x, y})), (std::vector<int64_t>{1, 0, 1, 1}));
  EXPECT_EQ(ints(run(OpKind::Gt, {x, y})), (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(ints(run(OpKind::Ge, {x, y})), (std::vector<int64_t>{1, 0, 0, 1}));
  EXPECT_EQ(run(OpKind::Ge, {x, y}).dtype(), DType::bool_);
  EXPECT_EQ(ints(run(OpKind::Lt, {fvec(DType::f16, {65504}), fvec(DType::f16, {kInf})})),
            (std::vector<int64_t>{1}));
}

TEST(ElementwiseCompare, IntegersAndBool) {
  Tensor a = ivec(DType::i64, {k2p53 + 1, -1}), b = ivec(DType::i64, {k2p53, -1});
  EXPECT_EQ(ints(run(OpKind::Eq, {a, b})), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(ints(run(OpKind::Gt, {a, b})), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(ints(run(OpKind::Le, {a, b})), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(ints(run(OpKind::Gt, {ivec(DType::u8, {200}), ivec(DType::u8, {100})})),
            (std::vector<int64_t>{1}));
  EXPECT_EQ(ints(run(OpKind::Lt, {ivec(DType::i8, {-128}), ivec(DType::i8, {127})})),
            (std::vector<int64_t>{1}));
  EXPECT_EQ(ints(run(OpKind::Lt, {ivec(DType::bool_, {0, 1}), ivec(DType::bool_, {1, 1})})),
            (std::vector<int64_t>{1, 0}));
}

// ---------------------------------------------------------------- select, clamp

TEST(ElementwiseSelect, BroadcastsAllThreeAndCopiesBits) {
  Tensor pred = Tensor::from_ints(DType::bool_, Shape{2, 1}, std::vector<int64_t>{1, 0});
  Tensor on_true = fvec(DType::f32, {1, -0.0, kNaN});
  Tensor on_false = fscalar(DType::f32, 7);
  Tensor r = run(OpKind::Select, {pred, on_true, on_false});
  ASSERT_EQ(r.shape(), (Shape{2, 3}));
  EXPECT_TRUE(same(r, Tensor::from_doubles(DType::f32, Shape{2, 3},
                                           std::vector<double>{1, -0.0, kNaN, 7, 7, 7})));
  EXPECT_TRUE(std::signbit(r.get_f64(1)));
  Tensor ri = run(OpKind::Select, {ivec(DType::bool_, {0, 1}), ivec(DType::i64, {k2p53 + 1, 1}),
                                   ivec(DType::i64, {-1, k2p53 + 3})});
  EXPECT_EQ(ints(ri), (std::vector<int64_t>{-1, 1}));
  Tensor rb = run(OpKind::Select, {ivec(DType::bool_, {0, 1}), fvec(DType::bf16, {1.5, 2.5}),
                                   fvec(DType::bf16, {-3, -4})});
  EXPECT_TRUE(same(rb, fvec(DType::bf16, {-3, 2.5})));
}

TEST(ElementwiseClamp, ClampsWithNaNPropagationAndBroadcasting) {
  // jax: lax.clamp(0., f32[nan, -1, 0.5, 7], 1.) = [nan, 0, 0.5, 1].
  EXPECT_TRUE(same(run(OpKind::Clamp, {fscalar(DType::f32, 0), fvec(DType::f32, {kNaN, -1, 0.5, 7}),
                                       fscalar(DType::f32, 1)}),
                   fvec(DType::f32, {kNaN, 0, 0.5, 1})));
  Tensor lo = ivec(DType::i32, {0, 10, -5});
  Tensor x =
      Tensor::from_ints(DType::i32, Shape{2, 3}, std::vector<int64_t>{-3, 3, 9, 100, -100, 0});
  Tensor hi = Tensor::from_ints(DType::i32, Shape{}, std::vector<int64_t>{5});
  Tensor r = run(OpKind::Clamp, {lo, x, hi});
  ASSERT_EQ(r.shape(), (Shape{2, 3}));
  // Column 1 has lo 10 > hi 5, so min(max(x, 10), 5) = 5 everywhere in it.
  EXPECT_EQ(ints(r), (std::vector<int64_t>{0, 5, 5, 5, 5, 0}));
  EXPECT_EQ(ints(run(OpKind::Clamp,
                     {ivec(DType::u8, {10}), ivec(DType::u8, {3, 200}), ivec(DType::u8, {150})})),
            (std::vector<int64_t>{10, 150}));
  EXPECT_TRUE(same(run(OpKind::Clamp, {fscalar(DType::f16, -1), fvec(DType::f16, {-kInf, 0.3}),
                                       fscalar(DType::f16, 1)}),
                   fvec(DType::f16, {-1, 0.3})));
}

// ---------------------------------------------------------------- activations

const std::vector<double> kActInputs = {-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0};

TEST(ElementwiseActivations, ValuesMatchClosedForms) {
  // numpy float64 of the formulas in ops.def (jax.nn.* in f32 agrees to 1e-7).
  struct Case {
    OpKind op;
    AttrMap attrs;
    std::vector<double> want;
  };
  std::vector<Case> cases = {
      {OpKind::Gelu,
       {},
       {-0.00404969409489031, -0.15865525393145707, -0.15426876936299344, 0.0, 0.34573123063700656,
        0.8413447460685429, 2.99595030590511}},
      {OpKind::GeluTanh,
       {},
       {-0.0036373920817729943, -0.1588080093917233, -0.15428599017485606, 0.0, 0.34571400982514394,
        0.8411919906082768, 2.996362607918227}},
      {OpKind::Silu,
       {},
       {-0.14227761953270035, -0.2689414213699951, -0.1887703343990727, 0.0, 0.3112296656009273,
        0.7310585786300049, 2.8577223804672998}},
      {OpKind::Softplus,
       {},
       {0.04858735157374206, 0.31326168751822286, 0.4740769841801067, 0.6931471805599453,
        0.9740769841801067, 1.3132616875182228, 3.048587351573742}},
      {OpKind::LeakyRelu, {}, {-0.03, -0.01, -0.005, 0.0, 0.5, 1.0, 3.0}},
      {OpKind::LeakyRelu, {{"alpha", 0.2}}, {-0.6000000000000001, -0.2, -0.1, 0.0, 0.5, 1.0, 3.0}},
      {OpKind::Relu, {}, {0, 0, 0, 0, 0.5, 1, 3}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(op_name(c.op)));
    EXPECT_TRUE(all_close(run(c.op, {fvec(DType::f64, kActInputs)}, c.attrs),
                          fvec(DType::f64, c.want), 1e-14, 1e-300));
    EXPECT_TRUE(all_close(run(c.op, {fvec(DType::f32, kActInputs)}, c.attrs),
                          fvec(DType::f32, c.want), 1.2e-7, 0.0));
    EXPECT_TRUE(same(run(c.op, {fvec(DType::f16, kActInputs)}, c.attrs), fvec(DType::f16, c.want)));
    EXPECT_TRUE(
        same(run(c.op, {fvec(DType::bf16, kActInputs)}, c.attrs), fvec(DType::bf16, c.want)));
  }
}

TEST(ElementwiseActivations, LargeInputsStayFinite) {
  // softplus(-100) = log1p(exp(-100)) = 3.720075976020836e-44 (math.log1p), an f32 subnormal.
  EXPECT_TRUE(same(run(OpKind::Softplus, {fvec(DType::f32, {100, -100, 1000, -1000})}),
                   fvec(DType::f32, {100, 3.720075976020836e-44, 1000, 0})));
  EXPECT_TRUE(all_close(run(OpKind::Softplus, {fvec(DType::f64, {-100})}),
                        fvec(DType::f64, {3.720075976020836e-44}), 1e-14, 0.0));
  EXPECT_TRUE(
      same(run(OpKind::Softplus, {fvec(DType::f16, {100, -100})}), fvec(DType::f16, {100, 0})));
  EXPECT_TRUE(
      same(run(OpKind::Silu, {fvec(DType::f32, {1000, -1000})}), fvec(DType::f32, {1000, 0})));
  EXPECT_TRUE(same(run(OpKind::Gelu, {fvec(DType::f32, {30, -30})}), fvec(DType::f32, {30, 0})));
  EXPECT_TRUE(
      same(run(OpKind::GeluTanh, {fvec(DType::f16, {30, -30})}), fvec(DType::f16, {30, 0})));
}

TEST(ElementwiseActivations, ReluOnIntegersAndNaN) {
  EXPECT_EQ(ints(run(OpKind::Relu, {ivec(DType::i32, {-5, 0, 7, kI32Min})})),
            (std::vector<int64_t>{0, 0, 7, 0}));
  EXPECT_EQ(ints(run(OpKind::Relu, {ivec(DType::i8, {-128, 127})})),
            (std::vector<int64_t>{0, 127}));
  EXPECT_EQ(ints(run(OpKind::Relu, {ivec(DType::u8, {0, 255})})), (std::vector<int64_t>{0, 255}));
  EXPECT_TRUE(same(run(OpKind::Relu, {fvec(DType::f32, {kNaN, -kInf, kInf})}),
                   fvec(DType::f32, {kNaN, 0, kInf})));
  EXPECT_TRUE(same(run(OpKind::LeakyRelu, {fvec(DType::f32, {kNaN, -kInf})}),
                   fvec(DType::f32, {kNaN, -kInf})));
}

// ---------------------------------------------------------------- shapes

TEST(ElementwiseShapes, BroadcastsNumpyStyle) {
  Tensor x =
      Tensor::from_doubles(DType::f32, Shape{2, 1, 3}, std::vector<double>{0, 1, 2, 3, 4, 5});
  Tensor y = Tensor::from_doubles(DType::f32, Shape{4, 1}, std::vector<double>{0, 10, 20, 30});
  // numpy: (arange(6).reshape(2,1,3) - (arange(4)*10).reshape(4,1)).ravel()
  std::vector<double> want = {0, 1, 2, -10, -9, -8, -20, -19, -18, -30, -29, -28,
                              3, 4, 5, -7,  -6, -5, -17, -16, -15, -27, -26, -25};
  Tensor r = run(OpKind::Sub, {x, y});
  ASSERT_EQ(r.shape(), (Shape{2, 4, 3}));
  EXPECT_TRUE(same(r, Tensor::from_doubles(DType::f32, Shape{2, 4, 3}, want)));
  // Swapped operands: the result negates, so operand order matters through broadcasting.
  Tensor rs = run(OpKind::Sub, {y, x});
  for (double& w : want) w = -w;
  EXPECT_TRUE(same(rs, Tensor::from_doubles(DType::f32, Shape{2, 4, 3}, want)));
  Tensor c = run(OpKind::Lt, {x, y});
  EXPECT_EQ(c.type(), (TensorType{DType::bool_, Shape{2, 4, 3}}));
  EXPECT_EQ(c.get_i64(3), 1);  // 0 < 10
  EXPECT_EQ(c.get_i64(0), 0);  // 0 < 0
}

TEST(ElementwiseShapes, RankZero) {
  Tensor r = run(OpKind::Add, {fscalar(DType::f32, 1.5), fscalar(DType::f32, 2.25)});
  EXPECT_EQ(r.type(), (TensorType{DType::f32, Shape{}}));
  EXPECT_EQ(r.get_f64(0), 3.75);
  Tensor b = run(OpKind::Mul, {fscalar(DType::f16, 2), fvec(DType::f16, {1, 3})});
  EXPECT_TRUE(same(b, fvec(DType::f16, {2, 6})));
  EXPECT_EQ(run(OpKind::Exp, {fscalar(DType::f64, 0)}).get_f64(0), 1.0);
  Tensor s = run(OpKind::Select, {Tensor::from_ints(DType::bool_, Shape{}, std::vector<int64_t>{1}),
                                  fscalar(DType::f32, 4), fscalar(DType::f32, 5)});
  EXPECT_EQ(s.type(), (TensorType{DType::f32, Shape{}}));
  EXPECT_EQ(s.get_f64(0), 4.0);
}

TEST(ElementwiseShapes, SizeZero) {
  Tensor e = Tensor(DType::f32, Shape{0, 3});
  EXPECT_EQ(run(OpKind::Add, {e, fvec(DType::f32, {1, 2, 3})}).shape(), (Shape{0, 3}));
  EXPECT_EQ(run(OpKind::Add, {e, Tensor(DType::f32, Shape{1, 1})}).shape(), (Shape{0, 3}));
  EXPECT_EQ(run(OpKind::Exp, {e}).shape(), (Shape{0, 3}));
  EXPECT_EQ(run(OpKind::Convert, {e}, {{"dtype", DType::i8}}).type(),
            (TensorType{DType::i8, Shape{0, 3}}));
  EXPECT_EQ(
      run(OpKind::Eq, {Tensor(DType::i32, Shape{2, 0}), Tensor(DType::i32, Shape{2, 1})}).type(),
      (TensorType{DType::bool_, Shape{2, 0}}));
  EXPECT_EQ(run(OpKind::Select,
                {Tensor(DType::bool_, Shape{0}), fscalar(DType::f32, 1), fscalar(DType::f32, 2)})
                .shape(),
            (Shape{0}));
  EXPECT_EQ(run(OpKind::Clamp, {fscalar(DType::f32, 0), e, fscalar(DType::f32, 1)}).shape(),
            (Shape{0, 3}));
  EXPECT_EQ(run(OpKind::Gelu, {e}).shape(), (Shape{0, 3}));
}

// ---------------------------------------------------------------- builder and inference

TEST(ElementwiseBuilder, BinaryBuildersPromoteLikeJnp) {
  Graph g;
  Value i = g.input("i", DType::i32, {2});
  Value f = g.input("f", DType::f32, {2});
  Value s = g.add(i, f);
  EXPECT_EQ(g.type(s), (TensorType{DType::f32, Shape{2}}));
  const Node& add = g.node(s);
  ASSERT_EQ(add.op, OpKind::Add);
  const Node& cvt = g.node(add.operands[0]);
  EXPECT_EQ(cvt.op, OpKind::Convert);
  EXPECT_EQ(cvt.attrs.get_dtype("dtype"), DType::f32);
  EXPECT_EQ(cvt.operands[0], i);
  EXPECT_EQ(add.operands[1], f);
  g.set_outputs({s});
  EXPECT_TRUE(g.verify().empty());
  auto out = evaluate(g, {{"i", ivec(DType::i32, {3, -4})}, {"f", fvec(DType::f32, {0.5, 0.25})}});
  EXPECT_TRUE(same(out[0], fvec(DType::f32, {3.5, -3.75})));

  // jnp.promote_types: int8 + uint8 -> int16 (i32 in rlx); bf16 * f16 -> f32; bool < int.
  EXPECT_EQ(g.dtype(g.add(g.input("a", DType::i8, {}), g.input("b", DType::u8, {}))), DType::i32);
  EXPECT_EQ(g.dtype(g.mul(g.input("c", DType::bf16, {}), g.input("d", DType::f16, {}))),
            DType::f32);
  Value p = g.input("p", DType::bool_, {3});
  EXPECT_EQ(g.dtype(g.lt(g.input("e", DType::i64, {2}), f)), DType::bool_);
  EXPECT_EQ(g.dtype(g.select(p, g.input("t", DType::i32, {3}), g.input("u", DType::f16, {3}))),
            DType::f16);
  EXPECT_EQ(g.dtype(g.clamp(g.scalar(0, DType::i32), g.input("v", DType::f32, {3}),
                            g.scalar(1, DType::i8))),
            DType::f32);
}

TEST(ElementwiseBuilder, InferenceAndSchemas) {
  Graph g;
  Value x = g.input("x", DType::f16, {2, 1});
  Value y = g.input("y", DType::f16, {3});
  EXPECT_EQ(g.type(g.eq(x, y)), (TensorType{DType::bool_, Shape{2, 3}}));
  EXPECT_EQ(g.type(g.convert(x, DType::u8)), (TensorType{DType::u8, Shape{2, 1}}));
  EXPECT_EQ(g.type(g.logical_not(g.input("n", DType::u8, {4}))), (TensorType{DType::u8, Shape{4}}));
  // leaky_relu fills its default alpha.
  Value l = g.emit1(OpKind::LeakyRelu, {x});
  EXPECT_EQ(g.node(l).attrs.get_float("alpha"), 0.01);
  EXPECT_EQ(g.node(g.leaky_relu(x, 0.2)).attrs.get_float("alpha"), 0.2);
  EXPECT_TRUE(g.verify().empty());
  // The same inference backs every op of the family.
  for (OpKind k : {OpKind::Neg, OpKind::Exp, OpKind::Round, OpKind::Not, OpKind::Convert,
                   OpKind::Relu, OpKind::LeakyRelu, OpKind::Add, OpKind::Rem, OpKind::Xor,
                   OpKind::Ge, OpKind::Select, OpKind::Clamp}) {
    EXPECT_NE(op_info(k).infer, nullptr) << op_name(k);
    EXPECT_TRUE(has_evaluator(k)) << op_name(k);
  }
}

TEST(ElementwiseErrors, MismatchedDtypesThroughEmit) {
  Graph g;
  Value i = g.input("i", DType::i32, {2});
  Value f = g.input("f", DType::f32, {2});
  size_t before = g.nodes().size();
  std::string msg = error_of([&] { g.emit1(OpKind::Add, {i, f}); });
  EXPECT_NE(msg.find("op 'add'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("operands must have the same dtype, got i32 and f32"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("operand types: i32[2], f32[2]"), std::string::npos) << msg;
  EXPECT_EQ(g.nodes().size(), before);
  msg = error_of([&] { g.emit1(OpKind::Select, {g.input("p", DType::bool_, {2}), f, i}); });
  EXPECT_NE(msg.find("same dtype, got f32 and i32"), std::string::npos) << msg;
  msg = error_of([&] { g.emit1(OpKind::Clamp, {i, f, f}); });
  EXPECT_NE(msg.find("same dtype, got i32 and f32"), std::string::npos) << msg;
}

TEST(ElementwiseErrors, ShapesThatDoNotBroadcast) {
  Graph g;
  Value a = g.input("a", DType::f32, {2, 3});
  Value b = g.input("b", DType::f32, {4});
  std::string msg = error_of([&] { g.add(a, b); });
  EXPECT_NE(msg.find("shapes [2,3] and [4] do not broadcast"), std::string::npos) << msg;
  msg = error_of(
      [&] { g.select(g.input("p", DType::bool_, {3}), a, g.input("c", DType::f32, {2})); });
  EXPECT_NE(msg.find("do not broadcast"), std::string::npos) << msg;
  msg = error_of([&] { g.add(g.input("z", DType::f32, {0}), g.input("w", DType::f32, {2})); });
  EXPECT_NE(msg.find("shapes [0] and [2] do not broadcast"), std::string::npos) << msg;
}

TEST(ElementwiseErrors, DtypeClassesAreEnforced) {
  Graph g;
  Value i = g.input("i", DType::i32, {2});
  Value f = g.input("f", DType::f32, {2});
  Value b = g.input("b", DType::bool_, {2});
  struct Case {
    std::function<void()> build;
    std::string want;
  };
  std::vector<Case> cases = {
      {[&] { g.exp(i); }, "op 'exp'"},
      {[&] { g.exp(i); }, "operand must be a float type (f32, f16, bf16, f64), got i32"},
      {[&] { g.round(b); }, "must be a float type (f32, f16, bf16, f64), got bool"},
      {[&] { g.gelu(i); }, "must be a float type (f32, f16, bf16, f64), got i32"},
      {[&] { g.leaky_relu(i); }, "must be a float type (f32, f16, bf16, f64), got i32"},
      {[&] { g.relu(b); }, "must be a float or integer type (not bool), got bool"},
      {[&] { g.neg(b); }, "must be a float or integer type (not bool), got bool"},
      {[&] { g.logical_not(f); }, "must be bool or an integer type, got f32"},
      {[&] { g.add(b, b); }, "operands must be a float or integer type (not bool), got bool"},
      {[&] { g.pow(b, b); }, "got bool"},
      {[&] { g.logical_and(f, f); }, "operands must be bool or an integer type, got f32"},
      {[&] { g.select(f, f, f); }, "predicate (operand 0) must be bool, got f32"},
      {[&] { g.clamp(b, b, b); }, "operands must be a float or integer type (not bool), got bool"},
      {[&] { g.emit1(OpKind::Convert, {f}); }, "missing required attribute 'dtype'"},
  };
  for (const Case& c : cases) {
    std::string msg = error_of(c.build);
    EXPECT_NE(msg.find(c.want), std::string::npos)
        << "want '" << c.want << "', got '" << msg << "'";
  }
  // Compare ops accept every dtype, bool included.
  EXPECT_EQ(g.dtype(g.eq(b, b)), DType::bool_);
}

TEST(ElementwiseErrors, LeakyReluAlphaMustBeAFloat) {
  Graph g;
  Value x = g.input("x", DType::f32, {2});
  std::string msg = error_of([&] {
    g.emit1(OpKind::LeakyRelu, {x}, {{"alpha", std::string("0.1")}});
  });
  EXPECT_NE(msg.find("op 'leaky_relu'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("attribute 'alpha' must be a float, got a string"), std::string::npos) << msg;
  msg = error_of([&] { g.emit1(OpKind::LeakyRelu, {x}, {{"slope", 0.1}}); });
  EXPECT_NE(msg.find("unknown attribute 'slope' (known: alpha)"), std::string::npos) << msg;
  msg = error_of([&] { g.emit1(OpKind::Relu, {x}, {{"alpha", 0.1}}); });
  EXPECT_NE(msg.find("unknown attribute 'alpha' (known: none)"), std::string::npos) << msg;
}

}  // namespace
}  // namespace rlx
