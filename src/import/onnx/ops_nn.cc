// ONNX neural-network ops: MatMul, Gemm, Conv, ConvTranspose, MaxPool, AveragePool, global
// pools, BatchNormalization, InstanceNormalization, LayerNormalization, GroupNormalization,
// RMSNormalization, RotaryEmbedding, Softmax/LogSoftmax/Hardmax (opset < 13: over the
// flattened trailing dims), LRN, LpNormalization, MeanVarianceNormalization.
#include <algorithm>
#include <cmath>
#include <limits>

#include "importer.h"

namespace rlx::onnx::detail {

namespace {

Value k(Graph& g, Value like, double v) { return g.scalar(v, g.dtype(like)); }

// A per-channel vector [C] reshaped to broadcast against [N, C, spatial...] of rank `rank`.
Value per_channel(Graph& g, Value v, int64_t rank) {
  std::vector<int64_t> shape(static_cast<size_t>(rank - 1), 1);
  shape[0] = g.shape(v).numel();
  return g.reshape(v, shape);
}

void convert_gemm(NodeContext& c) {
  Graph& g = c.g;
  Value a = c.input(0), b = c.input(1);
  if (c.attr_int("transA", 0)) a = g.transpose(a, {1, 0});
  if (c.attr_int("transB", 0)) b = g.transpose(b, {1, 0});
  Value y = g.matmul(a, b);
  const double alpha = c.attr_float("alpha", 1.0), beta = c.attr_float("beta", 1.0);
  if (alpha != 1.0) y = g.mul(y, k(g, y, alpha));
  if (std::optional<Value> bias = c.optional_input(2)) {
    Value cb = beta != 1.0 ? g.mul(*bias, k(g, *bias, beta)) : *bias;
    y = g.add(y, cb);
  }
  c.set_output(0, y);
}

// Spatial geometry of a convolution or pool: kernel, strides, dilations and low/high pads per
// spatial dim, from the attributes (auto_pad SAME_UPPER / SAME_LOWER / VALID / NOTSET).
struct Window {
  std::vector<int64_t> kernel, strides, dilations, lo, hi;
};

Window window_of(NodeContext& c, const Shape& x, const std::vector<int64_t>& kernel,
                 bool ceil_mode) {
  const auto n = static_cast<int64_t>(kernel.size());
  Window w;
  w.kernel = kernel;
  w.strides = c.attr_ints("strides", std::vector<int64_t>(static_cast<size_t>(n), 1));
  w.dilations = c.attr_ints("dilations", std::vector<int64_t>(static_cast<size_t>(n), 1));
  std::vector<int64_t> pads =
      c.attr_ints("pads", std::vector<int64_t>(static_cast<size_t>(2 * n), 0));
  c.require(static_cast<int64_t>(w.strides.size()) == n &&
                static_cast<int64_t>(w.dilations.size()) == n &&
                static_cast<int64_t>(pads.size()) == 2 * n,
            "strides, dilations and pads must match the kernel's rank");
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  for (int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    const int64_t in = x[static_cast<int>(i + 2)], span = (kernel[u] - 1) * w.dilations[u] + 1;
    c.require(w.strides[u] >= 1 && w.dilations[u] >= 1 && kernel[u] >= 1,
              "kernel, strides and dilations must be positive");
    int64_t lo = pads[u], hi = pads[u + static_cast<size_t>(n)];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t out = (in + w.strides[u] - 1) / w.strides[u];
      const int64_t total = std::max<int64_t>((out - 1) * w.strides[u] + span - in, 0);
      lo = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      hi = total - lo;
    } else if (auto_pad == "VALID") {
      lo = hi = 0;
    } else {
      c.require(auto_pad == "NOTSET",
                "auto_pad '" + auto_pad + "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
    }
    if (ceil_mode) {
      // PyTorch's / onnx's rule: ceil the output count, but the last window must start inside
      // the input or its low padding; the extra high padding makes a floor-mode pool compute it.
      int64_t out = (in + lo + hi - span + w.strides[u] - 1) / w.strides[u] + 1;
      if ((out - 1) * w.strides[u] >= in + lo) --out;
      hi = std::max(hi, (out - 1) * w.strides[u] + span - in - lo);
    }
    w.lo.push_back(lo);
    w.hi.push_back(hi);
  }
  return w;
}

// The window of a conv (`weight` given: its dims are the default kernel_shape; at most 2-D)
// or of a pool (any rank).
std::vector<int64_t> kernel_of(NodeContext& c, const Shape& x, std::optional<Shape> weight) {
  std::vector<int64_t> kernel = c.attr_ints("kernel_shape");
  if (weight)
    c.require(weight->rank() >= 3, "weight " + weight->to_string() +
                                       " must have rank >= 3 ([out, in / group, kernel...])");
  if (kernel.empty() && weight) kernel.assign(weight->dims().begin() + 2, weight->dims().end());
  c.require(!kernel.empty(), "kernel_shape is required");
  c.require(static_cast<int>(kernel.size()) + 2 == x.rank(),
            "kernel rank does not match the input");
  c.require(kernel.size() <= 2 || !weight, std::to_string(kernel.size()) +
                                               "-D windows are not supported (rlx's conv is 1-D "
                                               "and 2-D)");
  return kernel;
}

void convert_conv(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0), w = c.input(1);
  const Shape& xs = g.shape(x);
  const Shape ws = g.shape(w);
  Window win = window_of(c, xs, kernel_of(c, xs, ws), false);
  Value y;
  if (xs.rank() == 4 && xs[3] == 1 && win.kernel[1] == 1 && win.lo[1] == 0 && win.hi[1] == 0) {
    // [N, C, H, 1] (tf2onnx's form of a 1-D conv, magika's): run it as the 1-D conv it is;
    // oneDNN's 2-D kernels block along W and are ~1.5x slower with W = 1.
    y = g.conv(g.reshape(x, {xs[0], xs[1], xs[2]}), g.reshape(w, {ws[0], ws[1], ws[2]}),
               {win.strides[0]}, {win.lo[0]}, {win.hi[0]}, {win.dilations[0]},
               c.attr_int("group", 1));
    const Shape ys = g.shape(y);
    y = g.reshape(y, {ys[0], ys[1], ys[2], 1});
  } else {
    y = g.conv(x, w, win.strides, win.lo, win.hi, win.dilations, c.attr_int("group", 1));
  }
  if (std::optional<Value> b = c.optional_input(2)) y = g.add(y, per_channel(g, *b, xs.rank()));
  c.set_output(0, y);
}

// The per-output-channel values of `t` for a conv result of shape `out` ([N, O, spatial...]):
// one value broadcast, or O values along dim 1 only; nullopt for any other shape.
std::optional<std::vector<double>> channel_values(const Tensor& t, const Shape& out) {
  const int64_t o = out[1];
  if (!is_float(t.dtype()) || t.shape().rank() > out.rank()) return std::nullopt;
  const int lead = out.rank() - t.shape().rank();
  for (int i = 0; i < t.shape().rank(); ++i)
    if (t.shape()[i] != 1 && !(i + lead == 1 && t.shape()[i] == o)) return std::nullopt;
  std::vector<double> v(static_cast<size_t>(o));
  for (int64_t k = 0; k < o; ++k) v[static_cast<size_t>(k)] = t.get_f64(t.numel() == 1 ? 0 : k);
  return v;
}

}  // namespace

