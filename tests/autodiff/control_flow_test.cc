// Autodiff and vmap on graphs holding control flow (cond, while_loop, scan): their rules are not
// written yet (issue 16), so a transform that must go through one fails with an error naming
// the op and node; one that does not touch them works as before.
#include <gtest/gtest.h>

#include <string>

#include "common/test_util.h"
#include "rlx/autodiff/grad.h"
#include "rlx/autodiff/vmap.h"
#include "rlx/ir/evaluator.h"

namespace rlx::autodiff {
namespace {

using rlx::testing::error_of;

TEST(ControlFlowAutodiff, GradThroughAScanNamesTheOp) {
  Graph g("scan_loss");
  Value xs = g.input("xs", DType::f32, {4, 3});
  Value w = g.param("w", DType::f32, {3});
  Graph b("step");
  Value c = b.input("c", DType::f32, {3});
  Value x = b.input("x", DType::f32, {3});
  b.set_outputs({b.mul(c, x)});
  Value init = g.broadcast_in_dim(g.scalar(1, DType::f32), {3}, {});
  Value prod = g.scan(std::move(b), {init}, {xs})[0];
  Value loss = g.add(g.reduce_sum(prod, {0}), g.reduce_sum(g.mul(w, w), {0}));
  Value other = g.reduce_sum(g.mul(w, w), {0});
  g.set_outputs({loss, other});
  std::string m = error_of([&] { grad(g, {"xs"}); });
  EXPECT_NE(m.find("op 'scan' (node %"), std::string::npos) << m;
  EXPECT_NE(m.find("has no vjp rule"), std::string::npos) << m;
  // The second output does not go through the scan: its gradient works.
  Graph dg = grad(g, {"w"}, LossSpec(1));
  Tensor wv = Tensor::from_doubles(DType::f32, {3}, std::vector<double>{1, -2, 0.5});
  std::vector<Tensor> out = evaluate(dg, {{"xs", Tensor(DType::f32, {4, 3})}, {"w", wv}});
  EXPECT_EQ(out[1].get_f64(1), -4);  // outputs: loss, d loss / d w = 2 w
  // jvp transposes the vjp, so it names the op too.
  EXPECT_NE(error_of([&] { jvp(g, {"xs"}); }).find("op 'scan'"), std::string::npos);
}

TEST(ControlFlowAutodiff, GradThroughCondAndWhileNamesTheOp) {
  Graph g("branchy");
  Value p = g.input("p", DType::bool_, {});
  Value x = g.input("x", DType::f32, {});
  Graph t("t"), f("f");
  t.set_outputs({t.exp(t.input("x", DType::f32, {}))});
  f.set_outputs({f.neg(f.input("x", DType::f32, {}))});
  Value r = g.cond(p, std::move(t), std::move(f), {x})[0];
  Graph c("c"), b("b");
  c.set_outputs({c.lt(c.input("v", DType::f32, {}), c.scalar(10, DType::f32))});
  Value bv = b.input("v", DType::f32, {});
  b.set_outputs({b.add(bv, bv)});
  Value l = g.while_loop(std::move(c), std::move(b), {x})[0];
  g.set_outputs({r, l});
  std::string m = error_of([&] { grad(g, {"x"}, LossSpec(0)); });
  EXPECT_NE(m.find("op 'cond' (node %"), std::string::npos) << m;
  m = error_of([&] { grad(g, {"x"}, LossSpec(1)); });
  EXPECT_NE(m.find("op 'while_loop' (node %"), std::string::npos) << m;
}

TEST(ControlFlowAutodiff, VmapThroughAScanNamesTheOp) {
  Graph g("scan_only");
  Value xs = g.input("xs", DType::f32, {4});
  Graph b("step");
  Value c = b.input("c", DType::f32, {});
  Value x = b.input("x", DType::f32, {});
  b.set_outputs({b.add(c, x)});
  g.set_outputs({g.scan(std::move(b), {g.scalar(0, DType::f32)}, {xs})[0]});
  std::string m = error_of([&] { vmap(g, {0}, {}, 3); });
  EXPECT_NE(m.find("vmap: no batching rule for op 'scan' (node %"), std::string::npos) << m;
}

}  // namespace
}  // namespace rlx::autodiff
