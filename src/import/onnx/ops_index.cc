// ONNX indexing ops: Gather, GatherElements, GatherND, ScatterElements, ScatterND, OneHot,
// TopK, CumSum, NonZero and Compress (the last two only on values known at import time: their
// output shape depends on the data). Negative indices count from the end, as ONNX specifies;
// rlx's gather clamps what remains out of range.
#include <algorithm>

#include "importer.h"

namespace rlx::onnx::detail {

namespace {

// idx < 0 ? idx + n : idx, as i64.
Value wrap_negative(Graph& g, Value idx, Value n) {
  idx = g.convert(idx, DType::i64);
  return g.select(g.lt(idx, g.scalar(0, DType::i64)), g.add(idx, n), idx);
}
Value wrap_negative(Graph& g, Value idx, int64_t n) {
  return wrap_negative(g, idx, g.scalar(static_cast<double>(n), DType::i64));
}

void convert_gather(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  const Shape& s = g.shape(x);
  const int64_t axis = c.axis(c.attr_int("axis", 0), s.rank());
  const int64_t n = s[static_cast<int>(axis)];
  Value idx;
  if (std::optional<Tensor> t = c.static_input(1)) {  // checked and wrapped at import time
    Tensor w(DType::i64, t->shape());
    for (int64_t i = 0; i < t->numel(); ++i) {
      int64_t v = t->get_i64(i);
      c.require(v >= -n && v < n, "index " + std::to_string(v) +
                                      " is out of range for an axis of " + std::to_string(n));
      w.set_i64(i, v < 0 ? v + n : v);
    }
    idx = g.constant(w);
  } else {
    idx = wrap_negative(g, c.input(1), n);
  }
  c.set_output(0, g.gather(x, idx, axis));
}

void convert_gather_elements(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0), idx = c.input(1);
  const Shape& s = g.shape(x);
  const Shape is = g.shape(idx);
  c.require(is.rank() == s.rank(), "indices must have the data's rank");
  const int64_t axis = c.axis(c.attr_int("axis", 0), s.rank());
  // Other dims of the indices may be smaller than the data's: take that corner of the data.
  std::vector<int64_t> limit = s.dims();
  for (int i = 0; i < s.rank(); ++i)
    if (i != axis) {
      c.require(is[i] <= s[i], "indices dim " + std::to_string(i) + " exceeds the data's");
      limit[static_cast<size_t>(i)] = is[i];
    }
  if (limit != s.dims()) x = g.slice(x, std::vector<int64_t>(limit.size(), 0), limit);
  idx = wrap_negative(g, idx, s[static_cast<int>(axis)]);
  c.set_output(0, g.take_along_axis(x, idx, axis));
}

// The flat row index into dims `d` (row-major) of each index tuple idx[..., k] (negative
// entries wrapped per dim), plus `batch` * prod(d) for batched forms.
Value linear_index(Graph& g, Value idx, const std::vector<int64_t>& d) {
  const auto k = static_cast<int64_t>(d.size());
  std::vector<int64_t> strides(d.size(), 1);
  for (int64_t j = k - 2; j >= 0; --j)
    strides[static_cast<size_t>(j)] =
        strides[static_cast<size_t>(j + 1)] * d[static_cast<size_t>(j + 1)];
  Value dims = g.constant(Tensor::from_ints(DType::i64, Shape{k}, d));
  Value st = g.constant(Tensor::from_ints(DType::i64, Shape{k}, strides));
  idx = wrap_negative(g, idx, dims);
  return g.reduce_sum(g.mul(idx, st), {-1});
}

void convert_gather_nd(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0), idx = c.input(1);
  const Shape& s = g.shape(x);
  const Shape is = g.shape(idx);
  const int64_t b = c.attr_int("batch_dims", 0), q = is.rank();
  c.require(q >= 1 && b >= 0 && b < q && b <= s.rank(), "invalid batch_dims or indices rank");
  const int64_t k = is[static_cast<int>(q - 1)];
  c.require(b + k <= s.rank(), "index tuples are longer than the data's rank");
  int64_t batch = 1, block = 1;
  std::vector<int64_t> d, flat_shape;
  for (int64_t i = 0; i < b; ++i) batch *= s[static_cast<int>(i)];
  for (int64_t i = b; i < b + k; ++i) {
    d.push_back(s[static_cast<int>(i)]);
    block *= s[static_cast<int>(i)];
  }
  flat_shape.push_back(batch * block);
  for (int64_t i = b + k; i < s.rank(); ++i) flat_shape.push_back(s[static_cast<int>(i)]);
  Value lin = k == 0 ? g.convert(g.reduce_sum(g.convert(idx, DType::i64), {-1}), DType::i64)
                     : linear_index(g, idx, d);
  if (b > 0) {  // + the batch's row: its flat batch index times the block size
    std::vector<int64_t> bshape(is.dims().begin(), is.dims().end() - 1);
    Value row = g.iota(DType::i64, Shape{batch}, 0);
    std::vector<int64_t> bdims(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) bdims[static_cast<size_t>(i)] = i;
    std::vector<int64_t> batch_dims(is.dims().begin(), is.dims().begin() + b);
    row = g.reshape(row, batch_dims);
    row = g.broadcast_in_dim(row, bshape, bdims);
    lin = g.add(lin, g.mul(row, g.scalar(static_cast<double>(block), DType::i64)));
  }
  c.set_output(0, g.gather(g.reshape(x, flat_shape), lin, 0));
}

