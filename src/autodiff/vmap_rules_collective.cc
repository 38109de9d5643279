// Batching rules of the collectives: the collective on the batched operand [B, ...] with its
// axis attributes shifted past the batch dim (every example is reduced, gathered or exchanged
// across the devices as the unbatched op does; all_reduce has no axis).
#include <string>

#include "vmap_rules.h"

namespace rlx::autodiff::vmap_detail {
namespace {

std::optional<std::vector<BVal>> batch_collective(BatchContext& ctx) {
  int rank = ctx.unbatched_type(0).shape.rank();
  AttrMap a = ctx.node.attrs;
  for (const char* k : {"axis", "scatter_dimension", "split_axis", "concat_axis"})
    if (a.has(k)) a.set(k, shift_axis(a.get_int(k), rank));
  return ctx.emit_batched({ctx.batched(0)}, a);
}

}  // namespace

void register_batch_collective() {
  for (OpKind op : {OpKind::AllReduce, OpKind::AllGather, OpKind::ReduceScatter, OpKind::AllToAll})
    set_batch_rule(op, batch_collective);
}

}  // namespace rlx::autodiff::vmap_detail
