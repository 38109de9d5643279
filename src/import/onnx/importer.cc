// ONNX graph -> rlx Graph: binds the inputs to concrete shapes, turns initializers into params
// or constants, runs each node's converter in topological order and folds values known at
// import time (shapes and what is computed from them) with the reference evaluator.
#include "importer.h"

#include <algorithm>
#include <unordered_set>

#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/passes.h"

namespace rlx::onnx {
namespace detail {

namespace {

bool name_char_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '/' || c == '-';
}

// An ONNX name as a valid rlx name: characters outside [A-Za-z0-9_./-] become '_'.
std::string rlx_name(const std::string& onnx_name) {
  std::string s = onnx_name.empty() ? "v" : onnx_name;
  for (char& c : s)
    if (!name_char_ok(c)) c = '_';
  return s;
}

// rlx_name(onnx_name), suffixed "_1", "_2", ... when `g` already has a node of that name (for
// inputs and params, whose names are their feed and weight names).
std::string unique_leaf_name(const Graph& g, const std::string& onnx_name) {
  std::string name = rlx_name(onnx_name);
  for (int k = 1; g.find(name) >= 0; ++k) name = rlx_name(onnx_name) + "_" + std::to_string(k);
  return name;
}

// Float initializers larger than this become params (weights); smaller ones and every integer
// or bool initializer become constants, so that shape arithmetic folds and fusion patterns
// (a scalar epsilon, sqrt(2) of GELU) see literal values.
constexpr int64_t kParamMinElements = 16;

}  // namespace

/// The state of one import_graph call.
class Importer {
 public:
  Importer(const Model::Impl& model, const ImportOptions& options)
      : model_(model),
        options_(options),
        g(rlx_name(model.proto->graph().name().empty() ? "onnx" : model.proto->graph().name())) {}
  /// The importer of a control-flow body nested in `parent` (convert_region): it builds a
  /// self-contained graph named `name`, whose initializers become constants (bodies hold no
  /// params).
  Importer(Importer& parent, const std::string& name)
      : model_(parent.model_), options_(parent.options_), g(name), in_body_(true) {}

  ImportedGraph run();

  /// The rlx value of ONNX value `name` (creating an initializer's leaf on first use).
  Value value(const std::string& name, const NodeContext* ctx);
  /// The value of ONNX value `name` if it is known at import time.
  std::optional<Tensor> static_of(const std::string& name);
  /// The value of `v` if every leaf it depends on is a constant or an initializer.
  std::optional<Tensor> static_value(Value v);
  /// Binds ONNX value `name` (in the innermost open subgraph scope, if any).
  void define(const std::string& name, Value v);
  /// Converts subgraph `sg` as if its nodes stood at `ctx`'s node (reads of enclosing values
  /// resolve by name) and returns the values of its outputs; its own names go out of scope.
  std::vector<Value> inline_graph(const ::onnx::GraphProto& sg, const NodeContext& ctx);
  /// NodeContext::convert_region for subgraph `sg` of ctx's node.
  NodeContext::Region convert_region(const ::onnx::GraphProto& sg, const NodeContext& ctx,
                                     const std::vector<std::string>& free,
                                     const std::vector<TensorType>& formals);
  /// Consumers of ONNX value `name` (node inputs at any depth, graph outputs).
  int64_t uses(const std::string& name);
  /// The graph inputs (ONNX names) the last static_value call found its value depends on.
  const std::vector<std::string>& missing_inputs() const { return missing_inputs_; }

  const Model::Impl& model_;
  const ImportOptions& options_;
  Graph g;

 private:
  void bind_inputs(ImportedGraph& out);
  void convert_nodes(const ::onnx::GraphProto& graph);
  Shape input_shape(const ::onnx::ValueInfoProto& v);
  void check_supported();

