// ONNX Resize (opset 10+; nearest, linear and cubic, antialias, every coordinate transformation
// mode, axes, keep_aspect_ratio_policy). Resizing is separable: each resized axis is one gather
// of the n source neighbours of every output position, weighted and summed; one gather where
// every output copies one input (nearest), one broadcast for integer nearest upsampling. The
// neighbour indices and weights are computed at import time (shapes are concrete), as onnx's
// reference implementation computes them (op_resize.py: _interpolate_1d_along_axis).
#include <algorithm>
#include <cmath>

#include "importer.h"

namespace rlx::onnx::detail {

namespace {

struct ResizeAttrs {
  std::string mode, coord, nearest_mode;
  double cubic_a = -0.75, extrapolation = 0.0;
  bool exclude_outside = false, antialias = false;
};

bool is_integer(double x) { return x == std::floor(x); }

// The interpolation weights of one output position (ratio in (0, 1], 1 on integer positions).
std::vector<double> coeffs(const ResizeAttrs& a, double ratio, double scale) {
  if (a.mode == "nearest") {
    if (is_integer(ratio)) return {0, 1};
    if (a.nearest_mode == "round_prefer_ceil")
      return {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
    if (a.nearest_mode == "floor") return {1, 0};
    if (a.nearest_mode == "ceil") return {0, 1};
    return {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};  // round_prefer_floor
  }
  if (a.mode == "linear" && !a.antialias) return {1 - ratio, ratio};
  if (a.mode == "linear") {
    const double s = std::min(scale, 1.0);
    const auto start = static_cast<int64_t>(std::floor(-1 / s) + 1);
    std::vector<double> c;
    double sum = 0;
    for (int64_t i = start; i < start + 2 - 2 * start; ++i) {
      c.push_back(std::clamp(1 - std::fabs((static_cast<double>(i) - ratio) * s), 0.0, 1.0));
      sum += c.back();
    }
    for (double& v : c) v /= sum;
    return c;
  }
  const double A = a.cubic_a;
  if (!a.antialias) {
    const double r = ratio, q = 1 - ratio;
    return {((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A,
            ((A + 2) * r - (A + 3)) * r * r + 1, ((A + 2) * q - (A + 3)) * q * q + 1,
            ((A * (q + 1) - 5 * A) * (q + 1) + 8 * A) * (q + 1) - 4 * A};
  }
  const double s = std::min(scale, 1.0);
  auto kernel = [&](double x) {
    x = std::fabs(x);
    if (x <= 1) return (A + 2) * x * x * x - (A + 3) * x * x + 1;
    if (x < 2) return A * x * x * x - 5 * A * x * x + 8 * A * x - 4 * A;
    return 0.0;
  };
  const auto start = static_cast<int64_t>(std::floor(-2 / s) + 1);
  std::vector<double> c;
  double sum = 0;
  for (int64_t i = start; i < 2 - start; ++i) {
    c.push_back(kernel(s * (static_cast<double>(i) - ratio)));
    sum += c.back();
  }
  for (double& v : c) v /= sum;
  return c;
}

// The source coordinate of output position y, and whether it lies outside the input (only
// tf_crop_and_resize extrapolates).
double source_coord(NodeContext& c, const ResizeAttrs& a, double y, double scale, int64_t in,
                    int64_t out, double roi_lo, double roi_hi, bool& outside) {
  const double out_w = scale * static_cast<double>(in);
  outside = false;
  if (a.coord == "align_corners")
    return out_w == 1 ? 0 : y * static_cast<double>(in - 1) / (out_w - 1);
  if (a.coord == "asymmetric") return y / scale;
  if (a.coord == "tf_crop_and_resize") {
    double x = out_w == 1 ? (roi_hi - roi_lo) * static_cast<double>(in - 1) / 2
                          : y * (roi_hi - roi_lo) * static_cast<double>(in - 1) / (out_w - 1);
    x += roi_lo * static_cast<double>(in - 1);
    outside = x < 0 || x > static_cast<double>(in - 1);
    return x;
  }
  if (a.coord == "pytorch_half_pixel") return out_w == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
  if (a.coord == "half_pixel") return (y + 0.5) / scale - 0.5;
  if (a.coord == "half_pixel_symmetric") {
    const double adjustment = static_cast<double>(out) / out_w,
                 center = static_cast<double>(in) / 2;
    return center * (1 - adjustment) + (y + 0.5) / scale - 0.5;
  }
  c.fail("coordinate_transformation_mode '" + a.coord + "' is not supported");
}

// The source taps of one resized axis: per output position n neighbour indices and weights,
// and whether it lies outside the input (tf_crop_and_resize's extrapolation).
struct Taps {
  int64_t in = 0, out = 0, n = 0;
  std::vector<int64_t> idx;
  std::vector<double> w;
  std::vector<bool> outside;
  bool any_outside = false;

  /// The one source index per output when every output copies one input (weights one-hot:
  /// nearest, or linear on integer positions), else empty.
  std::vector<int64_t> single() const {
    if (any_outside) return {};
    std::vector<int64_t> pick(static_cast<size_t>(out), -1);
    for (int64_t y = 0; y < out; ++y) {
      for (int64_t t = 0; t < n; ++t) {
        const double wt = w[static_cast<size_t>(y * n + t)];
        if (wt == 0) continue;
        if (wt != 1 || pick[static_cast<size_t>(y)] >= 0) return {};
        pick[static_cast<size_t>(y)] = idx[static_cast<size_t>(y * n + t)];
      }
      if (pick[static_cast<size_t>(y)] < 0) return {};
    }
    return pick;
  }
  /// k when output y copies input y / k for every y (integer nearest upsampling), else 0.
  int64_t repeat() const {
    if (out % in != 0) return 0;
    const int64_t k = out / in;
    std::vector<int64_t> pick = single();
    if (pick.empty()) return 0;
    for (int64_t y = 0; y < out; ++y)
      if (pick[static_cast<size_t>(y)] != y / k) return 0;
    return k;
  }
};

Taps taps_of(NodeContext& c, const ResizeAttrs& a, int64_t in, double scale, int64_t out,
             double roi_lo, double roi_hi) {
  Taps r;
  r.in = in;
  r.out = out;
  r.outside.resize(static_cast<size_t>(out));
  for (int64_t y = 0; y < out; ++y) {
    bool o = false;
    const double xo = source_coord(c, a, static_cast<double>(y), scale, in, out, roi_lo, roi_hi, o);
    r.outside[static_cast<size_t>(y)] = o;
    r.any_outside |= o;
    const double ratio = is_integer(xo) ? 1.0 : xo - std::floor(xo);
    std::vector<double> cf = coeffs(a, ratio, scale);
    const auto n = static_cast<int64_t>(cf.size());
    r.n = n;
    // The n neighbours of xo in the edge-padded axis (onnx's _get_neighbor).
    const int64_t pad = (n + 1) / 2;
    const double xp = xo + static_cast<double>(pad);
    const auto p = static_cast<int64_t>(std::floor(xp));
    const double frac = xp - static_cast<double>(p);
    const int64_t off = n % 2 == 0 ? (frac == 0 ? -(n / 2) : -(n / 2) + 1)
                                   : (frac <= 0.5 ? -((n - 1) / 2) : -((n - 1) / 2) + 1);
    const int64_t start = p + off - pad;
    double sum = 0;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t j = start + t;
      if (a.exclude_outside && (j < 0 || j >= in)) cf[static_cast<size_t>(t)] = 0;
      sum += cf[static_cast<size_t>(t)];
    }
    for (int64_t t = 0; t < n; ++t) {
      r.idx.push_back(std::clamp<int64_t>(start + t, 0, in - 1));
      r.w.push_back(a.exclude_outside && sum != 0 ? cf[static_cast<size_t>(t)] / sum
                                                  : cf[static_cast<size_t>(t)]);
    }
  }
  return r;
}

// Resizes axis `axis` of x to taps.out positions: one gather when every output copies one
// input, else a gather of the n neighbours, weighted and summed (f32/f64 compute type).
Value resize_axis(NodeContext& c, const ResizeAttrs& a, Value x, int64_t axis, const Taps& taps) {
  Graph& g = c.g;
  const Shape s = g.shape(x);
  if (std::vector<int64_t> pick = taps.single(); !pick.empty())
    return g.gather(x, c.ints(pick), axis);
  const int64_t out = taps.out, n = taps.n;
  std::vector<int64_t> gathered_shape = s.dims();
  gathered_shape[static_cast<size_t>(axis)] = out;
  gathered_shape.insert(gathered_shape.begin() + axis + 1, n);
  Value gathered = g.reshape(g.gather(x, c.ints(taps.idx), axis), gathered_shape);
  std::vector<int64_t> wshape(gathered_shape.size(), 1);
  wshape[static_cast<size_t>(axis)] = out;
  wshape[static_cast<size_t>(axis + 1)] = n;
  Value weights = g.constant(Tensor::from_doubles(g.dtype(x), Shape(wshape), taps.w));
  Value r = g.reduce_sum(g.mul(gathered, weights), {axis + 1});
  if (taps.any_outside) {
    std::vector<int64_t> mshape(s.dims().size(), 1);
    mshape[static_cast<size_t>(axis)] = out;
    Tensor mask(DType::bool_, Shape(mshape));
    for (int64_t y = 0; y < out; ++y) mask.set_i64(y, taps.outside[static_cast<size_t>(y)]);
    r = g.select(g.constant(mask), g.scalar(a.extrapolation, g.dtype(x)), r);
  }
  return r;
}

// Integer nearest upsampling of several axes at once (output y copies input y / k_axis: FPN
// upsampling): one broadcast_in_dim to [..., in, k, ...] and a reshape, no index tables.
Value repeat_axes(Graph& g, Value x, const std::vector<int64_t>& factor) {
  const Shape s = g.shape(x);
  std::vector<int64_t> wide, dims, out;
  for (int64_t i = 0; i < s.rank(); ++i) {
    dims.push_back(static_cast<int64_t>(wide.size()));
    wide.push_back(s[static_cast<int>(i)]);
    const int64_t k = factor[static_cast<size_t>(i)];
    if (k > 1) wide.push_back(k);
    out.push_back(s[static_cast<int>(i)] * k);
  }
  return g.reshape(g.broadcast_in_dim(x, wide, dims), out);
}

void convert_resize(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  const Shape s = g.shape(x);
  const int64_t rank = s.rank();
  ResizeAttrs a;
  a.mode = c.attr_string("mode", "nearest");
  c.require(a.mode == "nearest" || a.mode == "linear" || a.mode == "cubic",
            "mode '" + a.mode + "' is not one of nearest, linear, cubic");
  a.coord =
      c.attr_string("coordinate_transformation_mode", c.opset < 11 ? "asymmetric" : "half_pixel");
  a.nearest_mode = c.attr_string("nearest_mode", c.opset < 11 ? "floor" : "round_prefer_floor");
  a.cubic_a = c.attr_float("cubic_coeff_a", -0.75);
  a.extrapolation = c.attr_float("extrapolation_value", 0.0);
  a.exclude_outside = c.attr_int("exclude_outside", 0) != 0;
  a.antialias = c.attr_int("antialias", 0) != 0;
  c.require(!(a.antialias && a.mode == "nearest"), "antialias needs mode linear or cubic");
  // Inputs: opset 10 (X, scales); 11+ (X, roi, scales, sizes), each optional from 13.
  std::vector<double> scales, roi;
  std::vector<int64_t> sizes;
  const int scales_at = c.opset < 11 ? 1 : 2;
  if (c.has_input(scales_at) && c.input_shape(scales_at).numel() > 0)
    scales = c.static_doubles(scales_at, "scales");
  if (c.opset >= 11 && c.has_input(3) && c.input_shape(3).numel() > 0)
    sizes = c.static_ints(3, "sizes");
  if (c.opset >= 11 && c.has_input(1) && c.input_shape(1).numel() > 0)
    roi = c.static_doubles(1, "roi");
  c.require(scales.empty() != sizes.empty(), "exactly one of scales and sizes must be given");
  std::vector<int64_t> axes = c.attr_ints("axes");
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  for (int64_t& ax : axes) ax = c.axis(ax, rank);
  const size_t na = axes.size();
  c.require((scales.empty() || scales.size() == na) && (sizes.empty() || sizes.size() == na),
            "scales / sizes must have one entry per resized axis");
  c.require(roi.empty() || roi.size() == 2 * na, "roi must have two entries per resized axis");
  std::vector<double> scale(static_cast<size_t>(rank), 1.0), lo(static_cast<size_t>(rank), 0.0),
      hi(static_cast<size_t>(rank), 1.0);
  std::vector<int64_t> out = s.dims();
  for (size_t i = 0; i < na; ++i) {
    const auto ax = static_cast<size_t>(axes[i]);
    if (!roi.empty()) {
      lo[ax] = roi[i];
      hi[ax] = roi[i + na];
    }
    if (!scales.empty()) {
      c.require(scales[i] > 0, "scales must be positive");
      scale[ax] = scales[i];
      out[ax] = static_cast<int64_t>(scales[i] * static_cast<double>(s[static_cast<int>(ax)]));
    } else {
      out[ax] = sizes[i];
      scale[ax] = static_cast<double>(sizes[i]) / static_cast<double>(s[static_cast<int>(ax)]);
    }
  }
  const std::string policy = c.attr_string("keep_aspect_ratio_policy", "stretch");
  if (!sizes.empty() && policy != "stretch") {
    c.require(
        policy == "not_larger" || policy == "not_smaller",
        "keep_aspect_ratio_policy '" + policy + "' is not one of stretch, not_larger, not_smaller");
    double pick = policy == "not_larger" ? 1e300 : 0;
    for (int64_t ax : axes)
      pick = policy == "not_larger" ? std::min(pick, scale[static_cast<size_t>(ax)])
                                    : std::max(pick, scale[static_cast<size_t>(ax)]);
    for (int64_t ax : axes) {
      scale[static_cast<size_t>(ax)] = pick;
      out[static_cast<size_t>(ax)] =
          static_cast<int64_t>(pick * static_cast<double>(s[static_cast<int>(ax)]) + 0.5);
    }
  }
  std::vector<std::pair<int64_t, Taps>> resized;
  for (int64_t ax : axes) {
    const auto u = static_cast<size_t>(ax);
    if (std::fabs(scale[u] - 1.0) < 1e-9 && out[u] == s[static_cast<int>(ax)] && lo[u] == 0 &&
        hi[u] == 1)
      continue;
    resized.emplace_back(ax,
                         taps_of(c, a, s[static_cast<int>(ax)], scale[u], out[u], lo[u], hi[u]));
  }
  std::vector<int64_t> factor(static_cast<size_t>(rank), 1);
  bool repeats = !resized.empty();
  for (const auto& [ax, taps] : resized) {
    factor[static_cast<size_t>(ax)] = taps.repeat();
    repeats = repeats && factor[static_cast<size_t>(ax)] > 0;
  }
  if (repeats) return c.set_output(0, repeat_axes(g, x, factor));
  // Copies (gathers) keep the dtype; weighted sums compute in a float type.
  const DType dt = g.dtype(x);
  bool weighted = false;
  for (const auto& [ax, taps] : resized) weighted = weighted || taps.single().empty();
  Value y = is_float(dt) || !weighted ? x : g.convert(x, DType::f64);
  for (const auto& [ax, taps] : resized) y = resize_axis(c, a, y, ax, taps);
  c.set_output(0, g.dtype(y) == dt ? y : g.convert(y, dt));
}

}  // namespace

void add_resize_converters(ConverterTable& t) { t[{"", "Resize"}] = convert_resize; }

}  // namespace rlx::onnx::detail
