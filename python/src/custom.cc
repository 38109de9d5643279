// Custom ops from Python (docs/ir.md "Custom ops"): the two custom ops the package registers,
// `py.custom_vjp` (a function with a user-given forward and backward, each a traced graph, as
// jax.custom_vjp) and `py.pure_callback` (a Python function on numpy arrays run on the host, as
// jax.pure_callback), and Graph.custom_call for any registered custom op.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "rlx/ir/custom_op.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/decompose.h"
#include "value.h"

namespace rlx::py_bind {
namespace {

namespace py = pybind11;

std::vector<TensorType> input_types(const Graph& g) {
  std::vector<TensorType> out;
  for (int32_t id : g.inputs()) out.push_back(g.node(id).results[0]);
  return out;
}
std::vector<TensorType> output_types(const Graph& g) {
  std::vector<TensorType> out;
  for (Value v : g.outputs()) out.push_back(g.type(v));
  return out;
}
std::string types_text(const std::vector<TensorType>& ts) {
  std::string s;
  for (const TensorType& t : ts) s += (s.empty() ? "" : ", ") + t.to_string();
  return "(" + s + ")";
}

// ---- py.custom_vjp {fun, fwd, bwd, num_residuals}
//   fun: x... -> y...;  fwd: x... -> (y..., r...);  bwd: (r..., ct_y...) -> ct_x...
std::vector<TensorType> infer_custom_vjp(const InferContext& ctx) {
  const Graph& fun = ctx.attrs.get_graph("fun");
  const Graph& fwd = ctx.attrs.get_graph("fwd");
  const Graph& bwd = ctx.attrs.get_graph("bwd");
  std::vector<TensorType> xs(ctx.operands.begin(), ctx.operands.end());
  auto expect = [&](const std::string& what, const std::vector<TensorType>& got,
                    const std::vector<TensorType>& want) {
    if (got != want)
      ctx.fail(what + " are " + types_text(got) + " but should be " + types_text(want));
  };
  expect("fun's inputs", input_types(fun), xs);
  expect("fwd's inputs", input_types(fwd), xs);
  std::vector<TensorType> ys = output_types(fun), f = output_types(fwd);
  int64_t nr = ctx.attrs.get_int("num_residuals");
  if (nr < 0 || f.size() != ys.size() + static_cast<size_t>(nr))
    ctx.fail("fwd returns " + std::to_string(f.size()) + " values; expected fun's " +
             std::to_string(ys.size()) + " outputs and " + std::to_string(nr) + " residuals");
  expect("fwd's outputs",
         std::vector<TensorType>(f.begin(), f.begin() + static_cast<long>(ys.size())), ys);
  std::vector<TensorType> bin(f.begin() + static_cast<long>(ys.size()), f.end());
  bin.insert(bin.end(), ys.begin(), ys.end());
  expect("bwd's inputs (residuals, then output cotangents)", input_types(bwd), bin);
  expect("bwd's outputs (one cotangent per operand)", output_types(bwd), xs);
  return ys;
}

TensorMap feeds_of(const Graph& g, std::span<const Tensor> in) {
  TensorMap m;
  std::vector<int32_t> ids = g.inputs();
  for (size_t i = 0; i < ids.size(); ++i) m.emplace(g.node(ids[i]).name, in[i]);
  return m;
}

void register_custom_vjp() {
  CustomOpDef d;
  d.name = "py.custom_vjp";
  d.doc = "rlx.custom_vjp: fun's value, fwd/bwd as its vjp (jax.custom_vjp)";
  d.attrs = {{"fun", AttrType::Graph},
             {"fwd", AttrType::Graph},
             {"bwd", AttrType::Graph},
             {"num_residuals", AttrType::Int}};
  d.infer = infer_custom_vjp;
  d.reference = [](std::span<const Tensor> in, const AttrMap& attrs) {
    const Graph& fun = attrs.get_graph("fun");
    return evaluate(fun, feeds_of(fun, in));
  };
  d.decompose = [](Graph& dst, const Node& node, std::span<const Value> x) {
    return inline_graph(dst, node.attrs.get_graph("fun"), x);
  };
  d.vjp = [](Graph& g, const Node& node, std::span<const Value> x, std::span<const Value>,
             std::span<const Value> ct) {
    std::vector<Value> f = inline_graph(g, node.attrs.get_graph("fwd"), x);
    std::vector<Value> args(f.begin() + static_cast<long>(ct.size()), f.end());
    args.insert(args.end(), ct.begin(), ct.end());
    return inline_graph(g, node.attrs.get_graph("bwd"), args);
  };
  register_custom_op(std::move(d));
}

// ---- py.pure_callback {callback, dtype, shape}: callbacks are held by id for the process.
std::vector<py::object>& callbacks() {
  static auto* v = new std::vector<py::object>();  // leaked: outlives interpreter shutdown
  return *v;
}
std::mutex callbacks_mu;

py::object callback_of(int64_t id) {
  std::lock_guard lock(callbacks_mu);
  check(id >= 0 && static_cast<size_t>(id) < callbacks().size(),
        "pure_callback: no callback with id " + std::to_string(id) +
            " in this process (callbacks do not survive printing a graph to text)");
  return callbacks()[static_cast<size_t>(id)];
}

void register_pure_callback() {
  CustomOpDef d;
  d.name = "py.pure_callback";
  d.doc = "rlx.pure_callback: a Python function on numpy arrays, run on the host";
  d.attrs = {{"callback", AttrType::Int}, {"dtype", AttrType::DType}, {"shape", AttrType::Ints}};
  d.infer = [](const InferContext& ctx) {
    std::vector<int64_t> dims = ctx.attrs.get_ints("shape");
    for (int64_t dim : dims)
      if (dim < 0) ctx.fail("shape has a negative dim " + std::to_string(dim));
    return std::vector<TensorType>{{ctx.attrs.get_dtype("dtype"), Shape(dims)}};
  };
  d.reference = [](std::span<const Tensor> in, const AttrMap& attrs) {
    TensorType want{attrs.get_dtype("dtype"), Shape(attrs.get_ints("shape"))};
    py::gil_scoped_acquire gil;
    py::object fn = callback_of(attrs.get_int("callback"));
    py::tuple args(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      // A copy: operands may borrow the executor's arena, which the callback must not keep.
      Tensor copy(in[i].dtype(), in[i].shape());
      if (copy.nbytes() > 0) std::memcpy(copy.data(), in[i].data(), copy.nbytes());
      args[i] = to_numpy(copy);
    }
    py::object out;
    try {
      out = fn(*args);
    } catch (py::error_already_set& e) {
      throw Error("pure_callback: the callback raised " + std::string(e.what()));
    }
    Tensor t = to_tensor(py::module_::import("numpy").attr("asarray")(out, numpy_dtype(want.dtype)),
                         want.dtype, "pure_callback result");
    check(t.type() == want, "pure_callback: the callback returned " + t.type().to_string() +
                                " but the declared result type is " + want.to_string());
    return std::vector<Tensor>{t};
  };
  register_custom_op(std::move(d));
}

}  // namespace

void bind_custom(py::module_& m) {
  static std::once_flag once;
  std::call_once(once, [] {
    register_custom_vjp();
    register_pure_callback();
  });
  m.def(
      "register_callback",
      [](py::object fn) {
        std::lock_guard lock(callbacks_mu);
        callbacks().push_back(std::move(fn));
        return static_cast<int64_t>(callbacks().size() - 1);
      },
      py::arg("fn"),
      "Holds `fn` for the process and returns its id (the `callback` attribute of "
      "py.pure_callback).");
  m.def("custom_op_names", &custom_op_names, "The names of every registered custom op.");
  py::object graph_cls = m.attr("Graph");
  graph_cls.attr("custom_call") = py::cpp_function(
      [](const GraphPtr& g, const std::string& name, const std::vector<PyValue>& operands,
         const py::dict& attrs, const std::string& node_name) {
        const OpInfo* info = custom_op_info(name);
        if (info == nullptr) {
          std::string known;
          for (const std::string& n : custom_op_names()) known += (known.empty() ? "" : ", ") + n;
          throw Error("custom_call: unknown custom op '" + name + "' (registered: " + known + ")");
        }
        AttrMap am;
        for (auto [k, v] : attrs) {
          std::string key = k.cast<std::string>();
          am.set(key, to_attr(*info, key, v));
        }
        std::vector<Value> vs;
        for (const PyValue& v : operands) vs.push_back(own(g, v));
        std::vector<PyValue> out;
        for (Value r : custom_call(*g, name, std::move(vs), std::move(am), node_name))
          out.push_back({g, r});
        return out;
      },
      py::name("custom_call"), py::is_method(graph_cls), py::arg("name"), py::arg("operands"),
      py::arg("attrs") = py::dict(), py::arg("node_name") = "",
      "Emits custom op `name` (a registered one, rlx._core.custom_op_names()) on `operands` "
      "(rlx.Values of this graph) with its attributes; returns the list of its results.");
}

}  // namespace rlx::py_bind
