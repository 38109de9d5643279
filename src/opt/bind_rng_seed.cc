// "bind-rng-seed": the compile seed (CompileOptions::seed) becomes the seed attribute of every
// rng_key node that has none, so the key an executable draws from is part of its compile options
// (and of the Session's cache key) instead of a hidden global.
#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

class BindRngSeedPass : public Pass {
 public:
  explicit BindRngSeedPass(uint64_t seed) : seed_(seed) {}
  std::string_view name() const override { return "bind-rng-seed"; }

  bool run(Graph& g) override {
    bool unbound = false;
    for (const Node& n : g.nodes())
      unbound = unbound || (n.op == OpKind::RngKey && !n.attrs.has("seed"));
    if (!unbound) return false;
    g = rewrite(g,
                [this](RewriteContext& ctx, const Node& node,
                       std::span<const Value>) -> std::optional<std::vector<Value>> {
                  if (node.op != OpKind::RngKey || node.attrs.has("seed")) return std::nullopt;
                  return std::vector<Value>{ctx.dst.rng_key(seed_)};
                });
    return true;
  }

 private:
  uint64_t seed_;
};

}  // namespace

std::unique_ptr<Pass> create_bind_rng_seed_pass(uint64_t seed) {
  return std::make_unique<BindRngSeedPass>(seed);
}

}  // namespace rlx
