// Memory planning: liveness, views, in-place chains, state storage and greedy-by-size arena
// offsets.
#include "rlx/opt/memory_plan.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>

#include "rlx/ir/error.h"

namespace rlx {
namespace {

// Inputs and params are fed by the caller and constants are owned by the executable; iota, the
// other leaf, is computed at run time and so lives in the arena like any result.
bool is_external(OpKind op) {
  return op == OpKind::Input || op == OpKind::Param || op == OpKind::Constant;
}

// Sizes and offsets are int64 byte counts; a legal shape (numel < 2^63) can still need more
// bytes than that, so every size and end offset is computed with an overflow check.
int64_t bytes_of(const TensorType& t) {
  int64_t bytes = 0;
  check(!__builtin_mul_overflow(t.shape.numel(), dtype_size(t.dtype), &bytes),
        "plan_memory: a value of type " + t.to_string() + " needs more than 2^63 - 1 bytes");
  return bytes;
}

// a + b for non-negative sizes/offsets, or an rlx::Error naming the arena as too large.
int64_t add_bytes(int64_t a, int64_t b) {
  int64_t sum = 0;
  check(!__builtin_add_overflow(a, b, &sum),
        "plan_memory: the arena would need more than 2^63 - 1 bytes");
  return sum;
}

int64_t align_up(int64_t bytes, int64_t alignment) {
  return add_bytes(bytes, alignment - 1) / alignment * alignment;
}

// Byte offset of a slice's result inside its operand when the result is one contiguous range
// of it, else -1. Contiguous: the dims after some dim d are taken whole, dim d is a run (stride
// 1, or a single element), and the dims before d keep one element each.
int64_t contiguous_slice_offset(const TensorType& x, const Node& n) {
  const Shape& out = n.results[0].shape;
  if (out.numel() == 0) return 0;
  const std::vector<int64_t>& start = n.attrs.get_ints("start");
  const std::vector<int64_t>& strides = n.attrs.get_ints("strides");
  int d = x.shape.rank() - 1;
  while (d >= 0 && out[d] == x.shape[d]) --d;
  if (d >= 0) {
    int64_t stride = strides.empty() ? 1 : strides[static_cast<size_t>(d)];
    if (stride != 1 && out[d] > 1) return -1;
    for (int k = 0; k < d; ++k)
      if (out[k] > 1) return -1;
  }
  std::vector<int64_t> row_strides = x.shape.strides();
  int64_t offset = 0;
  for (size_t k = 0; k < row_strides.size(); ++k) offset += start[k] * row_strides[k];
  return offset * dtype_size(x.dtype);
}

// Byte offset of a view node's result inside its operand's storage, or -1 when `n` computes
// new data. There is no view trait in ops.def: being a view depends on attributes (slice
// bounds, convert's target dtype), not only on the op kind.
int64_t view_offset(const Graph& g, const Node& n) {
  if (n.results.size() != 1 || n.operands.size() != 1) return -1;
  switch (n.op) {
    case OpKind::Reshape:
    case OpKind::Squeeze:
    case OpKind::ExpandDims:
      return 0;
    case OpKind::Convert:
      return n.attrs.get_dtype("dtype") == g.dtype(n.operands[0]) ? 0 : -1;
    case OpKind::Slice:
      return contiguous_slice_offset(g.type(n.operands[0]), n);
    default:
      return -1;
  }
}

// What the planner and the validator know of one value, derived from the graph alone.
struct ValueInfo {
  bool external = false;    // input/param/constant: owned outside the arena, no buffer
  bool is_view = false;     // aliases `root`
  Value root;               // owner of the storage: the value itself unless it is a view
  int64_t view_offset = 0;  // bytes from the start of root's storage
  int64_t bytes = 0;
  int64_t first = 0;  // defining node
  int64_t last = 0;   // last reader (graph outputs: nodes().size()); roots include their views
};

// The state index of every node (-1: not a state input) for the state input node ids `state`
// (MemoryPlan::state_inputs), or an rlx::Error naming a bad entry.
std::vector<int32_t> state_index_of(const Graph& g, const std::vector<int32_t>& state) {
  std::vector<int32_t> index(g.nodes().size(), -1);
  for (size_t k = 0; k < state.size(); ++k) {
    int32_t id = state[k];
    check(id >= 0 && static_cast<size_t>(id) < g.nodes().size() && g.node(id).op == OpKind::Input,
          "plan_memory: state " + std::to_string(k) + " (node " + std::to_string(id) +
              ") is not an input node of the graph");
    check(index[static_cast<size_t>(id)] < 0,
          "plan_memory: input %" + g.node(id).name + " is listed twice as state");
    index[static_cast<size_t>(id)] = static_cast<int32_t>(k);
  }
  return index;
}

class Liveness {
 public:
  // `state_index`: state_index_of(g, state inputs); a state input is planned like a computed
  // value (it has a buffer), not as external data.
  Liveness(const Graph& g, const std::vector<int32_t>& state_index) : info_(g.nodes().size()) {
    const std::vector<Node>& nodes = g.nodes();
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Node& n = nodes[i];
      int64_t offset = view_offset(g, n);
      for (size_t r = 0; r < n.results.size(); ++r) {
        ValueInfo vi;
        vi.external = is_external(n.op) && state_index[i] < 0;
        vi.root = Value{static_cast<int32_t>(i), static_cast<int32_t>(r)};
        vi.bytes = bytes_of(n.results[r]);
        vi.first = vi.last = static_cast<int64_t>(i);
        if (offset >= 0) {
          const ValueInfo& src = at(n.operands[0]);
          vi.is_view = true;
          vi.root = src.root;
          vi.view_offset = src.view_offset + offset;
        }
        info_[i].push_back(vi);
      }
      for (Value u : n.operands) at(u).last = std::max(at(u).last, static_cast<int64_t>(i));
    }
    for (Value v : g.outputs()) at(v).last = static_cast<int64_t>(nodes.size());
    // A view reads its source's storage, so the storage lives as long as any view of it.
    for (auto& results : info_)
      for (ValueInfo& vi : results)
        if (vi.is_view) at(vi.root).last = std::max(at(vi.root).last, vi.last);
  }