  std::unordered_map<std::string, Value> values_;
  std::unordered_map<int32_t, Tensor> leaf_data_;       // param node -> its initializer
  std::unordered_map<std::string, Tensor> param_data_;  // the same by param name (DCE renumbers)
  // Import-time values per node: absent = not computed yet; nullopt = not static.
  std::unordered_map<int32_t, std::optional<std::vector<Tensor>>> folded_;
  // Per node not static: the graph input nodes it depends on.
  std::unordered_map<int32_t, std::vector<int32_t>> input_deps_;
  // Input node -> the graph inputs (ONNX names) its value depends on: itself for a graph
  // input; for a body's captured value, those of the enclosing value; none for a loop carry.
  std::unordered_map<int32_t, std::vector<std::string>> input_names_;
  bool in_body_ = false;  // building a control-flow body (convert_region)
  std::vector<std::string> missing_inputs_;
  std::unordered_map<std::string, int64_t> uses_;  // filled on first use
  // Per inlined subgraph, innermost last: (name, the value it had before) of every name the
  // subgraph defined, restored when it closes.
  std::vector<std::vector<std::pair<std::string, std::optional<Value>>>> scopes_;
};

void Importer::define(const std::string& name, Value v) {
  auto it = values_.find(name);
  if (!scopes_.empty())
    scopes_.back().emplace_back(name,
                                it == values_.end() ? std::nullopt : std::optional(it->second));
  values_[name] = v;
}

int64_t Importer::uses(const std::string& name) {
  if (uses_.empty()) {
    std::function<void(const ::onnx::GraphProto&)> count = [&](const ::onnx::GraphProto& graph) {
      for (const auto& o : graph.output()) ++uses_[o.name()];
      for (const auto& nd : graph.node()) {
        for (const auto& in : nd.input()) ++uses_[in];
        for (const auto& a : nd.attribute()) {
          if (a.has_g()) count(a.g());
          for (const auto& sg : a.graphs()) count(sg);
        }
      }
    };
    count(model_.proto->graph());
  }
  auto it = uses_.find(name);
  return it == uses_.end() ? 0 : it->second;
}

std::vector<Value> Importer::inline_graph(const ::onnx::GraphProto& sg, const NodeContext& ctx) {
  if (sg.input_size() > 0)
    ctx.fail("subgraph '" + sg.name() + "' has " + std::to_string(sg.input_size()) +
             " input(s); only input-less subgraphs (If's branches) are inlined");
  scopes_.emplace_back();
  struct Close {  // restores the enclosing names on every exit
    Importer& im;
    ~Close() {
      auto& scope = im.scopes_.back();
      for (auto it = scope.rbegin(); it != scope.rend(); ++it) {
        if (it->second)
          im.values_[it->first] = *it->second;
        else
          im.values_.erase(it->first);
      }
      im.scopes_.pop_back();
    }
  } close{*this};
  convert_nodes(sg);
  std::vector<Value> outs;
  for (const auto& o : sg.output()) outs.push_back(value(o.name(), &ctx));
  return outs;
}

NodeContext::Region Importer::convert_region(const ::onnx::GraphProto& sg, const NodeContext& ctx,
                                             const std::vector<std::string>& free,
                                             const std::vector<TensorType>& formals) {
  const std::string what = "subgraph '" + sg.name() + "'";
  if (sg.input_size() != static_cast<int>(formals.size()))
    ctx.fail(what + " has " + std::to_string(sg.input_size()) + " input(s), the node passes " +
             std::to_string(formals.size()));
  Importer sub(*this, rlx_name(sg.name().empty() ? "body" : sg.name()));
  NodeContext::Region r{Graph(), {}};
  std::vector<std::pair<std::string, Tensor>> constants;
  for (const std::string& name : free) {
    std::optional<Tensor> t = static_of(name);
    if (t && !(is_float(t->dtype()) && t->numel() > kParamMinElements)) {
      constants.emplace_back(name, *t);
      continue;
    }
    std::vector<std::string> deps = t ? std::vector<std::string>{} : missing_inputs_;
    Value v = value(name, &ctx);
    r.captures.push_back(v);
    Value in = sub.g.input(unique_leaf_name(sub.g, name), g.dtype(v), g.shape(v));
    sub.values_[name] = in;
    sub.input_names_[in.node] = std::move(deps);
  }
  for (int k = 0; k < sg.input_size(); ++k) {
    const auto& decl = sg.input(k);
    const TensorType& type = formals[static_cast<size_t>(k)];
    const int32_t elem = decl.type().tensor_type().elem_type();
    if (decl.type().has_tensor_type() && elem != 0 && dtype_of(elem) != type.dtype)
      ctx.fail(what + " input " + std::to_string(k) + " ('" + decl.name() + "') is declared " +
               onnx_elem_name(elem) + ", the node passes " + type.to_string());
    sub.values_[decl.name()] =
        sub.g.input(unique_leaf_name(sub.g, decl.name()), type.dtype, type.shape);
  }
  for (const auto& [name, t] : constants) sub.values_[name] = sub.g.constant(t, rlx_name(name));
  sub.convert_nodes(sg);
  std::vector<Value> outs;
  for (const auto& o : sg.output()) outs.push_back(sub.value(o.name(), &ctx));
  sub.g.set_outputs(outs);
  r.graph = std::move(sub.g);
  return r;
}

Value Importer::value(const std::string& name, const NodeContext* ctx) {
  auto it = values_.find(name);
  if (it != values_.end()) return it->second;
  auto init = model_.initializers.find(name);
  if (init == model_.initializers.end()) {
    std::string where = ctx ? ctx->where() + ": " : "";
    throw Error(model_.source + ": " + where + "value '" + name + "' is not defined");
  }
  const Tensor& t = init->second;
  Value v;
  if (!in_body_ && is_float(t.dtype()) && t.numel() > kParamMinElements) {
    std::string pname = unique_leaf_name(g, name);
    v = g.param(pname, t.dtype(), t.shape());
    leaf_data_[v.node] = t;
    param_data_[pname] = t;
  } else {
    v = g.constant(t, rlx_name(name));
  }
  values_[name] = v;
  return v;
}

std::optional<Tensor> Importer::static_of(const std::string& name) {
  auto it = values_.find(name);
  if (it != values_.end()) return static_value(it->second);
  auto init = model_.initializers.find(name);
  if (init != model_.initializers.end()) return init->second;
  return std::nullopt;
}

std::optional<Tensor> Importer::static_value(Value v) {
  // Iterative post-order walk over the operands (graphs can be deep), memoized per node; a node
  // that is not static remembers the graph inputs it depends on.
  std::vector<int32_t> stack{v.node};
  while (!stack.empty()) {
    int32_t id = stack.back();
    if (folded_.count(id)) {
      stack.pop_back();
      continue;
    }
    const Node& n = g.node(id);
    if (n.op == OpKind::Input) {
      folded_[id] = std::nullopt;
      input_deps_[id] = {id};
      stack.pop_back();
      continue;
    }
    if (n.op == OpKind::Param || n.op == OpKind::Constant) {
      auto data = leaf_data_.find(id);
      folded_[id] =
          std::vector<Tensor>{n.op == OpKind::Param ? data->second : n.attrs.get_tensor("value")};
      stack.pop_back();
      continue;
    }
    bool ready = true;
    for (const Value& o : n.operands)
      if (!folded_.count(o.node)) {
        ready = false;
        stack.push_back(o.node);
      }
    if (!ready) continue;
    stack.pop_back();
    std::vector<int32_t> deps;
    for (const Value& o : n.operands) {
      if (folded_[o.node]) continue;
      for (int32_t d : input_deps_[o.node])
        if (std::find(deps.begin(), deps.end(), d) == deps.end()) deps.push_back(d);
    }
    int64_t bytes = 0;
    for (const TensorType& r : n.results) bytes += r.shape.numel() * dtype_size(r.dtype);
    bool is_static = true;
    for (const Value& o : n.operands) is_static = is_static && folded_[o.node].has_value();
    if (!is_static || bytes > options_.fold_limit_bytes) {
      folded_[id] = std::nullopt;
      input_deps_[id] = std::move(deps);
      continue;
    }
    std::vector<Tensor> operands;
    for (const Value& o : n.operands)
      operands.push_back((*folded_[o.node])[static_cast<size_t>(o.index)]);
    folded_[id] = evaluate_op(n.op, operands, n.attrs);
  }
  missing_inputs_.clear();
  const auto& r = folded_[v.node];
  if (r) return (*r)[static_cast<size_t>(v.index)];
  for (int32_t d : input_deps_[v.node])
    for (const std::string& name : input_names_[d])
      if (std::find(missing_inputs_.begin(), missing_inputs_.end(), name) == missing_inputs_.end())
        missing_inputs_.push_back(name);
  return std::nullopt;
}

Shape Importer::input_shape(const ::onnx::ValueInfoProto& v) {
  const std::string what = model_.source + ": input '" + v.name() + "'";
  const auto& tt = v.type().tensor_type();
  auto given = options_.input_shapes.find(v.name());
  std::vector<int64_t> dims;
  if (given != options_.input_shapes.end()) {
    dims = given->second.dims();
    if (tt.has_shape()) {
      const auto& decl = tt.shape();
      if (decl.dim_size() != static_cast<int>(dims.size()))
        throw Error(what + ": the model declares rank " + std::to_string(decl.dim_size()) +
                    ", got shape " + given->second.to_string());
      for (int i = 0; i < decl.dim_size(); ++i)
        if (decl.dim(i).has_dim_value() && decl.dim(i).dim_value() >= 0 &&
            decl.dim(i).dim_value() != dims[static_cast<size_t>(i)])
          throw Error(what + ": dim " + std::to_string(i) + " is declared " +
                      std::to_string(decl.dim(i).dim_value()) + ", got shape " +
                      given->second.to_string());
    }
  } else {
    if (!tt.has_shape())
      throw Error(what + ": the model declares no shape; give one (input_shapes)");
    for (const auto& d : tt.shape().dim()) {
      // A negative dim_value (PaddlePaddle's exporter writes -1) is an unknown dim.
      if (d.has_dim_value() && d.dim_value() >= 0) {
        dims.push_back(d.dim_value());
        continue;
      }
      auto p =
          d.has_dim_param() ? options_.dim_params.find(d.dim_param()) : options_.dim_params.end();
      if (p == options_.dim_params.end())
        throw Error(what + ": dim " + std::to_string(dims.size()) +
                    (d.has_dim_param() ? " is symbolic ('" + d.dim_param() + "')" : " is unknown") +
                    "; give the input's shape or the dim's size");
      dims.push_back(p->second);
    }
  }
  constexpr int64_t kMaxElements = int64_t{1} << 48;
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d != 0 && n > kMaxElements / d))
      throw Error(what + ": shape " + Shape(dims).to_string() + " is invalid or too large");
    n *= d;
  }
  return Shape(dims);
}

