// ONNX model loading: parse the ModelProto (lite runtime), validate its graph (names defined
// before use, a topological order, no cycles), decode the initializers and summarize the model
// (ModelInfo: opsets, inputs, outputs, op histogram, ops rlx lacks).
#include <algorithm>
#include <climits>
#include <filesystem>
#include <set>

#include "importer.h"
#include "rlx/io/file.h"
#include "rlx/ir/error.h"

namespace rlx::onnx {

using detail::dtype_of;
using detail::onnx_elem_name;

namespace {

std::string type_string(const ::onnx::TypeProto& t) {
  switch (t.value_case()) {
    case ::onnx::TypeProto::kTensorType:
      return "tensor(" + onnx_elem_name(t.tensor_type().elem_type()) + ")";
    case ::onnx::TypeProto::kSparseTensorType:
      return "sparse_tensor(" + onnx_elem_name(t.sparse_tensor_type().elem_type()) + ")";
    case ::onnx::TypeProto::kSequenceType:
      return "seq(" + type_string(t.sequence_type().elem_type()) + ")";
    case ::onnx::TypeProto::kOptionalType:
      return "optional(" + type_string(t.optional_type().elem_type()) + ")";
    case ::onnx::TypeProto::kMapType:
      return "map";
    default:
      return "unknown";
  }
}

TensorInfo tensor_info(const ::onnx::ValueInfoProto& v) {
  TensorInfo info;
  info.name = v.name();
  info.type = type_string(v.type());
  if (v.type().has_tensor_type()) {
    const auto& tt = v.type().tensor_type();
    info.dtype = dtype_of(tt.elem_type());
    if (tt.has_shape()) {
      std::vector<Dim> dims;
      for (const auto& d : tt.shape().dim()) {
        Dim dim;
        if (d.has_dim_value() && d.dim_value() >= 0) dim.value = d.dim_value();
        if (d.has_dim_param()) dim.param = d.dim_param();
        dims.push_back(dim);
      }
      info.dims = std::move(dims);
    }
  }
  return info;
}

std::string domain_of(const std::string& d) { return d == "ai.onnx" ? "" : d; }

// The subgraphs a node holds (If's branches, Loop's / Scan's body): its GRAPH and GRAPHS
// attributes.
template <typename Fn>
void for_each_subgraph(const ::onnx::NodeProto& nd, Fn&& fn) {
  for (const auto& a : nd.attribute()) {
    if (a.has_g()) fn(a.g());
    for (const auto& sg : a.graphs()) fn(sg);
  }
}

// Validates names and orders the nodes of `g` topologically (Kahn's algorithm in file order, so
// a sorted file keeps its order); errors name the node and the offending input. `outer` holds
// the names visible from enclosing graphs (empty for the main graph): a subgraph (`is_subgraph`)
// reads them implicitly. Subgraphs are validated recursively and their orders stored in `orders`;
// the values a node's subgraphs read from outside them count as inputs of that node, so they are
// defined before it. Returns the values `g` reads from enclosing graphs (also stored, for a
// subgraph, in `impl.free_values`).
std::set<std::string> validate_graph(const ::onnx::GraphProto& g,
                                     const std::set<std::string>& outer, bool is_subgraph,
                                     const std::string& source, Model::Impl& impl) {
  std::map<std::string, int, std::less<>> producer;  // value -> node index (-1: input/init)
  for (const auto& i : g.input()) producer[i.name()] = -1;
  for (const auto& i : g.initializer()) producer[i.name()] = -1;
  const int n = g.node_size();
  auto node_name = [&](int i) {
    const auto& nd = g.node(i);
    return "node '" + (nd.name().empty() ? "#" + std::to_string(i) : nd.name()) + "' (" +
           nd.op_type() + ")";
  };
  for (int i = 0; i < n; ++i) {
    for (const auto& o : g.node(i).output()) {
      if (o.empty()) continue;
      auto [it, fresh] = producer.emplace(o, i);
      if (!fresh)
        throw Error(source + ": " + node_name(i) + " defines '" + o +
                    "', which is already defined" +
                    (it->second >= 0 ? " by " + node_name(it->second) : " as a graph input"));
    }
  }
  // What a node's subgraphs see: the enclosing graphs' names and every name of `g`.
  std::set<std::string> visible;
  bool has_subgraphs = false;
  for (const auto& nd : g.node()) for_each_subgraph(nd, [&](const auto&) { has_subgraphs = true; });
  if (has_subgraphs) {
    visible = outer;
    for (const auto& [name, i] : producer) visible.insert(name);
  }
  std::set<std::string> free;
  std::vector<int> pending(static_cast<size_t>(n), 0);
  std::vector<std::vector<int>> users(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> reads(g.node(i).input().begin(), g.node(i).input().end());
    for_each_subgraph(g.node(i), [&](const ::onnx::GraphProto& sg) {
      std::set<std::string> sg_free = validate_graph(sg, visible, true, source, impl);
      reads.insert(reads.end(), sg_free.begin(), sg_free.end());
    });
    for (const auto& in : reads) {
      if (in.empty()) continue;
      auto it = producer.find(in);
      if (it == producer.end()) {
        if (outer.count(in)) {
          free.insert(in);
          continue;
        }
        throw Error(source + ": " + node_name(i) + " reads '" + in +
                    "', which no node, graph input or initializer defines" +
                    (is_subgraph ? " (in this subgraph or an enclosing graph)" : ""));
      }
      if (it->second >= 0) {
        ++pending[static_cast<size_t>(i)];
        users[static_cast<size_t>(it->second)].push_back(i);
      }
    }
  }
  std::vector<int> order;
  std::set<int> ready;
  for (int i = 0; i < n; ++i)
    if (pending[static_cast<size_t>(i)] == 0) ready.insert(i);
  while (!ready.empty()) {
    int i = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(i);
    for (int u : users[static_cast<size_t>(i)])
      if (--pending[static_cast<size_t>(u)] == 0) ready.insert(u);
  }
  if (static_cast<int>(order.size()) != n) {
    std::string names;
    int shown = 0;
    for (int i = 0; i < n && shown < 4; ++i)
      if (pending[static_cast<size_t>(i)] > 0) names += (shown++ ? ", " : "") + node_name(i);
    throw Error(source + ": the graph has a cycle through " + names);
  }
  for (const auto& o : g.output()) {
    if (producer.count(o.name())) continue;
    if (outer.count(o.name())) {
      free.insert(o.name());
      continue;
    }
    throw Error(source + ": " +
                (is_subgraph ? "subgraph '" + g.name() + "' output '" : "graph output '") +
                o.name() + "' is not defined by any node");
  }
  impl.orders[&g] = std::move(order);
  if (is_subgraph) impl.free_values[&g].assign(free.begin(), free.end());
  return free;
}

// Calls fn(node) for every node of `g` and of its subgraphs, depth first.
template <typename Fn>
void for_each_node(const ::onnx::GraphProto& g, Fn&& fn) {
  for (const auto& nd : g.node()) {
    fn(nd);
    for_each_subgraph(nd, [&](const ::onnx::GraphProto& sg) { for_each_node(sg, fn); });
  }
}

ModelInfo summarize(const Model::Impl& m) {
  const auto& p = *m.proto;
  ModelInfo info;
  info.ir_version = p.ir_version();
  info.producer =
      p.producer_name() + (p.producer_version().empty() ? "" : " " + p.producer_version());
  for (const auto& [d, v] : m.opsets) info.opsets.push_back({d, v});
  const auto& g = p.graph();
  for (const auto& i : g.input())
    if (!m.initializers.count(i.name())) info.inputs.push_back(tensor_info(i));
  for (const auto& o : g.output()) info.outputs.push_back(tensor_info(o));
  info.num_initializers = static_cast<int64_t>(m.initializers.size());
  std::map<std::string, int64_t> hist;
  std::map<std::pair<std::string, std::string>, UnsupportedOp> missing;
  for_each_node(g, [&](const ::onnx::NodeProto& nd) {
    ++info.num_nodes;
    std::string domain = domain_of(nd.domain());
    ++hist[domain.empty() ? nd.op_type() : domain + "." + nd.op_type()];
    if (detail::find_converter(domain, nd.op_type())) return;
    auto& u = missing[{domain, nd.op_type()}];
    u.domain = domain;
    u.op_type = nd.op_type();
    auto it = m.opsets.find(domain);
    u.opset = it == m.opsets.end() ? 0 : it->second;
    u.nodes.push_back(nd.name());
  });
  for (auto& [k, u] : missing) info.unsupported.push_back(std::move(u));
  auto check_type = [&](const std::string& what, const ::onnx::TypeProto& t) {
    if (t.value_case() == ::onnx::TypeProto::VALUE_NOT_SET) return;  // undeclared
    if (t.has_tensor_type() && t.tensor_type().elem_type() == ::onnx::TensorProto::UNDEFINED)
      return;
    if (!t.has_tensor_type() || !dtype_of(t.tensor_type().elem_type()))
      info.unsupported_types.emplace_back(what, type_string(t));
  };
  for (const auto& v : g.input()) check_type("input '" + v.name() + "'", v.type());
  for (const auto& v : g.output()) check_type("output '" + v.name() + "'", v.type());
  for (const auto& v : g.value_info()) check_type("value '" + v.name() + "'", v.type());
  for (const auto& t : g.initializer())
    if (!dtype_of(t.data_type()))
      info.unsupported_types.emplace_back("initializer '" + t.name() + "'",
                                          "tensor(" + onnx_elem_name(t.data_type()) + ")");
  for_each_node(g, [&](const ::onnx::NodeProto& nd) {
    if (!nd.domain().empty() && nd.domain() != "ai.onnx") return;
    for (const auto& a : nd.attribute()) {
      int32_t type = -1;
      if (nd.op_type() == "Cast" && a.name() == "to") type = static_cast<int32_t>(a.i());
      if (nd.op_type() == "Constant" && a.name() == "value") type = a.t().data_type();
      if (type >= 0 && !dtype_of(type))
        info.unsupported_types.emplace_back("node '" + nd.name() + "' (" + nd.op_type() + ")",
                                            "tensor(" + onnx_elem_name(type) + ")");
    }
  });
  info.op_histogram.assign(hist.begin(), hist.end());
  std::stable_sort(info.op_histogram.begin(), info.op_histogram.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return info;
}

}  // namespace

Model Model::from_bytes(std::string_view bytes, const std::string& external_data_dir,
                        const std::string& what) {
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    throw Error(
        what + ": " + std::to_string(bytes.size()) +
        " bytes is over protobuf's 2 GiB message limit; models this large keep their "
        "weights in external data files (onnx.save_model(..., save_as_external_data=True))");
  auto proto = std::make_shared<::onnx::ModelProto>();
  if (!proto->ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    throw Error(what + ": not a valid ONNX model (truncated or malformed protobuf)");
  if (!proto->has_graph()) throw Error(what + ": the model has no graph");
  auto impl = std::make_shared<Impl>();
  impl->proto = proto;
  impl->source = what;
  for (const auto& o : proto->opset_import()) impl->opsets[domain_of(o.domain())] = o.version();
  // IR version 1 and 2 files import no opset: their default domain was opset 1.
  if (proto->opset_import_size() == 0) impl->opsets[""] = 1;
  const auto& g = proto->graph();
  (void)validate_graph(g, {}, false, what, *impl);
  // Initializers of the graph and of its subgraphs (names are unique across scopes: SSA).
  auto add_initializers = [&](const ::onnx::GraphProto& graph) {
    for (const auto& t : graph.initializer()) {
      std::string name = what + ": initializer '" + t.name() + "'";
      if (impl->initializers.count(t.name())) throw Error(name + " is defined twice");
      if (!dtype_of(t.data_type())) continue;  // listed in info.unsupported_types
      impl->initializers.emplace(
          t.name(), detail::decode_tensor(t, name, proto, impl.get(), external_data_dir));
    }
  };
  add_initializers(g);
  for_each_node(g, [&](const ::onnx::NodeProto& nd) { for_each_subgraph(nd, add_initializers); });
  impl->info = summarize(*impl);
  return Model(std::move(impl));
}

Model Model::load(const std::string& path) {
  size_t size = 0;
  std::shared_ptr<const FileMapping> mapping = map_file(path, size);  // parsed in place
  std::string_view bytes =
      mapping ? std::string_view(reinterpret_cast<const char*>(mapping->bytes()), size)
              : std::string_view();
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  return from_bytes(bytes, dir, path);
}

const ModelInfo& Model::info() const { return impl_->info; }

}  // namespace rlx::onnx
