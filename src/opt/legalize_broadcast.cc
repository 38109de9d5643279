// The "legalize-broadcast" pass: implicit numpy broadcasts become explicit broadcast_in_dim.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

// numpy aligns trailing dims: operand dim i of rank r sits at result dim i + (R - r), and a
// size-1 operand dim is stretched, which broadcast_in_dim allows ("size equal or 1").
Value broadcast_to(Graph& dst, Value x, const Shape& to, const std::string& hint) {
  int offset = to.rank() - dst.shape(x).rank();
  std::vector<int64_t> dims;
  for (int i = 0; i < dst.shape(x).rank(); ++i) dims.push_back(i + offset);
  return dst.emit1(OpKind::BroadcastInDim, {x},
                   {{"shape", to.dims()}, {"broadcast_dimensions", std::move(dims)}}, hint);
}

// Every op with numpy broadcasting is an elementwise op with several operands (binary ops,
// select, clamp). elementwise_region is the exception that is left alone: its operands
// broadcast by the region's contract, and its body may hold only elementwise ops, so the
// explicit broadcast_in_dim could not go inside; the pipeline runs this pass before regions are
// formed.
class LegalizeBroadcastPass : public Pass {
 public:
  std::string_view name() const override { return "legalize-broadcast"; }

  bool run(Graph& g) override {
    int changed = 0;
    // One broadcast per (value, shape), shared by every op that needs it.
    std::map<std::tuple<int32_t, int32_t, std::vector<int64_t>>, Value> made;
    auto legalize = [&](RewriteContext& ctx, const Node& n,
                        std::span<const Value> operands) -> std::optional<std::vector<Value>> {
      Graph& dst = ctx.dst;
      const OpInfo& info = op_info(n.op);
      if (!info.has(kElementwise) || operands.size() < 2 || n.op == OpKind::ElementwiseRegion)
        return std::nullopt;
      const Shape& to = n.results[0].shape;
      std::vector<Value> ops(operands.begin(), operands.end());
      bool any = false;
      for (size_t i = 0; i < ops.size(); ++i) {
        if (dst.shape(ops[i]) == to) continue;
        auto [it, is_new] = made.try_emplace({ops[i].node, ops[i].index, to.dims()});
        if (is_new) it->second = broadcast_to(dst, ops[i], to, dst.node(ops[i]).name + "_b");
        ops[i] = it->second;
        any = true;
      }
      if (!any) return std::nullopt;
      ++changed;
      return dst.emit(n.op, std::move(ops), n.attrs, n.name);
    };
    Graph out = rewrite(g, legalize);
    g = std::move(out);
    return changed > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> create_legalize_broadcast_pass() {
  return std::make_unique<LegalizeBroadcastPass>();
}

}  // namespace rlx
