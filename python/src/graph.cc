// Bindings of the IR: Graph (every builder of include/rlx/ir/graph.h, plus emit() for any op of
// ops.def), Value with numpy-style operators and indexing, the op registry, and parse().
#include "rlx/ir/graph.h"

#include <pybind11/stl.h>

#include <map>
#include <sstream>

#include "bindings.h"
#include "convert.h"
#include "rlx/ir/collective.h"
#include "rlx/ir/error.h"
#include "rlx/ir/random.h"
#include "value.h"

namespace rlx::py_bind {

namespace {

using Ints = std::vector<int64_t>;

py::tuple shape_tuple(const Shape& s) {
  py::tuple t(static_cast<size_t>(s.rank()));
  for (int i = 0; i < s.rank(); ++i) t[static_cast<size_t>(i)] = s[i];
  return t;
}

// A Python operand next to value `like`: a Value of the same graph, a Python scalar (a "weak"
// scalar as in jax.numpy: it takes like's dtype, except that a float next to an integer or bool
// value is f32 and an int next to a bool value is i32), or an array-like (a constant of its
// own numpy dtype; the builder's jnp promotion then applies).
Value operand(const GraphPtr& g, Value like, const py::handle& other) {
  if (py::isinstance<PyValue>(other)) return own(g, other.cast<const PyValue&>());
  DType t = g->dtype(like);
  if (py::isinstance<py::bool_>(other)) return g->scalar(other.cast<bool>() ? 1 : 0, t);
  if (py::isinstance<py::int_>(other))
    return g->scalar(other.cast<double>(), is_bool(t) ? DType::i32 : t);
  if (py::isinstance<py::float_>(other))
    return g->scalar(other.cast<double>(), is_float(t) ? t : DType::f32);
  return g->constant(to_tensor(other, std::nullopt, "constant operand").clone());
}

// Start indices of dynamic_slice / dynamic_update_slice: Values or Python ints; an int becomes
// a scalar of the first Value's dtype (i32 when all are ints), as lax accepts both.
std::vector<Value> start_indices_of(const GraphPtr& g, const py::sequence& starts) {
  std::vector<py::object> items;
  for (size_t i = 0; i < starts.size(); ++i) items.push_back(starts[i]);
  DType t = DType::i32;
  for (const py::object& s : items)
    if (py::isinstance<PyValue>(s)) {
      t = g->dtype(own(g, s.cast<const PyValue&>()));
      break;
    }
  std::vector<Value> out;
  for (const py::object& s : items) {
    if (py::isinstance<PyValue>(s))
      out.push_back(own(g, s.cast<const PyValue&>()));
    else if (py::isinstance<py::int_>(s) && !py::isinstance<py::bool_>(s))
      out.push_back(g->scalar(s.cast<double>(), t));
    else
      throw Error("start indices must be rlx Values or ints, got " +
                  std::string(py::str(py::type::of(s).attr("__name__"))));
  }
  return out;
}

py::object wrap(const GraphPtr& g, Value v) { return py::cast(PyValue{g, v}); }
// Every result as a list (control flow: the count depends on the bodies, so never unwrapped).
std::vector<PyValue> wrap_list(const GraphPtr& g, const std::vector<Value>& vs) {
  std::vector<PyValue> out;
  for (Value v : vs) out.push_back({g, v});
  return out;
}

py::object wrap_all(const GraphPtr& g, const std::vector<Value>& vs) {
  if (vs.size() == 1) return wrap(g, vs[0]);
  py::tuple t(vs.size());
  for (size_t i = 0; i < vs.size(); ++i) t[i] = wrap(g, vs[i]);
  return t;
}

// Axes from None (every axis of x), an int, or a sequence of ints.
Ints axes_of(const Graph& g, Value x, const py::handle& axes) {
  if (axes.is_none()) {
    Ints all(static_cast<size_t>(g.shape(x).rank()));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    return all;
  }
  if (py::isinstance<py::int_>(axes)) return {axes.cast<int64_t>()};
  return axes.cast<Ints>();
}

// ---- numpy-style basic indexing: v[1:3, ::2], v[i], v[..., None], v[idx_value] (one integer
// index tensor -> gather along its axis). Everything else is rejected as ambiguous.
Value index_value(const GraphPtr& g, Value x, const py::handle& key) {
  py::tuple items =
      py::isinstance<py::tuple>(key) ? py::reinterpret_borrow<py::tuple>(key) : py::make_tuple(key);
  const Shape in = g->shape(x);
  auto describe = [&] {
    return "index " + py::repr(key).cast<std::string>() + " of " + g->type(x).to_string();
  };
  size_t consumed = 0, ellipses = 0;
  for (auto it : items) {
    if (it.is(py::ellipsis())) {
      ++ellipses;
    } else if (!it.is_none()) {
      ++consumed;
    }
  }
  check(ellipses <= 1, describe() + ": more than one '...'");
  check(consumed <= static_cast<size_t>(in.rank()),
        describe() + ": too many indices for rank " + std::to_string(in.rank()));
  int rank = in.rank();
  Ints start(static_cast<size_t>(rank), 0), limit = in.dims(), stride(static_cast<size_t>(rank), 1);
  Ints reversed;
  // Result layout, per output position: an input axis kept (>= 0), a new axis (-1) or the
  // gathered index tensor's dims (-2); int-indexed axes vanish.
  std::vector<int64_t> layout;
  std::optional<std::pair<int, PyValue>> tensor_index;
  bool any_int = false;
  int axis = 0;
  for (auto it : items) {
    if (it.is_none()) {
      layout.push_back(-1);
    } else if (it.is(py::ellipsis())) {
      for (size_t k = 0; k < static_cast<size_t>(rank) - consumed; ++k) layout.push_back(axis++);
    } else if (py::isinstance<py::slice>(it)) {
      py::ssize_t s = 0, e = 0, st = 0, len = 0;
      if (!py::reinterpret_borrow<py::slice>(it).compute(static_cast<size_t>(in[axis]), &s, &e, &st,
                                                         &len))
        throw py::error_already_set();
      auto a = static_cast<size_t>(axis);
      if (st > 0) {
        start[a] = s;
        limit[a] = s + (len > 0 ? (len - 1) * st + 1 : 0);
        stride[a] = st;
      } else {  // negative step: reverse the axis, then slice forward (position i -> n-1-i)
        reversed.push_back(axis);
        start[a] = in[axis] - 1 - s;
        limit[a] = start[a] + (len > 0 ? (len - 1) * (-st) + 1 : 0);
        stride[a] = -st;
      }
      layout.push_back(axis++);
    } else if (PyIndex_Check(it.ptr()) && !py::isinstance<py::bool_>(it)) {  // int, np.int64
      int64_t i = py::reinterpret_steal<py::int_>(PyNumber_Index(it.ptr())).cast<int64_t>();
      int64_t n = in[axis];
      check(i >= -n && i < n, describe() + ": index " + std::to_string(i) +
                                  " is out of bounds for axis " + std::to_string(axis) +
                                  " of size " + std::to_string(n));
      if (i < 0) i += n;
      start[static_cast<size_t>(axis)] = i;
      limit[static_cast<size_t>(axis)] = i + 1;
      any_int = true;
      ++axis;
    } else if (py::isinstance<PyValue>(it)) {
      check(!tensor_index, describe() + ": more than one index tensor is ambiguous");
      const auto& iv = it.cast<const PyValue&>();
      own(g, iv);  // checked before anything is emitted, so a failure leaves the graph as it was
      check(is_integer(iv.type().dtype), describe() +
                                             ": an index tensor must have an integer "
                                             "dtype, got " +
                                             iv.type().to_string());
      tensor_index = {axis, iv};
      layout.push_back(-2);
      ++axis;
    } else {
      throw Error(describe() + ": unsupported index element " + py::repr(it).cast<std::string>() +
                  " (use ints, slices, None, ... or one integer index Value)");
    }
  }
  for (; axis < rank; ++axis) layout.push_back(axis);
  check(!(tensor_index && any_int),
        describe() +
            ": mixing an index tensor with integer indices is ambiguous (numpy moves "
            "the indexed dims); index in two steps");
  Value y = x;
  if (!reversed.empty()) y = g->reverse(y, reversed);
  bool full = true;
  for (int d = 0; d < rank; ++d)
    full = full && start[static_cast<size_t>(d)] == 0 && limit[static_cast<size_t>(d)] == in[d] &&
           stride[static_cast<size_t>(d)] == 1;
  if (!full) y = g->slice(y, start, limit, stride);
  if (tensor_index) y = g->gather(y, tensor_index->second.v, tensor_index->first);
  // Final shape from the layout. y still has every input axis (int-indexed ones as size 1),
  // except that gather replaced axis a by the index tensor's k dims.
  Ints out;
  const Shape ys = g->shape(y);
  Ints idx_dims;
  if (tensor_index) idx_dims = g->shape(own(g, tensor_index->second)).dims();
  auto pos_of = [&](int64_t d) {
    if (!tensor_index || d < tensor_index->first) return static_cast<int>(d);
    return static_cast<int>(d + static_cast<int64_t>(idx_dims.size()) - 1);
  };
  for (int64_t l : layout) {
    if (l == -1) {
      out.push_back(1);
    } else if (l == -2) {
      out.insert(out.end(), idx_dims.begin(), idx_dims.end());
    } else {
      out.push_back(ys[pos_of(l)]);
    }
  }
  if (out != ys.dims()) y = g->reshape(y, out);
  return y;
}

template <class F>
void def_unary_table(py::class_<Graph, GraphPtr>& cls, F table) {
  for (auto& [name, fn] : table) {
    auto f = fn;
    cls.def(
        name,
        [f](const GraphPtr& g, const PyValue& x) {
          return PyValue{g, ((*g).*f)(own(g, x))};
        },
        py::arg("x"));
  }
}

using UnaryFn = Value (Graph::*)(Value);
using BinaryFn = Value (Graph::*)(Value, Value);
using ReduceFn = Value (Graph::*)(Value, Ints, bool);

// Every elementwise unary builder of graph.h, by its Python name.
const std::vector<std::pair<const char*, UnaryFn>> kUnary = {
    {"neg", &Graph::neg},
    {"abs", &Graph::abs},
    {"sign", &Graph::sign},
    {"exp", &Graph::exp},
    {"expm1", &Graph::expm1},
    {"log", &Graph::log},
    {"log1p", &Graph::log1p},
    {"sqrt", &Graph::sqrt},
    {"rsqrt", &Graph::rsqrt},
    {"sin", &Graph::sin},
    {"cos", &Graph::cos},
    {"tan", &Graph::tan},
    {"tanh", &Graph::tanh},
    {"atan", &Graph::atan},
    {"logistic", &Graph::logistic},
    {"erf", &Graph::erf},
    {"cbrt", &Graph::cbrt},
    {"floor", &Graph::floor},
    {"ceil", &Graph::ceil},
    {"round", &Graph::round},
    {"logical_not", &Graph::logical_not},
    {"relu", &Graph::relu},
    {"gelu", &Graph::gelu},
    {"gelu_tanh", &Graph::gelu_tanh},
    {"silu", &Graph::silu},
    {"softplus", &Graph::softplus},
    {"stop_gradient", &Graph::stop_gradient},
};

// Every elementwise binary builder (and matmul), by its Python name.
const std::vector<std::pair<const char*, BinaryFn>> kBinary = {
    {"add", &Graph::add},
    {"sub", &Graph::sub},
    {"mul", &Graph::mul},
    {"div", &Graph::div},
    {"pow", &Graph::pow},
    {"max", &Graph::max},
    {"min", &Graph::min},
    {"rem", &Graph::rem},
    {"logical_and", &Graph::logical_and},
    {"logical_or", &Graph::logical_or},
    {"logical_xor", &Graph::logical_xor},
    {"eq", &Graph::eq},
    {"ne", &Graph::ne},
    {"lt", &Graph::lt},
    {"le", &Graph::le},
    {"gt", &Graph::gt},
    {"ge", &Graph::ge},
    {"matmul", &Graph::matmul},
};

const std::vector<std::pair<const char*, ReduceFn>> kReduce = {
    {"reduce_sum", &Graph::reduce_sum},   {"reduce_mean", &Graph::reduce_mean},
    {"reduce_max", &Graph::reduce_max},   {"reduce_min", &Graph::reduce_min},
    {"reduce_prod", &Graph::reduce_prod},
};

// Python operator -> builder, with the reflected form (operands swapped) where Python has one;
// a comparison with the Value on the right is reflected by Python itself (a < v -> v > a).
const std::vector<std::tuple<const char*, const char*, BinaryFn>> kOperators = {
    {"__add__", "__radd__", &Graph::add},      {"__sub__", "__rsub__", &Graph::sub},
    {"__mul__", "__rmul__", &Graph::mul},      {"__truediv__", "__rtruediv__", &Graph::div},
    {"__pow__", "__rpow__", &Graph::pow},      {"__matmul__", "__rmatmul__", &Graph::matmul},
    {"__mod__", "__rmod__", &Graph::rem},      {"__and__", "__rand__", &Graph::logical_and},
    {"__or__", "__ror__", &Graph::logical_or}, {"__xor__", "__rxor__", &Graph::logical_xor},
    {"__lt__", nullptr, &Graph::lt},           {"__le__", nullptr, &Graph::le},
    {"__gt__", nullptr, &Graph::gt},           {"__ge__", nullptr, &Graph::ge},
    {"__eq__", nullptr, &Graph::eq},           {"__ne__", nullptr, &Graph::ne},
};

std::vector<Value> values_of(const GraphPtr& g, const std::vector<PyValue>& vs) {
  std::vector<Value> out;
  for (const auto& v : vs) out.push_back(own(g, v));
  return out;
}

py::object emit_any(const GraphPtr& g, const std::string& op, const std::vector<PyValue>& operands,
                    const py::dict& attrs, const std::string& name) {
  std::optional<OpKind> kind = op_from_name(op);
  check(kind.has_value(), "emit: unknown op '" + op + "' (rlx.ops() lists them)");
  const OpInfo& info = op_info(*kind);
  AttrMap am;
  for (auto [k, v] : attrs) {
    std::string key = k.cast<std::string>();
    am.set(key, to_attr(info, key, v));
  }
  return wrap_all(g, g->emit(*kind, values_of(g, operands), std::move(am), name));
}

}  // namespace

void bind_graph(py::module_& m) {
  py::class_<PyValue> value(m, "Value", "A value of a Graph: (node, result index) with its type.");
  py::class_<Graph, GraphPtr> graph(m, "Graph", "An SSA tensor graph and its builder.");

  value.def_property_readonly("shape", [](const PyValue& v) { return shape_tuple(v.type().shape); })
      .def_property_readonly(
          "dtype", [](const PyValue& v) { return std::string(dtype_name(v.type().dtype)); })
      .def_property_readonly("ndim", [](const PyValue& v) { return v.type().shape.rank(); })
      .def_property_readonly("graph", [](const PyValue& v) { return v.g; })
      .def_property_readonly("name", [](const PyValue& v) { return v.g->node(v.v).name; })
      .def_property_readonly(
          "op", [](const PyValue& v) { return std::string(op_name(v.g->node(v.v).op)); })
      .def_property_readonly("index", [](const PyValue& v) { return v.v.index; })
      .def("__repr__",
           [](const PyValue& v) {
             std::string s = "Value(%" + v.g->node(v.v).name;
             if (v.g->node(v.v).results.size() > 1) s += "#" + std::to_string(v.v.index);
             return s + ": " + v.type().to_string() + ")";
           })
      .def("__neg__",
           [](const PyValue& v) {
             return PyValue{v.g, v.g->neg(v.v)};
           })
      .def("__abs__",
           [](const PyValue& v) {
             return PyValue{v.g, v.g->abs(v.v)};
           })
      .def("__invert__",
           [](const PyValue& v) {
             return PyValue{v.g, v.g->logical_not(v.v)};
           })
      .def("__bool__",
           [](const PyValue& v) -> bool {
             throw Error("the truth value of a graph Value (" + v.type().to_string() +
                         ") is unknown until the graph runs; use g.select / comparisons");
           })
      .def("__getitem__",
           [](const PyValue& v, const py::object& key) {
             return PyValue{v.g, index_value(v.g, v.v, key)};
           })
      .def(
          "astype",
          [](const PyValue& v, const py::object& dt) {
            return PyValue{v.g, v.g->convert(v.v, to_dtype(dt))};
          },
          py::arg("dtype"))
      .def("reshape",
           [](const PyValue& v, const py::args& shape) {
             Ints s = shape.size() == 1 && !py::isinstance<py::int_>(shape[0])
                          ? shape[0].cast<Ints>()
                          : shape.cast<Ints>();
             return PyValue{v.g, v.g->reshape(v.v, s)};
           })
      .def_property_readonly("T", [](const PyValue& v) {
        Ints perm;
        for (int i = v.type().shape.rank() - 1; i >= 0; --i) perm.push_back(i);
        return PyValue{v.g, v.g->transpose(v.v, perm)};
      });
  // numpy arrays on the left defer to the Value's reflected operator instead of broadcasting.
  value.attr("__array_ufunc__") = py::none();
  for (const auto& [fwd, rev, fn] : kOperators) {
    auto f = fn;
    value.def(fwd, [f](const PyValue& x, const py::object& y) {
      return PyValue{x.g, ((*x.g).*f)(x.v, operand(x.g, x.v, y))};
    });
    if (rev != nullptr) {
      value.def(rev, [f](const PyValue& x, const py::object& y) {
        return PyValue{x.g, ((*x.g).*f)(operand(x.g, x.v, y), x.v)};
      });
    }
  }
  value.attr("__hash__") = py::none();

  graph.def(py::init<std::string>(), py::arg("name") = "main")
      .def_property_readonly("name", &Graph::name)
      .def("__str__", &Graph::to_string)
      .def("to_string", &Graph::to_string)
      .def("__repr__",
           [](const Graph& g) {
             return "<rlx.Graph '" + g.name() + "' with " + std::to_string(g.nodes().size()) +
                    " nodes>";
           })
      .def("__len__", [](const Graph& g) { return g.nodes().size(); })
      .def("__eq__", [](const Graph& a, const Graph& b) { return a == b; })
      .def("__copy__", [](const Graph& g) { return Graph(g); })
      .def("copy", [](const Graph& g) { return Graph(g); })
      .def("verify", &Graph::verify)
      .def_static("parse", &Graph::parse, py::arg("text"))
      .def(
          "input",
          [](const GraphPtr& g, std::string name, const Ints& shape, const py::object& dtype) {
            return PyValue{g, g->input(std::move(name), to_dtype(dtype), Shape(shape))};
          },
          py::arg("name"), py::arg("shape"), py::arg("dtype") = "f32")
      .def(
          "param",
          [](const GraphPtr& g, std::string name, const Ints& shape, const py::object& dtype) {
            return PyValue{g, g->param(std::move(name), to_dtype(dtype), Shape(shape))};
          },
          py::arg("name"), py::arg("shape"), py::arg("dtype") = "f32")
      .def(
          "constant",
          [](const GraphPtr& g, const py::object& value, const py::object& dtype,
             std::string name) {
            std::optional<DType> want;
            if (!dtype.is_none()) want = to_dtype(dtype);
            if (want && py::isinstance<py::array>(value))  // cast arrays explicitly asked to
              return PyValue{
                  g,
                  g->constant(
                      to_tensor(value.attr("astype")(numpy_dtype(*want)), want, "constant").clone(),
                      std::move(name))};
            return PyValue{
                g, g->constant(to_tensor(value, want, "constant").clone(), std::move(name))};
          },
          py::arg("value"), py::arg("dtype") = py::none(), py::arg("name") = "")
      .def(
          "scalar",
          [](const GraphPtr& g, double v, const py::object& dtype) {
            return PyValue{g, g->scalar(v, to_dtype(dtype))};
          },
          py::arg("value"), py::arg("dtype") = "f32")
      .def(
          "iota",
          [](const GraphPtr& g, const Ints& shape, int64_t dimension, const py::object& dtype) {
            return PyValue{g, g->iota(to_dtype(dtype), Shape(shape), dimension)};
          },
          py::arg("shape"), py::arg("dimension") = 0, py::arg("dtype") = "i32")
      .def("outputs",
           [](const GraphPtr& g, const py::args& vals) {
             std::vector<Value> outs;
             for (auto v : vals) {
               if (py::isinstance<py::tuple>(v) || py::isinstance<py::list>(v)) {
                 for (auto w : v) outs.push_back(own(g, w.cast<const PyValue&>()));
               } else {
                 outs.push_back(own(g, v.cast<const PyValue&>()));
               }
             }
             g->set_outputs(std::move(outs));
           })
      .def("output_values",
           [](const GraphPtr& g) {
             std::vector<PyValue> out;
             for (Value v : g->outputs()) out.push_back({g, v});
             return out;
           })
      .def(
          "value",
          [](const GraphPtr& g, const std::string& name, int32_t index) {
            int32_t id = g->find(name);
            check(id >= 0, "graph '" + g->name() + "' has no node named '" + name + "'");
            check(index >= 0 && static_cast<size_t>(index) < g->node(id).results.size(),
                  "node '" + name + "' has no result " + std::to_string(index));
            return PyValue{g, Value{id, index}};
          },
          py::arg("name"), py::arg("index") = 0)
      .def(
          "nodes",
          [](const Graph& g) {
            py::list out;
            for (const Node& n : g.nodes()) {
              py::list operands, results;
              for (Value v : n.operands) operands.append(py::make_tuple(g.node(v).name, v.index));
              for (const TensorType& t : n.results)
                results.append(
                    py::make_tuple(std::string(dtype_name(t.dtype)), shape_tuple(t.shape)));
              py::dict attrs;
              for (const auto& [k, v] : n.attrs.entries()) attrs[py::str(k)] = from_attr(v);
              py::dict d;
              d["name"] = n.name;
              d["op"] = std::string(op_name(n.op));
              d["operands"] = operands;
              d["attrs"] = attrs;
              d["results"] = results;
              out.append(d);
            }
            return out;
          },
          "The nodes in graph order: dicts with name, op, operands ((node name, result index) "
          "pairs), attrs (name -> value; tensors as numpy arrays, graphs as rlx.Graph) and "
          "results ((dtype, shape) pairs).")
      .def("emit", &emit_any, py::arg("op"), py::arg("operands"), py::arg("attrs") = py::dict(),
           py::arg("name") = "")
      .def(
          "leaky_relu",
          [](const GraphPtr& g, const PyValue& x, double alpha) {
            return PyValue{g, g->leaky_relu(own(g, x), alpha)};
          },
          py::arg("x"), py::arg("alpha") = 0.01)
      .def(
          "convert",
          [](const GraphPtr& g, const PyValue& x, const py::object& dtype) {
            return PyValue{g, g->convert(own(g, x), to_dtype(dtype))};
          },
          py::arg("x"), py::arg("dtype"))
      .def(
          "select",
          [](const GraphPtr& g, const PyValue& p, const py::object& a, const py::object& b) {
            Value pv = own(g, p);
            Value av = py::isinstance<PyValue>(a) ? own(g, a.cast<PyValue>()) : Value{};
            Value bv = py::isinstance<PyValue>(b) ? own(g, b.cast<PyValue>()) : Value{};
            check(av.valid() || bv.valid(), "select: on_true or on_false must be a Value");
            if (!av.valid()) av = operand(g, bv, a);
            if (!bv.valid()) bv = operand(g, av, b);
            return PyValue{g, g->select(pv, av, bv)};
          },
          py::arg("pred"), py::arg("on_true"), py::arg("on_false"))
      .def(
          "clamp",
          [](const GraphPtr& g, const py::object& lo, const PyValue& x, const py::object& hi) {
            Value xv = own(g, x);
            return PyValue{g, g->clamp(operand(g, xv, lo), xv, operand(g, xv, hi))};
          },
          py::arg("lo"), py::arg("x"), py::arg("hi"))
      .def(
          "dot_general",
          [](const GraphPtr& g, const PyValue& l, const PyValue& r, Ints lb, Ints rb, Ints lc,
             Ints rc, const py::object& preferred) {
            std::optional<DType> pref;
            if (!preferred.is_none()) pref = to_dtype(preferred);
            return PyValue{g, g->dot_general(own(g, l), own(g, r), lb, rb, lc, rc, pref)};
          },
          py::arg("lhs"), py::arg("rhs"), py::arg("lhs_batch"), py::arg("rhs_batch"),
          py::arg("lhs_contract"), py::arg("rhs_contract"), py::arg("preferred") = py::none())
      .def(
          "argmax",
          [](const GraphPtr& g, const PyValue& x, int64_t axis, bool keepdims,
             const py::object& idt) {
            return PyValue{g, g->argmax(own(g, x), axis, keepdims, to_dtype(idt))};
          },
          py::arg("x"), py::arg("axis"), py::arg("keepdims") = false,
          py::arg("index_dtype") = "i32")
      .def(
          "argmin",
          [](const GraphPtr& g, const PyValue& x, int64_t axis, bool keepdims,
             const py::object& idt) {
            return PyValue{g, g->argmin(own(g, x), axis, keepdims, to_dtype(idt))};
          },
          py::arg("x"), py::arg("axis"), py::arg("keepdims") = false,
          py::arg("index_dtype") = "i32")
      .def(
          "cumsum",
          [](const GraphPtr& g, const PyValue& x, int64_t axis, bool exclusive, bool reverse) {
            return PyValue{g, g->cumsum(own(g, x), axis, exclusive, reverse)};
          },
          py::arg("x"), py::arg("axis"), py::arg("exclusive") = false, py::arg("reverse") = false)
      .def(
          "reshape",
          [](const GraphPtr& g, const PyValue& x, const Ints& s) {
            return PyValue{g, g->reshape(own(g, x), s)};
          },
          py::arg("x"), py::arg("shape"))
      .def(
          "transpose",
          [](const GraphPtr& g, const PyValue& x, const py::object& perm) {
            Ints p;
            if (perm.is_none()) {
              for (int i = x.type().shape.rank() - 1; i >= 0; --i) p.push_back(i);
            } else {
              p = perm.cast<Ints>();
            }
            return PyValue{g, g->transpose(own(g, x), p)};
          },
          py::arg("x"), py::arg("permutation") = py::none())
      .def(
          "broadcast_in_dim",
          [](const GraphPtr& g, const PyValue& x, const Ints& s, const Ints& bd) {
            return PyValue{g, g->broadcast_in_dim(own(g, x), s, bd)};
          },
          py::arg("x"), py::arg("shape"), py::arg("broadcast_dimensions"))
      .def(
          "expand",
          [](const GraphPtr& g, const PyValue& x, const Ints& s) {
            return PyValue{g, g->expand(own(g, x), s)};
          },
          py::arg("x"), py::arg("shape"))
      .def(
          "slice",
          [](const GraphPtr& g, const PyValue& x, const Ints& s, const Ints& l, const Ints& st) {
            return PyValue{g, g->slice(own(g, x), s, l, st)};
          },
          py::arg("x"), py::arg("start"), py::arg("limit"), py::arg("strides") = Ints{})
      .def(
          "concatenate",
          [](const GraphPtr& g, const std::vector<PyValue>& xs, int64_t d) {
            return PyValue{g, g->concatenate(values_of(g, xs), d)};
          },
          py::arg("xs"), py::arg("dimension"))
      .def(
          "pad",
          [](const GraphPtr& g, const PyValue& x, const py::object& pv, const Ints& lo,
             const Ints& hi, const Ints& in) {
            Value xv = own(g, x);
            return PyValue{g, g->pad(xv, operand(g, xv, pv), lo, hi, in)};
          },
          py::arg("x"), py::arg("padding_value"), py::arg("low"), py::arg("high"),
          py::arg("interior") = Ints{})
      .def(
          "gather",
          [](const GraphPtr& g, const PyValue& x, const PyValue& i, int64_t axis) {
            return PyValue{g, g->gather(own(g, x), own(g, i), axis)};
          },
          py::arg("x"), py::arg("indices"), py::arg("axis") = 0)
      .def(
          "take_along_axis",
          [](const GraphPtr& g, const PyValue& x, const PyValue& i, int64_t axis) {
            return PyValue{g, g->take_along_axis(own(g, x), own(g, i), axis)};
          },
          py::arg("x"), py::arg("indices"), py::arg("axis"))
      .def(
          "scatter_add",
          [](const GraphPtr& g, const PyValue& x, const PyValue& i, const PyValue& u,
             int64_t axis) {
            return PyValue{g, g->scatter_add(own(g, x), own(g, i), own(g, u), axis)};
          },
          py::arg("x"), py::arg("indices"), py::arg("updates"), py::arg("axis") = 0)
      .def(
          "dynamic_slice",
          [](const GraphPtr& g, const PyValue& x, const py::sequence& starts, const Ints& sizes) {
            return PyValue{g, g->dynamic_slice(own(g, x), start_indices_of(g, starts), sizes)};
          },
          py::arg("x"), py::arg("start_indices"), py::arg("slice_sizes"))
      .def(
          "dynamic_update_slice",
          [](const GraphPtr& g, const PyValue& x, const PyValue& u, const py::sequence& starts) {
            return PyValue{
                g, g->dynamic_update_slice(own(g, x), own(g, u), start_indices_of(g, starts))};
          },
          py::arg("x"), py::arg("update"), py::arg("start_indices"))
      .def(
          "reverse",
          [](const GraphPtr& g, const PyValue& x, const py::object& axes) {
            return PyValue{g, g->reverse(own(g, x), axes_of(*g, x.v, axes))};
          },
          py::arg("x"), py::arg("axes"))
      .def(
          "squeeze",
          [](const GraphPtr& g, const PyValue& x, const py::object& axes) {
            return PyValue{g, g->squeeze(own(g, x), axes_of(*g, x.v, axes))};
          },
          py::arg("x"), py::arg("axes"))
      .def(
          "expand_dims",
          [](const GraphPtr& g, const PyValue& x, const py::object& axes) {
            check(!axes.is_none(), "expand_dims: axes are required");
            return PyValue{g, g->expand_dims(own(g, x), axes_of(*g, x.v, axes))};
          },
          py::arg("x"), py::arg("axes"))
      .def(
          "softmax",
          [](const GraphPtr& g, const PyValue& x, int64_t axis) {
            return PyValue{g, g->softmax(own(g, x), axis)};
          },
          py::arg("x"), py::arg("axis") = -1)
      .def(
          "log_softmax",
          [](const GraphPtr& g, const PyValue& x, int64_t axis) {
            return PyValue{g, g->log_softmax(own(g, x), axis)};
          },
          py::arg("x"), py::arg("axis") = -1)
      .def(
          "layer_norm",
          [](const GraphPtr& g, const PyValue& x, const PyValue& s, const PyValue& b, int64_t axis,
             double eps) {
            return PyValue{g, g->layer_norm(own(g, x), own(g, s), own(g, b), axis, eps)};
          },
          py::arg("x"), py::arg("scale"), py::arg("bias"), py::arg("axis") = -1,
          py::arg("eps") = 1e-5)
      .def(
          "rms_norm",
          [](const GraphPtr& g, const PyValue& x, const PyValue& s, int64_t axis, double eps) {
            return PyValue{g, g->rms_norm(own(g, x), own(g, s), axis, eps)};
          },
          py::arg("x"), py::arg("scale"), py::arg("axis") = -1, py::arg("eps") = 1e-6)
      .def(
          "attention",
          [](const GraphPtr& g, const PyValue& q, const PyValue& k, const PyValue& v,
             std::string mask, std::optional<double> scale, int64_t window,
             std::optional<PyValue> mask_tensor) {
            Graph::AttentionOptions o{std::move(mask), scale, window};
            std::optional<Value> mt;
            if (mask_tensor) mt = own(g, *mask_tensor);
            return PyValue{g, g->attention(own(g, q), own(g, k), own(g, v), o, mt)};
          },
          py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask") = "none",
          py::arg("scale") = py::none(), py::arg("window") = 0, py::arg("mask_tensor") = py::none())
      .def(
          "packed_qkv_attention",
          [](const GraphPtr& g, const PyValue& qkv, int64_t heads, int64_t kv_heads,
             std::string mask, std::optional<double> scale, int64_t window,
             std::optional<PyValue> mask_tensor) {
            Graph::AttentionOptions o{std::move(mask), scale, window};
            std::optional<Value> mt;
            if (mask_tensor) mt = own(g, *mask_tensor);
            return PyValue{g, g->packed_qkv_attention(own(g, qkv), heads, kv_heads, o, mt)};
          },
          py::arg("qkv"), py::arg("heads"), py::arg("kv_heads") = 0, py::arg("mask") = "none",
          py::arg("scale") = py::none(), py::arg("window") = 0, py::arg("mask_tensor") = py::none(),
          "Attention from a packed projection qkv [B,S,(heads+2*kv_heads)*D] (columns q | k | v) "
          "to [B,S,heads*D]; kv_heads 0 means heads; masks as attention's.")
      .def(
          "rope",
          [](const GraphPtr& g, const PyValue& x, const PyValue& c, const PyValue& s,
             std::string layout) {
            return PyValue{g, g->rope(own(g, x), own(g, c), own(g, s), std::move(layout))};
          },
          py::arg("x"), py::arg("cos"), py::arg("sin"), py::arg("layout") = "neox")
      .def(
          "conv",
          [](const GraphPtr& g, const PyValue& x, const PyValue& w, const Ints& st, const Ints& lo,
             const Ints& hi, const Ints& dil, int64_t groups) {
            return PyValue{g, g->conv(own(g, x), own(g, w), st, lo, hi, dil, groups)};
          },
          py::arg("x"), py::arg("w"), py::arg("strides") = Ints{}, py::arg("pad_low") = Ints{},
          py::arg("pad_high") = Ints{}, py::arg("dilation") = Ints{}, py::arg("groups") = 1)
      .def(
          "max_pool",
          [](const GraphPtr& g, const PyValue& x, const Ints& win, const Ints& st, const Ints& lo,
             const Ints& hi) {
            return PyValue{g, g->max_pool(own(g, x), win, st, lo, hi)};
          },
          py::arg("x"), py::arg("window"), py::arg("strides") = Ints{}, py::arg("pad_low") = Ints{},
          py::arg("pad_high") = Ints{})
      .def(
          "avg_pool",
          [](const GraphPtr& g, const PyValue& x, const Ints& win, const Ints& st, const Ints& lo,
             const Ints& hi, bool cip) {
            return PyValue{g, g->avg_pool(own(g, x), win, st, lo, hi, cip)};
          },
          py::arg("x"), py::arg("window"), py::arg("strides") = Ints{}, py::arg("pad_low") = Ints{},
          py::arg("pad_high") = Ints{}, py::arg("count_include_pad") = true)
      .def(
          "top_k",
          [](const GraphPtr& g, const PyValue& x, int64_t k) {
            auto [v, i] = g->top_k(own(g, x), k);
            return std::make_pair(PyValue{g, v}, PyValue{g, i});
          },
          py::arg("x"), py::arg("k"))
      .def(
          "threefry2x32",
          [](const GraphPtr& g, const PyValue& k0, const PyValue& k1, const PyValue& x0,
             const PyValue& x1) {
            auto [y0, y1] = g->threefry2x32(own(g, k0), own(g, k1), own(g, x0), own(g, x1));
            return std::make_pair(PyValue{g, y0}, PyValue{g, y1});
          },
          py::arg("k0"), py::arg("k1"), py::arg("x0"), py::arg("x1"))
      .def(
          "rng_key",
          [](const GraphPtr& g, std::optional<uint64_t> seed) {
            return PyValue{g, g->rng_key(seed)};
          },
          py::arg("seed") = py::none())
      .def(
          "random_bits",
          [](const GraphPtr& g, const PyValue& key, const Ints& shape) {
            return PyValue{g, random::bits(*g, own(g, key), Shape(shape))};
          },
          py::arg("key"), py::arg("shape"))
      .def(
          "random_uniform",
          [](const GraphPtr& g, const PyValue& key, const Ints& shape, const py::object& dtype) {
            return PyValue{g, random::uniform(*g, own(g, key), Shape(shape), to_dtype(dtype))};
          },
          py::arg("key"), py::arg("shape"), py::arg("dtype") = "f32")
      .def(
          "random_bernoulli",
          [](const GraphPtr& g, const PyValue& key, double p, const Ints& shape) {
            return PyValue{g, random::bernoulli(*g, own(g, key), p, Shape(shape))};
          },
          py::arg("key"), py::arg("p"), py::arg("shape"))
      .def(
          "random_fold_in",
          [](const GraphPtr& g, const PyValue& key, const py::object& data) {
            Value d = py::isinstance<PyValue>(data)
                          ? own(g, data.cast<const PyValue&>())
                          : g->scalar(static_cast<double>(data.cast<int64_t>()), DType::i64);
            return PyValue{g, random::fold_in(*g, own(g, key), d)};
          },
          py::arg("key"), py::arg("data"))
      .def(
          "random_split",
          [](const GraphPtr& g, const PyValue& key, int64_t num) {
            return PyValue{g, random::split(*g, own(g, key), num)};
          },
          py::arg("key"), py::arg("num"))
      .def(
          "dequantize",
          [](const GraphPtr& g, const PyValue& w, const std::string& format, int64_t k) {
            return PyValue{g, g->dequantize(own(g, w), quant_format_from_name(format), k)};
          },
          py::arg("w"), py::arg("format"), py::arg("k"),
          "Unpacks w (u8[..., R], rows of ggml blocks of `format`, e.g. 'q4_0', 'q8_0', "
          "'q4_k') into f32[..., k].")
      .def(
          "quant_matmul",
          [](const GraphPtr& g, const PyValue& x, const PyValue& w, const std::string& format,
             const std::string& act_quant, const std::optional<PyValue>& bias,
             const std::string& activation) {
            std::optional<Value> b;
            if (bias) b = own(g, *bias);
            return PyValue{g, g->quant_matmul(own(g, x), own(g, w), quant_format_from_name(format),
                                              act_quant, b, activation)};
          },
          py::arg("x"), py::arg("w"), py::arg("format"), py::arg("act_quant") = "none",
          py::arg("bias") = py::none(), py::arg("activation") = "none",
          "activation(x[..., K] . dequantize(w)^T [+ bias]) for a packed weight w u8[N, R] of N "
          "rows of K elements in `format` (a Linear layer with ggml's [out, in] weight): [..., N] "
          "in x's dtype; bias (x's dtype, [N]) and activation ('none', 'relu', 'gelu', "
          "'gelu_tanh', 'silu') are optional. act_quant 'int8' rounds x per 32 elements to int8 "
          "first (llama.cpp's scheme, the CPU's integer kernels); 'none' multiplies x exactly.")
      .def(
          "softmax_cross_entropy",
          [](const GraphPtr& g, const PyValue& lg, const PyValue& lb) {
            return PyValue{g, g->softmax_cross_entropy(own(g, lg), own(g, lb))};
          },
          py::arg("logits"), py::arg("labels"))
      .def(
          "fused_matmul_bias_act",
          [](const GraphPtr& g, const PyValue& x, const PyValue& w, const PyValue& b,
             std::string act) {
            return PyValue{
                g, g->fused_matmul_bias_act(own(g, x), own(g, w), own(g, b), std::move(act))};
          },
          py::arg("x"), py::arg("w"), py::arg("bias"), py::arg("activation") = "none")
      .def(
          "fused_residual_layer_norm",
          [](const GraphPtr& g, const PyValue& x, const PyValue& r, const PyValue& s,
             const PyValue& b, int64_t axis, double eps) {
            auto [y, h] =
                g->fused_residual_layer_norm(own(g, x), own(g, r), own(g, s), own(g, b), axis, eps);
            return std::make_pair(PyValue{g, y}, PyValue{g, h});
          },
          py::arg("x"), py::arg("residual"), py::arg("scale"), py::arg("bias"),
          py::arg("axis") = -1, py::arg("eps") = 1e-5)
      .def(
          "fused_residual_rms_norm",
          [](const GraphPtr& g, const PyValue& x, const PyValue& r, const PyValue& s, int64_t axis,
             double eps) {
            auto [y, h] = g->fused_residual_rms_norm(own(g, x), own(g, r), own(g, s), axis, eps);
            return std::make_pair(PyValue{g, y}, PyValue{g, h});
          },
          py::arg("x"), py::arg("residual"), py::arg("scale"), py::arg("axis") = -1,
          py::arg("eps") = 1e-6)
      .def(
          "elementwise_region",
          [](const GraphPtr& g, const std::vector<PyValue>& xs, const Graph& body) {
            std::vector<PyValue> out;
            for (Value v : g->elementwise_region(values_of(g, xs), body)) out.push_back({g, v});
            return out;
          },
          py::arg("operands"), py::arg("body"))
      // control flow (docs/ir.md "Regions"): bodies are Graphs whose inputs take the operands
      // by position; rlx.cond / switch / while_loop / scan / fori_loop build them from Python
      // functions.
      .def(
          "cond",
          [](const GraphPtr& g, const PyValue& pred, const Graph& true_branch,
             const Graph& false_branch, const std::vector<PyValue>& operands) {
            return wrap_list(
                g, g->cond(own(g, pred), true_branch, false_branch, values_of(g, operands)));
          },
          py::arg("pred"), py::arg("true_branch"), py::arg("false_branch"), py::arg("operands"))
      .def(
          "switch_case",
          [](const GraphPtr& g, const PyValue& index, const py::sequence& branches,
             const std::vector<PyValue>& operands) {
            std::vector<Graph> bs;
            for (const py::handle& b : branches) bs.push_back(b.cast<const Graph&>());
            return wrap_list(g,
                             g->switch_case(own(g, index), std::move(bs), values_of(g, operands)));
          },
          py::arg("index"), py::arg("branches"), py::arg("operands"))
      .def(
          "while_loop",
          [](const GraphPtr& g, const Graph& cond, const Graph& body,
             const std::vector<PyValue>& init, const std::vector<PyValue>& consts,
             std::optional<int64_t> max_trip_count) {
            return wrap_list(g, g->while_loop(cond, body, values_of(g, init), values_of(g, consts),
                                              max_trip_count));
          },
          py::arg("cond"), py::arg("body"), py::arg("init"),
          py::arg("consts") = std::vector<PyValue>{}, py::arg("max_trip_count") = py::none())
      .def(
          "scan",
          [](const GraphPtr& g, const Graph& body, const std::vector<PyValue>& init,
             const std::vector<PyValue>& xs, const std::vector<PyValue>& consts,
             std::optional<int64_t> length, bool reverse, int64_t unroll) {
            ScanOptions o;
            o.length = length;
            o.reverse = reverse;
            o.unroll = unroll;
            return wrap_list(
                g, g->scan(body, values_of(g, init), values_of(g, xs), values_of(g, consts), o));
          },
          py::arg("body"), py::arg("init"), py::arg("xs"),
          py::arg("consts") = std::vector<PyValue>{}, py::arg("length") = py::none(),
          py::arg("reverse") = false, py::arg("unroll") = 1);
  def_unary_table(graph, kUnary);
  for (const auto& [name, fn] : kBinary) {
    auto f = fn;
    graph.def(
        name,
        [f](const GraphPtr& g, const py::object& x, const py::object& y) {
          // either side may be a scalar / array as long as the other is a Value
          if (py::isinstance<PyValue>(x)) {
            Value xv = own(g, x.cast<const PyValue&>());
            return PyValue{g, ((*g).*f)(xv, operand(g, xv, y))};
          }
          check(py::isinstance<PyValue>(y), "binary op: one operand must be a Value");
          Value yv = own(g, y.cast<const PyValue&>());
          return PyValue{g, ((*g).*f)(operand(g, yv, x), yv)};
        },
        py::arg("x"), py::arg("y"));
  }
  for (const auto& [name, fn] : kReduce) {
    auto f = fn;
    graph.def(
        name,
        [f](const GraphPtr& g, const PyValue& x, const py::object& axes, bool keepdims) {
          return PyValue{g, ((*g).*f)(own(g, x), axes_of(*g, x.v, axes), keepdims)};
        },
        py::arg("x"), py::arg("axes") = py::none(), py::arg("keepdims") = false);
  }

  // Collectives (docs/ir.md "Collectives"): the participants are replica_groups (rows of
  // device ids; None: one group of all devices, axis_size of them when given) and axis_name.
  auto collective = [](const GraphPtr& g, OpKind op, const PyValue& x, AttrMap attrs,
                       const std::optional<ReplicaGroups>& groups, const std::string& axis_name,
                       int64_t axis_size) {
    AttrMap a = collective_attrs(groups.value_or(ReplicaGroups{}), axis_name, axis_size);
    for (const auto& [k, v] : attrs.entries()) a.set(k, v);
    return PyValue{g, g->emit1(op, {own(g, x)}, std::move(a))};
  };
  graph.def(
      "all_reduce",
      [collective](const GraphPtr& g, const PyValue& x, const std::string& reduce,
                   const std::optional<ReplicaGroups>& groups, const std::string& axis_name,
                   int64_t axis_size) {
        return collective(g, OpKind::AllReduce, x, {{"reduce", reduce}}, groups, axis_name,
                          axis_size);
      },
      py::arg("x"), py::arg("reduce") = "sum", py::arg("replica_groups") = py::none(),
      py::arg("axis_name") = "", py::arg("axis_size") = 0);
  graph.def(
      "all_gather",
      [collective](const GraphPtr& g, const PyValue& x, int64_t axis,
                   const std::optional<ReplicaGroups>& groups, const std::string& axis_name,
                   int64_t axis_size) {
        return collective(g, OpKind::AllGather, x, {{"axis", axis}}, groups, axis_name, axis_size);
      },
      py::arg("x"), py::arg("axis"), py::arg("replica_groups") = py::none(),
      py::arg("axis_name") = "", py::arg("axis_size") = 0);
  graph.def(
      "reduce_scatter",
      [collective](const GraphPtr& g, const PyValue& x, int64_t scatter_dimension,
                   const std::optional<ReplicaGroups>& groups, const std::string& axis_name,
                   int64_t axis_size) {
        return collective(g, OpKind::ReduceScatter, x, {{"scatter_dimension", scatter_dimension}},
                          groups, axis_name, axis_size);
      },
      py::arg("x"), py::arg("scatter_dimension"), py::arg("replica_groups") = py::none(),
      py::arg("axis_name") = "", py::arg("axis_size") = 0);
  graph.def(
      "all_to_all",
      [collective](const GraphPtr& g, const PyValue& x, int64_t split_axis, int64_t concat_axis,
                   const std::optional<ReplicaGroups>& groups, const std::string& axis_name,
                   int64_t axis_size) {
        return collective(g, OpKind::AllToAll, x,
                          {{"split_axis", split_axis}, {"concat_axis", concat_axis}}, groups,
                          axis_name, axis_size);
      },
      py::arg("x"), py::arg("split_axis"), py::arg("concat_axis"),
      py::arg("replica_groups") = py::none(), py::arg("axis_name") = "", py::arg("axis_size") = 0);

  m.def("parse", &Graph::parse, py::arg("text"), "Parses the text IR (docs/ir.md) into a Graph.");
  // The Python layer's per-op table: the Graph method that builds each op. The method is the
  // op's mnemonic except where the mnemonic is a Python keyword or clashes with jax.numpy's
  // name of the op; an op is listed only when the method exists, so a missing builder shows up
  // as a hole in the coverage matrix (tests/ops/coverage_test.cc).
  m.def(
      "builder_methods",
      [graph] {
        static const std::map<OpKind, const char*> kRenamed = {{OpKind::Not, "logical_not"},
                                                               {OpKind::And, "logical_and"},
                                                               {OpKind::Or, "logical_or"},
                                                               {OpKind::Xor, "logical_xor"}};
        py::dict out;
        for (int i = 0; i < kNumOps; ++i) {
          auto op = static_cast<OpKind>(i);
          auto it = kRenamed.find(op);
          std::string method = it != kRenamed.end() ? it->second : std::string(op_name(op));
          if (py::hasattr(graph, method.c_str())) out[py::str(std::string(op_name(op)))] = method;
        }
        return out;
      },
      "op mnemonic -> the rlx.Graph method that builds it, for every op that has one.");
  m.def(
      "ops",
      [] {
        py::list out;
        for (int i = 0; i < kNumOps; ++i) {
          const OpInfo& info = op_info(static_cast<OpKind>(i));
          py::dict attrs;
          for (const auto& a : info.attrs) {
            attrs[py::str(a.name)] =
                py::make_tuple(std::string(attr_type_name(a.type)),
                               a.presence == AttrPresence::Required ? py::object(py::none())
                                                                    : from_attr(a.default_value));
          }
          py::dict d;
          d["name"] = std::string(info.name);
          d["num_operands"] = info.num_operands;
          d["num_results"] = info.num_results;
          d["composite"] = info.has(kComposite);
          d["elementwise"] = info.has(kElementwise);
          py::list dtypes;
          for (DType t : info.dtypes.dtypes()) dtypes.append(std::string(dtype_name(t)));
          d["dtypes"] = dtypes;
          d["doc"] = std::string(info.doc);
          d["attrs"] = attrs;
          out.append(d);
        }
        return out;
      },
      "Every op of ops.def: name, arity, traits, accepted dtypes, doc and attribute schema "
      "(type, default).");
}

}  // namespace rlx::py_bind
