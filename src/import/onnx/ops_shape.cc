// ONNX shape and data-movement ops: Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Concat,
// Split, Slice, Expand, Tile, Pad, Shape, Size, Constant, ConstantOfShape, Range, EyeLike,
// Trilu, DepthToSpace, SpaceToDepth. Shapes, axes, pads and repeats must be known at import
// time (constants or computed from the bound input shapes).
#include <algorithm>
#include <cmath>
#include <limits>

#include "importer.h"

namespace rlx::onnx::detail {

namespace {

// Axes from the attribute (before `input_since`) or from input `index` (from it on).
std::optional<std::vector<int64_t>> axes_of(NodeContext& c, int64_t input_since, int index) {
  if (c.opset < input_since) {
    if (!c.has_attr("axes")) return std::nullopt;
    return c.attr_ints("axes");
  }
  if (!c.has_input(index)) return std::nullopt;
  return c.static_ints(index, "axes");
}

void convert_reshape(NodeContext& c) {
  Value x = c.input(0);
  const Shape& in = c.g.shape(x);
  std::vector<int64_t> shape = c.opset < 5 ? c.attr_ints("shape") : c.static_ints(1, "shape");
  bool allow_zero = c.attr_int("allowzero", 0) != 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      c.require(static_cast<int>(i) < in.rank(), "shape copies dim " + std::to_string(i) +
                                                     " of an input of rank " +
                                                     std::to_string(in.rank()));
      shape[i] = in[static_cast<int>(i)];
    }
    c.require(shape[i] >= -1, "invalid target dim " + std::to_string(shape[i]));
  }
  c.set_output(0, c.g.reshape(x, shape));
}

void convert_flatten(NodeContext& c) {
  Value x = c.input(0);
  const Shape& s = c.g.shape(x);
  int64_t axis = c.attr_int("axis", 1);
  if (axis < 0) axis += s.rank();
  c.require(axis >= 0 && axis <= s.rank(), "axis out of range");
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < s.rank(); ++i) (i < axis ? outer : inner) *= s[i];
  c.set_output(0, c.g.reshape(x, {outer, inner}));
}

void convert_transpose(NodeContext& c) {
  Value x = c.input(0);
  const int64_t rank = c.g.shape(x).rank();
  std::vector<int64_t> perm = c.attr_ints("perm");
  if (perm.empty())
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  for (int64_t& p : perm) p = c.axis(p, rank, "perm entry");
  c.set_output(0, c.g.transpose(x, perm));
}

void convert_squeeze(NodeContext& c) {
  Value x = c.input(0);
  const Shape& s = c.g.shape(x);
  std::vector<int64_t> axes;
  if (auto a = axes_of(c, 13, 1)) {
    for (int64_t ax : *a) axes.push_back(c.axis(ax, s.rank()));
  } else {
    for (int i = 0; i < s.rank(); ++i)
      if (s[i] == 1) axes.push_back(i);
  }
  c.set_output(0, c.g.squeeze(x, axes));
}

void convert_unsqueeze(NodeContext& c) {
  Value x = c.input(0);
  auto a = axes_of(c, 13, 1);
  c.require(a.has_value(), "axes are required");
  const int64_t out_rank = c.g.shape(x).rank() + static_cast<int64_t>(a->size());
  std::vector<int64_t> axes;
  for (int64_t ax : *a) axes.push_back(c.axis(ax, out_rank));
  std::sort(axes.begin(), axes.end());
  c.set_output(0, c.g.expand_dims(x, axes));
}

void convert_concat(NodeContext& c) {
  std::vector<Value> xs = c.inputs();
  c.require(!xs.empty(), "needs at least one input");
  const int64_t rank = c.g.shape(xs[0]).rank();
  c.set_output(0, c.g.concatenate(xs, c.axis(c.attr_int("axis", 0), rank)));
}

