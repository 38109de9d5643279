// The ONNX importer on models built here with the generated protobuf classes: tensor decoding
// (raw_data, typed fields, external data), shape folding, by-value inputs, opset differences,
// and every kind of malformed file ending in an rlx::Error that names the file and node.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include RLX_ONNX_PROTO_HEADER
#include "common/scoped_env.h"
#include "rlx/import/onnx.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"

namespace rlx::onnx {
namespace {

using ::onnx::ModelProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;
using rlx::testing::TempDir;

// A model under construction: opset 17 unless given.
struct Builder {
  ModelProto m;
  explicit Builder(int64_t opset = 17) {
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m.mutable_graph()->set_name("g");
  }
  void input(const std::string& name, int32_t type, const std::vector<std::string>& dims) {
    auto* v = m.mutable_graph()->add_input();
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    t->mutable_shape();  // declared, rank 0 when `dims` is empty
    for (const std::string& d : dims) {
      auto* dim = t->mutable_shape()->add_dim();
      if (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0])))
        dim->set_dim_value(std::stoll(d));
      else
        dim->set_dim_param(d);
    }
  }
  void output(const std::string& name) { m.mutable_graph()->add_output()->set_name(name); }
  NodeProto* node(const std::string& op, const std::vector<std::string>& in,
                  const std::vector<std::string>& out, const std::string& name = "") {
    NodeProto* n = m.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(m.graph().node_size()) : name);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return n;
  }
  TensorProto* initializer(const std::string& name, int32_t type,
                           const std::vector<int64_t>& dims) {
    TensorProto* t = m.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    return t;
  }
  void ints(const std::string& name, const std::vector<int64_t>& v) {
    TensorProto* t = initializer(name, TensorProto::INT64, {static_cast<int64_t>(v.size())});
    for (int64_t x : v) t->add_int64_data(x);
  }
  Model model() const { return Model::from_bytes(m.SerializeAsString(), "", "test.onnx"); }
};

void attr_int(NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The InputValuesRequired that importing `m` without input values throws: the inputs it
// names and its message (none when the import needs no input's value).
std::pair<std::vector<std::string>, std::string> inputs_required(const Model& m) {
  try {
    m.import_graph();
  } catch (const InputValuesRequired& e) {
    return {e.inputs(), e.what()};
  }
  return {};
}

Tensor floats(Shape s, std::vector<double> v) { return Tensor::from_doubles(DType::f32, s, v); }

TEST(OnnxImport, RawAndTypedInitializersAgree) {
  Builder b;
  b.input("x", TensorProto::FLOAT, {"2", "20"});
  // The same 20 x 3 weight once as raw_data, once as float_data.
  std::vector<float> w(60);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.25f - 3;
  TensorProto* raw = b.initializer("w_raw", TensorProto::FLOAT, {20, 3});
  raw->set_raw_data(std::string(reinterpret_cast<const char*>(w.data()), w.size() * 4));
  TensorProto* typed = b.initializer("w_typed", TensorProto::FLOAT, {20, 3});
  for (float v : w) typed->add_float_data(v);
  b.node("MatMul", {"x", "w_raw"}, {"a"});
  b.node("MatMul", {"x", "w_typed"}, {"b"});
  b.node("Sub", {"a", "b"}, {"y"});
  b.output("y");
  ImportedGraph ig = b.model().import_graph();
  ASSERT_EQ(ig.params.size(), 2u);
  TensorMap feeds{{"x", Tensor::full(DType::f32, Shape{2, 20}, 1.0)}};
  for (const auto& [name, t] : ig.params) feeds.emplace(name, t);
  Tensor y = evaluate(ig.graph, feeds)[0];
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y.get_f64(i), 0.0);
  EXPECT_NE(ig.params[0].second.get_f64(5), 0.0);
}

TEST(OnnxImport, RawDataIsViewedNotCopied) {
  Builder b;
  b.input("x", TensorProto::FLOAT, {"20"});
  TensorProto* w = b.initializer("w", TensorProto::FLOAT, {20});
  w->set_raw_data(std::string(80, '\0'));
  b.node("Add", {"x", "w"}, {"y"});
  b.output("y");
  ImportedGraph ig = b.model().import_graph();
  ASSERT_EQ(ig.params.size(), 1u);
  // The view shares the parsed message's buffer: two imports hand out the same address.
  Model m = b.model();
  EXPECT_EQ(m.import_graph().params[0].second.data(), m.import_graph().params[0].second.data());
}

