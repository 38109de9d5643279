// The binding families of rlx._core; module.cc calls each once.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

namespace rlx {
class Executable;
}

namespace rlx::py_bind {

/// Graph, Value, parse(), ops() (graph.cc).
void bind_graph(pybind11::module_& m);
/// Session, Executable, evaluate(), devices(), threads, _bench_run (runtime.cc).
void bind_runtime(pybind11::module_& m);
/// from_dlpack / to_dlpack and the DLPack capsule protocol (dlpack.cc).
void bind_dlpack(pybind11::module_& m);
/// SentenceEmbedder and default_model_dir (models.cc).
void bind_models(pybind11::module_& m);
/// grad, value_and_grad, vjp, jvp, hvp, vmap graph transforms (autodiff.cc).
void bind_autodiff(pybind11::module_& m);
/// train_demo and default_digits_path (train.cc).
void bind_train(pybind11::module_& m);
/// _OnnxModel and _OnnxSession, the ONNX importer (onnx.cc).
void bind_onnx(pybind11::module_& m);
/// _op_cases_json: the op-case table for the Python parity suite (testing.cc).
void bind_testing(pybind11::module_& m);
/// Mesh, PartitionSpec, pjrt_devices, compile_sharded, stablehlo_sharded (sharding.cc).
void bind_sharding(pybind11::module_& m);

/// An rlx.Executable over `exe` (runtime.cc), for bindings that compile outside a Session.
pybind11::object wrap_executable(std::shared_ptr<Executable> exe);

}  // namespace rlx::py_bind