  ValueInfo& at(Value v) {
    return info_[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)];
  }
  const ValueInfo& at(Value v) const {
    return info_[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)];
  }
  bool in_graph(Value v) const {
    return v.node >= 0 && static_cast<size_t>(v.node) < info_.size() && v.index >= 0 &&
           static_cast<size_t>(v.index) < info_[static_cast<size_t>(v.node)].size();
  }

 private:
  std::vector<std::vector<ValueInfo>> info_;
};

// True when every operand of node `n` (index `i`) that reads `root`'s storage does so
// element for element with result `r`: no offset, the result's element count and element
// size. Then the result may overwrite that storage in place.
bool reads_in_step(const Graph& g, const Liveness& live, const Node& n, size_t r, Value root) {
  const TensorType& out = n.results[r];
  bool any = false;
  for (Value u : n.operands) {
    const ValueInfo& ui = live.at(u);
    if (!(ui.root == root)) continue;
    any = true;
    const TensorType& t = g.type(u);
    if (ui.view_offset != 0 || t.shape.numel() != out.shape.numel() ||
        dtype_size(t.dtype) != dtype_size(out.dtype))
      return false;
  }
  return any;
}

// Whether result `r` of node `n` may be written over `root`'s storage (which dies at `n`): an
// elementwise result reading it in step, or dynamic_update_slice's result over its x (operand
// 0, read whole) when no other operand of the node reads that storage; its kernel then writes
// only the update.
bool may_overwrite(const Graph& g, const Liveness& live, const Node& n, size_t r, Value root) {
  if (op_info(n.op).has(kElementwise)) return reads_in_step(g, live, n, r, root);
  if (n.op != OpKind::DynamicUpdateSlice) return false;
  const ValueInfo& x = live.at(n.operands[0]);
  if (!(x.root == root) || x.view_offset != 0 || x.bytes != live.at(root).bytes) return false;
  for (size_t i = 1; i < n.operands.size(); ++i)
    if (live.at(n.operands[i]).root == root) return false;
  return true;
}