void convert_split(NodeContext& c) {
  Value x = c.input(0);
  const Shape& s = c.g.shape(x);
  const int64_t axis = c.axis(c.attr_int("axis", 0), s.rank());
  const int64_t dim = s[static_cast<int>(axis)];
  std::vector<int64_t> sizes;
  if (c.opset < 13 && c.has_attr("split")) sizes = c.attr_ints("split");
  if (c.opset >= 13 && c.has_input(1)) sizes = c.static_ints(1, "split");
  if (sizes.empty()) {
    int64_t n =
        c.opset >= 18 && c.has_attr("num_outputs") ? c.attr_int("num_outputs", 1) : c.num_outputs();
    c.require(n >= 1, "num_outputs must be >= 1");
    int64_t part = (dim + n - 1) / n;  // opset 18: the last chunk is smaller
    for (int64_t i = 0, left = dim; i < n; ++i, left -= part)
      sizes.push_back(std::max<int64_t>(0, std::min(part, left)));
    if (c.opset < 18 || !c.has_attr("num_outputs"))
      c.require(dim % n == 0, "cannot split dim " + std::to_string(dim) + " into " +
                                  std::to_string(n) + " equal parts");
  }
  int64_t total = 0;
  for (int64_t v : sizes) {
    c.require(v >= 0, "negative split size");
    total += v;
  }
  c.require(total == dim,
            "split sizes sum to " + std::to_string(total) + ", the dim is " + std::to_string(dim));
  c.require(static_cast<int64_t>(sizes.size()) == c.num_outputs(),
            std::to_string(sizes.size()) + " split sizes for " + std::to_string(c.num_outputs()) +
                " outputs");
  std::vector<int64_t> start(static_cast<size_t>(s.rank()), 0), limit = s.dims();
  int64_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    start[static_cast<size_t>(axis)] = at;
    limit[static_cast<size_t>(axis)] = at + sizes[i];
    if (c.wants_output(static_cast<int>(i)))
      c.set_output(static_cast<int>(i), c.g.slice(x, start, limit));
    at += sizes[i];
  }
}

void convert_slice(NodeContext& c) {
  Value x = c.input(0);
  const Shape& s = c.g.shape(x);
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset < 10) {
    starts = c.attr_ints("starts");
    ends = c.attr_ints("ends");
    axes = c.attr_ints("axes");
  } else {
    starts = c.static_ints(1, "starts");
    ends = c.static_ints(2, "ends");
    if (c.has_input(3)) axes = c.static_ints(3, "axes");
    if (c.has_input(4)) steps = c.static_ints(4, "steps");
  }
  c.require(starts.size() == ends.size(), "starts and ends differ in length");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  c.require(axes.size() == starts.size() && steps.size() == starts.size(),
            "starts, ends, axes and steps differ in length");
  std::vector<int64_t> lo(static_cast<size_t>(s.rank()), 0),
      hi = s.dims(), stride(static_cast<size_t>(s.rank()), 1);
  std::vector<int64_t> reversed;
  for (size_t i = 0; i < starts.size(); ++i) {
    const auto a = static_cast<size_t>(c.axis(axes[i], s.rank()));
    const int64_t dim = s[static_cast<int>(a)], step = steps[i];
    c.require(step != 0, "step 0");
    // numpy's slice clamping (v + dim of a negative v cannot overflow).
    auto clamp = [&](int64_t v, int64_t lo_b, int64_t hi_b) {
      if (v < 0) v += dim;
      return std::clamp(v, lo_b, hi_b);
    };
    if (step > 0) {
      int64_t b = clamp(starts[i], 0, dim), e = clamp(ends[i], 0, dim);
      lo[a] = b;
      hi[a] = std::max(b, e);
      stride[a] = step;
    } else {
      // Reverse the axis, then slice forward: index i of x is dim-1-i of the reversed axis.
      int64_t b = clamp(starts[i], -1, dim - 1), e = clamp(ends[i], -1, dim - 1);
      reversed.push_back(static_cast<int64_t>(a));
      lo[a] = dim - 1 - b;
      hi[a] = std::max(lo[a], dim - 1 - e);
      stride[a] = -step;
    }
  }
  if (!reversed.empty()) x = c.g.reverse(x, reversed);
  c.set_output(0, c.g.slice(x, lo, hi, stride));
}

