// Collective ops (all_reduce, all_gather, reduce_scatter, all_to_all): the participant
// attributes (rlx/ir/collective.h), schemas and shape/dtype inference. Shapes are per device:
// all_gather multiplies its axis by the group size S, reduce_scatter divides, all_to_all does
// both.
#include "rlx/ir/collective.h"

#include <algorithm>
#include <string>
#include <vector>

#include "registry.h"

namespace rlx {

CollectiveGroups collective_groups(const AttrMap& attrs) {
  CollectiveGroups out;
  if (attrs.has("axis_name")) out.axis_name = attrs.get_string("axis_name");
  int64_t axis_size = attrs.has("axis_size") ? attrs.get_int("axis_size") : 0;
  check(!attrs.has("axis_size") || axis_size >= 1,
        "axis_size must be >= 1, got " + std::to_string(axis_size));
  if (attrs.has("replica_groups")) {
    const Tensor& t = attrs.get_tensor("replica_groups");
    check(t.dtype() == DType::i64 && t.shape().rank() == 2,
          "replica_groups must be an i64 tensor [groups, group size], got " + t.type().to_string());
    int64_t rows = t.shape()[0], size = t.shape()[1];
    check(rows >= 1 && size >= 1,
          "replica_groups must hold at least one group of at least one device, got " +
              t.type().to_string());
    const int64_t* ids = t.data_as<int64_t>();
    std::vector<bool> seen(static_cast<size_t>(t.numel()), false);
    for (int64_t i = 0; i < t.numel(); ++i) {
      check(ids[i] >= 0 && ids[i] < t.numel() && !seen[static_cast<size_t>(ids[i])],
            "replica_groups must hold every device id 0.." + std::to_string(t.numel() - 1) +
                " exactly once, got id " + std::to_string(ids[i]) + " at position " +
                std::to_string(i));
      seen[static_cast<size_t>(ids[i])] = true;
    }
    for (int64_t r = 0; r < rows; ++r)
      out.groups.emplace_back(ids + r * size, ids + (r + 1) * size);
    out.group_size = size;
    check(axis_size == 0 || axis_size == size, "axis_size " + std::to_string(axis_size) +
                                                   " differs from the group size " +
                                                   std::to_string(size) + " of replica_groups");
  } else {
    out.group_size = axis_size;
  }
  return out;
}

ReplicaGroups groups_for_run(const AttrMap& attrs, int64_t num_devices) {
  CollectiveGroups c = collective_groups(attrs);
  if (c.groups.empty()) {
    check(c.group_size == 0 || c.group_size == num_devices,
          "axis_size " + std::to_string(c.group_size) + " (one group of all devices) differs " +
              "from the run's " + std::to_string(num_devices) + " devices");
    ReplicaGroups all(1);
    for (int64_t d = 0; d < num_devices; ++d) all[0].push_back(d);
    return all;
  }
  int64_t covered = static_cast<int64_t>(c.groups.size()) * c.group_size;
  check(covered == num_devices,
        "replica_groups " + attrs.get_tensor("replica_groups").type().to_string() + " name " +
            std::to_string(covered) + " devices, the run has " + std::to_string(num_devices));
  return c.groups;
}

Tensor replica_groups_tensor(const ReplicaGroups& groups) {
  check(!groups.empty(), "replica_groups: no groups");
  size_t size = groups[0].size();
  std::vector<int64_t> flat;
  for (const auto& g : groups) {
    check(g.size() == size, "replica_groups: every group must have the same size (" +
                                std::to_string(size) + "), got one of " + std::to_string(g.size()));
    flat.insert(flat.end(), g.begin(), g.end());
  }
  return Tensor::from_ints(
      DType::i64, Shape{static_cast<int64_t>(groups.size()), static_cast<int64_t>(size)}, flat);
}

AttrMap collective_attrs(const ReplicaGroups& groups, const std::string& axis_name,
                         int64_t axis_size) {
  AttrMap a;
  if (!groups.empty()) a.set("replica_groups", replica_groups_tensor(groups));
  if (!axis_name.empty()) a.set("axis_name", axis_name);
  if (axis_size > 0) a.set("axis_size", axis_size);
  return a;
}

namespace detail {
namespace {

CollectiveGroups groups(const InferContext& ctx) {
  try {
    return collective_groups(ctx.attrs);
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
}

// S for the collectives whose result shape depends on it.
int64_t known_group_size(const InferContext& ctx) {
  int64_t s = groups(ctx).group_size;
  if (s == 0)
    ctx.fail(std::string(ctx.op.name) +
             " needs the group size for its result shape: give replica_groups or axis_size");
  return s;
}

// Fails unless dim `axis` of `x` divides by the group size `s`.
void require_divisible(const InferContext& ctx, const Shape& x, int axis, const char* attr,
                       int64_t s) {
  if (x[axis] % s != 0)
    ctx.fail(std::string(attr) + " " + std::to_string(axis) + " of " + x.to_string() +
             " has size " + std::to_string(x[axis]) + ", not divisible by the group size " +
             std::to_string(s));
}

std::vector<TensorType> infer_all_reduce(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  ctx.require_op_dtype(x.dtype, "operand dtype");
  groups(ctx);
  if (ctx.attrs.get_string("reduce") == "mean")
    require_dtype(ctx, x.dtype, is_float(x.dtype), "a float type for reduce \"mean\"",
                  "operand dtype");
  return {x};
}

std::vector<TensorType> infer_all_gather(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  ctx.require_op_dtype(x.dtype, "operand dtype");
  int64_t s = known_group_size(ctx);
  int axis = normalize_axis(ctx, ctx.attrs.get_int("axis"), x.shape.rank());
  Shape out = x.shape;
  out[axis] = checked_mul(ctx, out[axis], s);
  return {{x.dtype, out}};
}

std::vector<TensorType> infer_reduce_scatter(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  ctx.require_op_dtype(x.dtype, "operand dtype");
  int64_t s = known_group_size(ctx);
  int axis = normalize_axis(ctx, ctx.attrs.get_int("scatter_dimension"), x.shape.rank(),
                            "scatter_dimension");
  require_divisible(ctx, x.shape, axis, "scatter_dimension", s);
  Shape out = x.shape;
  out[axis] /= s;
  return {{x.dtype, out}};
}

std::vector<TensorType> infer_all_to_all(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  ctx.require_op_dtype(x.dtype, "operand dtype");
  int64_t s = known_group_size(ctx);
  int split = normalize_axis(ctx, ctx.attrs.get_int("split_axis"), x.shape.rank(), "split_axis");
  int concat = normalize_axis(ctx, ctx.attrs.get_int("concat_axis"), x.shape.rank(), "concat_axis");
  require_divisible(ctx, x.shape, split, "split_axis", s);
  Shape out = x.shape;
  out[split] /= s;
  out[concat] = checked_mul(ctx, out[concat], s);
  return {{x.dtype, out}};
}

// The participant attributes every collective carries.
std::vector<AttrSpec> with_groups(std::vector<AttrSpec> specs) {
  specs.push_back(opt("replica_groups", AttrType::Tensor));
  specs.push_back(opt("axis_size", AttrType::Int));
  specs.push_back(def("axis_name", AttrType::String, std::string()));
  return specs;
}

}  // namespace

void register_collective_ops() {
  define_op(OpKind::AllReduce,
            with_groups({def("reduce", AttrType::String, std::string("sum"),
                             {"sum", "max", "min", "mean"})}),
            infer_all_reduce);
  define_op(OpKind::AllGather, with_groups({req("axis", AttrType::Int)}), infer_all_gather);
  define_op(OpKind::ReduceScatter, with_groups({req("scatter_dimension", AttrType::Int)}),
            infer_reduce_scatter);
  define_op(OpKind::AllToAll,
            with_groups({req("split_axis", AttrType::Int), req("concat_axis", AttrType::Int)}),
            infer_all_to_all);
}

}  // namespace detail
}  // namespace rlx
