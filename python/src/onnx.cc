// Bindings of the ONNX importer: _OnnxModel (parse, info, import_graph) and _OnnxSession (the
// C++ InferenceSession); python/rlx/onnx.py builds onnxruntime's API on them.
#include "rlx/import/onnx.h"

#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"
#include "rlx/ir/error.h"

namespace rlx::py_bind {

namespace {

using onnx::InferenceSession;
using onnx::Model;
using onnx::TensorInfo;

// A name or text from the file as a Python str. ONNX strings are UTF-8, but a malformed file's
// need not be: bytes that are not become \xNN escapes rather than a UnicodeDecodeError.
py::str text(const std::string& s) {
  return py::reinterpret_steal<py::str>(
      PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "backslashreplace"));
}

py::list texts(const std::vector<std::string>& v) {
  py::list out;
  for (const std::string& s : v) out.append(text(s));
  return out;
}

// (name, dims, type) with dims as onnxruntime reports them: ints, dim_param strings, None for
// an unknown dim; None for an undeclared shape.
py::tuple info_tuple(const TensorInfo& t) {
  py::object shape = py::none();
  if (t.dims) {
    py::list dims;
    for (const onnx::Dim& d : *t.dims) {
      if (d.value >= 0)
        dims.append(d.value);
      else if (!d.param.empty())
        dims.append(text(d.param));
      else
        dims.append(py::none());
    }
    shape = dims;
  }
  return py::make_tuple(text(t.name), shape, t.type);
}

py::dict info_dict(const onnx::ModelInfo& info) {
  py::dict d;
  d["ir_version"] = info.ir_version;
  d["producer"] = text(info.producer);
  py::list opsets, inputs, outputs, unsupported, types;
  for (const auto& o : info.opsets) opsets.append(py::make_tuple(text(o.domain), o.version));
  for (const auto& t : info.inputs) inputs.append(info_tuple(t));
  for (const auto& t : info.outputs) outputs.append(info_tuple(t));
  for (const auto& u : info.unsupported)
    unsupported.append(py::make_tuple(text(u.domain), text(u.op_type), u.opset, texts(u.nodes)));
  for (const auto& [what, type] : info.unsupported_types)
    types.append(py::make_tuple(text(what), text(type)));
  d["opsets"] = opsets;
  d["inputs"] = inputs;
  d["outputs"] = outputs;
  py::list histogram;
  for (const auto& [op, count] : info.op_histogram)
    histogram.append(py::make_tuple(text(op), count));
  d["op_histogram"] = histogram;
  d["num_nodes"] = info.num_nodes;
  d["num_initializers"] = info.num_initializers;
  d["unsupported"] = unsupported;
  d["unsupported_types"] = types;
  return d;
}

std::map<std::string, Tensor> tensor_dict(const py::dict& d, const std::string& what) {
  std::map<std::string, Tensor> out;
  for (auto [k, v] : d) {
    auto name = k.cast<std::string>();
    out.emplace(name, to_tensor(v, std::nullopt, what + " '" + name + "'"));
  }
  return out;
}

}  // namespace

void bind_onnx(py::module_& m) {
  py::class_<Model>(m, "_OnnxModel", "A parsed ONNX model (rlx/import/onnx.h).")
      .def_static("load", &Model::load, py::arg("path"), py::call_guard<py::gil_scoped_release>())
      .def_static(
          "from_bytes",
          [](const py::bytes& b, const std::string& external_data_dir) {
            char* data = nullptr;
            Py_ssize_t size = 0;
            if (PyBytes_AsStringAndSize(b.ptr(), &data, &size) != 0) throw py::error_already_set();
            return Model::from_bytes(std::string_view(data, static_cast<size_t>(size)),
                                     external_data_dir, "<bytes>");
          },
          py::arg("data"), py::arg("external_data_dir") = "")
      .def("info", [](const Model& model) { return info_dict(model.info()); })
      .def(
          "import_graph",
          [](const Model& model, const py::dict& input_shapes, const py::dict& input_values,
             const std::map<std::string, int64_t>& dim_params) {
            onnx::ImportOptions o;
            for (auto [k, v] : input_shapes)
              o.input_shapes.emplace(k.cast<std::string>(), Shape(v.cast<std::vector<int64_t>>()));
            o.input_values = tensor_dict(input_values, "input_values");
            o.dim_params = dim_params;
            onnx::ImportedGraph imported;
            {
              py::gil_scoped_release nogil;
              imported = model.import_graph(o);
            }
            py::dict params;
            for (const auto& [name, t] : imported.params) params[py::str(name)] = to_numpy(t);
            return py::make_tuple(std::make_shared<Graph>(std::move(imported.graph)), params,
                                  imported.inputs, imported.outputs);
          },
          py::arg("input_shapes"), py::arg("input_values"), py::arg("dim_params"));

  py::class_<InferenceSession>(m, "_OnnxSession", "rlx::onnx::InferenceSession.")
      .def(py::init([](const Model& model, const std::string& device,
                       const std::optional<std::string>& precision) {
             CompileOptions o;
             if (precision) o.precision = to_precision(*precision);
             return std::make_unique<InferenceSession>(model, Device::parse(device), o);
           }),
           py::arg("model"), py::arg("device") = "cpu", py::arg("precision") = py::none())
      .def(
          "run",
          [](InferenceSession& s, const std::vector<std::string>& names, const py::dict& feed) {
            std::map<std::string, Tensor> feeds = tensor_dict(feed, "run: input");
            std::vector<Tensor> outs;
            {
              py::gil_scoped_release nogil;
              outs = s.run(names, feeds);
            }
            py::list l;
            for (const Tensor& t : outs) l.append(to_numpy(t));
            return l;
          },
          py::arg("output_names"), py::arg("input_feed"));
}

}  // namespace rlx::py_bind
