// The IR collectives executed on the XLA plugin, pmap-style: a per-device graph compiled by
// make_pjrt_replicated_backend (XLA num_replicas = N, cross-replica collectives) with its inputs
// and outputs stacked on a leading device axis, against evaluate_spmd (the reference
// evaluator's simulated device axis) on random data: every collective and reduction over the
// layouts of tests/common/collective_layouts.h (1, 2 and 4 devices, one group of all, adjacent
// and strided pairs) and 8 devices, in f32 and i32; the emitted cross-replica form, groups that
// do not fit the replicas, the Concat layout, and all_reduce sum under auto-mixed-bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/collective_layouts.h"
#include "common/scoped_env.h"
#include "common/test_util.h"
#include "pjrt_test_util.h"
#include "rlx/ir/collective.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/precision.h"

namespace rlx::pjrt {
namespace {

using ::rlx::testing::Layout;
using ::rlx::testing::layouts;
using testing::all_close;
using testing::f32_options;
using testing::Tolerance;

// f32 sums over at most 8 devices of values |x| < 5 in another association order than the
// evaluator's (which sums in double and rounds once): a few ulp of the partial sums.
constexpr Tolerance kSumTol{2e-5, 2e-6};

AttrMap attrs(const Layout& l, AttrMap op) {
  AttrMap a = collective_attrs(l.groups, "i", l.groups.empty() ? l.devices : 0);
  for (const auto& [k, v] : op.entries()) a.set(k, v);
  return a;
}

// One output per collective, each of x itself, so each is checked on its own: all_reduce sum,
// max, min (and mean for floats), all_gather along 0 and 1, reduce_scatter along 1, all_to_all
// 1 -> 0 and 0 -> 1. `exact[i]`: output i must be bit-equal to the evaluator's.
Graph program(const Layout& l, DType t, std::vector<bool>& exact) {
  Graph g("collectives");
  Value x = g.input("x", t, Shape{8, 8});
  std::vector<Value> outs;
  auto add = [&](Value v, bool is_exact) {
    outs.push_back(v);
    exact.push_back(is_exact || !is_float(t));  // integer sums are exact
  };
  for (const char* r : {"sum", "max", "min", "mean"}) {
    if (std::string(r) == "mean" && !is_float(t)) continue;
    bool sums = std::string(r) == "sum" || std::string(r) == "mean";
    add(g.emit1(OpKind::AllReduce, {x}, attrs(l, {{"reduce", std::string(r)}})), !sums);
  }
  for (int64_t axis : {0, 1})
    add(g.emit1(OpKind::AllGather, {x}, attrs(l, {{"axis", axis}})), true);
  add(g.emit1(OpKind::ReduceScatter, {x}, attrs(l, {{"scatter_dimension", int64_t{1}}})), false);
  for (int64_t split : {1, 0})
    add(g.emit1(OpKind::AllToAll, {x},
                attrs(l, {{"split_axis", split}, {"concat_axis", int64_t{1 - split}}})),
        true);
  g.set_outputs(outs);
  return g;
}

std::vector<TensorMap> random_feeds(int64_t n, DType t, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.5);
  std::uniform_int_distribution<int> ints(-1000, 1000);
  std::vector<TensorMap> out(static_cast<size_t>(n));
  for (auto& m : out) {
    std::vector<double> v(64);
    for (double& x : v) x = is_float(t) ? normal(rng) : ints(rng);
    m["x"] = Tensor::from_doubles(t, Shape{8, 8}, v);
  }
  return out;
}

// Per-device tensors stacked on a new leading axis (jax.pmap's layout) and back.
Tensor stack(const std::vector<Tensor>& per_device) {
  std::vector<int64_t> dims = per_device[0].shape().dims();
  dims.insert(dims.begin(), static_cast<int64_t>(per_device.size()));
  Tensor t(per_device[0].dtype(), Shape(dims));
  for (size_t d = 0; d < per_device.size(); ++d)
    std::memcpy(t.data() + d * per_device[d].nbytes(), per_device[d].data(),
                per_device[d].nbytes());
  return t;
}

Tensor slice(const Tensor& stacked, int64_t d) {
  Shape one(std::vector<int64_t>(stacked.shape().dims().begin() + 1, stacked.shape().dims().end()));
  Tensor t(stacked.dtype(), one);
  std::memcpy(t.data(), stacked.data() + static_cast<size_t>(d) * t.nbytes(), t.nbytes());
  return t;
}

// Runs `g` on `n` replicas (devices 0..n-1) with per-device feeds; returns [device][output].
std::vector<std::vector<Tensor>> run_replicated(const Graph& g, const std::vector<TensorMap>& feeds,
                                                const CompileOptions& options = f32_options()) {
  std::vector<int> devices;
  for (size_t d = 0; d < feeds.size(); ++d) devices.push_back(static_cast<int>(d));
  auto backend =
      make_pjrt_replicated_backend(devices, testing::test_plugin(), ReplicaLayout::Stacked);
  auto exe = backend->compile(g, options, Device{DeviceKind::Pjrt, 0});
  TensorMap stacked;
  for (const auto& [name, t] : feeds[0]) {
    std::vector<Tensor> per_device;
    for (const TensorMap& f : feeds) per_device.push_back(f.at(name));
    stacked[name] = stack(per_device);
  }
  std::vector<Tensor> outs = exe->run(stacked);
  std::vector<std::vector<Tensor>> result(feeds.size());
  for (size_t d = 0; d < feeds.size(); ++d)
    for (const Tensor& o : outs) result[d].push_back(slice(o, static_cast<int64_t>(d)));
  return result;
}

// Checks every output of every device against the evaluator; returns the largest |error|.
double check_against_evaluator(const Layout& l, DType t, unsigned seed) {
  std::vector<bool> exact;
  Graph g = program(l, t, exact);
  std::vector<TensorMap> feeds = random_feeds(l.devices, t, seed);
  std::vector<std::vector<Tensor>> want = evaluate_spmd(g, feeds);
  std::vector<std::vector<Tensor>> got = run_replicated(g, feeds);
  double worst = 0;
  for (size_t d = 0; d < want.size(); ++d)
    for (size_t i = 0; i < want[d].size(); ++i) {
      SCOPED_TRACE("device " + std::to_string(d) + " output " + std::to_string(i) + " (node %" +
                   g.node(g.outputs()[i].node).name + ")");
      if (exact[i]) {
        EXPECT_TRUE(got[d][i].bitwise_equal(want[d][i])) << got[d][i].to_string() << "\nvs\n"
                                                         << want[d][i].to_string();
      } else {
        double err = 0;
        EXPECT_TRUE(all_close(got[d][i], want[d][i], kSumTol, &err));
        worst = std::max(worst, err);
      }
    }
  return worst;
}

TEST(PjrtCollectives, EveryCollectiveOnReplicasEqualsTheEvaluator) {
  RLX_REQUIRE_PJRT_PLUGIN();
  double worst = 0;
  for (DType t : {DType::f32, DType::i32})
    for (const Layout& l : layouts()) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + l.name);
      worst = std::max(worst, check_against_evaluator(l, t, 18));
    }
  std::printf("max |error| of f32 sums / means / reduce_scatter: %g\n", worst);
}

