// The op registry: the dense table built from ops.def and the families' register_*_ops().
#include "rlx/ir/op.h"

#include "ops/registry.h"
#include "rlx/ir/error.h"
#include "rlx/ir/op_table.h"

namespace rlx {
namespace {

// The registry: every entry from ops.def, then each family's attribute schema and inference.
OpTable<OpInfo>& registry() {
  static OpTable<OpInfo> t("op registry", [](OpTable<OpInfo>& table) {
#define RLX_OP(kind, mnemonic, n_in, n_out, traits, dtypes, doc) \
  table.set(OpKind::kind, OpInfo{OpKind::kind,                   \
                                 mnemonic,                       \
                                 n_in,                           \
                                 n_out,                          \
                                 static_cast<uint32_t>(traits),  \
                                 dtypes,                         \
                                 doc,                            \
                                 {},                             \
                                 nullptr});
#include "rlx/ir/ops.def"
#undef RLX_OP
    detail::register_leaf_ops();
    detail::register_elementwise_ops();
    detail::register_linalg_ops();
    detail::register_reduce_ops();
    detail::register_shape_ops();
    detail::register_nn_ops();
    detail::register_conv_ops();
    detail::register_fused_ops();
    detail::register_quant_ops();
    detail::register_random_ops();
    detail::register_control_flow_ops();
    detail::register_collective_ops();
    detail::register_custom_ops();
  });
  return t;
}

std::string operand_list(std::span<const TensorType> ts) {
  std::string s;
  for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + ts[i].to_string();
  return s.empty() ? "(none)" : s;
}

}  // namespace

namespace detail {
OpInfo& mutable_op_info(OpKind kind) { return registry().entry(kind); }
void define_op(OpKind kind, std::vector<AttrSpec> attrs, InferFn infer) {
  OpInfo& info = mutable_op_info(kind);
  info.attrs = std::move(attrs);
  info.infer = infer;
}
}  // namespace detail

const OpInfo& op_info(OpKind kind) { return registry().at(kind); }

std::optional<OpKind> op_from_name(std::string_view name) {
  for (int i = 0; i < kNumOps; ++i)
    if (kOpMnemonics[i] == name) return static_cast<OpKind>(i);
  return std::nullopt;
}

const AttrSpec* OpInfo::find_attr(std::string_view n) const {
  for (const AttrSpec& a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}

void InferContext::fail(const std::string& what) const {
  throw Error("op '" + std::string(op.name) + "' (node %" + std::string(node) + "): " + what +
              "; operand types: " + operand_list(operands));
}

void InferContext::require_op_dtype(DType t, const std::string& what) const {
  if (!op.dtypes.contains(t))
    fail(what + " must be " + describe_dtypes(op.dtypes) + ", got " + std::string(dtype_name(t)));
}

void validate_attrs(const OpInfo& builtin, std::string_view node, AttrMap& attrs) {
  // A custom_call is validated against the schema of the custom op it names.
  const OpInfo& op =
      builtin.kind == OpKind::CustomCall ? detail::custom_call_schema(node, attrs) : builtin;
  auto where = "op '" + std::string(op.name) + "' (node %" + std::string(node) + "): ";
  for (const auto& [name, value] : attrs.entries()) {
    const AttrSpec* spec = op.find_attr(name);
    if (!spec) {
      std::string known;
      for (const AttrSpec& a : op.attrs) known += (known.empty() ? "" : ", ") + a.name;
      throw Error(where + "unknown attribute '" + name +
                  "' (known: " + (known.empty() ? "none" : known) + ")");
    }
    if (attr_type(value) != spec->type)
      throw Error(where + "attribute '" + name + "' must be a " +
                  std::string(attr_type_name(spec->type)) + ", got a " +
                  std::string(attr_type_name(attr_type(value))));
    if (!spec->choices.empty()) {
      const auto& s = std::get<std::string>(value);
      bool ok = false;
      std::string list;
      for (const auto& c : spec->choices) {
        ok = ok || c == s;
        list += (list.empty() ? "" : ", ") + c;
      }
      if (!ok)
        throw Error(where + "attribute '" + name + "' is \"" + s + "\"; expected one of " + list);
    }
  }
  for (const AttrSpec& spec : op.attrs) {
    if (attrs.has(spec.name)) continue;
    if (spec.presence == AttrPresence::Required)
      throw Error(where + "missing required attribute '" + spec.name + "' (" +
                  std::string(attr_type_name(spec.type)) + ")");
    if (spec.presence == AttrPresence::Default) attrs.set(spec.name, spec.default_value);
  }
}

namespace detail {

Shape broadcast_operands(const InferContext& ctx, size_t first, size_t count) {
  size_t end = count == SIZE_MAX ? ctx.operands.size() : first + count;
  Shape out = ctx.operands[first].shape;
  for (size_t i = first + 1; i < end; ++i) {
    auto b = broadcast_shapes(out, ctx.operands[i].shape);
    if (!b)
      ctx.fail("shapes " + out.to_string() + " and " + ctx.operands[i].shape.to_string() +
               " do not broadcast");
    out = *b;
  }
  return out;
}

DType common_dtype(const InferContext& ctx, size_t first, size_t count) {
  size_t end = count == SIZE_MAX ? ctx.operands.size() : first + count;
  DType t = ctx.operands[first].dtype;
  for (size_t i = first + 1; i < end; ++i)
    if (ctx.operands[i].dtype != t)
      ctx.fail("operands must have the same dtype, got " + std::string(dtype_name(t)) + " and " +
               std::string(dtype_name(ctx.operands[i].dtype)));
  return t;
}

void require_dtype(const InferContext& ctx, DType t, bool ok, const char* expected,
                   const std::string& what) {
  if (!ok) ctx.fail(what + " must be " + expected + ", got " + std::string(dtype_name(t)));
}

std::vector<int> normalize_axes(const InferContext& ctx, const std::vector<int64_t>& axes, int rank,
                                const char* attr) {
  std::vector<int> out;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      ctx.fail(std::string(attr) + " entry " + std::to_string(a) + " is out of range for rank " +
               std::to_string(rank));
    int n = static_cast<int>(a < 0 ? a + rank : a);
    if (seen[static_cast<size_t>(n)])
      ctx.fail(std::string(attr) + " repeats axis " + std::to_string(n));
    seen[static_cast<size_t>(n)] = true;
    out.push_back(n);
  }
  return out;
}

int normalize_axis(const InferContext& ctx, int64_t axis, int rank, const char* attr) {
  if (axis < -rank || axis >= rank)
    ctx.fail(std::string(attr) + " " + std::to_string(axis) + " is out of range for rank " +
             std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

int64_t checked_add(const InferContext& ctx, int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) ctx.fail("shape arithmetic overflows int64");
  return r;
}

int64_t checked_mul(const InferContext& ctx, int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) ctx.fail("shape arithmetic overflows int64");
  return r;
}

Shape matmul_shape(const InferContext& ctx, const Shape& x, const Shape& y) {
  if (x.rank() == 0 || y.rank() == 0)
    ctx.fail("matmul operands must have rank >= 1, got shapes " + x.to_string() + " and " +
             y.to_string());
  int64_t xk = x[x.rank() - 1];
  int64_t yk = y.rank() == 1 ? y[0] : y[y.rank() - 2];
  if (xk != yk)
    ctx.fail("matmul of " + x.to_string() + " and " + y.to_string() +
             ": contracting sizes differ (" + std::to_string(xk) + " vs " + std::to_string(yk) +
             ")");
  Shape xb, yb;
  for (int i = 0; i + 2 < x.rank(); ++i) xb.dims().push_back(x[i]);
  for (int i = 0; i + 2 < y.rank(); ++i) yb.dims().push_back(y[i]);
  auto batch = broadcast_shapes(xb, yb);
  if (!batch)
    ctx.fail("matmul of " + x.to_string() + " and " + y.to_string() + ": batch dims " +
             xb.to_string() + " and " + yb.to_string() + " do not broadcast");
  Shape result = *batch;
  if (x.rank() >= 2) result.dims().push_back(x[x.rank() - 2]);
  if (y.rank() >= 2) result.dims().push_back(y[y.rank() - 1]);
  return result;
}

}  // namespace detail
}  // namespace rlx
