// Op cases of the fused family: fused_matmul_bias_act (every activation), the residual norms,
// packed_qkv_attention (masks, GQA) and elementwise_region.
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

  // qkv [B,S,(Hq+2Hkv)D]: heads 2 of D 4 (width 24), GQA 4 over 2 of D 4 (width 32).
  auto packed = [](int64_t heads, int64_t kv_heads, const std::string& kind, int64_t window = 0) {
    AttrMap a{{"heads", heads}, {"mask", kind}, {"window", window}};
    if (kv_heads != heads) a.set("kv_heads", kv_heads);
    return a;
  };
  const Values u = range(-1, 1);
  cs.add(OpKind::PackedQkvAttention, "none").sample({T({2, 3, 24}, u)}, packed(2, 2, "none"));
  cs.add(OpKind::PackedQkvAttention, "gqa_causal")
      .sample({T({1, 5, 32}, u)}, packed(4, 2, "causal"));
  cs.add(OpKind::PackedQkvAttention, "bool")
      .sample({T({2, 4, 24}, u), fixed(DType::bool_, {2, 1, 1, 4}, {1, 1, 0, 1, 1, 0, 0, 0})},
              packed(2, 2, "bool"));
  AttrMap scaled = packed(2, 2, "bias");
  scaled.set("scale", 0.7);
  cs.add(OpKind::PackedQkvAttention, "bias").sample({T({1, 3, 24}, u), T({1, 1, 3, 3}, u)}, scaled);
  cs.add(OpKind::PackedQkvAttention, "sized")
      .sample({T({2, 33, 3 * 2 * 32}, u), fixed(DType::bool_, {2, 1, 1, 33},
                                                [] {
                                                  std::vector<double> m(66, 1);
                                                  for (int j = 29; j < 33; ++j)
                                                    m[33 + j] = 0;  // row 1: 4 padding keys
                                                  return m;
                                                }())},
              packed(2, 2, "bool"))
      .sample({T({1, 9, 8 * 16}, u)}, packed(4, 2, "sliding_window", 3))
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
