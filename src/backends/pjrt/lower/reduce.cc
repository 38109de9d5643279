// StableHLO lowerings of the reductions: reduce_sum / max / min / prod / mean (stablehlo.reduce
// with a region), argmax / argmin (a two-operand reduce) and cumsum (a reduce_window).
#include <algorithm>
#include <limits>

#include "lower.h"

namespace rlx::pjrt::lower {
namespace {

// The identity of max / min reductions: -inf / +inf, or the integer dtype's extremes (int64's
// max is not a double: 2^63, which Tensor::full saturates back to int64's max).
double lowest(DType t) {
  return is_float(t) ? -std::numeric_limits<double>::infinity() : static_cast<double>(int_min(t));
}
double highest(DType t) {
  return is_float(t) ? std::numeric_limits<double>::infinity() : static_cast<double>(int_max(t));
}

// stablehlo.reduce over `dims` with the binary `combiner` starting from `init`.
std::string reduce(Emitter& e, const Operand& x, const std::vector<int64_t>& dims,
                   const char* combiner, double init, const TensorType& result) {
  DType t = x.type.dtype;
  std::string init_value = e.splat(t, Shape{}, init);
  std::string region = e.combiner_region(t, combiner);
  Shape reduced;
  for (int i = 0; i < x.type.shape.rank(); ++i)
    if (std::find(dims.begin(), dims.end(), i) == dims.end())
      reduced.dims().push_back(x.type.shape.dims()[static_cast<size_t>(i)]);
  TensorType rt{result.dtype, reduced};
  std::string r = e.emit("stablehlo.reduce", {x, {init_value, {t, Shape{}}}},
                         "dimensions = " + i64_array(dims), rt, region);
  if (rt.shape == result.shape) return r;
  return e.emit("stablehlo.reshape", {{r, rt}}, "", result);  // keepdims
}

std::vector<std::string> reduction(Emitter& e, const Node& n) {
  const TensorType& rt = n.results[0];
  Operand x = e.operand(n, 0);
  std::vector<int64_t> dims = e.axes(n, "axes", x.type.shape);
  if (dims.empty()) return {x.name};  // no axes: no reduction
  switch (n.op) {
    case OpKind::ReduceMax:
      return {reduce(e, x, dims, "stablehlo.maximum", lowest(x.type.dtype), rt)};
    case OpKind::ReduceMin:
      return {reduce(e, x, dims, "stablehlo.minimum", highest(x.type.dtype), rt)};
    case OpKind::ReduceProd:
      return {reduce(e, x, dims, "stablehlo.multiply", 1, rt)};
    case OpKind::ReduceSum:
      return {reduce(e, x, dims, "stablehlo.add", 0, rt)};
    default: {  // mean = sum / count; an empty extent gives 0 / 0 = NaN as specified
      double count = 1;
      for (int64_t d : dims)
        count *= static_cast<double>(x.type.shape.dims()[static_cast<size_t>(d)]);
      std::string sum = reduce(e, x, dims, "stablehlo.add", 0, rt);
      return {e.emit("stablehlo.divide", {{sum, rt}, {e.splat(rt.dtype, rt.shape, count), rt}}, "",
                     rt)};
    }
  }
}

// jnp.argmax / argmin: a two-operand reduce of (value, index) pairs keeping the extremum;
// ties and NaNs (which count as the extremum) go to the lower index. The comparator picks
// the accumulator a over b when a beats b (a > b, or a < b for argmin), or a is NaN and b is
// not, or both are equal (or both NaN) and a's index is lower.
std::vector<std::string> arg_extremum(Emitter& e, const Node& n) {
  Operand x = e.operand(n, 0);
  const TensorType& rt = n.results[0];
  DType vt = x.type.dtype, it = rt.dtype;
  int64_t axis = x.type.shape.normalize_axis(n.attrs.get_int("axis"));
  bool is_max = n.op == OpKind::ArgMax;
  std::string idx =
      e.emit("stablehlo.iota", {}, "iota_dimension = " + std::to_string(axis) + " : i64",
             {it, x.type.shape});
  // The initial pair loses to every element: the identity value with the largest index.
  std::string init_v = e.splat(vt, Shape{}, is_max ? lowest(vt) : highest(vt));
  std::string init_i = e.splat(it, Shape{}, highest(it));
  RegionCode r("%cmp" + std::to_string(e.next_number()) + "_");
  std::string sv = tensor_type(vt, Shape{}), si = tensor_type(it, Shape{});
  std::string a = r.arg("a"), ia = r.arg("ia"), b = r.arg("b"), ib = r.arg("ib");
  std::string beats = r.cmp(a, b, is_max ? "GT" : "LT", vt);
  std::string a_nan = r.cmp(a, a, "NE", vt), b_nan = r.cmp(b, b, "NE", vt);
  std::string nan_wins = r.logic("stablehlo.and", a_nan, r.negate(b_nan));
  std::string same =
      r.logic("stablehlo.or", r.cmp(a, b, "EQ", vt), r.logic("stablehlo.and", a_nan, b_nan));
  std::string tie_wins = r.logic("stablehlo.and", same, r.cmp(ia, ib, "LT", it));
  std::string pick = r.logic("stablehlo.or", r.logic("stablehlo.or", beats, nan_wins), tie_wins);
  std::string v = r.select(pick, a, b, vt), i = r.select(pick, ia, ib, it);
  Shape reduced = x.type.shape;
  reduced.dims().erase(reduced.dims().begin() + axis);
  std::string name = e.fresh();
  e.body() << "    " << name << ":2 = \"stablehlo.reduce\"(" << x.name << ", " << idx << ", "
           << init_v << ", " << init_i << ") ({\n    ^bb0(" << a << ": " << sv << ", " << ia << ": "
           << si << ", " << b << ": " << sv << ", " << ib << ": " << si << "):\n"
           << r.code() << "      \"stablehlo.return\"(" << v << ", " << i << ") : (" << sv << ", "
           << si << ") -> ()\n    }) {dimensions = array<i64: " << axis << ">} : ("
           << tensor_type(x.type) << ", " << tensor_type(it, x.type.shape) << ", " << sv << ", "
           << si << ") -> (" << tensor_type(vt, reduced) << ", " << tensor_type(it, reduced)
           << ")\n";
  std::string result = name + "#1";
  if (reduced == rt.shape) return {result};
  return {e.emit("stablehlo.reshape", {{result, {it, reduced}}}, "", rt)};  // keepdims
}

// lax.cumsum as a sliding-window sum: a window of the whole axis over the operand padded
// with n - 1 zeros before it (after it when reversed); exclusive pads n and drops the last
// (first when reversed) element.
std::vector<std::string> cumsum(Emitter& e, const Node& n) {
  Operand x = e.operand(n, 0);
  const TensorType& rt = n.results[0];
  int64_t axis = x.type.shape.normalize_axis(n.attrs.get_int("axis"));
  bool exclusive = n.attrs.get_bool("exclusive"), reverse = n.attrs.get_bool("reverse");
  int64_t len = x.type.shape.dims()[static_cast<size_t>(axis)];
  if (len == 0) return {x.name};
  int64_t pad = exclusive ? len : len - 1;
  int r = x.type.shape.rank();
  std::vector<int64_t> window(static_cast<size_t>(r), 1);
  window[static_cast<size_t>(axis)] = len;
  std::string padding = "dense<[";
  for (int d = 0; d < r; ++d) {
    int64_t lo = d == axis && !reverse ? pad : 0, hi = d == axis && reverse ? pad : 0;
    padding += (d ? ", [" : "[") + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  }
  padding += "]> : tensor<" + std::to_string(r) + "x2xi64>";
  Shape summed = x.type.shape;
  summed.dims()[static_cast<size_t>(axis)] += exclusive ? 1 : 0;
  TensorType st{rt.dtype, summed};
  std::string init = e.splat(rt.dtype, Shape{}, 0);
  std::string region = e.combiner_region(rt.dtype, "stablehlo.add");
  std::string sums =
      e.emit("stablehlo.reduce_window", {x, {init, {rt.dtype, Shape{}}}},
             "window_dimensions = " + i64_array(window) + ", padding = " + padding, st, region);
  if (!exclusive) return {sums};
  std::vector<int64_t> start(static_cast<size_t>(r), 0), limit = summed.dims(),
                                                         strides(static_cast<size_t>(r), 1);
  (reverse ? start : limit)[static_cast<size_t>(axis)] += reverse ? 1 : -1;
  return {e.emit("stablehlo.slice", {{sums, st}},
                 "start_indices = " + i64_array(start) + ", limit_indices = " + i64_array(limit) +
                     ", strides = " + i64_array(strides),
                 rt)};
}

}  // namespace

void register_reduce_lowerings(OpTable<LowerFn>& t) {
  for (OpKind op : {OpKind::ReduceSum, OpKind::ReduceMax, OpKind::ReduceMin, OpKind::ReduceProd,
                    OpKind::ReduceMean})
    t.set(op, reduction);
  t.set(OpKind::ArgMax, arg_extremum);
  t.set(OpKind::ArgMin, arg_extremum);
  t.set(OpKind::CumSum, cumsum);
}

}  // namespace rlx::pjrt::lower
