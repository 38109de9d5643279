// Op kinds (from ops.def), traits, attribute schemas and the op registry.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/ir/attr.h"
#include "rlx/ir/tensor.h"

namespace rlx {

/// Every op of the IR; the list and each op's one-line semantics live in ops.def.
enum class OpKind : uint16_t {
#define RLX_OP(kind, mnemonic, n_in, n_out, traits, dtypes, doc) kind,
#include "rlx/ir/ops.def"
#undef RLX_OP
};

/// Number of OpKind values (lines of ops.def); registry tables are arrays of this size.
inline constexpr int kNumOps = 0
#define RLX_OP(kind, mnemonic, n_in, n_out, traits, dtypes, doc) +1
#include "rlx/ir/ops.def"
#undef RLX_OP
    ;

/// The mnemonic of every op, indexed by OpKind, straight from ops.def (usable while the op
/// registry is being built, unlike op_info()).
inline constexpr std::string_view kOpMnemonics[] = {
#define RLX_OP(kind, mnemonic, n_in, n_out, traits, dtypes, doc) mnemonic,
#include "rlx/ir/ops.def"
#undef RLX_OP
};

/// Trait flags: passes ask op_info(kind).has(kElementwise) instead of keeping op lists.
enum OpTrait : uint32_t {
  kLeaf = 1u << 0,         ///< no operands (input, param, constant, iota)
  kElementwise = 1u << 1,  ///< result element i depends only on operand elements at i
  kUnary = 1u << 2,        ///< one operand
  kBinary = 1u << 3,       ///< two operands of one dtype, numpy-broadcast
  kCommutative = 1u << 4,  ///< op(x, y) == op(y, x)
  kCompare = 1u << 5,      ///< result dtype is bool
  kReduction = 1u << 6,    ///< reduces attr axes / axis
  kShapeOp = 1u << 7,      ///< moves data without arithmetic
  kComposite = 1u << 8,    ///< has a decomposition into primitives (opt layer)
  kFused = 1u << 9,        ///< created by a fusion pass
  kCollective = 1u << 10,  ///< communicates across the devices of an SPMD run (never folded)
};

/// How an attribute must appear on a node.
enum class AttrPresence : uint8_t {
  Required,  ///< must be given
  Default,   ///< filled with default_value when absent (and then always printed)
  Optional,  ///< may be absent; absence has a documented meaning
};

/// One entry of an op's attribute schema.
struct AttrSpec {
  std::string name;
  AttrType type;
  AttrPresence presence = AttrPresence::Required;
  Attr default_value = int64_t{0};
  std::vector<std::string> choices = {};  ///< allowed values of a String attribute (empty: any)
};

struct OpInfo;

/// What shape/dtype inference sees of a node under construction. fail() throws an rlx::Error
/// of the form "op 'add' (node %5): <what>; operand types: f32[2,3], f32[4]".
struct InferContext {
  const OpInfo& op;
  std::string_view node;
  std::span<const TensorType> operands;
  const AttrMap& attrs;
  [[noreturn]] void fail(const std::string& what) const;
  /// Fails with "<what> must be <class>, got <dtype>" unless `t` is in the op's dtype class
  /// (ops.def's dtypes column), e.g. "operand must be a float type (f32, f16, bf16, f64), got
  /// i32".
  void require_op_dtype(DType t, const std::string& what) const;
};

/// Shape + dtype inference for one op; throws via ctx.fail on ill-typed operands/attributes.
/// The same function serves the builder (at emit time) and the verifier.
using InferFn = std::vector<TensorType> (*)(const InferContext& ctx);

/// Registry entry of one op. Built once from ops.def plus each family's register_*_ops().
struct OpInfo {
  OpKind kind;
  std::string_view name;
  int num_operands;  ///< -1: variadic
  int num_results;   ///< -1: variadic
  uint32_t traits;
  DTypeSet dtypes;  ///< the dtypes the op accepts (ops.def's dtype column)
  std::string_view doc;
  std::vector<AttrSpec> attrs;
  InferFn infer = nullptr;

  bool has(OpTrait t) const { return (traits & t) != 0; }
  const AttrSpec* find_attr(std::string_view name) const;
};

/// The registry entry of `kind`.
const OpInfo& op_info(OpKind kind);
/// The op whose mnemonic is `name`, or nullopt.
std::optional<OpKind> op_from_name(std::string_view name);
/// The mnemonic of `kind` ("add", "dot_general", ...) as in the text form.
inline std::string_view op_name(OpKind kind) { return kOpMnemonics[static_cast<size_t>(kind)]; }
/// True for the ops that own control-flow regions (cond, while_loop, scan; docs/ir.md
/// "Regions"): passes that recurse into bodies or must not evaluate them ask this.
inline bool is_control_flow(OpKind kind) {
  return kind == OpKind::Cond || kind == OpKind::WhileLoop || kind == OpKind::Scan;
}

/// Checks `attrs` against the schema of `op`: rejects unknown names, wrong types and values
/// outside `choices`, fills defaults. Errors name the op and node.
void validate_attrs(const OpInfo& op, std::string_view node, AttrMap& attrs);

}  // namespace rlx
