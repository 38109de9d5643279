// Graph storage, generic node construction (arity, attributes, inference) and verification.
// Op-specific builder methods live with their op family in src/ir/ops/<family>.cc.
#include "rlx/ir/graph.h"

#include "rlx/ir/error.h"

namespace rlx {
namespace {

bool valid_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-' || c == '/';
}

void check_name(std::string_view name) {
  check(!name.empty(), "node names must not be empty");
  // The message is built only on failure: building it per character is quadratic.
  for (char c : name)
    if (!valid_name_char(c))
      throw Error("invalid node name '" + std::string(name) +
                  "': names use letters, digits, '_', '.', '-' and '/'");
}

}  // namespace

Graph::Graph(std::string name) : name_(std::move(name)) { check_name(name_); }

DType Graph::class_dtype(const Node& n) const {
  if (n.operands.empty()) return n.results[0].dtype;
  return dtype(n.operands[n.op == OpKind::Select ? 1 : 0]);
}

const TensorType& Graph::type(Value v) const {
  // Called for every dtype()/shape() query: messages are built only on failure.
  if (v.node < 0 || static_cast<size_t>(v.node) >= nodes_.size())
    throw Error("value refers to node " + std::to_string(v.node) + ", but graph '" + name_ +
                "' has " + std::to_string(nodes_.size()) + " nodes");
  const Node& n = nodes_[static_cast<size_t>(v.node)];
  if (v.index < 0 || static_cast<size_t>(v.index) >= n.results.size())
    throw Error("value %" + n.name + "#" + std::to_string(v.index) + " does not exist: op '" +
                std::string(op_name(n.op)) + "' has " + std::to_string(n.results.size()) +
                " results");
  return n.results[static_cast<size_t>(v.index)];
}

int32_t Graph::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? -1 : it->second;
}

std::vector<int32_t> Graph::inputs() const {
  std::vector<int32_t> out;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].op == OpKind::Input) out.push_back(static_cast<int32_t>(i));
  return out;
}

std::vector<int32_t> Graph::params() const {
  std::vector<int32_t> out;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].op == OpKind::Param) out.push_back(static_cast<int32_t>(i));
  return out;
}

void Graph::set_outputs(std::vector<Value> outs) {
  for (Value v : outs) type(v);  // validates
  outputs_ = std::move(outs);
}

std::string Graph::unique_name(std::string hint) {
  if (hint.empty()) {
    std::string n;
    do n = std::to_string(next_id_++);
    while (by_name_.count(n));
    return n;
  }
  check_name(hint);
  if (!by_name_.count(hint)) return hint;
  for (int k = 1;; ++k) {
    std::string n = hint + "_" + std::to_string(k);
    if (!by_name_.count(n)) return n;
  }
}

std::string Graph::rename(int32_t id, std::string name) {
  check(id >= 0 && static_cast<size_t>(id) < nodes_.size(),
        "rename: node id " + std::to_string(id) + " is out of range: graph @" + name_ + " has " +
            std::to_string(nodes_.size()) + " nodes");
  Node& n = nodes_[static_cast<size_t>(id)];
  check(n.op != OpKind::Input && n.op != OpKind::Param, "rename: node %" + n.name + " is an " +
                                                            std::string(op_info(n.op).name) +
                                                            ", whose name is its feed name");
  check_name(name);
  if (n.name == name) return name;
  by_name_.erase(n.name);
  n.name = unique_name(std::move(name));
  by_name_[n.name] = id;
  return n.name;
}

std::vector<Value> Graph::emit(OpKind op, std::vector<Value> operands, AttrMap attrs,
                               std::string name) {
  const OpInfo& info = op_info(op);
  check(op != OpKind::Input && op != OpKind::Param,
        "op '" + std::string(info.name) + "' is created with Graph::input/param/add_leaf");
  // unique_name() may advance next_id_; a failed emit must not change the graph at all, so
  // not even the name the next node gets.
  return atomically([&] {
    return emit_named(op, std::move(operands), std::move(attrs), unique_name(std::move(name)));
  });
}