void Importer::bind_inputs(ImportedGraph& out) {
  std::unordered_set<std::string> known;
  for (const auto& v : model_.proto->graph().input()) {
    if (model_.initializers.count(v.name())) continue;  // IR < 4 lists initializers as inputs
    const std::string what = model_.source + ": input '" + v.name() + "'";
    if (!known.insert(v.name()).second) throw Error(what + " is declared twice");
    if (!v.type().has_tensor_type()) {
      std::string type = "a non-tensor type";
      for (const TensorInfo& i : model_.info.inputs)
        if (i.name == v.name()) type = i.type;
      throw Error(what + " has type " + type + "; rlx imports tensor inputs only");
    }
    auto dt = dtype_of(v.type().tensor_type().elem_type());
    if (!dt)
      throw Error(what + ": element type " + onnx_elem_name(v.type().tensor_type().elem_type()) +
                  " is not supported by rlx");
    std::string name = unique_leaf_name(g, v.name());
    auto bound = options_.input_values.find(v.name());
    if (bound != options_.input_values.end()) {
      const Tensor& t = bound->second;
      if (t.dtype() != *dt)
        throw Error(what + ": the value bound to it is " + t.type().to_string() +
                    ", the model declares " + onnx_elem_name(v.type().tensor_type().elem_type()));
      ImportOptions shape_only;
      shape_only.input_shapes.emplace(v.name(), t.shape());
      Importer check(model_, shape_only);
      (void)check.input_shape(v);  // the declared rank and dims hold
      values_[v.name()] = g.constant(t, name);
      continue;
    }
    Value in = g.input(name, *dt, input_shape(v));
    values_[v.name()] = in;
    input_names_[in.node] = {v.name()};
    out.inputs.emplace_back(v.name(), name);
  }
  for (const auto& [name, shape] : options_.input_shapes)
    if (!known.count(name))
      throw Error(model_.source + ": input_shapes names '" + name + "', which is not an input");
  for (const auto& [name, value] : options_.input_values)
    if (!known.count(name))
      throw Error(model_.source + ": input_values names '" + name + "', which is not an input");
}

