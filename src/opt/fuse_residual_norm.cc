// The "fuse-residual-norm" pass: add -> layer_norm / rms_norm becomes one
// fused_residual_layer_norm / fused_residual_rms_norm node.
#include <memory>
#include <optional>
#include <set>
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
    std::set<int32_t> fused_adds;  // source ids of adds already fused

    auto fuse = [&](RewriteContext& ctx, const Node& n,
                    std::span<const Value> operands) -> std::optional<std::vector<Value>> {
      std::optional<OpKind> kind = fused_kind(n.op);
      if (kind && uses[static_cast<size_t>(ctx.id)][0] > 0) {
        Value h_src = n.operands[0];
        const Node& add = g.node(h_src);
        bool fits = add.op == OpKind::Add && !fused_adds.count(h_src.node) &&
                    g.type(add.operands[0]) == add.results[0] &&
                    g.type(add.operands[1]) == add.results[0] && is_float(add.results[0].dtype);
        if (fits) {
          // operands[0] is the add's copy in dst (an add is replaced only once fused).
          std::vector<Value> fused_ops = ctx.dst.node(operands[0]).operands;
          fused_ops.insert(fused_ops.end(), operands.begin() + 1, operands.end());
          std::vector<Value> r = ctx.dst.emit(*kind, std::move(fused_ops), n.attrs, n.name);
          ctx.replace_uses(h_src, r[1]);
          fused_adds.insert(h_src.node);
          return std::vector<Value>{r[0]};
        }
      }
      return std::nullopt;
    };
    g = rewrite(g, fuse);
    return !fused_adds.empty();
  }
};

}  // namespace

std::unique_ptr<Pass> create_fuse_residual_norm_pass() {
  return std::make_unique<FuseResidualNormPass>();
}

}  // namespace rlx