void convert_tile(NodeContext& c) {
  Value x = c.input(0);
  const Shape& s = c.g.shape(x);
  std::vector<int64_t> reps = c.static_ints(1, "repeats");
  c.require(static_cast<int>(reps.size()) == s.rank(), "repeats must have one entry per dim");
  std::vector<int64_t> wide, bdims, out;
  for (int i = 0; i < s.rank(); ++i) {
    c.require(reps[static_cast<size_t>(i)] >= 0, "negative repeat");
    wide.push_back(reps[static_cast<size_t>(i)]);
    wide.push_back(s[i]);
    bdims.push_back(2 * i + 1);
    out.push_back(reps[static_cast<size_t>(i)] * s[i]);
  }
  c.set_output(0, c.g.reshape(c.g.broadcast_in_dim(x, wide, bdims), out));
}

// Source index of output position j of an axis of size n padded by `lo` in a non-constant mode.
int64_t pad_source(const std::string& mode, int64_t j, int64_t lo, int64_t n) {
  int64_t p = j - lo;
  if (mode == "edge") return std::clamp<int64_t>(p, 0, n - 1);
  if (mode == "wrap") return ((p % n) + n) % n;
  if (n == 1) return 0;  // reflect of a single element
  const int64_t period = 2 * (n - 1);
  p = ((p % period) + period) % period;
  return p < n ? p : period - p;
}

void convert_pad(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  const Shape& s = g.shape(x);
  const int64_t rank = s.rank();
  std::string mode = c.attr_string("mode", "constant");
  std::vector<int64_t> pads;
  std::optional<Value> value;
  std::vector<int64_t> axes;
  if (c.opset < 11) {
    pads = c.attr_ints(c.opset < 2 ? "paddings" : "pads");
    value = g.scalar(c.attr_float("value", 0.0), g.dtype(x));
  } else {
    pads = c.static_ints(1, "pads");
    if (c.has_input(2)) value = g.reshape(c.input(2), {});
    if (c.has_input(3)) axes = c.static_ints(3, "axes");
  }
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  c.require(pads.size() == 2 * axes.size(), "pads must hold 2 entries per padded axis");
  std::vector<int64_t> lo(static_cast<size_t>(rank), 0), hi(static_cast<size_t>(rank), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    auto a = static_cast<size_t>(c.axis(axes[i], rank));
    lo[a] = pads[i];
    hi[a] = pads[i + axes.size()];
  }
  if (mode == "constant") {
    Value v = value ? g.convert(*value, g.dtype(x)) : g.scalar(0, g.dtype(x));
    return c.set_output(0, g.pad(x, v, lo, hi));
  }
  c.require(mode == "reflect" || mode == "edge" || mode == "wrap",
            "mode '" + mode + "' is not one of constant, reflect, edge, wrap");
  // Each padded axis: one gather with the source index of every output position.
  for (int64_t a = 0; a < rank; ++a) {
    const auto ua = static_cast<size_t>(a);
    if (lo[ua] == 0 && hi[ua] == 0) continue;
    const int64_t n = g.shape(x)[static_cast<int>(a)], out = n + lo[ua] + hi[ua];
    c.require(n > 0 || out == 0, "cannot " + mode + "-pad an empty axis");
    c.require(out >= 0, "pads remove more than the axis holds");
    std::vector<int64_t> idx(static_cast<size_t>(out));
    for (int64_t j = 0; j < out; ++j) idx[static_cast<size_t>(j)] = pad_source(mode, j, lo[ua], n);
    x = g.gather(x, c.ints(idx), a);
  }
  c.set_output(0, x);
}

