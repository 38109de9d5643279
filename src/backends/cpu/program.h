// Internal: the CPU backend's compiled program (a schedule, one kernel per step, constants) and
// the loop that runs its steps over one arena block. Top-level graphs and region bodies
// (cond's branches, while_loop's cond and body, scan's body) are both Programs: a body is
// compiled once, through the same pipeline, and run by its control-flow op's kernel inside the
// scratch of the enclosing block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernel.h"
#include "rlx/runtime/backend_core.h"
#include "rlx/runtime/schedule.h"

// Under AddressSanitizer the arena is poisoned except for the buffers of the step that runs
// (see ArenaGuard), so that a kernel reading or writing past its operands or results into a
// neighbouring value is reported: all values share one allocation, which ASan alone treats as
// addressable throughout.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define RLX_POISON_ARENA 1
#else
#define RLX_POISON_ARENA 0
#endif

namespace rlx::cpu {

/// The bytes [offset, offset + bytes) of an arena block.
struct ArenaRange {
  int64_t offset = 0;
  int64_t bytes = 0;
};

/// Bytes of a value of type `t`.
inline int64_t byte_size(const TensorType& t) {
  return t.shape.numel() * static_cast<int64_t>(dtype_size(t.dtype));
}
/// `bytes` rounded up to a multiple of 64 (the arena alignment).
inline int64_t align64(int64_t bytes) { return (bytes + 63) / 64 * 64; }

/// Everything compile produces for one graph; shared read-only by an executable and its
/// clones (and, for a body, by the control-flow kernel that runs it).
///
/// Memory: a program runs over one block of block_bytes(): its planned arena
/// (schedule.arena_bytes), then `scratch_bytes` of scratch at `scratch_offset` that every
/// step needing scratch (a control-flow op: its bodies' blocks and carry slots) gets as
/// KernelIO::scratch. Steps run one at a time, so they share it.
struct Program : ProgramInfo {
  Schedule schedule;
  std::vector<Kernel> step_kernels;  // step_kernels[i] runs schedule.steps[i]
  std::vector<Tensor> constants;     // constants[i]: the data of node schedule.constants[i]
  std::vector<TensorType> output_types;
  int64_t scratch_offset = 0;  // align64(schedule.arena_bytes)
  int64_t scratch_bytes = 0;   // the largest scratch of any step
  size_t max_step_operands = 0, max_step_results = 0;
  // ASan builds only: the block bytes step i may touch (its arena operands and results), and
  // those of the outputs.
  std::vector<std::vector<ArenaRange>> step_arena_ranges;
  std::vector<ArenaRange> output_arena_ranges;
  ProfileMode profile = ProfileMode::Off;  // CompileOptions::profile
  // step_bodies[i]: the compiled bodies of step i's control-flow op (RegionKernel::bodies;
  // empty for other steps). Held for the profile's body rows and the memory check.
  std::vector<std::vector<RegionBody>> step_bodies;
  // The StepTimes one profiled run of this program accumulates into: one per step (slot i is
  // step i), then for each step with bodies, its bodies' slots (each body's profile_slots, in
  // step_bodies order) from slot step_profile[i] on.
  size_t profile_slots = 0;
  std::vector<size_t> step_profile;
  // Bytes of the constants of every body inside this program (nested ones included).
  int64_t body_constant_bytes = 0;
  // Outputs a caller may place (Bases::outputs; a control-flow op writes a body's results
  // straight into its own results, carry slots or ys[t]): canonical_output[i] is the first
  // output returning output i's value; external_output[c] says whether canonical output c's
  // buffer can be given from outside (a step computes it into an arena buffer no view reads);
  // step_redirects[s] lists step s's operands and results that are such a value.
  struct Redirect {
    uint32_t output = 0;  // the canonical output
    bool result = false;  // a result of the step (else an operand)
    uint32_t index = 0;   // its operand or result index
  };
  std::vector<size_t> canonical_output;
  std::vector<bool> external_output;
  std::vector<std::vector<Redirect>> step_redirects;

