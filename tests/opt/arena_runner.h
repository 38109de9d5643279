// Executes a graph through its memory plan's arena (tests only): every node reads its operands
// from their planned offsets and writes its results at theirs, so a plan that lets two live
// values overlap produces wrong outputs, which tests compare with the reference evaluator.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/memory_plan.h"

namespace rlx::testing {

// Runs `g` node by node through the plan's arena: operands are read from their buffers (or
// from the leaf a view aliases), results written at their offsets; returns the outputs.
inline std::vector<Tensor> run_in_arena(const Graph& g, const MemoryPlan& plan,
                                        const TensorMap& feeds) {
  std::vector<std::byte> arena(static_cast<size_t>(plan.arena_bytes));
  std::fill(arena.begin(), arena.end(), std::byte{0xa5});  // garbage: nothing may read first
  std::vector<std::vector<const BufferAssignment*>> buf(g.nodes().size());
  for (const BufferAssignment& b : plan.buffers) {
    auto& slot = buf[static_cast<size_t>(b.value.node)];
    slot.resize(std::max(slot.size(), static_cast<size_t>(b.value.index) + 1));
    slot[static_cast<size_t>(b.value.index)] = &b;
  }
  std::vector<Tensor> leaf(g.nodes().size());
  auto buffer_of = [&](Value v) -> const BufferAssignment* {
    const auto& slot = buf[static_cast<size_t>(v.node)];
    return static_cast<size_t>(v.index) < slot.size() ? slot[static_cast<size_t>(v.index)]
                                                      : nullptr;
  };
  auto read = [&](Value v) {
    const BufferAssignment* b = buffer_of(v);
    if (b == nullptr) return leaf[static_cast<size_t>(v.node)];
    Tensor t(g.type(v).dtype, g.type(v).shape);
    bool external = b->is_view && buffer_of(b->alias_of) == nullptr;
    const std::byte* base =
        external ? leaf[static_cast<size_t>(b->alias_of.node)].data() : arena.data();
    if (t.nbytes() > 0) std::memcpy(t.data(), base + b->offset, t.nbytes());
    return t;
  };
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.op == OpKind::Input || n.op == OpKind::Param) {
      leaf[i] = feeds.at(n.name);
      continue;
    }
    if (n.op == OpKind::Constant) {
      leaf[i] = n.attrs.get_tensor("value");
      continue;
    }
    std::vector<Tensor> operands;
    for (Value v : n.operands) operands.push_back(read(v));
    std::vector<Tensor> results = evaluate_op(n.op, operands, n.attrs);
    for (size_t r = 0; r < results.size(); ++r) {
      const BufferAssignment* b =
          buffer_of(Value{static_cast<int32_t>(i), static_cast<int32_t>(r)});
      if (b == nullptr) throw Error("no buffer for %" + n.name);
      if (!b->is_view && results[r].nbytes() > 0)
        std::memcpy(arena.data() + b->offset, results[r].data(), results[r].nbytes());
    }
  }
  std::vector<Tensor> outs;
  for (Value v : g.outputs()) outs.push_back(read(v));
  return outs;
}

}  // namespace rlx::testing
