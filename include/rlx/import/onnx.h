// ONNX import: an ONNX model file (ModelProto, any IR version the onnx-ml.proto rlx was built
// from reads) -> an rlx Graph for concrete input shapes, and an onnxruntime-style session that
// imports and compiles once per set of input shapes. docs/onnx.md has the operator list.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rlx/ir/error.h"
#include "rlx/ir/graph.h"
#include "rlx/runtime/backend.h"
#include "rlx/runtime/session.h"

namespace rlx::onnx {

/// One dim of a declared ONNX tensor shape: `value` >= 0, or a symbolic `param` ("batch"), or
/// neither (unknown: value -1 and an empty param).
struct Dim {
  int64_t value = -1;
  std::string param;
};

/// A graph input or output as the model declares it (onnxruntime's NodeArg).
struct TensorInfo {
  std::string name;
  /// ONNX's type string: "tensor(float)", "tensor(int64)", "seq(tensor(float))", ...
  std::string type;
  /// The rlx dtype of a tensor type rlx has (absent for uint16, string, sequences, ...).
  std::optional<DType> dtype;
  /// Declared dims; absent when the model declares no shape at all.
  std::optional<std::vector<Dim>> dims;
};

/// An opset import: domain ("" is the default domain ai.onnx) and version.
struct OpsetId {
  std::string domain;
  int64_t version = 0;
};

/// An op type of the model that rlx cannot convert, with every node that uses it.
struct UnsupportedOp {
  std::string domain;  ///< "" for ai.onnx
  std::string op_type;
  int64_t opset = 0;  ///< the model's version of the op's domain
  std::vector<std::string> nodes;
};

/// What `rlx info` prints: header, opsets, inputs (initializers excluded), outputs, how often
/// each op type occurs ("Conv", "com.microsoft.Attention") and which of them rlx lacks.
struct ModelInfo {
  int64_t ir_version = 0;
  std::string producer;  ///< producer_name and producer_version
  std::vector<OpsetId> opsets;
  std::vector<TensorInfo> inputs;
  std::vector<TensorInfo> outputs;
  std::vector<std::pair<std::string, int64_t>> op_histogram;  ///< sorted by count, then name
  int64_t num_nodes = 0;
  int64_t num_initializers = 0;
  std::vector<UnsupportedOp> unsupported;
  /// Values of types rlx has no dtype for, as (what, type): graph inputs and outputs,
  /// initializers, declared intermediate values (value_info) and Cast / Constant results,
  /// e.g. ("input 'x'", "tensor(uint16)"), ("node 'c' (Cast)", "tensor(float8e4m3fn)").
  std::vector<std::pair<std::string, std::string>> unsupported_types;
};

/// How import_graph binds the model's free dims.
struct ImportOptions {
  /// Concrete shape per graph input name; inputs not listed use their declared dims.
  std::map<std::string, Shape> input_shapes;
  /// Sizes of symbolic dims (dim_param) of inputs not given in input_shapes.
  std::map<std::string, int64_t> dim_params;
  /// Inputs bound to values: imported as constants (no graph input), so converters that need
  /// a value at import time (an axes, shape, pads or K input; NonZero's data) can read it.
  /// Each must have the input's declared dtype and rank.
  std::map<std::string, Tensor> input_values;
  /// Largest tensor (bytes) the importer computes at import time to fold shape computations;
  /// a value needed statically (a Reshape's shape, Slice's starts) beyond it is an error.
  int64_t fold_limit_bytes = int64_t{64} << 20;
};

/// The graph of a model for concrete input shapes.
struct ImportedGraph {
  /// Inputs are the model's inputs (in model order), params its float initializers (their
  /// names made valid rlx names, see `inputs` / `params`), outputs its outputs in order.
  Graph graph;
  /// (ONNX name, rlx input name) per graph input, in graph input order (inputs bound by
  /// ImportOptions::input_values are constants and not listed).
  std::vector<std::pair<std::string, std::string>> inputs;
  /// (rlx param name, data) for every param of `graph`: views of the model's storage.
  std::vector<std::pair<std::string, Tensor>> params;
  /// ONNX output names, in graph output order.
  std::vector<std::string> outputs;
};

/// Thrown by Model::import_graph when a node needs at import time the value of a graph input
/// (e.g. the model feeds Reshape's shape or ReduceSum's axes from an input): `inputs` names
/// them (ONNX names). Binding them with ImportOptions::input_values imports the model;
/// InferenceSession does that itself for small integer inputs.
class InputValuesRequired : public Error {
 public:
  InputValuesRequired(const std::string& message, std::vector<std::string> inputs)
      : Error(message), inputs_(std::move(inputs)) {}
  const std::vector<std::string>& inputs() const { return inputs_; }

