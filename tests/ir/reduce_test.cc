// Reductions (reduce_*, argmax/argmin, cumsum, top_k): inference, error messages and values,
// including empty-reduction identities, NaN handling, integer wrap and f16/bf16 rounding.
// Expected numbers are worked by hand or computed with numpy 2.x / jax 0.4.38 (as noted).
#include <gtest/gtest.h>

#include <cmath>
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

using Ints = std::vector<int64_t>;
using Doubles = std::vector<double>;
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor t_of(DType t, Shape s, Doubles v) { return Tensor::from_doubles(t, s, v); }

// numpy: arange(24).reshape(2,3,4) * 0.5 - 3.
Tensor sample() {
  Tensor t(DType::f32, {2, 3, 4});
  for (int64_t i = 0; i < t.numel(); ++i) t.set_f64(i, static_cast<double>(i) * 0.5 - 3);
  return t;
}

Doubles values(const Tensor& t) {
  Doubles v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.get_f64(i));
  return v;
}

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.get_i64(i));
  return v;
}

Tensor reduce(OpKind op, const Tensor& x, Ints axes, bool keepdims = false) {
  return evaluate_op(op, {x}, {{"axes", axes}, {"keepdims", keepdims}})[0];
}

Tensor arg(OpKind op, const Tensor& x, int64_t axis, bool keepdims = false,
           DType index = DType::i32) {
  return evaluate_op(op, {x}, {{"axis", axis}, {"keepdims", keepdims}, {"index_dtype", index}})[0];
}

