// The "fuse-packed-attention" pass: attention whose q, k and v are head-split column blocks of
// one packed projection [B,S,(Hq+2Hkv)D], with its output transposed back to [B,S,Hq D], becomes
// one packed_qkv_attention node (no transposes around it).
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

using Ints = std::vector<int64_t>;

// Where one of q / k / v [B,h,S,D] comes from: columns [col, col + h D) of `qkv` [B,S,W];
// `shared` is an intermediate the three operands have in common (the 5-D transpose or the 4-D
// reshape), or -1.
struct Source {
  Value qkv;
  int64_t col = 0;
  int32_t shared = -1;
};

bool unit_strides(const Node& n) {
  if (!n.attrs.has("strides")) return true;
  for (int64_t s : n.attrs.get_ints("strides"))
    if (s != 1) return false;
  return true;
}

class FusePackedAttentionPass : public Pass {
 public:
  std::string_view name() const override { return "fuse-packed-attention"; }

  bool run(Graph& g) override {
    std::vector<std::vector<int>> uses = use_counts(g);
    auto single = [&](Value v) {
      return uses[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)] == 1;
    };
    auto is = [&](Value v, OpKind op) { return g.node(v).op == op; };
    auto perm = [&](Value v) { return g.node(v).attrs.get_ints("permutation"); };

    // x [B,h,S,D] (single use) as one of these chains from qkv [B,S,W]:
    //  (a) reshape(slice(transpose(reshape(qkv, [B,S,3,h,D]), [2,0,3,1,4]), i), [B,h,S,D])
    //      (build_bert_encoder's fused_qkv; columns i h D)
    //  (b) transpose(reshape(slice(qkv, columns [c, c + h D)), [B,S,h,D]), [0,2,1,3])
    //  (c) transpose(slice(reshape(qkv, [B,S,P,D]), heads [h0, h0 + h)), [0,2,1,3])
    //      (packed_qkv_attention's decomposition; columns h0 D)
    auto source = [&](Value x) -> std::optional<Source> {
      const Shape xs = g.shape(x);
      if (!single(x) || xs.rank() != 4) return std::nullopt;
      const int64_t b = xs[0], h = xs[1], s = xs[2], d = xs[3];
      if (is(x, OpKind::Reshape)) {  // (a)
        Value sl = g.node(x).operands[0];
        if (!is(sl, OpKind::Slice) || !single(sl) || !unit_strides(g.node(sl))) return std::nullopt;
        Value t5 = g.node(sl).operands[0];
        if (!is(t5, OpKind::Transpose) || perm(t5) != Ints{2, 0, 3, 1, 4}) return std::nullopt;
        Value r5 = g.node(t5).operands[0];
        if (!is(r5, OpKind::Reshape) || !single(r5) || g.shape(r5) != Shape{b, s, 3, h, d})
          return std::nullopt;
        const Ints start = g.node(sl).attrs.get_ints("start");
        const Ints limit = g.node(sl).attrs.get_ints("limit");
        if (start.size() != 5 || start[0] < 0 || start[0] > 2 || limit[0] != start[0] + 1 ||
            Ints(start.begin() + 1, start.end()) != Ints{0, 0, 0, 0} ||
            Ints(limit.begin() + 1, limit.end()) != Ints{b, h, s, d})
          return std::nullopt;
        return Source{g.node(r5).operands[0], start[0] * h * d, t5.node};
      }
      if (!is(x, OpKind::Transpose) || perm(x) != Ints{0, 2, 1, 3}) return std::nullopt;
      Value y = g.node(x).operands[0];
      if (!single(y)) return std::nullopt;
      if (is(y, OpKind::Reshape)) {  // (b)
        Value sl = g.node(y).operands[0];
        if (!is(sl, OpKind::Slice) || !single(sl) || !unit_strides(g.node(sl))) return std::nullopt;
        Value qkv = g.node(sl).operands[0];
        const Shape& qs = g.shape(qkv);
        const Ints start = g.node(sl).attrs.get_ints("start");
        const Ints limit = g.node(sl).attrs.get_ints("limit");
        if (qs.rank() != 3 || qs[0] != b || qs[1] != s || start.size() != 3 || start[0] != 0 ||
            start[1] != 0 || limit[0] != b || limit[1] != s || limit[2] != start[2] + h * d)
          return std::nullopt;
        return Source{qkv, start[2], -1};
      }
      if (is(y, OpKind::Slice) && unit_strides(g.node(y))) {  // (c)
        Value r4 = g.node(y).operands[0];
        if (!is(r4, OpKind::Reshape)) return std::nullopt;
        const Shape& rs = g.shape(r4);
        const Ints start = g.node(y).attrs.get_ints("start");
        const Ints limit = g.node(y).attrs.get_ints("limit");
        if (rs.rank() != 4 || rs[0] != b || rs[1] != s || rs[3] != d || start.size() != 4 ||
            start[0] != 0 || start[1] != 0 || start[3] != 0 || limit[0] != b || limit[1] != s ||
            limit[2] != start[2] + h || limit[3] != d)
          return std::nullopt;
        return Source{g.node(r4).operands[0], start[2] * d, r4.node};
      }
      return std::nullopt;
    };

