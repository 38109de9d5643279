// shard_map-style programs (make_pjrt_shard_map_backend): a per-device graph with explicit
// collectives inside an SPMD program in manual mode, as jax.jit(shard_map(...)) lowers it. Every
// collective over a 4-device mesh (one group, strided pairs) against evaluate_spmd; a
// data-parallel linear-regression step (explicit all_reduce mean of the gradients) against
// evaluate_spmd and against the same step written for the full batch and auto-partitioned by
// XLA (make_pjrt_spmd_backend); the emitted module's form; errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "pjrt_test_util.h"
#include "rlx/ir/collective.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"

namespace rlx::pjrt {
namespace {

using testing::all_close;
using testing::f32_options;
using testing::Tolerance;

constexpr Tolerance kTol{1e-5, 1e-5};

Tensor random(DType t, const Shape& s, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = normal(rng);
  return Tensor::from_doubles(t, s, v);
}

AttrMap with(AttrMap a, const std::string& k, Attr v) {
  a.set(k, std::move(v));
  return a;
}

// Runs `g` shard_map-style and checks each output's per-device pieces against evaluate_spmd.
void check_against_evaluator(const Graph& g, const ShardingConfig& c, const TensorMap& full,
                             std::vector<bool> exact) {
  auto exe = make_pjrt_shard_map_backend(c, testing::test_plugin())
                 ->compile(g, f32_options(), Device::parse("pjrt:0"));
  std::vector<TensorMap> feeds(static_cast<size_t>(c.mesh.size()));
  for (const auto& [name, t] : full) {
    auto it = c.inputs.find(name);
    PartitionSpec spec = it == c.inputs.end() ? PartitionSpec() : it->second;
    std::vector<Tensor> pieces = split_by_sharding(t, c.mesh, spec);
    for (size_t d = 0; d < feeds.size(); ++d) feeds[d][name] = pieces[d];
  }
  std::vector<std::vector<Tensor>> want = evaluate_spmd(g, feeds);
  std::vector<Tensor> got = exe->run(full);
  ASSERT_EQ(got.size(), want[0].size());
  for (size_t i = 0; i < got.size(); ++i) {
    auto it = c.outputs.find(exe->outputs()[i].name);
    PartitionSpec spec = it == c.outputs.end() ? PartitionSpec() : it->second;
    std::vector<Tensor> pieces = split_by_sharding(got[i], c.mesh, spec);
    for (size_t d = 0; d < pieces.size(); ++d) {
      SCOPED_TRACE("output " + std::to_string(i) + " device " + std::to_string(d));
      if (exact[i])
        EXPECT_TRUE(pieces[d].bitwise_equal(want[d][i]));
      else
        EXPECT_TRUE(all_close(pieces[d], want[d][i], kTol));
    }
  }
}

TEST(PjrtShardMap, EveryCollectiveOnAMeshEqualsTheEvaluator) {
  RLX_REQUIRE_PJRT_PLUGIN();
  for (const ReplicaGroups& groups : {ReplicaGroups{}, ReplicaGroups{{0, 2}, {1, 3}}}) {
    SCOPED_TRACE(groups.empty() ? "all" : "pairs");
    AttrMap a = collective_attrs(groups, "i", groups.empty() ? 4 : 0);
    Graph g("shmap");
    Value x = g.input("x", DType::f32, Shape{8, 8});  // per device: rows of x over 'i'
    std::vector<Value> outs{
        g.emit1(OpKind::AllReduce, {x}, with(a, "reduce", std::string("sum"))),
        g.emit1(OpKind::AllReduce, {x}, with(a, "reduce", std::string("max"))),
        g.emit1(OpKind::AllReduce, {x}, with(a, "reduce", std::string("mean"))),
        g.emit1(OpKind::AllGather, {x}, with(a, "axis", int64_t{1})),
        g.emit1(OpKind::ReduceScatter, {x}, with(a, "scatter_dimension", int64_t{1})),
        g.emit1(OpKind::AllToAll, {x},
                with(with(a, "split_axis", int64_t{1}), "concat_axis", int64_t{0}))};
    g.set_outputs(outs);
    ShardingConfig c{Mesh({{"i", 4}}), {{"x", PartitionSpec({"i"})}}, {}, {}};
    for (Value v : outs) c.outputs[g.node(v.node).name] = PartitionSpec({"i"});
    check_against_evaluator(g, c, {{"x", random(DType::f32, Shape{32, 8}, 5)}},
                            {false, true, false, true, false, true});
  }
}

// A 2x2 mesh ('data', 'model'): mesh position p = 2 * data + model is the collectives' device
// id, so a reduction over 'model' is groups [[0, 1], [2, 3]] and over 'data' [[0, 2], [1, 3]].
TEST(PjrtShardMap, CollectivesOverOneAxisOfATwoByTwoMesh) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g("mesh2x2");
  Value x = g.input("x", DType::f32, Shape{2, 4});  // per device: a [2,4] block of [4,8]
  AttrMap over_model = collective_attrs({{0, 1}, {2, 3}}, "model");
  AttrMap over_data = collective_attrs({{0, 2}, {1, 3}}, "data");
  Value rows = g.emit1(OpKind::AllReduce, {x}, with(over_model, "reduce", std::string("sum")));
  Value cols = g.emit1(OpKind::AllReduce, {x}, with(over_data, "reduce", std::string("max")));
  Value gathered = g.emit1(OpKind::AllGather, {x}, with(over_model, "axis", int64_t{1}));
  g.set_outputs({rows, cols, gathered});
  PartitionSpec both({"data", "model"});
  ShardingConfig c{Mesh({{"data", 2}, {"model", 2}}), {{"x", both}}, {}, {}};
  c.outputs[g.node(rows.node).name] = both;
  c.outputs[g.node(cols.node).name] = both;
  c.outputs[g.node(gathered.node).name] = PartitionSpec({"data", "model"});
  check_against_evaluator(g, c, {{"x", random(DType::f32, Shape{4, 8}, 9)}}, {false, true, true});
}

// One step of linear regression, y ~ x w, loss mean((x w - y)^2), gradient 2 x^T (x w - y) / n.
// Per device (b rows): the local gradient / loss, all_reduce mean over the data axis (the
// explicit data-parallel step); full batch: the same formulas over all rows, auto-partitioned.
Graph regression_step(int64_t rows, const AttrMap* all_reduce_mean) {
  Graph g(all_reduce_mean ? "dp_step" : "full_step");
  Value x = g.input("x", DType::f32, Shape{rows, 4});
  Value y = g.input("y", DType::f32, Shape{rows, 1});
  Value w = g.param("w", DType::f32, Shape{4, 1});
  Value err = g.sub(g.matmul(x, w), y);
  Value scale = g.constant(Tensor::full(DType::f32, Shape{}, 2.0 / static_cast<double>(rows)));
  Value grad = g.mul(g.matmul(g.transpose(x, {1, 0}), err), scale);
  Value loss = g.reduce_mean(g.mul(err, err), {0, 1});
  if (all_reduce_mean) {
    grad = g.emit1(OpKind::AllReduce, {grad}, *all_reduce_mean, "grad");
    loss = g.emit1(OpKind::AllReduce, {loss}, *all_reduce_mean, "loss");
  }
  g.set_outputs({grad, loss, err});
  return g;
}

TEST(PjrtShardMap, DataParallelStepEqualsEvaluatorAndAutoPartitioned) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Mesh mesh({{"data", 4}});
  AttrMap mean = with(collective_attrs({}, "data", 4), "reduce", std::string("mean"));
  Graph dp = regression_step(2, &mean);
  const std::string err_name = dp.node(dp.outputs()[2].node).name;
  ShardingConfig c{mesh,
                   {{"x", PartitionSpec({"data"})}, {"y", PartitionSpec({"data"})}},
                   {},
                   {{err_name, PartitionSpec({"data"})}}};
  TensorMap full{{"x", random(DType::f32, Shape{8, 4}, 1)},
                 {"y", random(DType::f32, Shape{8, 1}, 2)}};
  Tensor w = random(DType::f32, Shape{4, 1}, 3);
  auto exe = make_pjrt_shard_map_backend(c, testing::test_plugin())
                 ->compile(dp, f32_options(), Device::parse("pjrt:0"));
  EXPECT_EQ(exe->inputs()[0].type.shape, (Shape{8, 4}));
  EXPECT_EQ(exe->outputs()[2].type.shape, (Shape{8, 1}));
  exe->set_param("w", w);
  std::vector<Tensor> got = exe->run(full);

