// The binding families of rlx._core; module.cc calls each once.
#pragma once

#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <string>

#include "rlx/backends/pjrt/sharding.h"

namespace rlx {
class Executable;
class Session;
struct CompileOptions;
}  // namespace rlx

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
/// Trainer, SGD, AdamW, the loss / dropout builders on Graph, initialize, load_safetensors,
/// save_safetensors, train_demo and default_digits_path (train.cc).
void bind_train(pybind11::module_& m);
/// _OnnxModel and _OnnxSession, the ONNX importer (onnx.cc).
void bind_onnx(pybind11::module_& m);
/// _op_cases_json: the op-case table for the Python parity suite (testing.cc).
void bind_testing(pybind11::module_& m);
/// Mesh, PartitionSpec, pjrt_devices, compile_sharded, stablehlo_sharded (sharding.cc).
void bind_sharding(pybind11::module_& m);
/// rlx._core.custom_call, register_callback, custom_op_names; registers py.custom_vjp and
/// py.pure_callback (python/src/custom.cc).
void bind_custom(pybind11::module_& m);

/// An rlx.Executable over `exe` (runtime.cc), for bindings that compile outside a Session.
pybind11::object wrap_executable(std::shared_ptr<Executable> exe);

/// The Session of an rlx.Session object (runtime.cc); rlx::Error if `session` is not one.
Session& session_of(const pybind11::handle& session);
/// CompileOptions from the keyword options Session.compile takes (but dump_stages), over
/// `session`'s precision default (runtime.cc). Errors ("<what>: unknown option 'x' (options:
/// ...)") start with `what`.
CompileOptions compile_options_of(const pybind11::handle& session, const pybind11::kwargs& kw,
                                  const std::string& what);

/// PartitionSpecs by tensor name from a dict of name -> rlx.P(...) or None (replicated)
/// (sharding.cc); rlx::Error naming `what` and the key on anything else.
std::map<std::string, pjrt::PartitionSpec> specs_of(const pybind11::dict& d,
                                                    const std::string& what);

}  // namespace rlx::py_bind
