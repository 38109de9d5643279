// Op cases of the fused family: fused_matmul_bias_act (every activation), the residual norms
// and elementwise_region.
#include "common.h"

namespace rlx::testing {
namespace {

using namespace cases;

// A region body over the case's dtype: operands a [2,3] (or `a`) and b broadcast against it.
Graph region_body(DType t, Shape a, Shape b) {
  Graph body("body");
  Value x = body.input("a", t, std::move(a));
  Value y = body.input("b", t, std::move(b));
  if (is_float(t)) {
    Value h = body.tanh(body.mul(body.sub(x, y), body.scalar(0.5, t)));
    body.set_outputs({body.mul(h, y), body.exp(body.neg(body.abs(x))), body.max(x, y)});
  } else {  // integer and bool bodies: arithmetic / logic that every such dtype has
    Value s = is_bool(t) ? body.logical_xor(x, y) : body.add(body.mul(x, y), x);
    body.set_outputs({s, is_bool(t) ? body.logical_or(x, y) : body.max(x, y)});
  }
  return body;
}

}  // namespace

void add_fused_cases(CaseList& cs) {
  for (const std::string act : {"none", "relu", "gelu", "gelu_tanh", "silu"}) {
    cs.add(OpKind::FusedMatMulBiasAct, act)
        .sample({T({2, 3, 4}), T({4, 5}), T({5})}, {{"activation", act}})
        .sample({T({2, 3, 8}, range(-1, 1)), T({8, 6}, range(-1, 1)), T({6}, range(-1, 1))},
                {{"activation", act}});
    cs.add(OpKind::FusedMatMulBiasAct, "sized_" + act)
        .sample({T({7, 33}, range(-1, 1)), T({33, 17}, range(-1, 1)), T({17}, range(-1, 1))},
                {{"activation", act}})
        .sample({T({2, 9, 65}, range(-1, 1)), T({65, 31}, range(-1, 1)), T({9, 31}, range(-1, 1))},
                {{"activation", act}})
        .only(kSizedSuites, kSizedWhy);
  }
  auto norm = [](int64_t axis, double eps) { return AttrMap{{"axis", axis}, {"eps", eps}}; };
  cs.add(OpKind::FusedResidualLayerNorm, "basic")
      .sample({T({2, 4}), T({2, 4}), T({4}), T({4})}, norm(-1, 1e-5))
      .sample({T({3, 8}), T({3, 8}), T({8}), T({8})}, norm(-1, 1e-3));
  cs.add(OpKind::FusedResidualRmsNorm, "basic")
      .sample({T({2, 4}), T({2, 4}), T({4})}, norm(-1, 1e-6))
      .sample({T({3, 8}), T({3, 8}), T({8})}, norm(-1, 1e-3));
  cs.add(OpKind::FusedResidualLayerNorm, "sized")
      .sample({T({6, 129}), T({6, 129}), T({129}), T({129})}, norm(-1, 1e-5))
      .only(kSizedSuites, kSizedWhy);
  cs.add(OpKind::FusedResidualRmsNorm, "sized")
      .sample({T({3, 1031}), T({3, 1031}), T({1031})}, norm(-1, 1e-6))
      .only(kSizedSuites, kSizedWhy);

  auto region = [](Shape a, Shape b) {
    return [a, b](Graph& g, const std::vector<Value>& in, DType t) {
      return g.elementwise_region({in[0], in[1]}, region_body(t, a, b));
    };
  };
  cs.add(OpKind::ElementwiseRegion, "basic").sample({T({2, 3}), T({3})}, region({2, 3}, {3}));
  cs.add(OpKind::ElementwiseRegion, "specials")
      .sample({T({3, 4}, specials()), T({3, 4}, specials())}, region({3, 4}, {3, 4}))
      .only(kNoPjrt, kSpecialsWhy);
  cs.add(OpKind::ElementwiseRegion, "sized")
      .sample({T({3, 33}, specials()), T({33}, specials())}, region({3, 33}, {33}))
      .only(kSizedSuites, kSizedWhy);
}

}  // namespace rlx::testing
