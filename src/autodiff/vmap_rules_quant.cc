// Batching rules of the quantized-weight ops: the batch is one more leading dim, which
// dequantize treats as any other row dim and quant_matmul's x as one more free dim.
#include "vmap_rules.h"

namespace rlx::autodiff::vmap_detail {
namespace {

// dequantize unpacks every last-dim row, so a batched w [V, ..., R] gives [V, ..., k].
std::optional<std::vector<BVal>> batch_dequantize(BatchContext& ctx) {
  return ctx.emit_batched({ctx.in[0].v}, ctx.node.attrs);
}

// quant_matmul with a shared weight (and bias): x [V, ..., K] gives [V, ..., N], the bias [N]
// still broadcasting over every row. A per-example weight or bias (batched: no longer rank 2 /
// 1) declines, and vmap batches the decomposition (a batched dequantize and a dot_general with
// a batch dim, an add of the batched bias).
std::optional<std::vector<BVal>> batch_quant_matmul(BatchContext& ctx) {
  std::vector<Value> operands{ctx.in[0].v};
  for (size_t i = 1; i < ctx.in.size(); ++i) {
    if (ctx.in[i].batched) return std::nullopt;
    operands.push_back(ctx.in[i].v);
  }
  return ctx.emit_batched(std::move(operands), ctx.node.attrs);
}

}  // namespace

void register_batch_quant() {
  set_batch_rule(OpKind::Dequantize, batch_dequantize);
  set_batch_rule(OpKind::QuantMatMul, batch_quant_matmul);
}

}  // namespace rlx::autodiff::vmap_detail
