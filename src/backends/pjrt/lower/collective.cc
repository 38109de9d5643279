// StableHLO lowerings of the collectives (all_reduce / reduce_scatter with a combiner region,
// all_gather, all_to_all), with replica_groups as a dense i64 [groups, size] tensor, in the two
// forms jax emits. In an SPMD module (shard_map / pjit: partitions) each op carries a
// channel_handle of type 1 (DEVICE_TO_DEVICE), numbered 1, 2, ... in graph order, and all but
// all_to_all use_global_device_ids (the ids are flattened replica x partition ids). In a
// replicated module (jax.pmap: num_replicas = N, one partition) they carry neither: XLA's
// cross-replica mode, the ids are replica ids (an all_to_all with a channel handle would be
// cross-partition there). all_reduce mean is a sum divided by the group size (jax's pmean).
#include "rlx/ir/collective.h"

#include <limits>
#include <string>

#include "lower.h"
#include "rlx/ir/error.h"

namespace rlx::pjrt::lower {
namespace {

std::string where(const Node& n) {
  return "stablehlo lowering: " + std::string(op_name(n.op)) + " (node %" + n.name + ")";
}

// Whether the module runs its devices as replicas (jax.pmap form: no channel handles).
bool cross_replica(const Emitter& e) { return e.spmd() && e.spmd()->num_partitions == 1; }

// `replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>` and S, the group size. In an
// SPMD or replicated module the groups must cover exactly its devices (replicas x partitions).
std::pair<std::string, int64_t> replica_groups(const Emitter& e, const Node& n) {
  CollectiveGroups c = collective_groups(n.attrs);
  ReplicaGroups groups = c.groups;
  if (e.spmd()) {
    int64_t devices = e.spmd()->num_replicas * e.spmd()->num_partitions;
    try {
      groups = groups_for_run(n.attrs, devices);
    } catch (const Error& err) {
      throw Error(where(n) + ": " + err.what() + " (the program runs on " +
                  std::to_string(devices) + " devices)");
    }
  }
  if (groups.empty()) {
    check(c.group_size > 0,
          where(n) + " over all devices needs its group size: give replica_groups or axis_size");
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

// `channel_handle = #stablehlo.channel_handle<handle = K, type = 1>, `, K = 1 + the collectives
// before `n` in its graph (`nan_flag`: the NaN flag's all_reduce of a float max / min, K + the
// number of collectives in the graph); nothing in a replicated module.
std::string channel_handle(const Emitter& e, const Node& n, bool nan_flag = false) {
  if (cross_replica(e)) return "";
  int64_t k = 1, total = 0;
  bool before = true;
  for (const Node& m : e.graph().nodes()) {
    if (&m == &n) before = false;
    if (!op_info(m.op).has(kCollective)) continue;
    ++total;
    if (before) ++k;
  }
  if (nan_flag) k += total;
  return "channel_handle = #stablehlo.channel_handle<handle = " + std::to_string(k) +
         ", type = 1>, ";
}

// `, use_global_device_ids` (flattened ids), nothing in a replicated module.
std::string global_ids(const Emitter& e) {
  return cross_replica(e) ? "" : ", use_global_device_ids";
}

std::string axis_attr(const Node& n, const char* attr, const char* name) {
  int64_t a = n.results[0].shape.normalize_axis(n.attrs.get_int(attr));
  return std::string(name) + " = " + std::to_string(a) + " : i64";
}

// The region of a collective: `combiner` of two scalars of `t`, nothing else. XLA recognises
// only a bare add / maximum / minimum (its reduction kinds): the NaN-propagating max / min
// region of Emitter::combiner_region fails XLA CPU's compile ("Unsupported reduction
// computation"), in bf16 it aborts the process, so collectives propagate NaN outside the region.
std::string plain_region(const Emitter& e, DType t, const char* combiner) {
  std::string scalar = tensor_type(t, Shape{});
  std::string k = std::to_string(e.next_number());
  return " ({\n    ^bb0(%lhs" + k + ": " + scalar + ", %rhs" + k + ": " + scalar +
         "):\n      %red" + k + " = \"" + combiner + "\"(%lhs" + k + ", %rhs" + k + ") : (" +
         scalar + ", " + scalar + ") -> " + scalar + "\n      \"stablehlo.return\"(%red" + k +
         ") : (" + scalar + ") -> ()\n    })";
}

std::vector<std::string> all_reduce(Emitter& e, const Node& n) {
  Operand x = e.operand(n, 0);
  const std::string& reduce = n.attrs.get_string("reduce");
  const char* combiner = reduce == "max"   ? "stablehlo.maximum"
                         : reduce == "min" ? "stablehlo.minimum"
                                           : "stablehlo.add";
  auto [groups, size] = replica_groups(e, n);
  const TensorType& t = n.results[0];
  std::string r = e.emit("stablehlo.all_reduce", {x}, channel_handle(e, n) + groups + global_ids(e),
                         t, plain_region(e, t.dtype, combiner));
  if (is_float(t.dtype) && (reduce == "max" || reduce == "min")) {
    // NaN propagates (rlx's max / min): a second all_reduce max of the operand's NaN flags
    // (1 / 0 in its dtype) selects NaN where any member had one.
    TensorType flags{DType::bool_, t.shape};
    std::string nan = e.compare("NE", x, x);
    std::string one = e.emit("stablehlo.convert", {{nan, flags}}, "", t);
    std::string any = e.emit("stablehlo.all_reduce", {{one, t}},
                             channel_handle(e, n, true) + groups + global_ids(e), t,
                             plain_region(e, t.dtype, "stablehlo.maximum"));
    std::string hit = e.compare("NE", {any, t}, {e.splat(t.dtype, t.shape, 0.0), t});
    return {e.emit("stablehlo.select",
                   {{hit, flags},
                    {e.splat(t.dtype, t.shape, std::numeric_limits<double>::quiet_NaN()), t},
                    {r, t}},
                   "", t)};
  }
  if (reduce != "mean") return {r};
  return {e.emit("stablehlo.divide",
                 {{r, t}, {e.splat(t.dtype, t.shape, static_cast<double>(size)), t}}, "", t)};
}

std::vector<std::string> all_gather(Emitter& e, const Node& n) {
  return {e.emit("stablehlo.all_gather", {e.operand(n, 0)},
                 axis_attr(n, "axis", "all_gather_dim") + ", " + channel_handle(e, n) +
                     replica_groups(e, n).first + global_ids(e),
                 n.results[0])};
}

std::vector<std::string> reduce_scatter(Emitter& e, const Node& n) {
  Operand x = e.operand(n, 0);
  return {e.emit("stablehlo.reduce_scatter", {x},
                 channel_handle(e, n) + replica_groups(e, n).first + ", " +
                     axis_attr(n, "scatter_dimension", "scatter_dimension") + global_ids(e),
                 n.results[0], plain_region(e, x.type.dtype, "stablehlo.add"))};
}

std::vector<std::string> all_to_all(Emitter& e, const Node& n) {
  auto [groups, size] = replica_groups(e, n);
  return {e.emit("stablehlo.all_to_all", {e.operand(n, 0)},
                 channel_handle(e, n) + axis_attr(n, "concat_axis", "concat_dimension") + ", " +
                     groups + ", split_count = " + std::to_string(size) + " : i64, " +
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
