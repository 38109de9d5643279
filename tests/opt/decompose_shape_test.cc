// Composite == decomposition for the shape family: expand, squeeze, expand_dims.
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "decompose_util.h"
#include "rlx/ir/graph.h"
#include "rlx/opt/decompose.h"

namespace rlx {
namespace {

using Ints = std::vector<int64_t>;
using testing::expect_decomposition_matches;
using testing::random_tensor;

const DType kDTypes[] = {DType::f32, DType::bf16, DType::f64, DType::i8,
                         DType::u8,  DType::i32,  DType::i64, DType::bool_};

// Ops of the decomposed graph, in order (to check what the decomposition emits).
std::vector<OpKind> ops_of(const Graph& g) {
  std::vector<OpKind> ops;
  for (const Node& n : g.nodes())
    if (n.op != OpKind::Input) ops.push_back(n.op);
  return ops;
}

// One composite per (x shape, int-list attribute) case and per dtype: composite ==
// decomposition exactly, and the decomposition is the single primitive `want`.
struct ShapeCase {
  Shape x;
  Ints attr;
};
template <class Build>
void expect_single_primitive(const char* name, std::span<const ShapeCase> cases, uint64_t seed,
                             OpKind want, Build build) {
  for (const ShapeCase& c : cases) {
    for (DType t : kDTypes) {
      Graph g(name);
      Value x = g.input("x", t, c.x);
      g.set_outputs({build(g, x, c.attr)});
      SCOPED_TRACE(g.to_string());
      expect_decomposition_matches(g, {{"x", random_tensor(t, c.x, seed++)}}, 0, 0);
      EXPECT_EQ(ops_of(decompose(g)), std::vector<OpKind>{want});
    }
  }
}

TEST(DecomposeShape, Expand) {
  // Rank growth, stretching size-1 dims both ways, a smaller target, rank 0 and size 0.
  const ShapeCase cases[] = {{{3, 1}, {2, 1, 4}}, {{2, 3}, {1, 1}}, {{1}, {}},
                             {{}, {2, 3}},        {{4}, {4}},       {{1, 3}, {0, 1}},
                             {{2, 1, 5}, {3, 1}}};
  expect_single_primitive("expand", cases, 1, OpKind::BroadcastInDim,
                          [](Graph& g, Value x, const Ints& a) { return g.expand(x, a); });
}

TEST(DecomposeShape, Squeeze) {
  const ShapeCase cases[] = {
      {{1, 3, 1}, {0, -1}}, {{1}, {0}}, {{2, 1, 0}, {1}}, {{2, 3}, {}}, {{1, 1, 1}, {2, 0, 1}}};
  expect_single_primitive("squeeze", cases, 100, OpKind::Reshape,
                          [](Graph& g, Value x, const Ints& a) { return g.squeeze(x, a); });
}

TEST(DecomposeShape, ExpandDims) {
  const ShapeCase cases[] = {{{3}, {0, -1}}, {{2, 3}, {3, 1}}, {{}, {0}},      {{2, 3}, {-2}},
                             {{0, 2}, {1}},  {{2}, {}},        {{4}, {-1, -2}}};
  expect_single_primitive("expand_dims", cases, 200, OpKind::Reshape,
                          [](Graph& g, Value x, const Ints& a) { return g.expand_dims(x, a); });
}

// Composites feeding each other and a primitive: the driver expands all of them and the result
// still matches (squeeze of an expand_dims of an expand, then a transpose).
TEST(DecomposeShape, Chained) {
  Graph g("chain");
  Value x = g.input("x", DType::f16, {3, 1});
  Value e = g.expand(x, {2, 3, 4});
  Value d = g.expand_dims(e, {0, -1});
  Value s = g.squeeze(d, {0, 4});
  g.set_outputs({g.transpose(s, {2, 0, 1})});
  expect_decomposition_matches(g, {{"x", random_tensor(DType::f16, {3, 1}, 7)}}, 0, 0);
}

}  // namespace
}  // namespace rlx
