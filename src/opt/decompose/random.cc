// Decomposition of rng_key: the constant key of its seed attribute (computed by the reference
// evaluator's kernel, the one definition of the key); bind-rng-seed has given every rng_key
// of a compiled graph its seed by then.
#include "decompose.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"

namespace rlx::detail {
namespace {

// An rng_key without a seed stands for the compile seed, which only a compile knows: folding it
// to seed 0 here would silently drop the seed, so it is an error (graph transforms keep it).
std::vector<Value> decompose_rng_key(Graph& g, const Node& node, std::span<const Value>) {
  check(node.attrs.has("seed"),
        "rng_key (node %" + node.name +
            ") has no seed: its key is the compile seed, which the compile pipeline binds "
            "(bind-rng-seed) before it decomposes the node");
  return {g.constant(evaluate_op(OpKind::RngKey, {}, node.attrs)[0])};
}

}  // namespace

void register_decompose_random() { set_decomposition(OpKind::RngKey, decompose_rng_key); }

}  // namespace rlx::detail