// A value by node id and result index, as MemoryPlan::to_string prints it ("n3#0").
std::string id_name(Value v) {
  return "n" + std::to_string(v.node) + "#" + std::to_string(v.index);
}

// A value as the text form names it ("%h", "%top#1").
std::string value_name(const Graph& g, Value v) {
  const Node& n = g.node(v);
  std::string s = "%" + n.name;
  if (n.results.size() > 1) s += "#" + std::to_string(v.index);
  return s;
}

bool live_together(const BufferAssignment& a, const BufferAssignment& b) {
  return a.first_use <= b.last_use && b.first_use <= a.last_use;
}

bool bytes_overlap(const BufferAssignment& a, const BufferAssignment& b) {
  return a.bytes > 0 && b.bytes > 0 && a.offset < b.offset + b.bytes &&
         b.offset < a.offset + a.bytes;
}

}  // namespace

MemoryPlan plan_memory(const Graph& g, int64_t alignment,
                       const std::vector<int32_t>& state_inputs) {
  check(alignment >= 64 && (alignment & (alignment - 1)) == 0,
        "plan_memory: alignment must be a power of two >= 64, got " + std::to_string(alignment));
  const std::vector<Node>& nodes = g.nodes();
  const std::vector<int32_t> state_index = state_index_of(g, state_inputs);
  Liveness live(g, state_index);

  // One slot per storage; a result written in place joins its operand's slot, so a slot is a
  // chain of values whose live ranges meet at the nodes that hand the storage on.
  struct Slot {
    int64_t size = 0;  // aligned
    int64_t first = 0, last = 0;
    int64_t offset = 0;
    int64_t handed_on_at = -1;  // node whose result last took this slot in place
    int32_t state = -1;         // >= 0: the storage of that state, not placed in the arena
  };
  std::vector<Slot> slots;
  std::vector<std::vector<int>> slot_of(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    slot_of[i].assign(n.results.size(), -1);
    auto node = static_cast<int64_t>(i);
    for (size_t r = 0; r < n.results.size(); ++r) {
      const ValueInfo& vi = live.at(Value{static_cast<int32_t>(i), static_cast<int32_t>(r)});
      if (vi.external || vi.is_view) continue;
      int slot = -1;
      if (op_info(n.op).has(kElementwise) || n.op == OpKind::DynamicUpdateSlice) {
        for (Value u : n.operands) {
          Value root = live.at(u).root;
          const ValueInfo& ri = live.at(root);
          if (ri.external || ri.last != node || ri.bytes != vi.bytes) continue;
          int s = slot_of[static_cast<size_t>(root.node)][static_cast<size_t>(root.index)];
          if (slots[static_cast<size_t>(s)].handed_on_at == node) continue;
          if (!may_overwrite(g, live, n, r, root)) continue;
          slot = s;
          break;
        }
      }
      if (slot < 0) {
        slots.push_back({align_up(vi.bytes, alignment), node, vi.last, 0, -1, state_index[i]});
        slot = static_cast<int>(slots.size()) - 1;
      } else {
        Slot& s = slots[static_cast<size_t>(slot)];
        s.last = std::max(s.last, vi.last);
        s.handed_on_at = node;
      }
      slot_of[i][r] = slot;
    }
  }

  // Greedy by size (TFLite GPU delegate, greedy_by_size_assignment.cc): largest first, each in
  // the tightest gap among the placed slots whose live ranges intersect its own.
  std::vector<size_t> order;
  for (size_t k = 0; k < slots.size(); ++k)
    if (slots[k].state < 0) order.push_back(k);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return slots[a].size != slots[b].size ? slots[a].size > slots[b].size
                                          : slots[a].first < slots[b].first;
  });
  std::vector<size_t> placed;
  MemoryPlan plan;
  plan.alignment = alignment;
  plan.state_inputs = state_inputs;
  for (size_t idx : order) {
    Slot& s = slots[idx];
    std::vector<const Slot*> neighbours;
    for (size_t p : placed)
      if (slots[p].first <= s.last && s.first <= slots[p].last) neighbours.push_back(&slots[p]);
    std::sort(neighbours.begin(), neighbours.end(),
              [](const Slot* a, const Slot* b) { return a->offset < b->offset; });
    int64_t best = -1, best_gap = std::numeric_limits<int64_t>::max(), prev_end = 0;
    for (const Slot* p : neighbours) {
      int64_t gap = p->offset - prev_end;
      if (gap >= s.size && gap < best_gap) {
        best = prev_end;
        best_gap = gap;
      }
      prev_end = std::max(prev_end, add_bytes(p->offset, p->size));
    }
    s.offset = best >= 0 ? best : prev_end;
    plan.arena_bytes = std::max(plan.arena_bytes, add_bytes(s.offset, s.size));
    placed.push_back(idx);
  }

  for (size_t i = 0; i < nodes.size(); ++i) {
    for (size_t r = 0; r < nodes[i].results.size(); ++r) {
      Value v{static_cast<int32_t>(i), static_cast<int32_t>(r)};
      const ValueInfo& vi = live.at(v);
      if (vi.external) continue;
      BufferAssignment b;
      b.value = v;
      b.bytes = vi.bytes;
      b.first_use = vi.first;
      b.last_use = vi.last;
      if (!vi.is_view) {
        const Slot& s = slots[static_cast<size_t>(slot_of[i][r])];
        b.offset = s.offset;
        b.state = s.state;
        if (s.state < 0)
          plan.naive_bytes = add_bytes(plan.naive_bytes, align_up(vi.bytes, alignment));
      } else {
        b.is_view = true;
        b.alias_of = vi.root;
        b.offset = vi.view_offset;
        if (!live.at(vi.root).external) {
          int k = slot_of[static_cast<size_t>(vi.root.node)][static_cast<size_t>(vi.root.index)];
          b.offset += slots[static_cast<size_t>(k)].offset;
          b.state = slots[static_cast<size_t>(k)].state;
        }
      }
      plan.buffers.push_back(b);
    }
  }
  return plan;
}