void Importer::check_supported() {
  const auto& types = model_.info.unsupported_types;
  if (model_.info.unsupported.empty() && types.empty()) return;
  std::string msg = model_.source + ": " + std::to_string(model_.info.unsupported.size()) +
                    " op type(s) not supported by rlx's ONNX importer";
  if (!types.empty()) {
    msg += ", " + std::to_string(types.size()) +
           " value(s) of types rlx has no dtype for (rlx: f32, f16, bf16, f64, i8, u8, i32, "
           "i64, bool)";
    for (size_t i = 0; i < types.size() && i < 8; ++i)
      msg += "\n  " + types[i].first + ": " + types[i].second;
    if (types.size() > 8) msg += "\n  ...";
  }
  msg += ":";
  for (const UnsupportedOp& u : model_.info.unsupported) {
    msg += "\n  " + (u.domain.empty() ? "" : u.domain + ".") + u.op_type + " (opset " +
           std::to_string(u.opset) + "): " + std::to_string(u.nodes.size()) + " node(s)";
    for (size_t i = 0; i < u.nodes.size() && i < 5; ++i)
      msg += (i ? ", '" : " '") + u.nodes[i] + "'";
    if (u.nodes.size() > 5) msg += ", ...";
  }
  throw Error(msg);
}

ImportedGraph Importer::run() {
  check_supported();
  ImportedGraph out;
  bind_inputs(out);
  const auto& graph = model_.proto->graph();
  convert_nodes(graph);
  std::vector<Value> outs;
  for (const auto& o : graph.output()) {
    outs.push_back(value(o.name(), nullptr));
    out.outputs.push_back(o.name());
  }
  g.set_outputs(outs);
  create_dce_pass()->run(g);
  for (int32_t id : g.params())
    out.params.emplace_back(g.node(id).name, param_data_.at(g.node(id).name));
  out.graph = std::move(g);
  return out;
}

