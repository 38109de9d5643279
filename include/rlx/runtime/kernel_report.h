// KernelReport: how a compiled executable runs each node of its graph (which kernel, native or
// a fallback), as data; Executable::kernel_report() is its text form.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rlx/ir/dtype.h"
#include "rlx/ir/op.h"

namespace rlx {

/// Nodes of one op kind that run a native kernel and nodes that run the backend's fallback.
struct KernelCounts {
  int native = 0;
  int fallback = 0;
  bool operator==(const KernelCounts&) const = default;
};

/// How an executable runs its compiled graph, per node (ONNX Runtime's per-node kernel
/// assignment, XLA's per-instruction kernel names). Built once at compile time; backends fill
/// it, tests and tools read it (never its text).
struct KernelReport {
  struct Node {
    /// Node id in Executable::compiled_graph().
    int32_t node = 0;
    OpKind op = OpKind::Input;
    /// What runs the node. CPU: "cpu" for a native kernel, "reference" for the reference
    /// evaluator's kernel (the fallback); PJRT: "xla" (the node is part of the one XLA
    /// executable).
    std::string kernel;
    /// The dtype of the node's result 0 (its other types: compiled_graph().node(node)).
    DType dtype = DType::f32;
    /// False when the node runs the backend's fallback instead of a native kernel.
    bool native = true;
    /// Why a fallback node is not native (CPU: the reason its kernel table entry declares);
    /// empty for native nodes.
    std::string fallback_reason;
    bool operator==(const Node&) const = default;
  };

  /// The backend's name ("cpu", "pjrt"); empty for an executable that reports nothing.
  std::string backend;
  /// One entry per node that computes, in execution order. Leaves (input, param, constant),
  /// pure views (no memory of their own) and nodes whose every result is empty compute
  /// nothing and are not listed.
  std::vector<Node> nodes;
  /// For a backend that compiles the whole graph into one device program: a line naming it
  /// and the program's text (PJRT: "pjrt: one XLA executable compiled from StableHLO:" and the
  /// StableHLO module); empty for a backend that runs one kernel per node.
  std::string program;

  /// Native / fallback node counts per op kind, in OpKind (ops.def) order; op kinds without a
  /// listed node are absent.
  std::map<OpKind, KernelCounts> counts() const;
  /// The counts of `op` (zero when no listed node has that kind).
  KernelCounts count(OpKind op) const;
  /// The counts over every listed node.
  KernelCounts total() const;
  /// The text form, for --verbose output: `program` when it is not empty; else, unless the
  /// report is empty (""), the line "<backend> kernels (native / reference fallback):", one
  /// line "  <op>: <native> / <fallback>" per op kind of counts(), then one line
  /// "reference fallback: <op> (<dtype>): <reason>" per distinct fallback.
  std::string to_string() const;
};

}  // namespace rlx