TEST(OnnxImport, ExternalDataIsMappedAndChecked) {
  TempDir dir;
  std::vector<float> w(24);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  {
    std::ofstream f(dir.file("weights.bin"), std::ios::binary);
    f.write("pad!", 4);  // offset 4: aligned for f32, so mapped without a copy
    f.write(reinterpret_cast<const char*>(w.data()), 96);
  }
  Builder b;
  b.input("x", TensorProto::FLOAT, {"24"});
  TensorProto* t = b.initializer("w", TensorProto::FLOAT, {24});
  t->set_data_location(TensorProto::EXTERNAL);
  auto kv = [&](const std::string& k, const std::string& v) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  kv("location", "weights.bin");
  kv("offset", "4");
  kv("length", "96");
  b.node("Mul", {"x", "w"}, {"y"});
  b.output("y");
  {
    std::ofstream f(dir.file("m.onnx"), std::ios::binary);
    f << b.m.SerializeAsString();
  }
  ImportedGraph ig = Model::load(dir.file("m.onnx")).import_graph();
  ASSERT_EQ(ig.params.size(), 1u);
  EXPECT_EQ(ig.params[0].second.get_f64(23), 23.0);
  // A location outside the model's directory, a short file, and bytes without a directory.
  t->mutable_external_data(0)->set_value("../weights.bin");
  EXPECT_NE(error_of([&] { b.model(); }).find("leaves the model's directory"), std::string::npos);
  t->mutable_external_data(0)->set_value("weights.bin");
  EXPECT_NE(error_of([&] { b.model(); }).find("without a directory"), std::string::npos);
  t->mutable_external_data(1)->set_value("8");
  {
    std::ofstream f(dir.file("m.onnx"), std::ios::binary);
    f << b.m.SerializeAsString();
  }
  EXPECT_NE(error_of([&] { Model::load(dir.file("m.onnx")); }).find("has 100 bytes"),
            std::string::npos);
}

// Shape -> Gather -> Unsqueeze -> Concat -> Reshape folds: the graph keeps one reshape.
TEST(OnnxImport, ShapeSubgraphsFoldToConstants) {
  Builder b(13);
  b.input("x", TensorProto::FLOAT, {"batch", "6"});
  b.ints("zero", {0});
  b.ints("idx", {0});
  b.ints("tail", {2, 3});
  b.node("Shape", {"x"}, {"s"});
  b.node("Gather", {"s", "idx"}, {"n"});
  b.node("Concat", {"n", "tail"}, {"shape"});
  attr_int(b.m.mutable_graph()->mutable_node(2), "axis", 0);
  b.node("Reshape", {"x", "shape"}, {"y"});
  b.output("y");
  ImportOptions o;
  o.dim_params["batch"] = 5;
  ImportedGraph ig = b.model().import_graph(o);
  int computing = 0;
  for (const Node& n : ig.graph.nodes())
    if (n.op != OpKind::Input && n.op != OpKind::Constant) ++computing;
  EXPECT_EQ(computing, 1) << ig.graph.to_string();
  EXPECT_EQ(ig.graph.shape(ig.graph.outputs()[0]), (Shape{5, 2, 3}));
  // Another batch size: the same model imports to another concrete graph.
  o.dim_params["batch"] = 2;
  EXPECT_EQ(b.model().import_graph(o).graph.shape(ig.graph.outputs()[0]), (Shape{2, 2, 3}));
}

