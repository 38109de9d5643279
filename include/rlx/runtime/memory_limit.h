// The memory limit of a compile: what an executable will hold (arena, control-flow bodies,
// params, constants, outputs, state), the limit it must fit in (CompileOptions::memory_limit,
// RLX_MEMORY_LIMIT, default physical memory) and the check every backend runs before allocating
// anything.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/ir/graph.h"
#include "rlx/opt/memory_plan.h"
#include "rlx/runtime/executable.h"

namespace rlx {

/// Parses a byte count: a positive integer with an optional suffix K, M, G or T (powers of
/// 1024, any case, optionally followed by "B" or "iB": "512M", "8G", "64KiB", "1048576").
/// Throws rlx::Error "<what>: expected a positive byte count ..., found 'x'", or "<what>: 'x'
/// is more than 2^63 - 1 bytes".
int64_t parse_memory_size(std::string_view text, std::string_view what);

/// The limit RLX_MEMORY_LIMIT sets (parse_memory_size), or nullopt when the variable is unset
/// or empty. Throws rlx::Error "RLX_MEMORY_LIMIT: ..." for a malformed value. Session calls it
/// (resolve_environment); backends take the limit from their options.
std::optional<int64_t> memory_limit_from_env();

/// The machine's physical memory in bytes (sysconf: _SC_PHYS_PAGES * _SC_PAGE_SIZE), the
/// default memory limit; INT64_MAX when the system does not say.
int64_t physical_memory_bytes();

/// What one executable of a compiled graph holds, in bytes. Every sum saturates at INT64_MAX
/// (declared shapes may be absurd; the check must still report them).
struct PlannedMemory {
  int64_t arena = 0;  ///< the activation arena (MemoryPlan::arena_bytes)
  /// What the bodies of control-flow ops hold beyond the arena, each body counted once: on the
  /// CPU backend the scratch after the arena that the largest control-flow step needs (its
  /// largest body's block, that body's own nested bodies inside it, the op's pointer tables
  /// and carry slot; steps run one at a time, so they share it). 0 for a graph without
  /// control flow and for backends that lower bodies into the device program (pjrt).
  int64_t bodies = 0;
  int64_t params = 0;  ///< every declared param, at its declared type
  /// The compiled graph's constants, stored dense, and those of its compiled bodies (CPU).
  int64_t constants = 0;
  int64_t outputs = 0;  ///< the output tensors one run returns
  int64_t state = 0;    ///< the state storage (CompileOptions::state)
  /// arena + bodies + params + constants + outputs + state (saturating).
  int64_t total() const;
};

/// The memory an executable of `compiled` (planned as `plan`, with the source graph's `params`,
/// `outputs` and `state` specs) holds: the arena, the params, the constants, one run's outputs
/// and the state (counted for each executable, also where executables share_state). Inputs
/// are the caller's and are not counted.
PlannedMemory planned_memory(const Graph& compiled, const MemoryPlan& plan,
                             const std::vector<IoSpec>& params, const std::vector<IoSpec>& outputs,
                             const std::vector<StateSpec>& state = {});

/// Throws rlx::Error when `planned.total()` exceeds `limit` (absent: physical_memory_bytes()):
/// "cpu backend: planned memory 4096.0 MiB (arena 4000.0 MiB, params 96.0 MiB, constants 0.0
/// MiB, outputs 0.0 MiB; 4294967296 bytes) exceeds the limit 512.0 MiB (536870912 bytes,
/// RLX_MEMORY_LIMIT / CompileOptions::memory_limit)"; "bodies X MiB" follows the arena and
/// "state X MiB" the outputs when they are not 0. `backend` names the backend. Backends call
/// it after planning, before they allocate the arena or constants.
void check_memory_limit(const std::string& backend, const PlannedMemory& planned,
                        std::optional<int64_t> limit);

}  // namespace rlx
