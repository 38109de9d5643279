// Control flow: If, Loop and Scan onto the IR's cond, while_loop and scan (docs/ir.md
// "Regions"). Subgraphs become self-contained bodies (NodeContext::convert_region): the
// enclosing values they read are captured operands, or constants when known at import time.
// An If whose condition is known at import time is replaced by its taken branch, inlined.
#include <algorithm>
#include <cstdint>

#include "importer.h"
#include "rlx/opt/decompose.h"

namespace rlx::onnx::detail {

namespace {

using Region = NodeContext::Region;

// `v` (a one-element bool tensor, shape [] or [1]) as the bool[] scalar cond and while_loop
// take; fails naming `what` otherwise.
Value as_pred(const NodeContext& c, Graph& g, Value v, const std::string& what) {
  const TensorType& t = g.type(v);
  c.require(t.dtype == DType::bool_ && t.shape.numel() == 1,
            what + " must hold one bool, got " + t.to_string());
  return t.shape.rank() == 0 ? v : g.reshape(v, {});
}

// Fails unless the body's outputs from `first` on have the types `expected` (loop-carried
// values and scan states keep their types across iterations in rlx).
void require_carry_types(const NodeContext& c, const Region& r, size_t first,
                         const std::vector<TensorType>& expected) {
  for (size_t k = 0; k < expected.size(); ++k) {
    const TensorType& got = r.graph.type(r.graph.outputs()[first + k]);
    c.require(got == expected[k],
              "the body returns " + got.to_string() + " for state " + std::to_string(k) +
                  ", whose initial value is " + expected[k].to_string() +
                  "; rlx's loops need every state to keep its type across iterations");
  }
}

// The body's input nodes, except the one at index `skip` (none: SIZE_MAX), mirrored as inputs of
// `w` (same types and order; names made unique in `w`).
std::vector<Value> mirror_inputs(Graph& w, const Graph& body, size_t skip) {
  std::vector<Value> out;
  const std::vector<int32_t> ids = body.inputs();
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k == skip) continue;
    const Node& n = body.node(ids[k]);
    std::string name = n.name;
    for (int i = 1; w.find(name) >= 0; ++i) name = n.name + "_" + std::to_string(i);
    out.push_back(w.input(name, n.results[0].dtype, n.results[0].shape));
  }
  return out;
}

Value bool_true(Graph& w) { return w.constant(Tensor::full(DType::bool_, Shape{}, 1)); }

void convert_if(NodeContext& c) {
  if (std::optional<Tensor> cond = c.static_input(0)) {
    // Known at import time (shapes, constants, inputs bound by value): the taken branch.
    c.require(cond->numel() == 1,
              "the condition must hold one element, got shape " + cond->shape().to_string());
    const bool taken = cond->get_f64(0) != 0;
    std::vector<Value> outs = c.inline_subgraph(taken ? "then_branch" : "else_branch");
    c.require(static_cast<int>(outs.size()) == c.num_outputs(),
              std::string(taken ? "then_branch" : "else_branch") + " has " +
                  std::to_string(outs.size()) + " output(s), the node " +
                  std::to_string(c.num_outputs()));
    for (int i = 0; i < c.num_outputs(); ++i) c.set_output(i, outs[static_cast<size_t>(i)]);
    return;
  }
  Value pred = as_pred(c, c.g, c.input(0), "the condition");
  std::vector<std::string> free = c.free_values("then_branch");
  for (const std::string& name : c.free_values("else_branch"))
    if (std::find(free.begin(), free.end(), name) == free.end()) free.push_back(name);
  std::vector<Value> outs;
  try {
    Region then_r = c.convert_region("then_branch", free, {});
    Region else_r = c.convert_region("else_branch", free, {});
    for (const auto* r : {&then_r, &else_r})
      c.require(static_cast<int>(r->graph.outputs().size()) == c.num_outputs(),
                std::string(r == &then_r ? "then_branch" : "else_branch") + " has " +
                    std::to_string(r->graph.outputs().size()) + " output(s), the node " +
                    std::to_string(c.num_outputs()));
    for (int i = 0; i < c.num_outputs(); ++i) {
      const TensorType& t = then_r.graph.type(then_r.graph.outputs()[static_cast<size_t>(i)]);
      const TensorType& e = else_r.graph.type(else_r.graph.outputs()[static_cast<size_t>(i)]);
      c.require(t == e, "output " + std::to_string(i) + " is " + t.to_string() +
                            " in then_branch but " + e.to_string() +
                            " in else_branch; rlx's cond needs both branches to return the same "
                            "types (shapes that depend on the branch taken are not supported)");
    }
    outs = c.g.cond(pred, std::move(then_r.graph), std::move(else_r.graph), then_r.captures);
  } catch (const InputValuesRequired&) {
    throw;
  } catch (const Error& e) {
    // The branches do not make a cond (different output types, a shape that must be known at
    // import time): folding still works when the condition comes from small graph inputs the
    // session can bind by value (required_static throws InputValuesRequired then).
    std::string inner = e.what();  // without the file name (and this node's name)
    size_t at = inner.find(c.where() + ": ");
    if (at != std::string::npos)
      inner = inner.substr(at + c.where().size() + 2);
    else if ((at = inner.find(": node '")) != std::string::npos)
      inner = inner.substr(at + 2);
    const std::string why = "the branches cannot make a cond (" + inner + ")";
    try {
      (void)c.required_static(0, "cond", why.c_str());
    } catch (const InputValuesRequired&) {
      throw;
    } catch (const Error&) {
    }
    throw;
  }
  for (int i = 0; i < c.num_outputs(); ++i) c.set_output(i, outs[static_cast<size_t>(i)]);
}

