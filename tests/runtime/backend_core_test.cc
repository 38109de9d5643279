// The shared backend plumbing (rlx/runtime/backend_core.h, kernel_report.h, resolve_environment):
// param bindings with copy-on-write, compile request checks, CompileOptions -> PipelineOptions,
// IO specs, the kernel report's counts and text, the environment resolved by Session only; and
// ExecutableCore driven by a minimal host backend (the evaluator as its "device").
#include "rlx/runtime/backend_core.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

using testing::EnvGuard;
using testing::error_of;
using testing::random_tensor;

// ---- ParamBindings

TEST(ParamBindings, CountsBindingsAndCopiesOnWrite) {
  ParamBindings<int> a(3);
  EXPECT_EQ(a.size(), 3u);
  EXPECT_FALSE(a.all_set());
  a.set(0, 10);
  a.set(0, 11);  // binding again does not count twice
  a.set(2, 30);
  EXPECT_TRUE(a.is_set(0));
  EXPECT_FALSE(a.is_set(1));
  EXPECT_FALSE(a.all_set());
  ParamBindings<int> b = a;  // a clone's handle: shares the bindings
  b.set(1, 21);
  EXPECT_TRUE(b.all_set());
  EXPECT_FALSE(a.all_set());  // the other copy is unchanged
  EXPECT_FALSE(a.is_set(1));
  a.set(0, 12);
  EXPECT_EQ(a[0], 12);
  EXPECT_EQ(b[0], 11);
  EXPECT_EQ(b[1], 21);
  EXPECT_EQ(b[2], 30);
  ParamBindings<int> none(0);
  EXPECT_TRUE(none.all_set());
}

// ---- the compile front

BackendFacts fake_facts() {
  BackendFacts f;
  f.name = "fake";
  f.device_kind = DeviceKind::Cuda;
  f.supported = {OpKind::Add, OpKind::Tanh};
  return f;
}

TEST(CompileFront, ChecksDevice) {
  EXPECT_EQ(error_of([&] { check_compile_request(fake_facts(), Device::parse("cuda:2")); }), "");
  EXPECT_EQ(error_of([&] { check_compile_request(fake_facts(), Device::cpu()); }),
            "fake backend cannot compile for device 'cpu'");
}

TEST(CompileFront, PipelineOptionsFromCompileOptions) {
  CompileOptions o;
  PipelineOptions po = make_pipeline_options(fake_facts(), o);
  EXPECT_EQ(po.backend, "fake");
  EXPECT_EQ(po.supported, (std::set<OpKind>{OpKind::Add, OpKind::Tanh}));
  EXPECT_EQ(po.dispatch.policy, KernelDispatch::PreferNative);  // absent: the defaults
  EXPECT_TRUE(po.dispatch.overrides.empty());
  EXPECT_FALSE(po.precision.has_value());
  EXPECT_TRUE(po.dce);
  EXPECT_TRUE(po.fold_constants);
  EXPECT_TRUE(po.quantized_params.empty());

  BackendFacts bf16 = fake_facts();
  bf16.default_precision = parse_precision_policy("auto-mixed-bf16");
  EXPECT_EQ(make_pipeline_options(bf16, o).precision, bf16.default_precision);
  o.precision = parse_precision_policy("always-f32,softmax=f16");
  o.dispatch = DispatchOptions::parse("force_common,attention=prefer_native");
  o.dce = false;
  o.fold_constants = false;
  o.quantized_params["w"] = {QuantFormat::kQ4_0, 0};
  po = make_pipeline_options(bf16, o);
  EXPECT_EQ(po.quantized_params, o.quantized_params);
  EXPECT_EQ(po.precision, o.precision);  // the caller's policy wins over the default
  EXPECT_EQ(po.dispatch.policy, KernelDispatch::ForceCommon);
  EXPECT_EQ(po.dispatch.policy_for(OpKind::Attention), KernelDispatch::PreferNative);
  EXPECT_FALSE(po.dce);
  EXPECT_FALSE(po.fold_constants);
}

