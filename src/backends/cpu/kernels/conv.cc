// Native CPU kernels of the conv family: conv on oneDNN's convolution primitive (f32, bf16;
// f16 through f32), max_pool and avg_pool on oneDNN's pooling (f32, bf16) or direct loops.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "../kernel.h"
#include "dnnl_util.h"
#include "rlx/ir/evaluator.h"

namespace rlx::cpu {
namespace {

using dnnl::memory;

constexpr float kInf = std::numeric_limits<float>::infinity();

// The (H, W) values of a per-spatial-dim attribute of an NC[H]W op: [] means `fill`, a 1-D
// op gets H = `h_fill` (a 1-D op runs as 2-D with H = 1).
std::array<int64_t, 2> attr2(const Node& node, const char* name, int spatial, int64_t fill,
                             int64_t h_fill) {
  const std::vector<int64_t>& v = node.attrs.get_ints(name);
  if (v.empty()) return {spatial == 1 ? h_fill : fill, fill};
  if (spatial == 1) return {h_fill, v[0]};
  return {v[0], v[1]};
}

// Spatial dims of an NC[H]W shape as (H, W); a 1-D shape gets H = 1.
std::array<int64_t, 2> spatial2(const Shape& s) {
  if (s.rank() == 3) return {1, s[2]};
  return {s[2], s[3]};
}

// ---- conv

// A conv compiled to a oneDNN convolution, plus the copies around it: f16 operands converted
// to f32 (and the f32 result rounded back), and reorders between rlx's plain NCHW / OIHW
// layouts and the blocked layouts oneDNN's fastest kernels use. Accuracy as the gemm kernels:
// f32 sums of exact products over the C/groups * kH * kW taps, rounded once to the result.
struct DnnlConv {
  memory::desc x_md, w_md, y_md;          // plain layouts, in the compute type
  memory::desc x_blk, w_blk, y_blk, pad;  // the layouts the convolution runs on
  std::optional<dnnl::reorder> x_reorder, w_reorder, y_reorder;
  dnnl::convolution_forward conv;
  ConvertFn x_in = nullptr, w_in = nullptr, y_out = nullptr;
  int64_t x_numel = 0, w_numel = 0, y_numel = 0;
  // A constant weight converted and reordered to w_blk once, when the kernel is built.
  std::shared_ptr<const std::vector<std::byte>> packed_w;

  void operator()(const KernelIO& io) const {
    const std::byte* x = io.in[0];
    const std::byte* w = io.in[1];
    std::byte* y = y_out ? scratch(kScratchDst, y_md.get_size()) : io.out[0];
    if (x_in) {
      std::byte* buf = scratch(kScratchSrc, x_md.get_size());
      x_in(x, buf, x_numel);
      x = buf;
    }
    if (w_in && !packed_w) {
      std::byte* buf = scratch(kScratchWeights, w_md.get_size());
      w_in(w, buf, w_numel);
      w = buf;
    }
    dnnl::stream& s = dnnl_stream();
    memory xm = dnnl_memory(x_md, x), wm = dnnl_memory(w_md, w), ym = dnnl_memory(y_md, y);
    if (x_reorder) {
      memory blk = dnnl_memory(x_blk, scratch(kScratchSrcAlt, x_blk.get_size()));
      x_reorder->execute(s, xm, blk);
      xm = blk;
    }
    if (packed_w) {
      wm = dnnl_memory(w_blk, packed_w->data());
    } else if (w_reorder) {
      memory blk = dnnl_memory(w_blk, scratch(kScratchWeightsAlt, w_blk.get_size()));
      w_reorder->execute(s, wm, blk);
      wm = blk;
    }
    memory conv_dst =
        y_reorder ? dnnl_memory(y_blk, scratch(kScratchDstAlt, y_blk.get_size())) : ym;
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, conv_dst}};
    if (pad.get_size() > 0)
      args.insert({DNNL_ARG_SCRATCHPAD, dnnl_memory(pad, scratch(kScratchPad, pad.get_size()))});
    conv.execute(s, args);
    if (y_reorder) y_reorder->execute(s, conv_dst, ym);
    s.wait();
    if (y_out) y_out(y, io.out[0], y_numel);
  }
};