TEST(OnnxImport, InputNeededAsValueIsNamedAndCanBeBound) {
  Builder b(13);
  b.input("x", TensorProto::FLOAT, {"2", "3"});
  b.input("axes", TensorProto::INT64, {"1"});
  b.node("ReduceSum", {"x", "axes"}, {"y"}, "sum");
  b.output("y");
  Model m = b.model();
  auto [needed, message] = inputs_required(m);
  EXPECT_EQ(needed, std::vector<std::string>{"axes"});
  EXPECT_NE(message.find("node 'sum' (ReduceSum, opset 13)"), std::string::npos) << message;
  InferenceSession s(m);
  std::vector<Tensor> y =
      s.run({}, {{"x", floats({2, 3}, {1, 2, 3, 4, 5, 6})},
                 {"axes", Tensor::from_ints(DType::i64, Shape{1}, std::vector<int64_t>{1})}});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].shape(), (Shape{2, 1}));
  EXPECT_EQ(y[0].get_f64(1), 15.0);
  // Another value of the bound input compiles again and reduces the other axis.
  y = s.run({"y"}, {{"x", floats({2, 3}, {1, 2, 3, 4, 5, 6})},
                    {"axes", Tensor::from_ints(DType::i64, Shape{1}, std::vector<int64_t>{0})}});
  EXPECT_EQ(y[0].shape(), (Shape{1, 3}));
  EXPECT_EQ(y[0].get_f64(2), 9.0);
}

// A GRAPH attribute `name` of `n` holding a subgraph (an If branch) with `outputs`; its nodes
// are added by the caller through the returned pointer.
::onnx::GraphProto* subgraph(NodeProto* n, const std::string& name,
                             const std::vector<std::string>& outputs) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::GRAPH);
  ::onnx::GraphProto* g = a->mutable_g();
  g->set_name(name);
  for (const std::string& o : outputs) g->add_output()->set_name(o);
  return g;
}

NodeProto* sub_node(::onnx::GraphProto* g, const std::string& op,
                    const std::vector<std::string>& in, const std::vector<std::string>& out) {
  NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(g->name() + "/" + op);
  for (const auto& i : in) n->add_input(i);
  for (const auto& o : out) n->add_output(o);
  return n;
}

// Adds input `name` of element type `type` (shape left undeclared) to subgraph `g`.
void sub_input(::onnx::GraphProto* g, const std::string& name, int32_t type) {
  auto* v = g->add_input();
  v->set_name(name);
  v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
}

// Gives Loop node `loop` a body with inputs (i: int64, go_in: bool, then `carried`: name and
// type) and `outputs`; its nodes are added by the caller through the returned pointer.
::onnx::GraphProto* loop_body(NodeProto* loop,
                              const std::vector<std::pair<std::string, int32_t>>& carried,
                              const std::vector<std::string>& outputs) {
  auto* body = subgraph(loop, "body", outputs);
  sub_input(body, "i", TensorProto::INT64);
  sub_input(body, "go_in", TensorProto::BOOL);
  for (const auto& [name, type] : carried) sub_input(body, name, type);
  return body;
}

// Gives Scan node `scan` the body of a cumulative sum: (s, x_t) -> (s + x_t, s + x_t).
void add_cumsum_body(NodeProto* scan) {
  auto* body = subgraph(scan, "body", {"s_out", "y_t"});
  sub_input(body, "s_in", TensorProto::FLOAT);
  sub_input(body, "x_t", TensorProto::FLOAT);
  sub_node(body, "Add", {"s_in", "x_t"}, {"s_out"});
  sub_node(body, "Identity", {"s_out"}, {"y_t"});
}

// The op kinds of `g`'s top-level nodes other than inputs and constants, in order.
std::string op_list(const Graph& g) {
  std::string ops;
  for (const Node& n : g.nodes())
    if (n.op != OpKind::Input && n.op != OpKind::Constant) ops += std::string(op_name(n.op)) + " ";
  return ops;
}

