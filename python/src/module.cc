// The extension module rlx._core: the rlx.Error exception and every binding family.
#include "bindings.h"
#include "rlx/ir/error.h"

PYBIND11_MODULE(_core, m) {
  namespace py = pybind11;
  m.doc() = "rlx C++ core: IR builder, compile pipeline, CPU runtime, models";
  // rlx::Error (bad graph, attribute, input, parse error) -> rlx.Error, a RuntimeError. The
  // message may quote bytes of the user's file that are not UTF-8 (a malformed model's node
  // name): they become \xNN escapes, rather than a UnicodeDecodeError hiding the error.
  static PyObject* error_type =
      py::register_exception<rlx::Error>(m, "Error", PyExc_RuntimeError).ptr();
  py::register_exception_translator([](std::exception_ptr p) {  // tried before register_exception's
    try {
      if (p) std::rethrow_exception(p);
    } catch (const rlx::Error& e) {
      const std::string_view what = e.what();
      py::object message = py::reinterpret_steal<py::object>(PyUnicode_DecodeUTF8(
          what.data(), static_cast<Py_ssize_t>(what.size()), "backslashreplace"));
      PyErr_SetObject(error_type, message.ptr());
    }
  });
  rlx::py_bind::bind_graph(m);
  rlx::py_bind::bind_runtime(m);
  rlx::py_bind::bind_dlpack(m);
  rlx::py_bind::bind_models(m);
  rlx::py_bind::bind_autodiff(m);
  rlx::py_bind::bind_train(m);
  rlx::py_bind::bind_onnx(m);
  rlx::py_bind::bind_testing(m);
  rlx::py_bind::bind_sharding(m);
  rlx::py_bind::bind_custom(m);
}