std::optional<Value> fold_affine_into_conv(NodeContext& c, Value v,
                                           const std::optional<Tensor>& scale,
                                           const std::optional<Tensor>& shift) {
  Graph& g = c.g;
  Value conv = v;
  std::optional<Tensor> bias;
  if (g.node(v).op == OpKind::Add) {
    for (int k = 0; k < 2 && !bias; ++k) {
      const Value a = g.node(v).operands[static_cast<size_t>(k)];
      const Value b = g.node(v).operands[static_cast<size_t>(1 - k)];
      if (g.node(a).op != OpKind::Conv || g.shape(a) != g.shape(v)) continue;
      bias = c.static_value(b);
      conv = a;
    }
    if (!bias) return std::nullopt;
  } else if (g.node(v).op != OpKind::Conv) {
    return std::nullopt;
  }
  const Node& n = g.node(conv);
  const Shape out = g.shape(conv);
  const DType dt = g.dtype(conv);
  std::optional<Tensor> w = c.static_value(n.operands[1]);
  if (!w || w->dtype() != dt) return std::nullopt;
  std::optional<std::vector<double>> s, t, b;
  if (scale && !(s = channel_values(*scale, out))) return std::nullopt;
  if (shift && !(t = channel_values(*shift, out))) return std::nullopt;
  if (bias && !(b = channel_values(*bias, out))) return std::nullopt;
  const int64_t o = out[1], per = w->numel() / o;
  Tensor w2(dt, w->shape());
  std::vector<double> b2(static_cast<size_t>(o));
  for (int64_t k = 0; k < o; ++k) {
    const double sk = s ? (*s)[static_cast<size_t>(k)] : 1.0;
    for (int64_t j = k * per; j < (k + 1) * per; ++j) w2.set_f64(j, w->get_f64(j) * sk);
    b2[static_cast<size_t>(k)] =
        (b ? (*b)[static_cast<size_t>(k)] : 0.0) * sk + (t ? (*t)[static_cast<size_t>(k)] : 0.0);
  }
  Value y = g.emit1(OpKind::Conv, {n.operands[0], g.constant(w2)}, n.attrs);
  return g.add(y, per_channel(g, g.constant(Tensor::from_doubles(dt, Shape{o}, b2)), out.rank()));
}

