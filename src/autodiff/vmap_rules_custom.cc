// Batching rule of custom_call: the custom op's registered batching rule (rlx/ir/custom_op.h);
// without one, vmap batches the op's decomposition.
#include "rlx/ir/custom_op.h"
#include "rlx/ir/error.h"
#include "vmap_rules.h"

namespace rlx::autodiff::vmap_detail {
namespace {

std::optional<std::vector<BVal>> batch_custom_call(BatchContext& ctx) {
  const CustomOpDef& def = custom_op_of(ctx.node);
  if (!def.batch) return std::nullopt;
  std::vector<Value> operands;
  for (size_t i = 0; i < ctx.in.size(); ++i) operands.push_back(ctx.batched(i));
  std::vector<Value> results = def.batch(ctx.g, ctx.node, operands, ctx.size);
  std::string where =
      "vmap: the batching rule of custom op '" + def.name + "' (node %" + ctx.node.name + ")";
  check(results.size() == ctx.node.results.size(),
        where + " returned " + std::to_string(results.size()) + " values for " +
            std::to_string(ctx.node.results.size()) + " results");
  std::vector<BVal> out;
  for (size_t i = 0; i < results.size(); ++i) {
    TensorType want = ctx.node.results[i];
    want.shape.dims().insert(want.shape.dims().begin(), ctx.size);
    check(ctx.g.type(results[i]) == want, where + " gave " + ctx.g.type(results[i]).to_string() +
                                              " for result " + std::to_string(i) + ", expected " +
                                              want.to_string());
    out.push_back({results[i], true});
  }
  return out;
}

}  // namespace

void register_batch_custom() { set_batch_rule(OpKind::CustomCall, batch_custom_call); }

}  // namespace rlx::autodiff::vmap_detail
