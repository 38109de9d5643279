// The ONNX importer's internals: the parsed model (Model::Impl), the per-node conversion context
// converters use, and the converter table every op family adds its rows to.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include RLX_ONNX_PROTO_HEADER
#include "rlx/import/onnx.h"
#include "rlx/io/file.h"

namespace rlx::onnx {

/// The parsed model, its validation results and its initializers (decoded at load: views of
/// the message's raw_data or of mapped external files, copies of typed fields).
struct Model::Impl {
  std::shared_ptr<const ::onnx::ModelProto> proto;
  std::string source;  ///< the file (or "<bytes>") for errors
  ModelInfo info;
  /// Opset version per domain ("" = ai.onnx; "ai.onnx" is folded into "").
  std::map<std::string, int64_t, std::less<>> opsets;
  /// Node indices of each graph (the main graph and every subgraph, e.g. If's branches) in a
  /// topological order; a node's subgraphs' reads from enclosing graphs count as its inputs.
  std::map<const ::onnx::GraphProto*, std::vector<int>> orders;
  /// Per subgraph: the names it (or a subgraph nested in it) reads from enclosing graphs, sorted.
  std::map<const ::onnx::GraphProto*, std::vector<std::string>> free_values;
  /// Initializers by name (of the main graph and of subgraphs).
  std::map<std::string, Tensor, std::less<>> initializers;
  /// External data files, mapped once (their views share the mapping).
  std::vector<std::shared_ptr<const FileMapping>> mappings;
};

namespace detail {

class Importer;

/// One node under conversion: typed access to its inputs (graph values or values known at
/// import time), attributes (with the spec's defaults given by the caller) and outputs. Every
/// error it raises names the node: "node 'N' (Op, opset V): ...".
class NodeContext {
 public:
  NodeContext(Importer& importer, const ::onnx::NodeProto& node, int64_t opset);

  Graph& g;
  const ::onnx::NodeProto& node;
  const int64_t opset;  ///< the model's version of the node's domain

  /// Number of inputs written (absent optional ones included as "").
  int num_inputs() const { return node.input_size(); }
  /// Input i is given (listed and not "").
  bool has_input(int i) const;
  /// The value of input i; fails naming the input when it is absent.
  Value input(int i) const;
  /// The value of input i when given, else nullopt.
  std::optional<Value> optional_input(int i) const;
  /// The shape of input i without creating a leaf for an initializer (for Shape, Size).
  Shape input_shape(int i) const;
  /// Every given input, in order (for variadic ops).
  std::vector<Value> inputs() const;
  /// The value of input i computed at import time (constants, initializers, shapes and what is
  /// computed from them), or nullopt when it depends on a graph input.
  std::optional<Tensor> static_input(int i) const;
  /// static_input(i), or a failure "input i ('what') must be known at import time" followed
  /// by `why` when given (an InputValuesRequired naming the graph inputs it depends on, when
  /// there are any).
  Tensor required_static(int i, const char* what, const char* why = nullptr) const;
  /// The value of `v` (a value this converter built or read) if known at import time.
  std::optional<Tensor> static_value(Value v) const;
  /// How many node inputs of the model (subgraphs included) and graph outputs read input i's
  /// value: 1 when this node is its only consumer.
  int64_t uses(int i) const;
  /// required_static(i) as integers.
  std::vector<int64_t> static_ints(int i, const char* what) const;
  /// required_static(i) as doubles.
  std::vector<double> static_doubles(int i, const char* what) const;

  /// Converts the subgraph held by attribute `name` (a GRAPH without inputs, e.g. If's
  /// then_branch) in place, as if its nodes stood at this node: its reads of enclosing values
  /// resolve by name, its own names go out of scope afterwards. Returns its outputs' values.
  std::vector<Value> inline_subgraph(std::string_view name);

  /// A subgraph converted into a self-contained rlx body (docs/ir.md "Regions") for cond,
  /// while_loop or scan: `graph`'s inputs are one per captured value (`captures`, values of
  /// the enclosing graph, passed as the op's leading operands), then one per subgraph input;
  /// its outputs are the subgraph's outputs.
  struct Region {
    Graph graph;
    std::vector<Value> captures;
  };
  /// The names the subgraph held by attribute `name` (or one nested in it) reads from
  /// enclosing graphs, sorted; fails when the attribute is not a graph.
  std::vector<std::string> free_values(std::string_view name) const;
  /// Converts the subgraph held by attribute `name` into a Region. `free` lists the enclosing
  /// names to capture (free_values(), or their union over several subgraphs, so that If's
  /// branches take the same operands): those known at import time become constants of the
  /// body (except float tensors of more than 16 elements: weights stay operands), the others
  /// body inputs in `free`'s order. `formals` types the subgraph's inputs (its declared types
  /// may be absent; a declared dtype that differs is an error naming the input).
  Region convert_region(std::string_view name, const std::vector<std::string>& free,
                        const std::vector<TensorType>& formals);