 private:
  std::vector<std::string> inputs_;
};

/// A parsed ONNX model. Copies share the parsed model (immutable); thread-safe to share.
class Model {
 public:
  /// Parses the file at `path`. Tensors stored as external data are read from files relative
  /// to the model's directory, mapped and viewed without a copy where their offset is aligned
  /// to the element size. Throws rlx::Error naming the file for a missing file, a truncated or
  /// malformed protobuf, a file over protobuf's 2 GiB message limit (such models keep their
  /// weights in external data), and for any structural problem found by validation (below).
  static Model load(const std::string& path);
  /// Parses serialized ModelProto bytes; `external_data_dir` resolves external data (empty:
  /// external data is an error). `what` names the source in errors.
  static Model from_bytes(std::string_view bytes, const std::string& external_data_dir = "",
                          const std::string& what = "<bytes>");

  const ModelInfo& info() const;

  /// Converts the model for concrete input shapes: binds the inputs (options, else declared
  /// dims), folds shape computations (Shape -> Gather -> Concat -> Reshape, ...) to constants,
  /// converts every node with its opset's semantics, and removes dead nodes. Throws one
  /// rlx::Error listing every unsupported op type (with its opset and node names) before
  /// converting anything; other errors name the node ("node 'Conv_3' (Conv, opset 13): ...").
  ImportedGraph import_graph(const ImportOptions& options = {}) const;

  struct Impl;

 private:
  explicit Model(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

/// Decodes one serialized TensorProto (the backend tests' input_N.pb / output_N.pb files):
/// raw_data or the typed fields, little-endian. Throws rlx::Error naming `what` for a malformed
/// message, a dtype rlx lacks, or data whose size does not match the dims.
Tensor parse_tensor_proto(std::string_view bytes, const std::string& what = "<tensor>");

/// The ONNX type string of an rlx dtype: "tensor(float)", "tensor(int64)", ...
std::string onnx_type_name(DType dtype);

/// An onnxruntime-style session: run(output_names, feeds) imports and compiles the model once
/// per distinct set of input shapes (the graph and executable are cached by those shapes), so
/// inputs with symbolic dims may change shape between runs. An input whose value a node needs
/// at import time (the model computes a shape, axes, pads, K or Resize's scales from it:
/// InputValuesRequired) is bound by value when it is small (integer or bool: at most
/// kMaxValueInputElements elements; float: at most kMaxValueInputFloats): such inputs are part
/// of the cache key, so each distinct value compiles once. Not thread-safe.
class InferenceSession {
 public:
  /// Compiles for `device` through an rlx::Session (so RLX_PRECISION etc. apply as there) with
  /// `options`. Throws rlx::Error when no backend serves the device.
  explicit InferenceSession(Model model, Device device = Device::cpu(),
                            CompileOptions options = CompileOptions{});

  const Model& model() const { return model_; }
  /// The model's inputs (initializers excluded) and outputs, as onnxruntime's get_inputs().
  const std::vector<TensorInfo>& inputs() const { return model_.info().inputs; }
  const std::vector<TensorInfo>& outputs() const { return model_.info().outputs; }

  /// Runs the model on `feeds` (ONNX input name -> tensor, every input, of its declared
  /// dtype) and returns the outputs named in `output_names` in that order (empty: all outputs
  /// in model order). Throws rlx::Error for a missing, unknown or mistyped input, an unknown
  /// output name, or anything import/compile report.
  std::vector<Tensor> run(const std::vector<std::string>& output_names,
                          const std::map<std::string, Tensor>& feeds);

  /// The imported graph for the given input shapes (imported and compiled on first use).
  /// The imported graph run() uses for `feeds` (imported and compiled on first use).
  const ImportedGraph& graph_for(const std::map<std::string, Tensor>& feeds);

  /// The most elements an integer / bool (float) input bound by value may have.
  static constexpr int64_t kMaxValueInputElements = 1024;
  static constexpr int64_t kMaxValueInputFloats = 16;

 private:
  struct Compiled {
    ImportedGraph imported;
    std::shared_ptr<Executable> exe;
  };
  Compiled& compiled_for(const std::map<std::string, Tensor>& feeds);

  Model model_;
  CompileOptions options_;
  Session session_;
  // Inputs bound by value (learned on first need), with the importer's message saying which
  // node needs them (repeated when a later feed is too large to bind).
  std::vector<std::pair<std::string, std::string>> value_inputs_;
  // Keyed on the input dims in model order, then the bytes of the inputs bound by value.
  std::map<std::string, std::unique_ptr<Compiled>> cache_;
};

}  // namespace rlx::onnx
