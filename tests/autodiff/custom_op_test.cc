// Autodiff of custom ops: grad and jvp through a registered vjp rule and through the
// decomposition, both against f64 central differences; vmap through a registered batching rule
// and through the decomposition, against the per-example evaluation; and the errors for an op
// with neither. The test ops are tests/ops/cases/custom.cc.
#include "rlx/ir/custom_op.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "ops/op_case.h"
#include "rlx/autodiff/grad.h"
#include "rlx/autodiff/vmap.h"
#include "rlx/ir/evaluator.h"

namespace rlx {
namespace {

using autodiff::grad;
using autodiff::jvp;
using autodiff::vmap;
using testing::error_of;

// loss(x) = sum(w * f(x)) over every output of f, in f64; `f` emits the custom op(s).
Graph loss_graph(const std::function<std::vector<Value>(Graph&, Value)>& f) {
  Graph g("loss");
  Value x = g.input("x", DType::f64, {2, 3});
  Value loss = g.scalar(0, DType::f64);
  double k = 0.5;
  for (Value y : f(g, x)) {
    std::vector<double> w;
    for (int i = 0; i < 6; ++i) w.push_back(k + 0.3 * i * (i % 2 ? -1 : 1));
    k += 0.25;
    loss = g.add(
        loss,
        g.reduce_sum(g.mul(y, g.constant(Tensor::from_doubles(DType::f64, {2, 3}, w))), {0, 1}));
  }
  g.set_outputs({loss});
  return g;
}

Tensor x_value() {
  return Tensor::from_doubles(DType::f64, {2, 3},
                              std::vector<double>{-1.7, -0.4, 0.0, 0.3, 1.1, 2.6});
}

// d loss / d x by central differences (h = 1e-6, f64).
std::vector<double> central_differences(const Graph& g, const Tensor& x) {
  std::vector<double> out;
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto at = [&](double d) {
      Tensor p(DType::f64, x.shape());  // a deep copy: Tensor copies share storage
      for (int64_t k = 0; k < x.numel(); ++k) p.data_as<double>()[k] = x.get_f64(k);
      p.data_as<double>()[i] += d;
      return evaluate(g, {{"x", p}})[0].get_f64(0);
    };
    out.push_back((at(1e-6) - at(-1e-6)) / 2e-6);
  }
  return out;
}

void expect_grad_matches_fd(const Graph& g) {
  Tensor x = x_value();
  std::vector<double> fd = central_differences(g, x);
  Tensor dx = evaluate(grad(g, {"x"}), {{"x", x}})[1];
  for (int64_t i = 0; i < x.numel(); ++i)
    EXPECT_NEAR(dx.get_f64(i), fd[static_cast<size_t>(i)], 1e-7) << "element " << i;
  // jvp along a one-hot tangent is the matching gradient entry.
  Graph jg = jvp(g, {"x"});
  for (int64_t i = 0; i < x.numel(); ++i) {
    Tensor t(DType::f64, {2, 3});
    t.data_as<double>()[i] = 1.0;
    double d = evaluate(jg, {{"x", x}, {"tangent.x", t}})[1].get_f64(0);
    EXPECT_NEAR(d, fd[static_cast<size_t>(i)], 1e-7) << "jvp element " << i;
  }
}

TEST(CustomOpAutodiff, GradThroughTheRegisteredVjpRule) {
  testing::register_test_custom_ops();
  Graph g = loss_graph([](Graph& g, Value x) {
    AttrMap a;
    a.set("beta", 1.5);
    return custom_call(g, "test.softplus", {x}, a);
  });
  // The rule is used: the custom op stays in the gradient graph (its decomposition would not).
  Graph dg = grad(g, {"x"});
  bool kept = false;
  for (const Node& n : dg.nodes()) kept = kept || n.op == OpKind::CustomCall;
  EXPECT_TRUE(kept);
  expect_grad_matches_fd(g);
}

TEST(CustomOpAutodiff, GradThroughTheDecomposition) {
  testing::register_test_custom_ops();
  Graph g = loss_graph([](Graph& g, Value x) { return custom_call(g, "test.sincos", {x}); });
  Graph dg = grad(g, {"x"});
  for (const Node& n : dg.nodes()) EXPECT_NE(n.op, OpKind::CustomCall) << "not decomposed";
  expect_grad_matches_fd(g);
}

TEST(CustomOpAutodiff, WithoutRuleOrDecompositionTheErrorNamesTheOp) {
  testing::register_test_custom_ops();
  Graph g("c");
  Value x = g.input("x", DType::f32, {3});
  g.set_outputs({g.reduce_sum(custom_call(g, "test.host_cube", {x}, {}, "cube")[0], {0})});
  EXPECT_EQ(error_of([&] { grad(g, {"x"}); }),
            "grad: custom op 'test.host_cube' (node %cube) has no vjp rule and no decomposition "
            "to differentiate");
  EXPECT_EQ(error_of([&] { vmap(g, {0}, {0}, 2); }),
            "vmap: custom op 'test.host_cube' (node %cube) has no batching rule and no "
            "decomposition");
}

// vmap over axis 0 of x [4, 3] equals evaluating each row.
void expect_vmap_matches_loop(const std::string& op, bool rule_kept) {
  Graph g("row");
  Value x = g.input("x", DType::f64, {3});
  std::vector<Value> ys = custom_call(g, op, {x});
  g.set_outputs(ys);
  Graph vg = vmap(g, {0}, {}, 4);
  bool kept = false;
  for (const Node& n : vg.nodes()) kept = kept || n.op == OpKind::CustomCall;
  EXPECT_EQ(kept, rule_kept);
  Tensor xs = testing::random_tensor(DType::f64, {4, 3}, 5);
  std::vector<Tensor> batched = evaluate(vg, {{"x", xs}});
  for (int64_t b = 0; b < 4; ++b) {
    Tensor row(DType::f64, {3});
    for (int64_t j = 0; j < 3; ++j) row.data_as<double>()[j] = xs.get_f64(b * 3 + j);
    std::vector<Tensor> want = evaluate(g, {{"x", row}});
    for (size_t o = 0; o < want.size(); ++o)
      for (int64_t j = 0; j < 3; ++j)
        EXPECT_NEAR(batched[o].get_f64(b * 3 + j), want[o].get_f64(j), 1e-14);
  }
}

TEST(CustomOpAutodiff, VmapThroughTheRegisteredBatchingRule) {
  testing::register_test_custom_ops();
  expect_vmap_matches_loop("test.sincos", true);
}

TEST(CustomOpAutodiff, ABatchingRuleThatForgetsTheBatchIsAnError) {
  testing::register_test_custom_ops();
  static std::once_flag once;
  std::call_once(once, [] {
    CustomOpDef d;
    d.name = "test.bad_batch";
    d.num_operands = 1;
    d.infer = [](const InferContext& c) { return std::vector<TensorType>{c.operands[0]}; };
    d.reference = [](std::span<const Tensor> in, const AttrMap&) {
      return std::vector<Tensor>{in[0]};
    };
    // Returns the first example only: unbatched.
    d.batch = [](Graph& g, const Node&, std::span<const Value> x, int64_t) {
      return std::vector<Value>{g.reshape(g.slice(x[0], {0, 0}, {1, 3}), {3})};
    };
    register_custom_op(std::move(d));
  });
  Graph g("row");
  Value x = g.input("x", DType::f32, {3});
  g.set_outputs({custom_call(g, "test.bad_batch", {x}, {}, "b")[0]});
  EXPECT_EQ(error_of([&] { vmap(g, {0}, {}, 4); }),
            "vmap: the batching rule of custom op 'test.bad_batch' (node %b) gave f32[3] for "
            "result 0, expected f32[4,3]");
}

TEST(CustomOpAutodiff, VmapThroughTheDecomposition) {
  testing::register_test_custom_ops();
  expect_vmap_matches_loop("test.softplus", false);
}

}  // namespace
}  // namespace rlx