  // The evaluator's simulated devices.
  std::vector<TensorMap> feeds(4);
  for (const char* name : {"x", "y"}) {
    std::vector<Tensor> pieces = split_by_sharding(full.at(name), mesh, PartitionSpec({"data"}));
    for (size_t d = 0; d < 4; ++d) feeds[d][name] = pieces[d];
  }
  for (TensorMap& f : feeds) f["w"] = w;
  std::vector<std::vector<Tensor>> want = evaluate_spmd(dp, feeds);
  EXPECT_TRUE(all_close(got[0], want[0][0], kTol));
  EXPECT_TRUE(all_close(got[1], want[0][1], kTol));
  // The full-batch step, auto-partitioned by XLA over the same mesh.
  Graph fb = regression_step(8, nullptr);
  ShardingConfig auto_c{
      mesh, {{"x", PartitionSpec({"data"})}, {"y", PartitionSpec({"data"})}}, {}, {}};
  auto auto_exe = make_pjrt_spmd_backend(auto_c, testing::test_plugin())
                      ->compile(fb, f32_options(), Device::parse("pjrt:0"));
  auto_exe->set_param("w", w);
  std::vector<Tensor> ref = auto_exe->run(full);
  double e0 = 0, e1 = 0, e2 = 0;
  EXPECT_TRUE(all_close(got[0], ref[0], kTol, &e0));
  EXPECT_TRUE(all_close(got[1], ref[1], kTol, &e1));
  EXPECT_TRUE(all_close(got[2], ref[2], kTol, &e2));
  std::printf("shard_map step vs auto-partitioned: max |d| grad %g, loss %g, err %g\n", e0, e1, e2);
  std::string module = exe->kernel_report();
  if (std::getenv("RLX_PRINT_GOLDEN") != nullptr) std::printf("%s\n", module.c_str());
  for (const char* part :
       {"custom_call @SPMDFullToShardShape", "mhlo.sharding = \"{manual}\"",
        "custom_call @SPMDShardToFullShape", "call @shmap_body(", "func.func private @shmap_body(",
        "channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>",
        "mhlo.num_partitions = 4 : i32"})
    EXPECT_NE(module.find(part), std::string::npos) << part << "\n" << module;
}