TEST(CompileFront, IoSpecsNameOutputsByNode) {
  Graph g("io");
  Value x = g.input("x", DType::f32, Shape{2, 4});
  Value w = g.param("w", DType::bf16, Shape{4});
  auto [vals, idx] = g.top_k(x, 2);
  g.set_outputs({idx, g.add(x, g.convert(w, DType::f32)), vals, idx, x});
  IoSpecs s = io_specs_of(g);
  EXPECT_EQ(s.inputs, (std::vector<IoSpec>{{"x", {DType::f32, Shape{2, 4}}}}));
  EXPECT_EQ(s.params, (std::vector<IoSpec>{{"w", {DType::bf16, Shape{4}}}}));
  std::string topk = g.node(vals).name;
  ASSERT_EQ(s.outputs.size(), 5u);
  EXPECT_EQ(s.outputs[0], (IoSpec{topk + "#1", {DType::i32, Shape{2, 2}}}));
  EXPECT_EQ(s.outputs[1].name, g.node(g.outputs()[1]).name);
  EXPECT_EQ(s.outputs[2], (IoSpec{topk + "#0", {DType::f32, Shape{2, 2}}}));
  EXPECT_EQ(s.outputs[3], s.outputs[0]);
  EXPECT_EQ(s.outputs[4], (IoSpec{"x", {DType::f32, Shape{2, 4}}}));
}

// ---- KernelReport

TEST(KernelReportTest, CountsAndText) {
  KernelReport r;
  EXPECT_EQ(r.to_string(), "");
  r.backend = "dev";
  r.nodes = {{3, OpKind::Tanh, "dev", DType::f32, true, ""},
             {4, OpKind::Add, "reference", DType::f16, false, "no f16 add"},
             {5, OpKind::Tanh, "reference", DType::f32, false, "a rank limit"},
             {6, OpKind::Add, "dev", DType::f32, true, ""},
             {7, OpKind::Add, "dev", DType::f32, true, ""}};
  EXPECT_EQ(r.count(OpKind::Tanh), (KernelCounts{1, 1}));
  EXPECT_EQ(r.count(OpKind::Add), (KernelCounts{2, 1}));
  EXPECT_EQ(r.count(OpKind::Exp), (KernelCounts{0, 0}));
  EXPECT_EQ(r.total(), (KernelCounts{3, 2}));
  std::map<OpKind, KernelCounts> c = r.counts();
  EXPECT_EQ(c, (std::map<OpKind, KernelCounts>{{OpKind::Add, {2, 1}}, {OpKind::Tanh, {1, 1}}}));
  // Rows in ops.def order, as the CPU backend's report always printed them.
  std::string add = "  add: 2 / 1\n", tanh = "  tanh: 1 / 1\n";
  // Then each fallback with its reason.
  EXPECT_EQ(r.to_string(), "dev kernels (native / reference fallback):\n" +
                               (OpKind::Add < OpKind::Tanh ? add + tanh : tanh + add) +
                               "reference fallback: add (f16): no f16 add\n"
                               "reference fallback: tanh (f32): a rank limit\n");
  r.program = "dev: one program:\nmodule";
  EXPECT_EQ(r.to_string(), "dev: one program:\nmodule");
}

TEST(KernelReportTest, CpuReportsEveryStepWithItsKernel) {
  Graph g("k");
  Value x = g.input("x", DType::f32, Shape{3, 8});
  Value w = g.param("w", DType::f32, Shape{8, 8});
  g.set_outputs({g.softmax(g.tanh(g.matmul(x, w)), -1), g.reshape(x, {24})});
  Session s;
  auto exe = s.compile(g);
  const KernelReport& r = exe->kernels();
  EXPECT_EQ(r.backend, "cpu");
  EXPECT_TRUE(r.program.empty());
  ASSERT_FALSE(r.nodes.empty());
  const Graph& cg = exe->compiled_graph();
  int32_t last = -1;
  for (const KernelReport::Node& n : r.nodes) {
    EXPECT_GT(n.node, last);  // execution order is node order
    last = n.node;
    EXPECT_EQ(n.op, cg.node(n.node).op);
    EXPECT_EQ(n.dtype, cg.node(n.node).results[0].dtype);
    EXPECT_EQ(n.kernel, n.native ? "cpu" : "reference");
    EXPECT_NE(cg.node(n.node).op, OpKind::Reshape);  // a view: no kernel
  }
  EXPECT_EQ(r.count(OpKind::Softmax), (KernelCounts{1, 0}));
  EXPECT_EQ(exe->kernel_report(), r.to_string());
  EXPECT_EQ(exe->kernel_report().rfind("cpu kernels (native / reference fallback):\n", 0), 0u);
  // Clones share the program, report included.
  EXPECT_EQ(&exe->clone()->kernels(), &r);
}

// ---- the environment, resolved once by Session

