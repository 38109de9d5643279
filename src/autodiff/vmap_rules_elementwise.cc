// Batching rules of elementwise ops (numpy broadcasting; threefry2x32 too), reductions, cumsum
// and top_k.
#include <algorithm>

#include "vmap_rules.h"

namespace rlx::autodiff::vmap_detail {
namespace {

// Elementwise with numpy broadcasting: operands align on trailing dims, so a batched operand of
// lower unbatched rank than the result gets size-1 dims after its batch dim; unbatched operands
// (rank <= result rank < batched rank) then broadcast against the batch as they are.
std::optional<std::vector<BVal>> batch_elementwise(BatchContext& ctx) {
  int rank = 0;
  for (size_t i = 0; i < ctx.in.size(); ++i)
    rank = std::max(rank, ctx.unbatched_type(i).shape.rank());
  std::vector<Value> ops;
  for (size_t i = 0; i < ctx.in.size(); ++i) {
    Value v = ctx.in[i].v;
    const Shape s = ctx.unbatched_type(i).shape;
    if (ctx.in[i].batched && s.rank() < rank) {
      std::vector<int64_t> dims(static_cast<size_t>(rank + 1), 1);
      dims[0] = ctx.size;
      std::copy(s.dims().begin(), s.dims().end(), dims.end() - s.rank());
      v = ctx.g.reshape(v, dims);
    }
    ops.push_back(v);
  }
  return ctx.emit_batched(ops, ctx.node.attrs);
}

// Ops whose attributes do not depend on the rank (stop_gradient; top_k works on the last axis).
std::optional<std::vector<BVal>> batch_same_attrs(BatchContext& ctx) {
  return ctx.emit_batched({ctx.in[0].v}, ctx.node.attrs);
}

// reduce_*(axes): the reduced axes move one place right.
std::optional<std::vector<BVal>> batch_reduce(BatchContext& ctx) {
  AttrMap a = ctx.node.attrs;
  std::vector<int64_t> axes;
  for (int64_t x : a.get_ints("axes"))
    axes.push_back(shift_axis(x, ctx.unbatched_type(0).shape.rank()));
  a.set("axes", axes);
  return ctx.emit_batched({ctx.in[0].v}, a);
}

// argmax / argmin / cumsum (axis): the axis moves one place right.
std::optional<std::vector<BVal>> batch_axis_attr(BatchContext& ctx) {
  AttrMap a = ctx.node.attrs;
  a.set("axis", shift_axis(a.get_int("axis"), ctx.unbatched_type(0).shape.rank()));
  return ctx.emit_batched({ctx.in[0].v}, a);
}

}  // namespace

void register_batch_elementwise() {
  for (int k = 0; k < kNumOps; ++k) {
    OpKind op = static_cast<OpKind>(k);
    const OpInfo& info = op_info(op);
    // elementwise_region's body has fixed operand types, so it goes through its decomposition.
    if (info.has(kElementwise) && op != OpKind::ElementwiseRegion)
      set_batch_rule(op, batch_elementwise);
  }
  // threefry2x32 broadcasts its four operands like an elementwise op (two results).
  set_batch_rule(OpKind::Threefry2x32, batch_elementwise);
  set_batch_rule(OpKind::StopGradient, batch_same_attrs);
  set_batch_rule(OpKind::TopK, batch_same_attrs);
  for (OpKind op : {OpKind::ReduceSum, OpKind::ReduceMean, OpKind::ReduceMax, OpKind::ReduceMin,
                    OpKind::ReduceProd})
    set_batch_rule(op, batch_reduce);
  for (OpKind op : {OpKind::ArgMax, OpKind::ArgMin, OpKind::CumSum})
    set_batch_rule(op, batch_axis_attr);
}

}  // namespace rlx::autodiff::vmap_detail
