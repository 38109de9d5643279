// "decompose": the pass form of rlx::decompose, expanding composites a backend does not keep.
#include "rlx/opt/decompose.h"
#include "rlx/opt/passes.h"

namespace rlx {
namespace {

class DecomposePass : public Pass {
 public:
  DecomposePass(std::function<bool(OpKind)> keep, std::string name)
      : keep_(std::move(keep)), name_(std::move(name)) {}

  std::string_view name() const override { return name_; }

  bool run(Graph& g) override {
    // Skip the rebuild when no node would expand, so "unchanged" also means "not rebuilt".
    bool any = false;
    for (const Node& n : g.nodes()) any = any || (has_decomposition(n) && !(keep_ && keep_(n.op)));
    if (!any) return false;
    g = decompose(g, keep_);
    return true;
  }

 private:
  std::function<bool(OpKind)> keep_;
  std::string name_;
};

}  // namespace

std::unique_ptr<Pass> create_decompose_pass(std::function<bool(OpKind)> keep, std::string name) {
  return std::make_unique<DecomposePass>(std::move(keep), std::move(name));
}

}  // namespace rlx
