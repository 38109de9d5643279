// The one coverage test: every op has inference, a reference kernel and (if composite) a
// decomposition. It prints the coverage table that docs/ops.md publishes (`rlx ops`).
#include "rlx/opt/coverage.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "rlx/ir/evaluator.h"
#include "rlx/opt/decompose.h"

namespace rlx {
namespace {

TEST(Coverage, EveryOpHasInferenceEvaluatorAndDecomposition) {
  int n_composite = 0;
  for (int i = 0; i < kNumOps; ++i) {
    auto op = static_cast<OpKind>(i);
    const OpInfo& info = op_info(op);
    EXPECT_NE(info.infer, nullptr) << info.name << " has no inference";
    if (op != OpKind::Input && op != OpKind::Param) {
      EXPECT_TRUE(has_evaluator(op)) << info.name << " has no reference kernel";
    }
    if (info.has(kComposite)) {
      ++n_composite;
      EXPECT_TRUE(has_decomposition(op)) << info.name << " is composite without decomposition";
    } else {
      EXPECT_FALSE(has_decomposition(op)) << info.name << " is primitive but has a decomposition";
    }
  }
  std::printf("ops: %d (composite: %d)\n", kNumOps, n_composite);
}

TEST(Coverage, MnemonicsAreUniqueAndResolve) {
  for (int i = 0; i < kNumOps; ++i) {
    auto op = static_cast<OpKind>(i);
    EXPECT_EQ(op_from_name(op_name(op)), op) << op_name(op);
  }
  EXPECT_EQ(op_from_name("no_such_op"), std::nullopt);
}

TEST(Coverage, PublishedTableIsCurrent) {
  std::ifstream in(RLX_TEST_DATA_DIR "/../docs/ops.md");
  ASSERT_TRUE(in) << "docs/ops.md is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string doc = ss.str(), table = op_coverage_table(true);
  ASSERT_GE(doc.size(), table.size());
  EXPECT_EQ(doc.substr(doc.size() - table.size()), table)
      << "docs/ops.md is out of date: regenerate the table with ./build/rlx ops --markdown";
  std::printf("%s", op_coverage_table(false).c_str());
}

}  // namespace
}  // namespace rlx