std::string MemoryPlan::to_string() const {
  std::ostringstream os;
  os << "memory plan: arena " << arena_bytes << " bytes, naive " << naive_bytes
     << " bytes, alignment " << alignment;
  if (!state_inputs.empty()) {
    os << ", state inputs";
    for (int32_t id : state_inputs) os << " n" << id;
  }
  os << "\n";
  for (const BufferAssignment& b : buffers) {
    os << "  " << id_name(b.value);
    if (b.state >= 0) os << " state " << b.state;
    os << " offset " << b.offset << " bytes " << b.bytes << " live [" << b.first_use << ", "
       << b.last_use << "]";
    if (b.is_view) os << " view of " << id_name(b.alias_of);
    os << "\n";
  }
  return os.str();
}

std::vector<std::string> validate_plan(const Graph& g, const MemoryPlan& plan) {
  std::vector<std::string> errors;
  const int64_t align = plan.alignment;
  if (align < 64 || (align & (align - 1)) != 0)
    errors.push_back("alignment " + std::to_string(align) + " is not a power of two >= 64");
  std::vector<int32_t> state_index;
  try {
    state_index = state_index_of(g, plan.state_inputs);
  } catch (const Error& e) {
    errors.push_back(e.what());
    return errors;
  }
  Liveness live(g, state_index);
  // The state that owns `v`'s storage (-1: the arena or a leaf).
  auto state_of = [&](Value v) { return state_index[static_cast<size_t>(live.at(v).root.node)]; };

  // Every buffer names a planned value of the graph, and describes it truthfully.
  std::vector<std::vector<int>> buffer_of(g.nodes().size());
  for (size_t i = 0; i < g.nodes().size(); ++i)
    buffer_of[i].assign(g.nodes()[i].results.size(), -1);
  std::vector<bool> usable(plan.buffers.size(), false);
  for (size_t k = 0; k < plan.buffers.size(); ++k) {
    const BufferAssignment& b = plan.buffers[k];
    if (!live.in_graph(b.value)) {
      errors.push_back("buffer " + std::to_string(k) + " is for value " + id_name(b.value) +
                       ", which is not in the graph");
      continue;
    }
    std::string name = value_name(g, b.value);
    const ValueInfo& vi = live.at(b.value);
    int& slot = buffer_of[static_cast<size_t>(b.value.node)][static_cast<size_t>(b.value.index)];
    if (vi.external) {
      errors.push_back(name + " is an input/param/constant and must not have a buffer");
      continue;
    }
    if (slot >= 0) {
      errors.push_back(name + " has two buffers (" + std::to_string(slot) + " and " +
                       std::to_string(k) + ")");
      continue;
    }
    slot = static_cast<int>(k);
    usable[k] = true;
    if (b.bytes != vi.bytes)
      errors.push_back(name + " has " + std::to_string(b.bytes) + " bytes, its type needs " +
                       std::to_string(vi.bytes));
    if (b.is_view != vi.is_view)
      errors.push_back(name + (vi.is_view ? " is a view but its buffer is not marked as one"
                                          : " is not a view but its buffer is marked as one"));
    else if (vi.is_view && !(b.alias_of == vi.root))
      errors.push_back(name + " is a view of " + value_name(g, vi.root) +
                       " but its buffer aliases " +
                       (live.in_graph(b.alias_of) ? value_name(g, b.alias_of)
                                                  : id_name(b.alias_of) + " (not in the graph)"));
    if (b.first_use > vi.first || b.last_use < vi.last)
      errors.push_back(name + " is live [" + std::to_string(vi.first) + ", " +
                       std::to_string(vi.last) + "] but its buffer only [" +
                       std::to_string(b.first_use) + ", " + std::to_string(b.last_use) + "]");
    if (b.bytes != vi.bytes || b.is_view != vi.is_view) usable[k] = false;
  }
  for (size_t i = 0; i < g.nodes().size(); ++i)
    for (size_t r = 0; r < g.nodes()[i].results.size(); ++r) {
      Value v{static_cast<int32_t>(i), static_cast<int32_t>(r)};
      if (!live.at(v).external && buffer_of[i][r] < 0)
        errors.push_back(value_name(g, v) + " has no buffer");
    }

  // Placement of each buffer: aligned and inside the arena (or its state's storage); a view
  // exactly where its source's storage puts it (a view of a leaf: inside that leaf's data).
  // space[k]: -2 outside any planned storage (a view of a leaf), -1 the arena, s state s.
  std::vector<int32_t> space(plan.buffers.size(), -2);
  for (size_t k = 0; k < plan.buffers.size(); ++k) {
    if (!usable[k]) continue;
    const BufferAssignment& b = plan.buffers[k];
    std::string name = value_name(g, b.value);
    const ValueInfo& vi = live.at(b.value);
    const ValueInfo& ri = live.at(vi.root);
    std::string range =
        "[" + std::to_string(b.offset) + ", " + std::to_string(b.offset + b.bytes) + ")";
    // A state input lives at offset 0 of its own storage, a view in its source's storage;
    // another result may be in a state's storage only written in place (checked below).
    int src = buffer_of[static_cast<size_t>(vi.root.node)][static_cast<size_t>(vi.root.index)];
    const int32_t expected = vi.is_view
                                 ? (src >= 0 ? plan.buffers[static_cast<size_t>(src)].state : -1)
                                 : state_of(b.value);
    const bool own_state = !vi.is_view && expected >= 0;
    if ((vi.is_view || own_state)
            ? b.state != expected
            : b.state < -1 || b.state >= static_cast<int32_t>(plan.state_inputs.size())) {
      errors.push_back(name + " is in the storage of " +
                       (expected < 0 ? std::string("the arena or a leaf")
                                     : "state " + std::to_string(expected)) +
                       " but its buffer says state " + std::to_string(b.state));
      continue;
    }
    if (own_state && b.offset != 0) {
      errors.push_back(name + " is state " + std::to_string(expected) +
                       " and must be at offset 0 of its storage, not " + std::to_string(b.offset));
      continue;
    }
    if (vi.is_view && ri.external) {
      if (b.offset != vi.view_offset || b.offset + b.bytes > ri.bytes)
        errors.push_back(name + " at " + range + " must be at [" + std::to_string(vi.view_offset) +
                         ", " + std::to_string(vi.view_offset + vi.bytes) + ") of " +
                         value_name(g, vi.root) + " (" + std::to_string(ri.bytes) + " bytes)");
      continue;
    }
    // The arena, or the storage of the buffer's state (the state input's bytes; a non-view
    // result there is written in place, which the overlap check below verifies).
    space[k] = b.state;
    const int64_t size =
        b.state < 0 ? plan.arena_bytes
                    : live.at(Value{plan.state_inputs[static_cast<size_t>(b.state)], 0}).bytes;
    if (b.offset < 0 || b.offset + b.bytes > size)
      errors.push_back(name + " at " + range + " is outside " +
                       (b.state < 0 ? std::string("the arena")
                                    : "the storage of state " + std::to_string(b.state)) +
                       " of " + std::to_string(size) + " bytes");
    if (!vi.is_view) {
      if (b.state < 0 && align > 0 && b.offset % align != 0)
        errors.push_back(name + " at offset " + std::to_string(b.offset) + " is not aligned to " +
                         std::to_string(align));
      continue;
    }
    if (src >= 0 && b.offset != plan.buffers[static_cast<size_t>(src)].offset + vi.view_offset)
      errors.push_back(name + " at offset " + std::to_string(b.offset) + " must be at " +
                       value_name(g, vi.root) + "'s offset " +
                       std::to_string(plan.buffers[static_cast<size_t>(src)].offset) + " + " +
                       std::to_string(vi.view_offset));
  }

  // No two buffers live at one node share bytes, unless they share storage or `later` is
  // written in place over `earlier`, which dies at that node.
  auto handed_on = [&](const BufferAssignment& earlier, const BufferAssignment& later) {
    const Node& n = g.node(later.value);
    if (later.is_view || later.first_use != later.value.node || earlier.last_use != later.first_use)
      return false;
    Value root = live.at(earlier.value).root;
    int src = buffer_of[static_cast<size_t>(root.node)][static_cast<size_t>(root.index)];
    return src >= 0 && plan.buffers[static_cast<size_t>(src)].offset == later.offset &&
           live.at(root).last == later.first_use &&
           may_overwrite(g, live, n, static_cast<size_t>(later.value.index), root);
  };
  for (size_t a = 0; a < plan.buffers.size(); ++a) {
    if (space[a] < -1) continue;
    const BufferAssignment& x = plan.buffers[a];
    for (size_t b = a + 1; b < plan.buffers.size(); ++b) {
      if (space[b] != space[a]) continue;
      const BufferAssignment& y = plan.buffers[b];
      if (!live_together(x, y) || !bytes_overlap(x, y)) continue;
      if (live.at(x.value).root == live.at(y.value).root) continue;
      if (handed_on(x, y) || handed_on(y, x)) continue;
      auto describe = [&](const BufferAssignment& z) {
        return value_name(g, z.value) + " [" + std::to_string(z.offset) + ", " +
               std::to_string(z.offset + z.bytes) + ") live [" + std::to_string(z.first_use) +
               ", " + std::to_string(z.last_use) + "]";
      };
      errors.push_back(describe(x) + " overlaps " + describe(y));
    }
  }
  return errors;
}

}  // namespace rlx