TEST(PjrtCollectives, EightReplicasWhenConfigured) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (describe_plugin(testing::test_plugin()).platform != "cpu")
    GTEST_SKIP() << "RLX_PJRT_CPU_DEVICE_COUNT is an XLA CPU plugin option";
  ::rlx::testing::ScopedEnv env;  // restores the variable
  env.set("RLX_PJRT_CPU_DEVICE_COUNT", "8");
  ASSERT_EQ(describe_plugin(testing::test_plugin()).devices.size(), 8u);
  double worst = 0;
  for (const Layout& l :
       std::vector<Layout>{{"eight", 8, {}},
                           {"pairs_strided8", 8, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
                           {"fours", 8, {{0, 1, 2, 3}, {4, 5, 6, 7}}}})
    for (DType t : {DType::f32, DType::i32}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + l.name);
      worst = std::max(worst, check_against_evaluator(l, t, 8));
    }
  std::printf("8 replicas: max |error| of f32 sums: %g\n", worst);
}

// A chain (each collective reads the previous one's result through arithmetic) on 4 replicas,
// run three times on one executable: channel-free collectives in sequence, repeated runs.
TEST(PjrtCollectives, ChainedCollectivesOverRepeatedRuns) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Layout l{"pairs_strided", 4, {{0, 2}, {1, 3}}};
  Graph g("chain");
  Value x = g.input("x", DType::i32, Shape{8, 8});
  Value s = g.emit1(OpKind::AllReduce, {x}, attrs(l, {{"reduce", std::string("sum")}}));
  Value mx = g.emit1(OpKind::AllReduce, {g.sub(s, x)}, attrs(l, {{"reduce", std::string("max")}}));
  Value ag = g.emit1(OpKind::AllGather, {g.add(mx, x)}, attrs(l, {{"axis", int64_t{1}}}));
  Value rs = g.emit1(OpKind::ReduceScatter, {ag}, attrs(l, {{"scatter_dimension", int64_t{1}}}));
  Value a2a = g.emit1(OpKind::AllToAll, {g.mul(rs, x)},
                      attrs(l, {{"split_axis", int64_t{1}}, {"concat_axis", int64_t{0}}}));
  g.set_outputs({a2a});
  auto exe =
      make_pjrt_replicated_backend({3, 1, 2, 0}, testing::test_plugin(), ReplicaLayout::Stacked)
          ->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
  for (unsigned run = 0; run < 3; ++run) {
    std::vector<TensorMap> feeds = random_feeds(4, DType::i32, 100 + run);
    std::vector<std::vector<Tensor>> want = evaluate_spmd(g, feeds);
    std::vector<Tensor> per_device;
    for (const TensorMap& f : feeds) per_device.push_back(f.at("x"));
    Tensor got = exe->run({{"x", stack(per_device)}})[0];
    std::vector<Tensor> want_outs;
    for (const auto& w : want) want_outs.push_back(w[0]);
    EXPECT_TRUE(got.bitwise_equal(stack(want_outs))) << "run " << run;
  }
}

