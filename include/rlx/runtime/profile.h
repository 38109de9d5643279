// Execution profile: where an executable's run time goes, per op kind and per node
// (RLX_PROFILE=1 or CompileOptions::profile).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rlx/ir/op.h"

namespace rlx {

/// Whether an executable times its steps. Off costs nothing in run() (one branch per run).
enum class ProfileMode {
  Off,      ///< no timing (the default)
  Collect,  ///< time every step; read with Executable::profile()
  Report,   ///< Collect, and print profile().to_string() to stderr when the executable is
            ///< destroyed (after at least one run); what RLX_PROFILE=1 selects
};

/// The mode named by RLX_PROFILE: std::nullopt when unset or empty, "0" -> Off, "1" -> Report.
/// Throws rlx::Error "RLX_PROFILE must be 0 or 1, found 'yes'" for anything else. Read by
/// Session::compile (resolve_environment) for options that leave `profile` absent.
std::optional<ProfileMode> profile_from_env();

/// Accumulated step timings of one executable object (a clone has its own) over all its runs
/// since compile. Times are steady_clock seconds measured around each kernel call; a step is
/// one node of the compiled graph (Schedule::steps), so fused or decomposed ops appear as the
/// compiled graph has them (Executable::compiled_graph()). The steps of control-flow bodies
/// (cond's branches, while_loop's cond and body, scan's body; nested ones too) are timed the
/// same way inside their op's step, each body step summed over the iterations that ran it.
struct ExecutionProfile {
  /// Totals of one op kind over every step of that kind, body steps included: calls and self
  /// seconds (NodeTotal::self_seconds, so a body step's time counts once: under its own op,
  /// not again under the control-flow op that ran it).
  struct OpTotal {
    OpKind op{};
    int64_t calls = 0;
    double seconds = 0;
  };
  /// One step: its node (an id in compiled_graph() for a top-level step, in its body's
  /// compiled graph for a body step), the node's name (a body step's is qualified by the
  /// steps and regions around it: "s.body/h", "c.branches[1]/s.body/h"), op, calls (a
  /// top-level step: runs; a body step: the times its body ran it, e.g. runs × length for a
  /// scan's body) and seconds (a control-flow step's include its bodies' steps).
  struct NodeTotal {
    int32_t node = 0;
    std::string name;
    OpKind op{};
    int64_t calls = 0;
    double seconds = 0;
    /// `seconds` less the seconds of its bodies' steps (its own bookkeeping: binding carries,
    /// copies, timing its bodies); equal to `seconds` for a step without bodies.
    double self_seconds = 0;
    /// 0 for a step of the top-level schedule, k for a step inside k nested bodies.
    int depth = 0;
    /// The index in `nodes` of the control-flow step whose body holds this step; -1 at depth 0.
    int32_t parent = -1;
  };

  /// Completed runs profiled.
  int64_t runs = 0;
  /// Wall seconds of those runs inside the backend's execute (input binding, every step,
  /// output copies); kernel_seconds() of it is in the kernels.
  double run_seconds = 0;
  /// Per op kind, sorted by seconds, most first (ties by op name); their seconds sum to
  /// kernel_seconds().
  std::vector<OpTotal> ops;
  /// Per step, in schedule order, each control-flow step followed by its bodies' steps (region
  /// by region, each in its body's schedule order, recursively). Every step appears, also
  /// before any run.
  std::vector<NodeTotal> nodes;

  /// True when nothing was profiled (profiling off, or no run yet).
  bool empty() const { return runs == 0; }
  /// Sum of the seconds of the top-level steps (depth 0; body steps are inside those).
  double kernel_seconds() const;
  /// A table: per op kind (op, calls, total ms, % of run_seconds) sorted by time, a line for
  /// the time outside kernels (run_seconds - kernel_seconds), then the 20 slowest top-level
  /// nodes, each control-flow node followed by the 20 slowest steps of its bodies (indented,
  /// qualified names, recursively). A control-flow node's ms are its total, bodies included.
  std::string to_string() const;
};

}  // namespace rlx
