// The "fold-constants" pass: evaluates nodes whose operands are all constants.
#include <string>

#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

class FoldConstantsPass final : public Pass {
 public:
  explicit FoldConstantsPass(int64_t max_elements) : max_elements_(max_elements) {}

  std::string_view name() const override { return "fold-constants"; }

  bool run(Graph& g) override {
    bool here = run_here(g);
    bool inside = run_in_bodies(*this, g);  // the bodies of cond / while_loop / scan
    return here || inside;
  }

 private:
  bool run_here(Graph& g) {
    bool changed = false;
    // rewrite() hands `fold` operands already mapped into the new graph, so a node folded
    // earlier in this walk is a constant there and its users fold in the same run.
    Graph out = rewrite(g,
                        [&](RewriteContext& ctx, const Node& n,
                            std::span<const Value> operands) -> std::optional<std::vector<Value>> {
                          Graph& dst = ctx.dst;
                          if (!foldable(dst, n, operands)) return std::nullopt;
                          std::vector<Tensor> args;
                          args.reserve(operands.size());
                          for (Value v : operands)
                            args.push_back(dst.node(v).attrs.get_tensor("value"));
                          std::vector<Tensor> results = evaluate_op(n.op, args, n.attrs);
                          std::vector<Value> repl;
                          repl.reserve(results.size());
                          // The folded node's name is the hint, so dumps still show where a
                          // constant came from; results after the first get the builder's unique
                          // suffix (%top, %top_1).
                          for (const Tensor& t : results) repl.push_back(dst.constant(t, n.name));
                          changed = true;
                          return repl;
                        });
    if (changed) g = std::move(out);
    return changed;
  }

  /// True when `n` is computed from constants alone (or, like iota, from its attributes) and
  /// its results are small enough to materialise. Inputs and params never reach here.
  bool foldable(const Graph& dst, const Node& n, std::span<const Value> operands) const {
    if (n.op == OpKind::Constant || !has_evaluator(n.op)) return false;
    // A dequantized weight stays packed: folding would store the f32 expansion (4-8x the
    // bytes) as a constant, where the kernels read the packed bytes directly (docs/ir.md).
    if (n.op == OpKind::Dequantize) return false;
    // A collective of constants still depends on the devices of the run (all_reduce sums S
    // copies); evaluate_op only knows a group of one.
    if (op_info(n.op).has(kCollective)) return false;
    // An rng_key without a seed is the compile seed's key, which only bind-rng-seed knows.
    if (n.op == OpKind::RngKey && !n.attrs.has("seed")) return false;
    // Control flow runs its bodies: a while_loop need not terminate, and a body's cost is
    // not bounded by the size of the results, so neither is folded at compile time.
    if (is_control_flow(n.op)) return false;
    for (Value v : operands)
      if (dst.node(v).op != OpKind::Constant) return false;
    int64_t total = 0;
    for (const TensorType& t : n.results) {
      int64_t k = t.shape.numel();
      if (k > max_elements_ - total) return false;
      total += k;
    }
    return true;
  }

  int64_t max_elements_;
};

}  // namespace

std::unique_ptr<Pass> create_fold_constants_pass(int64_t max_elements) {
  check(max_elements >= 0,
        "fold-constants: max_elements must be >= 0, got " + std::to_string(max_elements));
  return std::make_unique<FoldConstantsPass>(max_elements);
}

}  // namespace rlx