TEST(Environment, ResolvedOnlyWhereOptionsLeaveItAbsent) {
  EnvGuard dispatch("RLX_KERNEL_DISPATCH", nullptr);
  EnvGuard precision("RLX_PRECISION", nullptr);
  CompileOptions r = resolve_environment({});
  ASSERT_TRUE(r.dispatch.has_value());
  EXPECT_EQ(r.dispatch->policy, KernelDispatch::PreferNative);
  EXPECT_FALSE(r.precision.has_value());
  {
    EnvGuard d("RLX_KERNEL_DISPATCH", "force_common,attention=prefer_native");
    EnvGuard p("RLX_PRECISION", "always-bf16");
    r = resolve_environment({});
    EXPECT_EQ(r.dispatch->policy, KernelDispatch::ForceCommon);
    EXPECT_EQ(r.dispatch->policy_for(OpKind::Attention), KernelDispatch::PreferNative);
    EXPECT_EQ(r.precision, parse_precision_policy("always-bf16"));
    // Explicit options win.
    CompileOptions mine;
    mine.dispatch = DispatchOptions{};
    mine.precision = parse_precision_policy("always-f32");
    r = resolve_environment(mine);
    EXPECT_EQ(r.dispatch->policy, KernelDispatch::PreferNative);
    EXPECT_EQ(r.precision, parse_precision_policy("always-f32"));
  }
  {
    EnvGuard p("RLX_PRECISION", "");  // empty: the backend's default
    EXPECT_FALSE(resolve_environment({}).precision.has_value());
  }
  {
    EnvGuard p("RLX_PRECISION", "always-f17");
    EXPECT_EQ(error_of([] { resolve_environment({}); }).rfind("RLX_PRECISION: ", 0), 0u);
    EXPECT_EQ(error_of([] { Session().compile(Graph("g")); }).rfind("RLX_PRECISION: ", 0), 0u);
  }
  {
    EnvGuard d("RLX_KERNEL_DISPATCH", "sometimes");
    EXPECT_EQ(error_of([] { resolve_environment({}); }).rfind("RLX_KERNEL_DISPATCH: ", 0), 0u);
  }
}

// A graph whose compiled form shows both variables: softmax stays one node unless dispatch
// forces the common path, and tanh computes in bf16 only under always-bf16.
Graph softmax_graph() {
  Graph g("env");
  g.set_outputs({g.softmax(g.tanh(g.input("x", DType::f32, Shape{2, 8})), -1)});
  return g;
}

bool has_op(const Graph& g, OpKind op) {
  for (const Node& n : g.nodes())
    if (n.op == op) return true;
  return false;
}

bool has_dtype(const Graph& g, DType t) {
  for (const Node& n : g.nodes())
    for (const TensorType& r : n.results)
      if (r.dtype == t) return true;
  return false;
}

TEST(Environment, SessionReadsItBackendsDoNot) {
  EnvGuard d("RLX_KERNEL_DISPATCH", "force_common");
  EnvGuard p("RLX_PRECISION", "always-bf16");
  Graph g = softmax_graph();
  // A direct Backend::compile gets the defaults: native softmax, the graph's own dtypes.
  std::unique_ptr<Executable> direct = backend_for(DeviceKind::Cpu)->compile(g, {}, Device::cpu());
  EXPECT_TRUE(has_op(direct->compiled_graph(), OpKind::Softmax));
  EXPECT_FALSE(has_dtype(direct->compiled_graph(), DType::bf16));
  // A Session applies both variables.
  Session s(Device::cpu(), SessionOptions{.cache_capacity = 0});
  std::shared_ptr<Executable> via = s.compile(g);
  EXPECT_FALSE(has_op(via->compiled_graph(), OpKind::Softmax));
  EXPECT_TRUE(has_dtype(via->compiled_graph(), DType::bf16));
  // ... unless the options say otherwise.
  CompileOptions explicit_options;
  explicit_options.dispatch = DispatchOptions{};
  explicit_options.precision = parse_precision_policy("always-f32");
  std::shared_ptr<Executable> mine = s.compile(g, explicit_options);
  EXPECT_TRUE(has_op(mine->compiled_graph(), OpKind::Softmax));
  EXPECT_FALSE(has_dtype(mine->compiled_graph(), DType::bf16));
}

// ---- ExecutableCore, driven by a minimal host backend: its "device" is the reference
// evaluator. What such a backend writes is only this: a program, bind_param and execute.

struct EvalProgram : ProgramInfo {};

class EvalExecutable final : public ExecutableCore<EvalProgram, Tensor> {
 public:
  EvalExecutable(std::shared_ptr<const EvalProgram> p, ParamBindings<Tensor> b)
      : ExecutableCore(std::move(p), std::move(b)) {}
  Capabilities capabilities() const override {
    Capabilities c;
    c.clone = true;
    return c;
  }
  std::unique_ptr<Executable> clone() const override {
    auto c = std::make_unique<EvalExecutable>(program_ptr(), share_params());
    copy_state_to(*c);
    return c;
  }
  int executes = 0;
  bool fail_next_bind = false;

