// Control-flow ops (cond, while_loop, scan): attribute schemas and shape/dtype inference, which is
// also their verifier. Each owns regions — self-contained body graphs held as graph attributes —
// whose inputs receive the op's operands by position (docs/ir.md "Regions"). Their builders are
// in src/ir/builder.cc, their reference kernels in src/ir/eval/control_flow.cc.
#include <string>
#include <vector>

#include "registry.h"
#include "rlx/ir/graph.h"

namespace rlx::detail {
namespace {

// "branch 1 (@b1)" / "body (@step)": how diagnostics name a region.
std::string region_name(const std::string& role, const Graph& body) {
  return role + " (@" + body.name() + ")";
}

// Checks that `body` takes exactly `want` as its inputs (in creation order), holds no params
// (a body sees only what its op passes in) and returns at least one value; returns the types
// of its outputs.
std::vector<TensorType> check_body(const InferContext& ctx, const std::string& role,
                                   const Graph& body, const std::vector<TensorType>& want,
                                   const std::vector<std::string>& what) {
  std::string name = region_name(role, body);
  std::vector<int32_t> ins = body.inputs();
  if (ins.size() != want.size())
    ctx.fail(name + " has " + std::to_string(ins.size()) + " inputs but is passed " +
             std::to_string(want.size()) + " values");
  for (size_t i = 0; i < ins.size(); ++i) {
    const TensorType& got = body.node(ins[i]).results[0];
    if (got != want[i])
      ctx.fail(name + " input " + std::to_string(i) + " (%" + body.node(ins[i]).name + ") is " +
               got.to_string() + " but " + what[i] + " is " + want[i].to_string());
  }
  for (const Node& n : body.nodes())
    if (n.op == OpKind::Param)
      ctx.fail(name + " holds param %" + n.name +
               "; a body sees only its inputs (pass the weight as an operand)");
  if (body.outputs().empty()) ctx.fail(name + " returns no values");
  std::vector<TensorType> out;
  for (Value v : body.outputs()) out.push_back(body.type(v));
  return out;
}

// Names of the operand slots, for diagnostics: "operand 3 (const 0)" etc.
std::string slot(size_t operand, const char* kind, size_t i) {
  return "operand " + std::to_string(operand) + " (" + kind + " " + std::to_string(i) + ")";
}

int64_t num_consts(const InferContext& ctx, size_t limit) {
  int64_t n = ctx.attrs.get_int("num_consts");
  if (n < 0 || static_cast<uint64_t>(n) > limit)
    ctx.fail("num_consts must be in [0, " + std::to_string(limit) + "], got " + std::to_string(n));
  return n;
}

std::vector<TensorType> infer_cond(const InferContext& ctx) {
  if (ctx.operands.empty()) ctx.fail("needs a predicate or branch index operand");
  const TensorType& pred = ctx.operands[0];
  bool is_pred = pred.dtype == DType::bool_;
  if (pred.shape.rank() != 0 || (!is_pred && pred.dtype != DType::i32))
    ctx.fail(
        "operand 0 must be a bool[] predicate (lax.cond) or an i32[] branch index "
        "(lax.switch), got " +
        pred.to_string());
  const GraphList& branches = ctx.attrs.get_graphs("branches");
  if (branches.empty()) ctx.fail("needs at least one branch");
  if (is_pred && branches.size() != 2)
    ctx.fail("a bool predicate selects between exactly 2 branches ([false, true]), got " +
             std::to_string(branches.size()));
  std::vector<TensorType> args(ctx.operands.begin() + 1, ctx.operands.end());
  std::vector<std::string> what;
  for (size_t i = 0; i < args.size(); ++i) what.push_back("operand " + std::to_string(i + 1));
  std::vector<TensorType> first;
  for (size_t b = 0; b < branches.size(); ++b) {
    const Graph& g = *branches[b];
    std::vector<TensorType> out = check_body(ctx, "branch " + std::to_string(b), g, args, what);
    if (b == 0) {
      first = std::move(out);
      continue;
    }
    std::string name = region_name("branch " + std::to_string(b), g);
    std::string name0 = region_name("branch 0", *branches[0]);
    if (out.size() != first.size())
      ctx.fail(name + " returns " + std::to_string(out.size()) + " values but " + name0 +
               " returns " + std::to_string(first.size()));
    for (size_t r = 0; r < out.size(); ++r)
      if (out[r] != first[r])
        ctx.fail(name + " result " + std::to_string(r) + " is " + out[r].to_string() + " but " +
                 name0 + " result " + std::to_string(r) + " is " + first[r].to_string());
  }
  return first;
}

std::vector<TensorType> infer_while(const InferContext& ctx) {
  size_t nc = static_cast<size_t>(num_consts(ctx, ctx.operands.size()));
  if (ctx.operands.size() == nc)
    ctx.fail("needs at least one carried value (operands after the " + std::to_string(nc) +
             " consts)");
  if (ctx.attrs.has("max_trip_count") && ctx.attrs.get_int("max_trip_count") < 0)
    ctx.fail("max_trip_count must be >= 0, got " +
             std::to_string(ctx.attrs.get_int("max_trip_count")));
  std::vector<TensorType> args(ctx.operands.begin(), ctx.operands.end());
  std::vector<TensorType> carry(ctx.operands.begin() + static_cast<ptrdiff_t>(nc),
                                ctx.operands.end());
  std::vector<std::string> what;
  for (size_t i = 0; i < args.size(); ++i)
    what.push_back(i < nc ? slot(i, "const", i) : slot(i, "carry", i - nc));
  const Graph& cond = ctx.attrs.get_graph("cond");
  std::vector<TensorType> c = check_body(ctx, "cond", cond, args, what);
  if (c.size() != 1 || c[0] != TensorType{DType::bool_, Shape{}}) {
    std::string got;
    for (const TensorType& t : c) got += (got.empty() ? "" : ", ") + t.to_string();
    ctx.fail(region_name("cond", cond) + " must return one bool[] value, got " + got);
  }
  const Graph& body = ctx.attrs.get_graph("body");
  std::vector<TensorType> out = check_body(ctx, "body", body, args, what);
  if (out.size() != carry.size())
    ctx.fail(region_name("body", body) + " returns " + std::to_string(out.size()) +
             " values but the loop carries " + std::to_string(carry.size()));
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] != carry[i])
      ctx.fail(region_name("body", body) + " result " + std::to_string(i) + " is " +
               out[i].to_string() + " but carry " + std::to_string(i) + " is " +
               carry[i].to_string());
  return carry;
}

