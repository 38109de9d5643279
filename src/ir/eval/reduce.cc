// Reference kernels for reductions: reduce_*, argmax/argmin, cumsum and top_k.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "eval.h"

namespace rlx::detail {
namespace {

enum class ReduceKind { kSum, kProd, kMax, kMin, kMean };

// Smallest and largest value of integer dtype `t` (the identities of integer max/min).
std::pair<int64_t, int64_t> int_limits(DType t) {
  switch (t) {
    case DType::i8:
      return {-128, 127};
    case DType::u8:
      return {0, 255};
    case DType::i32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    default:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

// Mask of the reduced dims (axes were range- and duplicate-checked by inference).
std::vector<bool> reduced_mask(const EvalContext& ctx, int rank) {
  std::vector<bool> mask(static_cast<size_t>(rank), false);
  for (int64_t a : ctx.attrs().get_ints("axes"))
    mask[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
  return mask;
}

// Identity of a reduction as (float accumulator, integer accumulator); integer max/min start
// at the dtype's min/max so an empty reduction yields them.
template <ReduceKind kKind>
std::pair<double, uint64_t> identity(DType t) {
  auto [lo, hi] = int_limits(t);
  if constexpr (kKind == ReduceKind::kProd) return {1.0, 1};
  if constexpr (kKind == ReduceKind::kMax) return {-INFINITY, static_cast<uint64_t>(lo)};
  if constexpr (kKind == ReduceKind::kMin) return {INFINITY, static_cast<uint64_t>(hi)};
  return {0.0, 0};
}

// One kernel for the five reductions: each input element is folded into the accumulator of its
// output element (input index with reduced dims set to 0). Floats fold in double and are
// rounded once on store; integers fold in uint64 so sums and products wrap without UB.
template <ReduceKind kKind>
std::vector<Tensor> eval_reduce(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  const Shape& in = x.shape();
  std::vector<bool> mask = reduced_mask(ctx, in.rank());
  Shape kept = in;   // keepdims layout; the same row-major order as the squeezed result
  double count = 1;  // of the mean; a double, as x may be empty with huge reduced dims
  for (int i = 0; i < in.rank(); ++i) {
    if (!mask[static_cast<size_t>(i)]) continue;
    count *= static_cast<double>(in[i]);
    kept[i] = 1;
  }
  const TensorType& t = ctx.result_type();
  Tensor out(t.dtype, t.shape);
  int64_t n_out = out.numel();
  bool fl = is_float(x.dtype());
  auto [f_init, i_init] = identity<kKind>(x.dtype());
  std::vector<double> facc(static_cast<size_t>(n_out), f_init);
  std::vector<uint64_t> iacc(static_cast<size_t>(n_out), i_init);

  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, in);
    for (int d = 0; d < in.rank(); ++d)
      if (mask[static_cast<size_t>(d)]) idx[static_cast<size_t>(d)] = 0;
    auto o = static_cast<size_t>(ravel(idx, kept));
    if (fl) {
      double v = x.get_f64(i);
      double& a = facc[o];
      if constexpr (kKind == ReduceKind::kSum || kKind == ReduceKind::kMean) a += v;
      if constexpr (kKind == ReduceKind::kProd) a *= v;
      // NaN propagates (lax.max/min): once the accumulator is NaN it stays NaN.
      if constexpr (kKind == ReduceKind::kMax) a = scalar::max_nan(a, v);
      if constexpr (kKind == ReduceKind::kMin) a = scalar::min_nan(a, v);
    } else {
      int64_t v = x.get_i64(i);
      uint64_t& a = iacc[o];
      if constexpr (kKind == ReduceKind::kSum) a += static_cast<uint64_t>(v);
      if constexpr (kKind == ReduceKind::kProd) a *= static_cast<uint64_t>(v);
      if constexpr (kKind == ReduceKind::kMax)
        a = static_cast<uint64_t>(std::max(static_cast<int64_t>(a), v));
      if constexpr (kKind == ReduceKind::kMin)
        a = static_cast<uint64_t>(std::min(static_cast<int64_t>(a), v));
    }
  }
  for (int64_t o = 0; o < n_out; ++o) {
    auto oo = static_cast<size_t>(o);
    if (fl) {
      // Mean over zero elements is 0/0 = NaN, as jnp.mean.
      if constexpr (kKind == ReduceKind::kMean)
        out.set_f64(o, facc[oo] / count);
      else
        out.set_f64(o, facc[oo]);
    } else {
      out.set_i64(o, static_cast<int64_t>(iacc[oo]));
    }
  }
  return {out};
}

// Splits `shape` around `axis` into (outer, size, inner) for loops over one axis.
struct AxisSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
AxisSplit split_at(const Shape& shape, int64_t axis) {
  int a = shape.normalize_axis(axis);
  return {dims_product(shape, 0, a), shape[a], dims_product(shape, a + 1, shape.rank())};
}

// True when element j should replace the current best `b` of an argmax (kMax) / argmin scan.
// NaN counts as the extremum and the first one wins (jnp.argmax/argmin); otherwise a strict
// comparison keeps the first of equal values.
template <bool kMax>
bool arg_better(const Tensor& x, int64_t j, int64_t b) {
  if (is_float(x.dtype())) {
    double v = x.get_f64(j), bv = x.get_f64(b);
    if (std::isnan(bv)) return false;
    if (std::isnan(v)) return true;
    return kMax ? v > bv : v < bv;
  }
  int64_t v = x.get_i64(j), bv = x.get_i64(b);
  return kMax ? v > bv : v < bv;
}

template <bool kMax>
std::vector<Tensor> eval_arg_reduce(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  AxisSplit s = split_at(x.shape(), ctx.attrs().get_int("axis"));
  const TensorType& t = ctx.result_type();
  Tensor out(t.dtype, t.shape);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t in = 0; in < s.inner; ++in) {
      int64_t base = o * s.size * s.inner + in;
      int64_t best = 0;
      for (int64_t j = 1; j < s.size; ++j)
        if (arg_better<kMax>(x, base + j * s.inner, base + best * s.inner)) best = j;
      out.set_i64(o * s.inner + in, best);
    }
  }
  return {out};
}

std::vector<Tensor> eval_cumsum(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  AxisSplit s = split_at(x.shape(), ctx.attrs().get_int("axis"));
  bool exclusive = ctx.attrs().get_bool("exclusive");
  bool reverse = ctx.attrs().get_bool("reverse");
  bool fl = is_float(x.dtype());
  Tensor out(x.dtype(), x.shape());
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t in = 0; in < s.inner; ++in) {
      // The running sum stays in double / uint64; each output is rounded (or wrapped) once.
      double f = 0;
      uint64_t u = 0;
      for (int64_t step = 0; step < s.size; ++step) {
        int64_t j = reverse ? s.size - 1 - step : step;
        int64_t i = (o * s.size + j) * s.inner + in;
        auto store = [&] {
          if (fl)
            out.set_f64(i, f);
          else
            out.set_i64(i, static_cast<int64_t>(u));
        };
        if (exclusive) store();
        if (fl)
          f += x.get_f64(i);
        else
          u += static_cast<uint64_t>(x.get_i64(i));
        if (!exclusive) store();
      }
    }
  }
  return {out};
}

