// StableHLO lowerings of the collectives as jax emits them under SPMD (shard_map / pjit):
// stablehlo.all_reduce / reduce_scatter with a combiner region, stablehlo.all_gather and
// stablehlo.all_to_all, each with replica_groups as a dense i64 [groups, size] tensor of global
// device ids and a channel_handle of type 1 (DEVICE_TO_DEVICE), numbered 1, 2, ... in graph
// order; all_reduce / all_gather / reduce_scatter carry use_global_device_ids (flattened ids).
// all_reduce mean is a sum divided by the group size (jax's pmean).
#include "rlx/ir/collective.h"

#include <string>

#include "lower.h"
#include "rlx/ir/error.h"

namespace rlx::pjrt::lower {
namespace {

// `replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>` and S, the group size.
std::pair<std::string, int64_t> replica_groups(const Node& n) {
  CollectiveGroups c = collective_groups(n.attrs);
  ReplicaGroups groups = c.groups;
  if (groups.empty()) {
    check(c.group_size > 0, "stablehlo lowering: " + std::string(op_name(n.op)) + " (node %" +
                                n.name +
                                ") over all devices needs its group size: give replica_groups "
                                "or axis_size");
    groups.emplace_back();
    for (int64_t d = 0; d < c.group_size; ++d) groups[0].push_back(d);
  }
  std::string s = "replica_groups = dense<[";
  for (size_t g = 0; g < groups.size(); ++g) {
    s += (g ? ", [" : "[");
    for (size_t i = 0; i < groups[g].size(); ++i)
      s += (i ? ", " : "") + std::to_string(groups[g][i]);
    s += "]";
  }
  s += "]> : tensor<" + std::to_string(groups.size()) + "x" + std::to_string(groups[0].size()) +
       "xi64>";
  return {s, static_cast<int64_t>(groups[0].size())};
}

// `channel_handle = #stablehlo.channel_handle<handle = K, type = 1>`, K = 1 + the collectives
// before `n` in its graph.
std::string channel_handle(const Emitter& e, const Node& n) {
  int64_t k = 1;
  for (const Node& m : e.graph().nodes()) {
    if (&m == &n) break;
    if (op_info(m.op).has(kCollective)) ++k;
  }
  return "channel_handle = #stablehlo.channel_handle<handle = " + std::to_string(k) + ", type = 1>";
}

std::string axis_attr(const Node& n, const char* attr, const char* name) {
  int64_t a = n.results[0].shape.normalize_axis(n.attrs.get_int(attr));
  return std::string(name) + " = " + std::to_string(a) + " : i64";
}

std::vector<std::string> all_reduce(Emitter& e, const Node& n) {
  Operand x = e.operand(n, 0);
  const std::string& reduce = n.attrs.get_string("reduce");
  const char* combiner = reduce == "max"   ? "stablehlo.maximum"
                         : reduce == "min" ? "stablehlo.minimum"
                                           : "stablehlo.add";
  auto [groups, size] = replica_groups(n);
  std::string r = e.emit("stablehlo.all_reduce", {x},
                         channel_handle(e, n) + ", " + groups + ", use_global_device_ids",
                         n.results[0], e.combiner_region(x.type.dtype, combiner));
  if (reduce != "mean") return {r};
  const TensorType& t = n.results[0];
  return {e.emit("stablehlo.divide",
                 {{r, t}, {e.splat(t.dtype, t.shape, static_cast<double>(size)), t}}, "", t)};
}

std::vector<std::string> all_gather(Emitter& e, const Node& n) {
  return {e.emit("stablehlo.all_gather", {e.operand(n, 0)},
                 axis_attr(n, "axis", "all_gather_dim") + ", " + channel_handle(e, n) + ", " +
                     replica_groups(n).first + ", use_global_device_ids",
                 n.results[0])};
}

std::vector<std::string> reduce_scatter(Emitter& e, const Node& n) {
  Operand x = e.operand(n, 0);
  return {e.emit("stablehlo.reduce_scatter", {x},
                 channel_handle(e, n) + ", " + replica_groups(n).first + ", " +
                     axis_attr(n, "scatter_dimension", "scatter_dimension") +
                     ", use_global_device_ids",
                 n.results[0], e.combiner_region(x.type.dtype, "stablehlo.add"))};
}

std::vector<std::string> all_to_all(Emitter& e, const Node& n) {
  auto [groups, size] = replica_groups(n);
  return {e.emit("stablehlo.all_to_all", {e.operand(n, 0)},
                 channel_handle(e, n) + ", " + axis_attr(n, "concat_axis", "concat_dimension") +
                     ", " + groups + ", split_count = " + std::to_string(size) + " : i64, " +
                     axis_attr(n, "split_axis", "split_dimension"),
                 n.results[0])};
}

}  // namespace

void register_collective_lowerings(OpTable<LowerFn>& t) {
  t.set(OpKind::AllReduce, all_reduce);
  t.set(OpKind::AllGather, all_gather);
  t.set(OpKind::ReduceScatter, reduce_scatter);
  t.set(OpKind::AllToAll, all_to_all);
}

}  // namespace rlx::pjrt::lower