// conv on oneDNN in f32; f16 and bf16 through exact f32 copies, rounded once on output (as the
// reference: f32 accumulation). Not oneDNN's bf16 convolution: its jit kernels read one tap past
// the window with weight 0, so a NaN/inf there leaked into a neighbouring output (0 * inf).
// f64 is not native (its kernel table entry: oneDNN has no f64 convolution).
Kernel conv_kernel(const Graph& g, const Node& node) {
  const TensorType& xt = g.type(node.operands[0]);
  const TensorType& wt = g.type(node.operands[1]);
  const TensorType& yt = node.results[0];
  if (yt.shape.numel() == 0) return [](const KernelIO&) {};  // never called
  size_t y_bytes = static_cast<size_t>(yt.shape.numel()) * dtype_size(yt.dtype);
  if (xt.shape.numel() == 0 || wt.shape[1] == 0)  // no input at all: every sum is empty
    return [y_bytes](const KernelIO& io) { std::memset(io.out[0], 0, y_bytes); };

  int sp = xt.shape.rank() - 2;
  auto [ih, iw] = spatial2(xt.shape);
  auto [kh, kw] = spatial2(wt.shape);
  auto [oh, ow] = spatial2(yt.shape);
  auto stride = attr2(node, "strides", sp, 1, 1), lo = attr2(node, "pad_low", sp, 0, 0);
  auto hi = attr2(node, "pad_high", sp, 0, 0), dil = attr2(node, "dilation", sp, 1, 1);
  int64_t n = xt.shape[0], c = xt.shape[1], o = wt.shape[0];
  int64_t groups = node.attrs.get_int("groups");
  memory::data_type dt = dnnl_type(DType::f32);

  DnnlConv k;
  // A 1x1 stride-1 conv is a plain GEMM on NCHW, where reorders would only add passes; other
  // convs run faster on the blocked layouts oneDNN picks, reorders included.
  bool plain = kh == 1 && kw == 1 && stride[0] == 1 && stride[1] == 1;
  auto any = [&](const memory::desc& md) {
    return plain ? md : memory::desc(md.dims(), dt, memory::format_tag::any);
  };
  try {
    k.x_md = memory::desc({n, c, ih, iw}, dt, memory::format_tag::nchw);
    k.y_md = memory::desc({n, o, oh, ow}, dt, memory::format_tag::nchw);
    // OIHW with groups is GOIHW over the same bytes: [G, O/G, C/G, kH, kW].
    k.w_md = groups == 1 ? memory::desc({o, c, kh, kw}, dt, memory::format_tag::oihw)
                         : memory::desc({groups, o / groups, c / groups, kh, kw}, dt,
                                        memory::format_tag::goihw);
    const dnnl::engine& eng = dnnl_engine();
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // oneDNN's dilation counts the gaps between taps: rlx's dilation d is oneDNN's d - 1.
    dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                        dnnl::algorithm::convolution_direct, any(k.x_md),
                                        any(k.w_md), any(k.y_md), {stride[0], stride[1]},
                                        {dil[0] - 1, dil[1] - 1}, {lo[0], lo[1]}, {hi[0], hi[1]}),
        attr, eng);
    k.x_blk = pd.src_desc();
    k.w_blk = pd.weights_desc();
    k.y_blk = pd.dst_desc();
    k.pad = pd.scratchpad_desc();
    k.conv = dnnl::convolution_forward(pd);
    auto reorder = [&](const memory::desc& from, const memory::desc& to) {
      return dnnl::reorder(dnnl::reorder::primitive_desc(eng, from, eng, to));
    };
    if (k.x_blk != k.x_md) k.x_reorder = reorder(k.x_md, k.x_blk);
    if (k.w_blk != k.w_md) k.w_reorder = reorder(k.w_md, k.w_blk);
    if (k.y_blk != k.y_md) k.y_reorder = reorder(k.y_blk, k.y_md);
  } catch (const dnnl::error&) {
    return {};
  }
  if (xt.dtype == DType::f16 || xt.dtype == DType::bf16) {
    bool half = xt.dtype == DType::f16;
    k.x_in = half ? convert_bytes<f16, float> : convert_bytes<bf16, float>;
    k.w_in = half ? convert_bytes<f16, float> : convert_bytes<bf16, float>;
    k.y_out = half ? convert_bytes<float, f16> : convert_bytes<float, bf16>;
    k.x_numel = xt.shape.numel();
    k.w_numel = wt.shape.numel();
    k.y_numel = yt.shape.numel();
  }
  // A constant weight (an imported model's, or one folded at compile time) is converted and
  // reordered once here instead of on every call.
  const Node& wn = g.node(node.operands[1]);
  if (wn.op == OpKind::Constant && (k.w_in || k.w_reorder)) {
    Tensor w = evaluate_op(OpKind::Constant, {}, wn.attrs)[0];
    std::vector<std::byte> plain;
    const std::byte* src = w.data();
    if (k.w_in) {
      plain.resize(k.w_md.get_size());
      k.w_in(src, plain.data(), k.w_numel);
      src = plain.data();
    }
    auto packed = std::make_shared<std::vector<std::byte>>(k.w_blk.get_size());
    if (k.w_reorder) {
      dnnl::stream& s = dnnl_stream();
      memory from = dnnl_memory(k.w_md, src), to = dnnl_memory(k.w_blk, packed->data());
      k.w_reorder->execute(s, from, to);
      s.wait();
    } else {
      std::memcpy(packed->data(), src, packed->size());
    }
    k.packed_w = std::move(packed);
  }
  return k;
}