namespace {

// ConvTranspose as a convolution of the stride-dilated input (interior padding) with the
// spatially flipped kernel whose in/out channels are swapped per group; as a GEMM and a
// transpose when the windows tile the output (kernel == strides, no padding, one group).
void convert_conv_transpose(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0), w = c.input(1);
  const Shape& xs = g.shape(x);
  const Shape ws = g.shape(w);
  std::vector<int64_t> kernel = kernel_of(c, xs, ws);
  c.require(kernel.size() <= 2, std::to_string(kernel.size()) +
                                    "-D windows are not supported (rlx's conv is 1-D and 2-D)");
  const auto n = static_cast<int64_t>(kernel.size());
  const int64_t groups = c.attr_int("group", 1);
  std::vector<int64_t> strides =
      c.attr_ints("strides", std::vector<int64_t>(static_cast<size_t>(n), 1));
  std::vector<int64_t> dil =
      c.attr_ints("dilations", std::vector<int64_t>(static_cast<size_t>(n), 1));
  std::vector<int64_t> out_pad =
      c.attr_ints("output_padding", std::vector<int64_t>(static_cast<size_t>(n), 0));
  std::vector<int64_t> pads =
      c.attr_ints("pads", std::vector<int64_t>(static_cast<size_t>(2 * n), 0));
  std::vector<int64_t> out_shape = c.attr_ints("output_shape");
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  c.require(strides.size() == kernel.size() && dil.size() == kernel.size() &&
                out_pad.size() == kernel.size() && pads.size() == 2 * kernel.size(),
            "strides, dilations, output_padding and pads must match the kernel's rank");
  if (out_shape.size() > kernel.size())  // given as the full [N, C, ...] shape
    out_shape.erase(out_shape.begin(), out_shape.end() - n);
  for (int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    const int64_t in = xs[static_cast<int>(i + 2)], span = (kernel[u] - 1) * dil[u] + 1;
    if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t target = out_shape.empty() ? in * strides[u] : out_shape[u];
      const int64_t total = strides[u] * (in - 1) + out_pad[u] + span - target;
      const bool lower = auto_pad == "SAME_LOWER";
      pads[u] = lower ? total - total / 2 : total / 2;
      pads[u + static_cast<size_t>(n)] = total - pads[u];
    } else if (auto_pad == "VALID") {
      pads[u] = pads[u + static_cast<size_t>(n)] = 0;
    }
  }
  const int64_t cin = ws[0], cout_g = ws[1];
  bool disjoint = groups == 1;  // windows tile the output: kernel == strides, no pads
  for (size_t u = 0; u < kernel.size(); ++u)
    disjoint = disjoint && kernel[u] == strides[u] && dil[u] == 1 && out_pad[u] == 0 &&
               pads[u] == 0 && pads[u + kernel.size()] == 0;
  if (disjoint) {
    // Every input pixel writes its own k... block: one GEMM W[C, O*k...]^T . x[N, C, pixels]
    // and a transpose interleaving the blocks (DBNet's 2x2 stride-2 upsampling), instead of a
    // convolution over the zero-interleaved input.
    int64_t pixels = 1, taps = 1;
    std::vector<int64_t> blocks{cout_g};
    for (int64_t i = 0; i < n; ++i) {
      pixels *= xs[static_cast<int>(2 + i)];
      taps *= kernel[static_cast<size_t>(i)];
      blocks.push_back(kernel[static_cast<size_t>(i)]);
    }
    Value y = g.dot_general(g.reshape(w, {cin, cout_g * taps}), g.reshape(x, {xs[0], cin, pixels}),
                            {}, {}, {0}, {1});
    blocks.push_back(xs[0]);
    std::vector<int64_t> perm{1 + n, 0}, out{xs[0], cout_g};
    for (int64_t i = 0; i < n; ++i) {
      blocks.push_back(xs[static_cast<int>(2 + i)]);
      perm.push_back(2 + n + i);
      perm.push_back(1 + i);
      out.push_back(xs[static_cast<int>(2 + i)] * kernel[static_cast<size_t>(i)]);
    }
    y = g.reshape(g.transpose(g.reshape(y, blocks), perm), out);
    if (std::optional<Value> b = c.optional_input(2)) y = g.add(y, per_channel(g, *b, xs.rank()));
    return c.set_output(0, y);
  }
  // Weight [Cin, Cout/g, k...] -> [Cout, Cin/g, k...], flipped.
  std::vector<int64_t> grouped{groups, cin / groups, cout_g};
  std::vector<int64_t> perm{0, 2, 1}, flat{groups * cout_g, cin / groups}, spatial;
  for (int64_t i = 0; i < n; ++i) {
    grouped.push_back(kernel[static_cast<size_t>(i)]);
    perm.push_back(3 + i);
    flat.push_back(kernel[static_cast<size_t>(i)]);
    spatial.push_back(2 + i);
  }
  c.require(cin % groups == 0, "input channels must be a multiple of group");
  Value wt = g.reverse(g.reshape(g.transpose(g.reshape(w, grouped), perm), flat), spatial);
  // Input: stride - 1 zeros between elements, then (span - 1 - pad) around, + output_padding.
  std::vector<int64_t> lo{0, 0}, hi{0, 0}, interior{0, 0};
  for (int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    const int64_t span = (kernel[u] - 1) * dil[u] + 1;
    lo.push_back(span - 1 - pads[u]);
    hi.push_back(span - 1 - pads[u + static_cast<size_t>(n)] + out_pad[u]);
    interior.push_back(strides[u] - 1);
  }
  Value xp = g.pad(x, k(g, x, 0), lo, hi, interior);
  Value y = g.conv(xp, wt, {}, {}, {}, dil, groups);
  if (std::optional<Value> b = c.optional_input(2)) y = g.add(y, per_channel(g, *b, xs.rank()));
  c.set_output(0, y);
}