// Scatter `updates` ([M, rest...]) into rows `lin` ([M]) of `flat` ([P, rest...]): reduction
// "none" replaces the rows (a duplicate index sums its updates), "add" adds to them, "mul" /
// "max" / "min" combine (indices known at import time).
Value scatter_rows(NodeContext& c, Value flat, Value lin, Value updates) {
  Graph& g = c.g;
  std::string reduction = c.attr_string("reduction", "none");
  c.require(reduction == "none" || reduction == "add" || reduction == "mul" || reduction == "max" ||
                reduction == "min",
            "reduction '" + reduction + "' is not one of none, add, mul, max, min");
  c.require(g.dtype(flat) != DType::bool_, "bool data is not supported");
  updates = g.convert(updates, g.dtype(flat));
  if (reduction == "add") return g.scatter_add(flat, lin, updates, 0);
  if (reduction != "none") {
    // mul / max / min (rlx has scatter_add only): with the target rows known at import time,
    // the k-th update of every row is gathered into a [P, ...] tensor per level k and combined
    // with the rows it hits, level by level (the spec's order for duplicates).
    (void)c.required_static(1, "indices (for reduction mul / max / min)");
    std::optional<Tensor> rows = c.static_value(lin);
    c.require(rows.has_value(), "the indices must be known at import time");
    const Shape& fs = g.shape(flat);
    const int64_t p = fs[0], m = rows->numel();
    std::vector<std::vector<int64_t>> src;  // src[k][row]: the update, or -1
    std::vector<int64_t> seen(static_cast<size_t>(p), 0);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t r = rows->get_i64(i);
      c.require(r >= 0 && r < p, "index out of range");
      const auto level = static_cast<size_t>(seen[static_cast<size_t>(r)]++);
      if (src.size() <= level) src.emplace_back(static_cast<size_t>(p), -1);
      src[level][static_cast<size_t>(r)] = i;
    }
    Value out = flat;
    for (const std::vector<int64_t>& level : src) {
      std::vector<int64_t> from(level.size());
      Tensor hit(DType::bool_, Shape{p});
      for (size_t r = 0; r < level.size(); ++r) {
        from[r] = std::max<int64_t>(level[r], 0);
        hit.set_i64(static_cast<int64_t>(r), level[r] >= 0);
      }
      Value upd = g.gather(updates, c.ints(from), 0);
      Value combined = reduction == "mul"   ? g.mul(out, upd)
                       : reduction == "max" ? g.max(out, upd)
                                            : g.min(out, upd);
      out = g.select(g.broadcast_in_dim(g.constant(hit), fs.dims(), {0}), combined, out);
    }
    return out;
  }
  const Shape& fs = g.shape(flat);
  Value zeros = g.broadcast_in_dim(g.scalar(0, g.dtype(flat)), fs.dims(), {});
  Value written = g.scatter_add(zeros, lin, updates, 0);
  Value hits =
      g.scatter_add(g.broadcast_in_dim(g.scalar(0, DType::i32), {fs[0]}, {}), lin,
                    g.broadcast_in_dim(g.scalar(1, DType::i32), g.shape(lin).dims(), {}), 0);
  Value hit = g.broadcast_in_dim(g.gt(hits, g.scalar(0, DType::i32)), fs.dims(), {0});
  return g.select(hit, written, flat);
}

