// Conv-family ops (conv, max_pool, avg_pool): attribute schemas and shape/dtype inference.
#include <string>
#include <vector>

#include "registry.h"

namespace rlx::detail {
namespace {

using Ints = std::vector<int64_t>;

// Floor division for a possibly negative numerator and a positive divisor.
int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && (a < 0) ? 1 : 0); }

// Reads an Ints attribute holding one entry per spatial dim; [] means `fill` everywhere.
// Fails unless every entry is >= `min`.
Ints spatial_list(const InferContext& ctx, const char* name, int spatial, int64_t fill,
                  int64_t min) {
  const Ints& v = ctx.attrs.get_ints(name);
  if (v.empty()) return Ints(static_cast<size_t>(spatial), fill);
  if (static_cast<int>(v.size()) != spatial)
    ctx.fail(std::string(name) + " " + ints_to_string(v) +
             " must have one entry per spatial dim (" + std::to_string(spatial) + ") or be empty");
  for (int64_t e : v)
    if (e < min)
      ctx.fail(std::string(name) + " " + ints_to_string(v) +
               " must have entries >= " + std::to_string(min));
  return v;
}

// Checks x is a float NCW / NCHW tensor and returns its number of spatial dims.
int spatial_rank(const InferContext& ctx, const TensorType& x, const char* what) {
  ctx.require_op_dtype(x.dtype, what);
  if (x.shape.rank() != 3 && x.shape.rank() != 4)
    ctx.fail(std::string(what) + " must be NCW (rank 3) or NCHW (rank 4), got shape " +
             x.shape.to_string());
  return x.shape.rank() - 2;
}

std::vector<TensorType> infer_conv(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  const TensorType& w = ctx.operands[1];
  int spatial = spatial_rank(ctx, x, "input");
  if (w.dtype != x.dtype)
    ctx.fail("kernel dtype must equal the input dtype " + std::string(dtype_name(x.dtype)) +
             ", got " + std::string(dtype_name(w.dtype)));
  if (w.shape.rank() != x.shape.rank())
    ctx.fail("kernel must be " + std::string(spatial == 1 ? "OIW (rank 3)" : "OIHW (rank 4)") +
             " to match the input rank, got shape " + w.shape.to_string());
  Ints strides = spatial_list(ctx, "strides", spatial, 1, 1);
  Ints lo = spatial_list(ctx, "pad_low", spatial, 0, 0);
  Ints hi = spatial_list(ctx, "pad_high", spatial, 0, 0);
  Ints dil = spatial_list(ctx, "dilation", spatial, 1, 1);
  int64_t groups = ctx.attrs.get_int("groups");
  if (groups < 1) ctx.fail("groups must be >= 1, got " + std::to_string(groups));
  int64_t c = x.shape[1], o = w.shape[0];
  if (c % groups != 0)
    ctx.fail("input channels " + std::to_string(c) + " are not divisible by groups " +
             std::to_string(groups));
  if (o % groups != 0)
    ctx.fail("output channels " + std::to_string(o) + " are not divisible by groups " +
             std::to_string(groups));
  if (w.shape[1] != c / groups)
    ctx.fail("kernel input channels must be C/groups = " + std::to_string(c) + "/" +
             std::to_string(groups) + " = " + std::to_string(c / groups) + ", got " +
             std::to_string(w.shape[1]) + " (kernel shape " + w.shape.to_string() + ")");
  Shape out{x.shape[0], o};
  for (int i = 0; i < spatial; ++i) {
    auto s = static_cast<size_t>(i);
    int64_t k = w.shape[i + 2];
    // StableHLO rejects empty windows, so an empty kernel dim is an error here too.
    if (k < 1)
      ctx.fail("kernel spatial dims must be >= 1, got kernel shape " + w.shape.to_string());
    int64_t extent = checked_add(ctx, checked_mul(ctx, dil[s], k - 1), 1);
    int64_t padded = checked_add(ctx, checked_add(ctx, x.shape[i + 2], lo[s]), hi[s]);
    int64_t n = floor_div(padded - extent, strides[s]) + 1;
    if (n < 0)
      ctx.fail("negative output size " + std::to_string(n) + " in spatial dim " +
               std::to_string(i) + ": padded input " + std::to_string(padded) +
               " is smaller than the dilated kernel extent " + std::to_string(extent));
    out.dims().push_back(n);
  }
  return {{x.dtype, out}};
}

std::vector<TensorType> infer_pool(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  int spatial = spatial_rank(ctx, x, "input");
  const Ints& window = ctx.attrs.get_ints("window");
  if (static_cast<int>(window.size()) != spatial)
    ctx.fail("window " + ints_to_string(window) + " must have one entry per spatial dim (" +
             std::to_string(spatial) + ")");
  for (int64_t k : window)
    if (k < 1) ctx.fail("window " + ints_to_string(window) + " must have entries >= 1");
  Ints strides = spatial_list(ctx, "strides", spatial, 1, 1);
  Ints lo = spatial_list(ctx, "pad_low", spatial, 0, 0);
  Ints hi = spatial_list(ctx, "pad_high", spatial, 0, 0);
  Shape out{x.shape[0], x.shape[1]};
  for (int i = 0; i < spatial; ++i) {
    auto s = static_cast<size_t>(i);
    int64_t padded = checked_add(ctx, checked_add(ctx, x.shape[i + 2], lo[s]), hi[s]);
    int64_t n = floor_div(padded - window[s], strides[s]) + 1;
    if (n < 0)
      ctx.fail("negative output size " + std::to_string(n) + " in spatial dim " +
               std::to_string(i) + ": padded input " + std::to_string(padded) +
               " is smaller than the window " + std::to_string(window[s]));
    out.dims().push_back(n);
  }
  return {{x.dtype, out}};
}

}  // namespace

void register_conv_ops() {
  define_op(OpKind::Conv,
            {def("strides", AttrType::Ints, Ints{}), def("pad_low", AttrType::Ints, Ints{}),
             def("pad_high", AttrType::Ints, Ints{}), def("dilation", AttrType::Ints, Ints{}),
             def("groups", AttrType::Int, int64_t{1})},
            infer_conv);
  define_op(OpKind::MaxPool,
            {req("window", AttrType::Ints), def("strides", AttrType::Ints, Ints{}),
             def("pad_low", AttrType::Ints, Ints{}), def("pad_high", AttrType::Ints, Ints{})},
            infer_pool);
  define_op(OpKind::AvgPool,
            {req("window", AttrType::Ints), def("strides", AttrType::Ints, Ints{}),
             def("pad_low", AttrType::Ints, Ints{}), def("pad_high", AttrType::Ints, Ints{}),
             def("count_include_pad", AttrType::Bool, true)},
            infer_pool);
}

}  // namespace rlx::detail