std::vector<Value> Graph::emit_named(OpKind op, std::vector<Value> operands, AttrMap attrs,
                                     std::string name) {
  const OpInfo& info = op_info(op);
  auto where = "op '" + std::string(info.name) + "' (node %" + name + "): ";
  if (info.num_operands >= 0 && static_cast<int>(operands.size()) != info.num_operands)
    throw Error(where + "expected " + std::to_string(info.num_operands) + " operands, got " +
                std::to_string(operands.size()));
  std::vector<TensorType> types;
  types.reserve(operands.size());
  for (Value v : operands) {
    try {
      types.push_back(type(v));
    } catch (const Error& e) {
      throw Error(where + "bad operand: " + e.what());
    }
  }
  validate_attrs(info, name, attrs);
  check(info.infer != nullptr, where + "no shape inference registered");
  InferContext ctx{info, name, types, attrs};
  std::vector<TensorType> results = info.infer(ctx);
  if (info.num_results >= 0 && static_cast<int>(results.size()) != info.num_results)
    throw Error(where + "inference returned " + std::to_string(results.size()) +
                " results, expected " + std::to_string(info.num_results));
  // A result whose element count overflows int64 could be built and printed but never parsed
  // back or allocated; reject it here, located, for every op.
  for (const TensorType& t : results) {
    try {
      t.shape.numel();
    } catch (const Error& e) {
      ctx.fail("result " + t.to_string() + ": " + e.what());
    }
  }
  auto id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back(Node{op, name, std::move(operands), std::move(attrs), std::move(results)});
  by_name_[name] = id;
  std::vector<Value> out;
  for (size_t i = 0; i < nodes_.back().results.size(); ++i)
    out.push_back(Value{id, static_cast<int32_t>(i)});
  return out;
}

Value Graph::emit1(OpKind op, std::vector<Value> operands, AttrMap attrs, std::string name) {
  return atomically([&] {
    auto r = emit(op, std::move(operands), std::move(attrs), std::move(name));
    check(r.size() == 1, "op '" + std::string(op_name(op)) + "' has " + std::to_string(r.size()) +
                             " results; use emit() for multi-result ops");
    return r[0];
  });
}

Value Graph::add_leaf(OpKind op, std::string name, TensorType type) {
  check(op == OpKind::Input || op == OpKind::Param,
        "add_leaf creates input or param nodes, not '" + std::string(op_name(op)) + "'");
  check_name(name);
  check(!by_name_.count(name), std::string(op_name(op)) + " '" + name +
                                   "': a node of that name already exists in graph '" + name_ +
                                   "'");
  for (int64_t d : type.shape.dims())
    if (d < 0)
      throw Error(std::string(op_name(op)) + " '" + name + "': negative dim in shape " +
                  type.shape.to_string());
  type.shape.numel();  // rejects overflow
  auto id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back(Node{op, name, {}, {}, {std::move(type)}});
  by_name_[name] = id;
  return Value{id, 0};
}

Value Graph::input(std::string name, DType dtype, Shape shape) {
  return add_leaf(OpKind::Input, std::move(name), {dtype, std::move(shape)});
}

Value Graph::param(std::string name, DType dtype, Shape shape) {
  return add_leaf(OpKind::Param, std::move(name), {dtype, std::move(shape)});
}

Value Graph::constant(const Tensor& value, std::string name) {
  // Tensor copies share storage: clone, so later writes to the caller's tensor cannot change
  // the graph.
  return emit1(OpKind::Constant, {}, {{"value", value.clone()}}, std::move(name));
}

Value Graph::scalar(double v, DType dtype) { return constant(Tensor::full(dtype, Shape{}, v)); }

Value Graph::emit_promoted(OpKind op, std::vector<Value> operands, size_t first) {
  return atomically([&] {
    DType t = dtype(operands.at(first));
    for (size_t i = first + 1; i < operands.size(); ++i) t = promote_types(t, dtype(operands[i]));
    for (size_t i = first; i < operands.size(); ++i)
      if (dtype(operands[i]) != t) operands[i] = convert(operands[i], t);
    return emit1(op, std::move(operands));
  });
}

