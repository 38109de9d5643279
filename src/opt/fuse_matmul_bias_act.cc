// The "fuse-matmul-bias-act" pass: matmul -> add(bias) -> optional activation becomes one
// fused_matmul_bias_act node, and quant_matmul -> add(bias [N]) -> optional activation one
// quant_matmul with the bias operand and the activation (the kernel's epilogue).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

// An activation fuses when its mnemonic is one of fused_matmul_bias_act's "activation" choices
// (relu, gelu, gelu_tanh, silu), so the set follows the op's schema instead of a list here.
bool is_fusable_activation(OpKind op) {
  const AttrSpec* spec = op_info(OpKind::FusedMatMulBiasAct).find_attr("activation");
  std::string_view name = op_name(op);
  return name != "none" &&
         std::find(spec->choices.begin(), spec->choices.end(), name) != spec->choices.end();
}

// Fires on
//   %m = matmul %x, %w ; %a = add %m, %bias (either operand order) ; [%r = ACT %a]
// where ACT is relu/gelu/gelu_tanh/silu, when %m (and %a, if an activation follows) have
// exactly one use, the dtype is a float, and the add keeps the matmul's shape (the bias
// broadcasts into it, never the other way). The fused node takes the name of the last node
// of the chain; the absorbed matmul/add are left dead for dce. An add whose only use is a
// fusable activation is fused together with that activation, not on its own. The same chain
// on a quant_matmul without bias and activation fuses into the quant_matmul when the bias is
// [N] of the result's dtype (one value per output column, the epilogue's operand).
class FuseMatMulBiasActPass : public Pass {
 public:
  std::string_view name() const override { return "fuse-matmul-bias-act"; }

  bool run(Graph& g) override {
    std::vector<std::vector<int>> uses = use_counts(g);
    auto num_uses = [&](Value v) {
      return uses[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)];
    };
    // The node using each single-result node's value last; with one use, its only user.
    std::vector<int32_t> user(g.nodes().size(), -1);
    for (size_t i = 0; i < g.nodes().size(); ++i)
      for (Value v : g.nodes()[i].operands)
        user[static_cast<size_t>(v.node)] = static_cast<int32_t>(i);

    // Whether quant_matmul `mm` takes `bias` as its epilogue: no bias or activation yet, and
    // bias [N] of the result's dtype.
    auto quant_bias = [&](const Node& mm, Value bias) {
      const TensorType& y = mm.results[0];
      return mm.operands.size() == 2 && mm.attrs.get_string("activation") == "none" &&
             g.type(bias) == TensorType{y.dtype, Shape{y.shape[y.shape.rank() - 1]}};
    };
    // Index (0 or 1) of the add operand that is a fusable matmul or quant_matmul, or -1.
    auto matmul_operand = [&](const Node& add) {
      if (add.op != OpKind::Add || !is_float(add.results[0].dtype)) return -1;
      for (int k = 0; k < 2; ++k) {
        Value m = add.operands[static_cast<size_t>(k)];
        const Node& mm = g.node(m);
        if (num_uses(m) != 1 || mm.results[0].shape != add.results[0].shape) continue;
        if (mm.op == OpKind::MatMul || (mm.op == OpKind::QuantMatMul &&
                                        quant_bias(mm, add.operands[static_cast<size_t>(1 - k)])))
          return k;
      }
      return -1;
    };

    int fused = 0;
    auto fuse = [&](RewriteContext& ctx, const Node& n,
                    std::span<const Value> operands) -> std::optional<std::vector<Value>> {
      Graph& dst = ctx.dst;
      // A dead chain (e.g. one a previous run absorbed) is not worth a fused node.
      if (num_uses(Value{ctx.id, 0}) == 0) return std::nullopt;
      std::string act = "none";
      const Node* add = &n;
      Value add_dst;  // the add's value in dst, whose operands are the mapped x*w and bias
      if (is_fusable_activation(n.op)) {
        if (num_uses(n.operands[0]) != 1) return std::nullopt;
        add = &g.node(n.operands[0]);
        act = std::string(op_name(n.op));
        add_dst = operands[0];
      } else if (n.op == OpKind::Add) {
        int32_t u = user[static_cast<size_t>(ctx.id)];
        if (num_uses(Value{ctx.id, 0}) == 1 && u >= 0 && is_fusable_activation(g.node(u).op))
          return std::nullopt;  // fused with its activation when that node is reached
      } else {
        return std::nullopt;
      }
      int k = matmul_operand(*add);
      if (k < 0) return std::nullopt;
      // The add and matmul were copied unchanged into dst, so their copies mirror the source.
      std::vector<Value> add_ops = add == &n ? std::vector<Value>(operands.begin(), operands.end())
                                             : dst.node(add_dst).operands;
      const Node& mm = dst.node(add_ops[static_cast<size_t>(k)]);
      ++fused;
      if (mm.op == OpKind::QuantMatMul) {
        AttrMap attrs = mm.attrs;
        attrs.set("activation", act);
        return dst.emit(OpKind::QuantMatMul,
                        {mm.operands[0], mm.operands[1], add_ops[static_cast<size_t>(1 - k)]},
                        attrs, n.name);
      }
      return dst.emit(OpKind::FusedMatMulBiasAct,
                      {mm.operands[0], mm.operands[1], add_ops[static_cast<size_t>(1 - k)]},
                      {{"activation", act}}, n.name);
    };
    Graph out = rewrite(g, fuse);
    g = std::move(out);
    return fused > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> create_fuse_matmul_bias_act_pass() {
  return std::make_unique<FuseMatMulBiasActPass>();
}

}  // namespace rlx