// Loop(M, cond, v_initial...) with body (iteration_num, cond_in, v...) -> (cond_out, v...,
// scan_outputs...). An absent cond is true, and the body's cond_out is honoured either way (as
// onnxruntime does; the spec calls it ignored without cond). With a trip count known at import
// time (0 when cond is known false; M when M is known and cond known true, with a body that
// passes it through or returns a constant true), a scan of that length whose carry holds the
// iteration counter; the scan outputs are its ys. Otherwise a while_loop whose carry holds the
// counter, the condition and v; M bounds it (max_trip_count when known, else a comparison in
// cond_fun). Scan outputs then have a length known only at run time: an error.
void convert_loop(NodeContext& c) {
  Graph& g = c.g;
  c.require(c.num_inputs() >= 2, "needs inputs M and cond (either may be empty)");
  const int n_carried = c.num_inputs() - 2;
  const int n_scan = c.num_outputs() - n_carried;
  c.require(n_scan >= 0, "has " + std::to_string(c.num_outputs()) + " output(s) for " +
                             std::to_string(n_carried) + " loop-carried value(s)");
  std::vector<Value> init;
  std::vector<TensorType> carried_types;
  for (int k = 0; k < n_carried; ++k) {
    init.push_back(c.input(2 + k));
    carried_types.push_back(g.type(init.back()));
  }
  std::optional<Value> m;
  if (c.has_input(0)) {
    const TensorType& t = g.type(c.input(0));
    c.require(t.dtype == DType::i64 && t.shape.numel() == 1,
              "M must hold one int64, got " + t.to_string());
    m = t.shape.rank() == 0 ? c.input(0) : g.reshape(c.input(0), {});
  }
  const Value cond = c.has_input(1) ? as_pred(c, g, c.input(1), "cond") : bool_true(g);

  std::vector<TensorType> formals{{DType::i64, Shape{}}, {DType::bool_, Shape{}}};
  formals.insert(formals.end(), carried_types.begin(), carried_types.end());
  Region body = c.convert_region("body", c.free_values("body"), formals);
  const std::vector<Value>& bouts = body.graph.outputs();
  c.require(static_cast<int>(bouts.size()) == 1 + n_carried + n_scan,
            "the body has " + std::to_string(bouts.size()) + " output(s), the node needs 1 + " +
                std::to_string(n_carried) + " + " + std::to_string(n_scan));
  const TensorType& cond_out_type = body.graph.type(bouts[0]);
  c.require(cond_out_type.dtype == DType::bool_ && cond_out_type.shape.numel() == 1,
            "the body's condition output must hold one bool, got " + cond_out_type.to_string());
  require_carry_types(c, body, 1, carried_types);
  const size_t ncap = body.captures.size();
  const Value cond_in{body.graph.inputs()[ncap + 1], 0};

  // The loop runs exactly M times when cond is known true and the body cannot turn it false.
  const Node& cond_out = body.graph.node(bouts[0]);
  const bool passes_cond =
      bouts[0] == cond_in ||
      (cond_out.op == OpKind::Constant && cond_out.attrs.get_tensor("value").get_f64(0) != 0);
  const std::optional<Tensor> m_known = c.static_input(0);
  const std::optional<Tensor> cond_known =
      c.has_input(1) ? c.static_input(1) : std::optional(Tensor::full(DType::bool_, Shape{}, 1));
  std::optional<int64_t> trips;
  if (cond_known && cond_known->get_f64(0) == 0)
    trips = 0;
  else if (m_known && cond_known && passes_cond)
    trips = std::max<int64_t>(0, m_known->get_i64(0));
  if (n_scan > 0 && !trips) {
    const char* why =
        "the scan outputs stack one row per iteration, so rlx needs the trip count at import "
        "time (static shapes): M known, and cond absent or known true and passed through by "
        "the body";
    c.require(passes_cond,
              "has scan outputs and a condition the body computes per iteration, so the "
              "number of rows of the scan outputs is only known at run time; rlx needs static "
              "shapes (scan outputs are supported with a trip count known at import time)");
    c.require(m.has_value(), "has scan outputs but no M: their length is only known at run time");
    (void)c.required_static(0, "M", why);
    if (c.has_input(1)) (void)c.required_static(1, "cond", why);
    c.fail(why);  // not reached: one of them was unknown
  }

  std::vector<Value> results;  // the loop-carried values, then the scan outputs
  if (trips) {
    // scan over `trips` steps, body (captures, i, v...) -> (i + 1, v'..., scan outputs...);
    // cond_in is true on every step.
    Graph step("loop_step");
    const std::vector<Value> in = mirror_inputs(step, body.graph, ncap + 1);
    std::vector<Value> args = in;
    args.insert(args.begin() + static_cast<std::ptrdiff_t>(ncap) + 1, bool_true(step));
    const std::vector<Value> r = inline_graph(step, body.graph, args);
    std::vector<Value> outs{step.add(in[ncap], step.scalar(1, DType::i64))};
    outs.insert(outs.end(), r.begin() + 1, r.end());
    step.set_outputs(outs);
    std::vector<Value> carry{g.scalar(0, DType::i64)};
    carry.insert(carry.end(), init.begin(), init.end());
    ScanOptions o;
    o.length = *trips;
    std::vector<Value> res = g.scan(std::move(step), carry, {}, body.captures, o);
    results.assign(res.begin() + 1, res.end());
  } else {
    // while_loop: consts (M when only known at run time, captures...), carry (i, cond, v...);
    // cond_fun: cond && i < M; body_fun: (i + 1, cond_out, v'...).
    const bool m_operand = m && !m_known;
    Graph cond_g("loop_cond");
    Graph body_g("loop_body");
    std::optional<Value> m_in;
    if (m_operand) m_in = cond_g.input("M", DType::i64, Shape{});
    std::vector<Value> in = mirror_inputs(cond_g, body.graph, SIZE_MAX);
    Value pred = in[ncap + 1];
    if (m_in) pred = cond_g.logical_and(pred, cond_g.lt(in[ncap], *m_in));
    cond_g.set_outputs({pred});

    if (m_operand) (void)body_g.input("M", DType::i64, Shape{});
    in = mirror_inputs(body_g, body.graph, SIZE_MAX);
    const std::vector<Value> r = inline_graph(body_g, body.graph, in);
    std::vector<Value> outs{body_g.add(in[ncap], body_g.scalar(1, DType::i64))};
    outs.push_back(body_g.type(r[0]).shape.rank() == 0 ? r[0] : body_g.reshape(r[0], {}));
    outs.insert(outs.end(), r.begin() + 1, r.end());
    body_g.set_outputs(outs);

    std::vector<Value> carry{g.scalar(0, DType::i64)};
    carry.push_back(cond);
    carry.insert(carry.end(), init.begin(), init.end());
    std::vector<Value> consts;
    if (m_operand) consts.push_back(*m);
    consts.insert(consts.end(), body.captures.begin(), body.captures.end());
    std::optional<int64_t> max_trips;
    if (m_known) max_trips = std::max<int64_t>(0, m_known->get_i64(0));
    std::vector<Value> res =
        g.while_loop(std::move(cond_g), std::move(body_g), carry, consts, max_trips);
    results.assign(res.begin() + 2, res.end());
  }
  for (int i = 0; i < c.num_outputs(); ++i) c.set_output(i, results[static_cast<size_t>(i)]);
}

