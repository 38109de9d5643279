// Decompositions of composite linalg ops: matmul -> reshape / broadcast_in_dim / dot_general.
#include <algorithm>
#include <numeric>

#include "decompose.h"

namespace rlx::detail {
namespace {

// numpy.matmul as dot_general: 1-D operands become [1,k] / [k,1]; operands whose batch dims
// differ from the broadcast batch shape are broadcast_in_dim'ed to it (dot_general needs equal
// batch dims); dot_general contracts x's last dim with y's second-to-last over the shared batch
// dims, giving [batch..., n, m]; a final reshape drops the dims added for 1-D operands.
std::vector<Value> decompose_matmul(Graph& g, const Node& node, std::span<const Value> operands) {
  Value x = operands[0], y = operands[1];
  if (g.shape(x).rank() == 1) x = g.reshape(x, {1, g.shape(x)[0]});
  if (g.shape(y).rank() == 1) y = g.reshape(y, {g.shape(y)[0], 1});
  int nb = std::max(g.shape(x).rank(), g.shape(y).rank()) - 2;
  const Shape& result = node.results[0].shape;
  // The result starts with the broadcast batch dims.
  std::vector<int64_t> batch(result.dims().begin(), result.dims().begin() + nb);

  auto to_batch = [&](Value v) {
    const Shape& s = g.shape(v);
    int r = s.rank();
    if (r - 2 == nb && std::equal(batch.begin(), batch.end(), s.dims().begin())) return v;
    std::vector<int64_t> target = batch;
    target.push_back(s[r - 2]);
    target.push_back(s[r - 1]);
    std::vector<int64_t> dims(static_cast<size_t>(r));
    std::iota(dims.begin(), dims.end(), int64_t{nb + 2 - r});
    return g.broadcast_in_dim(v, target, dims);
  };
  x = to_batch(x);
  y = to_batch(y);

  std::vector<int64_t> batch_dims(static_cast<size_t>(nb));
  std::iota(batch_dims.begin(), batch_dims.end(), int64_t{0});
  Value out = g.dot_general(x, y, batch_dims, batch_dims, {nb + 1}, {nb});
  if (g.shape(out) != result) out = g.reshape(out, result.dims());
  return {out};
}

}  // namespace

void register_decompose_linalg() { set_decomposition(OpKind::MatMul, decompose_matmul); }

}  // namespace rlx::detail