// If on an input shape (silero-vad's exporter emits 25 of them): the condition folds once the
// shape is bound and the taken branch is inlined; the branches return different ranks, read
// values of the enclosing graph (one defined after the If in the file), and nest.
TEST(OnnxImport, IfWithAConditionKnownAtImportIsInlined) {
  Builder b(13);
  b.input("x", TensorProto::FLOAT, {"batch", "4"});
  b.ints("idx", {0});
  b.ints("one", {1});
  b.ints("axes0", {0});
  b.node("Shape", {"x"}, {"s"});
  b.node("Gather", {"s", "idx"}, {"n"});
  b.node("Equal", {"n", "one"}, {"is1"});
  b.node("Squeeze", {"is1"}, {"cond"});
  NodeProto* if_node = b.node("If", {"cond"}, {"y"}, "if_batch1");
  // then (batch 1): squeeze the batch dim, [4]; reads x, axes0 and r from the enclosing graph.
  auto* then_g = subgraph(if_node, "then_branch", {"t_out"});
  sub_node(then_g, "Add", {"x", "r"}, {"t_sum"});
  sub_node(then_g, "Squeeze", {"t_sum", "axes0"}, {"t_out"});
  // else: a nested If on a constant true condition, whose branch doubles x: [batch, 4].
  auto* else_g = subgraph(if_node, "else_branch", {"e_out"});
  NodeProto* c = sub_node(else_g, "Constant", {}, {"e_true"});
  auto* ca = c->add_attribute();
  ca->set_name("value");
  ca->set_type(::onnx::AttributeProto::TENSOR);
  ca->mutable_t()->set_data_type(TensorProto::BOOL);
  ca->mutable_t()->add_int32_data(1);
  NodeProto* inner = sub_node(else_g, "If", {"e_true"}, {"e_out"});
  auto* inner_then = subgraph(inner, "then_branch", {"i_out"});
  sub_node(inner_then, "Add", {"x", "x"}, {"i_out"});
  auto* inner_else = subgraph(inner, "else_branch", {"x"});  // an enclosing value as output
  (void)inner_else;
  b.node("Relu", {"x"}, {"r"}, "relu_after_if");  // read by then_branch: ordered before the If
  b.output("y");
  Model m = b.model();
  EXPECT_EQ(m.info().num_nodes, 11);  // subgraphs' nodes counted
  InferenceSession s(m);
  Tensor y1 = s.run({}, {{"x", floats({1, 4}, {-1, 2, -3, 4})}})[0];
  EXPECT_EQ(y1.shape(), (Shape{4}));
  EXPECT_EQ(y1.get_f64(0), -1.0);  // -1 + relu(-1)
  EXPECT_EQ(y1.get_f64(1), 4.0);   // 2 + relu(2)
  Tensor y2 = s.run({}, {{"x", floats({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8})}})[0];
  EXPECT_EQ(y2.shape(), (Shape{2, 4}));
  EXPECT_EQ(y2.get_f64(7), 16.0);
  // No control flow is left in the graph.
  ImportOptions o;
  o.dim_params["batch"] = 1;
  ImportedGraph ig = m.import_graph(o);
  EXPECT_EQ(op_list(ig.graph), "relu add squeeze ") << ig.graph.to_string();
}

// A condition computed from an input's data becomes a `cond` whose branches capture the
// enclosing values they read; branches returning different types fold instead when the
// condition comes from inputs small enough to bind by value, else the error names the node.
TEST(OnnxImport, DataDependentIfRunsAsCond) {
  // y = If(sum(x) > 0, then: -x, else: else_op(x)), the If named `name`.
  auto model = [](const std::string& else_op, const std::string& name) {
    Builder b(13);
    b.input("x", TensorProto::FLOAT, {"n"});
    b.node("ReduceSum", {"x"}, {"sum"});
    b.ints("zero_f", {0});
    b.node("Cast", {"zero_f"}, {"zero"});
    attr_int(b.m.mutable_graph()->mutable_node(1), "to", TensorProto::FLOAT);
    b.node("Greater", {"sum", "zero"}, {"pos"});
    b.node("Squeeze", {"pos"}, {"cond"});
    NodeProto* if_node = b.node("If", {"cond"}, {"y"}, name);
    sub_node(subgraph(if_node, "then_branch", {"a"}), "Neg", {"x"}, {"a"});
    sub_node(subgraph(if_node, "else_branch", {"c"}), else_op, {"x"}, {"c"});
    b.output("y");
    return b.model();
  };
  Model m = model("Abs", "if_positive");
  ImportOptions o;
  o.dim_params["n"] = 3;
  EXPECT_EQ(op_list(m.import_graph(o).graph), "reduce_sum convert gt squeeze cond ");
  InferenceSession s(m);
  EXPECT_EQ(s.run({}, {{"x", floats({3}, {1, 2, -1})}})[0].get_f64(0), -1.0);
  EXPECT_EQ(s.run({}, {{"x", floats({3}, {-1, -2, 1})}})[0].get_f64(0), 1.0);
  std::vector<double> big(64, 1.0);
  big[5] = -70;
  EXPECT_EQ(s.run({}, {{"x", floats({64}, big)}})[0].get_f64(5), 70.0);

  // Branches of different shapes: no cond; the session binds 3 floats by value and folds, 64
  // floats it cannot bind.
  InferenceSession s2(model("ReduceSum", "if_shapes"));
  EXPECT_EQ(s2.run({}, {{"x", floats({3}, {1, 2, -1})}})[0].shape(), (Shape{3}));
  EXPECT_EQ(s2.run({}, {{"x", floats({3}, {-1, -2, 1})}})[0].shape(), (Shape{1}));
  std::string e = error_of([&] { s2.run({}, {{"x", floats({64}, big)}}); });
  EXPECT_NE(e.find("node 'if_shapes' (If, opset 13)"), std::string::npos) << e;
  EXPECT_NE(e.find("in then_branch but f32[1] in else_branch; rlx's cond needs both branches "
                   "to return the same types"),
            std::string::npos)
      << e;
  // A branch reading a name nothing defines fails at load, naming the node.
  Builder bad(13);
  bad.input("x", TensorProto::BOOL, {});
  NodeProto* n = bad.node("If", {"x"}, {"y"});
  sub_node(subgraph(n, "then_branch", {"a"}), "Not", {"nope"}, {"a"});
  sub_node(subgraph(n, "else_branch", {"c"}), "Not", {"x"}, {"c"});
  bad.output("y");
  e = error_of([&] { bad.model(); });
  EXPECT_NE(e.find("reads 'nope', which no node, graph input or initializer defines (in this "
                   "subgraph or an enclosing graph)"),
            std::string::npos)
      << e;
}

