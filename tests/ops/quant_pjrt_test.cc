// The PJRT backend's op set includes dequantize (lowered natively, src/backends/pjrt/lower/
// quant.cc): legalizing quant_matmul for it leaves dequantize + dot_general, no rejection.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/graph.h"
#include "rlx/opt/legalize.h"

namespace rlx {
namespace {

TEST(QuantOnPjrt, LegalizeKeepsDequantizeAndDecomposesQuantMatMul) {
  EXPECT_TRUE(pjrt::native_ops().count(OpKind::Dequantize));
  EXPECT_FALSE(pjrt::native_ops().count(OpKind::QuantMatMul));
  Graph g("q");
  Value x = g.input("x", DType::f32, {2, 64});
  Value w = g.param("w", DType::u8, {3, 68});
  Value y = g.quant_matmul(x, w, QuantFormat::kQ8_0);
  g.set_outputs({y});
  Graph l = legalize(g, pjrt::native_ops(), {}, "pjrt");
  int dequantize = 0, dot = 0;
  for (const Node& n : l.nodes()) {
    EXPECT_NE(n.op, OpKind::QuantMatMul) << l.to_string();
    dequantize += n.op == OpKind::Dequantize;
    dot += n.op == OpKind::DotGeneral;
  }
  EXPECT_EQ(dequantize, 1) << l.to_string();
  EXPECT_EQ(dot, 1) << l.to_string();
}

}  // namespace
}  // namespace rlx
