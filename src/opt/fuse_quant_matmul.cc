// The "fuse-quant-matmul" pass: a matmul / dot_general whose weight is a dequantized packed
// tensor becomes one quant_matmul node, so the backend's fused kernel reads the weight packed
// instead of a dequantized f32 copy (the form quantize_params and users' graphs produce).
#include <memory>
#include <optional>
#include <vector>

#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

// The dequantize node under weight value `w` when w is dequantize(p: u8[N, R]) (an [N, K]
// weight, contracted along its dim 1) and `transposed` is false, or transpose(dequantize(p),
// [1, 0]) (a [K, N] weight, contracted along dim 0) and `transposed` is true; else null.
const Node* dequantized_weight(const Graph& g, Value w, bool transposed) {
  const Node* n = &g.node(w);
  if (transposed) {
    if (n->op != OpKind::Transpose ||
        n->attrs.get_ints("permutation") != std::vector<int64_t>{1, 0})
      return nullptr;
    n = &g.node(n->operands[0]);
  }
  if (n->op != OpKind::Dequantize || g.type(n->operands[0]).shape.rank() != 2) return nullptr;
  return n;
}

// Fires on
//   %y = matmul %x, transpose(dequantize(%p), [1, 0])                 (x . W, W [K, N])
//   %y = dot_general %x, dequantize(%p)  contracting x's last dim with dim 1, no batch dims
//   %y = dot_general %x, transpose(dequantize(%p), [1, 0])  ... with dim 0
// for f32 x without a preferred result dtype, all of which equal quant_matmul(x, p) (x's free
// dims, then N). The dequantize and transpose stay for their other users; dce drops them
// otherwise. The fused node takes the matmul's name.
class FuseQuantMatMulPass : public Pass {
 public:
  std::string_view name() const override { return "fuse-quant-matmul"; }

  bool run(Graph& g) override {
    int fused = 0;
    auto fuse = [&](RewriteContext& ctx, const Node& n,
                    std::span<const Value> operands) -> std::optional<std::vector<Value>> {
      if ((n.op != OpKind::MatMul && n.op != OpKind::DotGeneral) ||
          g.type(n.operands[0]).dtype != DType::f32)
        return std::nullopt;
      const Node* dq = nullptr;
      if (n.op == OpKind::MatMul) {
        dq = dequantized_weight(g, n.operands[1], true);
      } else if (n.op == OpKind::DotGeneral) {
        const AttrMap& a = n.attrs;
        int64_t x_last = g.type(n.operands[0]).shape.rank() - 1;
        if (!a.get_ints("lhs_batch").empty() || !a.get_ints("rhs_batch").empty() ||
            a.get_ints("lhs_contract") != std::vector<int64_t>{x_last} || a.has("preferred"))
          return std::nullopt;
        const std::vector<int64_t>& rc = a.get_ints("rhs_contract");
        if (rc.size() == 1 && (rc[0] == 0 || rc[0] == 1))
          dq = dequantized_weight(g, n.operands[1], rc[0] == 0);
      }
      if (dq == nullptr) return std::nullopt;
      ++fused;
      Value packed = ctx.mapped(dq->operands[0]);
      return ctx.dst.emit(OpKind::QuantMatMul, {operands[0], packed}, dq->attrs, n.name);
    };
    Graph out = rewrite(g, fuse);
    g = std::move(out);
    return fused > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> create_fuse_quant_matmul_pass() {
  return std::make_unique<FuseQuantMatMulPass>();
}

}  // namespace rlx