// Loop with a condition the body computes (doubling y while it is below `limit`, an enclosing
// input the body captures) and a constant M bounding it: a while_loop; the counter carry
// counts iterations.
TEST(OnnxImport, LoopWithADynamicConditionIsAWhileLoop) {
  Builder b(13);
  b.input("x", TensorProto::FLOAT, {});
  b.input("limit", TensorProto::FLOAT, {});
  b.ints("m", {5});
  b.ints("n0", {0});
  b.ints("one", {1});
  b.node("Less", {"x", "limit"}, {"go"});
  NodeProto* loop = b.node("Loop", {"m", "go", "x", "n0"}, {"y", "n"}, "doubling");
  auto* body = loop_body(loop, {{"y_in", TensorProto::FLOAT}, {"n_in", TensorProto::INT64}},
                         {"go_out", "y2", "n1"});
  sub_node(body, "Add", {"y_in", "y_in"}, {"y2"});
  sub_node(body, "Less", {"y2", "limit"}, {"go_out"});
  sub_node(body, "Add", {"i", "one"}, {"n1"});
  b.output("y");
  b.output("n");
  Model m = b.model();
  EXPECT_EQ(op_list(m.import_graph().graph), "lt while_loop ");
  InferenceSession s(m);
  auto run = [&](double x, double limit) {
    std::vector<Tensor> r = s.run({}, {{"x", floats({}, {x})}, {"limit", floats({}, {limit})}});
    return std::make_pair(r[0].get_f64(0), r[1].get_i64(0));
  };
  EXPECT_EQ(run(1, 10), std::make_pair(16.0, int64_t{4}));   // the condition stops it
  EXPECT_EQ(run(3, 100), std::make_pair(96.0, int64_t{5}));  // M stops it (6 would be needed)
  EXPECT_EQ(run(5, 2), std::make_pair(5.0, int64_t{0}));     // false at entry: no iteration
}

// A value a body needs at import time (a Reshape's shape) computed from an enclosing graph
// input: InputValuesRequired names that input, and the session binds it by value.
TEST(OnnxImport, BodyValueNeededAtImportNamesTheEnclosingInput) {
  Builder b(13);
  b.input("x", TensorProto::FLOAT, {"3"});
  b.input("shape", TensorProto::INT64, {"1"});
  b.ints("m", {2});
  NodeProto* loop = b.node("Loop", {"m", "", "x"}, {"y"}, "reshaping");
  auto* body = loop_body(loop, {{"y_in", TensorProto::FLOAT}}, {"go_in", "y2"});
  sub_node(body, "Add", {"y_in", "y_in"}, {"sum"});
  sub_node(body, "Reshape", {"sum", "shape"}, {"y2"});
  b.output("y");
  Model m = b.model();
  EXPECT_EQ(inputs_required(m).first, std::vector<std::string>{"shape"});
  InferenceSession s(m);
  Tensor y =
      s.run({}, {{"x", floats({3}, {1, 2, 3})},
                 {"shape", Tensor::from_ints(DType::i64, Shape{1}, std::vector<int64_t>{3})}})[0];
  EXPECT_EQ(y.get_f64(2), 12.0);  // 3 doubled twice
}