void Graph::truncate(size_t num_nodes, int64_t next_id) {
  while (nodes_.size() > num_nodes) {
    by_name_.erase(nodes_.back().name);
    nodes_.pop_back();
  }
  next_id_ = next_id;
}

std::vector<std::string> Graph::verify() const {
  std::vector<std::string> diags;
  std::unordered_map<std::string, int32_t> seen;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    const OpInfo& info = op_info(n.op);
    auto where = "node %" + n.name + " (op '" + std::string(info.name) + "'): ";
    if (!seen.emplace(n.name, static_cast<int32_t>(i)).second)
      diags.push_back(where + "duplicate node name");
    bool operands_ok = true;
    std::vector<TensorType> types;
    for (Value v : n.operands) {
      if (v.node < 0 || static_cast<size_t>(v.node) >= i) {
        diags.push_back(where + "operand refers to node " + std::to_string(v.node) +
                        ", which is not an earlier node");
        operands_ok = false;
        continue;
      }
      const Node& src = nodes_[static_cast<size_t>(v.node)];
      if (v.index < 0 || static_cast<size_t>(v.index) >= src.results.size()) {
        diags.push_back(where + "operand %" + src.name + "#" + std::to_string(v.index) +
                        " does not exist");
        operands_ok = false;
        continue;
      }
      types.push_back(src.results[static_cast<size_t>(v.index)]);
    }
    if (!operands_ok) continue;
    if (n.op == OpKind::Input || n.op == OpKind::Param) {
      if (!n.operands.empty() || n.results.size() != 1)
        diags.push_back(where + "leaf must have no operands and one result");
      continue;
    }
    try {
      if (info.num_operands >= 0 && static_cast<int>(n.operands.size()) != info.num_operands)
        throw Error(where + "expected " + std::to_string(info.num_operands) + " operands, got " +
                    std::to_string(n.operands.size()));
      AttrMap attrs = n.attrs;
      validate_attrs(info, n.name, attrs);
      if (!(attrs == n.attrs)) throw Error(where + "attributes are missing their defaults");
      InferContext ctx{info, n.name, types, attrs};
      auto inferred = info.infer(ctx);
      if (inferred != n.results) {
        std::string a, b;
        for (auto& t : n.results) a += (a.empty() ? "" : ", ") + t.to_string();
        for (auto& t : inferred) b += (b.empty() ? "" : ", ") + t.to_string();
        throw Error(where + "result types (" + a + ") differ from inferred (" + b + ")");
      }
    } catch (const Error& e) {
      diags.emplace_back(e.what());
    }
    // Regions are graphs of their own: their diagnostics, prefixed with where they sit.
    for (const auto& [attr, value] : n.attrs.entries()) {
      auto nested = [&](const GraphRef& body, const std::string& role) {
        for (const std::string& d : body->verify())
          diags.push_back(where + role + " (@" + body->name() + "): " + d);
      };
      if (const auto* g = std::get_if<GraphRef>(&value)) nested(*g, attr);
      if (const auto* gs = std::get_if<GraphList>(&value))
        for (size_t b = 0; b < gs->size(); ++b)
          nested((*gs)[b], attr + "[" + std::to_string(b) + "]");
    }
  }
  for (Value v : outputs_) {
    if (v.node < 0 || static_cast<size_t>(v.node) >= nodes_.size() || v.index < 0 ||
        static_cast<size_t>(v.index) >= nodes_[static_cast<size_t>(v.node)].results.size())
      diags.push_back("graph output refers to a value that does not exist (node " +
                      std::to_string(v.node) + ", result " + std::to_string(v.index) + ")");
  }
  return diags;
}

bool Graph::operator==(const Graph& o) const {
  if (name_ != o.name_ || outputs_ != o.outputs_ || nodes_.size() != o.nodes_.size()) return false;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node &a = nodes_[i], &b = o.nodes_[i];
    if (a.op != b.op || a.name != b.name || a.operands != b.operands || a.results != b.results ||
        !(a.attrs == b.attrs))
      return false;
  }
  return true;
}

}  // namespace rlx