TEST(PjrtShardMap, Errors) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g("e");
  Value x = g.input("x", DType::f32, Shape{2, 4});
  g.set_outputs({g.emit1(OpKind::AllReduce, {x},
                         with(collective_attrs({{0, 1}}, "i"), "reduce", std::string("sum")))});
  auto compile = [&](ShardingConfig c) {
    return ::rlx::testing::error_of([&] {
      make_pjrt_shard_map_backend(c, testing::test_plugin())
          ->compile(g, f32_options(), Device::parse("pjrt:0"));
    });
  };
  Mesh mesh({{"i", 4}});
  std::string msg = compile({mesh, {{"x", PartitionSpec({"i"})}}, {}, {}});
  EXPECT_NE(msg.find("name 2 devices, the run has 4"), std::string::npos) << msg;
  msg = compile({mesh, {{"x", PartitionSpec({"i", "", ""})}}, {}, {}});
  EXPECT_NE(msg.find("shard_map: input 'x' [2,4] with P('i', None, None): the spec has 3 dims"),
            std::string::npos)
      << msg;
  msg = compile({mesh, {{"x", PartitionSpec({"j"})}}, {}, {}});
  EXPECT_NE(msg.find("unknown mesh axis 'j'"), std::string::npos) << msg;
  msg = compile({mesh, {{"z", PartitionSpec({"i"})}}, {}, {}});
  EXPECT_NE(msg.find("sharding: the graph has no input 'z'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace rlx::pjrt
