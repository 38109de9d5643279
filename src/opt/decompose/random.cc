// Decomposition of rng_key: the constant key of its seed attribute (computed by the reference
// evaluator's kernel, the one definition of the key); bind-rng-seed has given every rng_key
// of a compiled graph its seed by then.
#include "decompose.h"
#include "rlx/ir/evaluator.h"

namespace rlx::detail {
namespace {

std::vector<Value> decompose_rng_key(Graph& g, const Node& node, std::span<const Value>) {
  return {g.constant(evaluate_op(OpKind::RngKey, {}, node.attrs)[0])};
}

}  // namespace

void register_decompose_random() { set_decomposition(OpKind::RngKey, decompose_rng_key); }

}  // namespace rlx::detail
