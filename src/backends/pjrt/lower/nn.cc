// StableHLO lowerings of the nn ops lowered natively: conv (stablehlo.convolution) and top_k
// (a stable two-operand sort, then a slice); the other nn ops are composites that
// legalization decomposes.
#include "lower.h"

namespace rlx::pjrt::lower {
namespace {

// lax.conv_general_dilated in PyTorch layout (NC[H]W x OI[H]W -> NC[H]W).
std::vector<std::string> conv(Emitter& e, const Node& n) {
  Operand x = e.operand(n, 0), w = e.operand(n, 1);
  size_t spatial = static_cast<size_t>(x.type.shape.rank() - 2);
  auto list = [&](const char* name, int64_t fill) {  // [] means `fill` in every spatial dim
    std::vector<int64_t> v = n.attrs.get_ints(name);
    if (v.empty()) v.assign(spatial, fill);
    return v;
  };
  std::vector<int64_t> lo = list("pad_low", 0), hi = list("pad_high", 0);
  std::string layout, padding = "dense<[";
  for (size_t d = 0; d < spatial; ++d) {
    layout += ", " + std::to_string(d);
    padding += (d ? ", [" : "[") + std::to_string(lo[d]) + ", " + std::to_string(hi[d]) + "]";
  }
  padding += "]> : tensor<" + std::to_string(spatial) + "x2xi64>";
  return {e.emit("stablehlo.convolution", {x, w},
                 "dimension_numbers = #stablehlo.conv<[b, f" + layout + "]x[o, i" + layout +
                     "]->[b, f" + layout + "]>, window_strides = " + i64_array(list("strides", 1)) +
                     ", padding = " + padding +
                     ", lhs_dilation = " + i64_array(std::vector<int64_t>(spatial, 1)) +
                     ", rhs_dilation = " + i64_array(list("dilation", 1)) +
                     ", feature_group_count = " + std::to_string(n.attrs.get_int("groups")) +
                     " : i64, batch_group_count = 1 : i64",
                 n.results[0])};
}

// lax.top_k: a stable two-operand sort of (value, iota index) along the last dim, descending
// in rlx's order (src/ir/eval/reduce.cc): every NaN above +inf, then IEEE total order, so +0
// above -0; ties go to the lower index. Then the first k of both. a sorts before b when a
// ranks above b, or neither ranks above the other and a's index is lower.
std::vector<std::string> top_k(Emitter& e, const Node& n) {
  Operand x = e.operand(n, 0);
  DType vt = x.type.dtype, it = n.results[1].dtype;
  int last = x.type.shape.rank() - 1;
  TensorType idx_t{it, x.type.shape};
  std::string idx =
      e.emit("stablehlo.iota", {}, "iota_dimension = " + std::to_string(last) + " : i64", idx_t);
  RegionCode r("%cmp" + std::to_string(e.next_number()) + "_");
  std::string sv = tensor_type(vt, Shape{}), si = tensor_type(it, Shape{});
  std::string a = r.arg("a"), b = r.arg("b"), ia = r.arg("ia"), ib = r.arg("ib");
  auto above = [&](const std::string& p, const std::string& q) {
    if (!is_float(vt)) return r.cmp(p, q, "GT", vt);
    // NaN vs anything: p wins iff only p is NaN; otherwise the IEEE total order.
    std::string p_nan = r.cmp(p, p, "NE", vt), q_nan = r.cmp(q, q, "NE", vt);
    std::string nan_wins = r.logic("stablehlo.and", p_nan, r.negate(q_nan));
    std::string numbers = r.negate(r.logic("stablehlo.or", p_nan, q_nan));
    std::string total = r.cmp(p, q, "GT", vt, "TOTALORDER");
    return r.logic("stablehlo.or", nan_wins, r.logic("stablehlo.and", numbers, total));
  };
  std::string a_above = above(a, b), b_above = above(b, a);
  std::string tie = r.negate(r.logic("stablehlo.or", a_above, b_above));
  std::string first =
      r.logic("stablehlo.or", a_above, r.logic("stablehlo.and", tie, r.cmp(ia, ib, "LT", it)));
  std::string name = e.fresh();
  e.body() << "    " << name << ":2 = \"stablehlo.sort\"(" << x.name << ", " << idx
           << ") ({\n    ^bb0(" << a << ": " << sv << ", " << b << ": " << sv << ", " << ia << ": "
           << si << ", " << ib << ": " << si << "):\n"
           << r.code() << "      \"stablehlo.return\"(" << first
           << ") : (tensor<i1>) -> ()\n    }) {dimension = " << last
           << " : i64, is_stable = true} : (" << tensor_type(x.type) << ", " << tensor_type(idx_t)
           << ") -> (" << tensor_type(x.type) << ", " << tensor_type(idx_t) << ")\n";
  std::vector<int64_t> start(static_cast<size_t>(last + 1), 0), limit = x.type.shape.dims(),
                                                                strides(start.size(), 1);
  limit.back() = n.results[0].shape.dims().back();
  std::string window = "start_indices = " + i64_array(start) +
                       ", limit_indices = " + i64_array(limit) +
                       ", strides = " + i64_array(strides);
  return {e.emit("stablehlo.slice", {{name + "#0", x.type}}, window, n.results[0]),
          e.emit("stablehlo.slice", {{name + "#1", idx_t}}, window, n.results[1])};
}

}  // namespace

void register_nn_lowerings(OpTable<LowerFn>& t) {
  t.set(OpKind::Conv, conv);
  t.set(OpKind::TopK, top_k);
}

}  // namespace rlx::pjrt::lower
