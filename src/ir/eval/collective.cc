// Reference evaluation of the collectives over a simulated device axis: each device of a group
// gets its result from the operands of every member, computed with the evaluator's own
// elementwise and shape kernels (add, max, min, slice, concatenate). Sums of floats run in f64
// and round once to the dtype (in rank order), as every other evaluator kernel.
#include "rlx/ir/collective.h"

#include <string>
#include <vector>

#include "eval.h"
#include "rlx/ir/error.h"

namespace rlx::detail {
namespace {

Tensor op1(OpKind op, std::vector<Tensor> xs, AttrMap attrs = {}) {
  return evaluate_op(op, xs, attrs)[0];
}

Tensor convert(const Tensor& x, DType t) {
  if (x.dtype() == t) return x;
  return op1(OpKind::Convert, {x}, {{"dtype", t}});
}

// Elementwise sum / max / min of `xs` in order; float sums in f64, rounded once.
Tensor combine(const std::vector<Tensor>& xs, const std::string& reduce) {
  DType t = xs[0].dtype();
  bool wide = reduce == "sum" || reduce == "mean";
  DType acc_t = wide && is_float(t) ? DType::f64 : t;
  OpKind op = reduce == "max" ? OpKind::Max : reduce == "min" ? OpKind::Min : OpKind::Add;
  Tensor acc = convert(xs[0], acc_t);
  for (size_t i = 1; i < xs.size(); ++i) acc = op1(op, {acc, convert(xs[i], acc_t)});
  if (reduce == "mean")
    acc = op1(OpKind::Div, {acc, Tensor::full(acc_t, Shape{}, static_cast<double>(xs.size()))});
  return convert(acc, t);
}

// Block `r` of `s` equal blocks of `x` along `axis`.
Tensor block(const Tensor& x, int axis, int64_t r, int64_t s) {
  const Shape& sh = x.shape();
  std::vector<int64_t> start(static_cast<size_t>(sh.rank()), 0), limit = sh.dims();
  int64_t n = sh[axis] / s;
  start[static_cast<size_t>(axis)] = r * n;
  limit[static_cast<size_t>(axis)] = (r + 1) * n;
  return op1(OpKind::Slice, {x}, {{"start", start}, {"limit", limit}});
}

Tensor concat(std::vector<Tensor> xs, int axis) {
  return op1(OpKind::Concatenate, std::move(xs), {{"dimension", int64_t{axis}}});
}

}  // namespace

// The results of the members of one group, in rank order, from their operands.
std::vector<Tensor> group_results(const Node& n, const std::vector<Tensor>& xs) {
  const int64_t s = static_cast<int64_t>(xs.size());
  auto axis_attr = [&](const char* name) {
    return static_cast<int>(xs[0].shape().normalize_axis(n.attrs.get_int(name)));
  };
  std::vector<Tensor> out;
  switch (n.op) {
    case OpKind::AllReduce: {
      Tensor r = combine(xs, n.attrs.get_string("reduce"));
      for (int64_t i = 0; i < s; ++i) out.push_back(i == 0 ? r : r.clone());
      break;
    }
    case OpKind::AllGather: {
      Tensor r = concat(xs, axis_attr("axis"));
      for (int64_t i = 0; i < s; ++i) out.push_back(i == 0 ? r : r.clone());
      break;
    }
    case OpKind::ReduceScatter: {
      Tensor sum = combine(xs, "sum");
      int axis = axis_attr("scatter_dimension");
      for (int64_t r = 0; r < s; ++r) out.push_back(block(sum, axis, r, s));
      break;
    }
    case OpKind::AllToAll: {
      int split = axis_attr("split_axis"), cat = axis_attr("concat_axis");
      for (int64_t j = 0; j < s; ++j) {
        std::vector<Tensor> parts;
        for (int64_t i = 0; i < s; ++i)
          parts.push_back(block(xs[static_cast<size_t>(i)], split, j, s));
        out.push_back(concat(std::move(parts), cat));
      }
      break;
    }
    default:
      throw Error("reference evaluator: " + std::string(op_name(n.op)) + " is not a collective");
  }
  return out;
}

namespace {

// A collective in a one-device evaluation: a group of one.
std::vector<Tensor> eval_single(const EvalContext& ctx) {
  return {eval_collective(ctx.node, ctx.operands)[0]};
}

}  // namespace

std::vector<Tensor> eval_collective(const Node& n, std::span<const Tensor> per_device) {
  const int64_t num_devices = static_cast<int64_t>(per_device.size());
  ReplicaGroups groups;
  try {
    groups = groups_for_run(n.attrs, num_devices);
  } catch (const Error& e) {
    throw Error("reference evaluator: " + std::string(op_name(n.op)) + " (node %" + n.name +
                "): " + e.what() +
                (num_devices == 1 ? " (a run over several devices is evaluate_spmd's)" : ""));
  }
  std::vector<Tensor> out(per_device.size());
  for (const auto& group : groups) {
    std::vector<Tensor> xs;
    for (int64_t d : group) xs.push_back(per_device[static_cast<size_t>(d)]);
    std::vector<Tensor> rs = group_results(n, xs);
    for (size_t r = 0; r < group.size(); ++r) out[static_cast<size_t>(group[r])] = rs[r];
  }
  for (const Tensor& t : out)
    check(t.type() == n.results[0],
          "reference evaluator: " + std::string(op_name(n.op)) + " (node %" + n.name +
              ") produced " + t.type().to_string() + ", expected " + n.results[0].to_string() +
              " (its group size differs from the one its type was inferred with)");
  return out;
}

void register_eval_collective() {
  for (OpKind op : {OpKind::AllReduce, OpKind::AllGather, OpKind::ReduceScatter, OpKind::AllToAll})
    set_eval(op, eval_single);
}

}  // namespace rlx::detail

namespace rlx {

std::vector<Tensor> evaluate_collective_group(const Node& n, const std::vector<Tensor>& xs) {
  check(!xs.empty(), "evaluate_collective_group: no operands");
  return detail::group_results(n, xs);
}

}  // namespace rlx
