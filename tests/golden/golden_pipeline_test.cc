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
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "../common/test_util.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"
#include "rlx/opt/pipeline.h"

namespace rlx {
namespace {

using json = nlohmann::json;

double json_double(const json& v) {
  if (!v.is_string()) return v.get<double>();
  const std::string& s = v.get_ref<const std::string&>();
  if (s == "nan") return NAN;
  return s == "inf" ? INFINITY : -INFINITY;
}

Tensor json_tensor(const json& j) {
  DType dt = parse_dtype(j.at("dtype").get<std::string>()).value();
  Tensor t(dt, Shape(j.at("shape").get<std::vector<int64_t>>()));
  const json& data = j.at("data");
  for (int64_t i = 0; i < t.numel(); ++i) {
    const json& v = data[static_cast<size_t>(i)];
    if (is_float(dt))
      t.set_f64(i, json_double(v));
    else if (is_bool(dt))
      t.set_i64(i, v.get<bool>() ? 1 : 0);
    else
      t.set_i64(i, v.get<int64_t>());
  }
  return t;
}

// Runs `g` node by node through the plan's arena: operands are read from their buffers (or
// from the leaf a view aliases), results written at their offsets; returns the outputs.
std::vector<Tensor> run_in_arena(const Graph& g, const MemoryPlan& plan, const TensorMap& feeds) {
  std::vector<std::byte> arena(static_cast<size_t>(plan.arena_bytes));
  std::memset(arena.data(), 0xa5, arena.size());  // garbage: nothing may read before a write
  std::vector<std::vector<const BufferAssignment*>> buf(g.nodes().size());
  for (const BufferAssignment& b : plan.buffers) {
    auto& slot = buf[static_cast<size_t>(b.value.node)];
    slot.resize(std::max(slot.size(), static_cast<size_t>(b.value.index) + 1));
    slot[static_cast<size_t>(b.value.index)] = &b;
  }
  std::vector<Tensor> leaf(g.nodes().size());
  auto buffer_of = [&](Value v) -> const BufferAssignment* {
    const auto& slot = buf[static_cast<size_t>(v.node)];
    return static_cast<size_t>(v.index) < slot.size() ? slot[static_cast<size_t>(v.index)]
                                                      : nullptr;
  };
  auto read = [&](Value v) {
    const BufferAssignment* b = buffer_of(v);
    if (b == nullptr) return leaf[static_cast<size_t>(v.node)];
    Tensor t(g.type(v).dtype, g.type(v).shape);
    bool external = b->is_view && buffer_of(b->alias_of) == nullptr;
    const std::byte* base =
        external ? leaf[static_cast<size_t>(b->alias_of.node)].data() : arena.data();
    if (t.nbytes() > 0) std::memcpy(t.data(), base + b->offset, t.nbytes());
    return t;
  };
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.op == OpKind::Input || n.op == OpKind::Param) {
      leaf[i] = feeds.at(n.name);
      continue;
    }
    if (n.op == OpKind::Constant) {
      leaf[i] = n.attrs.get_tensor("value");
      continue;
    }
    std::vector<Tensor> operands;
    for (Value v : n.operands) operands.push_back(read(v));
    std::vector<Tensor> results = evaluate_op(n.op, operands, n.attrs);
    for (size_t r = 0; r < results.size(); ++r) {
      const BufferAssignment* b =
          buffer_of(Value{static_cast<int32_t>(i), static_cast<int32_t>(r)});
      if (b == nullptr) throw Error("no buffer for %" + n.name);
      if (!b->is_view && results[r].nbytes() > 0)
        std::memcpy(arena.data() + b->offset, results[r].data(), results[r].nbytes());
    }
  }
  std::vector<Tensor> outs;
  for (Value v : g.outputs()) outs.push_back(read(v));
  return outs;
}

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