// Loop with constant M and no condition: a scan of M steps whose ys are the scan outputs. The
// body holds an If on the iteration's parity (a cond inside the scan's body) whose branches
// read the body's state and x, captured from the main graph through the loop.
TEST(OnnxImport, LoopWithConstantTripCountStacksScanOutputs) {
  Builder b(13);
  b.input("x", TensorProto::FLOAT, {"2"});
  b.ints("m", {4});
  b.ints("two", {2});
  b.ints("zero", {0});
  NodeProto* loop = b.node("Loop", {"m", "", "x"}, {"acc", "rows"}, "alternate");
  auto* body = loop_body(loop, {{"acc_in", TensorProto::FLOAT}}, {"go_in", "acc2", "acc2"});
  sub_node(body, "Mod", {"i", "two"}, {"parity"});
  sub_node(body, "Equal", {"parity", "zero"}, {"even1"});
  sub_node(body, "Squeeze", {"even1"}, {"even"});
  NodeProto* branch = sub_node(body, "If", {"even"}, {"acc2"});
  sub_node(subgraph(branch, "then_branch", {"t"}), "Add", {"acc_in", "x"}, {"t"});
  sub_node(subgraph(branch, "else_branch", {"e"}), "Sub", {"acc_in", "x"}, {"e"});
  b.output("acc");
  b.output("rows");
  Model m = b.model();
  ImportedGraph ig = m.import_graph();
  EXPECT_EQ(op_list(ig.graph), "scan ");
  InferenceSession s(m);
  std::vector<Tensor> r = s.run({}, {{"x", floats({2}, {1, -3})}});
  EXPECT_EQ(r[0].shape(), (Shape{2}));
  EXPECT_EQ(r[0].get_f64(1), -3.0);  // x + x - x + x - x
  ASSERT_EQ(r[1].shape(), (Shape{4, 2}));
  const std::vector<double> rows{2, -6, 1, -3, 2, -6, 1, -3};
  for (int64_t k = 0; k < 8; ++k) EXPECT_EQ(r[1].get_f64(k), rows[static_cast<size_t>(k)]) << k;
}

// Scan over axis 1 in reverse, its output reversed and stacked on axis 1: a reverse cumulative
// sum along axis 1 (Y[:, j] = sum of X[:, j:]), and the final state the row sums.
TEST(OnnxImport, ScanWithAxesAndDirectionsIsAReverseCumsum) {
  Builder b(16);
  b.input("s0", TensorProto::FLOAT, {"2"});
  b.input("x", TensorProto::FLOAT, {"2", "3"});
  NodeProto* scan = b.node("Scan", {"s0", "x"}, {"s", "y"}, "rcumsum");
  attr_int(scan, "num_scan_inputs", 1);
  for (const char* name :
       {"scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions"}) {
    auto* a = scan->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
    a->add_ints(1);
  }
  add_cumsum_body(scan);
  b.output("s");
  b.output("y");
  InferenceSession s(b.model());
  std::vector<Tensor> r =
      s.run({}, {{"s0", floats({2}, {0, 10})}, {"x", floats({2, 3}, {1, 2, 3, 4, 5, 6})}});
  EXPECT_EQ(r[0].get_f64(0), 6.0);
  EXPECT_EQ(r[0].get_f64(1), 25.0);
  ASSERT_EQ(r[1].shape(), (Shape{2, 3}));
  const std::vector<double> y{6, 5, 3, 25, 21, 16};
  for (int64_t k = 0; k < 6; ++k) EXPECT_EQ(r[1].get_f64(k), y[static_cast<size_t>(k)]) << k;
}

