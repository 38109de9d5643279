// Bindings of the graph transforms of include/rlx/autodiff/: grad, value_and_grad, vjp, jvp,
// hvp (grad.h) and vmap (vmap.h). Each takes and returns an rlx.Graph; C++ rlx::Error becomes
// rlx.Error with the transform's message.
#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "rlx/autodiff/grad.h"
#include "rlx/autodiff/vmap.h"
#include "rlx/ir/error.h"
#include "rlx/ir/graph.h"

namespace rlx::py_bind {

namespace {

namespace py = pybind11;
using autodiff::BatchAxis;
using autodiff::LossSpec;
using Names = std::vector<std::string>;

// `loss` as given from Python: an output index (int) or an rlx.Value of `g`. The Value class
// lives in graph.cc, so a value is resolved through its public name/index/graph attributes,
// which also lets us reject a value of another graph with a clear message.
LossSpec loss_spec(const Graph& g, const py::object& loss) {
  if (py::isinstance<py::int_>(loss) && !py::isinstance<py::bool_>(loss))
    return LossSpec(loss.cast<int>());
  check(py::hasattr(loss, "graph") && py::hasattr(loss, "name") && py::hasattr(loss, "index"),
        "grad: loss must be an output index (int) or an rlx.Value, got " +
            py::str(py::type::of(loss)).cast<std::string>());
  check(loss.attr("graph").cast<const Graph*>() == &g,
        "grad: loss value belongs to another graph than '" + g.name() + "'");
  const auto name = loss.attr("name").cast<std::string>();
  const int32_t id = g.find(name);
  check(id >= 0, "grad: graph '" + g.name() + "' has no node named '" + name + "'");
  return LossSpec(Value{id, loss.attr("index").cast<int32_t>()});
}

// in_axes / out_axes entries: int or None (jax.vmap's convention).
std::vector<BatchAxis> axes(const py::object& seq, const char* what) {
  std::vector<BatchAxis> out;
  if (seq.is_none()) return out;
  check(py::isinstance<py::sequence>(seq) && !py::isinstance<py::str>(seq),
        std::string("vmap: ") + what + " must be a sequence of int or None");
  for (auto a : seq.cast<py::sequence>()) {
    if (a.is_none()) {
      out.emplace_back(std::nullopt);
    } else {
      check(py::isinstance<py::int_>(a) && !py::isinstance<py::bool_>(a),
            std::string("vmap: ") + what + " entries must be int or None, got " +
                py::str(py::type::of(a)).cast<std::string>());
      out.emplace_back(a.cast<int64_t>());
    }
  }
  return out;
}

autodiff::GradOptions grad_options(int64_t scan_checkpoint_every) {
  autodiff::GradOptions o;
  o.scan_checkpoint_every = scan_checkpoint_every;
  return o;
}

}  // namespace

void bind_autodiff(pybind11::module_& m) {
  m.def(
      "grad",
      [](const Graph& g, const Names& wrt, const py::object& loss, int64_t every) {
        LossSpec spec = loss_spec(g, loss);
        py::gil_scoped_release nogil;
        return autodiff::grad(g, wrt, spec, grad_options(every));
      },
      py::arg("graph"), py::arg("wrt"), py::arg("loss") = 0, py::kw_only(),
      py::arg("scan_checkpoint_every") = 0,
      "jax.grad as a graph transform: outputs the loss then d loss / d leaf per `wrt` name.\n"
      "scan_checkpoint_every=k (>= 1) keeps every k-th carry of each scan and recomputes the\n"
      "steps in between (docs/autodiff.md); 0 keeps every step's carry.");
  m.def(
      "value_and_grad",
      [](const Graph& g, const Names& wrt, const py::object& loss, int64_t every) {
        LossSpec spec = loss_spec(g, loss);
        py::gil_scoped_release nogil;
        return autodiff::value_and_grad(g, wrt, spec, grad_options(every));
      },
      py::arg("graph"), py::arg("wrt"), py::arg("loss") = 0, py::kw_only(),
      py::arg("scan_checkpoint_every") = 0,
      "jax.value_and_grad: every output of `graph`, then one gradient per `wrt` name.");
  m.def(
      "vjp",
      [](const Graph& g, const Names& wrt, int64_t every) {
        py::gil_scoped_release nogil;
        return autodiff::vjp(g, wrt, grad_options(every));
      },
      py::arg("graph"), py::arg("wrt"), py::kw_only(), py::arg("scan_checkpoint_every") = 0,
      "jax.vjp: adds cotangent inputs 'ct.<i>'; outputs g's outputs then one vjp per `wrt`.");
  m.def(
      "jvp",
      [](const Graph& g, const Names& primals) {
        py::gil_scoped_release nogil;
        return autodiff::jvp(g, primals);
      },
      py::arg("graph"), py::arg("primals"),
      "jax.jvp: adds inputs 'tangent.<name>'; outputs g's outputs then J t per float output.");
  m.def(
      "hvp",
      [](const Graph& g, const Names& wrt, const py::object& loss) {
        LossSpec spec = loss_spec(g, loss);
        py::gil_scoped_release nogil;
        return autodiff::hvp(g, wrt, spec);
      },
      py::arg("graph"), py::arg("wrt"), py::arg("loss") = 0,
      "Hessian-vector product (forward over reverse): outputs the loss then H v per `wrt`.");
  m.def(
      "vmap",
      [](const Graph& g, const py::object& in_axes, const py::object& out_axes, int64_t batch_size,
         const std::optional<std::map<std::string, int64_t>>& param_axes) {
        auto in = axes(in_axes, "in_axes");
        auto out = axes(out_axes, "out_axes");
        auto params = param_axes.value_or(std::map<std::string, int64_t>{});
        py::gil_scoped_release nogil;
        return autodiff::vmap(g, in, out, batch_size, params);
      },
      py::arg("graph"), py::arg("in_axes"), py::arg("out_axes"), py::arg("batch_size"),
      py::arg("param_axes") = py::none(),
      "jax.vmap as a graph transform (in_axes / out_axes entries int or None; out_axes None or\n"
      "empty: 0 for every output).");
}

}  // namespace rlx::py_bind
