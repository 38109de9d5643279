// Random well-typed graphs: the generator is deterministic and well typed, and decomposing
// every composite preserves their outputs under the reference evaluator.
#include "random_graph.h"

#include <gtest/gtest.h>

#include "decompose_util.h"

namespace rlx {
namespace {

TEST(RandomGraph, DeterministicAndVerified) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    auto a = testing::make_random_graph(seed), b = testing::make_random_graph(seed);
    EXPECT_EQ(a.graph.to_string(), b.graph.to_string());
    EXPECT_TRUE(a.graph.verify().empty()) << seed;
  }
}

TEST(RandomGraph, DecompositionPreservesSemantics) {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto r = testing::make_random_graph(seed);
    testing::expect_decomposition_matches(r.graph, r.feeds, 1e-5, 1e-5);
  }
}

}  // namespace
}  // namespace rlx