void convert_scatter_elements(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0), idx = c.input(1), upd = c.input(2);
  const Shape& s = g.shape(x);
  const Shape is = g.shape(idx);
  c.require(is.rank() == s.rank() && g.shape(upd) == is,
            "indices and updates must have the data's rank and one shape");
  const int64_t axis = c.axis(c.attr_int("axis", 0), s.rank());
  // Flat index of every update: its own coordinates, with the index along `axis`.
  std::vector<int64_t> strides = s.strides();
  Value lin = g.mul(wrap_negative(g, idx, s[static_cast<int>(axis)]),
                    g.scalar(static_cast<double>(strides[static_cast<size_t>(axis)]), DType::i64));
  for (int i = 0; i < s.rank(); ++i)
    if (i != axis)
      lin = g.add(
          lin, g.mul(g.iota(DType::i64, is, i),
                     g.scalar(static_cast<double>(strides[static_cast<size_t>(i)]), DType::i64)));
  const int64_t m = is.numel();
  Value out = scatter_rows(c, g.reshape(x, {s.numel()}), g.reshape(lin, {m}), g.reshape(upd, {m}));
  c.set_output(0, g.reshape(out, s.dims()));
}

void convert_scatter_nd(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0), idx = c.input(1), upd = c.input(2);
  const Shape& s = g.shape(x);
  const Shape is = g.shape(idx);
  c.require(is.rank() >= 1, "indices must have rank >= 1");
  const int64_t k = is[is.rank() - 1];
  c.require(k >= 1 && k <= s.rank(), "index tuples must have 1..rank entries");
  std::vector<int64_t> d(s.dims().begin(), s.dims().begin() + k);
  std::vector<int64_t> flat{1}, rows{1};
  for (int64_t v : d) flat[0] *= v;
  for (int i = static_cast<int>(k); i < s.rank(); ++i) flat.push_back(s[i]);
  for (int i = 0; i + 1 < is.rank(); ++i) rows[0] *= is[i];
  std::vector<int64_t> upd_shape = rows;
  upd_shape.insert(upd_shape.end(), flat.begin() + 1, flat.end());
  Value lin = g.reshape(linear_index(g, idx, d), rows);
  Value out = scatter_rows(c, g.reshape(x, flat), lin, g.reshape(upd, upd_shape));
  c.set_output(0, g.reshape(out, s.dims()));
}

void convert_one_hot(NodeContext& c) {
  Graph& g = c.g;
  Value idx = c.input(0), values = c.input(2);
  std::vector<double> depth_v = c.static_doubles(1, "depth");
  c.require(depth_v.size() == 1, "depth must be a scalar");
  const auto depth = static_cast<int64_t>(depth_v[0]);
  c.require(depth > 0, "depth must be positive");
  const Shape is = g.shape(idx);
  const int64_t axis = c.axis(c.attr_int("axis", -1), is.rank() + 1);
  // Indices may be floats (the spec casts them to integers); wrap negatives.
  Value i64 = wrap_negative(g, g.convert(idx, DType::i64), depth);
  std::vector<int64_t> out = is.dims();
  out.insert(out.begin() + axis, depth);
  Value hot = g.eq(g.expand_dims(i64, {axis}), g.iota(DType::i64, Shape(out), axis));
  Value off = g.reshape(g.slice(values, {0}, {1}), {});
  Value on = g.reshape(g.slice(values, {1}, {2}), {});
  c.set_output(0, g.select(hot, on, off));
}