// ---- pooling

// Pooling geometry in 2-D (a 1-D op has H = 1).
struct PoolShape {
  int64_t planes = 0, ih = 0, iw = 0, oh = 0, ow = 0, kh = 0, kw = 0, sh = 0, sw = 0, ph = 0,
          pw = 0;
  bool include_pad = true;
};

// max_pool / avg_pool as direct loops: each output sums or maxes its window's in-bounds inputs,
// outputs of a row in parallel over rows. Acc is f32 (double for f64). Max: NaN wins (as
// lax.max) and a window with no input is -inf; exact. Avg: the f32 sum over the window divided
// by the window size or the in-bounds count (0 / 0 = NaN for a window wholly in the padding,
// as the reference); within a few f32 ulp of the reference's double sum for practical windows.
template <class T, class Acc, bool kMax>
struct Pool {
  PoolShape s;

  void operator()(const KernelIO& io) const {
    const T* x = io.input<T>(0);
    T* y = io.output<T>(0);
    int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, s.ow * s.kh * s.kw));
    parallel_for(0, s.planes * s.oh, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* plane = x + (r / s.oh) * s.ih * s.iw;
        int64_t y0 = (r % s.oh) * s.sh - s.ph;
        int64_t ya = std::max<int64_t>(y0, 0), yb = std::min(y0 + s.kh, s.ih);
        T* out = y + r * s.ow;
        for (int64_t ox = 0; ox < s.ow; ++ox) {
          int64_t x0 = ox * s.sw - s.pw;
          int64_t xa = std::max<int64_t>(x0, 0), xb = std::min(x0 + s.kw, s.iw);
          Acc acc = kMax ? -std::numeric_limits<Acc>::infinity() : Acc{0};
          for (int64_t iy = ya; iy < yb; ++iy) {
            const T* row = plane + iy * s.iw;
            for (int64_t ix = xa; ix < xb; ++ix) {
              Acc v = widen(row[ix]);
              if constexpr (kMax)
                acc = (v > acc || v != v) ? v : acc;
              else
                acc += v;
            }
          }
          if constexpr (!kMax) {
            int64_t in = std::max<int64_t>(xb - xa, 0) * std::max<int64_t>(yb - ya, 0);
            acc /= static_cast<Acc>(s.include_pad ? s.kh * s.kw : in);
          }
          out[ox] = convert_elem<T>(acc);
        }
      }
    });
  }

  static Acc widen(T v) {
    if constexpr (std::is_same_v<T, double>)
      return v;
    else
      return to_f32(v);
  }
};

// Whether any of the n elements is NaN or -inf (!(x > -inf)), in parallel.
template <class T>
bool any_nan_or_neg_inf(const T* x, int64_t n) {
  std::atomic<bool> found{false};
  parallel_for(0, n, 1 << 16, [x, &found](int64_t b, int64_t e) {
    // Blocks of a fixed 16 elements, which -O2 vectorizes (an open-ended loop it does not).
    int bad = 0;
    int64_t i = b;
    for (; i + 16 <= e; i += 16) {
      int block = 0;
      for (int j = 0; j < 16; ++j) block |= to_f32(x[i + j]) > -kInf ? 0 : 1;
      bad |= block;
    }
    for (; i < e; ++i) bad |= to_f32(x[i]) > -kInf ? 0 : 1;
    if (bad) found.store(true, std::memory_order_relaxed);
  });
  return found.load();
}

// oneDNN's pooling over plain NCHW (jit kernels on AVX-512) for f32 and bf16. oneDNN sums
// like the reference, so averages match it (f32 sums); its max drops NaN and starts from the
// lowest finite value, so it is exact only on inputs without NaN and -inf: max pooling scans
// the input first and runs the direct loop `exact` when it finds either.
struct DnnlPool {
  memory::desc x_md, y_md, pad;
  dnnl::pooling_forward pool;
  bool scan = false;
  DType dtype = DType::f32;
  int64_t x_numel = 0;
  Kernel exact;