// Scan: states then num_scan_inputs scan inputs; body (states..., slices...) -> (states...,
// scan output elements...). Opset 9+: scan inputs move their scan axis to the front (a
// transpose) and are reversed for direction 1; the stacked outputs are reversed for direction
// 1 and moved to their scan_output_axes. Opset 8: every input has a leading batch axis (scan
// axis 1) and an optional first input sequence_lens (each must be the full length): one scan
// per batch row, the results stacked along the batch axis again.
void convert_scan(NodeContext& c) {
  Graph& g = c.g;
  const bool batched = c.opset < 9;
  const int first = batched ? 1 : 0;
  const int64_t n_in = c.attr_int("num_scan_inputs", -1);
  c.require(n_in >= 1 && n_in <= c.num_inputs() - first,
            "num_scan_inputs must be in [1, " + std::to_string(c.num_inputs() - first) + "], got " +
                std::to_string(n_in));
  const int n_state = c.num_inputs() - first - static_cast<int>(n_in);
  const int n_out = c.num_outputs() - n_state;
  c.require(n_out >= 0, "has " + std::to_string(c.num_outputs()) + " output(s) for " +
                            std::to_string(n_state) + " state(s)");
  auto per = [&](const char* attr, int count) {
    std::vector<int64_t> v = c.attr_ints(attr, std::vector<int64_t>(static_cast<size_t>(count)));
    c.require(static_cast<int>(v.size()) == count,
              std::string(attr) + " has " + std::to_string(v.size()) + " entries, expected " +
                  std::to_string(count));
    return v;
  };
  const int n_x = static_cast<int>(n_in);
  const std::vector<int64_t> zeros_in(static_cast<size_t>(n_x)),
      zeros_out(static_cast<size_t>(n_out));
  const std::vector<int64_t> in_axes = batched ? zeros_in : per("scan_input_axes", n_x);
  const std::vector<int64_t> in_dirs = per(batched ? "directions" : "scan_input_directions", n_x);
  const std::vector<int64_t> out_axes = batched ? zeros_out : per("scan_output_axes", n_out);
  const std::vector<int64_t> out_dirs = batched ? zeros_out : per("scan_output_directions", n_out);

  // Row b of every input (opset 8), else the inputs themselves.
  int64_t rows = 1;
  if (batched) {
    rows = c.input_shape(first).rank() > 0 ? c.input_shape(first)[0] : 0;
    for (int k = first; k < c.num_inputs(); ++k)
      c.require(c.input_shape(k).rank() >= 1 && c.input_shape(k)[0] == rows,
                "input " + std::to_string(k) + " is " + g.type(c.input(k)).to_string() +
                    "; every input has the batch axis first, of size " + std::to_string(rows));
  }
  auto row = [&](Value v, int64_t b) {
    if (!batched) return v;
    const Shape& s = g.shape(v);
    std::vector<int64_t> start(static_cast<size_t>(s.rank())), limit = s.dims();
    start[0] = b;
    limit[0] = b + 1;
    return g.reshape(g.slice(v, start, limit),
                     std::vector<int64_t>(s.dims().begin() + 1, s.dims().end()));
  };
  // Scan input k of row b with its scan axis first, in visiting order.
  auto scan_input = [&](int k, int64_t b) {
    Value x = row(c.input(first + n_state + k), b);
    const int64_t rank = g.shape(x).rank();
    c.require(rank >= 1, "scan input " + std::to_string(k) + " has no scan axis");
    const int64_t a = c.axis(in_axes[static_cast<size_t>(k)], rank, "scan_input_axes entry");
    if (a != 0) {
      std::vector<int64_t> perm{a};
      for (int64_t d = 0; d < rank; ++d)
        if (d != a) perm.push_back(d);
      x = g.transpose(x, perm);
    }
    return in_dirs[static_cast<size_t>(k)] != 0 ? g.reverse(x, {0}) : x;
  };

  std::vector<TensorType> state_types;
  for (int k = 0; k < n_state; ++k) state_types.push_back(g.type(row(c.input(first + k), 0)));
  std::vector<TensorType> formals = state_types;
  int64_t length = -1;
  for (int k = 0; k < n_x; ++k) {
    const Shape s = g.shape(scan_input(k, 0));
    c.require(length < 0 || s[0] == length,
              "scan input " + std::to_string(k) + " has " + std::to_string(s[0]) +
                  " steps along its scan axis, scan input 0 " + std::to_string(length));
    length = s[0];
    formals.push_back({g.type(c.input(first + n_state + k)).dtype,
                       Shape(std::vector<int64_t>(s.dims().begin() + 1, s.dims().end()))});
  }
  if (batched && c.has_input(0))
    for (int64_t len : c.static_ints(0, "sequence_lens"))
      c.require(len == length, "sequence_lens holds " + std::to_string(len) +
                                   "; only full-length sequences (" + std::to_string(length) +
                                   ") are supported");
  const Region body = c.convert_region("body", c.free_values("body"), formals);
  c.require(static_cast<int>(body.graph.outputs().size()) == n_state + n_out,
            "the body has " + std::to_string(body.graph.outputs().size()) +
                " output(s), the node needs " + std::to_string(n_state + n_out));
  require_carry_types(c, body, 0, state_types);

  // Per row: (final states..., ys stacked on axis 0 in visiting order...).
  std::vector<std::vector<Value>> per_row;
  for (int64_t b = 0; b < rows; ++b) {
    std::vector<Value> states, xs;
    for (int k = 0; k < n_state; ++k) states.push_back(row(c.input(first + k), b));
    for (int k = 0; k < n_x; ++k) xs.push_back(scan_input(k, b));
    ScanOptions o;
    o.length = length;
    per_row.push_back(g.scan(body.graph, states, xs, body.captures, o));
  }
  for (int i = 0; i < n_state + n_out; ++i) {
    Value y;
    if (batched) {
      std::vector<Value> parts;
      for (const auto& r : per_row) parts.push_back(g.expand_dims(r[static_cast<size_t>(i)], {0}));
      y = parts.empty() ? Value{} : g.concatenate(parts, 0);
      c.require(y.valid(), "has an empty batch");
    } else {
      y = per_row[0][static_cast<size_t>(i)];
    }
    const int j = i - n_state;
    if (j >= 0) {
      if (out_dirs[static_cast<size_t>(j)] != 0) y = g.reverse(y, {0});
      const int64_t rank = g.shape(y).rank();
      const int64_t a = c.axis(out_axes[static_cast<size_t>(j)], rank, "scan_output_axes entry");
      if (a != 0) {
        std::vector<int64_t> perm;
        for (int64_t d = 1; d <= a; ++d) perm.push_back(d);
        perm.push_back(0);
        for (int64_t d = a + 1; d < rank; ++d) perm.push_back(d);
        y = g.transpose(y, perm);
      }
    }
    c.set_output(i, y);
  }
}

}  // namespace

void add_control_converters(ConverterTable& t) {
  t[{"", "If"}] = convert_if;
  t[{"", "Loop"}] = convert_loop;
  t[{"", "Scan"}] = convert_scan;
}

}  // namespace rlx::onnx::detail
