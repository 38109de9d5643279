// Shape and data-movement ops: inference, error messages and reference-evaluator values.
// Expected values are worked out by hand or with numpy 2.x / jax 0.4.38 (x64 enabled), as
// noted per test. Where rlx pins a semantics that differs from jnp (negative indices clamp to 0
// or are dropped, as StableHLO), the expectation follows rlx's contract (docs/ir.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

using Ints = std::vector<int64_t>;

Tensor ints(DType t, Shape s, std::vector<int64_t> v) {
  return Tensor::from_ints(t, std::move(s), v);
}
Tensor reals(DType t, Shape s, std::vector<double> v) {
  return Tensor::from_doubles(t, std::move(s), v);
}

Tensor run(OpKind op, const std::vector<Tensor>& operands, const AttrMap& attrs) {
  auto out = evaluate_op(op, operands, attrs);
  EXPECT_EQ(out.size(), 1u);
  return out[0];
}

// Result type of one node of `op` on inputs of the given types (throws rlx::Error).
TensorType infer(OpKind op, const std::vector<TensorType>& operands, const AttrMap& attrs) {
  Graph g;
  std::vector<Value> vs;
  for (size_t i = 0; i < operands.size(); ++i)
    vs.push_back(g.input("x" + std::to_string(i), operands[i].dtype, operands[i].shape));
  return g.type(g.emit1(op, vs, attrs));
}