Tensor cumsum(const Tensor& x, int64_t axis, bool exclusive = false, bool reverse = false) {
  return evaluate_op(OpKind::CumSum, {x},
                     {{"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}})[0];
}

std::vector<Tensor> top_k(const Tensor& x, int64_t k) {
  return evaluate_op(OpKind::TopK, {x}, {{"k", k}});
}

// The message of the rlx::Error that emitting `op` on an input of type `x` throws.
std::string error_of(OpKind op, TensorType x, AttrMap attrs) {
  try {
    Graph g;
    g.emit(op, {g.input("x", x.dtype, x.shape)}, attrs);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST(Reduce, SumOverAxesKeepdimsAndNegativeAxes) {
  // numpy: x.sum(axis=1) and x.sum(axis=(0, 2)) of the sample.
  Tensor s1 = reduce(OpKind::ReduceSum, sample(), {1});
  EXPECT_EQ(s1.type().to_string(), "f32[2,4]");
  EXPECT_EQ(values(s1), (Doubles{-3, -1.5, 0, 1.5, 15, 16.5, 18, 19.5}));
  Tensor k = reduce(OpKind::ReduceSum, sample(), {-2}, true);
  EXPECT_EQ(k.type().to_string(), "f32[2,1,4]");
  EXPECT_EQ(values(k), values(s1));
  Tensor s02 = reduce(OpKind::ReduceSum, sample(), {2, -3});
  EXPECT_EQ(s02.shape(), (Shape{3}));
  EXPECT_EQ(values(s02), (Doubles{6, 22, 38}));
  // All axes: a scalar (sum of 0.5 i - 3 for i < 24 = 0.5 * 276 - 72 = 66).
  Tensor all = reduce(OpKind::ReduceSum, sample(), {0, 1, 2});
  EXPECT_EQ(all.type().to_string(), "f32[]");
  EXPECT_EQ(all.get_f64(0), 66);
  Tensor all_k = reduce(OpKind::ReduceSum, sample(), {0, 1, 2}, true);
  EXPECT_EQ(all_k.shape(), (Shape{1, 1, 1}));
}

TEST(Reduce, EmptyAxesListIsIdentity) {
  for (OpKind op : {OpKind::ReduceSum, OpKind::ReduceMax, OpKind::ReduceMin, OpKind::ReduceProd,
                    OpKind::ReduceMean}) {
    Tensor r = reduce(op, sample(), {});
    EXPECT_TRUE(r.bitwise_equal(sample())) << op_name(op);
    EXPECT_TRUE(reduce(op, sample(), {}, true).bitwise_equal(sample())) << op_name(op);
  }
  // Rank 0 operand with no axes.
  Tensor s = t_of(DType::f64, {}, {2.5});
  EXPECT_EQ(reduce(OpKind::ReduceSum, s, {}).get_f64(0), 2.5);
}

TEST(Reduce, MaxMinProdMean) {
  // numpy: sample().max(axis=-1) = [[-1.5,0.5,2.5],[4.5,6.5,8.5]]; .min(axis=0) = first half.
  EXPECT_EQ(values(reduce(OpKind::ReduceMax, sample(), {-1})),
            (Doubles{-1.5, 0.5, 2.5, 4.5, 6.5, 8.5}));
  EXPECT_EQ(values(reduce(OpKind::ReduceMin, sample(), {0})),
            (Doubles{-3, -2.5, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5}));
  Tensor p = t_of(DType::f32, {2, 3}, {1.5, 2, -3, 0.5, 4, 2});
  EXPECT_EQ(values(reduce(OpKind::ReduceProd, p, {1})), (Doubles{-9, 4}));
  // numpy: sample().mean(axis=(1,2)) = [-0.25, 5.75].
  Tensor m = reduce(OpKind::ReduceMean, sample(), {1, 2});
  EXPECT_EQ(m.type().to_string(), "f32[2]");
  EXPECT_EQ(values(m), (Doubles{-0.25, 5.75}));
  // f64 mean of 1/3 steps: (0 + 1 + 2) / 3 = 1 exactly.
  EXPECT_EQ(reduce(OpKind::ReduceMean, t_of(DType::f64, {3}, {0, 1, 2}), {0}).get_f64(0), 1.0);
}

TEST(Reduce, LowPrecisionSumsRoundOnce) {
  // 2048 + 1 + 1 = 2050 is exact in f16; summing in f16 would stick at 2048 (2049 ties to even).
  Tensor h = reduce(OpKind::ReduceSum, t_of(DType::f16, {3}, {2048, 1, 1}), {0});
  EXPECT_EQ(h.type().to_string(), "f16[]");
  EXPECT_EQ(h.get_f64(0), 2050);
  // bf16: 256 + 1 + 1 = 258 (spacing 2 at 256); the mean 86 is exact too.
  Tensor b = t_of(DType::bf16, {3}, {256, 1, 1});
  EXPECT_EQ(reduce(OpKind::ReduceSum, b, {0}).get_f64(0), 258);
  EXPECT_EQ(reduce(OpKind::ReduceMean, b, {0}).get_f64(0), 86);
  // 1 + 1/3 rounded once to bf16: 1.3359375 (bf16 neighbours 1.328125 and 1.3359375).
  Tensor b3 = t_of(DType::bf16, {2}, {1, 1.0 / 3});  // 1/3 rounds to 0.333984375 in bf16
  EXPECT_EQ(reduce(OpKind::ReduceSum, b3, {0}).get_f64(0), 1.3359375);
}

TEST(Reduce, IntegersWrap) {
  // By hand, modulo 2^bits: i8 100*3 = 300 -> 44; u8 200 + 100 = 300 -> 44;
  // i32 65536 * 65536 * 3 = 3 * 2^32 -> 0; i64 max + 1 -> min.
  EXPECT_EQ(reduce(OpKind::ReduceSum, t_of(DType::i8, {3}, {100, 100, 100}), {0}).get_i64(0), 44);
  EXPECT_EQ(reduce(OpKind::ReduceSum, t_of(DType::u8, {2}, {200, 100}), {0}).get_i64(0), 44);
  EXPECT_EQ(reduce(OpKind::ReduceProd, t_of(DType::i32, {3}, {65536, 65536, 3}), {0}).get_i64(0),
            0);
  Tensor big = Tensor::from_ints(DType::i64, {2},
                                 std::vector<int64_t>{std::numeric_limits<int64_t>::max(), 1});
  EXPECT_EQ(reduce(OpKind::ReduceSum, big, {0}).get_i64(0), std::numeric_limits<int64_t>::min());
  // i8 max/min stay exact.
  Tensor i8 = t_of(DType::i8, {2, 2}, {-128, 5, 127, -3});
  EXPECT_EQ(ints(reduce(OpKind::ReduceMax, i8, {1})), (std::vector<int64_t>{5, 127}));
  EXPECT_EQ(ints(reduce(OpKind::ReduceMin, i8, {0})), (std::vector<int64_t>{-128, -3}));
  // i64 values beyond 2^53 compare exactly.
  Tensor near = Tensor::from_ints(DType::i64, {2},
                                  std::vector<int64_t>{(int64_t{1} << 60) + 1, int64_t{1} << 60});
  EXPECT_EQ(reduce(OpKind::ReduceMax, near, {0}).get_i64(0), (int64_t{1} << 60) + 1);
}

TEST(Reduce, SizeZeroIdentities) {
  Tensor e(DType::f32, {2, 0});
  EXPECT_EQ(values(reduce(OpKind::ReduceSum, e, {1})), (Doubles{0, 0}));
  EXPECT_EQ(values(reduce(OpKind::ReduceProd, e, {1})), (Doubles{1, 1}));
  EXPECT_EQ(values(reduce(OpKind::ReduceMax, e, {1})), (Doubles{-kInf, -kInf}));
  EXPECT_EQ(values(reduce(OpKind::ReduceMin, e, {-1})), (Doubles{kInf, kInf}));
  Tensor mean = reduce(OpKind::ReduceMean, e, {1}, true);
  EXPECT_EQ(mean.shape(), (Shape{2, 1}));
  EXPECT_TRUE(std::isnan(mean.get_f64(0)) && std::isnan(mean.get_f64(1)));
  // Reducing the non-empty axis of an empty tensor gives an empty result.
  EXPECT_EQ(reduce(OpKind::ReduceSum, e, {0}).shape(), (Shape{0}));
  // f16 identities are representable: -inf / +inf.
  EXPECT_EQ(reduce(OpKind::ReduceMax, Tensor(DType::f16, {0}), {0}).get_f64(0), -kInf);
  // Integer max/min identities are the dtype's min/max.
  EXPECT_EQ(reduce(OpKind::ReduceMax, Tensor(DType::i32, {0}), {0}).get_i64(0), -2147483648LL);
  EXPECT_EQ(reduce(OpKind::ReduceMin, Tensor(DType::i32, {0}), {0}).get_i64(0), 2147483647);
  EXPECT_EQ(reduce(OpKind::ReduceMax, Tensor(DType::i8, {0}), {0}).get_i64(0), -128);
  EXPECT_EQ(reduce(OpKind::ReduceMin, Tensor(DType::u8, {0}), {0}).get_i64(0), 255);
  EXPECT_EQ(reduce(OpKind::ReduceMax, Tensor(DType::u8, {0}), {0}).get_i64(0), 0);
  EXPECT_EQ(reduce(OpKind::ReduceMin, Tensor(DType::i64, {0}), {0}).get_i64(0),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(reduce(OpKind::ReduceProd, Tensor(DType::i8, {0}), {0}).get_i64(0), 1);
}

TEST(Reduce, NanPropagatesThroughMaxAndMin) {
  Tensor x = t_of(DType::f32, {2, 3}, {1, NAN, 3, NAN, -kInf, 2});
  Tensor mx = reduce(OpKind::ReduceMax, x, {1});
  Tensor mn = reduce(OpKind::ReduceMin, x, {1});
  EXPECT_TRUE(std::isnan(mx.get_f64(0)) && std::isnan(mx.get_f64(1)));
  EXPECT_TRUE(std::isnan(mn.get_f64(0)) && std::isnan(mn.get_f64(1)));
  // Columns without NaN reduce normally; inf is an ordinary value.
  EXPECT_EQ(values(reduce(OpKind::ReduceMin, t_of(DType::f64, {3}, {kInf, 2, -kInf}), {0})),
            (Doubles{-kInf}));
  EXPECT_TRUE(std::isnan(reduce(OpKind::ReduceSum, x, {0}).get_f64(0)));
}

TEST(Reduce, Errors) {
  TensorType x{DType::f32, {2, 3}};
  EXPECT_HAS(error_of(OpKind::ReduceSum, x, {{"axes", Ints{1, -1}}}), "axes repeats axis 1");
  EXPECT_HAS(error_of(OpKind::ReduceMax, x, {{"axes", Ints{2}}}),
             "axes entry 2 is out of range for rank 2");
  EXPECT_HAS(error_of(OpKind::ReduceSum, {DType::bool_, {2}}, {{"axes", Ints{0}}}),
             "operand dtype must be a float or integer type (not bool), got bool");
  EXPECT_HAS(error_of(OpKind::ReduceMean, {DType::i32, {2}}, {{"axes", Ints{0}}}),
             "operand dtype must be a float type (f32, f16, bf16, f64), got i32");
  EXPECT_HAS(error_of(OpKind::ReduceProd, x, {}), "missing required attribute 'axes'");
}

TEST(ArgMax, FirstIndexOfTheExtremum) {
  // jnp.argmax([[1,3,3,2],[5,5,1,0]], axis=1) = [1,0]; jnp.argmin([[1,3,1,2],[5,5,0,0]], 1) =
  // [0,2].
  Tensor a = t_of(DType::i32, {2, 4}, {1, 3, 3, 2, 5, 5, 1, 0});
  Tensor am = arg(OpKind::ArgMax, a, 1);
  EXPECT_EQ(am.type().to_string(), "i32[2]");
  EXPECT_EQ(ints(am), (std::vector<int64_t>{1, 0}));
  Tensor b = t_of(DType::i32, {2, 4}, {1, 3, 1, 2, 5, 5, 0, 0});
  EXPECT_EQ(ints(arg(OpKind::ArgMin, b, -1)), (std::vector<int64_t>{0, 2}));
  // jnp.argmax([[3,1,4],[1,5,9]], axis=0) = [0,1,1]; keepdims on axis -1 gives [2,1].
  Tensor y = t_of(DType::f32, {2, 3}, {3, 1, 4, 1, 5, 9});
  EXPECT_EQ(ints(arg(OpKind::ArgMax, y, 0)), (std::vector<int64_t>{0, 1, 1}));
  Tensor k = arg(OpKind::ArgMax, y, -1, true, DType::i64);
  EXPECT_EQ(k.type().to_string(), "i64[2,1]");
  EXPECT_EQ(ints(k), (std::vector<int64_t>{2, 2}));
}

TEST(ArgMax, NanCountsAsTheExtremum) {
  // jnp.argmax([1, nan, inf, nan]) = 1; jnp.argmin([-inf, 2, nan]) = 2.
  EXPECT_EQ(arg(OpKind::ArgMax, t_of(DType::f32, {4}, {1, NAN, kInf, NAN}), 0).get_i64(0), 1);
  EXPECT_EQ(arg(OpKind::ArgMin, t_of(DType::f64, {3}, {-kInf, 2, NAN}), 0).get_i64(0), 2);
  EXPECT_EQ(arg(OpKind::ArgMax, t_of(DType::bf16, {3}, {NAN, 1, NAN}), 0).get_i64(0), 0);
}

TEST(ArgMax, BoolAndSingleElementAxes) {
  // jnp.argmax([False, True, True]) = 1; jnp.argmin([True, False, False]) = 1.
  EXPECT_EQ(arg(OpKind::ArgMax, t_of(DType::bool_, {3}, {0, 1, 1}), 0).get_i64(0), 1);
  EXPECT_EQ(arg(OpKind::ArgMin, t_of(DType::bool_, {3}, {1, 0, 0}), 0).get_i64(0), 1);
  Tensor one = arg(OpKind::ArgMin, t_of(DType::u8, {2, 1}, {7, 9}), 1);
  EXPECT_EQ(ints(one), (std::vector<int64_t>{0, 0}));
  // An empty non-reduced dim: an empty result.
  EXPECT_EQ(arg(OpKind::ArgMax, Tensor(DType::f32, {0, 3}), 1).shape(), (Shape{0}));
}

TEST(ArgMax, Errors) {
  EXPECT_HAS(error_of(OpKind::ArgMax, {DType::f32, {2, 0}}, {{"axis", int64_t{1}}}),
             "argmax over an empty axis: axis 1 of [2,0] has size 0");
  EXPECT_HAS(error_of(OpKind::ArgMin, {DType::f32, {0}}, {{"axis", int64_t{-1}}}),
             "argmin over an empty axis");
  EXPECT_HAS(error_of(OpKind::ArgMax, {DType::f32, {2}}, {{"axis", int64_t{1}}}),
             "axis 1 is out of range for rank 1");
  EXPECT_HAS(error_of(OpKind::ArgMax, {DType::f32, {2}},
                      {{"axis", int64_t{0}}, {"index_dtype", DType::u8}}),
             "index_dtype must be i32 or i64, got u8");
}

TEST(CumSum, InclusiveExclusiveReverse) {
  // jax.lax.cumsum([1,2,3,4]) = [1,3,6,10]; reverse=True gives [10,9,7,4].
  Tensor c = t_of(DType::f32, {4}, {1, 2, 3, 4});
  EXPECT_EQ(values(cumsum(c, 0)), (Doubles{1, 3, 6, 10}));
  EXPECT_EQ(values(cumsum(c, 0, false, true)), (Doubles{10, 9, 7, 4}));
  // Exclusive: each output leaves its own element out.
  EXPECT_EQ(values(cumsum(c, 0, true)), (Doubles{0, 1, 3, 6}));
  EXPECT_EQ(values(cumsum(c, -1, true, true)), (Doubles{9, 7, 4, 0}));
}

TEST(CumSum, AlongAnAxisOfAMatrix) {
  // jax.lax.cumsum(arange(6).reshape(2,3), axis=0) = [0,1,2,3,5,7]; axis=1: [0,1,3,3,7,12].
  Tensor m = t_of(DType::i32, {2, 3}, {0, 1, 2, 3, 4, 5});
  EXPECT_EQ(ints(cumsum(m, 0)), (std::vector<int64_t>{0, 1, 2, 3, 5, 7}));
  Tensor c1 = cumsum(m, 1);
  EXPECT_EQ(c1.type().to_string(), "i32[2,3]");
  EXPECT_EQ(ints(c1), (std::vector<int64_t>{0, 1, 3, 3, 7, 12}));
}

TEST(CumSum, RoundsEachOutputOnceAndWrapsIntegers) {
  // f16 prefix sums of [2048,1,1] are 2048, 2049, 2050: 2049 ties to even (2048), 2050 is exact
  // (summing in f16 would give 2048 for all three).
  EXPECT_EQ(values(cumsum(t_of(DType::f16, {3}, {2048, 1, 1}), 0)), (Doubles{2048, 2048, 2050}));
  // i8: 100, 200 -> -56, 300 -> 44.
  EXPECT_EQ(ints(cumsum(t_of(DType::i8, {3}, {100, 100, 100}), 0)),
            (std::vector<int64_t>{100, -56, 44}));
  EXPECT_EQ(cumsum(Tensor(DType::f32, {0, 2}), 0).shape(), (Shape{0, 2}));
}

TEST(CumSum, Errors) {
  EXPECT_HAS(error_of(OpKind::CumSum, {DType::bool_, {2}}, {{"axis", int64_t{0}}}),
             "must be a float or integer type (not bool), got bool");
  EXPECT_HAS(error_of(OpKind::CumSum, {DType::f32, {2}}, {{"axis", int64_t{-2}}}),
             "axis -2 is out of range for rank 1");
}

TEST(TopK, DescendingWithTiesByLowerIndex) {
  // jax.lax.top_k([[3,1,3,2,5],[0,0,-1,7,0]], 3) = ([[5,3,3],[7,0,0]], [[4,0,2],[3,0,1]]).
  auto r = top_k(t_of(DType::i32, {2, 5}, {3, 1, 3, 2, 5, 0, 0, -1, 7, 0}), 3);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].type().to_string(), "i32[2,3]");
  EXPECT_EQ(r[1].type().to_string(), "i32[2,3]");
  EXPECT_EQ(ints(r[0]), (std::vector<int64_t>{5, 3, 3, 7, 0, 0}));
  EXPECT_EQ(ints(r[1]), (std::vector<int64_t>{4, 0, 2, 3, 0, 1}));
}

TEST(TopK, FloatOrderNanAndSignedZero) {
  // jax.lax.top_k([1, inf, nan, -2, nan], 4) = ([nan, nan, inf, 1], [2, 4, 1, 0]).
  auto r = top_k(t_of(DType::f32, {5}, {1, kInf, NAN, -2, NAN}), 4);
  EXPECT_TRUE(std::isnan(r[0].get_f64(0)) && std::isnan(r[0].get_f64(1)));
  EXPECT_EQ(r[0].get_f64(2), kInf);
  EXPECT_EQ(r[0].get_f64(3), 1);
  EXPECT_EQ(ints(r[1]), (std::vector<int64_t>{2, 4, 1, 0}));
  // jax.lax.top_k([0., -0., 1., -0., 0.], 5) = ([1, 0, 0, -0, -0], [2, 0, 4, 1, 3]).
  auto z = top_k(t_of(DType::bf16, {5}, {0.0, -0.0, 1, -0.0, 0.0}), 5);
  EXPECT_EQ(ints(z[1]), (std::vector<int64_t>{2, 0, 4, 1, 3}));
  EXPECT_TRUE(std::signbit(z[0].get_f64(3)));
  EXPECT_FALSE(std::signbit(z[0].get_f64(1)));
}

TEST(TopK, KZeroAndFullLength) {
  auto r = top_k(t_of(DType::f64, {2, 3}, {1, 2, 3, 4, 5, 6}), 0);
  EXPECT_EQ(r[0].type().to_string(), "f64[2,0]");
  EXPECT_EQ(r[1].type().to_string(), "i32[2,0]");
  auto full = top_k(t_of(DType::u8, {3}, {7, 255, 0}), 3);
  EXPECT_EQ(ints(full[0]), (std::vector<int64_t>{255, 7, 0}));
  EXPECT_EQ(ints(full[1]), (std::vector<int64_t>{1, 0, 2}));
  auto empty = top_k(Tensor(DType::f32, {2, 0}), 0);
  EXPECT_EQ(empty[0].shape(), (Shape{2, 0}));
}

TEST(TopK, BuilderAndErrors) {
  Graph g;
  auto [v, i] = g.top_k(g.input("x", DType::f16, {2, 8}), 4);
  EXPECT_EQ(g.type(v).to_string(), "f16[2,4]");
  EXPECT_EQ(g.type(i).to_string(), "i32[2,4]");
  EXPECT_HAS(error_of(OpKind::TopK, {DType::f32, {2, 5}}, {{"k", int64_t{6}}}),
             "k = 6 is out of range for last dim 5 of [2,5] (expected 0 <= k <= 5)");
  EXPECT_HAS(error_of(OpKind::TopK, {DType::f32, {5}}, {{"k", int64_t{-1}}}),
             "k = -1 is out of range");
  EXPECT_HAS(error_of(OpKind::TopK, {DType::f32, {}}, {{"k", int64_t{0}}}), "rank >= 1");
  EXPECT_HAS(error_of(OpKind::TopK, {DType::bool_, {3}}, {{"k", int64_t{1}}}),
             "must be a float or integer type (not bool), got bool");
}

}  // namespace
}  // namespace rlx