std::vector<TensorType> infer_scan(const InferContext& ctx) {
  size_t n = ctx.operands.size();
  size_t nc = static_cast<size_t>(num_consts(ctx, n));
  int64_t ncarry = ctx.attrs.get_int("num_carry");
  if (ncarry < 0 || static_cast<uint64_t>(ncarry) > n - nc)
    ctx.fail("num_carry must be in [0, " + std::to_string(n - nc) + "], got " +
             std::to_string(ncarry));
  size_t nk = static_cast<size_t>(ncarry);
  int64_t length = ctx.attrs.get_int("length");
  if (length < 0) ctx.fail("length must be >= 0, got " + std::to_string(length));
  if (ctx.attrs.get_int("unroll") < 1)
    ctx.fail("unroll must be >= 1, got " + std::to_string(ctx.attrs.get_int("unroll")));
  std::vector<TensorType> args;
  std::vector<std::string> what;
  for (size_t i = 0; i < n; ++i) {
    TensorType t = ctx.operands[i];
    if (i < nc) {
      what.push_back(slot(i, "const", i));
    } else if (i < nc + nk) {
      what.push_back(slot(i, "carry", i - nc));
    } else {
      if (t.shape.rank() == 0 || t.shape[0] != length)
        ctx.fail(slot(i, "xs", i - nc - nk) + " is " + t.to_string() +
                 "; each xs needs a leading axis of the scan length " + std::to_string(length));
      t.shape = Shape(std::vector<int64_t>(t.shape.dims().begin() + 1, t.shape.dims().end()));
      what.push_back("the slice of " + slot(i, "xs", i - nc - nk));
    }
    args.push_back(std::move(t));
  }
  const Graph& body = ctx.attrs.get_graph("body");
  std::vector<TensorType> out = check_body(ctx, "body", body, args, what);
  if (out.size() < nk)
    ctx.fail(region_name("body", body) + " returns " + std::to_string(out.size()) +
             " values but the scan carries " + std::to_string(nk));
  for (size_t i = 0; i < nk; ++i)
    if (out[i] != ctx.operands[nc + i])
      ctx.fail(region_name("body", body) + " result " + std::to_string(i) + " is " +
               out[i].to_string() + " but carry " + std::to_string(i) + " is " +
               ctx.operands[nc + i].to_string());
  for (size_t i = nk; i < out.size(); ++i) {
    std::vector<int64_t> dims{length};
    dims.insert(dims.end(), out[i].shape.dims().begin(), out[i].shape.dims().end());
    out[i].shape = Shape(dims);
  }
  return out;
}

}  // namespace

void register_control_flow_ops() {
  define_op(OpKind::Cond, {req("branches", AttrType::Graphs)}, infer_cond);
  define_op(OpKind::WhileLoop,
            {req("cond", AttrType::Graph), req("body", AttrType::Graph),
             def("num_consts", AttrType::Int, int64_t{0}), opt("max_trip_count", AttrType::Int)},
            infer_while);
  define_op(OpKind::Scan,
            {req("body", AttrType::Graph), def("num_consts", AttrType::Int, int64_t{0}),
             def("num_carry", AttrType::Int, int64_t{0}), req("length", AttrType::Int),
             def("reverse", AttrType::Bool, false), def("unroll", AttrType::Int, int64_t{1})},
            infer_scan);
}

}  // namespace rlx::detail