// The message of the rlx::Error that building the node throws, or "" when it builds.
std::string infer_error(OpKind op, const std::vector<TensorType>& operands, const AttrMap& attrs) {
  try {
    infer(op, operands, attrs);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_TENSOR_EQ(got, want)      \
  EXPECT_TRUE((got).bitwise_equal(want)) \
      << "got " << (got).to_string(64) << "\nwant " << (want).to_string(64)

// ---------------------------------------------------------------- reshape

TEST(Reshape, RowMajorAndInferredDim) {
  Tensor x = ints(DType::i32, {2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_TENSOR_EQ(run(OpKind::Reshape, {x}, {{"shape", Ints{3, -1}}}),
                   ints(DType::i32, {3, 2}, {1, 2, 3, 4, 5, 6}));
  EXPECT_TENSOR_EQ(run(OpKind::Reshape, {x}, {{"shape", Ints{-1}}}),
                   ints(DType::i32, {6}, {1, 2, 3, 4, 5, 6}));
}

TEST(Reshape, I64AndBoolAreBitExact) {
  // 2^62 + 1 is not representable in double: a copy through double would lose the +1.
  int64_t big = (int64_t{1} << 62) + 1;
  Tensor x = ints(DType::i64, {2, 2}, {big, -big, std::numeric_limits<int64_t>::min(), 7});
  EXPECT_TENSOR_EQ(run(OpKind::Reshape, {x}, {{"shape", Ints{4, 1}}}),
                   ints(DType::i64, {4, 1}, {big, -big, std::numeric_limits<int64_t>::min(), 7}));
  Tensor b = ints(DType::bool_, {3}, {1, 0, 1});
  EXPECT_TENSOR_EQ(run(OpKind::Reshape, {b}, {{"shape", Ints{1, 3, 1}}}),
                   ints(DType::bool_, {1, 3, 1}, {1, 0, 1}));
}

TEST(Reshape, RankZeroAndSizeZero) {
  Tensor s = reals(DType::f16, {}, {2.5});
  EXPECT_TENSOR_EQ(run(OpKind::Reshape, {s}, {{"shape", Ints{1, 1}}}),
                   reals(DType::f16, {1, 1}, {2.5}));
  EXPECT_TENSOR_EQ(run(OpKind::Reshape, {reals(DType::f16, {1, 1}, {2.5})}, {{"shape", Ints{}}}),
                   s);
  EXPECT_TENSOR_EQ(run(OpKind::Reshape, {s}, {{"shape", Ints{-1}}}), reals(DType::f16, {1}, {2.5}));
  // numpy: np.zeros((0, 3)).reshape(-1, 3).shape == (0, 3); reshape(3, 0, 5) is fine too.
  EXPECT_EQ(infer(OpKind::Reshape, {{DType::f32, {0, 3}}}, {{"shape", Ints{-1, 3}}}).shape,
            (Shape{0, 3}));
  EXPECT_EQ(run(OpKind::Reshape, {Tensor(DType::bf16, {0, 3})}, {{"shape", Ints{3, 0, 5}}}).type(),
            (TensorType{DType::bf16, {3, 0, 5}}));
}

TEST(Reshape, Errors) {
  std::string e = infer_error(OpKind::Reshape, {{DType::f32, {2, 3}}}, {{"shape", Ints{4, 2}}});
  EXPECT_NE(e.find("cannot reshape [2,3] (6 elements) to [4,2] (8 elements)"), std::string::npos)
      << e;
  e = infer_error(OpKind::Reshape, {{DType::f32, {2, 3}}}, {{"shape", Ints{-1, 4}}});
  EXPECT_NE(e.find("not divisible"), std::string::npos) << e;
  e = infer_error(OpKind::Reshape, {{DType::f32, {2, 3}}}, {{"shape", Ints{-1, -1}}});
  EXPECT_NE(e.find("more than one -1"), std::string::npos) << e;
  // numel 0 with a 0 among the other dims: -1 could be anything.
  e = infer_error(OpKind::Reshape, {{DType::f32, {0, 3}}}, {{"shape", Ints{0, -1}}});
  EXPECT_NE(e.find("cannot infer the -1 of shape [0,-1]"), std::string::npos) << e;
  e = infer_error(OpKind::Reshape, {{DType::f32, {6}}}, {{"shape", Ints{-2, -3}}});
  EXPECT_NE(e.find("negative dim -2"), std::string::npos) << e;
  e = infer_error(OpKind::Reshape, {{DType::f32, {6}}},
                  {{"shape", Ints{int64_t{1} << 40, int64_t{1} << 40}}});
  EXPECT_NE(e.find("more than 2^63"), std::string::npos) << e;
}

// ---------------------------------------------------------------- transpose

TEST(Transpose, PermutesDims) {
  Ints v(24);
  for (int i = 0; i < 24; ++i) v[static_cast<size_t>(i)] = i;
  // np.transpose(np.arange(24).reshape(2, 3, 4), (2, 0, 1)).ravel()
  Ints want = {0, 4, 8,  12, 16, 20, 1, 5, 9,  13, 17, 21,
               2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23};
  for (DType t : {DType::i64, DType::f32, DType::u8}) {
    Tensor got = run(OpKind::Transpose, {ints(t, {2, 3, 4}, v)}, {{"permutation", Ints{2, 0, 1}}});
    EXPECT_TENSOR_EQ(got, ints(t, {4, 2, 3}, want)) << dtype_name(t);
  }
  Tensor b = ints(DType::bool_, {2, 2}, {1, 1, 0, 0});
  EXPECT_TENSOR_EQ(run(OpKind::Transpose, {b}, {{"permutation", Ints{1, 0}}}),
                   ints(DType::bool_, {2, 2}, {1, 0, 1, 0}));
}

TEST(Transpose, RankZeroAndSizeZero) {
  Tensor s = reals(DType::f64, {}, {-0.0});
  EXPECT_TENSOR_EQ(run(OpKind::Transpose, {s}, {{"permutation", Ints{}}}), s);
  EXPECT_EQ(infer(OpKind::Transpose, {{DType::f32, {0, 5, 1}}}, {{"permutation", Ints{1, 2, 0}}}),
            (TensorType{DType::f32, {5, 1, 0}}));
}

TEST(Transpose, BadPermutation) {
  for (const Ints& p : {Ints{0, 0}, Ints{0, 2}, Ints{0}, Ints{-1, 0}}) {
    std::string e = infer_error(OpKind::Transpose, {{DType::f32, {2, 3}}}, {{"permutation", p}});
    EXPECT_NE(
        e.find("permutation " + Shape(p).to_string() + " must list each of the 2 dims of [2,3]"),
        std::string::npos)
        << e;
  }
}

// ---------------------------------------------------------------- broadcast_in_dim

TEST(BroadcastInDim, Values) {
  Tensor x = ints(DType::i32, {3}, {1, 2, 3});
  EXPECT_TENSOR_EQ(
      run(OpKind::BroadcastInDim, {x}, {{"shape", Ints{2, 3}}, {"broadcast_dimensions", Ints{1}}}),
      ints(DType::i32, {2, 3}, {1, 2, 3, 1, 2, 3}));
  EXPECT_TENSOR_EQ(
      run(OpKind::BroadcastInDim, {x}, {{"shape", Ints{3, 2}}, {"broadcast_dimensions", Ints{0}}}),
      ints(DType::i32, {3, 2}, {1, 1, 2, 2, 3, 3}));
  // Size-1 operand dim stretches: [2,1] -> [2,3].
  Tensor c = reals(DType::bf16, {2, 1}, {0.5, -1.5});
  EXPECT_TENSOR_EQ(run(OpKind::BroadcastInDim, {c},
                       {{"shape", Ints{2, 3}}, {"broadcast_dimensions", Ints{0, 1}}}),
                   reals(DType::bf16, {2, 3}, {0.5, 0.5, 0.5, -1.5, -1.5, -1.5}));
}

TEST(BroadcastInDim, NonIncreasingDimensionsTranspose) {
  // bd = [1, 0] maps operand dim 0 to result dim 1: out[i][j] = x[j][i].
  Tensor x = ints(DType::i64, {2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_TENSOR_EQ(run(OpKind::BroadcastInDim, {x},
                       {{"shape", Ints{3, 2}}, {"broadcast_dimensions", Ints{1, 0}}}),
                   ints(DType::i64, {3, 2}, {1, 4, 2, 5, 3, 6}));
}

TEST(BroadcastInDim, RankZeroAndSizeZero) {
  Tensor s = ints(DType::bool_, {}, {1});
  EXPECT_TENSOR_EQ(
      run(OpKind::BroadcastInDim, {s}, {{"shape", Ints{2, 2}}, {"broadcast_dimensions", Ints{}}}),
      ints(DType::bool_, {2, 2}, {1, 1, 1, 1}));
  EXPECT_EQ(run(OpKind::BroadcastInDim, {Tensor(DType::f32, {0})},
                {{"shape", Ints{2, 0}}, {"broadcast_dimensions", Ints{1}}})
                .type(),
            (TensorType{DType::f32, {2, 0}}));
  // A size-1 dim may broadcast to size 0.
  EXPECT_EQ(infer(OpKind::BroadcastInDim, {{DType::f32, {1}}},
                  {{"shape", Ints{0, 4}}, {"broadcast_dimensions", Ints{0}}})
                .shape,
            (Shape{0, 4}));
}

TEST(BroadcastInDim, Errors) {
  std::string e = infer_error(OpKind::BroadcastInDim, {{DType::f32, {3}}},
                              {{"shape", Ints{2, 4}}, {"broadcast_dimensions", Ints{1}}});
  EXPECT_NE(e.find("operand dim 0 of size 3 cannot broadcast to result dim 1 of size 4"),
            std::string::npos)
      << e;
  e = infer_error(OpKind::BroadcastInDim, {{DType::f32, {3}}},
                  {{"shape", Ints{3, 3}}, {"broadcast_dimensions", Ints{0, 1}}});
  EXPECT_NE(e.find("one entry per operand dim (1), got 2"), std::string::npos) << e;
  e = infer_error(OpKind::BroadcastInDim, {{DType::f32, {3, 3}}},
                  {{"shape", Ints{3, 3}}, {"broadcast_dimensions", Ints{1, 1}}});
  EXPECT_NE(e.find("repeats 1"), std::string::npos) << e;
  e = infer_error(OpKind::BroadcastInDim, {{DType::f32, {3}}},
                  {{"shape", Ints{3}}, {"broadcast_dimensions", Ints{-1}}});
  EXPECT_NE(e.find("entry -1 is out of range for result rank 1"), std::string::npos) << e;
}

// ---------------------------------------------------------------- expand

TEST(Expand, Bidirectional) {
  // np.broadcast_shapes((3, 1), (2, 1, 4)) == (2, 3, 4)
  Tensor x = ints(DType::i8, {3, 1}, {-1, 0, 1});
  Tensor got = run(OpKind::Expand, {x}, {{"shape", Ints{2, 1, 4}}});
  Ints want;
  for (int b = 0; b < 2; ++b)
    for (int v : {-1, 0, 1})
      for (int k = 0; k < 4; ++k) want.push_back(v);
  EXPECT_TENSOR_EQ(got, ints(DType::i8, {2, 3, 4}, want));
  // The target may be smaller than x: np.broadcast_shapes((2, 3), (1, 1)) == (2, 3).
  Tensor y = ints(DType::bool_, {2, 3}, {1, 0, 1, 0, 0, 1});
  EXPECT_TENSOR_EQ(run(OpKind::Expand, {y}, {{"shape", Ints{1, 1}}}), y);
  EXPECT_TENSOR_EQ(run(OpKind::Expand, {reals(DType::f32, {}, {3})}, {{"shape", Ints{2}}}),
                   reals(DType::f32, {2}, {3, 3}));
  EXPECT_EQ(infer(OpKind::Expand, {{DType::f32, {1, 3}}}, {{"shape", Ints{0, 1}}}).shape,
            (Shape{0, 3}));
}

TEST(Expand, Errors) {
  std::string e = infer_error(OpKind::Expand, {{DType::f32, {2, 3}}}, {{"shape", Ints{4}}});
  EXPECT_NE(e.find("operand shape [2,3] does not broadcast with shape [4]"), std::string::npos)
      << e;
  e = infer_error(OpKind::Expand, {{DType::f32, {2, 3}}}, {{"shape", Ints{-1}}});
  EXPECT_NE(e.find("negative entry -1"), std::string::npos) << e;
}

// ---------------------------------------------------------------- slice

TEST(Slice, StartsLimitsStrides) {
  Ints v(20);
  for (int i = 0; i < 20; ++i) v[static_cast<size_t>(i)] = i;
  // lax.slice(jnp.arange(20).reshape(4, 5), (1, 0), (4, 5), (2, 3)) == [[5, 8], [15, 18]]
  Tensor x = ints(DType::i64, {4, 5}, v);
  EXPECT_TENSOR_EQ(run(OpKind::Slice, {x},
                       {{"start", Ints{1, 0}}, {"limit", Ints{4, 5}}, {"strides", Ints{2, 3}}}),
                   ints(DType::i64, {2, 2}, {5, 8, 15, 18}));
  // Default strides (all 1).
  EXPECT_TENSOR_EQ(run(OpKind::Slice, {x}, {{"start", Ints{2, 3}}, {"limit", Ints{4, 5}}}),
                   ints(DType::i64, {2, 2}, {13, 14, 18, 19}));
  Tensor b = ints(DType::bool_, {5}, {1, 0, 0, 1, 1});
  // ceil((5 - 1) / 3) = 2 elements: indices 1 and 4.
  EXPECT_TENSOR_EQ(
      run(OpKind::Slice, {b}, {{"start", Ints{1}}, {"limit", Ints{5}}, {"strides", Ints{3}}}),
      ints(DType::bool_, {2}, {0, 1}));
}

TEST(Slice, EmptyAndRankZero) {
  Tensor x = reals(DType::f32, {3}, {1, 2, 3});
  EXPECT_EQ(run(OpKind::Slice, {x}, {{"start", Ints{3}}, {"limit", Ints{3}}}).type(),
            (TensorType{DType::f32, {0}}));
  Tensor s = reals(DType::f32, {}, {4});
  EXPECT_TENSOR_EQ(run(OpKind::Slice, {s}, {{"start", Ints{}}, {"limit", Ints{}}}), s);
}

TEST(Slice, Errors) {
  std::string e = infer_error(OpKind::Slice, {{DType::f32, {4, 5}}},
                              {{"start", Ints{0, 2}}, {"limit", Ints{4, 6}}});
  EXPECT_NE(e.find("slice of dim 1 (size 5) needs 0 <= start <= limit <= size, got start 2 and "
                   "limit 6"),
            std::string::npos)
      << e;
  e = infer_error(OpKind::Slice, {{DType::f32, {4}}}, {{"start", Ints{3}}, {"limit", Ints{2}}});
  EXPECT_NE(e.find("got start 3 and limit 2"), std::string::npos) << e;
  e = infer_error(OpKind::Slice, {{DType::f32, {4}}}, {{"start", Ints{-1}}, {"limit", Ints{2}}});
  EXPECT_NE(e.find("got start -1"), std::string::npos) << e;
  e = infer_error(OpKind::Slice, {{DType::f32, {4}}},
                  {{"start", Ints{0}}, {"limit", Ints{2}}, {"strides", Ints{0}}});
  EXPECT_NE(e.find("strides [0] must be >= 1"), std::string::npos) << e;
  e = infer_error(OpKind::Slice, {{DType::f32, {4, 4}}},
                  {{"start", Ints{0}}, {"limit", Ints{2, 2}}});
  EXPECT_NE(e.find("start [0] must have one entry per dim (2), got 1"), std::string::npos) << e;
}

// ---------------------------------------------------------------- dynamic slices

// Values worked out by hand with the StableHLO rule start = clamp(start, 0, dim - size) (the
// lax primitive's; the lax.dynamic_slice wrapper would first wrap negative starts like numpy).
TEST(DynamicSlice, ClampedStarts) {
  Tensor x = ints(DType::i32, {3, 4}, {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23});
  auto at = [&](DType t, int64_t r, int64_t c, Ints sizes) {
    return run(OpKind::DynamicSlice, {x, ints(t, {}, {r}), ints(t, {}, {c})},
               {{"slice_sizes", sizes}});
  };
  EXPECT_TENSOR_EQ(at(DType::i32, 1, 1, {2, 2}), ints(DType::i32, {2, 2}, {11, 12, 21, 22}));
  // 5 -> 3 - 2 = 1 rows, -3 -> 0 columns.
  EXPECT_TENSOR_EQ(at(DType::i64, 5, -3, {2, 3}),
                   ints(DType::i32, {2, 3}, {10, 11, 12, 20, 21, 22}));
  // u8 255 is 255 (unsigned), clamped to 4 - 1 = 3; i8 -128 clamps to 0.
  EXPECT_TENSOR_EQ(at(DType::u8, 0, 255, {3, 1}), ints(DType::i32, {3, 1}, {3, 13, 23}));
  EXPECT_TENSOR_EQ(at(DType::i8, -128, 1, {1, 3}), ints(DType::i32, {1, 3}, {1, 2, 3}));
  EXPECT_EQ(at(DType::i32, 2, 2, {0, 4}).type(), (TensorType{DType::i32, {0, 4}}));
  Tensor s = reals(DType::f64, {}, {2.5});
  EXPECT_TENSOR_EQ(run(OpKind::DynamicSlice, {s}, {{"slice_sizes", Ints{}}}), s);
}

TEST(DynamicUpdateSlice, ClampedStartsAndEmptyUpdate) {
  Tensor x = reals(DType::f32, {2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  Tensor u = reals(DType::f32, {1, 2}, {-1, -2});
  auto at = [&](const Tensor& upd, int64_t r, int64_t c) {
    return run(OpKind::DynamicUpdateSlice,
               {x, upd, ints(DType::i32, {}, {r}), ints(DType::i32, {}, {c})}, {});
  };
  EXPECT_TENSOR_EQ(at(u, 1, 1), reals(DType::f32, {2, 4}, {0, 1, 2, 3, 4, -1, -2, 7}));
  // 9 -> 2 - 1 = 1, 9 -> 4 - 2 = 2; -4 -> 0 both.
  EXPECT_TENSOR_EQ(at(u, 9, 9), reals(DType::f32, {2, 4}, {0, 1, 2, 3, 4, 5, -1, -2}));
  EXPECT_TENSOR_EQ(at(u, -4, -4), reals(DType::f32, {2, 4}, {-1, -2, 2, 3, 4, 5, 6, 7}));
  EXPECT_TENSOR_EQ(at(Tensor(DType::f32, {0, 2}), 1, 1), x);
  // The whole of x: every start clamps to 0.
  Tensor all = reals(DType::f32, {2, 4}, {9, 9, 9, 9, 9, 9, 9, 9});
  EXPECT_TENSOR_EQ(at(all, 1, 3), all);
}

TEST(DynamicSlice, Errors) {
  const TensorType i32{DType::i32, {}};
  auto sizes = [](Ints s) { return AttrMap{{"slice_sizes", s}}; };
  std::string e = infer_error(OpKind::DynamicSlice, {{DType::f32, {4, 5}}, i32}, sizes({2, 2}));
  EXPECT_NE(e.find("op 'dynamic_slice' (node %"), std::string::npos) << e;
  EXPECT_NE(e.find("needs x and one start index per dim of x [4,5]: 3 operands, got 2"),
            std::string::npos)
      << e;
  e = infer_error(OpKind::DynamicSlice, {{DType::f32, {4, 5}}, i32, {DType::i32, {1}}},
                  sizes({2, 2}));
  EXPECT_NE(e.find("start index 1 (operand 2) must be a scalar, got shape [1]"), std::string::npos)
      << e;
  e = infer_error(OpKind::DynamicSlice, {{DType::f32, {4, 5}}, i32, {DType::f32, {}}},
                  sizes({2, 2}));
  EXPECT_NE(e.find("start index 1 (operand 2) must be an integer dtype"), std::string::npos) << e;
  e = infer_error(OpKind::DynamicSlice, {{DType::f32, {4, 5}}, i32, {DType::i64, {}}},
                  sizes({2, 2}));
  EXPECT_NE(e.find("start index 1 (operand 2) has dtype i64, but start index 0 has i32"),
            std::string::npos)
      << e;
  e = infer_error(OpKind::DynamicSlice, {{DType::f32, {4, 5}}, i32, i32}, sizes({2, 6}));
  EXPECT_NE(e.find("slice_sizes [2,6] must satisfy 0 <= size <= dim, but dim 1 of x [4,5] has "
                   "size 5 and the slice 6"),
            std::string::npos)
      << e;
  e = infer_error(OpKind::DynamicSlice, {{DType::f32, {4, 5}}, i32, i32}, sizes({2}));
  EXPECT_NE(e.find("slice_sizes [2] must have one entry per dim (2), got 1"), std::string::npos)
      << e;
}

TEST(DynamicUpdateSlice, Errors) {
  const TensorType i32{DType::i32, {}};
  std::string e = infer_error(OpKind::DynamicUpdateSlice,
                              {{DType::f32, {4, 5}}, {DType::f16, {2, 2}}, i32, i32}, {});
  EXPECT_NE(e.find("op 'dynamic_update_slice' (node %"), std::string::npos) << e;
  EXPECT_NE(e.find("update dtype f16 must equal x's f32"), std::string::npos) << e;
  e = infer_error(OpKind::DynamicUpdateSlice,
                  {{DType::f32, {4, 5}}, {DType::f32, {2, 6}}, i32, i32}, {});
  EXPECT_NE(e.find("update [2,6] is larger than x [4,5] in dim 1"), std::string::npos) << e;
  e = infer_error(OpKind::DynamicUpdateSlice, {{DType::f32, {4, 5}}, {DType::f32, {5}}, i32, i32},
                  {});
  EXPECT_NE(e.find("update [5] must have x's rank 2 (x is [4,5])"), std::string::npos) << e;
  e = infer_error(OpKind::DynamicUpdateSlice, {{DType::f32, {4, 5}}, {DType::f32, {2, 2}}, i32},
                  {});
  EXPECT_NE(e.find("needs x, update and one start index per dim of x [4,5]: 4 operands, got 3"),
            std::string::npos)
      << e;
  e = infer_error(OpKind::DynamicUpdateSlice,
                  {{DType::f32, {4, 5}}, {DType::f32, {2, 2}}, i32, {DType::bool_, {}}}, {});
  EXPECT_NE(e.find("start index 1 (operand 3) must be an integer dtype"), std::string::npos) << e;
  e = infer_error(OpKind::DynamicUpdateSlice, {{DType::f32, {4, 5}}}, {});
  EXPECT_NE(e.find("needs x, update and one start index per dim of x, got 1 operands"),
            std::string::npos)
      << e;
}

// ---------------------------------------------------------------- concatenate

TEST(Concatenate, AlongNegativeDimension) {
  Tensor a = ints(DType::i32, {2, 1}, {1, 2});
  Tensor b = ints(DType::i32, {2, 2}, {3, 4, 5, 6});
  Tensor c = ints(DType::i32, {2, 0}, {});
  EXPECT_TENSOR_EQ(run(OpKind::Concatenate, {a, b, c}, {{"dimension", int64_t{-1}}}),
                   ints(DType::i32, {2, 3}, {1, 3, 4, 2, 5, 6}));
  EXPECT_TENSOR_EQ(run(OpKind::Concatenate, {b, b}, {{"dimension", int64_t{0}}}),
                   ints(DType::i32, {4, 2}, {3, 4, 5, 6, 3, 4, 5, 6}));
  EXPECT_TENSOR_EQ(run(OpKind::Concatenate, {a}, {{"dimension", int64_t{1}}}), a);
}

TEST(Concatenate, BoolAndI64) {
  Tensor a = ints(DType::bool_, {2}, {1, 0});
  Tensor b = ints(DType::bool_, {1}, {1});
  EXPECT_TENSOR_EQ(run(OpKind::Concatenate, {a, b}, {{"dimension", int64_t{0}}}),
                   ints(DType::bool_, {3}, {1, 0, 1}));
  int64_t big = std::numeric_limits<int64_t>::max();
  Tensor c = ints(DType::i64, {1}, {big});
  EXPECT_TENSOR_EQ(run(OpKind::Concatenate, {c, c}, {{"dimension", int64_t{0}}}),
                   ints(DType::i64, {2}, {big, big}));
}

TEST(Concatenate, Errors) {
  std::string e = infer_error(OpKind::Concatenate, {{DType::f32, {2, 3}}, {DType::f32, {3, 4}}},
                              {{"dimension", int64_t{1}}});
  EXPECT_NE(e.find("operand 1 has shape [3,4], which differs from operand 0's [2,3] in dim 0"),
            std::string::npos)
      << e;
  e = infer_error(OpKind::Concatenate, {{DType::f32, {2}}, {DType::f32, {2}}, {DType::i32, {2}}},
                  {{"dimension", int64_t{0}}});
  EXPECT_NE(e.find("operand 2 has dtype i32, expected f32"), std::string::npos) << e;
  e = infer_error(OpKind::Concatenate, {{DType::f32, {2}}, {DType::f32, {2, 1}}},
                  {{"dimension", int64_t{0}}});
  EXPECT_NE(e.find("operand 1 has shape [2,1] of rank 2, expected rank 1"), std::string::npos) << e;
  e = infer_error(OpKind::Concatenate, {{DType::f32, {}}}, {{"dimension", int64_t{0}}});
  EXPECT_NE(e.find("rank-0"), std::string::npos) << e;
  e = infer_error(OpKind::Concatenate, {{DType::f32, {2}}}, {{"dimension", int64_t{1}}});
  EXPECT_NE(e.find("dimension 1 is out of range for rank 1"), std::string::npos) << e;
  e = infer_error(OpKind::Concatenate, {}, {{"dimension", int64_t{0}}});
  EXPECT_NE(e.find("at least one operand"), std::string::npos) << e;
}

// ---------------------------------------------------------------- pad

TEST(Pad, LowHighInterior) {
  Tensor x = reals(DType::f32, {3}, {1, 2, 3});
  Tensor nine = reals(DType::f32, {}, {9});
  // lax.pad(jnp.array([1., 2., 3.]), 9., [(1, 2, 1)])
  EXPECT_TENSOR_EQ(
      run(OpKind::Pad, {x, nine}, {{"low", Ints{1}}, {"high", Ints{2}}, {"interior", Ints{1}}}),
      reals(DType::f32, {8}, {9, 1, 9, 2, 9, 3, 9, 9}));
  // lax.pad(..., [(-1, -1, 1)]) == [9, 2, 9]: negative low/high crop the interior-padded array.
  EXPECT_TENSOR_EQ(
      run(OpKind::Pad, {x, nine}, {{"low", Ints{-1}}, {"high", Ints{-1}}, {"interior", Ints{1}}}),
      reals(DType::f32, {3}, {9, 2, 9}));
  // Default interior is zero.
  EXPECT_TENSOR_EQ(run(OpKind::Pad, {x, nine}, {{"low", Ints{0}}, {"high", Ints{1}}}),
                   reals(DType::f32, {4}, {1, 2, 3, 9}));
}

TEST(Pad, TwoDimsMixedSigns) {
  // lax.pad(jnp.arange(1, 7).reshape(2, 3).astype(jnp.int32), 0, [(1, -1, 0), (-2, 1, 2)])
  //   == [[0, 0, 0, 0, 0, 0], [0, 2, 0, 0, 3, 0]]
  Tensor x = ints(DType::i32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor zero = ints(DType::i32, {}, {0});
  EXPECT_TENSOR_EQ(run(OpKind::Pad, {x, zero},
                       {{"low", Ints{1, -2}}, {"high", Ints{-1, 1}}, {"interior", Ints{0, 2}}}),
                   ints(DType::i32, {2, 6}, {0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 3, 0}));
}

TEST(Pad, BoolRankZeroAndSizeZero) {
  Tensor b = ints(DType::bool_, {2}, {1, 1});
  Tensor f = ints(DType::bool_, {}, {0});
  EXPECT_TENSOR_EQ(
      run(OpKind::Pad, {b, f}, {{"low", Ints{1}}, {"high", Ints{0}}, {"interior", Ints{2}}}),
      ints(DType::bool_, {5}, {0, 1, 0, 0, 1}));
  Tensor s = ints(DType::i64, {}, {5});
  EXPECT_TENSOR_EQ(
      run(OpKind::Pad, {s, ints(DType::i64, {}, {1})}, {{"low", Ints{}}, {"high", Ints{}}}), s);
  // An empty dim gets only padding: lax.pad(jnp.zeros((0, 2), jnp.int32), 7, [(2, 1, 3), (0, 0,
  // 0)]) has shape (3, 2), all 7.
  Tensor e = Tensor(DType::u8, {0, 2});
  EXPECT_TENSOR_EQ(run(OpKind::Pad, {e, ints(DType::u8, {}, {7})},
                       {{"low", Ints{2, 0}}, {"high", Ints{1, 0}}, {"interior", Ints{3, 0}}}),
                   ints(DType::u8, {3, 2}, {7, 7, 7, 7, 7, 7}));
  // Cropping everything away: 3 + (-2) + (-1) = 0.
  EXPECT_EQ(infer(OpKind::Pad, {{DType::f32, {3}}, {DType::f32, {}}},
                  {{"low", Ints{-2}}, {"high", Ints{-1}}})
                .shape,
            (Shape{0}));
}

TEST(Pad, Errors) {
  std::string e = infer_error(OpKind::Pad, {{DType::f32, {3}}, {DType::f32, {}}},
                              {{"low", Ints{-2}}, {"high", Ints{-2}}});
  EXPECT_NE(e.find("gives negative size -1"), std::string::npos) << e;
  e = infer_error(OpKind::Pad, {{DType::f32, {3}}, {DType::f32, {1}}},
                  {{"low", Ints{0}}, {"high", Ints{0}}});
  EXPECT_NE(e.find("padding_value must be rank 0, got shape [1]"), std::string::npos) << e;
  e = infer_error(OpKind::Pad, {{DType::f32, {3}}, {DType::f16, {}}},
                  {{"low", Ints{0}}, {"high", Ints{0}}});
  EXPECT_NE(e.find("padding_value dtype f16 must equal x's f32"), std::string::npos) << e;
  e = infer_error(OpKind::Pad, {{DType::f32, {3}}, {DType::f32, {}}},
                  {{"low", Ints{0}}, {"high", Ints{0}}, {"interior", Ints{-1}}});
  EXPECT_NE(e.find("interior [-1] has a negative entry -1"), std::string::npos) << e;
}

// ---------------------------------------------------------------- gather

TEST(Gather, ClampsIndices) {
  // x = arange(6).reshape(3, 2); rows [2, 0, -1 -> 0, 5 -> 2] (jnp.take(..., mode="clip")).
  Tensor x = ints(DType::i64, {3, 2}, {0, 1, 2, 3, 4, 5});
  for (DType it : {DType::i32, DType::i64, DType::i8}) {
    Tensor got = run(OpKind::Gather, {x, ints(it, {4}, {2, 0, -1, 5})}, {{"axis", int64_t{0}}});
    EXPECT_TENSOR_EQ(got, ints(DType::i64, {4, 2}, {4, 5, 0, 1, 0, 1, 4, 5})) << dtype_name(it);
  }
  // u8 index 200 clamps to the last row.
  EXPECT_TENSOR_EQ(run(OpKind::Gather, {x, ints(DType::u8, {1}, {200})}, {{"axis", int64_t{0}}}),
                   ints(DType::i64, {1, 2}, {4, 5}));
}

TEST(Gather, NegativeAxisAndIndexRank) {
  // jnp.take(arange(6).reshape(3, 2), [[1, 7], [-3, 0]], axis=-1, mode="clip")
  Tensor x = reals(DType::f16, {3, 2}, {0, 1, 2, 3, 4, 5});
  Tensor idx = ints(DType::i32, {2, 2}, {1, 7, -3, 0});
  EXPECT_TENSOR_EQ(run(OpKind::Gather, {x, idx}, {{"axis", int64_t{-1}}}),
                   reals(DType::f16, {3, 2, 2}, {1, 1, 0, 0, 3, 3, 2, 2, 5, 5, 4, 4}));
  // A rank-0 index removes the axis: jnp.take(x, 1, axis=0) == [2, 3].
  EXPECT_TENSOR_EQ(run(OpKind::Gather, {x, ints(DType::i32, {}, {1})}, {{"axis", int64_t{0}}}),
                   reals(DType::f16, {2}, {2, 3}));
}

TEST(Gather, BoolAndEmpty) {
  Tensor b = ints(DType::bool_, {3}, {1, 0, 1});
  EXPECT_TENSOR_EQ(
      run(OpKind::Gather, {b, ints(DType::i32, {3}, {1, 1, 2})}, {{"axis", int64_t{0}}}),
      ints(DType::bool_, {3}, {0, 0, 1}));
  EXPECT_EQ(run(OpKind::Gather, {b, Tensor(DType::i32, {0, 2})}, {{"axis", int64_t{0}}}).type(),
            (TensorType{DType::bool_, {0, 2}}));
  // Empty indices from an empty axis are fine.
  EXPECT_EQ(
      infer(OpKind::Gather, {{DType::f32, {2, 0}}, {DType::i32, {0}}}, {{"axis", int64_t{1}}}),
      (TensorType{DType::f32, {2, 0}}));
}

TEST(Gather, Errors) {
  std::string e =
      infer_error(OpKind::Gather, {{DType::f32, {3}}, {DType::f32, {2}}}, {{"axis", int64_t{0}}});
  EXPECT_NE(e.find("indices must be an integer dtype (i8, u8, i32, i64), got f32"),
            std::string::npos)
      << e;
  e = infer_error(OpKind::Gather, {{DType::f32, {3}}, {DType::bool_, {2}}}, {{"axis", int64_t{0}}});
  EXPECT_NE(e.find("got bool"), std::string::npos) << e;
  // jnp: "Cannot do a non-empty jnp.take() from an empty axis."
  e = infer_error(OpKind::Gather, {{DType::f32, {2, 0}}, {DType::i32, {2}}},
                  {{"axis", int64_t{1}}});
  EXPECT_NE(e.find("cannot gather [2] indices from axis 1 of size 0"), std::string::npos) << e;
  e = infer_error(OpKind::Gather, {{DType::f32, {3}}, {DType::i32, {2}}}, {{"axis", int64_t{1}}});
  EXPECT_NE(e.find("axis 1 is out of range for rank 1"), std::string::npos) << e;
}

// ---------------------------------------------------------------- take_along_axis

TEST(TakeAlongAxis, ClampsIncludingNegative) {
  // rlx clamps -1 to 0 (StableHLO); jnp.take_along_axis(mode="clip") would wrap it to 2 first.
  Tensor x = ints(DType::i32, {2, 3}, {10, 11, 12, 20, 21, 22});
  Tensor idx = ints(DType::i64, {2, 2}, {2, -1, 5, 1});
  EXPECT_TENSOR_EQ(run(OpKind::TakeAlongAxis, {x, idx}, {{"axis", int64_t{1}}}),
                   ints(DType::i32, {2, 2}, {12, 10, 22, 21}));
  EXPECT_TENSOR_EQ(run(OpKind::TakeAlongAxis, {x, idx}, {{"axis", int64_t{-1}}}),
                   ints(DType::i32, {2, 2}, {12, 10, 22, 21}));
}

TEST(TakeAlongAxis, BroadcastsOtherDims) {
  Tensor x = ints(DType::i64, {2, 3}, {10, 11, 12, 20, 21, 22});
  // np.take_along_axis(x, [[2, 0]], axis=1) == [[12, 10], [22, 20]]
  EXPECT_TENSOR_EQ(
      run(OpKind::TakeAlongAxis, {x, ints(DType::u8, {1, 2}, {2, 0})}, {{"axis", int64_t{1}}}),
      ints(DType::i64, {2, 2}, {12, 10, 22, 20}));
  // np.take_along_axis([[10, 11, 12]], [[0], [0]], axis=0) == [[10, 11, 12], [10, 11, 12]]
  Tensor row = ints(DType::i64, {1, 3}, {10, 11, 12});
  EXPECT_TENSOR_EQ(
      run(OpKind::TakeAlongAxis, {row, ints(DType::i32, {2, 1}, {0, 0})}, {{"axis", int64_t{0}}}),
      ints(DType::i64, {2, 3}, {10, 11, 12, 10, 11, 12}));
  Tensor b = ints(DType::bool_, {3}, {0, 1, 0});
  EXPECT_TENSOR_EQ(
      run(OpKind::TakeAlongAxis, {b, ints(DType::i32, {4}, {1, 9, -9, 1})}, {{"axis", int64_t{0}}}),
      ints(DType::bool_, {4}, {1, 0, 0, 1}));
  EXPECT_EQ(infer(OpKind::TakeAlongAxis, {{DType::f32, {0, 3}}, {DType::i32, {1, 5}}},
                  {{"axis", int64_t{1}}}),
            (TensorType{DType::f32, {0, 5}}));
}

TEST(TakeAlongAxis, Errors) {
  std::string e = infer_error(OpKind::TakeAlongAxis, {{DType::f32, {2, 3}}, {DType::i32, {2}}},
                              {{"axis", int64_t{1}}});
  EXPECT_NE(e.find("indices must have x's rank 2, got shape [2]"), std::string::npos) << e;
  e = infer_error(OpKind::TakeAlongAxis, {{DType::f32, {2, 3}}, {DType::i32, {3, 1}}},
                  {{"axis", int64_t{1}}});
  EXPECT_NE(e.find("dim 0 of x [2,3] and indices [3,1] does not broadcast (2 vs 3)"),
            std::string::npos)
      << e;
  e = infer_error(OpKind::TakeAlongAxis, {{DType::f32, {2, 0}}, {DType::i32, {2, 1}}},
                  {{"axis", int64_t{1}}});
  EXPECT_NE(e.find("axis 1 of size 0"), std::string::npos) << e;
}

// ---------------------------------------------------------------- scatter_add

TEST(ScatterAdd, AccumulatesRepeatsAndDropsOutOfRange) {
  // Index 1 twice (1 + 2), 4 once (3); 5 and -1 are out of [0, 5) and dropped (rlx/StableHLO;
  // jnp's .at[].add would wrap -1 to 4).
  Tensor x = reals(DType::f32, {5}, {0, 0, 0, 0, 0.5});
  Tensor idx = ints(DType::i32, {5}, {1, 1, 4, 5, -1});
  Tensor upd = reals(DType::f32, {5}, {1, 2, 3, 4, 5});
  EXPECT_TENSOR_EQ(run(OpKind::ScatterAdd, {x, idx, upd}, {{"axis", int64_t{0}}}),
                   reals(DType::f32, {5}, {0, 3, 0, 0, 3.5}));
}

TEST(ScatterAdd, InnerAxisIntegers) {
  // jnp.zeros((2, 3), int32).at[:, [2, 0, 2]].add([[1, 2, 3], [4, 5, 6]]) == [[2, 0, 4], [5, 0,
  // 10]]
  Tensor x = ints(DType::i32, {2, 3}, {0, 0, 0, 0, 0, 0});
  Tensor idx = ints(DType::i64, {3}, {2, 0, 2});
  Tensor upd = ints(DType::i32, {2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_TENSOR_EQ(run(OpKind::ScatterAdd, {x, idx, upd}, {{"axis", int64_t{-1}}}),
                   ints(DType::i32, {2, 3}, {2, 0, 4, 5, 0, 10}));
  // i8 wraps: 100 + 100 = 200 -> -56.
  Tensor y = ints(DType::i8, {1}, {100});
  EXPECT_TENSOR_EQ(
      run(OpKind::ScatterAdd, {y, ints(DType::u8, {1}, {0}), ints(DType::i8, {1}, {100})},
          {{"axis", int64_t{0}}}),
      ints(DType::i8, {1}, {-56}));
  // Large i64 sums stay exact (2^62 + 3 has no double representation).
  int64_t big = (int64_t{1} << 61) + 1;
  EXPECT_TENSOR_EQ(run(OpKind::ScatterAdd,
                       {ints(DType::i64, {2}, {big, 0}), ints(DType::i32, {2}, {0, 0}),
                        ints(DType::i64, {2}, {big, 1})},
                       {{"axis", int64_t{0}}}),
                   ints(DType::i64, {2}, {2 * big + 1, 0}));
}

TEST(ScatterAdd, FloatRoundsOnce) {
  // In f16 the spacing at 2048 is 2: adding 1 then 1 with rounding after each step gives
  // 2048 (ties to even, twice); accumulating in double and rounding once gives 2050.
  Tensor x = reals(DType::f16, {1}, {2048});
  Tensor got =
      run(OpKind::ScatterAdd, {x, ints(DType::i32, {2}, {0, 0}), reals(DType::f16, {2}, {1, 1})},
          {{"axis", int64_t{0}}});
  EXPECT_TENSOR_EQ(got, reals(DType::f16, {1}, {2050}));
}

TEST(ScatterAdd, RankZeroIndicesAndEmpty) {
  // A rank-0 index: updates have x's shape without the axis.
  Tensor x = ints(DType::u8, {2, 2}, {1, 2, 3, 4});
  EXPECT_TENSOR_EQ(
      run(OpKind::ScatterAdd, {x, ints(DType::i32, {}, {1}), ints(DType::u8, {2}, {10, 255})},
          {{"axis", int64_t{0}}}),
      ints(DType::u8, {2, 2}, {1, 2, 13, 3}));
  Tensor none = run(OpKind::ScatterAdd, {x, Tensor(DType::i32, {0}), Tensor(DType::u8, {2, 0})},
                    {{"axis", int64_t{1}}});
  EXPECT_TENSOR_EQ(none, x);
}

TEST(ScatterAdd, Errors) {
  std::string e = infer_error(OpKind::ScatterAdd,
                              {{DType::f32, {4, 3}}, {DType::i32, {2}}, {DType::f32, {2, 4}}},
                              {{"axis", int64_t{0}}});
  EXPECT_NE(e.find("updates shape must be [2,3] (x.shape[:axis] + indices.shape + "
                   "x.shape[axis+1:]), got [2,4]"),
            std::string::npos)
      << e;
  e = infer_error(OpKind::ScatterAdd, {{DType::bool_, {4}}, {DType::i32, {2}}, {DType::bool_, {2}}},
                  {{"axis", int64_t{0}}});
  EXPECT_NE(e.find("x must be a float or integer type (not bool), got bool"), std::string::npos)
      << e;
  e = infer_error(OpKind::ScatterAdd, {{DType::f32, {4}}, {DType::i32, {2}}, {DType::f64, {2}}},
                  {{"axis", int64_t{0}}});
  EXPECT_NE(e.find("updates dtype f64 must equal x's f32"), std::string::npos) << e;
  e = infer_error(OpKind::ScatterAdd, {{DType::f32, {4}}, {DType::f32, {2}}, {DType::f32, {2}}},
                  {{"axis", int64_t{0}}});
  EXPECT_NE(e.find("indices must be an integer dtype"), std::string::npos) << e;
}

// ---------------------------------------------------------------- reverse

TEST(Reverse, Axes) {
  Tensor x = ints(DType::i64, {2, 3}, {0, 1, 2, 3, 4, 5});
  EXPECT_TENSOR_EQ(run(OpKind::Reverse, {x}, {{"axes", Ints{0, -1}}}),
                   ints(DType::i64, {2, 3}, {5, 4, 3, 2, 1, 0}));
  EXPECT_TENSOR_EQ(run(OpKind::Reverse, {x}, {{"axes", Ints{1}}}),
                   ints(DType::i64, {2, 3}, {2, 1, 0, 5, 4, 3}));
  EXPECT_TENSOR_EQ(run(OpKind::Reverse, {x}, {{"axes", Ints{}}}), x);
  Tensor b = ints(DType::bool_, {3}, {1, 1, 0});
  EXPECT_TENSOR_EQ(run(OpKind::Reverse, {b}, {{"axes", Ints{0}}}),
                   ints(DType::bool_, {3}, {0, 1, 1}));
  Tensor s = reals(DType::bf16, {}, {1.5});
  EXPECT_TENSOR_EQ(run(OpKind::Reverse, {s}, {{"axes", Ints{}}}), s);
  EXPECT_EQ(run(OpKind::Reverse, {Tensor(DType::f32, {0, 2})}, {{"axes", Ints{0, 1}}}).type(),
            (TensorType{DType::f32, {0, 2}}));
}

TEST(Reverse, Errors) {
  std::string e = infer_error(OpKind::Reverse, {{DType::f32, {2, 3}}}, {{"axes", Ints{0, -2}}});
  EXPECT_NE(e.find("axes repeats axis 0"), std::string::npos) << e;
  e = infer_error(OpKind::Reverse, {{DType::f32, {2, 3}}}, {{"axes", Ints{2}}});
  EXPECT_NE(e.find("axes entry 2 is out of range for rank 2"), std::string::npos) << e;
}

// ---------------------------------------------------------------- squeeze / expand_dims

TEST(Squeeze, RemovesListedDims) {
  Tensor x = ints(DType::i32, {1, 3, 1}, {7, 8, 9});
  EXPECT_TENSOR_EQ(run(OpKind::Squeeze, {x}, {{"axes", Ints{0, -1}}}),
                   ints(DType::i32, {3}, {7, 8, 9}));
  EXPECT_TENSOR_EQ(run(OpKind::Squeeze, {x}, {{"axes", Ints{2}}}),
                   ints(DType::i32, {1, 3}, {7, 8, 9}));
  EXPECT_TENSOR_EQ(run(OpKind::Squeeze, {ints(DType::bool_, {1}, {1})}, {{"axes", Ints{0}}}),
                   ints(DType::bool_, {}, {1}));
  EXPECT_EQ(infer(OpKind::Squeeze, {{DType::f32, {0, 1}}}, {{"axes", Ints{1}}}).shape, (Shape{0}));
}

TEST(Squeeze, Errors) {
  std::string e = infer_error(OpKind::Squeeze, {{DType::f32, {1, 3}}}, {{"axes", Ints{-1}}});
  EXPECT_NE(e.find("cannot squeeze axis 1 of size 3"), std::string::npos) << e;
  e = infer_error(OpKind::Squeeze, {{DType::f32, {1, 3}}}, {{"axes", Ints{0, 0}}});
  EXPECT_NE(e.find("repeats axis 0"), std::string::npos) << e;
}

TEST(ExpandDims, AxesIndexTheResult) {
  Tensor x = ints(DType::i64, {3}, {1, 2, 3});
  // jnp.expand_dims(zeros(3), (0, -1)).shape == (1, 3, 1)
  EXPECT_TENSOR_EQ(run(OpKind::ExpandDims, {x}, {{"axes", Ints{0, -1}}}),
                   ints(DType::i64, {1, 3, 1}, {1, 2, 3}));
  // jnp.expand_dims(zeros((2, 3)), (3, 1)).shape == (2, 1, 3, 1)
  EXPECT_EQ(infer(OpKind::ExpandDims, {{DType::f32, {2, 3}}}, {{"axes", Ints{3, 1}}}).shape,
            (Shape{2, 1, 3, 1}));
  // jnp.expand_dims(zeros((2, 3)), -2).shape == (2, 1, 3)
  EXPECT_EQ(infer(OpKind::ExpandDims, {{DType::f32, {2, 3}}}, {{"axes", Ints{-2}}}).shape,
            (Shape{2, 1, 3}));
  EXPECT_TENSOR_EQ(run(OpKind::ExpandDims, {ints(DType::bool_, {}, {1})}, {{"axes", Ints{0, 1}}}),
                   ints(DType::bool_, {1, 1}, {1}));
  EXPECT_EQ(infer(OpKind::ExpandDims, {{DType::f32, {0}}}, {{"axes", Ints{0}}}).shape,
            (Shape{1, 0}));
}

TEST(ExpandDims, Errors) {
  std::string e = infer_error(OpKind::ExpandDims, {{DType::f32, {2, 3}}}, {{"axes", Ints{3}}});
  EXPECT_NE(e.find("axes entry 3 is out of range for rank 3"), std::string::npos) << e;
  e = infer_error(OpKind::ExpandDims, {{DType::f32, {2, 3}}}, {{"axes", Ints{0, -4}}});
  EXPECT_NE(e.find("repeats axis 0"), std::string::npos) << e;
}

// ---------------------------------------------------------------- text form

TEST(ShapeOps, TextRoundTripFillsDefaults) {
  Graph g("t");
  Value x = g.input("x", DType::f32, {4, 5});
  Value p = g.scalar(0.0, DType::f32);
  Value s = g.slice(x, {0, 1}, {4, 5});
  Value q = g.pad(s, p, {1, -1}, {0, 2});
  Value i = g.input("i", DType::i32, {3});
  g.set_outputs({g.gather(q, i, -1)});
  std::string text = g.to_string();
  EXPECT_NE(text.find("strides=[]"), std::string::npos) << text;
  EXPECT_NE(text.find("interior=[]"), std::string::npos) << text;
  EXPECT_NE(text.find(": f32[5,5]"), std::string::npos) << text;  // pad: 4+1+0, 4-1+2
  Graph back = Graph::parse(text);
  EXPECT_EQ(back.to_string(), text);
  EXPECT_TRUE(back.verify().empty());
}

}  // namespace
}  // namespace rlx