// The smallest value of dtype `t` (MaxPool's padding).
double lowest(DType t) {
  switch (t) {
    case DType::i8:
      return -128;
    case DType::u8:
      return 0;
    case DType::i32:
      return -2147483648.0;
    case DType::i64:
      return -9223372036854775808.0;
    default:
      return -std::numeric_limits<double>::infinity();
  }
}

// A pool as a max / sum over its window's taps, one strided slice of the padded input each, for
// the windows rlx's max_pool / avg_pool do not take (dilated, 3-D and up). `plain` is the
// window without ceil_mode's extra high padding: AveragePool's count_include_pad counts the
// positions inside the declared pads only.
// With `indices`, also sets it to MaxPool's Indices: the row-major index into x of each
// output's maximum (the first tap holding it; storage_order 1 counts W before H).
Value pool_by_taps(NodeContext& c, Value x, const Window& win, const Window& plain, bool max,
                   bool count_include_pad, std::optional<Value>* indices = nullptr) {
  Graph& g = c.g;
  const Shape xs = g.shape(x);
  const auto n = static_cast<int64_t>(win.kernel.size());
  std::vector<int64_t> lo{0, 0}, hi{0, 0}, out;
  int64_t taps = 1;
  for (int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    const int64_t span = (win.kernel[u] - 1) * win.dilations[u] + 1;
    lo.push_back(win.lo[u]);
    hi.push_back(win.hi[u]);
    out.push_back((xs[static_cast<int>(2 + i)] + win.lo[u] + win.hi[u] - span) / win.strides[u] +
                  1);
    c.require(out.back() >= 1, "the window is larger than the padded input");
    taps *= win.kernel[u];
  }
  const DType dt = g.dtype(x);
  Value xp = g.pad(x, g.scalar(max ? lowest(dt) : 0.0, dt), lo, hi,
                   std::vector<int64_t>(static_cast<size_t>(n + 2), 0));
  std::optional<Value> acc;
  std::vector<Value> slices;
  std::vector<std::vector<int64_t>> tap_of;  // per tap, its offset per spatial dim
  for (int64_t t = 0; t < taps; ++t) {
    std::vector<int64_t> start{0, 0}, limit{xs[0], xs[1]}, strides{1, 1}, offs;
    for (int64_t i = n - 1, rest = t; i >= 0; --i) {
      const auto u = static_cast<size_t>(i);
      const int64_t tap = rest % win.kernel[u];
      rest /= win.kernel[u];
      start.insert(start.begin() + 2, tap * win.dilations[u]);
      limit.insert(limit.begin() + 2, tap * win.dilations[u] + (out[u] - 1) * win.strides[u] + 1);
      strides.insert(strides.begin() + 2, win.strides[u]);
      offs.insert(offs.begin(), tap * win.dilations[u]);
    }
    Value v = g.slice(xp, start, limit, strides);
    if (indices) {
      slices.push_back(v);
      tap_of.push_back(offs);
    }
    acc = !acc ? v : max ? g.max(*acc, v) : g.add(*acc, v);
  }
  if (max && indices) {
    // Per tap, the input index it reads at each output position (plane offset added below);
    // the first tap equal to the maximum wins.
    const bool col_major = c.attr_int("storage_order", 0) != 0;
    std::vector<int64_t> oshape{1, 1};
    oshape.insert(oshape.end(), out.begin(), out.end());
    int64_t plane = 1;
    for (int64_t i = 0; i < n; ++i) plane *= xs[static_cast<int>(2 + i)];
    std::optional<Value> idx, found;
    for (size_t t = 0; t < slices.size(); ++t) {
      Tensor at(DType::i64, Shape(oshape));
      for (int64_t flat = 0; flat < at.numel(); ++flat) {
        int64_t index = 0, scale = 1;
        for (int64_t i = n - 1, rest = flat; i >= 0; --i) {
          const auto u = static_cast<size_t>(i);
          const int64_t o = rest % out[u];
          rest /= out[u];
          const int64_t pos = o * win.strides[u] - win.lo[u] + tap_of[t][u];
          const int64_t in = xs[static_cast<int>(2 + i)];
          if (col_major) {
            int64_t below = 1;  // dims before i vary fastest
            for (int64_t j = 0; j < i; ++j) below *= xs[static_cast<int>(2 + j)];
            index += std::clamp<int64_t>(pos, 0, in - 1) * below;
          } else {
            index += std::clamp<int64_t>(pos, 0, in - 1) * scale;
          }
          scale *= in;
        }
        at.set_i64(flat, index);
      }
      Value hit = g.eq(slices[t], *acc);
      Value take = found ? g.logical_and(hit, g.logical_not(*found)) : hit;
      Value here = g.broadcast_in_dim(g.constant(at), g.shape(*acc).dims(), [&] {
        std::vector<int64_t> d;
        for (int64_t i = 0; i < n + 2; ++i) d.push_back(i);
        return d;
      }());
      idx = idx ? g.select(take, here, *idx) : here;
      found = found ? g.logical_or(*found, hit) : hit;
    }
    // + the (n, c) plane's offset.
    Value planes = g.iota(DType::i64, g.shape(*acc), 0);
    planes = g.add(g.mul(planes, g.scalar(static_cast<double>(xs[1]), DType::i64)),
                   g.iota(DType::i64, g.shape(*acc), 1));
    *indices = g.add(*idx, g.mul(planes, g.scalar(static_cast<double>(plane), DType::i64)));
  }
  if (max) return *acc;
  // The divisor per output position: the product over dims of the taps counted in each.
  std::vector<int64_t> dshape{1, 1};
  dshape.insert(dshape.end(), out.begin(), out.end());
  Tensor divisor(dt, Shape(dshape));
  for (int64_t flat = 0; flat < divisor.numel(); ++flat) {
    double count = 1;
    for (int64_t i = n - 1, rest = flat; i >= 0; --i) {
      const auto u = static_cast<size_t>(i);
      const int64_t o = rest % out[u];
      rest /= out[u];
      const int64_t in = xs[static_cast<int>(2 + i)];
      int64_t k = 0;
      for (int64_t tap = 0; tap < win.kernel[u]; ++tap) {
        const int64_t pos = o * win.strides[u] - win.lo[u] + tap * win.dilations[u];
        k += count_include_pad ? pos >= -plain.lo[u] && pos < in + plain.hi[u]
                               : pos >= 0 && pos < in;
      }
      count *= static_cast<double>(k);
    }
    divisor.set_f64(flat, count);
  }
  return g.div(*acc, g.constant(divisor));
}

