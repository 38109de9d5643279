// dot_general and matmul: inference (shapes, dtypes, error messages) and reference values.
// Expected numbers are worked by hand or computed with numpy 2.x / jax 0.4.38 (as noted).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "../common/test_util.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

using testing::error_of;

using Ints = std::vector<int64_t>;

Tensor t_of(DType t, Shape s, std::vector<double> v) { return Tensor::from_doubles(t, s, v); }

// Row-major 0, 1, 2, ... minus `offset`, as numpy's arange(n).reshape(shape) - offset.
Tensor arange(DType t, Shape s, double offset = 0) {
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) - offset;
  return Tensor::from_doubles(t, s, v);
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.get_f64(i));
  return v;
}

AttrMap dims(Ints lb, Ints rb, Ints lc, Ints rc) {
  return {{"lhs_batch", lb}, {"rhs_batch", rb}, {"lhs_contract", lc}, {"rhs_contract", rc}};
}

Tensor dot(const Tensor& l, const Tensor& r, AttrMap a) {
  return evaluate_op(OpKind::DotGeneral, {l, r}, a)[0];
}

std::string dot_error(TensorType l, TensorType r, AttrMap a) {
  return error_of([&] {
    Graph g;
    g.emit1(OpKind::DotGeneral, {g.input("l", l.dtype, l.shape), g.input("r", r.dtype, r.shape)},
            a);
  });
}

std::string matmul_error(TensorType x, TensorType y) {
  return error_of([&] {
    Graph g;
    g.emit1(OpKind::MatMul, {g.input("x", x.dtype, x.shape), g.input("y", y.dtype, y.shape)});
  });
}

