// Helper for composite == decomposition tests.
#pragma once

#include "../common/test_util.h"
#include "rlx/opt/decompose.h"

namespace rlx::testing {

/// Evaluates `g` as built and after decompose(g) (which must leave no composite op) and checks
/// the outputs agree within rtol/atol.
inline void expect_decomposition_matches(const Graph& g, const TensorMap& feeds, double rtol,
                                         double atol) {
  Graph d = decompose(g);
  for (const Node& n : d.nodes())
    ASSERT_FALSE(op_info(n.op).has(kComposite)) << "composite left: " << op_name(n.op);
  ASSERT_TRUE(d.verify().empty());
  auto want = evaluate(g, feeds);
  auto got = evaluate(d, feeds);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], rtol, atol)) << "output " << i;
}

}  // namespace rlx::testing