// Descending order of top_k. Floats follow XLA's TopK comparator, a total order in which +0
// ranks above -0, except that every NaN (of either sign) ranks above +inf; XLA puts NaNs with
// the sign bit set last, rlx treats all NaNs alike so the order does not depend on NaN payloads.
bool top_k_greater(const Tensor& x, int64_t a, int64_t b) {
  if (!is_float(x.dtype())) return x.get_i64(a) > x.get_i64(b);
  double va = x.get_f64(a), vb = x.get_f64(b);
  if (std::isnan(va) || std::isnan(vb)) return std::isnan(va) && !std::isnan(vb);
  if (va == 0 && vb == 0) return !std::signbit(va) && std::signbit(vb);
  return va > vb;
}

std::vector<Tensor> eval_top_k(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  int64_t n = x.shape()[x.shape().rank() - 1];
  int64_t k = ctx.attrs().get_int("k");
  Tensor values(ctx.result_type(0).dtype, ctx.result_type(0).shape);
  Tensor indices(ctx.result_type(1).dtype, ctx.result_type(1).shape);
  int64_t rows = n == 0 ? 0 : x.numel() / n;
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    std::iota(order.begin(), order.end(), int64_t{0});
    // Stable sort: equal elements keep index order, so ties go to the lower index.
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return top_k_greater(x, r * n + a, r * n + b); });
    for (int64_t j = 0; j < k; ++j) {
      int64_t src = r * n + order[static_cast<size_t>(j)];
      if (is_float(x.dtype()))
        values.set_f64(r * k + j, x.get_f64(src));
      else
        values.set_i64(r * k + j, x.get_i64(src));
      indices.set_i64(r * k + j, order[static_cast<size_t>(j)]);
    }
  }
  return {values, indices};
}

}  // namespace

void register_eval_reduce() {
  set_eval(OpKind::ReduceSum, eval_reduce<ReduceKind::kSum>);
  set_eval(OpKind::ReduceMean, eval_reduce<ReduceKind::kMean>);
  set_eval(OpKind::ReduceMax, eval_reduce<ReduceKind::kMax>);
  set_eval(OpKind::ReduceMin, eval_reduce<ReduceKind::kMin>);
  set_eval(OpKind::ReduceProd, eval_reduce<ReduceKind::kProd>);
  set_eval(OpKind::ArgMax, eval_arg_reduce<true>);
  set_eval(OpKind::ArgMin, eval_arg_reduce<false>);
  set_eval(OpKind::CumSum, eval_cumsum);
  set_eval(OpKind::TopK, eval_top_k);
}

}  // namespace rlx::detail
