// The "fuse-residual-norm" pass: add -> layer_norm / rms_norm becomes one
// fused_residual_layer_norm / fused_residual_rms_norm node.
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

// The fused kind of each norm; the pass exists to pair these two ops with their residual forms.
std::optional<OpKind> fused_kind(OpKind norm) {
  if (norm == OpKind::LayerNorm) return OpKind::FusedResidualLayerNorm;
  if (norm == OpKind::RmsNorm) return OpKind::FusedResidualRmsNorm;
  return std::nullopt;
}

using Key = std::pair<int32_t, int32_t>;
Key key(Value v) { return {v.node, v.index}; }

// Fires on
//   %h = add %x, %r ; %y = layer_norm %h, %scale, %bias   (or rms_norm %h, %scale)
// when %x, %r and %h have one type (no broadcast, no promotion), the norm reads %h as its x
// operand and %y is used. The fused node is emitted where the norm was and takes its name and
// axis/eps; its second result h replaces every use of the add that comes after the norm
// (including graph outputs). Uses between the add and the norm keep reading the add, which then
// stays alive; otherwise it is left dead for dce. An add feeding two norms fuses with the first.
class FuseResidualNormPass : public Pass {
 public:
  std::string_view name() const override { return "fuse-residual-norm"; }

  bool run(Graph& g) override {
    std::vector<std::vector<int>> uses = use_counts(g);
    std::map<Key, Value> replaced;  // dst add copy -> the fused node's h
    std::set<int32_t> fused_adds;   // source ids of adds already fused
    auto subst = [&](Value v) {
      auto it = replaced.find(key(v));
      return it == replaced.end() ? v : it->second;
    };

    auto fuse = [&](Graph& dst, const Node& n,
                    std::span<const Value> operands) -> std::optional<std::vector<Value>> {
      std::vector<Value> ops;
      bool substituted = false;
      for (Value v : operands) {
        ops.push_back(subst(v));
        substituted |= !(ops.back() == v);
      }
      // rewrite() passes the source node itself, so its id is its offset in g.nodes().
      auto id = static_cast<size_t>(&n - g.nodes().data());
      std::optional<OpKind> kind = fused_kind(n.op);
      if (kind && uses[id][0] > 0) {
        Value h_src = n.operands[0];
        const Node& add = g.node(h_src);
        bool fits = add.op == OpKind::Add && !fused_adds.count(h_src.node) &&
                    g.type(add.operands[0]) == add.results[0] &&
                    g.type(add.operands[1]) == add.results[0] && is_float(add.results[0].dtype);
        if (fits) {
          // operands[0] is the add's copy in dst (the add itself is never replaced).
          std::vector<Value> fused_ops = dst.node(operands[0]).operands;
          fused_ops.insert(fused_ops.end(), ops.begin() + 1, ops.end());
          std::vector<Value> r = dst.emit(*kind, std::move(fused_ops), n.attrs, n.name);
          replaced[key(operands[0])] = r[1];
          fused_adds.insert(h_src.node);
          return std::vector<Value>{r[0]};
        }
      }
      if (!substituted) return std::nullopt;
      return dst.emit(n.op, std::move(ops), n.attrs, n.name);
    };
    Graph out = rewrite(g, fuse);
    std::vector<Value> outs;
    for (Value v : out.outputs()) outs.push_back(subst(v));
    out.set_outputs(std::move(outs));
    g = std::move(out);
    return !fused_adds.empty();
  }
};

}  // namespace

std::unique_ptr<Pass> create_fuse_residual_norm_pass() {
  return std::make_unique<FuseResidualNormPass>();
}

}  // namespace rlx
