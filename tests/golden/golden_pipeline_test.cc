// The standard pipeline over every golden case (tests/golden/ops.json): for an all-ops backend
// and a primitives-only backend, with no precision policy, always-f32 and the low-precision
// policies, the compiled graph keeps the case's signature, leaves the input graph unchanged,
// has a valid memory plan, runs through that plan's arena exactly like the reference evaluator
// and, without low precision, gives the evaluator's results of the original graph (within the
// rounding of the output dtype: fusions and decompositions round differently).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "../common/test_util.h"
#include "../opt/arena_runner.h"
#include "golden_data.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"
#include "rlx/opt/pipeline.h"

namespace rlx {
namespace {

using testing::json;
using testing::json_tensor;
using testing::run_in_arena;

// Rounding of one output dtype: a few ulp (f16/bf16 chains round every step).
std::pair<double, double> tolerance(DType t) {
  switch (t) {
    case DType::f64:
      return {1e-10, 1e-10};
    case DType::f32:
      return {1e-5, 1e-6};
    case DType::f16:
      return {4e-3, 2e-3};
    case DType::bf16:
      return {3e-2, 1.6e-2};
    default:
      return {0, 0};
  }
}

TEST(GoldenPipeline, EveryCaseCompilesAndKeepsItsResults) {
  std::ifstream in(RLX_TEST_DATA_DIR "/golden/ops.json");
  ASSERT_TRUE(in.good());
  json doc = json::parse(in);
  std::set<OpKind> primitives;
  for (int k = 0; k < kNumOps; ++k)
    if (!op_info(static_cast<OpKind>(k)).has(kComposite)) primitives.insert(static_cast<OpKind>(k));
  const std::vector<std::string> policies{
      "", "always-f32", "always-f16", "always-bf16", "auto-mixed-f16", "auto-mixed-bf16"};
  int cases = 0;
  for (const json& c : doc.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    Graph g = Graph::parse(c.at("ir").get<std::string>());
    const std::string before = g.to_string();
    TensorMap feeds;
    for (const auto& [k, v] : c.at("inputs").items()) feeds.emplace(k, json_tensor(v));
    std::vector<Tensor> want = evaluate(g, feeds);
    ++cases;
    for (bool prims : {false, true}) {
      for (const std::string& policy : policies) {
        SCOPED_TRACE(name + " [" + (prims ? "primitives" : "all ops") + ", " +
                     (policy.empty() ? "no policy" : policy) + "]\n" + before);
        PipelineOptions o;
        if (prims) o.supported = primitives;
        if (!policy.empty()) o.precision = parse_precision_policy(policy);
        PipelineResult r;
        try {
          r = run_standard_pipeline(g, o);
        } catch (const std::exception& e) {
          ADD_FAILURE() << "pipeline threw: " << e.what();
          continue;
        }
        EXPECT_EQ(g.to_string(), before) << "the input graph was modified";
        for (int32_t id : g.inputs()) EXPECT_GE(r.graph.find(g.node(id).name), 0);
        for (int32_t id : g.params()) EXPECT_GE(r.graph.find(g.node(id).name), 0);
        ASSERT_EQ(r.graph.outputs().size(), g.outputs().size());
        for (size_t i = 0; i < g.outputs().size(); ++i)
          EXPECT_EQ(r.graph.type(r.graph.outputs()[i]), g.type(g.outputs()[i]));
        std::vector<std::string> problems = validate_plan(r.graph, r.plan);
        EXPECT_TRUE(problems.empty()) << problems.front() << "\n" << r.plan.to_string();
        std::vector<Tensor> got = evaluate(r.graph, feeds);
        std::vector<Tensor> arena = run_in_arena(r.graph, r.plan, feeds);
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_TRUE(arena[i].bitwise_equal(got[i]))
              << "arena output " << i << ": " << arena[i].to_string() << " vs "
              << got[i].to_string() << "\n"
              << r.graph.to_string() << r.plan.to_string();
        if (policy != "" && policy != "always-f32") continue;  // low precision: no tight bound
        for (size_t i = 0; i < got.size(); ++i) {
          auto [rtol, atol] = tolerance(want[i].dtype());
          for (const char* key : {"rtol", "decomposed_rtol"})
            if (c.contains(key)) rtol = std::max(rtol, c[key].get<double>());
          for (const char* key : {"atol", "decomposed_atol"})
            if (c.contains(key)) atol = std::max(atol, c[key].get<double>());
          EXPECT_TRUE(testing::all_close(got[i], want[i], rtol, atol)) << "output " << i << "\n"
                                                                       << r.graph.to_string();
        }
      }
    }
  }
  EXPECT_GT(cases, 500);
}

}  // namespace
}  // namespace rlx