  int num_outputs() const { return node.output_size(); }
  /// Output i is requested (listed and not "").
  bool wants_output(int i) const;
  /// Binds output i (ignored when the node does not list it).
  void set_output(int i, Value v);

  bool has_attr(std::string_view name) const;
  int64_t attr_int(std::string_view name, int64_t def) const;
  double attr_float(std::string_view name, double def) const;
  std::string attr_string(std::string_view name, std::string def) const;
  std::vector<int64_t> attr_ints(std::string_view name, std::vector<int64_t> def = {}) const;
  std::vector<double> attr_floats(std::string_view name, std::vector<double> def = {}) const;
  /// The tensor attribute `name` (fails when absent).
  Tensor attr_tensor(std::string_view name) const;
  /// The attribute proto, or null.
  const ::onnx::AttributeProto* attr(std::string_view name) const;

  /// Throws rlx::Error "node 'N' (Op, opset V): <message>".
  [[noreturn]] void fail(const std::string& message) const;
  /// Fails unless `condition`.
  void require(bool condition, const std::string& message) const {
    if (!condition) fail(message);
  }
  /// "node 'N' (Op, opset V)".
  std::string where() const;

  /// A rank-0 constant.
  Value scalar(double v, DType dtype) { return g.scalar(v, dtype); }
  /// A 1-D i64 constant.
  Value ints(const std::vector<int64_t>& values);
  /// Normalizes an ONNX axis (negative counts from the end) against `rank`.
  int64_t axis(int64_t a, int64_t rank, const char* what = "axis") const;

 private:
  Importer& importer_;
};

/// A converter: reads the node through the context, emits rlx ops, binds the outputs.
using ConvertFn = std::function<void(NodeContext&)>;
/// (domain, op_type) -> converter; "" is the default domain.
using ConverterTable = std::map<std::pair<std::string, std::string>, ConvertFn, std::less<>>;

/// The table of every converter (built once from the families below).
const ConverterTable& converters();
/// The converter for (domain, op_type), or null ("ai.onnx" is the default domain).
const ConvertFn* find_converter(std::string_view domain, std::string_view op_type);

// Op families (one file each): add their rows to the table.
void add_elementwise_converters(ConverterTable& t);  // ops_elementwise.cc
void add_shape_converters(ConverterTable& t);        // ops_shape.cc
void add_index_converters(ConverterTable& t);        // ops_index.cc
void add_reduce_converters(ConverterTable& t);       // ops_reduce.cc
void add_nn_converters(ConverterTable& t);           // ops_nn.cc
void add_attention_converters(ConverterTable& t);    // ops_attention.cc
void add_resize_converters(ConverterTable& t);       // ops_resize.cc
void add_einsum_converters(ConverterTable& t);       // ops_einsum.cc
void add_rnn_converters(ConverterTable& t);          // ops_rnn.cc
void add_contrib_converters(ConverterTable& t);      // ops_contrib.cc
void add_control_converters(ConverterTable& t);      // ops_control.cc

/// The rlx dtype of ONNX TensorProto.DataType `t`, or nullopt for types rlx lacks.
std::optional<DType> dtype_of(int32_t t);
/// ONNX's name of element type `t`: "float", "int64", "uint16", ...
std::string onnx_elem_name(int32_t t);
/// Decodes an initializer / Constant / test-data tensor. `owner` keeps raw_data alive for a
/// zero-copy view (null: copy); external data is read through `model` (null: an error).
Tensor decode_tensor(const ::onnx::TensorProto& t, const std::string& what,
                     const std::shared_ptr<const void>& owner, Model::Impl* model,
                     const std::string& external_dir);

/// ORT's ConvBNFusion / ConvMulFusion / ConvAddFusion at import time: when `v` is a conv
/// (optionally plus a bias known at import time, broadcast per output channel) whose weight is
/// known at import time, returns conv(x, w * scale) + (bias * scale + shift), computing the
/// new weight and bias now. `scale` / `shift` (absent: 1 / 0) must hold one value or one per
/// output channel, broadcasting along dim 1 of v only; else returns nullopt (and so for any
/// other v). The caller checks that v has no other consumer.
std::optional<Value> fold_affine_into_conv(NodeContext& c, Value v,
                                           const std::optional<Tensor>& scale,
                                           const std::optional<Tensor>& shift);

/// Numpy broadcasting helpers shared by the converters.
/// x reshaped to rank `rank` by prepending 1s.
Value to_rank(Graph& g, Value x, int64_t rank);

}  // namespace detail
}  // namespace rlx::onnx