void Importer::convert_nodes(const ::onnx::GraphProto& graph) {
  for (int idx : model_.orders.at(&graph)) {
    const auto& node = graph.node(idx);
    std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
    auto opset = model_.opsets.find(domain);
    NodeContext ctx(*this, node, opset == model_.opsets.end() ? 0 : opset->second);
    if (opset == model_.opsets.end())
      ctx.fail("the model imports no opset of domain '" + domain + "'");
    const ConvertFn* fn = find_converter(domain, node.op_type());
    const auto first_new = static_cast<int32_t>(g.nodes().size());
    try {
      (*fn)(ctx);
    } catch (const InputValuesRequired&) {
      throw;
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.rfind("node '", 0) == 0 || msg.rfind(model_.source + ": node '", 0) == 0) throw;
      ctx.fail(msg);
    }
    for (int i = 0; i < node.output_size(); ++i)
      if (!node.output(i).empty() && !values_.count(node.output(i)))
        ctx.fail("output " + std::to_string(i) + " ('" + node.output(i) +
                 "') is not supported by the converter");
    // The nodes computing the outputs carry the ONNX node's name (profiles, printed graphs).
    for (int i = 0; i < node.output_size(); ++i) {
      if (node.output(i).empty()) continue;
      const Value v = values_.at(node.output(i));
      const Node& made = g.node(v.node);
      if (v.node >= first_new && made.op != OpKind::Constant && made.op != OpKind::Param &&
          made.op != OpKind::Input)
        g.rename(v.node, rlx_name(node.name().empty() ? node.output(i) : node.name()));
    }
  }
}

// ---- NodeContext

NodeContext::NodeContext(Importer& importer, const ::onnx::NodeProto& n, int64_t v)
    : g(importer.g), node(n), opset(v), importer_(importer) {}

