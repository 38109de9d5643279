// ONNX reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare (one table row
// each; axes an attribute before the opset where they became an input) and ArgMax/ArgMin.
#include <cmath>

#include "importer.h"

namespace rlx::onnx::detail {

namespace {

using Reduce = Value (*)(Graph&, Value x, const std::vector<int64_t>& axes, bool keepdims);

Value reduce_mean(Graph& g, Value x, const std::vector<int64_t>& axes, bool keepdims) {
  if (is_float(g.dtype(x))) return g.reduce_mean(x, axes, keepdims);
  // Integers: the mean in f64, truncated back (numpy's mean then astype, as onnx's reference).
  return g.convert(g.reduce_mean(g.convert(x, DType::f64), axes, keepdims), g.dtype(x));
}

// log(sum(exp(x))) computed as m + log(sum(exp(x - m))) with m the max (0 where it is not
// finite, so all -inf rows give -inf and +inf rows +inf).
Value reduce_log_sum_exp(Graph& g, Value x, const std::vector<int64_t>& axes, bool keepdims) {
  Value m = g.reduce_max(x, axes, true);
  Value finite = g.eq(g.sub(m, m), g.scalar(0, g.dtype(x)));
  m = g.select(finite, m, g.scalar(0, g.dtype(x)));
  Value s = g.log(g.reduce_sum(g.exp(g.sub(x, m)), axes, true));
  Value out = g.add(s, m);
  if (keepdims) return out;
  return g.squeeze(out, axes);
}

Value bool_safe(Graph& g, Value x, Value (Graph::*op)(Value, std::vector<int64_t>, bool),
                const std::vector<int64_t>& axes, bool keepdims) {
  if (g.dtype(x) != DType::bool_) return (g.*op)(x, axes, keepdims);
  return g.convert((g.*op)(g.convert(x, DType::u8), axes, keepdims), DType::bool_);
}

struct ReduceRow {
  const char* name;
  int64_t axes_input_since;  ///< opset from which axes is an input instead of an attribute
  Reduce fn;
};

const ReduceRow kReduce[] = {
    {"ReduceSum", 13,
     [](Graph& g, Value x, const auto& a, bool k) { return g.reduce_sum(x, a, k); }},
    {"ReduceMean", 18, reduce_mean},
    {"ReduceMax", 18,
     [](Graph& g, Value x, const auto& a, bool k) {
       return bool_safe(g, x, &Graph::reduce_max, a, k);
     }},
    {"ReduceMin", 18,
     [](Graph& g, Value x, const auto& a, bool k) {
       return bool_safe(g, x, &Graph::reduce_min, a, k);
     }},
    {"ReduceProd", 18,
     [](Graph& g, Value x, const auto& a, bool k) { return g.reduce_prod(x, a, k); }},
    {"ReduceL1", 18,
     [](Graph& g, Value x, const auto& a, bool k) { return g.reduce_sum(g.abs(x), a, k); }},
    {"ReduceL2", 18,
     [](Graph& g, Value x, const auto& a, bool k) {
       if (!is_float(g.dtype(x)))  // integer L2: sqrt in f64, truncated back
         return g.convert(g.sqrt(g.reduce_sum(g.convert(g.mul(x, x), DType::f64), a, k)),
                          g.dtype(x));
       return g.sqrt(g.reduce_sum(g.mul(x, x), a, k));
     }},
    {"ReduceSumSquare", 18,
     [](Graph& g, Value x, const auto& a, bool k) { return g.reduce_sum(g.mul(x, x), a, k); }},
    {"ReduceLogSum", 18,
     [](Graph& g, Value x, const auto& a, bool k) { return g.log(g.reduce_sum(x, a, k)); }},
    {"ReduceLogSumExp", 18, reduce_log_sum_exp},
};

void convert_reduce(NodeContext& c, const ReduceRow& row) {
  Value x = c.input(0);
  const int64_t rank = c.g.shape(x).rank();
  std::vector<int64_t> axes;
  if (c.opset < row.axes_input_since)
    axes = c.attr_ints("axes");
  else if (c.has_input(1))
    axes = c.static_ints(1, "axes");
  const bool keepdims = c.attr_int("keepdims", 1) != 0;
  if (axes.empty()) {
    if (c.attr_int("noop_with_empty_axes", 0) != 0) {
      // No reduction: the reduction of each single element (x for sum/max/..., |x| for L1,
      // x^2 for SumSquare, ...), as onnx's reference computes it.
      return c.set_output(0, row.fn(c.g, x, {}, true));
    }
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  for (int64_t& a : axes) a = c.axis(a, rank);
  c.set_output(0, row.fn(c.g, x, axes, keepdims));
}

void convert_arg(NodeContext& c, bool max) {
  Graph& g = c.g;
  Value x = c.input(0);
  const Shape& s = g.shape(x);
  const int64_t axis = c.axis(c.attr_int("axis", 0), s.rank());
  const bool keepdims = c.attr_int("keepdims", 1) != 0;
  if (c.attr_int("select_last_index", 0) != 0) {
    // The last extremum = n - 1 - the first one of the reversed axis.
    Value r = g.reverse(x, {axis});
    Value i =
        max ? g.argmax(r, axis, keepdims, DType::i64) : g.argmin(r, axis, keepdims, DType::i64);
    return c.set_output(
        0, g.sub(g.scalar(static_cast<double>(s[static_cast<int>(axis)] - 1), DType::i64), i));
  }
  c.set_output(
      0, max ? g.argmax(x, axis, keepdims, DType::i64) : g.argmin(x, axis, keepdims, DType::i64));
}

}  // namespace

void add_reduce_converters(ConverterTable& t) {
  for (const ReduceRow& row : kReduce)
    t[{"", row.name}] = [&row](NodeContext& c) { convert_reduce(c, row); };
  t[{"", "ArgMax"}] = [](NodeContext& c) { convert_arg(c, true); };
  t[{"", "ArgMin"}] = [](NodeContext& c) { convert_arg(c, false); };
}

}  // namespace rlx::onnx::detail
