// StableHLO lowering of dot_general (matmul is decomposed to it by legalization).
#include <map>

#include "lower.h"

namespace rlx::pjrt::lower {
namespace {

std::vector<std::string> dot_general(Emitter& e, const Node& n) {
  std::string dn = "dot_dimension_numbers = #stablehlo.dot<";
  std::string sep;
  for (const char* key : {"lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract"}) {
    const auto& v = n.attrs.get_ints(key);
    if (v.empty()) continue;  // the attribute's parser treats an absent list as empty
    static const std::map<std::string, std::string> kNames = {
        {"lhs_batch", "lhs_batching_dimensions"},
        {"rhs_batch", "rhs_batching_dimensions"},
        {"lhs_contract", "lhs_contracting_dimensions"},
        {"rhs_contract", "rhs_contracting_dimensions"}};
    dn += sep + kNames.at(key) + " = " + int_list(v);
    sep = ", ";
  }
  return {
      e.emit("stablehlo.dot_general", {e.operand(n, 0), e.operand(n, 1)}, dn + ">", n.results[0])};
}

}  // namespace

void register_linalg_lowerings(OpTable<LowerFn>& t) { t.set(OpKind::DotGeneral, dot_general); }

}  // namespace rlx::pjrt::lower