  void operator()(const KernelIO& io) const {
    if (scan) {
      bool special = dtype == DType::bf16 ? any_nan_or_neg_inf(io.input<bf16>(0), x_numel)
                                          : any_nan_or_neg_inf(io.input<float>(0), x_numel);
      if (special) {
        exact(io);
        return;
      }
    }
    dnnl::stream& s = dnnl_stream();
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, dnnl_memory(x_md, io.in[0])},
                                            {DNNL_ARG_DST, dnnl_memory(y_md, io.out[0])}};
    if (pad.get_size() > 0)
      args.insert({DNNL_ARG_SCRATCHPAD, dnnl_memory(pad, scratch(kScratchPad, pad.get_size()))});
    pool.execute(s, args);
    s.wait();
  }
};

// The direct loop for `s` in dtype t.
template <bool kMax>
Kernel pool_loop(const PoolShape& s, DType t) {
  switch (t) {
    case DType::f32:
      return Pool<float, float, kMax>{s};
    case DType::f16:
      return Pool<f16, float, kMax>{s};
    case DType::bf16:
      return Pool<bf16, float, kMax>{s};
    case DType::f64:
      return Pool<double, double, kMax>{s};
    default:
      return {};
  }
}

// max_pool / avg_pool: oneDNN for f32 and bf16 (DnnlPool) when every window holds input (a
// window wholly in the padding is -inf / NaN here but not in oneDNN) and oneDNN has a
// non-reference kernel; the direct loop otherwise (f16, f64).
template <bool kMax>
Kernel pool_kernel(const Graph& g, const Node& node) {
  const TensorType& xt = g.type(node.operands[0]);
  const TensorType& yt = node.results[0];
  if (yt.shape.numel() == 0) return [](const KernelIO&) {};  // never called
  int sp = xt.shape.rank() - 2;
  auto [ih, iw] = spatial2(xt.shape);
  auto [oh, ow] = spatial2(yt.shape);
  auto window = attr2(node, "window", sp, 1, 1), stride = attr2(node, "strides", sp, 1, 1);
  auto lo = attr2(node, "pad_low", sp, 0, 0), hi = attr2(node, "pad_high", sp, 0, 0);
  PoolShape s{xt.shape[0] * xt.shape[1],
              ih,
              iw,
              oh,
              ow,
              window[0],
              window[1],
              stride[0],
              stride[1],
              lo[0],
              lo[1],
              true};
  if constexpr (!kMax) s.include_pad = node.attrs.get_bool("count_include_pad");
  Kernel loop = pool_loop<kMax>(s, xt.dtype);
  // The first and last windows of each dim overlap the input iff every window does.
  bool all_windows_hold_input = window[0] > lo[0] && window[1] > lo[1] &&
                                (oh - 1) * stride[0] - lo[0] < ih &&
                                (ow - 1) * stride[1] - lo[1] < iw;
  if ((xt.dtype != DType::f32 && xt.dtype != DType::bf16) || !all_windows_hold_input) return loop;
  DnnlPool k;
  k.scan = kMax;
  k.dtype = xt.dtype;
  k.x_numel = xt.shape.numel();
  k.exact = loop;
  try {
    memory::data_type dt = dnnl_type(xt.dtype);
    k.x_md = memory::desc({xt.shape[0], xt.shape[1], ih, iw}, dt, memory::format_tag::nchw);
    k.y_md = memory::desc({xt.shape[0], xt.shape[1], oh, ow}, dt, memory::format_tag::nchw);
    dnnl::algorithm alg = kMax            ? dnnl::algorithm::pooling_max
                          : s.include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                          : dnnl::algorithm::pooling_avg_exclude_padding;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::pooling_forward::primitive_desc pd(
        dnnl::pooling_forward::desc(dnnl::prop_kind::forward_inference, alg, k.x_md, k.y_md,
                                    {stride[0], stride[1]}, {window[0], window[1]}, {lo[0], lo[1]},
                                    {hi[0], hi[1]}),
        attr, dnnl_engine());
    if (is_reference_impl(pd)) return loop;
    k.pad = pd.scratchpad_desc();
    k.pool = dnnl::pooling_forward(pd);
  } catch (const dnnl::error&) {
    return loop;
  }
  return k;
}

}  // namespace

void register_conv_kernels() {
  register_kernel(OpKind::Conv, {conv_kernel,
                                 {DType::f32, DType::f16, DType::bf16},
                                 "oneDNN has no f64 convolution",
                                 "oneDNN cannot create a primitive for the geometry"});
  register_native(OpKind::MaxPool, pool_kernel<true>);
  register_native(OpKind::AvgPool, pool_kernel<false>);
}

}  // namespace rlx::cpu
