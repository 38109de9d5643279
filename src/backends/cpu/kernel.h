// Internal: the CPU backend's kernel interface. A kernel factory inspects one node of the
// compiled graph (types and attributes are fixed at compile time), precomputes what it can
// (strides, oneDNN primitives, loop bounds) and returns a Kernel that the executor calls on
// every run with the node's operand and result pointers into the arena / feeds.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"
#include "rlx/ir/op_table.h"

namespace rlx::cpu {

/// One step's profile (CompileOptions::profile other than Off): its accumulated wall seconds
/// and the number of times it ran.
struct StepTime {
  double seconds = 0;
  int64_t calls = 0;
};

/// Pointers of one node's operands (in operand order) and results (in result order), resolved
/// per run. Operand memory may be read-only (params, constants, caller inputs). A result may
/// share storage with an operand only for elementwise ops (the memory plan's in-place rule),
/// so elementwise kernels must read element i of every operand before writing element i, and
/// for dynamic_update_slice, whose result may be operand 0's storage (out[0] == in[0]).
struct KernelIO {
  const std::byte* const* in;
  std::byte* const* out;
  /// The step's scratch (64-byte aligned, KernelChoice::scratch_bytes of it; not zeroed, and
  /// shared by every step of the program, so nothing in it outlives the call). A kernel that
  /// asked for none must not use it.
  std::byte* scratch = nullptr;
  /// Profiled runs only (else nullptr): where a region kernel's bodies accumulate their steps'
  /// StepTimes, one body's Program::profile_slots after another in RegionKernel::bodies
  /// order. Other kernels ignore it.
  StepTime* profile = nullptr;
  template <class T>
  const T* input(size_t i) const {
    return reinterpret_cast<const T*>(in[i]);
  }
  template <class T>
  T* output(size_t i) const {
    return reinterpret_cast<T*>(out[i]);
  }
};

/// A compiled kernel. It must not throw (errors are compile-time), must write every element of
/// its results (a result that no node and no graph output reads may be left as it is), and may
/// use rlx::parallel_for. Called only when every result has elements.
using Kernel = std::function<void(const KernelIO&)>;

/// Least bytes a parallel chunk of a memory-bound kernel (copies and transposes, gathers,
/// elementwise, normalizations, reductions) moves; smaller work stays on the calling thread.
/// A parallel region costs ~20 us on the 2-vCPU VMs rlx is measured on whenever the sibling
/// thread has gone to sleep (GOMP_SPINCOUNT=300, docs/runtime.md "Threads"), the time such a
/// kernel takes to stream ~200 KiB; MiniLM batch 1 x 128 (a [128, 384] f32 activation, 192 KiB)
/// then runs its transposes, norms and gathers on one thread and forks only for GEMMs and
/// attention.
inline constexpr int64_t kParallelChunkBytes = int64_t{256} << 10;
/// kParallelChunkBytes in f32 elements: the grain of kernels that count elements.
inline constexpr int64_t kParallelChunkElements = kParallelChunkBytes / 4;

/// Builds the kernel for node `node` of `g` (its operands' types are g.type(operand)), or
/// returns an empty Kernel when it declines the node (only in the cases its table entry's
/// `declines` states); the executor then runs the reference evaluator's kernel instead.
using KernelFactory = Kernel (*)(const Graph& g, const Node& node);

struct Program;
/// Compiles a region body (a self-contained graph) into a Program through the backend's own
/// pipeline, under the enclosing compile's options; given to region kernel factories.
using BodyCompiler = std::function<std::shared_ptr<const Program>(const Graph& body)>;

/// One compiled body of a region kernel: its region ("body", "cond", "branches[1]") and Program.
struct RegionBody {
  std::string region;
  std::shared_ptr<const Program> program;
};

/// A kernel that runs region bodies (a control-flow op), the scratch it needs per run (its
/// bodies' blocks and carry slots: Program::block_bytes) and its bodies, in the order their
/// profile slots follow one another under KernelIO::profile.
struct RegionKernel {
  Kernel kernel;
  int64_t scratch_bytes = 0;
  std::vector<RegionBody> bodies{};
};
/// Builds the region kernel of `node`, compiling each of its bodies once with `bodies`.
using RegionKernelFactory = RegionKernel (*)(const Graph& g, const Node& node,
                                             const BodyCompiler& bodies);

/// The CPU kernel table's entry of one op: its native kernel and, stated explicitly, where the
/// op runs on the reference evaluator's kernel instead (correct, but slow and allocating).
/// The coverage matrix (tests/ops/coverage_test.cc) requires every dtype of the op's class
/// (ops.def) to be native or covered by `fallback`, and the parity sweep that no node falls
/// back for an undeclared reason.
struct KernelEntry {
  /// The native kernel's factory; nullptr for an op that only runs on the reference kernel.
  KernelFactory factory = nullptr;
  /// The dtypes (Graph::class_dtype of a node) the factory runs natively.
  DTypeSet native;
  /// Why the class's other dtypes run on the reference kernel ("" when `native` is the class).
  std::string fallback;
  /// When the factory declines a node of a native dtype ("": never), e.g. a rank limit.
  std::string declines;
  /// A region op's (cond, while_loop, scan) factory instead of `factory`: native for every
  /// dtype of its class.
  RegionKernelFactory region = nullptr;
};

/// Registers the entry of `op` (from the register_*_kernels functions); an op is registered
/// once. Throws rlx::Error unless `fallback` is given exactly when `native` is not the op's
/// whole dtype class.
void register_kernel(OpKind op, KernelEntry entry);
/// Registers `factory` as native for every dtype of `op`'s class; `declines` as in KernelEntry.
inline void register_native(OpKind op, KernelFactory factory, std::string declines = "") {
  register_kernel(op, {factory, op_info(op).dtypes, "", std::move(declines)});
}
/// Registers `factory` as the region kernel of `op` (every dtype of its class native).
inline void register_region(OpKind op, RegionKernelFactory factory) {
  register_kernel(op, {nullptr, op_info(op).dtypes, "", "", factory});
}
/// The table; its keys are the backend's supported_ops().
const OpTable<KernelEntry>& kernel_table();

/// How one node runs: its kernel, whether it is the native one and, if not, why.
struct KernelChoice {
  Kernel kernel;
  bool native = false;
  std::string fallback_reason;       ///< the entry's `fallback` or `declines`; "" when native
  int64_t scratch_bytes = 0;         ///< KernelIO::scratch the kernel needs (region kernels)
  std::vector<RegionBody> bodies{};  ///< a region kernel's compiled bodies (RegionKernel::bodies)
};
/// The kernel for `node` of `g` by the table: the native factory's when the node's class
/// dtype is native and the factory accepts it, else the reference kernel with the reason.
/// A region op's kernel compiles its bodies with `bodies` (required for those ops).
/// Throws rlx::Error for an op without a table entry (legalization keeps those away).
KernelChoice choose_kernel(const Graph& g, const Node& node, const BodyCompiler* bodies = nullptr);
/// A kernel that runs `node` through the reference evaluator (evaluate_op on borrowed
/// operands, results copied into place).
Kernel reference_kernel(const Graph& g, const Node& node);

// One per file of kernels/; each registers the factories of its op family.
void register_elementwise_kernels();
void register_gemm_kernels();
void register_nn_kernels();
void register_reduce_kernels();
void register_shape_kernels();
void register_quant_kernels();
void register_random_kernels();
void register_collective_kernels();
void register_control_flow_kernels();
void register_custom_kernels();

}  // namespace rlx::cpu
