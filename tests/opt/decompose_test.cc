// Composite == decomposition for every composite op (filled in by the op-family work).
#include <gtest/gtest.h>

#include "rlx/opt/decompose.h"

TEST(Decompose, EveryCompositeHasADecomposition) {
  for (int i = 0; i < rlx::kNumOps; ++i) {
    auto op = static_cast<rlx::OpKind>(i);
    if (rlx::op_info(op).has(rlx::kComposite)) {
      EXPECT_TRUE(rlx::has_decomposition(op)) << rlx::op_name(op);
    }
  }
}