void convert_shape(NodeContext& c) {
  const Shape s = c.input_shape(0);
  const int64_t rank = s.rank();
  auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  int64_t start = clamp(c.attr_int("start", 0)), end = clamp(c.attr_int("end", rank));
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(s[static_cast<int>(i)]);
  c.set_output(0, c.ints(dims));
}

// A Constant node's value from whichever attribute it uses.
void convert_constant(NodeContext& c) {
  Graph& g = c.g;
  auto list = [&](DType dt, std::vector<double> v) {
    return g.constant(Tensor::from_doubles(dt, Shape{static_cast<int64_t>(v.size())}, v));
  };
  if (c.has_attr("value")) return c.set_output(0, g.constant(c.attr_tensor("value")));
  if (c.has_attr("value_float"))
    return c.set_output(0, g.scalar(c.attr_float("value_float", 0), DType::f32));
  if (c.has_attr("value_floats"))
    return c.set_output(0, list(DType::f32, c.attr_floats("value_floats")));
  if (c.has_attr("value_int"))
    return c.set_output(
        0, g.constant(Tensor::from_ints(DType::i64, Shape{},
                                        std::vector<int64_t>{c.attr_int("value_int", 0)})));
  if (c.has_attr("value_ints")) return c.set_output(0, c.ints(c.attr_ints("value_ints")));
  c.fail(
      "needs one of the attributes value, value_float(s), value_int(s) (strings and sparse "
      "tensors are not supported)");
}

void convert_constant_of_shape(NodeContext& c) {
  std::vector<int64_t> shape = c.static_ints(0, "shape");
  Tensor v = c.has_attr("value") ? c.attr_tensor("value") : Tensor(DType::f32, Shape{1});
  c.require(v.numel() == 1, "attribute 'value' must hold one element");
  Value scalar = c.g.reshape(c.g.constant(v), {});
  c.set_output(0, c.g.broadcast_in_dim(scalar, shape, {}));
}

void convert_range(NodeContext& c) {
  Graph& g = c.g;
  DType dt = g.dtype(c.input(0));
  std::vector<double> start = c.static_doubles(0, "start"), limit = c.static_doubles(1, "limit"),
                      delta = c.static_doubles(2, "delta");
  c.require(start.size() == 1 && limit.size() == 1 && delta.size() == 1, "inputs must be scalars");
  c.require(delta[0] != 0, "delta is 0");
  double n = std::ceil((limit[0] - start[0]) / delta[0]);
  n = std::max(n, 0.0);
  c.require(n < 1e12, "too many elements");
  Value i = g.iota(dt, Shape{static_cast<int64_t>(n)}, 0);
  c.set_output(0, g.add(g.mul(i, g.scalar(delta[0], dt)), g.scalar(start[0], dt)));
}

// Lower (upper) triangle of the last two dims: j - i <= k (j - i >= k) keeps the element.
Value triangle_mask(Graph& g, int64_t rows, int64_t cols, int64_t k, bool upper) {
  Value i = g.iota(DType::i64, Shape{rows, cols}, 0), j = g.iota(DType::i64, Shape{rows, cols}, 1);
  Value d = g.sub(j, i), kk = g.scalar(static_cast<double>(k), DType::i64);
  return upper ? g.ge(d, kk) : g.le(d, kk);
}

void convert_trilu(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  const Shape& s = g.shape(x);
  c.require(s.rank() >= 2, "input must have rank >= 2");
  int64_t k = 0;
  if (c.has_input(1)) k = c.static_ints(1, "k").at(0);
  Value mask = triangle_mask(g, s[s.rank() - 2], s[s.rank() - 1], k, c.attr_int("upper", 1) != 0);
  c.set_output(0, g.select(mask, x, g.scalar(0, g.dtype(x))));
}