void convert_pool(NodeContext& c, bool max) {
  Graph& g = c.g;
  Value x = c.input(0);
  const Shape& xs = g.shape(x);
  const std::vector<int64_t> kernel = kernel_of(c, xs, std::nullopt);
  Window win = window_of(c, xs, kernel, c.attr_int("ceil_mode", 0) != 0);
  if (max && c.wants_output(1)) {  // Indices: the tap-by-tap form, which knows positions
    std::optional<Value> indices;
    c.set_output(0, pool_by_taps(c, x, win, win, true, false, &indices));
    return c.set_output(1, *indices);
  }
  bool dilated = false;
  for (int64_t d : win.dilations) dilated = dilated || d != 1;
  if (dilated || kernel.size() > 2)
    return c.set_output(0, pool_by_taps(c, x, win, window_of(c, xs, kernel, false), max,
                                        c.attr_int("count_include_pad", 0) != 0));
  if (max && !is_float(g.dtype(x))) {  // integer max pool through f64 (exact up to 2^53)
    Value y = g.max_pool(g.convert(x, DType::f64), win.kernel, win.strides, win.lo, win.hi);
    return c.set_output(0, g.convert(y, g.dtype(x)));
  }
  if (max) return c.set_output(0, g.max_pool(x, win.kernel, win.strides, win.lo, win.hi));
  c.set_output(0, g.avg_pool(x, win.kernel, win.strides, win.lo, win.hi,
                             c.attr_int("count_include_pad", 0) != 0));
}

