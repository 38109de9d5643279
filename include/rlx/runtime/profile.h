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
/// compiled graph has them (Executable::compiled_graph()).
struct ExecutionProfile {
  /// Totals of one op kind: its steps' calls (runs × steps of that kind) and seconds.
  struct OpTotal {
    OpKind op{};
    int64_t calls = 0;
    double seconds = 0;
  };
  /// One step: its node in compiled_graph(), the node's name and op, calls (= runs), seconds.
  struct NodeTotal {
    int32_t node = 0;
    std::string name;
    OpKind op{};
    int64_t calls = 0;
    double seconds = 0;
  };

  /// Completed runs profiled.
  int64_t runs = 0;
  /// Wall seconds of those runs inside the backend's execute (input binding, every step,
  /// output copies); kernel_seconds() of it is in the kernels.
  double run_seconds = 0;
  /// Per op kind, sorted by seconds, most first (ties by op name).
  std::vector<OpTotal> ops;
  /// Per step, in schedule order (every step of the schedule appears, also before any run).
  std::vector<NodeTotal> nodes;

  /// True when nothing was profiled (profiling off, or no run yet).
  bool empty() const { return runs == 0; }
  /// Sum of the per-node seconds.
  double kernel_seconds() const;
  /// A table: per op kind (op, calls, total ms, % of run_seconds) sorted by time, a line for
  /// the time outside kernels (run_seconds - kernel_seconds), then the 20 slowest nodes.
  std::string to_string() const;
};

}  // namespace rlx