// Scan outputs of a Loop the body's condition can stop early (their length is only known at
// run time) are an error; Scan opset 8 runs, but not with short sequence_lens.
TEST(OnnxImport, UnsupportedControlFlowFormsAreErrorsNamingTheNodeAndScan8Runs) {
  Builder b(13);
  b.input("x", TensorProto::FLOAT, {});
  b.ints("m", {5});
  b.ints("t", {1});
  b.node("Cast", {"t"}, {"go"});
  attr_int(b.m.mutable_graph()->mutable_node(0), "to", TensorProto::BOOL);
  NodeProto* loop = b.node("Loop", {"m", "go", "x"}, {"y", "ys"}, "until_big");
  auto* body = loop_body(loop, {{"y_in", TensorProto::FLOAT}}, {"go_out", "y2", "y2"});
  sub_node(body, "Add", {"y_in", "y_in"}, {"y2"});
  sub_node(body, "Less", {"y2", "x"}, {"go_out"});
  b.output("y");
  b.output("ys");
  std::string e = error_of([&] { b.model().import_graph(); });
  EXPECT_NE(e.find("node 'until_big' (Loop, opset 13): has scan outputs and a condition the "
                   "body computes per iteration, so the number of rows of the scan outputs is "
                   "only known at run time"),
            std::string::npos)
      << e;

  // Scan opset 8 (batch axis first, one scan per row) runs; sequence_lens shorter than the
  // sequence are an error.
  Builder old(8);
  old.input("s0", TensorProto::FLOAT, {"2", "2"});
  old.input("x", TensorProto::FLOAT, {"2", "3", "2"});
  old.ints("lens", {3, 2});
  NodeProto* scan = old.node("Scan", {"", "s0", "x"}, {"s", "y"}, "scan8");
  attr_int(scan, "num_scan_inputs", 1);
  add_cumsum_body(scan);
  old.output("s");
  old.output("y");
  InferenceSession s8(old.model());
  std::vector<Tensor> r =
      s8.run({}, {{"s0", floats({2, 2}, {0, 0, 100, 200})},
                  {"x", floats({2, 3, 2}, {1, 2, 3, 4, 5, 6, 1, 1, 1, 1, 1, 1})}});
  ASSERT_EQ(r[1].shape(), (Shape{2, 3, 2}));
  const std::vector<double> want{1, 2, 4, 6, 9, 12, 101, 201, 102, 202, 103, 203};
  for (int64_t k = 0; k < 12; ++k) EXPECT_EQ(r[1].get_f64(k), want[static_cast<size_t>(k)]) << k;
  EXPECT_EQ(r[0].get_f64(3), 203.0);
  scan->set_input(0, "lens");
  e = error_of([&] { old.model().import_graph(); });
  EXPECT_NE(e.find("node 'scan8' (Scan, opset 8): sequence_lens holds 2; only full-length "
                   "sequences (3) are supported"),
            std::string::npos)
      << e;
}

// Softmax changed meaning at opset 13: before, over the flattened trailing dims.
TEST(OnnxImport, SoftmaxFollowsItsOpset) {
  for (int64_t opset : {11, 13}) {
    Builder b(opset);
    b.input("x", TensorProto::FLOAT, {"2", "2"});
    NodeProto* n = b.node("Softmax", {"x"}, {"y"});
    attr_int(n, "axis", 0);
    b.output("y");
    InferenceSession s(b.model());
    Tensor y = s.run({}, {{"x", floats({2, 2}, {0, 0, 0, 0})}})[0];
    // opset 11, axis 0: one softmax over all 4 elements (0.25); opset 13: per column (0.5).
    EXPECT_NEAR(y.get_f64(0), opset == 11 ? 0.25 : 0.5, 1e-6) << "opset " << opset;
  }
}

TEST(OnnxImport, UnsupportedOpsAreListedTogetherFirst) {
  Builder b;
  b.input("x", TensorProto::FLOAT, {"2"});
  b.node("Relu", {"x"}, {"a"});
  b.node("FooOp", {"a"}, {"b"}, "foo1");
  b.node("BarOp", {"b"}, {"c"}, "bar1");
  b.node("FooOp", {"c"}, {"y"}, "foo2");
  b.output("y");
  Model m = b.model();
  ASSERT_EQ(m.info().unsupported.size(), 2u);
  std::string e = error_of([&] { m.import_graph(); });
  EXPECT_NE(e.find("2 op type(s) not supported"), std::string::npos) << e;
  EXPECT_NE(e.find("BarOp (opset 17): 1 node(s) 'bar1'"), std::string::npos) << e;
  EXPECT_NE(e.find("FooOp (opset 17): 2 node(s) 'foo1', 'foo2'"), std::string::npos) << e;
}

