// StableHLO lowerings of the control-flow ops, as jax lowers lax.cond / lax.switch,
// lax.while_loop and lax.scan: cond -> stablehlo.case, while_loop and scan -> stablehlo.while.
// Bodies are lowered by nested emitters (Emitter::lower_body) into the ops' regions, so regions
// nest (a scan inside a cond branch) and every op a top-level graph may hold may be in a body.
#include <cstdint>
#include <string>
#include <vector>

#include "lower.h"

namespace rlx::pjrt::lower {
namespace {

const TensorType kI32{DType::i32, Shape{}};
// The trip counter of a bounded while_loop and a scan's step.
const TensorType kI64{DType::i64, Shape{}};

std::vector<Operand> operands_of(const std::vector<std::string>& names,
                                 const std::vector<TensorType>& types) {
  std::vector<Operand> out;
  for (size_t i = 0; i < names.size(); ++i) out.push_back({names[i], types[i]});
  return out;
}

// Fresh block arguments of `types` in the region of `e`.
std::vector<Operand> block_arguments(Emitter& e, const std::vector<TensorType>& types) {
  std::vector<Operand> out;
  for (const TensorType& t : types) out.push_back({e.block_argument(), t});
  return out;
}

std::vector<std::string> names_of(const std::vector<Operand>& ops, size_t from, size_t count) {
  std::vector<std::string> out;
  for (size_t i = from; i < from + count; ++i) out.push_back(ops[i].name);
  return out;
}

// cond: the branch index as an i32 (a bool predicate converted, an i32 index clamped to
// [0, N-1] as lax.switch does: stablehlo.case would run the last branch for any out-of-range
// index, negative ones included), then stablehlo.case; the branches read the operands from the
// enclosing block (case regions take no arguments).
std::vector<std::string> cond(Emitter& e, const Node& n) {
  const GraphList& branches = n.attrs.get_graphs("branches");
  Operand index = e.operand(n, 0);
  std::string i32;
  if (index.type.dtype == DType::bool_) {
    i32 = e.emit("stablehlo.convert", {index}, "", kI32);
  } else {
    std::string lo = e.splat(DType::i32, Shape{}, 0);
    std::string hi = e.splat(DType::i32, Shape{}, static_cast<double>(branches.size() - 1));
    i32 = e.emit("stablehlo.clamp", {{lo, kI32}, index, {hi, kI32}}, "", kI32);
  }
  std::vector<std::string> args;
  for (size_t i = 1; i < n.operands.size(); ++i) args.push_back(e.value(n.operands[i]));
  std::vector<std::string> regions;
  for (const GraphRef& b : branches) {
    Emitter branch(*b, e);
    std::vector<std::string> outs = branch.lower_body(args);
    regions.push_back(branch.region({}, operands_of(outs, n.results)));
  }
  return e.emit_with_regions("stablehlo.case", {{i32, kI32}}, regions, n.results);
}

// while_loop: stablehlo.while over (trip counter if bounded, consts..., carry...), the consts
// carried unchanged as jax does. With max_trip_count the condition is `cond(...) && trips <
// max_trip_count` and the body adds 1 to the counter.
std::vector<std::string> while_loop(Emitter& e, const Node& n) {
  auto nc = static_cast<size_t>(n.attrs.get_int("num_consts"));
  const bool bounded = n.attrs.has("max_trip_count");
  std::vector<Operand> init;
  if (bounded) init.push_back({e.splat(DType::i64, Shape{}, 0), kI64});
  for (size_t i = 0; i < n.operands.size(); ++i) init.push_back(e.operand(n, i));
  std::vector<TensorType> types;
  for (const Operand& o : init) types.push_back(o.type);
  const size_t first = bounded ? 1 : 0;  // where the consts start in the loop state
  const size_t state = n.operands.size();

  Emitter c(n.attrs.get_graph("cond"), e);
  std::vector<Operand> cargs = block_arguments(c, types);
  std::string go = c.lower_body(names_of(cargs, first, state))[0];
  if (bounded) {
    std::string max =
        c.splat(DType::i64, Shape{}, static_cast<double>(n.attrs.get_int("max_trip_count")));
    std::string below = c.compare("LT", cargs[0], {max, kI64});
    TensorType p{DType::bool_, Shape{}};
    go = c.emit("stablehlo.and", {{go, p}, {below, p}}, "", p);
  }
  std::string cond_region = c.region(cargs, {{go, {DType::bool_, Shape{}}}});

  Emitter b(n.attrs.get_graph("body"), e);
  std::vector<Operand> bargs = block_arguments(b, types);
  std::vector<std::string> carry = b.lower_body(names_of(bargs, first, state));
  std::vector<Operand> next;
  if (bounded) {
    std::string one = b.splat(DType::i64, Shape{}, 1);
    next.push_back({b.emit("stablehlo.add", {bargs[0], {one, kI64}}, "", kI64), kI64});
  }
  for (size_t i = 0; i < nc; ++i) next.push_back(bargs[first + i]);
  for (size_t i = 0; i < carry.size(); ++i) next.push_back({carry[i], n.results[i]});
  std::string body_region = b.region(bargs, next);

  std::vector<std::string> out =
      e.emit_with_regions("stablehlo.while", init, {cond_region, body_region}, types);
  return std::vector<std::string>(out.begin() + static_cast<ptrdiff_t>(first + nc), out.end());
}

// scan, as jax lowers lax.scan: stablehlo.while over (t, consts..., carry..., xs..., ys...)
// with the ys buffers initialised to zeros; step t reads x_t = xs[i] and writes ys[i]
// (i = t, or length-1-t when reversed) with dynamic_slice / dynamic_update_slice. A scan of
// length 0 runs no body: its results are init and empty ys.
std::vector<std::string> scan(Emitter& e, const Node& n) {
  auto nc = static_cast<size_t>(n.attrs.get_int("num_consts"));
  auto nk = static_cast<size_t>(n.attrs.get_int("num_carry"));
  const int64_t length = n.attrs.get_int("length");
  const bool reverse = n.attrs.get_bool("reverse");
  const size_t nx = n.operands.size() - nc - nk, ny = n.results.size() - nk;
  if (length == 0) {
    std::vector<std::string> out;
    for (size_t i = 0; i < nk; ++i) out.push_back(e.value(n.operands[nc + i]));
    for (size_t j = 0; j < ny; ++j)
      out.push_back(e.splat(n.results[nk + j].dtype, n.results[nk + j].shape, 0));
    return out;
  }
  std::vector<Operand> init{{e.splat(DType::i64, Shape{}, 0), kI64}};
  for (size_t i = 0; i < n.operands.size(); ++i) init.push_back(e.operand(n, i));
  for (size_t j = 0; j < ny; ++j) {
    const TensorType& t = n.results[nk + j];
    init.push_back({e.splat(t.dtype, t.shape, 0), t});
  }
  std::vector<TensorType> types;
  for (const Operand& o : init) types.push_back(o.type);

  Graph none("scan_cond");
  Emitter c(none, e);
  std::vector<Operand> cargs = block_arguments(c, types);
  std::string len = c.splat(DType::i64, Shape{}, static_cast<double>(length));
  std::string go = c.compare("LT", cargs[0], {len, kI64});
  std::string cond_region = c.region(cargs, {{go, {DType::bool_, Shape{}}}});

  Emitter b(n.attrs.get_graph("body"), e);
  std::vector<Operand> bargs = block_arguments(b, types);
  Operand t = bargs[0];
  if (reverse) {
    std::string last = b.splat(DType::i64, Shape{}, static_cast<double>(length - 1));
    t = {b.emit("stablehlo.subtract", {{last, kI64}, bargs[0]}, "", kI64), kI64};
  }
  Operand zero{b.splat(DType::i64, Shape{}, 0), kI64};
  // [t, 0, 0, ...]: the start of step t's slice in an array of rank `rank`.
  auto starts = [&](const TensorType& x) {
    std::vector<Operand> s{t};
    for (int d = 1; d < x.shape.rank(); ++d) s.push_back(zero);
    return s;
  };
  std::vector<std::string> inputs = names_of(bargs, 1, nc + nk);
  for (size_t j = 0; j < nx; ++j) {
    const Operand& xs = bargs[1 + nc + nk + j];
    std::vector<int64_t> sizes = xs.type.shape.dims(), step_dims(sizes.begin() + 1, sizes.end());
    sizes[0] = 1;
    std::vector<Operand> ops{xs};
    for (const Operand& s : starts(xs.type)) ops.push_back(s);
    TensorType slice{xs.type.dtype, Shape(sizes)}, x_t{xs.type.dtype, Shape(step_dims)};
    std::string sl =
        b.emit("stablehlo.dynamic_slice", ops, "slice_sizes = " + i64_array(sizes), slice);
    inputs.push_back(b.emit("stablehlo.reshape", {{sl, slice}}, "", x_t));
  }
  std::vector<std::string> outs = b.lower_body(inputs);
  std::string one = b.splat(DType::i64, Shape{}, 1);
  std::vector<Operand> next{{b.emit("stablehlo.add", {bargs[0], {one, kI64}}, "", kI64), kI64}};
  for (size_t i = 0; i < nc; ++i) next.push_back(bargs[1 + i]);
  for (size_t i = 0; i < nk; ++i) next.push_back({outs[i], n.results[i]});
  for (size_t j = 0; j < nx; ++j) next.push_back(bargs[1 + nc + nk + j]);
  for (size_t j = 0; j < ny; ++j) {
    const Operand& ys = bargs[1 + nc + nk + nx + j];
    std::vector<int64_t> dims = ys.type.shape.dims();
    dims[0] = 1;
    TensorType one_step{ys.type.dtype, Shape(dims)};
    TensorType y_t{ys.type.dtype, Shape(std::vector<int64_t>(dims.begin() + 1, dims.end()))};
    std::string r = b.emit("stablehlo.reshape", {{outs[nk + j], y_t}}, "", one_step);
    std::vector<Operand> ops{ys, {r, one_step}};
    for (const Operand& s : starts(ys.type)) ops.push_back(s);
    next.push_back({b.emit("stablehlo.dynamic_update_slice", ops, "", ys.type), ys.type});
  }
  std::string body_region = b.region(bargs, next);

  std::vector<std::string> out =
      e.emit_with_regions("stablehlo.while", init, {cond_region, body_region}, types);
  std::vector<std::string> results;
  for (size_t i = 0; i < nk; ++i) results.push_back(out[1 + nc + i]);
  for (size_t j = 0; j < ny; ++j) results.push_back(out[1 + nc + nk + nx + j]);
  return results;
}

}  // namespace

void register_control_flow_lowerings(OpTable<LowerFn>& t) {
  t.set(OpKind::Cond, cond);
  t.set(OpKind::WhileLoop, while_loop);
  t.set(OpKind::Scan, scan);
}

}  // namespace rlx::pjrt::lower