 protected:
  Tensor bind_param(size_t, const Tensor& value) override {
    if (fail_next_bind) {
      fail_next_bind = false;
      throw Error("eval: upload failed");
    }
    return value.clone();  // a "device copy"
  }
  Tensor make_state(size_t, const Tensor& value) override { return value.clone(); }
  Tensor read_state(size_t, const Tensor& value) const override { return value.clone(); }
  std::vector<Tensor> execute(const TensorMap& inputs, const ParamBindings<Tensor>& params,
                              std::vector<Tensor>& state) override {
    ++executes;
    const EvalProgram& p = program();
    TensorMap feeds = inputs;
    for (size_t i = 0; i < params.size(); ++i) feeds.emplace(p.params[i].name, params[i]);
    for (size_t i = 0; i < state.size(); ++i) feeds.emplace(p.state[i].name, state[i]);
    std::vector<Tensor> all = evaluate(p.graph, feeds), out;
    for (size_t i : p.returned) out.push_back(all[i]);
    for (size_t i = 0; i < state.size(); ++i) state[i] = all[p.state_outputs[i]];
    return out;
  }
};

std::unique_ptr<EvalExecutable> compile_eval(const Graph& g, const CompileOptions& o = {}) {
  BackendFacts facts;
  facts.name = "eval";
  check_compile_request(facts, Device::cpu(), g, o);
  auto p = std::make_shared<EvalProgram>();
  p->init(g, run_standard_pipeline(g, make_pipeline_options(facts, o)), Device::cpu(),
          o.quantized_params, o.state);
  ParamBindings<Tensor> params(p->params.size());
  return std::make_unique<EvalExecutable>(std::move(p), std::move(params));
}

TEST(ExecutableCoreTest, ValidatesBindsCopiesOnWriteAndRuns) {
  Graph g("core");
  Value x = g.input("x", DType::f32, Shape{2, 3});
  Value w = g.param("w", DType::f32, Shape{2, 3});
  Value v = g.param("v", DType::f32, Shape{3});
  g.set_outputs({g.add(g.mul(x, w), v)});
  auto exe = compile_eval(g);
  EXPECT_EQ(exe->device(), Device::cpu());
  EXPECT_EQ(exe->inputs(), io_specs_of(g).inputs);
  EXPECT_EQ(exe->outputs(), io_specs_of(g).outputs);
  EXPECT_TRUE(exe->kernels().nodes.empty());
  EXPECT_EQ(exe->kernel_report(), "");

  Tensor xt = random_tensor(DType::f32, Shape{2, 3}, 1);
  Tensor wt = random_tensor(DType::f32, Shape{2, 3}, 2);
  Tensor vt = random_tensor(DType::f32, Shape{3}, 3);
  EXPECT_EQ(error_of([&] { exe->set_param("u", wt); }),
            "set_param: unknown param 'u' (params: w, v)");
  EXPECT_EQ(error_of([&] { exe->set_param("v", wt); }),
            "set_param 'v': expected f32[3], got f32[2,3]");
  exe->set_param("w", wt);
  EXPECT_EQ(error_of([&] { exe->run({{"x", xt}}); }), "run: param 'v' (f32[3]) was never set");
  EXPECT_EQ(error_of([&] { exe->run({}); }), "run: missing input 'x' (f32[2,3])");
  EXPECT_EQ(exe->executes, 0);  // nothing ran on an error
  exe->set_param("v", vt);
  TensorMap feeds{{"x", xt}, {"w", wt}, {"v", vt}};
  EXPECT_TRUE(exe->run({{"x", xt}})[0].bitwise_equal(evaluate(g, feeds)[0]));
  EXPECT_EQ(exe->executes, 1);

  // A failed bind keeps the earlier binding.
  exe->fail_next_bind = true;
  EXPECT_EQ(error_of([&] { exe->set_param("v", Tensor(DType::f32, Shape{3})); }),
            "eval: upload failed");
  EXPECT_TRUE(exe->run({{"x", xt}})[0].bitwise_equal(evaluate(g, feeds)[0]));

  // Copy on write between clones.
  std::unique_ptr<Executable> clone = exe->clone();
  EXPECT_TRUE(clone->run({{"x", xt}})[0].bitwise_equal(evaluate(g, feeds)[0]));
  Tensor v2 = random_tensor(DType::f32, Shape{3}, 4);
  clone->set_param("v", v2);
  TensorMap feeds2{{"x", xt}, {"w", wt}, {"v", v2}};
  EXPECT_TRUE(clone->run({{"x", xt}})[0].bitwise_equal(evaluate(g, feeds2)[0]));
  EXPECT_TRUE(exe->run({{"x", xt}})[0].bitwise_equal(evaluate(g, feeds)[0]));
}

}  // namespace
}  // namespace rlx