  int64_t block_bytes() const { return scratch_offset + scratch_bytes; }
};

/// Builds the Program of `source` from its pipeline result: the schedule, constants and one
/// kernel per step (a control-flow step compiles its bodies with `bodies`). A top-level graph
/// (`body` false) takes options' quantized params, state and profile mode and is checked
/// against the memory limit (check_program_memory, its bodies' scratch and constants
/// included: the control-flow steps' kernels are built, and so their bodies compiled, before
/// the check, every other kernel and the constants after it); a body has none of those.
std::shared_ptr<Program> lower_program(const Graph& source, PipelineResult&& compiled,
                                       const BackendFacts& facts, const CompileOptions& options,
                                       bool body, const BodyCompiler& bodies);

/// What a program's locations resolve against in one run: its block (Arena locations and
/// scratch), the caller's inputs by input index, and, for a top-level graph, params and state.
struct Bases {
  std::byte* block = nullptr;
  const std::byte* const* inputs = nullptr;
  const ParamBindings<Tensor>* params = nullptr;
  std::vector<Tensor>* state = nullptr;
  /// When set, outputs[c] is where canonical output c is computed when external_output[c]
  /// (other entries are not read).
  std::byte* const* outputs = nullptr;
};

/// The address of location `l` of `p` under `b`. Only Arena and State locations are ever
/// written.
inline std::byte* resolve(const Program& p, const Bases& b, const Location& l) {
  const std::byte* base = nullptr;
  switch (l.kind) {
    case Location::Kind::Arena:
      base = b.block;
      break;
    case Location::Kind::Input:
      base = b.inputs[l.index];
      break;
    case Location::Kind::Param:
      base = (*b.params)[static_cast<size_t>(l.index)].data();
      break;
    case Location::Kind::Constant:
      base = p.constants[static_cast<size_t>(l.index)].data();
      break;
    case Location::Kind::State:
      base = (*b.state)[static_cast<size_t>(l.index)].data();
      break;
  }
  return const_cast<std::byte*>(base) + l.offset;
}

/// Where output `i` of `p`'s last run over `b` is: the caller's place (Bases::outputs) for an
/// external output, else its location.
inline const std::byte* output_address(const Program& p, const Bases& b, size_t i) {
  size_t c = p.canonical_output[i];
  if (b.outputs != nullptr && p.external_output[c]) return b.outputs[c];
  return resolve(p, b, p.schedule.outputs[i]);
}

/// ASan builds: makes `ranges` of the block at `base` addressable while it lives and poisons
/// them again after. Elsewhere it does nothing.
class ArenaGuard {
 public:
  ArenaGuard(std::byte* base, const std::vector<ArenaRange>& ranges)
      : base_(base), ranges_(ranges) {
#if RLX_POISON_ARENA
    for (const ArenaRange& r : ranges_)
      ASAN_UNPOISON_MEMORY_REGION(base_ + r.offset, static_cast<size_t>(r.bytes));
#endif
  }
  ~ArenaGuard() {
#if RLX_POISON_ARENA
    for (const ArenaRange& r : ranges_)
      ASAN_POISON_MEMORY_REGION(base_ + r.offset, static_cast<size_t>(r.bytes));
#endif
  }
  ArenaGuard(const ArenaGuard&) = delete;
  ArenaGuard& operator=(const ArenaGuard&) = delete;

 private:
  std::byte* base_;
  const std::vector<ArenaRange>& ranges_;
};

/// Runs every step of `p` in order over `b` (allocation-free for programs whose steps have at
/// most 64 operands and 64 results). When `times` (p.profile_slots of them) is given, adds
/// each step's wall time and one call to times[i] and hands its bodies their slots
/// (KernelIO::profile); otherwise no clock is read.
void run_steps(const Program& p, const Bases& b, StepTime* times = nullptr);

}  // namespace rlx::cpu