TEST(OnnxImport, MalformedFilesGiveErrorsNamingTheProblem) {
  Builder b;
  b.input("x", TensorProto::FLOAT, {"2"});
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  const std::string bytes = b.m.SerializeAsString();
  // Truncated protobuf.
  EXPECT_NE(error_of([&] {
              Model::from_bytes(bytes.substr(0, bytes.size() - 3), "", "t.onnx");
            }).find("t.onnx: not a valid ONNX model"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Model::from_bytes("garbage!", "", "t.onnx"); }).find("not a valid"),
            std::string::npos);
  // A dangling input.
  {
    Builder d = b;
    d.m.mutable_graph()->mutable_node(0)->set_input(0, "nope");
    EXPECT_NE(error_of([&] { d.model(); }).find("node 'Relu_1' (Relu) reads 'nope', which no node"),
              std::string::npos);
  }
  // A cycle.
  {
    Builder d;
    d.input("x", TensorProto::FLOAT, {"2"});
    d.node("Add", {"x", "b"}, {"a"}, "n1");
    d.node("Relu", {"a"}, {"b"}, "n2");
    d.output("b");
    EXPECT_NE(error_of([&] { d.model(); }).find("the graph has a cycle through node 'n1'"),
              std::string::npos);
  }
  // An attribute of the wrong type.
  {
    Builder d;
    d.input("x", TensorProto::FLOAT, {"2", "2"});
    NodeProto* n = d.node("Transpose", {"x"}, {"y"}, "t");
    auto* a = n->add_attribute();
    a->set_name("perm");
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_f(1);
    d.output("y");
    EXPECT_NE(error_of([&] {
                d.model().import_graph();
              }).find("node 't' (Transpose, opset 17): attribute 'perm' must be a list of ints"),
              std::string::npos);
  }
  // Huge declared dims: of an input, and of an initializer without the data.
  {
    Builder d;
    d.input("x", TensorProto::FLOAT, {"1000000000", "1000000000"});
    d.node("Relu", {"x"}, {"y"});
    d.output("y");
    EXPECT_NE(error_of([&] { d.model().import_graph(); }).find("is invalid or too large"),
              std::string::npos);
    d.initializer("w", TensorProto::FLOAT, {1 << 30, 1 << 30, 1 << 30});
    EXPECT_NE(error_of([&] { d.model(); }).find("initializer 'w': declared dims"),
              std::string::npos);
  }
  // Data that does not match its dims.
  {
    Builder d = b;
    d.initializer("w", TensorProto::FLOAT, {3})->add_float_data(1);
    EXPECT_NE(error_of([&] { d.model(); }).find("float_data holds 1 values, dims [3] need 3"),
              std::string::npos);
  }
  // A converter's own check, naming the node.
  {
    Builder d;
    d.input("x", TensorProto::FLOAT, {"2", "3"});
    d.ints("shape", {4, 4});
    d.node("Reshape", {"x", "shape"}, {"y"}, "r");
    d.output("y");
    std::string e = error_of([&] { d.model().import_graph(); });
    EXPECT_NE(e.find("test.onnx: node 'r' (Reshape, opset 17): "), std::string::npos) << e;
  }
}

TEST(OnnxImport, SessionChecksFeeds) {
  Builder b;
  b.input("x", TensorProto::FLOAT, {"n"});
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  InferenceSession s(b.model());
  EXPECT_NE(error_of([&] {
              s.run({}, {{"z", floats({1}, {1})}});
            }).find("unknown input 'z' (inputs: x)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              s.run({}, {{"x", Tensor(DType::i32, Shape{1})}});
            }).find("input 'x' must be tensor(float), got tensor(int32)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              s.run({"q"}, {{"x", floats({1}, {1})}});
            }).find("unknown output 'q'"),
            std::string::npos);
  // Two shapes of the symbolic dim: two imports, both right.
  EXPECT_EQ(s.run({}, {{"x", floats({3}, {-1, 0, 2})}})[0].get_f64(2), 2.0);
  EXPECT_EQ(s.run({}, {{"x", floats({1}, {-5})}})[0].get_f64(0), 0.0);
}

}  // namespace
}  // namespace rlx::onnx