// The replicated module uses XLA's cross-replica form, as jax.pmap emits it: replica_groups of
// replica ids, no channel_handle, no use_global_device_ids.
TEST(PjrtCollectives, ReplicatedModuleHasTheCrossReplicaForm) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Layout l{"pairs_adjacent", 4, {{0, 1}, {2, 3}}};
  std::vector<bool> exact;
  Graph g = program(l, DType::f32, exact);
  auto exe =
      make_pjrt_replicated_backend({0, 1, 2, 3}, testing::test_plugin(), ReplicaLayout::Stacked)
          ->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
  std::string module = exe->kernel_report();
  EXPECT_NE(module.find("mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32"),
            std::string::npos)
      << module;
  EXPECT_NE(module.find("{replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>}"),
            std::string::npos)
      << module;
  EXPECT_EQ(module.find("channel_handle"), std::string::npos) << module;
  EXPECT_EQ(module.find("use_global_device_ids"), std::string::npos) << module;
  // [N, ...] in and out.
  EXPECT_EQ(exe->inputs()[0].type.shape, (Shape{4, 8, 8}));
  EXPECT_EQ(exe->outputs()[0].type.shape, (Shape{4, 8, 8}));
}

TEST(PjrtCollectives, GroupsThatDoNotFitTheReplicasFailAtCompile) {
  RLX_REQUIRE_PJRT_PLUGIN();
  auto backend =
      make_pjrt_replicated_backend({0, 1}, testing::test_plugin(), ReplicaLayout::Stacked);
  {
    Graph g("pairs");
    Value x = g.input("x", DType::f32, Shape{2, 4});
    Value s = g.emit1(OpKind::AllReduce, {x},
                      attrs({"pairs", 4, {{0, 1}, {2, 3}}}, {{"reduce", std::string("sum")}}));
    g.set_outputs({s});
    std::string msg = ::rlx::testing::error_of(
        [&] { backend->compile(g, f32_options(), Device::parse("pjrt:0")); });
    EXPECT_NE(msg.find("all_reduce (node %" + g.node(s.node).name + ")"), std::string::npos) << msg;
    EXPECT_NE(msg.find("name 4 devices, the run has 2"), std::string::npos) << msg;
  }
  {
    Graph g("axis");
    Value x = g.input("x", DType::f32, Shape{2, 4});
    Value s = g.emit1(OpKind::AllGather, {x}, attrs({"all", 4, {}}, {{"axis", int64_t{0}}}));
    g.set_outputs({s});
    std::string msg = ::rlx::testing::error_of(
        [&] { backend->compile(g, f32_options(), Device::parse("pjrt:0")); });
    EXPECT_NE(msg.find("all_gather (node %"), std::string::npos) << msg;
    EXPECT_NE(msg.find("axis_size 4 (one group of all devices) differs from the run's 2 devices"),
              std::string::npos)
        << msg;
  }
}

