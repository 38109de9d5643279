// StableHLO lowerings of the leaves: input and param (the function's arguments), constant
// (exact bytes) and iota.
#include "lower.h"
#include "rlx/ir/evaluator.h"

namespace rlx::pjrt::lower {
namespace {

// Inputs and params are the arguments of @main, named by the signature: nothing to emit.
std::vector<std::string> argument(Emitter& e, const Node& n) { return e.argument(n); }

std::vector<std::string> constant(Emitter& e, const Node& n) {
  return {e.constant_tensor(evaluate_op(OpKind::Constant, {}, n.attrs)[0])};
}

std::vector<std::string> iota(Emitter& e, const Node& n) {
  return {e.emit("stablehlo.iota", {},
                 "iota_dimension = " + std::to_string(n.attrs.get_int("dimension")) + " : i64",
                 n.results[0])};
}

}  // namespace

void register_leaf_lowerings(OpTable<LowerFn>& t) {
  t.set(OpKind::Input, argument);
  t.set(OpKind::Param, argument);
  t.set(OpKind::Constant, constant);
  t.set(OpKind::Iota, iota);
}

}  // namespace rlx::pjrt::lower
