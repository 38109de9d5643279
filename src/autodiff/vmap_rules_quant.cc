// Batching rules of the quantized-weight ops: the batch is one more leading dim, which
// dequantize treats as any other row dim and quant_matmul's x as one more free dim.
#include "vmap_rules.h"

namespace rlx::autodiff::vmap_detail {
namespace {

// dequantize unpacks every last-dim row, so a batched w [V, ..., R] gives [V, ..., k].
std::optional<std::vector<BVal>> batch_dequantize(BatchContext& ctx) {
  return ctx.emit_batched({ctx.in[0].v}, ctx.node.attrs);
}

// quant_matmul with a shared weight: x [V, ..., K] gives [V, ..., N]. A per-example weight
// (w batched: no longer rank 2) declines, and vmap batches the decomposition (a batched
// dequantize and a dot_general with a batch dim).
std::optional<std::vector<BVal>> batch_quant_matmul(BatchContext& ctx) {
  if (ctx.in[1].batched) return std::nullopt;
  return ctx.emit_batched({ctx.in[0].v, ctx.in[1].v}, ctx.node.attrs);
}

}  // namespace

void register_batch_quant() {
  set_batch_rule(OpKind::Dequantize, batch_dequantize);
  set_batch_rule(OpKind::QuantMatMul, batch_quant_matmul);
}

}  // namespace rlx::autodiff::vmap_detail
