// CPU kernels of the collectives (all_reduce, all_gather, reduce_scatter, all_to_all) over a
// simulated device axis: each device is one thread of run_spmd (rlx/runtime/spmd.h), and the
// kernel exchanges its operand with the other devices through the run's in-process Communicator,
// then computes its own result from the operands of its group with the reference evaluator's
// definition (evaluate_collective_group: float sums in f64 in rank order, rounded once), so the
// CPU backend equals evaluate_spmd exactly. Outside run_spmd a run is one device: a collective
// is a group of one. Groups that do not cover the run's devices are a run error (set_spmd_error;
// run() throws it).
#include "rlx/ir/collective.h"

#include <cstring>
#include <string>
#include <vector>

#include "../kernel.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/spmd.h"

namespace rlx::cpu {
namespace {

Kernel make_collective(const Graph& g, const Node& node) {
  const TensorType in = g.type(node.operands[0]);
  const TensorType out = node.results[0];
  return [node, in, out](const KernelIO& io) {
    const SpmdRank rank = current_spmd_rank();
    const int64_t n = rank.comm ? rank.comm->num_devices() : 1;
    const std::string where = std::string(op_name(node.op)) + " (node %" + node.name + "): ";
    ReplicaGroups groups;
    try {
      groups = groups_for_run(node.attrs, n);
    } catch (const Error& e) {
      set_spmd_error(where + e.what() +
                     (n == 1 ? " (a run over several devices is run_spmd's)" : ""));
      return;
    }
    // This device's group and rank in it.
    std::vector<int64_t> group;
    size_t my_rank = 0;
    for (const auto& row : groups)
      for (size_t r = 0; r < row.size(); ++r)
        if (row[r] == rank.device) {
          group = row;
          my_rank = r;
        }
    auto compute = [&](std::span<const std::byte* const> all) {
      try {
        std::vector<Tensor> xs;
        for (int64_t d : group)
          xs.push_back(Tensor::borrow(in.dtype, in.shape, all[static_cast<size_t>(d)]));
        std::vector<Tensor> rs = evaluate_collective_group(node, xs);
        const Tensor& mine = rs[my_rank];
        if (mine.type() != out) {
          set_spmd_error(where + "produced " + mine.type().to_string() + ", expected " +
                         out.to_string() + " (its group size differs from the inferred one)");
          return;
        }
        std::memcpy(io.out[0], mine.data(), mine.nbytes());
      } catch (const std::exception& e) {
        set_spmd_error(where + e.what());
      }
    };
    if (rank.comm == nullptr) {
      const std::byte* self = io.in[0];
      compute(std::span<const std::byte* const>(&self, 1));
      return;
    }
    if (!rank.comm->exchange(rank.device, io.in[0], compute))
      set_spmd_error(where + "aborted: another device of the run failed");
  };
}

}  // namespace

void register_collective_kernels() {
  for (OpKind op : {OpKind::AllReduce, OpKind::AllGather, OpKind::ReduceScatter, OpKind::AllToAll})
    register_native(op, make_collective);
}

}  // namespace rlx::cpu