void convert_eye_like(NodeContext& c) {
  Graph& g = c.g;
  const Shape& s = g.shape(c.input(0));
  c.require(s.rank() == 2, "input must be 2-D");
  DType dt = g.dtype(c.input(0));
  if (c.has_attr("dtype")) {
    auto d = dtype_of(static_cast<int32_t>(c.attr_int("dtype", 1)));
    c.require(d.has_value(), "unsupported dtype");
    dt = *d;
  }
  int64_t k = c.attr_int("k", 0);
  Value diag =
      g.logical_and(triangle_mask(g, s[0], s[1], k, true), triangle_mask(g, s[0], s[1], k, false));
  c.set_output(0, g.convert(diag, dt));
}

// DepthToSpace / SpaceToDepth: a reshape, a transpose and a reshape.
void convert_depth_to_space(NodeContext& c) {
  Value x = c.input(0);
  const Shape& s = c.g.shape(x);
  c.require(s.rank() == 4, "input must be NCHW");
  const int64_t b = c.attr_int("blocksize", 0), n = s[0], ch = s[1], h = s[2], w = s[3];
  c.require(b > 0 && ch % (b * b) == 0, "channels must be a multiple of blocksize^2");
  const bool crd = c.attr_string("mode", "DCR") == "CRD";
  Value r = crd ? c.g.reshape(x, {n, ch / (b * b), b, b, h, w})
                : c.g.reshape(x, {n, b, b, ch / (b * b), h, w});
  Value t = crd ? c.g.transpose(r, {0, 1, 4, 2, 5, 3}) : c.g.transpose(r, {0, 3, 4, 1, 5, 2});
  c.set_output(0, c.g.reshape(t, {n, ch / (b * b), h * b, w * b}));
}

void convert_space_to_depth(NodeContext& c) {
  Value x = c.input(0);
  const Shape& s = c.g.shape(x);
  c.require(s.rank() == 4, "input must be NCHW");
  const int64_t b = c.attr_int("blocksize", 0), n = s[0], ch = s[1], h = s[2], w = s[3];
  c.require(b > 0 && h % b == 0 && w % b == 0, "H and W must be multiples of blocksize");
  Value r = c.g.reshape(x, {n, ch, h / b, b, w / b, b});
  const bool crd = c.attr_string("mode", "DCR") == "CRD";  // mode: opset 25+
  Value t = crd ? c.g.transpose(r, {0, 1, 3, 5, 2, 4}) : c.g.transpose(r, {0, 3, 5, 1, 2, 4});
  c.set_output(0, c.g.reshape(t, {n, ch * b * b, h / b, w / b}));
}

}  // namespace

void add_shape_converters(ConverterTable& t) {
  t[{"", "Reshape"}] = convert_reshape;
  t[{"", "Flatten"}] = convert_flatten;
  t[{"", "Transpose"}] = convert_transpose;
  t[{"", "Squeeze"}] = convert_squeeze;
  t[{"", "Unsqueeze"}] = convert_unsqueeze;
  t[{"", "Concat"}] = convert_concat;
  t[{"", "Split"}] = convert_split;
  t[{"", "Slice"}] = convert_slice;
  t[{"", "Tile"}] = convert_tile;
  t[{"", "Pad"}] = convert_pad;
  t[{"", "Shape"}] = convert_shape;
  t[{"", "Constant"}] = convert_constant;
  t[{"", "ConstantOfShape"}] = convert_constant_of_shape;
  t[{"", "Range"}] = convert_range;
  t[{"", "Trilu"}] = convert_trilu;
  t[{"", "EyeLike"}] = convert_eye_like;
  t[{"", "DepthToSpace"}] = convert_depth_to_space;
  t[{"", "SpaceToDepth"}] = convert_space_to_depth;
  t[{"", "Size"}] = [](NodeContext& c) {
    c.set_output(0, c.g.constant(Tensor::from_ints(
                        DType::i64, Shape{}, std::vector<int64_t>{c.input_shape(0).numel()})));
  };
  t[{"", "Expand"}] = [](NodeContext& c) {
    c.set_output(0, c.g.expand(c.input(0), c.static_ints(1, "shape")));
  };
}

}  // namespace rlx::onnx::detail
