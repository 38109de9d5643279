// The "fuse-attention" pass: q·kᵀ -> scale -> mask -> softmax -> ·v becomes one attention node.
#include <cmath>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

using Ints = std::vector<int64_t>;

// A route from the root node back to one of its inputs: the operand index taken at each node.
using Path = std::vector<size_t>;

Value follow(const Graph& g, std::span<const Value> root_operands, const Path& path) {
  Value v = root_operands[path[0]];
  for (size_t i = 1; i < path.size(); ++i) v = g.node(v).operands[path[i]];
  return v;
}

// The value of a constant with exactly one element, if `v` is one.
std::optional<double> scalar_constant(const Graph& g, Value v) {
  const Node& n = g.node(v);
  if (n.op != OpKind::Constant || n.results[0].shape.numel() != 1) return std::nullopt;
  return n.attrs.get_tensor("value").get_f64(0);
}

// dot_general with these dims and no widened result dtype: [B,H,M,K]·[B,H,N,K] (qk, contract
// {3}x{3}) or [B,H,M,K]·[B,H,K,N] (pv, contract {3}x{2}) over batch dims {0,1}.
bool is_batched_dot(const Graph& g, const Node& n, int64_t rhs_contract) {
  if (n.op != OpKind::DotGeneral) return false;
  const AttrMap& a = n.attrs;
  if (a.has("preferred") && a.get_dtype("preferred") != g.dtype(n.operands[0])) return false;
  return a.get_ints("lhs_batch") == Ints{0, 1} && a.get_ints("rhs_batch") == Ints{0, 1} &&
         a.get_ints("lhs_contract") == Ints{3} && a.get_ints("rhs_contract") == Ints{rhs_contract};
}

struct Match {
  Path q, k, mask_tensor;  // mask_tensor empty for mask "none"
  std::string mask = "none";
  double scale = 1;
  int32_t scores_node = -1;  // the q·kᵀ node, which must not itself have been replaced
};

// Fires on (every arrow: the value has exactly one use; layouts [B,H,S,D])
//   s = matmul(q, transpose(k, [0,1,3,2]))  or  dot_general(q, k) batch {0,1}, contract {3}x{3}
//   [s = mul(s, c) | mul(c, s) | div(s, c)]   c a one-element float constant -> scale c or 1/c
//                                             (finite, nonzero); absent -> scale 1
//   [s = add(s, m) | add(m, s)]               -> mask "bias" with tensor m
//   [s = select(m, s, -inf)]                  m bool, -inf a one-element constant -> mask "bool"
//   p = softmax(s) on the last axis
//   o = matmul(p, v)  or  dot_general(p, v) batch {0,1}, contract {3}x{2}
// when every intermediate keeps the scores shape [B,Hq,Sq,Sk] and q [B,Hq,Sq,D], k [B,Hkv,Sk,D],
// v [B,Hkv,Sk,Dv] meet attention's contract (Hq a multiple of Hkv, one float dtype). A scale
// applied to q before the product is simply part of q. Not matched: scale after the mask,
// softmax on another axis, other transposes of k, a -inf select written the other way round.
//
// One documented difference: a query row whose keys are all masked is NaN in the unfused
// softmax but 0 in attention (docs/ir.md); rows with any visible key are the same function.
class FuseAttentionPass : public Pass {
 public:
  std::string_view name() const override { return "fuse-attention"; }

  bool run(Graph& g) override {
    std::vector<std::vector<int>> uses = use_counts(g);
    auto single = [&](Value v) {
      return uses[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)] == 1;
    };
    std::set<int32_t> replaced;  // source ids of the roots turned into attention

    auto keeps = [&](Value v, const Shape& scores) { return single(v) && g.shape(v) == scores; };

    // Matches [scale] -> q·kᵀ upward from `s` (reached by `at`), completing `m`.
    auto match_scores = [&](Match m, Path at, Value s,
                            const Shape& scores) -> std::optional<Match> {
      const Node* t = &g.node(s);
      if ((t->op == OpKind::Mul || t->op == OpKind::Div) && keeps(s, scores)) {
        for (size_t side = 0; side < (t->op == OpKind::Div ? 1u : 2u); ++side) {  // c * s, s / c
          std::optional<double> c = scalar_constant(g, t->operands[1 - side]);
          if (!c || !std::isfinite(*c) || *c == 0) continue;
          m.scale = t->op == OpKind::Div ? 1 / *c : *c;
          at.push_back(side);
          s = t->operands[side];
          break;
        }
      }
      t = &g.node(s);
      if (!keeps(s, scores)) return std::nullopt;
      m.scores_node = s.node;
      m.q = at;
      m.q.push_back(0);
      m.k = at;
      m.k.push_back(1);
      if (t->op == OpKind::MatMul) {
        const Node& tr = g.node(t->operands[1]);
        if (tr.op != OpKind::Transpose || tr.attrs.get_ints("permutation") != Ints{0, 1, 3, 2})
          return std::nullopt;
        m.k.push_back(0);
      } else if (!is_batched_dot(g, *t, 3)) {
        return std::nullopt;
      }
      return m;
    };

