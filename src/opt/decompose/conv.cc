// Decompositions of the pooling composites: pad, one strided slice per window offset, then a
// max / add chain (and a division for avg_pool). conv itself is a primitive.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "decompose.h"
#include "rlx/ir/error.h"
#include "rlx/ir/text_util.h"

namespace rlx::detail {
namespace {

using Ints = std::vector<int64_t>;

// Pool attributes with the [] defaults expanded to one entry per spatial dim.
struct PoolGeometry {
  Ints window, strides, lo, hi;
  bool padded = false;  // any non-zero pad
  int64_t size = 1;     // elements per window
};

Ints expand_list(const Ints& v, size_t spatial, int64_t fill) {
  return v.empty() ? Ints(spatial, fill) : v;
}

PoolGeometry pool_geometry(const Node& node) {
  PoolGeometry p;
  p.window = node.attrs.get_ints("window");
  size_t sp = p.window.size();
  p.strides = expand_list(node.attrs.get_ints("strides"), sp, 1);
  p.lo = expand_list(node.attrs.get_ints("pad_low"), sp, 0);
  p.hi = expand_list(node.attrs.get_ints("pad_high"), sp, 0);
  for (size_t i = 0; i < sp; ++i) p.padded = p.padded || p.lo[i] != 0 || p.hi[i] != 0;
  // The decomposition unrolls one slice per window element; refuse windows whose unrolled
  // graph could not reasonably be built (a 1024x1024 global pool is within the limit).
  constexpr double kMaxWindowElements = 1 << 20;
  double elements = 1;
  for (int64_t k : p.window) elements *= static_cast<double>(k);
  check(elements <= kMaxWindowElements,
        std::string(op_name(node.op)) + " (node %" + node.name + "): a window of " +
            format_float(elements) + " elements is too large to decompose into slices (limit " +
            std::to_string(static_cast<int64_t>(kMaxWindowElements)) + ")");
  p.size = static_cast<int64_t>(elements);
  return p;
}

// Pads x with `pad_value` and combines, with `combine`, one strided slice per window offset:
// the slice at offset d holds, for every output position j, the padded input at j*s + d.
// Needs every output spatial dim >= 1 (see empty_spatial).
template <class Combine>
Value reduce_windows(Graph& g, const Node& node, Value x, const PoolGeometry& p, double pad_value,
                     Combine combine) {
  const Shape& out = node.results[0].shape;
  size_t sp = p.window.size();
  Value padded = x;
  if (p.padded) {
    Ints low{0, 0}, high{0, 0};
    low.insert(low.end(), p.lo.begin(), p.lo.end());
    high.insert(high.end(), p.hi.begin(), p.hi.end());
    padded = g.pad(x, g.scalar(pad_value, g.dtype(x)), low, high);
  }
  Ints offset(sp, 0);
  Value acc;
  for (;;) {
    Ints start{0, 0}, limit{out[0], out[1]}, strides{1, 1};
    for (size_t i = 0; i < sp; ++i) {
      start.push_back(offset[i]);
      limit.push_back(offset[i] + (out[static_cast<int>(i) + 2] - 1) * p.strides[i] + 1);
      strides.push_back(p.strides[i]);
    }
    Value s = g.slice(padded, start, limit, strides);
    acc = acc.valid() ? combine(acc, s) : s;
    size_t d = sp;  // advance the window offset odometer, last dim fastest
    while (d > 0 && ++offset[d - 1] == p.window[d - 1]) offset[--d] = 0;
    if (d == 0) break;
  }
  return acc;
}

// The output has an empty spatial dim: no window fits, and no slice can be formed either.
bool empty_spatial(const Node& node) {
  const Shape& out = node.results[0].shape;
  for (int i = 2; i < out.rank(); ++i)
    if (out[i] == 0) return true;
  return false;
}

std::vector<Value> decompose_max_pool(Graph& g, const Node& node, std::span<const Value> ops) {
  if (empty_spatial(node))
    return {g.constant(Tensor(node.results[0].dtype, node.results[0].shape))};
  PoolGeometry p = pool_geometry(node);
  return {reduce_windows(g, node, ops[0], p, -std::numeric_limits<double>::infinity(),
                         [&g](Value a, Value b) { return g.max(a, b); })};
}

// Number of non-padding elements in each window: a constant of the output's spatial shape
// (it broadcasts over N and C). The padding is a box, so the count is a product over dims of
// the in-bounds part of the window's extent along that dim.
Value window_counts(Graph& g, const Node& node, const Shape& in, const PoolGeometry& p) {
  const TensorType& rt = node.results[0];
  Shape cs(Ints(rt.shape.dims().begin() + 2, rt.shape.dims().end()));
  Tensor counts(rt.dtype, cs);
  for (int64_t f = 0; f < counts.numel(); ++f) {
    int64_t rem = f, count = 1;
    for (int i = cs.rank() - 1; i >= 0; --i) {
      auto u = static_cast<size_t>(i);
      int64_t j = rem % cs[i];
      rem /= cs[i];
      int64_t first = j * p.strides[u] - p.lo[u];
      int64_t lo = std::max<int64_t>(first, 0), hi = std::min(first + p.window[u], in[i + 2]);
      count *= std::max<int64_t>(hi - lo, 0);
    }
    counts.set_f64(f, static_cast<double>(count));
  }
  return g.constant(counts);
}

std::vector<Value> decompose_avg_pool(Graph& g, const Node& node, std::span<const Value> ops) {
  if (empty_spatial(node))
    return {g.constant(Tensor(node.results[0].dtype, node.results[0].shape))};
  PoolGeometry p = pool_geometry(node);
  Value sum =
      reduce_windows(g, node, ops[0], p, 0.0, [&g](Value a, Value b) { return g.add(a, b); });
  if (p.padded && !node.attrs.get_bool("count_include_pad"))
    return {g.div(sum, window_counts(g, node, g.shape(ops[0]), p))};
  return {g.div(sum, g.scalar_like(sum, static_cast<double>(p.size)))};
}

}  // namespace

void register_decompose_conv() {
  set_decomposition(OpKind::MaxPool, decompose_max_pool);
  set_decomposition(OpKind::AvgPool, decompose_avg_pool);
}

}  // namespace rlx::detail