TEST(DotGeneral, PlainMatrixProduct) {
  // [[1,2,3],[4,5,6]] @ [[1,0],[0,1],[1,1]] by hand.
  Tensor l = t_of(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor r = t_of(DType::f32, {3, 2}, {1, 0, 0, 1, 1, 1});
  Tensor out = dot(l, r, dims({}, {}, {1}, {0}));
  EXPECT_EQ(out.type().to_string(), "f32[2,2]");
  EXPECT_EQ(values(out), (std::vector<double>{4, 5, 10, 11}));
}

TEST(DotGeneral, BatchAndContractPermutation) {
  // lhs [2,3,4], rhs [2,4,5], batch (0,0), contract (2,1) -> [2,3,5].
  // jax.lax.dot_general(arange(24).reshape(2,3,4), arange(40).reshape(2,4,5) - 20,
  //                     (((2,),(1,)),((0,),(0,))))
  Tensor out = dot(arange(DType::f32, {2, 3, 4}), arange(DType::f32, {2, 4, 5}, 20),
                   dims({0}, {0}, {2}, {1}));
  EXPECT_EQ(out.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(values(out),
            (std::vector<double>{-50,  -44,  -38,  -32,  -26,  -250, -228, -206, -184, -162,
                                 -450, -412, -374, -336, -298, 430,  484,  538,  592,  646,
                                 550,  620,  690,  760,  830,  670,  756,  842,  928,  1014}));
}

TEST(DotGeneral, ContractOnDimZero) {
  // lhs^T @ rhs: jax.lax.dot_general(arange(6).reshape(3,2), arange(12).reshape(3,4),
  //                                  (((0,),(0,)),((),())))
  Tensor out = dot(arange(DType::f64, {3, 2}), arange(DType::f64, {3, 4}), dims({}, {}, {0}, {0}));
  EXPECT_EQ(out.type().to_string(), "f64[2,4]");
  EXPECT_EQ(values(out), (std::vector<double>{40, 46, 52, 58, 52, 61, 70, 79}));
}

TEST(DotGeneral, BatchDimNotLeadingAndNoRhsFreeDims) {
  // lhs [3,2,4] batch dim 1, rhs [4,2] batch dim 1; result [batch=2, lhs free=3].
  // jax.lax.dot_general(arange(24).reshape(3,2,4), arange(8).reshape(4,2),
  //                     (((2,),(0,)),((1,),(1,))))
  Tensor out =
      dot(arange(DType::f32, {3, 2, 4}), arange(DType::f32, {4, 2}), dims({1}, {1}, {2}, {0}));
  EXPECT_EQ(out.shape(), (Shape{2, 3}));
  EXPECT_EQ(values(out), (std::vector<double>{28, 124, 220, 98, 226, 354}));
}

TEST(DotGeneral, OuterProductAndEmptyContraction) {
  // No contracting dims: an outer product [2] x [3] -> [2,3].
  Tensor out =
      dot(t_of(DType::f32, {2}, {1, 2}), t_of(DType::f32, {3}, {3, 4, 5}), dims({}, {}, {}, {}));
  EXPECT_EQ(values(out), (std::vector<double>{3, 4, 5, 6, 8, 10}));
  // Contracting a size-0 dim sums nothing: zeros.
  Tensor z = dot(Tensor(DType::f32, {2, 0}), Tensor(DType::f32, {0, 3}), dims({}, {}, {1}, {0}));
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(values(z), std::vector<double>(6, 0.0));
}

TEST(DotGeneral, F16SumIsRoundedOnce) {
  // 2048 + 1 + 1 = 2050 exactly (representable in f16); accumulating in f16 would give 2048
  // because 2049 ties to the even 2048.
  Tensor out = dot(t_of(DType::f16, {3}, {2048, 1, 1}), t_of(DType::f16, {3}, {1, 1, 1}),
                   dims({}, {}, {0}, {0}));
  EXPECT_EQ(out.type().to_string(), "f16[]");
  EXPECT_EQ(out.get_f64(0), 2050.0);
  // bf16: 256 + 1 + 1 = 258 (bf16 spacing at 256 is 2).
  Tensor b = dot(t_of(DType::bf16, {3}, {256, 1, 1}), t_of(DType::bf16, {3}, {1, 1, 1}),
                 dims({}, {}, {0}, {0}));
  EXPECT_EQ(b.get_f64(0), 258.0);
}

TEST(DotGeneral, IntegersWrapToTheResultDtype) {
  // jax.lax.dot_general(int8 [[100,100]], int8 [[2],[2]]) = -112 (400 mod 256); with
  // preferred_element_type=int32 it is 400.
  Tensor l = t_of(DType::i8, {1, 2}, {100, 100});
  Tensor r = t_of(DType::i8, {2, 1}, {2, 2});
  EXPECT_EQ(dot(l, r, dims({}, {}, {1}, {0})).get_i64(0), -112);
  AttrMap a = dims({}, {}, {1}, {0});
  a.set("preferred", DType::i32);
  Tensor wide = dot(l, r, a);
  EXPECT_EQ(wide.type().to_string(), "i32[1,1]");
  EXPECT_EQ(wide.get_i64(0), 400);
  // i64 wraps without UB: 2^62 * 2 + 2^62 * 2 = 2^64 = 0 (mod 2^64).
  int64_t big = int64_t{1} << 62;
  Tensor l64 = Tensor::from_ints(DType::i64, {2}, std::vector<int64_t>{big, big});
  Tensor r64 = Tensor::from_ints(DType::i64, {2}, std::vector<int64_t>{2, 2});
  EXPECT_EQ(dot(l64, r64, dims({}, {}, {0}, {0})).get_i64(0), 0);
}

TEST(DotGeneral, PreferredF32KeepsTheExactSumOfBf16Operands) {
  // 1 + 2^-10 is exact in f32 but rounds to 1 in bf16; jax gives 1.0009766 with
  // preferred_element_type=float32.
  AttrMap a = dims({}, {}, {0}, {0});
  a.set("preferred", DType::f32);
  Tensor out =
      dot(t_of(DType::bf16, {2}, {1, std::ldexp(1.0, -10)}), t_of(DType::bf16, {2}, {1, 1}), a);
  EXPECT_EQ(out.type().to_string(), "f32[]");
  EXPECT_EQ(out.get_f64(0), 1.0 + std::ldexp(1.0, -10));
  // Integer operands with a float preferred dtype.
  a.set("preferred", DType::f64);
  Tensor f = dot(t_of(DType::i32, {2}, {3, 4}), t_of(DType::i32, {2}, {5, 6}), a);
  EXPECT_EQ(f.type().to_string(), "f64[]");
  EXPECT_EQ(f.get_f64(0), 39.0);
}

TEST(DotGeneral, PreferredIsAbsentUnlessGiven) {
  Graph g;
  Value l = g.input("l", DType::bf16, {2, 3});
  Value r = g.input("r", DType::bf16, {3});
  Value a = g.dot_general(l, r, {}, {}, {1}, {0});
  Value b = g.dot_general(l, r, {}, {}, {1}, {0}, DType::f32);
  EXPECT_EQ(g.type(a).to_string(), "bf16[2]");
  EXPECT_EQ(g.type(b).to_string(), "f32[2]");
  EXPECT_FALSE(g.node(a).attrs.has("preferred"));
  EXPECT_EQ(g.node(b).attrs.get_dtype("preferred"), DType::f32);
}

TEST(DotGeneral, Errors) {
  TensorType l{DType::f32, {2, 3}}, r{DType::f32, {4, 5}};
  std::string e = dot_error(l, r, dims({}, {}, {1}, {0}));
  EXPECT_NE(e.find("contracting dims differ in size: lhs dim 1 of [2,3] has size 3, rhs dim 0 "
                   "of [4,5] has size 4"),
            std::string::npos)
      << e;
  e = dot_error({DType::f32, {2, 3, 4}}, {DType::f32, {3, 4, 5}}, dims({0}, {0}, {2}, {1}));
  EXPECT_NE(e.find("batch dims differ in size: lhs dim 0 of [2,3,4] has size 2, rhs dim 0 of "
                   "[3,4,5] has size 3"),
            std::string::npos)
      << e;
  e = dot_error(l, {DType::f32, {3, 2}}, dims({0}, {}, {1}, {0}));
  EXPECT_NE(e.find("lhs_batch [0] and rhs_batch [] must have the same length"), std::string::npos)
      << e;
  e = dot_error(l, {DType::f32, {3, 3}}, dims({}, {}, {1}, {0, 1}));
  EXPECT_NE(e.find("must have the same length"), std::string::npos) << e;
  e = dot_error(l, {DType::f32, {3, 3}}, dims({}, {}, {2}, {0}));
  EXPECT_NE(e.find("dim 2 is out of range for lhs shape [2,3]"), std::string::npos) << e;
  e = dot_error(l, {DType::f32, {3, 3}}, dims({}, {}, {-1}, {0}));
  EXPECT_NE(e.find("dim -1 is out of range"), std::string::npos) << e;
  e = dot_error({DType::f32, {3, 3}}, {DType::f32, {3, 3}}, dims({1}, {0}, {1}, {1}));
  EXPECT_NE(e.find("lhs dim 1 appears more than once"), std::string::npos) << e;
  e = dot_error(l, {DType::f16, {3}}, dims({}, {}, {1}, {0}));
  EXPECT_NE(e.find("operands must have the same dtype, got f32 and f16"), std::string::npos) << e;
  e = dot_error({DType::bool_, {3}}, {DType::bool_, {3}}, dims({}, {}, {0}, {0}));
  EXPECT_NE(e.find("must be a float or integer type (not bool), got bool"), std::string::npos) << e;
  AttrMap a = dims({}, {}, {1}, {0});
  a.set("preferred", DType::i32);
  e = dot_error(l, {DType::f32, {3}}, a);
  EXPECT_NE(e.find("preferred dtype i32 is not allowed for f32 operands"), std::string::npos) << e;
  a.set("preferred", DType::bool_);
  e = dot_error({DType::i8, {2, 3}}, {DType::i8, {3}}, a);
  EXPECT_NE(e.find("preferred dtype bool is not allowed"), std::string::npos) << e;
}

TEST(MatMul, TwoD) {
  // numpy: arange(6).reshape(2,3) @ arange(6).reshape(3,2) = [[10,13],[28,40]].
  Tensor out =
      evaluate_op(OpKind::MatMul, {arange(DType::f32, {2, 3}), arange(DType::f32, {3, 2})})[0];
  EXPECT_EQ(out.type().to_string(), "f32[2,2]");
  EXPECT_EQ(values(out), (std::vector<double>{10, 13, 28, 40}));
}

TEST(MatMul, BroadcastsBatchDims) {
  // numpy: X = arange(24).reshape(3,1,2,4); Y = arange(120).reshape(5,4,6) % 7 - 3;
  // (X @ Y).shape = (3,5,2,6); spot values M[0,0,0,0]=10, M[2,4,1,5]=-134, M[1,3,0,2]=-24,
  // M[2,0,1,0]=70.
  Tensor y(DType::f32, {5, 4, 6});
  for (int64_t i = 0; i < y.numel(); ++i) y.set_f64(i, static_cast<double>(i % 7) - 3);
  Tensor m = evaluate_op(OpKind::MatMul, {arange(DType::f32, {3, 1, 2, 4}), y})[0];
  ASSERT_EQ(m.shape(), (Shape{3, 5, 2, 6}));
  auto at = [&](int64_t a, int64_t b, int64_t c, int64_t d) {
    return m.get_f64(((a * 5 + b) * 2 + c) * 6 + d);
  };
  EXPECT_EQ(at(0, 0, 0, 0), 10);
  EXPECT_EQ(at(2, 4, 1, 5), -134);
  EXPECT_EQ(at(1, 3, 0, 2), -24);
  EXPECT_EQ(at(2, 0, 1, 0), 70);
}

TEST(MatMul, OneDimensionalOperands) {
  // numpy: arange(3) @ [4,5,6] = 17 (a scalar); arange(3) @ arange(6).reshape(3,2) = [10,13];
  // arange(6).reshape(2,3) @ [1,-1,2] = [3,9].
  Tensor v =
      evaluate_op(OpKind::MatMul, {arange(DType::f64, {3}), t_of(DType::f64, {3}, {4, 5, 6})})[0];
  EXPECT_EQ(v.type().to_string(), "f64[]");
  EXPECT_EQ(v.get_f64(0), 17);
  Tensor a = evaluate_op(OpKind::MatMul, {arange(DType::f64, {3}), arange(DType::f64, {3, 2})})[0];
  EXPECT_EQ(a.shape(), (Shape{2}));
  EXPECT_EQ(values(a), (std::vector<double>{10, 13}));
  Tensor b = evaluate_op(OpKind::MatMul,
                         {arange(DType::f64, {2, 3}), t_of(DType::f64, {3}, {1, -1, 2})})[0];
  EXPECT_EQ(values(b), (std::vector<double>{3, 9}));
}

TEST(MatMul, OneDimensionalWithBatches) {
  // numpy: arange(12).reshape(2,2,3) @ [1,-1,2] = [[3,9],[15,21]];
  // [1,-1,2] @ arange(24).reshape(2,3,4) = [[12,14,16,18],[36,38,40,42]].
  Tensor a = evaluate_op(OpKind::MatMul,
                         {arange(DType::f32, {2, 2, 3}), t_of(DType::f32, {3}, {1, -1, 2})})[0];
  EXPECT_EQ(a.shape(), (Shape{2, 2}));
  EXPECT_EQ(values(a), (std::vector<double>{3, 9, 15, 21}));
  Tensor b = evaluate_op(OpKind::MatMul,
                         {t_of(DType::f32, {3}, {1, -1, 2}), arange(DType::f32, {2, 3, 4})})[0];
  EXPECT_EQ(b.shape(), (Shape{2, 4}));
  EXPECT_EQ(values(b), (std::vector<double>{12, 14, 16, 18, 36, 38, 40, 42}));
}

TEST(MatMul, IntegersWrapAndSizeZero) {
  // i32: 2^31 - 1 + 1 wraps to -2^31.
  Tensor x = t_of(DType::i32, {1, 2}, {2147483647, 1});
  Tensor y = t_of(DType::i32, {2, 1}, {1, 1});
  EXPECT_EQ(evaluate_op(OpKind::MatMul, {x, y})[0].get_i64(0), -2147483648LL);
  // k = 0: zeros; batch of size 0: an empty result.
  Tensor z =
      evaluate_op(OpKind::MatMul, {Tensor(DType::f32, {2, 0}), Tensor(DType::f32, {0, 3})})[0];
  EXPECT_EQ(values(z), std::vector<double>(6, 0.0));
  Tensor e =
      evaluate_op(OpKind::MatMul, {Tensor(DType::f32, {0, 2, 3}), Tensor(DType::f32, {3, 4})})[0];
  EXPECT_EQ(e.shape(), (Shape{0, 2, 4}));
}

TEST(MatMul, BuilderPromotesDtypes) {
  Graph g;
  Value v = g.matmul(g.input("x", DType::i32, {2, 3}), g.input("y", DType::f32, {3}));
  EXPECT_EQ(g.type(v).to_string(), "f32[2]");
}

TEST(MatMul, Errors) {
  std::string e = matmul_error({DType::f32, {2, 3}}, {DType::f32, {4, 5}});
  EXPECT_NE(e.find("matmul of [2,3] and [4,5]: contracting sizes differ (3 vs 4)"),
            std::string::npos)
      << e;
  e = matmul_error({DType::f32, {3}}, {DType::f32, {2, 4, 5}});
  EXPECT_NE(e.find("matmul of [3] and [2,4,5]: contracting sizes differ (3 vs 4)"),
            std::string::npos)
      << e;
  e = matmul_error({DType::f32, {2, 2, 3}}, {DType::f32, {3, 3, 4}});
  EXPECT_NE(e.find("batch dims [2] and [3] do not broadcast"), std::string::npos) << e;
  e = matmul_error({DType::f32, {}}, {DType::f32, {3}});
  EXPECT_NE(e.find("rank >= 1, got shapes [] and [3]"), std::string::npos) << e;
  e = matmul_error({DType::f32, {3}}, {DType::f64, {3}});
  EXPECT_NE(e.find("same dtype, got f32 and f64"), std::string::npos) << e;
  e = matmul_error({DType::bool_, {3}}, {DType::bool_, {3}});
  EXPECT_NE(e.find("must be a float or integer type (not bool), got bool"), std::string::npos) << e;
}

}  // namespace
}  // namespace rlx
