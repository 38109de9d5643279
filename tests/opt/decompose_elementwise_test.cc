// Composite activations == their decompositions (relu, gelu, gelu_tanh, silu, softplus,
// leaky_relu), in f32, f16 and f64, including large |x|.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "decompose_util.h"

namespace rlx {
namespace {

using testing::expect_decomposition_matches;

struct Activation {
  const char* name;
  OpKind op;
  std::function<Value(Graph&, Value)> build;
};

const std::vector<Activation> kActivations = {
    {"relu", OpKind::Relu, [](Graph& g, Value x) { return g.relu(x); }},
    {"gelu", OpKind::Gelu, [](Graph& g, Value x) { return g.gelu(x); }},
    {"gelu_tanh", OpKind::GeluTanh, [](Graph& g, Value x) { return g.gelu_tanh(x); }},
    {"silu", OpKind::Silu, [](Graph& g, Value x) { return g.silu(x); }},
    {"softplus", OpKind::Softplus, [](Graph& g, Value x) { return g.softplus(x); }},
    {"leaky_relu", OpKind::LeakyRelu, [](Graph& g, Value x) { return g.leaky_relu(x); }},
    {"leaky_relu(0.2)", OpKind::LeakyRelu, [](Graph& g, Value x) { return g.leaky_relu(x, 0.2); }},
};

// Random values in [-8, 8) with the edge values written over the first elements.
Tensor activation_inputs(DType t, uint64_t seed) {
  Tensor x = testing::random_tensor(t, Shape{256}, seed, -8.0, 8.0);
  std::vector<double> edges = {-100, 100, 0.0, -0.0, 1e-3, -1e-3, 30, -30, 5.5, -5.5, 1, -1};
  for (size_t i = 0; i < edges.size(); ++i) x.set_f64(static_cast<int64_t>(i), edges[i]);
  return x;
}

// Tolerances for the decomposition, which rounds every intermediate to the dtype: relative a
// few ulp of the dtype, plus an absolute term for results that cancel to near 0 (gelu of
// negative x computes 1 + erf(...) ~ 1e-3 whose rounding error is an ulp of 1).
struct Tol {
  DType dtype;
  double rtol, atol;
};
const std::vector<Tol> kTolerances = {
    {DType::f64, 1e-12, 1e-15}, {DType::f32, 2e-6, 2e-7}, {DType::f16, 2e-3, 1e-3}};

TEST(DecomposeElementwise, ActivationsMatchTheirDecomposition) {
  for (const Tol& tol : kTolerances) {
    for (const Activation& act : kActivations) {
      SCOPED_TRACE(std::string(act.name) + " " + std::string(dtype_name(tol.dtype)));
      Graph g("act");
      Value x = g.input("x", tol.dtype, {256});
      Value y = act.build(g, x);
      ASSERT_EQ(g.node(y).op, act.op);
      g.set_outputs({y});
      expect_decomposition_matches(g, {{"x", activation_inputs(tol.dtype, 7)}}, tol.rtol, tol.atol);
    }
  }
}

TEST(DecomposeElementwise, SoftplusDecompositionDoesNotOverflow) {
  // softplus(100) = 100 and softplus(-100) = 3.7e-44 (0 in f16); a naive log(1 + exp(x))
  // would give inf at 100 in f16 and f32.
  for (DType t : {DType::f16, DType::f32}) {
    Graph g("softplus");
    g.set_outputs({g.softplus(g.input("x", t, {2}))});
    Graph d = decompose(g);
    Tensor out =
        evaluate(d, {{"x", Tensor::from_doubles(t, Shape{2}, std::vector<double>{100, -100})}})[0];
    EXPECT_EQ(out.get_f64(0), 100.0) << dtype_name(t);
    EXPECT_GE(out.get_f64(1), 0.0) << dtype_name(t);
    EXPECT_LT(out.get_f64(1), 1e-40) << dtype_name(t);
  }
}

TEST(DecomposeElementwise, IntegerReluAndStructure) {
  Graph g("relu");
  Value x = g.input("x", DType::i32, {5});
  g.set_outputs({g.relu(x)});
  expect_decomposition_matches(
      g,
      {{"x", Tensor::from_ints(DType::i32, Shape{5},
                               std::vector<int64_t>{-5, 0, 7, -2147483647 - 1, 1})}},
      0, 0);
  // relu(x) = max(x, 0): exactly an input, a scalar constant of x's dtype and a max.
  Graph d = decompose(g);
  ASSERT_EQ(d.nodes().size(), 3u);
  EXPECT_EQ(d.nodes()[1].op, OpKind::Constant);
  EXPECT_EQ(d.nodes()[1].results[0], (TensorType{DType::i32, Shape{}}));
  EXPECT_EQ(d.nodes()[2].op, OpKind::Max);
}

TEST(DecomposeElementwise, LeakyReluCarriesAlpha) {
  Graph g("leaky");
  g.set_outputs({g.leaky_relu(g.input("x", DType::f32, {3}), 0.25)});
  Graph d = decompose(g);
  Tensor out = evaluate(
      d, {{"x", Tensor::from_doubles(DType::f32, Shape{3}, std::vector<double>{-4, 0, 2})}})[0];
  // By hand: 0.25 * -4 = -1; 0 and 2 pass through.
  EXPECT_EQ(out.get_f64(0), -1.0);
  EXPECT_EQ(out.get_f64(1), 0.0);
  EXPECT_EQ(out.get_f64(2), 2.0);
}

TEST(DecomposeElementwise, NestedActivationsExpandRecursively) {
  Graph g("nested");
  Value x = g.input("x", DType::f32, {4, 8});
  g.set_outputs({g.silu(g.gelu(g.softplus(x)))});
  expect_decomposition_matches(
      g, {{"x", testing::random_tensor(DType::f32, Shape{4, 8}, 11, -6, 6)}}, 1e-5, 1e-6);
}

}  // namespace
}  // namespace rlx
