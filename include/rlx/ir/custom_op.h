// Custom ops: a process-wide registry of ops users add without editing rlx. Every one runs as
// the built-in op `custom_call` (as stablehlo.custom_call / XLA's CustomCall) whose `name`
// attribute selects the registry entry; each layer dispatches that op to the entry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx {

/// What a custom op's CPU kernel sees: the node's operand and result buffers (host memory,
/// row-major, dense, of the given types) and its attributes. Operands may be read-only memory;
/// the kernel writes every element of every result. It runs on the thread that called run();
/// an rlx::Error it throws fails that run.
struct CustomKernelIO {
  std::span<const TensorType> operand_types;
  std::span<const TensorType> result_types;
  const std::byte* const* operands;
  std::byte* const* results;
  const AttrMap& attrs;
};

/// A custom op's definition (register with register_custom_op). Only `name`, `infer` and
/// `reference` are required; each optional member widens where the op runs:
/// - evaluator: `reference`;
/// - CPU backend: `cpu_kernel`, else `decompose`, else `reference` on the host buffers;
/// - other backends (XLA through PJRT): `decompose`, else compile fails naming the op;
/// - grad / vjp / jvp / hvp: `vjp`, else the derivative of `decompose`, else an error naming
///   the op (rlx's jvp is the transpose of its vjp, so `vjp` also serves forward mode);
/// - vmap: `batch`, else the batched `decompose`, else an error naming the op.
struct CustomOpDef {
  /// The op's mnemonic in the text form, e.g. "my.softplus": words [A-Za-z_][A-Za-z0-9_]*
  /// joined by '.', not a built-in op's mnemonic. Unique in the process.
  std::string name;
  /// The op's own attributes (the implicit `name` attribute is not listed), validated, with
  /// defaults filled, exactly as a built-in op's schema.
  std::vector<AttrSpec> attrs;
  /// Number of operands, or -1 for any number (`infer` then checks it).
  int num_operands = -1;
  /// One sentence of semantics (shown by rlx::custom_op_names users and in diagnostics).
  std::string doc;
  /// Shape/dtype function: the result types (at least one) from the operand types and the
  /// validated attributes; reports bad input with ctx.fail (the message names the custom op
  /// and the node). Serves the builder, the parser and the verifier alike.
  std::function<std::vector<TensorType>(const InferContext& ctx)> infer;
  /// Reference kernel: the results (exactly the inferred types) from host operand tensors.
  std::function<std::vector<Tensor>(std::span<const Tensor> operands, const AttrMap& attrs)>
      reference;
  /// Optional CPU kernel on the host buffers (no copies).
  std::function<void(const CustomKernelIO& io)> cpu_kernel;
  /// Optional decomposition: emits the op's computation from ops other backends run into
  /// `dst` (operands are values of `dst`; node is the custom_call node being replaced) and
  /// returns one value per result with exactly its type.
  std::function<std::vector<Value>(Graph& dst, const Node& node, std::span<const Value> operands)>
      decompose;
  /// Optional vjp rule: the cotangent of each operand (an invalid Value for none) from the
  /// node's operands, results and the cotangent of each result (zeros when nothing flows in),
  /// all values of `g`.
  std::function<std::vector<Value>(Graph& g, const Node& node, std::span<const Value> operands,
                                   std::span<const Value> results,
                                   std::span<const Value> cotangents)>
      vjp;
  /// Optional batching rule: the node's results batched along a new leading axis of size
  /// `batch`, from operands that each have that leading batch axis (values of `g`).
  std::function<std::vector<Value>(Graph& g, const Node& node, std::span<const Value> operands,
                                   int64_t batch)>
      batch;
};

/// Registers `def` for the whole process (thread-safe). Throws rlx::Error when the name is
/// not words [A-Za-z_][A-Za-z0-9_]* joined by '.', is a built-in op's mnemonic or is already
/// registered, or when `infer` or `reference` is missing.
void register_custom_op(CustomOpDef def);

/// The definition registered as `name`, or nullptr.
const CustomOpDef* find_custom_op(std::string_view name);

/// The names of every registered custom op, sorted.
std::vector<std::string> custom_op_names();

/// The definition a `custom_call` node (or attribute map) refers to. Throws rlx::Error naming
/// the node when its `name` attribute is missing or names no registered op.
const CustomOpDef& custom_op_of(const Node& node);

/// The schema a node with `op` and `attrs` is printed, parsed and validated with: op_info(op),
/// except for a custom_call naming a registered op, whose schema is the custom op's (its
/// mnemonic is the custom name, its attributes `name` then the def's own).
const OpInfo& schema_of(OpKind op, const AttrMap& attrs);

/// The registry entry of custom op `name` as an OpInfo (kind CustomCall), or nullptr.
const OpInfo* custom_op_info(std::string_view name);

/// Emits `custom_call` of custom op `name` on `operands` with the op's own `attrs` (defaults
/// filled); returns its results. Throws rlx::Error (naming the custom op and node) for an
/// unknown name, a bad attribute or operands the op's `infer` rejects.
std::vector<Value> custom_call(Graph& g, std::string_view name, std::vector<Value> operands,
                               AttrMap attrs = {}, std::string node_name = "");

}  // namespace rlx
