// Reference kernels of the control-flow ops (cond, while_loop, scan): each body is run by the
// reference evaluator itself, its inputs fed by position from the op's operands.
#include <cstring>

#include "eval.h"
#include "rlx/ir/error.h"

namespace rlx::detail {
namespace {

// Runs `body` with its inputs (in creation order) bound to `args` by position.
std::vector<Tensor> run_body(const Graph& body, const std::vector<Tensor>& args) {
  std::vector<int32_t> ins = body.inputs();
  check(ins.size() == args.size(), "reference evaluator: body @" + body.name() + " takes " +
                                       std::to_string(ins.size()) + " inputs, given " +
                                       std::to_string(args.size()));
  TensorMap feeds;
  for (size_t i = 0; i < ins.size(); ++i) feeds[body.node(ins[i]).name] = args[i];
  return evaluate(body, feeds);
}

// Bytes of one leading-axis slice of t.
size_t slice_bytes(const Tensor& t) {
  return t.shape()[0] == 0 ? 0 : t.nbytes() / static_cast<size_t>(t.shape()[0]);
}

std::vector<Tensor> eval_cond(const EvalContext& ctx) {
  const GraphList& branches = ctx.attrs().get_graphs("branches");
  const Tensor& p = ctx.operands[0];
  int64_t i = p.get_i64(0);  // bool: 0 / 1; i32: clamped like lax.switch
  int64_t last = static_cast<int64_t>(branches.size()) - 1;
  i = i < 0 ? 0 : (i > last ? last : i);
  std::vector<Tensor> args(ctx.operands.begin() + 1, ctx.operands.end());
  return run_body(*branches[static_cast<size_t>(i)], args);
}

std::vector<Tensor> eval_while(const EvalContext& ctx) {
  const Graph& cond = ctx.attrs().get_graph("cond");
  const Graph& body = ctx.attrs().get_graph("body");
  auto nc = static_cast<size_t>(ctx.attrs().get_int("num_consts"));
  std::optional<int64_t> max_trips;
  if (ctx.attrs().has("max_trip_count")) max_trips = ctx.attrs().get_int("max_trip_count");
  std::vector<Tensor> args(ctx.operands.begin(), ctx.operands.end());
  for (int64_t trip = 0; !max_trips || trip < *max_trips; ++trip) {
    if (run_body(cond, args)[0].get_i64(0) == 0) break;
    std::vector<Tensor> carry = run_body(body, args);
    for (size_t i = 0; i < carry.size(); ++i) args[nc + i] = std::move(carry[i]);
  }
  return std::vector<Tensor>(args.begin() + static_cast<ptrdiff_t>(nc), args.end());
}

std::vector<Tensor> eval_scan(const EvalContext& ctx) {
  const Graph& body = ctx.attrs().get_graph("body");
  auto nc = static_cast<size_t>(ctx.attrs().get_int("num_consts"));
  auto nk = static_cast<size_t>(ctx.attrs().get_int("num_carry"));
  int64_t length = ctx.attrs().get_int("length");
  bool reverse = ctx.attrs().get_bool("reverse");
  const size_t nx = ctx.operands.size() - nc - nk;
  std::vector<Tensor> args(ctx.operands.begin(), ctx.operands.end());
  std::vector<Tensor> xs(args.begin() + static_cast<ptrdiff_t>(nc + nk), args.end());
  args.resize(nc + nk + nx);
  std::vector<Tensor> ys;
  for (size_t r = nk; r < ctx.node.results.size(); ++r)
    ys.emplace_back(ctx.result_type(r).dtype, ctx.result_type(r).shape);
  for (int64_t step = 0; step < length; ++step) {
    int64_t t = reverse ? length - 1 - step : step;
    for (size_t j = 0; j < nx; ++j) {
      const Tensor& x = xs[j];
      Tensor s(x.dtype(),
               Shape(std::vector<int64_t>(x.shape().dims().begin() + 1, x.shape().dims().end())));
      size_t w = slice_bytes(x);
      if (w) std::memcpy(s.data(), x.data() + static_cast<size_t>(t) * w, w);
      args[nc + nk + j] = std::move(s);
    }
    std::vector<Tensor> out = run_body(body, args);
    for (size_t i = 0; i < nk; ++i) args[nc + i] = std::move(out[i]);
    for (size_t j = 0; j < ys.size(); ++j) {
      size_t w = slice_bytes(ys[j]);
      if (w) std::memcpy(ys[j].data() + static_cast<size_t>(t) * w, out[nk + j].data(), w);
    }
  }
  std::vector<Tensor> results(args.begin() + static_cast<ptrdiff_t>(nc),
                              args.begin() + static_cast<ptrdiff_t>(nc + nk));
  for (Tensor& y : ys) results.push_back(std::move(y));
  return results;
}

}  // namespace

void register_eval_control_flow() {
  set_eval(OpKind::Cond, eval_cond);
  set_eval(OpKind::WhileLoop, eval_while);
  set_eval(OpKind::Scan, eval_scan);
}

}  // namespace rlx::detail
