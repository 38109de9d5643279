// The StableHLO emitter core: one rlx graph -> one MLIR module (generic op form) that PJRT
// compiles. The module, signature and SSA names are written here; the ops of every node come
// from the lowering table, whose entries live with their op family in lower/<family>.cc.
#include <cctype>
#include <sstream>

#include "lower/lower.h"
#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/error.h"

namespace rlx::pjrt {
namespace lower {

std::string element_type(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::f64:
      return "f64";
    case DType::i8:
      return "i8";
    case DType::u8:
      return "ui8";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::bool_:
      return "i1";
  }
  return "?";
}

std::string tensor_type(DType t, const Shape& s) {
  std::string out = "tensor<";
  for (int64_t d : s.dims()) out += std::to_string(d) + "x";
  return out + element_type(t) + ">";
}
std::string tensor_type(const TensorType& t) { return tensor_type(t.dtype, t.shape); }

std::string i64_array(const std::vector<int64_t>& v) {
  std::string out = "array<i64";
  for (size_t i = 0; i < v.size(); ++i) out += (i == 0 ? ": " : ", ") + std::to_string(v[i]);
  return out + ">";
}
std::string int_list(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

std::string compare_type(DType t) {
  if (is_float(t)) return "FLOAT";
  if (dtype_category(t) == DTypeCategory::SignedInt) return "SIGNED";
  return "UNSIGNED";
}

namespace {

// Exact bytes of a dense constant, little-endian hex (MLIR reads one element as a splat).
std::string hex_bytes(const std::byte* data, size_t n) {
  static const char kDigits[] = "0123456789ABCDEF";
  std::string out = "\"0x";
  for (size_t i = 0; i < n; ++i) {
    auto b = static_cast<unsigned>(data[i]);
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out + "\"";
}

}  // namespace

std::string Emitter::run() {
  std::ostringstream head;
  std::string module = g_.name();
  bool plain = !module.empty() && !std::isdigit(static_cast<unsigned char>(module[0]));
  for (char c : module) plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  head << "module @" << (plain ? module : "\"" + module + "\"");
  if (spmd_)
    head << " attributes {mhlo.num_partitions = " << spmd_->num_partitions
         << " : i32, mhlo.num_replicas = " << spmd_->num_replicas << " : i32}";
  head << " {\n";
  if (spmd_)
    for (const std::string& line : spmd_->preamble) head << "  " << line << "\n";
  head << "  func.func public @main(";
  int arg = 0;
  for (const std::vector<int32_t>& leaves : {g_.inputs(), g_.params()}) {
    for (int32_t id : leaves) {
      std::string name = "%arg" + std::to_string(arg);
      head << (arg ? ", " : "") << name << ": " << tensor_type(g_.node(id).results[0]);
      std::string attrs;
      if (auto it = aliases_.find(id); it != aliases_.end())
        attrs = "tf.aliasing_output = " + std::to_string(it->second) + " : i32";
      if (spmd_)
        if (auto it = spmd_->args.find(id); it != spmd_->args.end())
          attrs += (attrs.empty() ? "" : ", ") + it->second;
      if (!attrs.empty()) head << " {" << attrs << "}";
      names_[static_cast<size_t>(id)] = {name};
      ++arg;
    }
  }
  head << ") -> (";
  for (size_t i = 0; i < g_.outputs().size(); ++i) {
    head << (i ? ", " : "") << tensor_type(g_.type(g_.outputs()[i]));
    if (spmd_ && i < spmd_->results.size()) head << " {" << spmd_->results[i] << "}";
  }
  head << ") {\n";
  for (int32_t id = 0; id < static_cast<int32_t>(g_.nodes().size()); ++id) {
    const Node& n = g_.node(id);
    const LowerFn* lower = lowering_table().find(n.op);
    if (lower == nullptr)
      throw Error("pjrt: op '" + std::string(op_name(n.op)) + "' (node %" + n.name +
                  ") has no StableHLO lowering; legalize the graph for the pjrt backend first");
    names_[static_cast<size_t>(id)] = (*lower)(*this, n);
  }
  body_ << "    return";
  for (size_t i = 0; i < g_.outputs().size(); ++i)
    body_ << (i ? ", " : " ") << value(g_.outputs()[i]);
  body_ << " : ";
  for (size_t i = 0; i < g_.outputs().size(); ++i)
    body_ << (i ? ", " : "") << tensor_type(g_.type(g_.outputs()[i]));
  body_ << "\n  }\n}\n";
  return head.str() + body_.str();
}

std::vector<std::string> Emitter::lower_body(const std::vector<std::string>& inputs) {
  check(inputs.size() == g_.inputs().size(),
        "pjrt: region @" + g_.name() + " takes " + std::to_string(g_.inputs().size()) +
            " inputs but " + std::to_string(inputs.size()) + " values are bound to it");
  for (size_t i = 0; i < inputs.size(); ++i)
    names_[static_cast<size_t>(g_.inputs()[i])] = {inputs[i]};
  for (int32_t id = 0; id < static_cast<int32_t>(g_.nodes().size()); ++id) {
    const Node& n = g_.node(id);
    if (n.op == OpKind::Input) continue;
    // Channel handles number the collectives of one graph (lower/collective.cc), and the
    // pipeline checks the groups of top-level collectives only.
    if (op_info(n.op).has(kCollective))
      throw Error("pjrt: collective " + std::string(op_name(n.op)) + " (node %" + n.name +
                  " in region @" + g_.name() +
                  ") inside a cond / while_loop / scan body is not supported; apply it to the "
                  "op's operands or results");
    const LowerFn* lower = lowering_table().find(n.op);
    if (lower == nullptr)
      throw Error("pjrt: op '" + std::string(op_name(n.op)) + "' (node %" + n.name +
                  " in region @" + g_.name() +
                  ") has no StableHLO lowering; legalize the graph for the pjrt backend first");
    names_[static_cast<size_t>(id)] = (*lower)(*this, n);
  }
  std::vector<std::string> out;
  for (Value v : g_.outputs()) out.push_back(value(v));
  return out;
}

std::string Emitter::region(const std::vector<Operand>& args,
                            const std::vector<Operand>& results) const {
  std::string out = "{\n";
  if (!args.empty()) {
    out += "    ^bb0(";
    for (size_t i = 0; i < args.size(); ++i)
      out += (i ? ", " : "") + args[i].name + ": " + tensor_type(args[i].type);
    out += "):\n";
  }
  // The block's ops (written at the enclosing block's depth) one level deeper than the op that
  // holds the region.
  std::istringstream lines(body_.str());
  for (std::string line; std::getline(lines, line);) out += "  " + line + "\n";
  out += "      \"stablehlo.return\"(";
  for (size_t i = 0; i < results.size(); ++i) out += (i ? ", " : "") + results[i].name;
  out += ") : (";
  for (size_t i = 0; i < results.size(); ++i) out += (i ? ", " : "") + tensor_type(results[i].type);
  return out + ") -> ()\n    }";
}

std::vector<std::string> Emitter::emit_with_regions(const std::string& op,
                                                    const std::vector<Operand>& operands,
                                                    const std::vector<std::string>& regions,
                                                    const std::vector<TensorType>& results) {
  std::string name = fresh();
  body_ << "    " << name;
  if (results.size() != 1) body_ << ":" << results.size();
  body_ << " = \"" << op << "\"(";
  for (size_t i = 0; i < operands.size(); ++i) body_ << (i ? ", " : "") << operands[i].name;
  body_ << ") (";
  for (size_t i = 0; i < regions.size(); ++i) body_ << (i ? ", " : "") << regions[i];
  body_ << ") : (";
  for (size_t i = 0; i < operands.size(); ++i)
    body_ << (i ? ", " : "") << tensor_type(operands[i].type);
  body_ << ") -> (";
  for (size_t i = 0; i < results.size(); ++i) body_ << (i ? ", " : "") << tensor_type(results[i]);
  body_ << ")\n";
  if (results.size() == 1) return {name};
  std::vector<std::string> out;
  for (size_t i = 0; i < results.size(); ++i) out.push_back(name + "#" + std::to_string(i));
  return out;
}

const std::vector<std::string>& Emitter::argument(const Node& n) const {
  return names_[static_cast<size_t>(&n - g_.nodes().data())];
}

std::string Emitter::emit(const std::string& op, const std::vector<Operand>& operands,
                          const std::string& attrs, const TensorType& result,
                          const std::string& region) {
  std::string name = "%" + std::to_string((*next_)++);
  body_ << "    " << name << " = \"" << op << "\"(";
  for (size_t i = 0; i < operands.size(); ++i) body_ << (i ? ", " : "") << operands[i].name;
  body_ << ")" << region;
  if (!attrs.empty()) body_ << " {" << attrs << "}";
  body_ << " : (";
  for (size_t i = 0; i < operands.size(); ++i)
    body_ << (i ? ", " : "") << tensor_type(operands[i].type);
  body_ << ") -> " << tensor_type(result) << "\n";
  return name;
}

std::string Emitter::constant_tensor(const Tensor& t) {
  size_t size = static_cast<size_t>(dtype_size(t.dtype()));
  if (t.dtype() == DType::bool_) {  // as u8 bytes, then != 0: i1 hex packing is not portable
    Tensor bytes = Tensor::borrow(DType::u8, t.shape(), t.data());
    std::string u8 = constant_tensor(bytes);
    std::string zero = splat(DType::u8, t.shape(), 0);
    return compare("NE", {u8, bytes.type()}, {zero, bytes.type()});
  }
  size_t n = t.nbytes();
  bool is_splat = n > 0;
  for (size_t i = size; i < n && is_splat; ++i) is_splat = t.data()[i] == t.data()[i % size];
  std::string value = n == 0 ? std::string("\"0x") + std::string(2 * size, '0') + "\""
                             : hex_bytes(t.data(), is_splat ? size : n);
  return emit("stablehlo.constant", {}, "value = dense<" + value + "> : " + tensor_type(t.type()),
              t.type());
}

std::string Emitter::splat(DType t, const Shape& s, double v) {
  return constant_tensor(Tensor::full(t, s, v));
}

std::string Emitter::compare(const char* dir, const Operand& a, const Operand& b) {
  return emit("stablehlo.compare", {a, b},
              std::string("comparison_direction = #stablehlo<comparison_direction ") + dir +
                  ">, compare_type = #stablehlo<comparison_type " + compare_type(a.type.dtype) +
                  ">",
              {DType::bool_, a.type.shape});
}

Operand Emitter::broadcast(const Operand& x, const Shape& shape) {
  if (x.type.shape == shape) return x;
  std::vector<int64_t> dims;
  int offset = shape.rank() - x.type.shape.rank();
  for (int i = 0; i < x.type.shape.rank(); ++i) dims.push_back(offset + i);
  TensorType t{x.type.dtype, shape};
  return {emit("stablehlo.broadcast_in_dim", {x}, "broadcast_dimensions = " + i64_array(dims), t),
          t};
}

std::vector<Operand> Emitter::broadcast_operands(const Node& n) {
  std::vector<Operand> ops;
  for (size_t i = 0; i < n.operands.size(); ++i)
    ops.push_back(broadcast(operand(n, i), n.results[0].shape));
  return ops;
}

std::vector<int64_t> Emitter::axes(const Node& n, const std::string& attr, const Shape& s) const {
  std::vector<int64_t> out;
  for (int64_t a : n.attrs.get_ints(attr)) out.push_back(s.normalize_axis(a));
  return out;
}

std::string Emitter::extremum(const char* op, const Operand& a, const Operand& b) {
  std::string m = emit(op, {a, b}, "", a.type);
  if (!is_float(a.type.dtype)) return m;
  std::string b_nan = compare("NE", b, b), a_nan = compare("NE", a, a);
  TensorType p{DType::bool_, a.type.shape};
  std::string r = emit("stablehlo.select", {{b_nan, p}, b, {m, a.type}}, "", a.type);
  return emit("stablehlo.select", {{a_nan, p}, a, {r, a.type}}, "", a.type);
}

std::string Emitter::combiner_region(DType t, const char* combiner) const {
  std::string scalar = tensor_type(t, Shape{});
  std::string k = std::to_string(*next_);
  std::string c(combiner);
  if (is_float(t) && (c == "stablehlo.maximum" || c == "stablehlo.minimum")) {
    // extremum() in the region: a NaN accumulator or element wins.
    RegionCode r("%red" + k + "_");
    std::string lhs = r.arg("lhs"), rhs = r.arg("rhs");
    std::string m = r.op(c, lhs + ", " + rhs, "", scalar + ", " + scalar, scalar);
    std::string rhs_nan = r.cmp(rhs, rhs, "NE", t), lhs_nan = r.cmp(lhs, lhs, "NE", t);
    std::string v = r.select(lhs_nan, lhs, r.select(rhs_nan, rhs, m, t), t);
    return " ({\n    ^bb0(" + lhs + ": " + scalar + ", " + rhs + ": " + scalar + "):\n" + r.code() +
           "      \"stablehlo.return\"(" + v + ") : (" + scalar + ") -> ()\n    })";
  }
  return " ({\n    ^bb0(%lhs" + k + ": " + scalar + ", %rhs" + k + ": " + scalar +
         "):\n      %red" + k + " = \"" + combiner + "\"(%lhs" + k + ", %rhs" + k + ") : (" +
         scalar + ", " + scalar + ") -> " + scalar + "\n      \"stablehlo.return\"(%red" + k +
         ") : (" + scalar + ") -> ()\n    })";
}

const OpTable<LowerFn>& lowering_table() {
  static const OpTable<LowerFn> table("stablehlo lowering table", [](OpTable<LowerFn>& t) {
    register_leaf_lowerings(t);
    register_elementwise_lowerings(t);
    register_linalg_lowerings(t);
    register_reduce_lowerings(t);
    register_shape_lowerings(t);
    register_nn_lowerings(t);
    register_quant_lowerings(t);
    register_random_lowerings(t);
    register_collective_lowerings(t);
    register_control_flow_lowerings(t);
  });
  return table;
}

}  // namespace lower

std::set<OpKind> native_ops() { return lower::lowering_table().keys(); }

std::string emit_stablehlo(const Graph& g, const std::map<int32_t, size_t>& aliases) {
  return lower::Emitter(g, aliases).run();
}

}  // namespace rlx::pjrt
