// Op cases of the neural-network family: softmax, log_softmax, layer_norm, rms_norm, attention
// (every mask kind, GQA), rope and softmax_cross_entropy.
#include <cmath>

#include "common.h"

namespace rlx::testing {
namespace {

using namespace cases;

void add_softmax_norms(CaseList& cs) {
  for (OpKind op : {OpKind::Softmax, OpKind::LogSoftmax}) {
    auto axis = [](int64_t a) { return AttrMap{{"axis", a}}; };
    cs.add(op, "axis0").sample({T({3, 5})}, axis(0));
    cs.add(op, "axes").sample({T({3, 4, 5})}, axis(-1)).sample({T({3, 4, 5})}, axis(1));
    // A row that is entirely -inf gives NaN; large finite values do not overflow.
    cs.add(op, "inf_rows")
        .sample({fixed(DType::f32, {3, 3},
                       {-INFINITY, -INFINITY, -INFINITY, 1e30, 0, -1e30, INFINITY, 0, 1})},
                [op](Graph& g, auto& in, DType t) {
                  return std::vector<Value>{g.emit1(op, {g.convert(in[0], t)}, {{"axis", -1}})};
                })
        .only(kNoPjrt & ~kFdSuite,
              "infinite inputs: " + std::string(kSpecialsWhy) + "; no derivative at -inf rows");
    cs.add(op, "sized")
        .sample({T({3, 1031}, range(-8, 8))}, axis(-1))
        .sample({T({5, 7, 9}, range(-8, 8))}, axis(op == OpKind::Softmax ? 1 : 0))
        .sample({T({0, 4}, range(-8, 8))}, axis(1))
        .sample({T({13, 33}, specials())}, axis(-1))
        .only(kSizedSuites, kSizedWhy);
  }
  auto norm = [](int64_t axis, double eps) { return AttrMap{{"axis", axis}, {"eps", eps}}; };
  cs.add(OpKind::LayerNorm, "basic").sample({T({2, 3, 8}), T({8}), T({8})}, norm(-1, 1e-5));
  cs.add(OpKind::LayerNorm, "axis1").sample({T({2, 3, 4}), T({3, 4}), T({3, 4})}, norm(1, 1e-3));
  cs.add(OpKind::LayerNorm, "sized")
      .sample({T({6, 1031}), T({1031}), T({1031})}, norm(-1, 1e-5))
      .sample({T({2, 5, 33}), T({5, 33}), T({5, 33})}, norm(1, 1e-3))
      .only(kSizedSuites, kSizedWhy);
  cs.add(OpKind::RmsNorm, "basic").sample({T({4, 16}), T({16})}, norm(-1, 1e-6));
  cs.add(OpKind::RmsNorm, "eps").sample({T({3, 4}), T({4})}, norm(-1, 1e-3));
  cs.add(OpKind::RmsNorm, "sized")
      .sample({T({6, 1031}), T({1031})}, norm(-1, 1e-6))
      .sample({T({2, 5, 33}), T({5, 33})}, norm(1, 1e-6))
      .only(kSizedSuites, kSizedWhy);
}

AttrMap mask(const std::string& kind, int64_t window = 0) {
  return {{"mask", kind}, {"window", window}};
}

void add_attention(CaseList& cs) {
  // GQA: 4 query heads over 2 kv heads; more keys than queries (causal masks align the ends).
  const Values v = range(-1, 1);
  for (auto [kind, window] : std::vector<std::pair<std::string, int64_t>>{
           {"none", 0}, {"causal", 0}, {"sliding_window", 2}}) {
    cs.add(OpKind::Attention, "gqa_" + kind)
        .sample({T({1, 4, 3, 4}, v), T({1, 2, 5, 4}, v), T({1, 2, 5, 3}, v)}, mask(kind, window));
  }
  cs.add(OpKind::Attention, "bool")
      .sample({T({2, 2, 3, 4}, v), T({2, 2, 4, 4}, v), T({2, 2, 4, 4}, v),
               fixed(DType::bool_, {2, 1, 1, 4}, {1, 1, 0, 1, 1, 0, 0, 0})},
              mask("bool"));
  // A KV cache: row b has lengths[b] valid keys, its queries at the last of them (row 1 of the
  // first sample: query 0 sees nothing, query 2 keys 0-1; lengths past Sk see every key).
  cs.add(OpKind::Attention, "causal_lengths")
      .sample({T({2, 4, 3, 4}, v), T({2, 2, 5, 4}, v), T({2, 2, 5, 3}, v),
               fixed(DType::i32, {2}, {4, 2})},
              mask("causal_lengths"))
      .sample({T({3, 2, 1, 4}, v), T({3, 1, 6, 4}, v), T({3, 1, 6, 4}, v),
               fixed(DType::i64, {3}, {1, 4, 9})},
              mask("causal_lengths"));
  AttrMap scaled = mask("bias");
  scaled.set("scale", 0.7);
  cs.add(OpKind::Attention, "bias")
      .sample({T({1, 2, 3, 4}, v), T({1, 2, 4, 4}, v), T({1, 2, 4, 4}, v), T({1, 1, 3, 4}, v)},
              scaled)
      .sample({T({2, 2, 3, 4}, v), T({2, 1, 5, 4}, v), T({2, 1, 5, 2}, v), T({3, 5}, v)},
              mask("bias"));
  cs.add(OpKind::Attention, "masks")
      .sample({T({2, 4, 3, 8}), T({2, 2, 5, 8}), T({2, 2, 5, 6})}, mask("none"))
      .sample({T({2, 4, 3, 8}), T({2, 2, 5, 8}), T({2, 2, 5, 6})}, mask("causal"))
      .sample({T({2, 4, 3, 8}), T({2, 2, 5, 8}), T({2, 2, 5, 6})},
              [](Graph& g, auto& in, DType) {
                Graph::AttentionOptions o{"sliding_window", 0.3, 2};
                return std::vector<Value>{g.attention(in[0], in[1], in[2], o)};
              })
      .sample(
          {T({2, 4, 3, 8}), T({2, 2, 5, 8}), T({2, 2, 5, 6}), typed(DType::bool_, {1, 1, 3, 5})},
          mask("bool"))
      .sample({T({2, 4, 3, 8}), T({2, 2, 5, 8}), T({2, 2, 5, 6}), T({2, 1, 1, 5})}, mask("bias"));
  for (const std::string kind : {"none", "causal", "sliding_window", "bool", "bias"}) {
    AttrMap m = mask(kind, kind == "sliding_window" ? 3 : 0);
    auto extra = [&](Shape bool_shape, Shape bias_shape) {
      std::vector<Operand> ops;
      if (kind == "bool") ops.push_back(typed(DType::bool_, bool_shape));
      if (kind == "bias") ops.push_back(T(bias_shape, v));
      return ops;
    };
    std::vector<Operand> gqa{T({2, 4, 7, 16}, v), T({2, 2, 9, 16}, v), T({2, 2, 9, 8}, v)};
    std::vector<Operand> square{T({1, 2, 33, 64}, v), T({1, 2, 33, 64}, v), T({1, 2, 33, 64}, v)};
    for (const Operand& o : extra({1, 1, 7, 9}, {2, 1, 7, 9})) gqa.push_back(o);
    for (const Operand& o : extra({33, 33}, {33, 33})) square.push_back(o);
    cs.add(OpKind::Attention, "sized_" + kind)
        .sample(gqa, m)
        .sample(square, m)
        .only(kSizedSuites, kSizedWhy);
    // Non-finite scores (q, k), and non-finite values (v), which masked keys must not let
    // through.
    AttrMap nm = mask(kind, kind == "sliding_window" ? 2 : 0);
    for (bool values : {false, true}) {
      const Values nf = range(-1, 1).with(Specials::NonFinite);
      std::vector<Operand> ops{T({1, 2, 7, 16}, nf), T({1, 2, 9, 16}, nf),
                               T({1, 2, 9, 8}, values ? nf : v)};
      for (const Operand& o : extra({1, 1, 7, 9}, {7, 9})) ops.push_back(o);
      cs.add(OpKind::Attention, std::string("nonfinite_") + (values ? "values_" : "scores_") + kind)
          .sample(ops, nm)
          .only(kSizedSuites, "non-finite scores and values against the CPU kernels' masking");
    }
  }
}

void add_rope_sce(CaseList& cs) {
  for (const std::string layout : {"neox", "gptj"}) {
    cs.add(OpKind::Rope, layout)
        .sample({T({2, 3, 6}), T({3, 2}), T({3, 2})}, {{"layout", layout}})
        .sample({T({2, 5, 8}), T({5, 3}, range(-0.9, 0.9)), T({5, 3}, range(-0.9, 0.9))},
                {{"layout", layout}});
    cs.add(OpKind::Rope, "sized_" + layout)
        .sample({T({2, 3, 9, 16}, range(-1, 1)), T({9, 8}, range(-1, 1)), T({9, 8}, range(-1, 1))},
                {{"layout", layout}})
        .sample({T({2, 9, 16}, range(-1, 1)), T({9, 4}, range(-1, 1)), T({9, 4}, range(-1, 1))},
                {{"layout", layout}})
        .only(kSizedSuites, kSizedWhy);
  }
  // Labels out of range are clamped like gather's indices.
  cs.add(OpKind::SoftmaxCrossEntropy, "basic")
      .sample({T({2, 3, 5}), fixed(DType::i32, {2, 3}, {0, 4, 2, 9, -1, 1})});
  cs.add(OpKind::SoftmaxCrossEntropy, "labels")
      .sample({T({2, 3, 7}), typed(DType::i32, {2, 3}, ints(0, 6))})
      .sample({T({3, 5}), typed(DType::i64, {3}, ints(0, 4))});
  cs.add(OpKind::SoftmaxCrossEntropy, "sized")
      .sample({T({7, 33}), typed(DType::i32, {7}, ints(-20, 40))})
      .sample({T({2, 3, 1031}), typed(DType::i64, {2, 3}, ints(-20, 1040))})
      .only(kSizedSuites, kSizedWhy);
}

}  // namespace

void add_nn_cases(CaseList& cs) {
  add_softmax_norms(cs);
  add_attention(cs);
  add_rope_sce(cs);
}

}  // namespace rlx::testing