// A collective where XLA would not run it as written is an error before the plugin, naming the
// op and node and where per-device programs go: on one device (an all_reduce over 4 devices
// would be the identity there) and in an auto-partitioned SPMD program (XLA's partitioner owns
// the communication; it used to fail inside XLA with a RET_CHECK). Over one device it runs.
TEST(PjrtCollectives, CollectivesOutsidePerDeviceProgramsAreClearErrors) {
  RLX_REQUIRE_PJRT_PLUGIN();
  auto graph = [](const Layout& l) {
    Graph g("reduce");
    Value x = g.input("x", DType::f32, Shape{4, 4});
    g.set_outputs({g.emit1(OpKind::AllReduce, {x}, attrs(l, {{"reduce", std::string("sum")}}))});
    return g;
  };
  auto single = make_pjrt_backend(testing::test_plugin());
  for (const Layout& l : {Layout{"all", 4, {}}, Layout{"pairs", 2, {{0, 1}}}}) {
    Graph g = graph(l);
    std::string msg = ::rlx::testing::error_of(
        [&] { single->compile(g, f32_options(), Device::parse("pjrt:0")); });
    EXPECT_NE(msg.find("all_reduce (node %"), std::string::npos) << msg;
    EXPECT_NE(msg.find("on pjrt:0 (one device)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rlx.compile_shard_map"), std::string::npos) << msg;
  }
  Graph one = graph(Layout{"one", 1, {}});
  auto exe = single->compile(one, f32_options(), Device::parse("pjrt:0"));
  Tensor x = Tensor::full(DType::f32, Shape{4, 4}, 1.5);
  EXPECT_TRUE(all_close(exe->run({{"x", x}})[0], x, Tolerance{0, 0}));

  ShardingConfig config{Mesh({{"data", 2}}, {0, 1}), {}, {}, {}};
  auto spmd = make_pjrt_spmd_backend(config, testing::test_plugin());
  Graph g = graph(Layout{"all", 2, {}});
  std::string msg =
      ::rlx::testing::error_of([&] { spmd->compile(g, f32_options(), Device::parse("pjrt:0")); });
  EXPECT_NE(msg.find("all_reduce (node %"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is a per-device collective, but the SPMD program over Mesh('data': 2) is "
                     "partitioned by XLA"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("make_pjrt_shard_map_backend"), std::string::npos) << msg;
}

// Scalars travel under Stacked ([N]); under Concat they are refused, and per-device rows of
// rank >= 1 come back concatenated along dim 0.
TEST(PjrtCollectives, StackedScalarsAndTheConcatLayout) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g("loss");
  Value x = g.input("x", DType::f32, Shape{});
  g.set_outputs(
      {g.emit1(OpKind::AllReduce, {x}, attrs({"all", 4, {}}, {{"reduce", std::string("mean")}}))});
  auto stacked =
      make_pjrt_replicated_backend({0, 1, 2, 3}, testing::test_plugin(), ReplicaLayout::Stacked)
          ->compile(g, f32_options(), Device::parse("pjrt:0"));
  std::vector<double> v{1.0, 2.0, 4.0, 9.0};
  Tensor out = stacked->run({{"x", Tensor::from_doubles(DType::f32, Shape{4}, v)}})[0];
  ASSERT_EQ(out.shape(), (Shape{4}));
  for (int64_t d = 0; d < 4; ++d) EXPECT_EQ(out.get_f64(d), 4.0);
  std::string msg = ::rlx::testing::error_of([&] {
    make_pjrt_replicated_backend({0, 1, 2, 3}, testing::test_plugin())
        ->compile(g, f32_options(), Device::parse("pjrt:0"));
  });
  EXPECT_NE(msg.find("input 'x' is a scalar"), std::string::npos) << msg;

  std::vector<bool> exact;
  Layout l{"pairs_strided", 4, {{0, 2}, {1, 3}}};
  Graph h = program(l, DType::i32, exact);
  std::vector<TensorMap> feeds = random_feeds(4, DType::i32, 7);
  std::vector<std::vector<Tensor>> want = evaluate_spmd(h, feeds);
  auto concat = make_pjrt_replicated_backend({0, 1, 2, 3}, testing::test_plugin())
                    ->compile(h, f32_options(), Device::parse("pjrt:0"));
  std::vector<Tensor> xs;
  for (const TensorMap& f : feeds) xs.push_back(f.at("x"));
  Tensor rows = stack(xs);  // [4, 8, 8] -> [32, 8]: the same bytes
  std::vector<Tensor> got =
      concat->run({{"x", Tensor::borrow(DType::i32, Shape{32, 8}, rows.data())}});
  for (size_t i = 0; i < got.size(); ++i) {
    std::vector<Tensor> per_device;
    for (const auto& w : want) per_device.push_back(w[i]);
    Tensor s = stack(per_device);
    EXPECT_EQ(got[i].nbytes(), s.nbytes());
    EXPECT_EQ(std::memcmp(got[i].data(), s.data(), s.nbytes()), 0) << "output " << i;
  }
}

