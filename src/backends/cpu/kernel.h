// Internal: the CPU backend's kernel interface. A kernel factory inspects one node of the
// compiled graph (types and attributes are fixed at compile time), precomputes what it can
// (strides, oneDNN primitives, loop bounds) and returns a Kernel that the executor calls on
// every run with the node's operand and result pointers into the arena / feeds.
#pragma once

#include <cstddef>
#include <functional>

#include "rlx/ir/graph.h"

namespace rlx::cpu {

/// Pointers of one node's operands (in operand order) and results (in result order), resolved
/// per run. Operand memory may be read-only (params, constants, caller inputs). A result may
/// share storage with an operand only for elementwise ops (the memory plan's in-place rule),
/// so elementwise kernels must read element i of every operand before writing element i.
struct KernelIO {
  const std::byte* const* in;
  std::byte* const* out;
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
/// its results, and may use rlx::parallel_for. Called only when every result has elements.
using Kernel = std::function<void(const KernelIO&)>;

/// Builds the kernel for node `node` of `g` (its operands' types are g.type(operand)), or
/// returns an empty Kernel when this factory has no kernel for the node's dtypes/attributes;
/// the executor then runs the reference evaluator's kernel instead (correct, slow, allocates).
using KernelFactory = Kernel (*)(const Graph& g, const Node& node);

/// Registers the native kernel factory of `op` (from the register_*_kernels functions).
void set_kernel_factory(OpKind op, KernelFactory factory);
/// The factory registered for `op`, or nullptr.
KernelFactory kernel_factory(OpKind op);
/// A kernel that runs `node` through the reference evaluator (evaluate_op on borrowed
/// operands, results copied into place).
Kernel reference_kernel(const Graph& g, const Node& node);

// One per file of kernels/; each registers the factories of its op family.
void register_elementwise_kernels();
void register_gemm_kernels();
void register_nn_kernels();
void register_reduce_kernels();
void register_shape_kernels();

}  // namespace rlx::cpu