std::vector<int64_t> spatial_axes(const Shape& s) {
  std::vector<int64_t> axes;
  for (int64_t i = 2; i < s.rank(); ++i) axes.push_back(i);
  return axes;
}

void convert_batch_norm(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  c.require(c.attr_int("training_mode", 0) == 0, "training_mode is not supported (inference only)");
  const int64_t rank = g.shape(x).rank();
  const double eps = c.attr_float("epsilon", 1e-5);
  if (c.uses(0) == 1 && rank >= 3) {  // after a conv: folded into its weights and bias
    std::optional<Tensor> s = c.static_input(1), b = c.static_input(2), m = c.static_input(3),
                          v = c.static_input(4);
    if (s && b && m && v && s->numel() == v->numel() && m->numel() == v->numel() &&
        b->numel() == v->numel()) {
      std::vector<double> inv(static_cast<size_t>(v->numel())), shift(inv.size());
      for (int64_t k = 0; k < v->numel(); ++k) {
        inv[static_cast<size_t>(k)] = s->get_f64(k) / std::sqrt(v->get_f64(k) + eps);
        shift[static_cast<size_t>(k)] = b->get_f64(k) - m->get_f64(k) * inv[static_cast<size_t>(k)];
      }
      std::vector<int64_t> per(static_cast<size_t>(rank - 1), 1);  // [C, 1, ...]
      per[0] = v->numel();
      if (std::optional<Value> y =
              fold_affine_into_conv(c, x, Tensor::from_doubles(s->dtype(), Shape(per), inv),
                                    Tensor::from_doubles(s->dtype(), Shape(per), shift))) {
        c.set_output(0, *y);
        c.set_output(1, c.input(3));
        c.set_output(2, c.input(4));
        return;
      }
    }
  }
  Value scale = c.input(1), bias = c.input(2), mean = c.input(3), var = c.input(4);
  Value inv = g.div(scale, g.sqrt(g.add(var, k(g, var, eps))));
  Value y = g.add(g.mul(g.sub(x, per_channel(g, mean, rank)), per_channel(g, inv, rank)),
                  per_channel(g, bias, rank));
  c.set_output(0, y);
  c.set_output(1, mean);  // inference: the running statistics pass through
  c.set_output(2, var);
}

// (x - mean) / sqrt(var + eps) over `axes` (two-pass variance).
Value normalize(Graph& g, Value x, const std::vector<int64_t>& axes, double eps) {
  Value mean = g.reduce_mean(x, axes, true);
  Value d = g.sub(x, mean);
  Value var = g.reduce_mean(g.mul(d, d), axes, true);
  return g.div(d, g.sqrt(g.add(var, k(g, var, eps))));
}

void convert_instance_norm(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  const Shape& s = g.shape(x);
  Value y = normalize(g, x, spatial_axes(s), c.attr_float("epsilon", 1e-5));
  y = g.add(g.mul(y, per_channel(g, c.input(1), s.rank())), per_channel(g, c.input(2), s.rank()));
  c.set_output(0, y);
}

void convert_group_norm(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  const Shape s = g.shape(x);
  const int64_t groups = c.attr_int("num_groups", 0), ch = s[1];
  c.require(groups > 0 && ch % groups == 0, "channels must be a multiple of num_groups");
  Value scale = c.input(1), bias = c.input(2);
  if (c.opset < 21 && g.shape(scale).numel() == groups && groups != ch) {
    // Opset 18: scale and bias per group; repeat each for the group's channels.
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < ch; ++i) idx.push_back(i / (ch / groups));
    scale = g.gather(scale, c.ints(idx), 0);
    bias = g.gather(bias, c.ints(idx), 0);
  }
  std::vector<int64_t> grouped{s[0], groups, -1};
  Value y = normalize(g, g.reshape(x, grouped), {2}, c.attr_float("epsilon", 1e-5));
  y = g.reshape(y, s.dims());
  c.set_output(0, g.add(g.mul(y, per_channel(g, scale, s.rank())), per_channel(g, bias, s.rank())));
}

