// The custom-op registry (rlx/ir/custom_op.h) and the schema, validation and inference of the
// built-in `custom_call` op that dispatches to it.
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "registry.h"
#include "rlx/ir/custom_op.h"

namespace rlx {
namespace {

// One registered op: its definition and the OpInfo that printer, parser and validation use.
struct CustomEntry {
  CustomOpDef def;
  OpInfo info;
};

struct CustomRegistry {
  std::shared_mutex mu;
  std::map<std::string, std::unique_ptr<CustomEntry>, std::less<>> ops;  // never erased
};

CustomRegistry& custom_registry() {
  static CustomRegistry r;
  return r;
}

const CustomEntry* find_entry(std::string_view name) {
  CustomRegistry& r = custom_registry();
  std::shared_lock lock(r.mu);
  auto it = r.ops.find(name);
  return it == r.ops.end() ? nullptr : it->second.get();
}

std::string registered_list() {
  std::string out;
  for (const std::string& n : custom_op_names()) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

// The entry a custom_call's attributes name; errors name the node.
const CustomEntry& entry_of(std::string_view node, const AttrMap& attrs) {
  std::string where = "op 'custom_call' (node %" + std::string(node) + "): ";
  check(attrs.has("name"), where + "missing required attribute 'name' (string)");
  const auto* name = std::get_if<std::string>(&attrs.get("name"));
  check(name != nullptr, where + "attribute 'name' must be a string, got a " +
                             std::string(attr_type_name(attr_type(attrs.get("name")))));
  const CustomEntry* e = find_entry(*name);
  check(e != nullptr,
        where + "unknown custom op '" + *name + "' (registered: " + registered_list() + ")");
  return *e;
}

std::vector<TensorType> infer_custom_call(const InferContext& ctx) {
  const CustomEntry& e = entry_of(ctx.node, ctx.attrs);
  InferContext sub{e.info, ctx.node, ctx.operands, ctx.attrs};
  if (e.def.num_operands >= 0 && static_cast<int>(ctx.operands.size()) != e.def.num_operands)
    sub.fail("expected " + std::to_string(e.def.num_operands) + " operands, got " +
             std::to_string(ctx.operands.size()));
  std::vector<TensorType> out = e.def.infer(sub);
  if (out.empty()) sub.fail("the shape function returned no results (a custom op has >= 1)");
  return out;
}

// Words [A-Za-z_][A-Za-z0-9_]* joined by single dots: what the text form lexes as an op name.
bool valid_name(std::string_view s) {
  bool word_start = true;
  for (char c : s) {
    bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    bool digit = c >= '0' && c <= '9';
    if (c == '.' && !word_start) {
      word_start = true;
    } else if (letter || (digit && !word_start)) {
      word_start = false;
    } else {
      return false;
    }
  }
  return !word_start;
}

}  // namespace

void register_custom_op(CustomOpDef def) {
  std::string what = "register_custom_op('" + def.name + "'): ";
  check(valid_name(def.name),
        what + "the name must be words [A-Za-z_][A-Za-z0-9_]* joined by '.' (e.g. 'my.op')");
  check(!op_from_name(def.name).has_value(),
        what + "the name is a built-in op's mnemonic; choose another (e.g. 'my." + def.name + "')");
  check(static_cast<bool>(def.infer), what + "a shape function (infer) is required");
  check(static_cast<bool>(def.reference), what + "a reference kernel (reference) is required");
  check(def.num_operands >= -1, what + "num_operands must be >= 0 or -1 (variadic)");
  for (const AttrSpec& a : def.attrs)
    check(a.name != "name", what + "attribute 'name' is reserved (it holds the op's name)");
  auto entry = std::make_unique<CustomEntry>();
  entry->def = std::move(def);
  const OpInfo& base = op_info(OpKind::CustomCall);
  std::vector<AttrSpec> attrs = base.attrs;  // `name` first
  attrs.insert(attrs.end(), entry->def.attrs.begin(), entry->def.attrs.end());
  entry->info = OpInfo{OpKind::CustomCall, entry->def.name, entry->def.num_operands, -1,        0,
                       base.dtypes,        entry->def.doc,  std::move(attrs),        base.infer};
  CustomRegistry& r = custom_registry();
  std::unique_lock lock(r.mu);
  check(!r.ops.contains(entry->def.name), what + "a custom op of this name is already registered");
  std::string key = entry->def.name;
  r.ops.emplace(std::move(key), std::move(entry));
}

const CustomOpDef* find_custom_op(std::string_view name) {
  const CustomEntry* e = find_entry(name);
  return e ? &e->def : nullptr;
}

const OpInfo* custom_op_info(std::string_view name) {
  const CustomEntry* e = find_entry(name);
  return e ? &e->info : nullptr;
}

std::vector<std::string> custom_op_names() {
  CustomRegistry& r = custom_registry();
  std::shared_lock lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [name, e] : r.ops) out.push_back(name);
  return out;
}

const CustomOpDef& custom_op_of(const Node& node) {
  check(node.op == OpKind::CustomCall, "custom_op_of: node %" + node.name + " is a '" +
                                           std::string(op_name(node.op)) + "', not a custom_call");
  return entry_of(node.name, node.attrs).def;
}

const OpInfo& schema_of(OpKind op, const AttrMap& attrs) {
  if (op != OpKind::CustomCall || !attrs.has("name")) return op_info(op);
  const auto* name = std::get_if<std::string>(&attrs.get("name"));
  const OpInfo* info = name ? custom_op_info(*name) : nullptr;
  return info ? *info : op_info(op);
}

std::vector<Value> custom_call(Graph& g, std::string_view name, std::vector<Value> operands,
                               AttrMap attrs, std::string node_name) {
  check(!attrs.has("name"), "custom_call('" + std::string(name) +
                                "'): pass the op's own attributes; 'name' is the op's name");
  attrs.set("name", std::string(name));
  return g.emit(OpKind::CustomCall, std::move(operands), std::move(attrs), std::move(node_name));
}

namespace detail {

const OpInfo& custom_call_schema(std::string_view node, const AttrMap& attrs) {
  return entry_of(node, attrs).info;
}

void register_custom_ops() {
  define_op(OpKind::CustomCall, {req("name", AttrType::String)}, infer_custom_call);
}

}  // namespace detail
}  // namespace rlx