    // Matches the chain ending at root `n`, with paths starting at n's operands.
    auto match = [&](const Node& n) -> std::optional<Match> {
      if (n.op != OpKind::MatMul && !is_batched_dot(g, n, 2)) return std::nullopt;
      Value p = n.operands[0];
      const Node& sm = g.node(p);
      if (sm.op != OpKind::Softmax || !single(p) || sm.results[0].shape.rank() != 4 ||
          sm.results[0].shape.normalize_axis(sm.attrs.get_int("axis")) != 3)
        return std::nullopt;
      const Shape& scores = sm.results[0].shape;
      Path at{0, 0};  // root -> softmax -> its input
      Value s = sm.operands[0];
      const Node& t = g.node(s);
      if (t.op == OpKind::Select && keeps(s, scores) && is_bool(g.dtype(t.operands[0]))) {
        std::optional<double> c = scalar_constant(g, t.operands[2]);
        if (c && std::isinf(*c) && *c < 0) {
          Match m;
          m.mask = "bool";
          m.mask_tensor = {0, 0, 0};
          return match_scores(m, {0, 0, 1}, t.operands[1], scores);
        }
      } else if (t.op == OpKind::Add && keeps(s, scores)) {
        for (size_t side = 0; side < 2; ++side) {  // add(s, bias) or add(bias, s)
          Match m;
          m.mask = "bias";
          m.mask_tensor = {0, 0, 1 - side};
          if (auto r = match_scores(m, {0, 0, side}, t.operands[side], scores)) return r;
        }
        return std::nullopt;
      }
      return match_scores(Match{}, at, s, scores);
    };

    // attention's contract on the matched values (its inference would reject the rest).
    auto fits = [&](const Node& root, const Match& m, const TensorType& q, const TensorType& k,
                    const TensorType& v) {
      if (q.shape.rank() != 4 || k.shape.rank() != 4 || v.shape.rank() != 4) return false;
      if (!is_float(q.dtype) || k.dtype != q.dtype || v.dtype != q.dtype) return false;
      const Shape &qs = q.shape, &ks = k.shape, &vs = v.shape;
      if (ks[0] != qs[0] || vs[0] != qs[0] || ks[3] != qs[3] || vs[1] != ks[1] || vs[2] != ks[2] ||
          ks[1] == 0 || qs[1] % ks[1] != 0)
        return false;
      if (g.shape(Value{m.scores_node, 0}) != Shape{qs[0], qs[1], qs[2], ks[2]}) return false;
      return root.results[0] == TensorType{q.dtype, Shape{qs[0], qs[1], qs[2], vs[3]}};
    };

    auto fuse = [&](RewriteContext& ctx, const Node& n,
                    std::span<const Value> operands) -> std::optional<std::vector<Value>> {
      if (uses[static_cast<size_t>(ctx.id)][0] == 0) return std::nullopt;
      std::optional<Match> m = match(n);
      if (!m || replaced.count(m->scores_node)) return std::nullopt;
      std::span<const Value> src_ops(n.operands);
      Value q = follow(g, src_ops, m->q), k = follow(g, src_ops, m->k);
      if (!fits(n, *m, g.type(q), g.type(k), g.type(n.operands[1]))) return std::nullopt;
      std::vector<Value> ops{ctx.mapped(q), ctx.mapped(k), operands[1]};
      if (!m->mask_tensor.empty()) ops.push_back(ctx.mapped(follow(g, src_ops, m->mask_tensor)));
      replaced.insert(ctx.id);
      return ctx.dst.emit(OpKind::Attention, std::move(ops),
                          {{"mask", m->mask}, {"scale", m->scale}}, n.name);
    };
    g = rewrite(g, fuse);
    return !replaced.empty();
  }
};

}  // namespace

std::unique_ptr<Pass> create_fuse_attention_pass() { return std::make_unique<FuseAttentionPass>(); }

}  // namespace rlx
