// Reference kernels for conv-family ops: conv, max_pool, avg_pool (direct loops in double).
// A 1-D NCW tensor is evaluated as NCHW with H = 1, which has the same row-major layout.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "eval.h"

namespace rlx::detail {
namespace {

using Dims2 = std::array<int64_t, 2>;

// Spatial dims of an NC[H]W shape as (H, W); a 1-D shape gets H = 1.
Dims2 spatial2(const Shape& s) {
  if (s.rank() == 3) return {1, s[2]};
  return {s[2], s[3]};
}

// A per-spatial-dim Ints attribute as (H, W): [] means `fill`, a 1-D list gets H = `h_fill`.
Dims2 attr2(const AttrMap& attrs, const std::string& name, int spatial, int64_t fill,
            int64_t h_fill) {
  const std::vector<int64_t>& v = attrs.get_ints(name);
  if (v.empty()) return {spatial == 1 ? h_fill : fill, fill};
  if (spatial == 1) return {h_fill, v[0]};
  return {v[0], v[1]};
}

std::vector<Tensor> eval_conv(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  const Tensor& w = ctx.operands[1];
  const TensorType& rt = ctx.result_type();
  Tensor out(rt.dtype, rt.shape);
  int sp = x.shape().rank() - 2;
  const AttrMap& a = ctx.attrs();
  Dims2 in = spatial2(x.shape()), k = spatial2(w.shape()), os = spatial2(rt.shape);
  Dims2 stride = attr2(a, "strides", sp, 1, 1), lo = attr2(a, "pad_low", sp, 0, 0);
  Dims2 dil = attr2(a, "dilation", sp, 1, 1);
  int64_t batch = x.shape()[0], c = x.shape()[1], o = w.shape()[0];
  int64_t groups = a.get_int("groups");
  int64_t cg = c / groups, og = o / groups;
  int64_t flat = 0;
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t oy = 0; oy < os[0]; ++oy)
        for (int64_t ox = 0; ox < os[1]; ++ox) {
          int64_t g = oc / og;
          double acc = 0;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ky = 0; ky < k[0]; ++ky)
              for (int64_t kx = 0; kx < k[1]; ++kx) {
                int64_t iy = oy * stride[0] - lo[0] + ky * dil[0];
                int64_t ix = ox * stride[1] - lo[1] + kx * dil[1];
                if (iy < 0 || iy >= in[0] || ix < 0 || ix >= in[1]) continue;  // zero padding
                int64_t xi = ((n * c + g * cg + ci) * in[0] + iy) * in[1] + ix;
                int64_t wi = ((oc * cg + ci) * k[0] + ky) * k[1] + kx;
                acc += x.get_f64(xi) * w.get_f64(wi);
              }
          out.set_f64(flat++, acc);
        }
  return {out};
}

// Shared loop of max_pool and avg_pool: visits each output position's in-bounds inputs.
template <class Reduce>
Tensor pool(const EvalContext& ctx, Reduce reduce) {
  const Tensor& x = ctx.operands[0];
  const TensorType& rt = ctx.result_type();
  Tensor out(rt.dtype, rt.shape);
  int sp = x.shape().rank() - 2;
  const AttrMap& a = ctx.attrs();
  Dims2 in = spatial2(x.shape()), os = spatial2(rt.shape);
  Dims2 k = attr2(a, "window", sp, 1, 1), stride = attr2(a, "strides", sp, 1, 1);
  Dims2 lo = attr2(a, "pad_low", sp, 0, 0);
  int64_t planes = x.shape()[0] * x.shape()[1];
  int64_t flat = 0;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oy = 0; oy < os[0]; ++oy)
      for (int64_t ox = 0; ox < os[1]; ++ox) {
        std::vector<double> vals;  // the in-bounds elements of this window
        // Loops run over the window's intersection with the input only, so a huge window
        // (made legal by huge padding) costs no more than the input itself.
        int64_t y0 = oy * stride[0] - lo[0], x0 = ox * stride[1] - lo[1];
        for (int64_t iy = std::max<int64_t>(y0, 0); iy < std::min(y0 + k[0], in[0]); ++iy)
          for (int64_t ix = std::max<int64_t>(x0, 0); ix < std::min(x0 + k[1], in[1]); ++ix)
            vals.push_back(x.get_f64((p * in[0] + iy) * in[1] + ix));
        out.set_f64(flat++, reduce(vals, static_cast<double>(k[0]) * static_cast<double>(k[1])));
      }
  return out;
}

std::vector<Tensor> eval_max_pool(const EvalContext& ctx) {
  // Padding is -inf, so it only shows when a window holds no input at all. NaN propagates as
  // in lax.max.
  return {pool(ctx, [](const std::vector<double>& vals, double) {
    double m = -std::numeric_limits<double>::infinity();
    for (double v : vals) {
      if (std::isnan(v)) return v;
      m = std::max(m, v);
    }
    return m;
  })};
}

std::vector<Tensor> eval_avg_pool(const EvalContext& ctx) {
  bool include_pad = ctx.attrs().get_bool("count_include_pad");
  return {pool(ctx, [include_pad](const std::vector<double>& vals, double window_size) {
    double sum = 0;
    for (double v : vals) sum += v;
    // A window lying wholly in the padding divides 0 by 0 (NaN) when padding is not counted.
    return sum / (include_pad ? window_size : static_cast<double>(vals.size()));
  })};
}

}  // namespace

void register_eval_conv() {
  set_eval(OpKind::Conv, eval_conv);
  set_eval(OpKind::MaxPool, eval_max_pool);
  set_eval(OpKind::AvgPool, eval_avg_pool);
}

}  // namespace rlx::detail
