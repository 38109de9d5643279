// Custom ops on the CPU backend: a registered CPU kernel runs natively, an op with only a
// decomposition runs decomposed, a reference-only op runs its reference kernel on the host; each
// equals the reference evaluator. The test ops are tests/ops/cases/custom.cc.
#include "rlx/ir/custom_op.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/test_util.h"
#include "ops/op_case.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

struct Compiled {
  std::vector<Tensor> cpu, ref;
  std::shared_ptr<Executable> exe;
};

Compiled run_both(const Graph& g, const TensorMap& feeds) {
  Compiled c;
  c.exe = Session().compile(g);
  c.cpu = c.exe->run(feeds);
  c.ref = evaluate(g, feeds);
  return c;
}

void expect_close(const Tensor& got, const Tensor& want, double tol) {
  ASSERT_EQ(got.type(), want.type());
  for (int64_t i = 0; i < got.numel(); ++i)
    EXPECT_NEAR(got.get_f64(i), want.get_f64(i), tol * (1 + std::fabs(want.get_f64(i))))
        << "element " << i;
}

TEST(CpuCustomOp, RegisteredCpuKernelRunsNatively) {
  testing::register_test_custom_ops();
  Graph g("c");
  Value x = g.input("x", DType::f32, {64, 33});
  AttrMap a;
  a.set("beta", 1.5);
  g.set_outputs({custom_call(g, "test.softplus", {x}, a)[0]});
  TensorMap feeds{{"x", testing::random_tensor(DType::f32, {64, 33}, 7, -20.0, 20.0)}};
  Compiled c = run_both(g, feeds);
  expect_close(c.cpu[0], c.ref[0], 1e-6);
  EXPECT_EQ(c.exe->dispatch_report().at(OpKind::CustomCall).native, 1);
  EXPECT_EQ(c.exe->kernels().count(OpKind::CustomCall).native, 1);
}

TEST(CpuCustomOp, WithoutCpuKernelTheDecompositionRuns) {
  testing::register_test_custom_ops();
  Graph g("c");
  Value x = g.input("x", DType::f32, {4, 8});
  std::vector<Value> sc = custom_call(g, "test.sincos", {x});
  g.set_outputs({sc[0], sc[1]});
  TensorMap feeds{{"x", testing::random_tensor(DType::f32, {4, 8}, 3, -4.0, 4.0)}};
  Compiled c = run_both(g, feeds);
  expect_close(c.cpu[0], c.ref[0], 1e-6);
  expect_close(c.cpu[1], c.ref[1], 1e-6);
  EXPECT_EQ(c.exe->dispatch_report().at(OpKind::CustomCall).decomposed, 1);
  EXPECT_EQ(c.exe->dispatch_report().at(OpKind::CustomCall).native, 0);
  for (const Node& n : c.exe->compiled_graph().nodes()) EXPECT_NE(n.op, OpKind::CustomCall);
}

TEST(CpuCustomOp, DispatchPoliciesChooseBetweenKernelAndDecomposition) {
  testing::register_test_custom_ops();
  Graph g("c");
  Value x = g.input("x", DType::f32, {4});
  Value y = custom_call(g, "test.softplus", {x})[0];
  g.set_outputs({custom_call(g, "test.sincos", {y}, {}, "sc")[0]});
  CompileOptions common;
  common.dispatch = DispatchOptions::parse("force_common");
  // force_common: both run as their decompositions, even the one with a CPU kernel.
  auto exe = Session().compile(g, common);
  EXPECT_EQ(exe->dispatch_report().at(OpKind::CustomCall).decomposed, 2);
  TensorMap feeds{{"x", testing::random_tensor(DType::f32, {4}, 2)}};
  expect_close(exe->run(feeds)[0], evaluate(g, feeds)[0], 1e-6);
  // force_native: the op without a CPU kernel is kept from its decomposition, so it fails.
  CompileOptions native;
  native.dispatch = DispatchOptions::parse("force_native");
  EXPECT_EQ(testing::error_of([&] { Session().compile(g, native); }),
            "backend 'cpu' cannot run: custom op 'test.sincos' (node %sc) has no kernel on "
            "backend 'cpu' and force_native keeps it from its decomposition");
}

TEST(CpuCustomOp, WithoutCpuKernelOrDecompositionTheReferenceKernelRunsOnTheHost) {
  testing::register_test_custom_ops();
  Graph g("c");
  Value x = g.input("x", DType::f64, {5});
  Value y = g.add(custom_call(g, "test.host_cube", {x})[0], x);
  g.set_outputs({y});
  TensorMap feeds{
      {"x", Tensor::from_doubles(DType::f64, {5}, std::vector<double>{-2, -0.5, 0, 1, 3})}};
  Compiled c = run_both(g, feeds);
  std::vector<double> want{-10, -0.625, 0, 2, 30};
  for (int64_t i = 0; i < 5; ++i)
    EXPECT_DOUBLE_EQ(c.cpu[0].get_f64(i), want[static_cast<size_t>(i)]);
  KernelCounts k = c.exe->kernels().count(OpKind::CustomCall);
  EXPECT_EQ(k.native, 0);
  EXPECT_EQ(k.fallback, 1);
  bool reason = false;
  for (const KernelReport::Node& n : c.exe->kernels().nodes)
    if (n.op == OpKind::CustomCall)
      reason = n.kernel == "reference" &&
               n.fallback_reason.find("without a CPU kernel") != std::string::npos;
  EXPECT_TRUE(reason) << c.exe->kernel_report();
}

TEST(CpuCustomOp, AnErrorOfACpuKernelFailsTheRun) {
  testing::register_test_custom_ops();
  static std::once_flag once;
  std::call_once(once, [] {
    CustomOpDef d;
    d.name = "test.cpu_fails";
    d.num_operands = 1;
    d.infer = [](const InferContext& ctx) { return std::vector<TensorType>{ctx.operands[0]}; };
    d.reference = [](std::span<const Tensor> in, const AttrMap&) {
      return std::vector<Tensor>{in[0]};
    };
    d.cpu_kernel = [](const CustomKernelIO&) { throw Error("test.cpu_fails: refused"); };
    register_custom_op(std::move(d));
  });
  Graph g("c");
  Value x = g.input("x", DType::f32, {3});
  g.set_outputs({g.neg(custom_call(g, "test.cpu_fails", {x})[0])});
  auto exe = Session().compile(g);
  EXPECT_EQ(testing::error_of([&] {
              exe->run({{"x", Tensor(DType::f32, {3})}});
            }),
            "test.cpu_fails: refused");
}

}  // namespace
}  // namespace rlx