void convert_top_k(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  const Shape& s = g.shape(x);
  const int64_t k = c.opset < 10 ? c.attr_int("k", 0) : c.static_ints(1, "K").at(0);
  const int64_t axis = c.axis(c.attr_int("axis", -1), s.rank());
  const bool largest = c.attr_int("largest", 1) != 0;
  c.require(k >= 0 && k <= s[static_cast<int>(axis)], "K is out of range for the axis");
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < s.rank(); ++i) perm.push_back(i);
  std::swap(perm[static_cast<size_t>(axis)], perm.back());
  const bool moved = axis != s.rank() - 1;
  Value v = moved ? g.transpose(x, perm) : x;
  if (!largest) v = g.neg(v);  // smallest first = largest of -x (ties still by lower index)
  auto [vals, idx] = g.top_k(v, k);
  if (!largest) vals = g.neg(vals);
  Value i64 = g.convert(idx, DType::i64);
  c.set_output(0, moved ? g.transpose(vals, perm) : vals);
  c.set_output(1, moved ? g.transpose(i64, perm) : i64);
}

void convert_cumsum(NodeContext& c) {
  Value x = c.input(0);
  std::vector<int64_t> a = c.static_ints(1, "axis");
  c.require(a.size() == 1, "axis must be a scalar");
  c.set_output(0, c.g.cumsum(x, c.axis(a[0], c.g.shape(x).rank()), c.attr_int("exclusive", 0) != 0,
                             c.attr_int("reverse", 0) != 0));
}

void convert_non_zero(NodeContext& c) {
  // The output shape depends on the data: only values known at import time.
  std::optional<Tensor> t = c.required_static(0, "X (NonZero's output shape depends on it)");
  const Shape& s = t->shape();
  std::vector<int64_t> strides = s.strides(), coords;
  std::vector<int64_t> hits;
  for (int64_t i = 0; i < t->numel(); ++i)
    if (t->get_f64(i) != 0) hits.push_back(i);
  const auto n = static_cast<int64_t>(hits.size());
  Tensor out(DType::i64, Shape{s.rank(), n});
  for (int64_t j = 0; j < n; ++j)
    for (int d = 0; d < s.rank(); ++d)
      out.set_i64(d * n + j, hits[static_cast<size_t>(j)] / strides[static_cast<size_t>(d)] % s[d]);
  c.set_output(0, c.g.constant(out));
}

void convert_compress(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0);
  // The output shape depends on the condition: only values known at import time.
  std::optional<Tensor> cond = c.required_static(1, "condition (the output shape depends on it)");
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < cond->numel(); ++i)
    if (cond->get_i64(i) != 0) keep.push_back(i);
  if (!c.has_attr("axis")) {
    x = g.reshape(x, {g.shape(x).numel()});
    c.set_output(0, g.gather(x, c.ints(keep), 0));
    return;
  }
  c.set_output(0, g.gather(x, c.ints(keep), c.axis(c.attr_int("axis", 0), g.shape(x).rank())));
}

}  // namespace

void add_index_converters(ConverterTable& t) {
  t[{"", "Gather"}] = convert_gather;
  t[{"", "GatherElements"}] = convert_gather_elements;
  t[{"", "GatherND"}] = convert_gather_nd;
  t[{"", "ScatterElements"}] = convert_scatter_elements;
  t[{"", "Scatter"}] = convert_scatter_elements;  // opset 9-10 name of ScatterElements
  t[{"", "ScatterND"}] = convert_scatter_nd;
  t[{"", "OneHot"}] = convert_one_hot;
  t[{"", "TopK"}] = convert_top_k;
  t[{"", "CumSum"}] = convert_cumsum;
  t[{"", "NonZero"}] = convert_non_zero;
  t[{"", "Compress"}] = convert_compress;
}

}  // namespace rlx::onnx::detail
