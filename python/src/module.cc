// The extension module rlx._core: the rlx.Error exception and every binding family.
#include "bindings.h"
#include "rlx/ir/error.h"

PYBIND11_MODULE(_core, m) {
  namespace py = pybind11;
  m.doc() = "rlx C++ core: IR builder, compile pipeline, CPU runtime, models";
  // rlx::Error (bad graph, attribute, input, parse error) -> rlx.Error, a RuntimeError.
  py::register_exception<rlx::Error>(m, "Error", PyExc_RuntimeError);
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