bool NodeContext::has_input(int i) const {
  return i >= 0 && i < node.input_size() && !node.input(i).empty();
}

Value NodeContext::input(int i) const {
  if (!has_input(i)) fail("input " + std::to_string(i) + " is required");
  return importer_.value(node.input(i), this);
}

std::optional<Value> NodeContext::optional_input(int i) const {
  if (!has_input(i)) return std::nullopt;
  return input(i);
}

Shape NodeContext::input_shape(int i) const {
  if (!has_input(i)) fail("input " + std::to_string(i) + " is required");
  auto init = importer_.model_.initializers.find(node.input(i));
  if (init != importer_.model_.initializers.end()) return init->second.shape();
  return g.shape(input(i));
}

std::vector<Value> NodeContext::inputs() const {
  std::vector<Value> out;
  for (int i = 0; i < node.input_size(); ++i)
    if (has_input(i)) out.push_back(input(i));
  return out;
}

std::optional<Tensor> NodeContext::static_input(int i) const {
  if (!has_input(i)) return std::nullopt;
  return importer_.static_of(node.input(i));
}

Tensor NodeContext::required_static(int i, const char* what, const char* why) const {
  if (!has_input(i)) fail("input " + std::to_string(i) + " ('" + what + "') is required");
  std::optional<Tensor> t = static_input(i);
  if (t) return *t;
  std::string msg = importer_.model_.source + ": " + where() + ": input " + std::to_string(i) +
                    " ('" + what +
                    "') must be known at import time (a constant, an initializer or computed "
                    "from shapes); " +
                    (why != nullptr ? std::string(why) : "rlx compiles per concrete shape");
  const auto& missing = importer_.missing_inputs();
  if (missing.empty()) throw Error(msg);
  msg += "; it depends on the value of graph input(s)";
  for (size_t k = 0; k < missing.size(); ++k) msg += (k ? ", '" : " '") + missing[k] + "'";
  throw InputValuesRequired(msg, missing);
}

std::optional<Tensor> NodeContext::static_value(Value v) const { return importer_.static_value(v); }

int64_t NodeContext::uses(int i) const { return has_input(i) ? importer_.uses(node.input(i)) : 0; }

std::vector<int64_t> NodeContext::static_ints(int i, const char* what) const {
  std::optional<Tensor> t = required_static(i, what);
  require(!is_float(t->dtype()), std::string("input '") + what + "' must be an integer tensor");
  std::vector<int64_t> out(static_cast<size_t>(t->numel()));
  for (int64_t k = 0; k < t->numel(); ++k) out[static_cast<size_t>(k)] = t->get_i64(k);
  return out;
}

std::vector<double> NodeContext::static_doubles(int i, const char* what) const {
  std::optional<Tensor> t = required_static(i, what);
  std::vector<double> out(static_cast<size_t>(t->numel()));
  for (int64_t k = 0; k < t->numel(); ++k) out[static_cast<size_t>(k)] = t->get_f64(k);
  return out;
}

std::vector<Value> NodeContext::inline_subgraph(std::string_view name) {
  const ::onnx::AttributeProto* a = attr(name);
  require(a && a->has_g(), "attribute '" + std::string(name) + "' (a graph) is required");
  return importer_.inline_graph(a->g(), *this);
}

std::vector<std::string> NodeContext::free_values(std::string_view name) const {
  const ::onnx::AttributeProto* a = attr(name);
  require(a && a->has_g(), "attribute '" + std::string(name) + "' (a graph) is required");
  return importer_.model_.free_values.at(&a->g());
}

NodeContext::Region NodeContext::convert_region(std::string_view name,
                                                const std::vector<std::string>& free,
                                                const std::vector<TensorType>& formals) {
  const ::onnx::AttributeProto* a = attr(name);
  require(a && a->has_g(), "attribute '" + std::string(name) + "' (a graph) is required");
  return importer_.convert_region(a->g(), *this, free, formals);
}

bool NodeContext::wants_output(int i) const {
  return i >= 0 && i < node.output_size() && !node.output(i).empty();
}

void NodeContext::set_output(int i, Value v) {
  if (wants_output(i)) importer_.define(node.output(i), v);
}

