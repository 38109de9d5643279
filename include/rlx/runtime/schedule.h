// The device-neutral execution schedule of a planned graph: which nodes compute, in which
// order, and where every operand and result lives (an arena offset, a caller input, a param, a
// constant, or a view into one of them). A backend creates one kernel per step and resolves
// locations to its own pointers (host or device) at run time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"
#include "rlx/opt/memory_plan.h"
#include "rlx/runtime/executable.h"

namespace rlx {

/// Where the bytes of one value are at run time: a base plus a byte offset.
struct Location {
  enum class Kind : uint8_t {
    Arena,     ///< the executable's activation arena (MemoryPlan::arena_bytes)
    Input,     ///< the data of caller input `index` (the executable's inputs() order)
    Param,     ///< the data bound to param `index` (the executable's params() order)
    Constant,  ///< the data of constant `index` (Schedule::constants order)
    State,     ///< the storage of state `index` (the executable's state() order), kept by it
  };
  Kind kind = Kind::Arena;
  /// Input, param, constant or state number; 0 for the arena.
  int32_t index = 0;
  /// Bytes from the base: the planned arena offset, the byte offset of a view into a leaf's
  /// data (0 for the leaf itself), or the offset into a state's storage.
  int64_t offset = 0;
  bool operator==(const Location&) const = default;
  /// "arena+64", "input0", "param1+16", "constant2", "state0".
  std::string to_string() const;
};

/// One node that computes: the node id in the compiled graph and the locations of its
/// operands (operand order) and results (result order).
struct ScheduleStep {
  int32_t node = 0;
  std::vector<Location> operands;
  std::vector<Location> results;
  bool operator==(const ScheduleStep&) const = default;
};

/// A planned graph as a flat list of steps over one arena. Only Arena and State locations are
/// ever written (a result never lives in an input, param or constant).
struct Schedule {
  /// The computing nodes in node order (the plan's liveness order). A node has no step when
  /// it is a leaf (input, param, constant), when every result is a view (reshape, contiguous
  /// slice, ...: the plan aliases it to its source), or when every result is empty.
  std::vector<ScheduleStep> steps;
  /// Node ids of the compiled graph's constant nodes, in node order: Location{Constant, i}
  /// reads the data of constant node constants[i] (a backend materializes each once, dense:
  /// kernels read every element, also of a splat).
  std::vector<int32_t> constants;
  /// Nodes left out because every result has no elements (nothing to compute), in node order.
  std::vector<int32_t> empty;
  /// The location of each output of the compiled graph, in output order.
  std::vector<Location> outputs;
  /// Bytes of the arena the locations index (the plan's arena_bytes).
  int64_t arena_bytes = 0;
  bool operator==(const Schedule&) const = default;
  /// One line per step ("%name = op (node 3): operands [input0, arena+0] -> results
  /// [arena+64]"), then the outputs; for tests and debugging.
  std::string to_string(const Graph& compiled) const;
};

/// The schedule of `compiled` (a graph after the pipeline, executed in node order) under
/// `plan` (plan_memory(compiled)). `inputs` / `params` are the executable's specs: a compiled
/// input or param node is located by its name in them, so Location indices follow the
/// executable's order, not the compiled graph's. The inputs the plan holds as state
/// (MemoryPlan::state_inputs) and the values planned in their storage get State locations,
/// numbered as in plan.state_inputs (the executable's state() order). Throws rlx::Error when an
/// input or param of `compiled` is not in the specs, or when the plan has no buffer for a value
/// a step or output needs ("schedule: no buffer for %x#0 in the memory plan").
Schedule make_schedule(const Graph& compiled, const MemoryPlan& plan,
                       const std::vector<IoSpec>& inputs, const std::vector<IoSpec>& params);

}  // namespace rlx
