// max_pool / avg_pool == their decompositions (pad, strided slices, max / add, divide).
#include <gtest/gtest.h>

#include <vector>

#include "decompose_util.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

using Ints = std::vector<int64_t>;
using testing::default_rtol;
using testing::expect_decomposition_matches;
using testing::random_tensor;

struct PoolCase {
  Shape shape;
  Ints window, strides, lo, hi;
};

// 1-D and 2-D, with and without padding, strides larger than, equal to and smaller than the
// window, windows reaching wholly into the padding, and an empty batch.
const PoolCase kCases[] = {
    {{2, 3, 9}, {3}, {2}, {1}, {2}},    {{1, 2, 5, 6}, {2, 3}, {2, 1}, {1, 0}, {0, 2}},
    {{2, 2, 4, 4}, {2, 2}, {}, {}, {}}, {{1, 1, 7, 5}, {3, 2}, {3, 3}, {1, 1}, {1, 1}},
    {{1, 1, 2}, {2}, {}, {3}, {0}},     {{0, 3, 6, 6}, {2, 2}, {2, 2}, {1, 1}, {1, 1}},
};

TEST(DecomposeConv, MaxPool) {
  for (const PoolCase& c : kCases) {
    Graph g;
    Value x = g.input("x", DType::f32, c.shape);
    g.set_outputs({g.max_pool(x, c.window, c.strides, c.lo, c.hi)});
    // Max is exact, so the two must agree bit for bit (including -inf windows).
    expect_decomposition_matches(g, {{"x", random_tensor(DType::f32, c.shape, 11)}}, 0, 0);
  }
}

TEST(DecomposeConv, AvgPoolBothPaddingCounts) {
  for (bool include_pad : {true, false}) {
    for (const PoolCase& c : kCases) {
      Graph g;
      Value x = g.input("x", DType::f32, c.shape);
      g.set_outputs({g.avg_pool(x, c.window, c.strides, c.lo, c.hi, include_pad)});
      expect_decomposition_matches(g, {{"x", random_tensor(DType::f32, c.shape, 12)}},
                                   4 * default_rtol(DType::f32), 1e-6);
    }
  }
}

TEST(DecomposeConv, PoolsInBf16) {
  Graph g;
  Value x = g.input("x", DType::bf16, {1, 2, 6, 6});
  g.set_outputs({g.max_pool(x, {3, 3}, {2, 2}, {1, 1}, {1, 1}),
                 g.avg_pool(x, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false)});
  // avg rounds each partial sum to bf16 in the decomposition, once in the evaluator.
  expect_decomposition_matches(g, {{"x", random_tensor(DType::bf16, {1, 2, 6, 6}, 13)}},
                               4 * default_rtol(DType::bf16), 2e-2);
}

TEST(DecomposeConv, EmptyOutputWindow) {
  // Padded input 2 < window 3 with stride 2: floor(-1 / 2) + 1 = 0 outputs.
  Graph g;
  Value x = g.input("x", DType::f32, {1, 2, 2});
  Value mp = g.max_pool(x, {3}, {2});
  Value ap = g.avg_pool(x, {3}, {2}, {}, {}, false);
  EXPECT_EQ(g.type(mp).to_string(), "f32[1,2,0]");
  g.set_outputs({mp, ap});
  expect_decomposition_matches(g, {{"x", random_tensor(DType::f32, {1, 2, 2}, 14)}}, 0, 0);
}

TEST(DecomposeConv, DecompositionUsesSlicesNotAPool) {
  Graph g;
  Value x = g.input("x", DType::f32, {1, 1, 4, 4});
  g.set_outputs({g.avg_pool(x, {2, 2}, {2, 2}, {1, 1}, {1, 1}, false)});
  Graph d = decompose(g);
  int slices = 0, pads = 0;
  for (const Node& n : d.nodes()) {
    slices += n.op == OpKind::Slice;
    pads += n.op == OpKind::Pad;
  }
  EXPECT_EQ(slices, 4);  // one per window offset
  EXPECT_EQ(pads, 1);
}

TEST(DecomposeConv, RefusesToUnrollAHugeWindow) {
  // One slice per window element: a 2^40-element window (legal through huge padding) is
  // refused with a message instead of building a graph that never finishes.
  const int64_t k = int64_t{1} << 40;
  Graph g;
  Value x = g.input("x", DType::f32, {1, 1, 4});
  g.set_outputs({g.max_pool(x, {k}, {k}, {k - 2}, {k - 2})});
  EXPECT_EQ(testing::error_of([&] { decompose(g); }),
            "max_pool (node %0): a window of 1099511627776.0 elements is too large to decompose "
            "into slices (limit 1048576)");
}

}  // namespace
}  // namespace rlx
