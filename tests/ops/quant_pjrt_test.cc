// The PJRT backend's op set does not include the quantized-weight ops yet: legalizing a graph
// with dequantize (directly or through quant_matmul's decomposition) for it fails with the
// error every unsupported op gives, naming the op and the node.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/graph.h"
#include "rlx/opt/legalize.h"

namespace rlx {
namespace {

TEST(QuantOnPjrt, LegalizeRejectsDequantizeNamingTheNode) {
  EXPECT_FALSE(pjrt::native_ops().count(OpKind::Dequantize));
  Graph g("q");
  Value x = g.input("x", DType::f32, {2, 64});
  Value w = g.param("w", DType::u8, {3, 68});
  Value y = g.quant_matmul(x, w, QuantFormat::kQ8_0);
  g.set_outputs({y});
  EXPECT_EQ(testing::error_of([&] { legalize(g, pjrt::native_ops(), {}, "pjrt"); }),
            "backend 'pjrt' cannot run: dequantize (node %0 via quant_matmul)");
  Graph d("d");
  d.set_outputs({d.dequantize(d.param("w", DType::u8, {3, 68}), QuantFormat::kQ8_0, 64)});
  EXPECT_EQ(testing::error_of([&] { legalize(d, pjrt::native_ops(), {}, "pjrt"); }),
            "backend 'pjrt' cannot run: dequantize (node %0)");
}

}  // namespace
}  // namespace rlx