// Under auto-mixed-bf16 an all_reduce sum of bf16 values accumulates in f32 (its AMP class is
// sensitive) and rounds once: 256 + 1 + 1 + 1 = 259 -> bf16 260, where a bf16 accumulation
// gives 256 (each 256 + 1 rounds back to 256); all_reduce max stays in bf16.
TEST(PjrtCollectives, AllReduceSumAccumulatesInF32UnderAutoMixedBf16) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g("amp");
  Value x = g.input("x", DType::bf16, Shape{1});
  AttrMap all = collective_attrs({}, "i", 4);
  AttrMap sum = all, max = all;
  sum.set("reduce", std::string("sum"));
  max.set("reduce", std::string("max"));
  g.set_outputs({g.emit1(OpKind::AllReduce, {x}, sum), g.emit1(OpKind::AllReduce, {x}, max)});
  CompileOptions o;
  o.precision = PrecisionPolicy{PrecisionMode::AutoMixedBf16, {}};
  auto exe =
      make_pjrt_replicated_backend({0, 1, 2, 3}, testing::test_plugin(), ReplicaLayout::Stacked)
          ->compile(g, o, Device::parse("pjrt:0"));
  // The sum's all_reduce takes f32, the max's (and its NaN flags') bf16.
  int f32_reduces = 0, bf16_reduces = 0;
  std::istringstream module(exe->kernel_report());
  for (std::string line; std::getline(module, line);) {
    if (line.find("}) {replica_groups") == std::string::npos) continue;
    if (line.find(": (tensor<1xf32>) -> tensor<1xf32>") != std::string::npos) ++f32_reduces;
    if (line.find(": (tensor<1xbf16>) -> tensor<1xbf16>") != std::string::npos) ++bf16_reduces;
  }
  EXPECT_EQ(f32_reduces, 1) << exe->kernel_report();
  EXPECT_EQ(bf16_reduces, 2) << exe->kernel_report();
  std::vector<double> v{256, 1, 1, 1};
  std::vector<Tensor> out = exe->run({{"x", Tensor::from_doubles(DType::bf16, Shape{4, 1}, v)}});
  for (int64_t d = 0; d < 4; ++d) {
    EXPECT_EQ(out[0].get_f64(d), 260.0) << "device " << d;
    EXPECT_EQ(out[1].get_f64(d), 256.0) << "device " << d;
  }
  std::vector<TensorMap> feeds(4);
  for (size_t d = 0; d < 4; ++d)
    feeds[d]["x"] = Tensor::from_doubles(DType::bf16, Shape{1}, {&v[d], 1});
  EXPECT_EQ(evaluate_spmd(g, feeds)[0][0].get_f64(0), 260.0);
}

// max / min propagate NaN as the evaluator does (XLA's all-reduce regions take no NaN select, so
// a second all_reduce of the NaN flags carries it): a NaN on one device of a group reaches
// every member of that group and no other.
TEST(PjrtCollectives, MaxAndMinPropagateNaNWithinTheirGroup) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Layout l{"pairs_strided", 4, {{0, 2}, {1, 3}}};
  Graph g("nan");
  Value x = g.input("x", DType::f32, Shape{8, 8});
  g.set_outputs({g.emit1(OpKind::AllReduce, {x}, attrs(l, {{"reduce", std::string("max")}})),
                 g.emit1(OpKind::AllReduce, {x}, attrs(l, {{"reduce", std::string("min")}}))});
  std::vector<TensorMap> feeds = random_feeds(4, DType::f32, 3);
  feeds[2]["x"].set_f64(5, std::numeric_limits<double>::quiet_NaN());  // group {0, 2}
  feeds[1]["x"].set_f64(9, std::numeric_limits<double>::infinity());
  feeds[3]["x"].set_f64(9, -std::numeric_limits<double>::infinity());
  std::vector<std::vector<Tensor>> want = evaluate_spmd(g, feeds);
  std::vector<std::vector<Tensor>> got = run_replicated(g, feeds);
  for (size_t d = 0; d < 4; ++d)
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(std::isnan(got[d][i].get_f64(5)), d % 2 == 0) << "device " << d;
      EXPECT_TRUE(all_close(got[d][i], want[d][i], Tolerance{0, 0}))
          << "device " << d << " output " << i;
    }
}

}  // namespace
}  // namespace rlx::pjrt
