// Automatic mixed precision: the PrecisionPolicy, the per-op precision classes and the "amp" pass.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "rlx/ir/attr.h"
#include "rlx/ir/dtype.h"
#include "rlx/ir/op.h"
#include "rlx/opt/pass.h"

namespace rlx {

/// Base precision of a PrecisionPolicy (after torch.autocast and Keras mixed_precision).
enum class PrecisionMode : uint8_t {
  AlwaysF32,      ///< every float op computes in f32
  AlwaysF16,      ///< every float op computes in f16
  AlwaysBf16,     ///< every float op computes in bf16
  AutoMixedF16,   ///< LowPrecision ops in f16 with f32 accumulation, everything else in f32
  AutoMixedBf16,  ///< LowPrecision ops in bf16 with f32 accumulation, everything else in f32
};

/// How AMP treats an op kind. One table (amp_op_class) holds the class of every op.
enum class AmpOpClass : uint8_t {
  LowPrecision,  ///< matmul-like, tensor-core friendly: low precision under auto policies
  Sensitive,     ///< numerically sensitive (exp/log, norms, softmax, reductions, losses): f32
                 ///< under auto policies
  Default,       ///< not classified: f32 under auto policies (conservative)
  DataMovement,  ///< moves data without arithmetic (shape ops): exact in any dtype, so it runs
                 ///< in the dtype its operands already have and adds no casts
  Typed,         ///< its dtypes are its semantics (convert, leaves, elementwise_region with a
                 ///< typed body): never re-typed, only its consumers convert
};

/// The class of `op`. Derived from traits (kLeaf -> Typed, kShapeOp -> DataMovement, kReduction
/// -> Sensitive) plus the explicit entries of one table in src/opt/amp.cc.
AmpOpClass amp_op_class(OpKind op);
/// The class of a node of kind `op` with `attrs`: amp_op_class(op), refined where an attribute
/// changes the arithmetic. all_reduce is Sensitive (a sum / mean across devices accumulates and
/// stays f32 under the auto policies) except with reduce max / min, which select one device's
/// value and are DataMovement (they run in their operand's dtype), like all_gather and
/// all_to_all; reduce_scatter (a sum) is Sensitive.
AmpOpClass amp_node_class(OpKind op, const AttrMap& attrs);
/// "low_precision", "sensitive", "default", "data_movement" or "typed".
std::string_view amp_op_class_name(AmpOpClass c);

/// Which dtype each float op computes in. `overrides` maps an op kind to its compute dtype
/// (f32, f16 or bf16), replacing what `mode` gives that kind; Typed ops cannot be overridden.
/// Only ops whose float values are f32/f16/bf16 are affected: f64 computations are left alone.
struct PrecisionPolicy {
  PrecisionMode mode = PrecisionMode::AlwaysF32;
  std::map<OpKind, DType> overrides;

  /// True for AutoMixedF16 / AutoMixedBf16.
  bool is_auto() const;
  /// The mode's reduced dtype: f16 or bf16, f32 for AlwaysF32.
  DType low_dtype() const;
  bool operator==(const PrecisionPolicy& o) const = default;
};

/// "always-f32", "always-f16", "always-bf16", "auto-mixed-f16" or "auto-mixed-bf16".
std::string_view precision_mode_name(PrecisionMode mode);

/// Text form for RLX_PRECISION and CLI flags: the mode name, then ",op=dtype" per override in
/// OpKind order, e.g. "auto-mixed-bf16,matmul=f32,softmax=bf16". parse_precision_policy reads
/// it back to an equal policy.
std::string to_string(const PrecisionPolicy& policy);

/// Parses the text form of to_string (no spaces). Throws rlx::Error naming the offending token:
/// "unknown precision policy 'x'; expected one of always-f32, ...", "precision override 'x' must
/// have the form op=dtype", "... unknown op 'x'", "... dtype must be f32, f16 or bf16, found
/// 'x'", "... op 'convert' has typed semantics and cannot be re-typed", "... op 'x' given twice".
PrecisionPolicy parse_precision_policy(std::string_view text);

/// The policy RLX_PRECISION names (parse_precision_policy), or nullopt when the variable is
/// unset or empty. Throws rlx::Error "RLX_PRECISION: <the parse error>". Session calls it
/// (resolve_environment); the pipeline and the backends take the policy from their options.
std::optional<PrecisionPolicy> precision_from_env();

/// "amp": re-types float computations as `policy` says and casts at the boundaries.
///
/// Per node, the compute dtype c is the override for its kind, else by class: LowPrecision ->
/// low_dtype(); Sensitive and Default -> f32 under auto policies, low_dtype() under Always*;
/// DataMovement -> the dtype its float operands already have (their jnp promotion when they
/// differ); Typed -> unchanged. Float operands are converted to c; integer and bool values are
/// never converted. Accumulation: when c is f16/bf16, an op with a `preferred` attribute
/// (dot_general) gets preferred = f32, so it accumulates and returns f32; under auto policies
/// that f32 result is kept, under Always* it is rounded to c (every value is then in c). Ops
/// without such an attribute (matmul, conv, attention, fused_matmul_bias_act) return c; their
/// contract, like XLA's and cuBLAS's bf16 GEMMs, is f32 accumulation and one rounding of the
/// result, which is exactly what the reference evaluator computes.
///
/// Casts: each node's results are converted back to their declared dtype, so graph inputs,
/// params and outputs keep their dtypes. A value is converted to a dtype at most once (reused);
/// a lossless widening (f16/bf16 -> f32, any float -> f64) is looked through, so
/// convert(convert(x: bf16, f32), bf16) is x; casts left unused are removed. Running the pass
/// twice with one policy changes nothing the second time. Throws rlx::Error at creation when an
/// override names a Typed op or a dtype other than f32/f16/bf16.
///
/// Bodies: with `in_bodies` (the default) the pass also rewrites the bodies of cond, while_loop
/// and scan, nested ones included (run_in_bodies), each as a graph of its own under the same
/// policy and overrides: a body's inputs and outputs keep their declared types (converts sit
/// inside the body at its boundary), so carries, branch results and the control-flow nodes
/// keep theirs and the verifier's control-flow rules hold. Idempotent there too. `in_bodies`
/// false leaves bodies alone, for a backend that runs the pipeline on each body itself (the
/// CPU backend: AMP then comes after the body's fusions, as at the top level).
std::unique_ptr<Pass> create_amp_pass(PrecisionPolicy policy, bool in_bodies = true);

}  // namespace rlx