void convert_layer_norm(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  const Shape s = g.shape(x);
  const int64_t axis = c.axis(c.attr_int("axis", -1), s.rank());
  const double eps = c.attr_float("epsilon", 1e-5);
  std::vector<int64_t> norm(s.dims().begin() + axis, s.dims().end());
  Value scale = c.input(1);
  if (g.shape(scale).dims() != norm) scale = g.expand(scale, norm);
  Value bias = c.has_input(2) ? c.input(2) : g.broadcast_in_dim(k(g, x, 0), norm, {});
  if (g.shape(bias).dims() != norm) bias = g.expand(bias, norm);
  c.set_output(0, g.layer_norm(x, scale, bias, axis, eps));
  if (c.wants_output(1) || c.wants_output(2)) {
    std::vector<int64_t> axes;
    for (int64_t i = axis; i < s.rank(); ++i) axes.push_back(i);
    Value mean = g.reduce_mean(x, axes, true);
    Value d = g.sub(x, mean);
    Value var = g.reduce_mean(g.mul(d, d), axes, true);
    c.set_output(1, mean);
    c.set_output(2, g.rsqrt(g.add(var, k(g, var, eps))));
  }
}

void convert_rms_norm(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  const Shape s = g.shape(x);
  const int64_t axis = c.axis(c.attr_int("axis", -1), s.rank());
  std::vector<int64_t> norm(s.dims().begin() + axis, s.dims().end());
  Value scale = c.input(1);
  if (g.shape(scale).dims() != norm) scale = g.expand(scale, norm);
  c.set_output(0, g.rms_norm(x, scale, axis, c.attr_float("epsilon", 1e-5)));
}

// RotaryEmbedding (opset 23): x [B, H, S, D] or [B, S, H*D] (num_heads), caches [B, S, R/2]
// or [max_pos, R/2] indexed by position_ids; rlx's rope over [B, H, S, D] (interleaved = gptj
// pairs, else neox halves; dims past R pass through).
void convert_rotary_embedding(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  const Shape s = g.shape(x);
  Value cos = c.input(1), sin = c.input(2);
  if (std::optional<Value> pos = c.optional_input(3)) {
    cos = g.gather(cos, *pos, 0);
    sin = g.gather(sin, *pos, 0);
  }
  c.require(g.shape(cos).rank() == 3,
            "cos_cache must be [batch, seq, R/2] (or 2-D with position_ids)");
  const Shape cs = g.shape(cos);
  cos = g.reshape(cos, {cs[0], 1, cs[1], cs[2]});
  sin = g.reshape(sin, {cs[0], 1, cs[1], cs[2]});
  const std::string layout = c.attr_int("interleaved", 0) != 0 ? "gptj" : "neox";
  if (s.rank() == 4) return c.set_output(0, g.rope(x, cos, sin, layout));
  const int64_t heads = c.attr_int("num_heads", 0);
  c.require(s.rank() == 3 && heads > 0 && s[2] % heads == 0,
            "a 3-D input needs num_heads dividing its hidden size");
  Value h = g.transpose(g.reshape(x, {s[0], s[1], heads, s[2] / heads}), {0, 2, 1, 3});
  Value y = g.rope(h, cos, sin, layout);
  c.set_output(0, g.reshape(g.transpose(y, {0, 2, 1, 3}), s.dims()));
}

// Softmax-like ops: opset >= 13 along `axis` (default -1); before, over the dims [axis, rank)
// flattened (default axis 1).
void convert_softmax_like(NodeContext& c, Value (*fn)(Graph&, Value, int64_t)) {
  Graph& g = c.g;
  Value x = c.input(0);
  const Shape s = g.shape(x);
  if (c.opset >= 13) return c.set_output(0, fn(g, x, c.axis(c.attr_int("axis", -1), s.rank())));
  const int64_t axis = c.axis(c.attr_int("axis", 1), std::max(s.rank(), 1));
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < s.rank(); ++i) (i < axis ? outer : inner) *= s[i];
  c.set_output(0, g.reshape(fn(g, g.reshape(x, {outer, inner}), 1), s.dims()));
}

Value hardmax(Graph& g, Value x, int64_t axis) {
  Value am = g.argmax(x, axis, true, DType::i64);
  return g.convert(g.eq(g.iota(DType::i64, g.shape(x), axis), am), g.dtype(x));
}

