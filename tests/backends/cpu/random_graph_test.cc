// 200 random well-typed graphs (tests/opt/random_graph.h) end to end on the CPU backend —
// pipeline, fusions, memory plan, native kernels and fallbacks — against the reference
// evaluator, with the default pipeline and with every composite decomposed; each graph also
// runs twice and on a clone, which must reproduce the first run bit for bit.
#include "opt/random_graph.h"

#include <gtest/gtest.h>

#include "rlx/runtime/session.h"

namespace rlx {
namespace {

// f32 graphs of up to ~20 ops: a few ulp per op, plus absolute slack for sums that cancel.
constexpr double kRtol = 1e-4, kAtol = 1e-5;

void run_random_graph(uint64_t seed, KernelDispatch policy) {
  SCOPED_TRACE("seed " + std::to_string(seed) + ", " + std::string(kernel_dispatch_name(policy)));
  testing::RandomGraph r = testing::make_random_graph(seed, 6 + static_cast<int>(seed % 15));
  SCOPED_TRACE(r.graph.to_string());
  static Session session(Device::cpu(), SessionOptions{.cache_capacity = 0});
  CompileOptions options;
  options.dispatch = DispatchOptions{policy, {}};
  std::shared_ptr<Executable> exe = session.compile(r.graph, options);
  TensorMap inputs;
  for (const auto& [name, t] : r.feeds) {
    if (r.graph.node(r.graph.find(name)).op == OpKind::Param)
      exe->set_param(name, t);
    else
      inputs.emplace(name, t);
  }
  std::vector<Tensor> got = exe->run(inputs);
  std::vector<Tensor> want = evaluate(r.graph, r.feeds);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(testing::all_close(got[i], want[i], kRtol, kAtol))
        << "output " << i << "\n"
        << exe->compiled_graph().to_string() << exe->memory_plan().to_string();
  std::vector<Tensor> again = exe->run(inputs);
  std::vector<Tensor> cloned = exe->clone()->run(inputs);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(again[i].bitwise_equal(got[i])) << "second run, output " << i;
    EXPECT_TRUE(cloned[i].bitwise_equal(got[i])) << "clone, output " << i;
  }
}

TEST(CpuRandomGraphs, DefaultPipelineMatchesTheEvaluator) {
  for (uint64_t seed = 0; seed < 200; ++seed) run_random_graph(seed, KernelDispatch::PreferNative);
}

TEST(CpuRandomGraphs, ForceCommonMatchesTheEvaluator) {
  for (uint64_t seed = 0; seed < 200; ++seed) run_random_graph(seed, KernelDispatch::ForceCommon);
}

}  // namespace
}  // namespace rlx