const ::onnx::AttributeProto* NodeContext::attr(std::string_view name) const {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

bool NodeContext::has_attr(std::string_view name) const { return attr(name) != nullptr; }

namespace {
using AT = ::onnx::AttributeProto;
}

int64_t NodeContext::attr_int(std::string_view name, int64_t def) const {
  const AT* a = attr(name);
  if (!a) return def;
  require(a->type() == AT::INT || (a->type() == AT::UNDEFINED && a->has_i()),
          "attribute '" + std::string(name) + "' must be an int");
  return a->i();
}

double NodeContext::attr_float(std::string_view name, double def) const {
  const AT* a = attr(name);
  if (!a) return def;
  require(a->type() == AT::FLOAT || (a->type() == AT::UNDEFINED && a->has_f()),
          "attribute '" + std::string(name) + "' must be a float");
  return a->f();
}

std::string NodeContext::attr_string(std::string_view name, std::string def) const {
  const AT* a = attr(name);
  if (!a) return def;
  require(a->type() == AT::STRING || (a->type() == AT::UNDEFINED && a->has_s()),
          "attribute '" + std::string(name) + "' must be a string");
  return a->s();
}

std::vector<int64_t> NodeContext::attr_ints(std::string_view name, std::vector<int64_t> def) const {
  const AT* a = attr(name);
  if (!a) return def;
  require(a->type() == AT::INTS || a->type() == AT::UNDEFINED,
          "attribute '" + std::string(name) + "' must be a list of ints");
  return {a->ints().begin(), a->ints().end()};
}

std::vector<double> NodeContext::attr_floats(std::string_view name, std::vector<double> def) const {
  const AT* a = attr(name);
  if (!a) return def;
  require(a->type() == AT::FLOATS || a->type() == AT::UNDEFINED,
          "attribute '" + std::string(name) + "' must be a list of floats");
  return {a->floats().begin(), a->floats().end()};
}

Tensor NodeContext::attr_tensor(std::string_view name) const {
  const AT* a = attr(name);
  require(a && a->type() == AT::TENSOR,
          "attribute '" + std::string(name) + "' (a tensor) is required");
  return decode_tensor(a->t(), where() + ": attribute '" + std::string(name) + "'",
                       importer_.model_.proto, nullptr, "");
}

std::string NodeContext::where() const {
  std::string domain = node.domain().empty() ? "" : node.domain() + ".";
  return "node '" + node.name() + "' (" + domain + node.op_type() + ", opset " +
         std::to_string(opset) + ")";
}

void NodeContext::fail(const std::string& message) const {
  throw Error(importer_.model_.source + ": " + where() + ": " + message);
}

Value NodeContext::ints(const std::vector<int64_t>& values) {
  return g.constant(
      Tensor::from_ints(DType::i64, Shape{static_cast<int64_t>(values.size())}, values));
}

int64_t NodeContext::axis(int64_t a, int64_t rank, const char* what) const {
  if (a < -rank || a >= rank)
    fail(std::string(what) + " " + std::to_string(a) + " is out of range for rank " +
         std::to_string(rank));
  return a < 0 ? a + rank : a;
}

// ---- the converter table

const ConverterTable& converters() {
  static const ConverterTable table = [] {
    ConverterTable t;
    add_elementwise_converters(t);
    add_shape_converters(t);
    add_index_converters(t);
    add_reduce_converters(t);
    add_nn_converters(t);
    add_attention_converters(t);
    add_resize_converters(t);
    add_einsum_converters(t);
    add_rnn_converters(t);
    add_contrib_converters(t);
    add_control_converters(t);
    return t;
  }();
  return table;
}

const ConvertFn* find_converter(std::string_view domain, std::string_view op_type) {
  if (domain == "ai.onnx") domain = "";
  const auto& t = converters();
  auto it = t.find(std::make_pair(std::string(domain), std::string(op_type)));
  return it == t.end() ? nullptr : &it->second;
}

}  // namespace detail

ImportedGraph Model::import_graph(const ImportOptions& options) const {
  detail::Importer importer(*impl_, options);
  return importer.run();
}

}  // namespace rlx::onnx