    bool changed = false;
    auto fuse = [&](RewriteContext& ctx, const Node& n,
                    std::span<const Value>) -> std::optional<std::vector<Value>> {
      // n = reshape(transpose(attention(q, k, v[, mask]), [0,2,1,3]), [B,S,Hq D]).
      if (n.op != OpKind::Reshape) return std::nullopt;
      Value tr = n.operands[0];
      if (!is(tr, OpKind::Transpose) || !single(tr) || perm(tr) != Ints{0, 2, 1, 3})
        return std::nullopt;
      Value a = g.node(tr).operands[0];
      if (!is(a, OpKind::Attention) || !single(a)) return std::nullopt;
      const Node& attn = g.node(a);
      const Shape qs = g.shape(attn.operands[0]), ks = g.shape(attn.operands[1]);
      const Shape vs = g.shape(attn.operands[2]);
      const int64_t b = qs[0], hq = qs[1], s = qs[2], d = qs[3], hkv = ks[1];
      if (vs[3] != d || ks[2] != s || n.results[0].shape != Shape{b, s, hq * d})
        return std::nullopt;
      std::optional<Source> src[3];
      for (size_t i = 0; i < 3; ++i)
        if (!(src[i] = source(attn.operands[i]))) return std::nullopt;
      const Value qkv = src[0]->qkv;
      if (src[1]->qkv != qkv || src[2]->qkv != qkv) return std::nullopt;
      if (src[0]->col != 0 || src[1]->col != hq * d || src[2]->col != (hq + hkv) * d ||
          g.shape(qkv) != Shape{b, s, (hq + 2 * hkv) * d})
        return std::nullopt;
      // A shared intermediate may feed nothing but these three operands.
      std::map<int32_t, int> shared;
      for (const auto& x : src)
        if (x->shared >= 0) ++shared[x->shared];
      for (const auto& [node, count] : shared)
        if (uses[static_cast<size_t>(node)][0] != count) return std::nullopt;
      std::vector<Value> ops{ctx.mapped(qkv)};
      if (attn.operands.size() == 4) ops.push_back(ctx.mapped(attn.operands[3]));
      AttrMap attrs{{"heads", hq},
                    {"mask", attn.attrs.get_string("mask")},
                    {"window", attn.attrs.get_int("window")}};
      if (hkv != hq) attrs.set("kv_heads", hkv);
      if (attn.attrs.has("scale")) attrs.set("scale", attn.attrs.get_float("scale"));
      changed = true;
      return ctx.dst.emit(OpKind::PackedQkvAttention, std::move(ops), std::move(attrs), n.name);
    };
    g = rewrite(g, fuse);
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> create_fuse_packed_attention_pass() {
  return std::make_unique<FusePackedAttentionPass>();
}

}  // namespace rlx
