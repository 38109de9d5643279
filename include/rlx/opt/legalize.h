// Legalization for a backend: kernel dispatch policy, decomposition of unclaimed ops, and the
// dispatch report (per op kind: native / decomposed / missing).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "rlx/ir/graph.h"
#include "rlx/opt/pass.h"

namespace rlx {

/// How legalization treats an op kind (ONNX Runtime's kernel registry fallbacks, XLA's
/// expander passes). Leaves (input, param, constant) are data, always legal, and never subject
/// to a policy.
enum class KernelDispatch {
  /// A claimed op runs natively; an unclaimed composite is decomposed; an unclaimed primitive
  /// is missing.
  PreferNative,
  /// Every composite is decomposed, claimed or not (the "common IR" path, e.g. to test a
  /// backend's primitives or to compare against its fused kernels). A primitive cannot be
  /// decomposed: claimed it runs natively, unclaimed it is missing.
  ForceCommon,
  /// Nothing is decomposed: an unclaimed op, composite or not, is missing.
  ForceNative,
};

/// "prefer_native", "force_common" or "force_native" (the spelling RLX_KERNEL_DISPATCH uses).
std::string_view kernel_dispatch_name(KernelDispatch policy);

/// The dispatch policy of a compilation: a default plus per-op-kind overrides.
struct DispatchOptions {
  KernelDispatch policy = KernelDispatch::PreferNative;
  std::map<OpKind, KernelDispatch> overrides;

  /// The policy that applies to `op`: its override, else the default.
  KernelDispatch policy_for(OpKind op) const;

  /// Parses a comma-separated list (spaces around entries are ignored): a bare policy word
  /// sets the default, `op=word` an override, where op is a mnemonic of ops.def; e.g.
  /// "force_common" or "prefer_native,attention=force_common,layer_norm=force_native". An
  /// empty string gives the defaults. Throws rlx::Error, prefixed with `source`, naming an
  /// unknown word or op together with the allowed policy words, an empty entry, or a default
  /// or op given twice.
  static DispatchOptions parse(std::string_view text,
                               std::string_view source = "RLX_KERNEL_DISPATCH");
  /// parse() of the environment variable RLX_KERNEL_DISPATCH; unset gives the defaults.
  /// Session calls it when CompileOptions leave dispatch absent (resolve_environment); the
  /// pipeline and backends never read the variable themselves.
  static DispatchOptions from_env();
};

/// How many nodes of one op kind legalization ran natively, decomposed, or could not place.
struct DispatchCounts {
  /// Nodes of this kind in the legalized graph that the backend runs with its own kernel.
  int native = 0;
  /// Nodes of this kind replaced by their decomposition, at any depth (a composite emitted by
  /// another composite's decomposition counts too).
  int decomposed = 0;
  /// Nodes of this kind the backend cannot run (unclaimed primitive, or unclaimed composite
  /// under ForceNative).
  int missing = 0;
  bool operator==(const DispatchCounts&) const = default;
};

/// What legalization decided, per op kind (leaves are not listed).
struct DispatchReport {
  std::string backend;
  std::map<OpKind, DispatchCounts> ops;

  /// Counts of `op` (all zero when the op did not occur).
  DispatchCounts at(OpKind op) const;
  /// True when nothing is missing.
  bool legal() const;
  /// An aligned table: a header line naming the backend, one row per op kind in ops.def order
  /// with its native / decomposed / missing counts, and a total row.
  std::string to_string() const;
};

/// Returns `g` rewritten so that every node is a leaf (input, param, constant) or an op of
/// `supported` that the policy lets run natively: nodes to decompose (see KernelDispatch) are
/// replaced by their decomposition (decompose_node), level by level, until none is left.
/// Inputs, params and outputs are kept; node names are kept where the graph is unchanged
/// around them. The bodies of control-flow nodes (cond, while_loop, scan) are legalized the
/// same way, nested ones included, and counted in the same report; a node inside a body is
/// named with its enclosing nodes in errors ("top_k (node %t in %s.body)"). `g` itself is
/// unchanged. Fills `*report` when given, and prints it to stderr when RLX_DISPATCH_REPORT is set
/// to anything but "" or "0" — in both cases also when legalization fails. Throws one rlx::Error
/// listing every op kind the backend cannot run with the original nodes concerned (a node from a
/// decomposition is named by the node it came from), e.g. "backend 'fake' cannot run: erf (nodes
/// %e, %1 via gelu), layer_norm (node %ln, kept by force_native), top_k (node %t)".
Graph legalize(const Graph& g, const std::set<OpKind>& supported, const DispatchOptions& opts,
               std::string_view backend, DispatchReport* report = nullptr);

/// "legalize": runs legalize() with these arguments; changed when anything was decomposed.
/// When `report` is given it receives the report of the last run (also of a failed run).
std::unique_ptr<Pass> create_legalize_pass(std::set<OpKind> supported, DispatchOptions options,
                                           std::string backend, DispatchReport* report = nullptr);

}  // namespace rlx
