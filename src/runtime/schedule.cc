// The device-neutral schedule of a planned graph (rlx/runtime/schedule.h).
#include "rlx/runtime/schedule.h"

#include <map>
#include <set>
#include <utility>

#include "rlx/ir/error.h"

namespace rlx {
namespace {

bool is_leaf_data(OpKind op) {
  return op == OpKind::Input || op == OpKind::Param || op == OpKind::Constant;
}

int32_t index_in(const std::vector<IoSpec>& specs, const std::string& name, const char* kind) {
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == name) return static_cast<int32_t>(i);
  throw Error(std::string("schedule: ") + kind + " '" + name +
              "' of the compiled graph is not an executable " + kind);
}

}  // namespace

std::string Location::to_string() const {
  std::string s;
  switch (kind) {
    case Kind::Arena:
      s = "arena";
      break;
    case Kind::Input:
      s = "input" + std::to_string(index);
      break;
    case Kind::Param:
      s = "param" + std::to_string(index);
      break;
    case Kind::Constant:
      s = "constant" + std::to_string(index);
      break;
    case Kind::State:
      s = "state" + std::to_string(index);
      break;
  }
  if (kind == Kind::Arena || offset != 0) s += "+" + std::to_string(offset);
  return s;
}

std::string Schedule::to_string(const Graph& compiled) const {
  auto list = [](const std::vector<Location>& ls) {
    std::string s = "[";
    for (size_t i = 0; i < ls.size(); ++i) s += (i ? ", " : "") + ls[i].to_string();
    return s + "]";
  };
  std::string out = "schedule: " + std::to_string(steps.size()) + " steps, arena " +
                    std::to_string(arena_bytes) + " bytes\n";
  for (const ScheduleStep& s : steps) {
    const Node& n = compiled.node(s.node);
    out += "  %" + n.name + " = " + std::string(op_name(n.op)) + " (node " +
           std::to_string(s.node) + "): " + list(s.operands) + " -> " + list(s.results) + "\n";
  }
  return out + "  outputs " + list(outputs) + "\n";
}

Schedule make_schedule(const Graph& compiled, const MemoryPlan& plan,
                       const std::vector<IoSpec>& inputs, const std::vector<IoSpec>& params) {
  const Graph& g = compiled;
  Schedule s;
  s.arena_bytes = plan.arena_bytes;

  // Locations of leaves first, then of every planned buffer.
  std::map<std::pair<int32_t, int32_t>, Location> where;
  std::set<int32_t> state(plan.state_inputs.begin(), plan.state_inputs.end());
  for (int32_t id = 0; id < static_cast<int32_t>(g.nodes().size()); ++id) {
    const Node& n = g.node(id);
    if (state.count(id)) continue;  // planned: a State location below
    if (n.op == OpKind::Input) {
      where[{id, 0}] = {Location::Kind::Input, index_in(inputs, n.name, "input"), 0};
    } else if (n.op == OpKind::Param) {
      where[{id, 0}] = {Location::Kind::Param, index_in(params, n.name, "param"), 0};
    } else if (n.op == OpKind::Constant) {
      where[{id, 0}] = {Location::Kind::Constant, static_cast<int32_t>(s.constants.size()), 0};
      s.constants.push_back(id);
    }
  }
  auto at = [&](Value v) -> const Location& {
    auto it = where.find({v.node, v.index});
    if (it == where.end())
      throw Error("schedule: no buffer for %" + g.node(v.node).name + "#" +
                  std::to_string(v.index) + " in the memory plan");
    return it->second;
  };
  for (const BufferAssignment& b : plan.buffers) {
    Location l{Location::Kind::Arena, 0, b.offset};
    if (b.state >= 0) {
      l = {Location::Kind::State, b.state, b.offset};
    } else if (b.is_view && is_leaf_data(g.node(b.alias_of).op)) {
      // A view outside the arena: its offset counts from the leaf's data.
      l = at(b.alias_of);
      l.offset = b.offset;
    }
    where[{b.value.node, b.value.index}] = l;
  }

  // One step per node that computes (views and leaf data have none).
  std::set<int32_t> computes;
  for (const BufferAssignment& b : plan.buffers)
    if (!b.is_view && !state.count(b.value.node)) computes.insert(b.value.node);
  for (int32_t id = 0; id < static_cast<int32_t>(g.nodes().size()); ++id) {
    const Node& n = g.node(id);
    if (is_leaf_data(n.op)) continue;
    if (!computes.count(id)) continue;  // every result is a view
    size_t empty = 0;
    for (const TensorType& t : n.results) empty += t.shape.numel() == 0;
    if (empty == n.results.size()) {
      s.empty.push_back(id);
      continue;
    }
    ScheduleStep step;
    step.node = id;
    step.operands.reserve(n.operands.size());
    for (Value v : n.operands) step.operands.push_back(at(v));
    step.results.reserve(n.results.size());
    for (int32_t r = 0; r < static_cast<int32_t>(n.results.size()); ++r)
      step.results.push_back(at(Value{id, r}));
    s.steps.push_back(std::move(step));
  }
  for (Value v : g.outputs()) s.outputs.push_back(at(v));
  return s;
}

}  // namespace rlx