void convert_lrn(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  const Shape s = g.shape(x);
  const int64_t size = c.attr_int("size", 0);
  c.require(size >= 1 && s.rank() >= 3, "size must be >= 1 and the input NC...");
  const double alpha = c.attr_float("alpha", 1e-4), beta = c.attr_float("beta", 0.75),
               bias = c.attr_float("bias", 1.0);
  // Sum of squares over the channel window [c - (size-1)/2, c + ceil((size-1)/2)].
  std::vector<int64_t> lo(static_cast<size_t>(s.rank()), 0), hi = lo;
  lo[1] = (size - 1) / 2;
  hi[1] = size - 1 - lo[1];
  Value sq = g.pad(g.mul(x, x), k(g, x, 0), lo, hi);
  Value sum;
  for (int64_t i = 0; i < size; ++i) {
    std::vector<int64_t> start(static_cast<size_t>(s.rank()), 0), limit = s.dims();
    start[1] = i;
    limit[1] = i + s[1];
    Value part = g.slice(sq, start, limit);
    sum = i == 0 ? part : g.add(sum, part);
  }
  Value denom = g.pow(g.add(k(g, x, bias), g.mul(sum, k(g, x, alpha / static_cast<double>(size)))),
                      k(g, x, beta));
  c.set_output(0, g.div(x, denom));
}

void convert_lp_norm(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  const int64_t axis = c.axis(c.attr_int("axis", -1), g.shape(x).rank());
  const int64_t p = c.attr_int("p", 2);
  c.require(p == 1 || p == 2, "p must be 1 or 2");
  Value norm = p == 1 ? g.reduce_sum(g.abs(x), {axis}, true)
                      : g.sqrt(g.reduce_sum(g.mul(x, x), {axis}, true));
  // A zero norm gives 0, not NaN (onnx's reference).
  Value zero = k(g, norm, 0);
  c.set_output(0, g.select(g.eq(norm, zero), zero, g.div(x, norm)));
}

void convert_mvn(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  const int64_t rank = g.shape(x).rank();
  std::vector<int64_t> axes = c.attr_ints("axes", {0, 2, 3});
  for (int64_t& a : axes) a = c.axis(a, rank);
  // onnx's function body: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9).
  Value mean = g.reduce_mean(x, axes, true);
  Value var = g.sub(g.reduce_mean(g.mul(x, x), axes, true), g.mul(mean, mean));
  c.set_output(0, g.div(g.sub(x, mean), g.add(g.sqrt(var), k(g, x, 1e-9))));
}

}  // namespace

void add_nn_converters(ConverterTable& t) {
  t[{"", "MatMul"}] = [](NodeContext& c) { c.set_output(0, c.g.matmul(c.input(0), c.input(1))); };
  t[{"", "Gemm"}] = convert_gemm;
  t[{"", "Conv"}] = convert_conv;
  t[{"", "ConvTranspose"}] = convert_conv_transpose;
  t[{"", "MaxPool"}] = [](NodeContext& c) { convert_pool(c, true); };
  t[{"", "AveragePool"}] = [](NodeContext& c) { convert_pool(c, false); };
  t[{"", "GlobalAveragePool"}] = [](NodeContext& c) {
    Value x = c.input(0);
    c.set_output(0, c.g.reduce_mean(x, spatial_axes(c.g.shape(x)), true));
  };
  t[{"", "GlobalMaxPool"}] = [](NodeContext& c) {
    Value x = c.input(0);
    c.set_output(0, c.g.reduce_max(x, spatial_axes(c.g.shape(x)), true));
  };
  t[{"", "BatchNormalization"}] = convert_batch_norm;
  t[{"", "InstanceNormalization"}] = convert_instance_norm;
  t[{"", "GroupNormalization"}] = convert_group_norm;
  t[{"", "LayerNormalization"}] = convert_layer_norm;
  t[{"", "RMSNormalization"}] = convert_rms_norm;
  t[{"", "RotaryEmbedding"}] = convert_rotary_embedding;
  t[{"", "Softmax"}] = [](NodeContext& c) {
    convert_softmax_like(c, [](Graph& g, Value x, int64_t a) { return g.softmax(x, a); });
  };
  t[{"", "LogSoftmax"}] = [](NodeContext& c) {
    convert_softmax_like(c, [](Graph& g, Value x, int64_t a) { return g.log_softmax(x, a); });
  };
  t[{"", "Hardmax"}] = [](NodeContext& c) { convert_softmax_like(c, hardmax); };
  t[{"", "LRN"}] = convert_lrn;
  t[{"", "LpNormalization"}] = convert_lp_norm;
  t[{"", "MeanVarianceNormalization"}] = convert_mvn;
}

}  // namespace rlx::onnx::detail
