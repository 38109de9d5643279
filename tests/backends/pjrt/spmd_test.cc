// Meshes, PartitionSpecs and SPMD compiles on the XLA CPU plugin's 4 devices: sharding
// validation errors, HloSharding texts, host split / assembly, golden SPMD modules, and a
// 2-layer MLP and an encoder layer under every sharding against the single-device result.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <random>

#include "common/scoped_env.h"
#include "common/test_util.h"
#include "pjrt_test_util.h"
#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/backends/pjrt/sharding.h"
#include "rlx/ir/error.h"
#include "rlx/models/encoder_block.h"

namespace rlx::pjrt {
namespace {

using testing::all_close;
using testing::f32_options;
using testing::random_feeds;
using testing::Tolerance;

using rlx::testing::error_of;

const Mesh kMesh2x2({{"data", 2}, {"model", 2}});

// ---- Mesh and PartitionSpec (no plugin needed)

TEST(PjrtMesh, ShapeCoordsAndErrors) {
  EXPECT_EQ(kMesh2x2.size(), 4);
  EXPECT_EQ(kMesh2x2.devices(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(kMesh2x2.coords(2), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(kMesh2x2.axis_index("model"), 1);
  EXPECT_EQ(kMesh2x2.axis_index("x"), -1);
  EXPECT_EQ(kMesh2x2.to_string(), "Mesh('data': 2, 'model': 2)");
  EXPECT_EQ(error_of([] { Mesh(std::vector<std::pair<std::string, int64_t>>{}); }),
            "Mesh: needs at least one axis");
  EXPECT_EQ(error_of([] { Mesh({{"a", 2}, {"a", 2}}); }), "Mesh: axis 'a' appears twice");
  EXPECT_EQ(error_of([] { Mesh({{"a", 0}}); }), "Mesh: axis 'a' has size 0; sizes must be >= 1");
  EXPECT_EQ(error_of([] {
              Mesh({{"a", 2}}, {0, 1, 2});
            }),
            "Mesh: 3 devices for axes of 2 positions");
  EXPECT_EQ(error_of([] { Mesh({{"a", 2}}, {1, 1}); }), "Mesh: device pjrt:1 appears twice");
}

TEST(PjrtMesh, PartitionSpecText) {
  EXPECT_EQ(PartitionSpec().to_string(), "P()");
  EXPECT_EQ(PartitionSpec({"data", ""}).to_string(), "P('data', None)");
  EXPECT_EQ(PartitionSpec::of({{"data", "model"}}).to_string(), "P(('data', 'model'),)");
  EXPECT_TRUE(PartitionSpec({"", ""}).is_replicated());
  EXPECT_FALSE(PartitionSpec({"", "model"}).is_replicated());
}

TEST(PjrtMesh, ValidationErrorsNameTheTensor) {
  Shape s{6, 8};
  EXPECT_EQ(
      error_of([&] { validate_sharding(kMesh2x2, PartitionSpec({"batch"}), s, "input 'x'"); }),
      "sharding of input 'x' [6,8] with P('batch') on Mesh('data': 2, 'model': 2): "
      "unknown mesh axis 'batch' (axes: 'data', 'model')");
  EXPECT_EQ(
      error_of([&] {
        validate_sharding(kMesh2x2, PartitionSpec({"data", "data"}), s, "param 'w'");
      }),
      "sharding of param 'w' [6,8] with P('data', 'data') on Mesh('data': 2, 'model': 2): mesh "
      "axis 'data' is used twice");
  EXPECT_EQ(error_of([&] {
              validate_sharding(kMesh2x2, PartitionSpec::of({{"data", "model"}}), s, "output 'y'");
            }),
            "sharding of output 'y' [6,8] with P(('data', 'model'),) on Mesh('data': 2, 'model': "
            "2): dim 0 of size 6 is not divisible by 4 (('data', 'model'))");
  EXPECT_EQ(error_of([&] {
              validate_sharding(kMesh2x2, PartitionSpec({"data", "", ""}), s, "input 'x'");
            }),
            "sharding of input 'x' [6,8] with P('data', None, None) on Mesh('data': 2, 'model': "
            "2): the spec has 3 dims but the tensor has rank 2");
  EXPECT_NO_THROW(validate_sharding(kMesh2x2, PartitionSpec({"data", "model"}), s, "x"));
}

// HloSharding texts as jax writes them (explicit device lists where jax uses the iota form
// with a transpose, e.g. <=[2,2]T(1,0) = 0,2,1,3).
TEST(PjrtMesh, HloShardingText) {
  Shape s{4, 8};
  EXPECT_EQ(hlo_sharding(kMesh2x2, PartitionSpec(), s), "{replicated}");
  EXPECT_EQ(hlo_sharding(kMesh2x2, PartitionSpec({"data", "model"}), s), "{devices=[2,2]<=[4]}");
  EXPECT_EQ(hlo_sharding(kMesh2x2, PartitionSpec({"model", "data"}), s), "{devices=[2,2]0,2,1,3}");
  EXPECT_EQ(hlo_sharding(kMesh2x2, PartitionSpec({"data"}), s),
            "{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
  EXPECT_EQ(hlo_sharding(kMesh2x2, PartitionSpec({"", "model"}), s),
            "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}");
  EXPECT_EQ(hlo_sharding(kMesh2x2, PartitionSpec::of({{"data", "model"}}), s),
            "{devices=[4,1]<=[4]}");
  EXPECT_EQ(hlo_sharding(Mesh({{"data", 4}}), PartitionSpec({"data"}), Shape{8}),
            "{devices=[4]<=[4]}");
}

TEST(PjrtMesh, SplitAndAssembleAreInverse) {
  Tensor t(DType::f32, Shape{4, 6});
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = static_cast<float>(i);
  for (const PartitionSpec& spec :
       {PartitionSpec(), PartitionSpec({"data"}), PartitionSpec({"", "model"}),
        PartitionSpec({"model", "data"}), PartitionSpec::of({{"model", "data"}})}) {
    std::vector<Tensor> shards = split_by_sharding(t, kMesh2x2, spec);
    ASSERT_EQ(shards.size(), 4u);
    EXPECT_EQ(shards[0].shape(), shard_shape(kMesh2x2, spec, t.shape())) << spec.to_string();
    Tensor back = assemble_from_shards(shards, t.type(), kMesh2x2, spec);
    EXPECT_TRUE(all_close(back, t, {0, 0})) << spec.to_string();
  }
  // P('model', 'data'): position 1 (data 0, model 1) holds rows 2..3, columns 0..2.
  std::vector<Tensor> shards = split_by_sharding(t, kMesh2x2, PartitionSpec({"model", "data"}));
  EXPECT_EQ(shards[1].shape(), (Shape{2, 3}));
  EXPECT_EQ(shards[1].data_as<float>()[0], 12.0f);
  EXPECT_EQ(shards[1].data_as<float>()[5], 20.0f);
}

// ---- Graphs

// A 2-layer MLP: y = relu(x w1 + b1) w2 + b2, x [8, 16], hidden 32, out 4.
Graph mlp() {
  Graph g("mlp");
  Value x = g.input("x", DType::f32, Shape{8, 16});
  Value w1 = g.param("w1", DType::f32, Shape{16, 32});
  Value b1 = g.param("b1", DType::f32, Shape{32});
  Value w2 = g.param("w2", DType::f32, Shape{32, 4});
  Value b2 = g.param("b2", DType::f32, Shape{4});
  Value h = g.relu(g.add(g.matmul(x, w1), b1));
  Value y = g.add(g.matmul(h, w2), b2);
  g.set_outputs({y});
  return g;
}

// `program`: set to the executable's kernel-report program text.
std::vector<Tensor> run_on(Backend& backend, const Graph& g, const TensorMap& feeds,
                           std::string* program = nullptr) {
  std::unique_ptr<Executable> exe = backend.compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
  if (program != nullptr) *program = exe->kernels().program;
  TensorMap inputs;
  for (int32_t id : g.params()) exe->set_param(g.node(id).name, feeds.at(g.node(id).name));
  for (int32_t id : g.inputs()) inputs.emplace(g.node(id).name, feeds.at(g.node(id).name));
  return exe->run(inputs);
}

std::string output_name(const Graph& g) { return g.node(g.outputs()[0]).name; }

struct Case {
  std::string name;
  ShardingConfig config;
};

std::vector<Case> mlp_cases(const Graph& g) {
  std::string y = output_name(g);
  Mesh data({{"data", 4}}), model({{"model", 4}});
  std::vector<Case> cases;
  cases.push_back({"replicated", {data, {}, {}, {}}});
  cases.push_back(
      {"batch", {data, {{"x", PartitionSpec({"data"})}}, {}, {{y, PartitionSpec({"data"})}}}});
  cases.push_back({"model",
                   {model,
                    {},
                    {{"w1", PartitionSpec({"", "model"})},
                     {"b1", PartitionSpec({"model"})},
                     {"w2", PartitionSpec({"model", ""})}},
                    {}}});
  cases.push_back({"mixed_2x2",
                   {kMesh2x2,
                    {{"x", PartitionSpec({"data"})}},
                    {{"w1", PartitionSpec({"", "model"})},
                     {"b1", PartitionSpec({"model"})},
                     {"w2", PartitionSpec({"model", ""})}},
                    {{y, PartitionSpec({"data"})}}}});
  // Partitions on the devices in reverse order, and the output split over both axes.
  cases.push_back({"mixed_2x2_reversed_devices",
                   {Mesh({{"data", 2}, {"model", 2}}, {3, 2, 1, 0}),
                    {{"x", PartitionSpec({"model"})}},
                    {{"w1", PartitionSpec({"", "data"})}, {"b1", PartitionSpec({"data"})}},
                    {{y, PartitionSpec::of({{"model", "data"}})}}}});
  return cases;
}

// Tolerance of a sharded f32 run against one device: the partitioner splits the contractions
// (partial sums then an all-reduce), so float sums are reassociated: a few ulp of the terms.
constexpr Tolerance kShardedTol{1e-5, 1e-5};

// The SPMD runs below are repeated in both sharding forms (GSPMD's mhlo.sharding, Shardy's
// sdy.sharding): each must equal one device.
class PjrtSpmdForm : public ::testing::TestWithParam<ShardingForm> {
 protected:
  // `config` in this test's form.
  ShardingConfig in_form(ShardingConfig config) const {
    config.form = GetParam();
    return config;
  }
  // The kernel report's `program` names this test's form.
  void expect_form(const std::string& program) const {
    EXPECT_NE(program.find(GetParam() == ShardingForm::Shardy ? "shardings in Shardy form"
                                                              : "shardings in GSPMD form"),
              std::string::npos)
        << program.substr(0, 300);
  }
};
INSTANTIATE_TEST_SUITE_P(Forms, PjrtSpmdForm,
                         ::testing::Values(ShardingForm::Gspmd, ShardingForm::Shardy),
                         [](const ::testing::TestParamInfo<ShardingForm>& info) {
                           return std::string(sharding_form_name(info.param));
                         });

TEST_P(PjrtSpmdForm, MlpEverySharding) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (describe_plugin(testing::test_plugin()).devices.size() < 4)
    GTEST_SKIP() << "needs a plugin with 4 devices";
  Graph g = mlp();
  TensorMap feeds = random_feeds(g, 3);
  std::vector<Tensor> want = run_on(*testing::test_backend(), g, feeds);
  for (const Case& c : mlp_cases(g)) {
    auto backend = make_pjrt_spmd_backend(in_form(c.config), testing::test_plugin());
    std::string program;
    std::vector<Tensor> got = run_on(*backend, g, feeds, &program);
    expect_form(program);
    double err = 0;
    EXPECT_TRUE(all_close(got[0], want[0], kShardedTol, &err)) << c.name;
    std::cout << "[ mlp " << sharding_form_name(GetParam()) << " ] " << c.name
              << " max |err| = " << err << "\n";
  }
}

// The check can fail: a result assembled in the wrong order differs from one device's.
TEST(PjrtSpmd, WrongAssemblyWouldBeCaught) {
  Tensor t(DType::f32, Shape{4, 2});
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = static_cast<float>(i);
  std::vector<Tensor> shards = split_by_sharding(t, Mesh({{"data", 4}}), PartitionSpec({"data"}));
  std::swap(shards[0], shards[1]);
  Tensor wrong =
      assemble_from_shards(shards, t.type(), Mesh({{"data", 4}}), PartitionSpec({"data"}));
  EXPECT_FALSE(all_close(wrong, t, kShardedTol));
}

TEST_P(PjrtSpmdForm, EncoderLayerEverySharding) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (describe_plugin(testing::test_plugin()).devices.size() < 4)
    GTEST_SKIP() << "needs a plugin with 4 devices";
  models::EncoderBlockConfig cfg;  // batch 2, seq 16, hidden 64, 4 heads, ffn 256
  cfg.batch = 4;
  Graph g = models::build_encoder_block(cfg);
  TensorMap feeds = models::encoder_block_feeds(g, 11);
  std::vector<Tensor> want = run_on(*testing::test_backend(), g, feeds);
  std::string y = output_name(g);
  // Megatron-style model sharding: q/k/v and ffn.in split by columns (heads / ffn units),
  // attention.out and ffn.out by rows.
  std::map<std::string, PartitionSpec> megatron = {
      {"attention.q.weight", PartitionSpec({"", "model"})},
      {"attention.q.bias", PartitionSpec({"model"})},
      {"attention.k.weight", PartitionSpec({"", "model"})},
      {"attention.k.bias", PartitionSpec({"model"})},
      {"attention.v.weight", PartitionSpec({"", "model"})},
      {"attention.v.bias", PartitionSpec({"model"})},
      {"attention.out.weight", PartitionSpec({"model", ""})},
      {"ffn.in.weight", PartitionSpec({"", "model"})},
      {"ffn.in.bias", PartitionSpec({"model"})},
      {"ffn.out.weight", PartitionSpec({"model", ""})}};
  std::vector<Case> cases = {
      {"replicated", {Mesh({{"data", 4}}), {}, {}, {}}},
      {"batch",
       {Mesh({{"data", 4}}), {{"x", PartitionSpec({"data"})}}, {}, {{y, PartitionSpec({"data"})}}}},
      {"model", {Mesh({{"model", 4}}), {}, megatron, {}}},
      {"mixed_2x2",
       {kMesh2x2, {{"x", PartitionSpec({"data"})}}, megatron, {{y, PartitionSpec({"data"})}}}},
      {"sequence",
       {Mesh({{"seq", 4}}),
        {{"x", PartitionSpec({"", "seq"})}},
        {},
        {{y, PartitionSpec({"", "seq"})}}}},
  };
  for (const Case& c : cases) {
    auto backend = make_pjrt_spmd_backend(in_form(c.config), testing::test_plugin());
    std::string program;
    std::vector<Tensor> got = run_on(*backend, g, feeds, &program);
    expect_form(program);
    double err = 0;
    EXPECT_TRUE(all_close(got[0], want[0], testing::kF32LayerTol, &err)) << c.name;
    std::cout << "[ encoder " << sharding_form_name(GetParam()) << " ] " << c.name
              << " max |err| = " << err << "\n";
  }
}

// RLX_PJRT_CPU_DEVICE_COUNT=8 gives the XLA CPU plugin 8 devices: the MLP and the encoder
// layer on a 2x4 mesh (batch over "data", Megatron params over "model") equal one device.
TEST(PjrtSpmd, EightCpuDevicesWhenConfigured) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (describe_plugin(testing::test_plugin()).platform != "cpu")
    GTEST_SKIP() << "RLX_PJRT_CPU_DEVICE_COUNT is an XLA CPU plugin option";
  ::rlx::testing::ScopedEnv env;  // restores the variable
  env.set("RLX_PJRT_CPU_DEVICE_COUNT", "8");
  ASSERT_EQ(describe_plugin(testing::test_plugin()).devices.size(), 8u);
  Mesh mesh({{"data", 2}, {"model", 4}});
  Graph g = mlp();
  TensorMap feeds = random_feeds(g, 4);
  std::vector<Tensor> want = run_on(*testing::test_backend(), g, feeds);
  ShardingConfig c{mesh,
                   {{"x", PartitionSpec({"data"})}},
                   {{"w1", PartitionSpec({"", "model"})},
                    {"b1", PartitionSpec({"model"})},
                    {"w2", PartitionSpec({"model", ""})}},
                   {{output_name(g), PartitionSpec({"data"})}}};
  double err = 0;
  EXPECT_TRUE(all_close(run_on(*make_pjrt_spmd_backend(c, testing::test_plugin()), g, feeds)[0],
                        want[0], kShardedTol, &err));
  std::cout << "[ mlp ] 2x4 on 8 devices max |err| = " << err << "\n";
  models::EncoderBlockConfig cfg;
  Graph enc = models::build_encoder_block(cfg);  // batch 2, 4 heads, ffn 256
  TensorMap enc_feeds = models::encoder_block_feeds(enc, 12);
  std::vector<Tensor> enc_want = run_on(*testing::test_backend(), enc, enc_feeds);
  ShardingConfig ce{mesh,
                    {{"x", PartitionSpec({"data"})}},
                    {{"attention.q.weight", PartitionSpec({"", "model"})},
                     {"attention.k.weight", PartitionSpec({"", "model"})},
                     {"attention.v.weight", PartitionSpec({"", "model"})},
                     {"attention.out.weight", PartitionSpec({"model", ""})},
                     {"ffn.in.weight", PartitionSpec({"", "model"})},
                     {"ffn.out.weight", PartitionSpec({"model", ""})}},
                    {{output_name(enc), PartitionSpec({"data"})}}};
  EXPECT_TRUE(
      all_close(run_on(*make_pjrt_spmd_backend(ce, testing::test_plugin()), enc, enc_feeds)[0],
                enc_want[0], testing::kF32LayerTol, &err));
  std::cout << "[ encoder ] 2x4 on 8 devices max |err| = " << err << "\n";
}

TEST(PjrtSpmd, ParamsArePlacedOnceAndClonesShareThem) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (describe_plugin(testing::test_plugin()).devices.size() < 4)
    GTEST_SKIP() << "needs a plugin with 4 devices";
  Graph g = mlp();
  TensorMap feeds = random_feeds(g, 5);
  std::vector<Tensor> want = run_on(*testing::test_backend(), g, feeds);
  auto backend = make_pjrt_spmd_backend(mlp_cases(g)[3].config, testing::test_plugin());
  std::unique_ptr<Executable> exe = backend->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
  for (int32_t id : g.params()) exe->set_param(g.node(id).name, feeds.at(g.node(id).name));
  std::unique_ptr<Executable> twin = exe->clone();
  for (int i = 0; i < 3; ++i) {  // the params stay on the devices between runs
    EXPECT_TRUE(all_close(exe->run({{"x", feeds.at("x")}})[0], want[0], kShardedTol));
    EXPECT_TRUE(all_close(twin->run({{"x", feeds.at("x")}})[0], want[0], kShardedTol));
  }
  EXPECT_NE(exe->kernels().program.find("mhlo.num_partitions = 4"), std::string::npos);
}

// Replicated data parallelism: the per-replica MLP (batch 2) on 4 replicas equals the batch-8
// MLP on one device; the module carries mhlo.num_replicas = 4 and no shardings.
TEST(PjrtSpmd, ReplicatedDataParallelMlp) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (describe_plugin(testing::test_plugin()).devices.size() < 4)
    GTEST_SKIP() << "needs a plugin with 4 devices";
  Graph full = mlp();
  TensorMap feeds = random_feeds(full, 9);
  std::vector<Tensor> want = run_on(*testing::test_backend(), full, feeds);
  Graph one("mlp");  // one replica's program: batch 2
  Value x = one.input("x", DType::f32, Shape{2, 16});
  Value w1 = one.param("w1", DType::f32, Shape{16, 32});
  Value b1 = one.param("b1", DType::f32, Shape{32});
  Value w2 = one.param("w2", DType::f32, Shape{32, 4});
  Value b2 = one.param("b2", DType::f32, Shape{4});
  one.set_outputs({one.add(one.matmul(one.relu(one.add(one.matmul(x, w1), b1)), w2), b2)});
  // Replicas on the devices in another order than the batch rows.
  auto backend = make_pjrt_replicated_backend({2, 0, 3, 1}, testing::test_plugin());
  std::unique_ptr<Executable> exe =
      backend->compile(one, f32_options(), Device{DeviceKind::Pjrt, 0});
  EXPECT_EQ(exe->inputs()[0].type.shape, (Shape{8, 16}));
  EXPECT_EQ(exe->outputs()[0].type.shape, (Shape{8, 4}));
  const std::string& program = exe->kernels().program;
  EXPECT_NE(program.find("attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : "
                         "i32}"),
            std::string::npos)
      << program;
  EXPECT_EQ(program.find("mhlo.sharding"), std::string::npos) << program;
  EXPECT_EQ(program.find("sdy."), std::string::npos) << program;
  for (int32_t id : one.params()) exe->set_param(one.node(id).name, feeds.at(one.node(id).name));
  std::vector<Tensor> got = exe->run({{"x", feeds.at("x")}});
  EXPECT_TRUE(all_close(got[0], want[0], kShardedTol));
  EXPECT_EQ(error_of([&] {
              make_pjrt_replicated_backend({0, 0});
            }),
            "Mesh: device pjrt:0 appears twice");
}

// ---- Golden SPMD module and errors

TEST(PjrtSpmd, GoldenModuleCarriesTheShardings) {
  Graph g("dense");
  Value x = g.input("x", DType::f32, Shape{8, 16});
  g.set_outputs({g.matmul(x, g.param("w", DType::f32, Shape{16, 4}))});
  ShardingConfig c{kMesh2x2,
                   {{"x", PartitionSpec({"data"})}},
                   {{"w", PartitionSpec({"", "model"})}},
                   {{output_name(g), PartitionSpec({"data", "model"})}},
                   ShardingForm::Gspmd};
  std::string got = lower_to_stablehlo_sharded(g, c, f32_options());
  const char* want =
      R"(module @dense attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}, %arg1: tensor<16x4xf32> {mhlo.sharding = "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"}) -> (tensor<8x4xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}) {
    %0 = "stablehlo.dot_general"(%arg0, %arg1) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
)";
  if (std::getenv("RLX_PRINT_GOLDEN") != nullptr) std::cout << got;
  EXPECT_EQ(got, want);
  // The Shardy form, as jax 0.4.38 writes it with jax_use_shardy_partitioner (less its
  // jax.result_info).
  c.form = ShardingForm::Shardy;
  std::string shardy = lower_to_stablehlo_sharded(g, c, f32_options());
  const char* want_shardy =
      R"(module @dense attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=2, "model"=2]>
  func.func public @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg1: tensor<16x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}) -> (tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {"model"}]>}) {
    %0 = "stablehlo.dot_general"(%arg0, %arg1) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
)";
  if (std::getenv("RLX_PRINT_GOLDEN") != nullptr) std::cout << shardy;
  EXPECT_EQ(shardy, want_shardy);
  // Nothing named: every argument and result replicated.
  std::string replicated =
      lower_to_stablehlo_sharded(g, ShardingConfig{kMesh2x2, {}, {}, {}, ShardingForm::Gspmd});
  EXPECT_NE(replicated.find("%arg0: tensor<8x16xf32> {mhlo.sharding = \"{replicated}\"}"),
            std::string::npos)
      << replicated;
  replicated =
      lower_to_stablehlo_sharded(g, ShardingConfig{kMesh2x2, {}, {}, {}, ShardingForm::Shardy});
  EXPECT_NE(replicated.find("%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, "
                            "{}]>}"),
            std::string::npos)
      << replicated;
}

// The @main signature of a module (its line), where the shardings are.
std::string main_signature(const std::string& module) {
  size_t at = module.find("  func.func public @main(");
  return module.substr(at, module.find('\n', at) - at);
}

// Golden signatures of the MLP's mixed 2x2 sharding and of the encoder layer's megatron
// params (all four dims of the 2x2 mesh named once per tensor).
TEST(PjrtSpmd, GoldenSignaturesOfTheMlpAndEncoder) {
  Graph g = mlp();
  ShardingConfig mixed = mlp_cases(g)[3].config;
  mixed.form = ShardingForm::Gspmd;
  std::string mlp_sig = main_signature(lower_to_stablehlo_sharded(g, mixed, f32_options()));
  EXPECT_EQ(mlp_sig,
            "  func.func public @main("
            "%arg0: tensor<8x16xf32> {mhlo.sharding = \"{devices=[2,1,2]<=[4] "
            "last_tile_dim_replicate}\"}, "
            "%arg1: tensor<16x32xf32> {mhlo.sharding = \"{devices=[1,2,2]0,2,1,3 "
            "last_tile_dim_replicate}\"}, "
            "%arg2: tensor<32xf32> {mhlo.sharding = \"{devices=[2,2]0,2,1,3 "
            "last_tile_dim_replicate}\"}, "
            "%arg3: tensor<32x4xf32> {mhlo.sharding = \"{devices=[2,1,2]0,2,1,3 "
            "last_tile_dim_replicate}\"}, "
            "%arg4: tensor<4xf32> {mhlo.sharding = \"{replicated}\"}) -> "
            "(tensor<8x4xf32> {mhlo.sharding = \"{devices=[2,1,2]<=[4] "
            "last_tile_dim_replicate}\"}) {");
  mixed.form = ShardingForm::Shardy;
  EXPECT_EQ(main_signature(lower_to_stablehlo_sharded(g, mixed, f32_options())),
            "  func.func public @main("
            "%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"data\"}, {}]>}, "
            "%arg1: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {\"model\"}]>}, "
            "%arg2: tensor<32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"model\"}]>}, "
            "%arg3: tensor<32x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"model\"}, {}]>}, "
            "%arg4: tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}) -> "
            "(tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"data\"}, {}]>}) {");
  models::EncoderBlockConfig cfg;
  Graph enc = models::build_encoder_block(cfg);
  ShardingConfig c{Mesh({{"model", 4}}),
                   {},
                   {{"attention.q.weight", PartitionSpec({"", "model"})},
                    {"ffn.out.weight", PartitionSpec({"model", ""})}},
                   {},
                   ShardingForm::Gspmd};
  std::string sig = main_signature(lower_to_stablehlo_sharded(enc, c, f32_options()));
  EXPECT_NE(sig.find("tensor<2x16x64xf32> {mhlo.sharding = \"{replicated}\"}"), std::string::npos)
      << sig;
  EXPECT_NE(sig.find("tensor<64x64xf32> {mhlo.sharding = \"{devices=[1,4]<=[4]}\"}"),
            std::string::npos)
      << sig;
  EXPECT_NE(sig.find("tensor<256x64xf32> {mhlo.sharding = \"{devices=[4,1]<=[4]}\"}"),
            std::string::npos)
      << sig;
  EXPECT_NE(sig.find("-> (tensor<2x16x64xf32> {mhlo.sharding = \"{replicated}\"})"),
            std::string::npos)
      << sig;
}

TEST(PjrtSpmd, BadShardingsAreClearErrors) {
  Graph g = mlp();
  auto lower = [&](ShardingConfig c) { return lower_to_stablehlo_sharded(g, c, f32_options()); };
  EXPECT_EQ(error_of([&] {
              lower({kMesh2x2, {{"z", PartitionSpec({"data"})}}, {}, {}});
            }),
            "sharding: the graph has no input 'z' (inputs: 'x')");
  EXPECT_EQ(error_of([&] {
              lower({kMesh2x2, {}, {{"w3", PartitionSpec()}}, {}});
            }),
            "sharding: the graph has no param 'w3' (params: 'w1', 'b1', 'w2', 'b2')");
  EXPECT_EQ(error_of([&] {
              lower({kMesh2x2, {{"w1", PartitionSpec({"data"})}}, {}, {}});
            }),
            "sharding: the graph has no input 'w1' (inputs: 'x'); 'w1' is a param: shard it "
            "through the params' shardings");
  EXPECT_EQ(error_of([&] {
              lower({kMesh2x2, {}, {{"x", PartitionSpec({"data"})}}, {}});
            }),
            "sharding: the graph has no param 'x' (params: 'w1', 'b1', 'w2', 'b2'); 'x' is an "
            "input: shard it through the inputs' shardings");
  EXPECT_EQ(error_of([&] {
              lower({kMesh2x2, {}, {{"w1", PartitionSpec({"", "batch"})}}, {}});
            }),
            "sharding of param 'w1' [16,32] with P(None, 'batch') on Mesh('data': 2, 'model': 2): "
            "unknown mesh axis 'batch' (axes: 'data', 'model')");
  EXPECT_EQ(error_of([&] {
              lower({Mesh({{"data", 3}}, {0, 1, 2}), {{"x", PartitionSpec({"data"})}}, {}, {}});
            }),
            "sharding of input 'x' [8,16] with P('data') on Mesh('data': 3): dim 0 of size 8 is "
            "not divisible by 3 ('data')");
  EXPECT_EQ(error_of([&] {
              lower({kMesh2x2, {}, {{"w1", PartitionSpec({"model", "model"})}}, {}});
            }),
            "sharding of param 'w1' [16,32] with P('model', 'model') on Mesh('data': 2, "
            "'model': 2): mesh axis 'model' is used twice");
  if (testing::test_plugin().empty()) return;
  auto backend = make_pjrt_spmd_backend({Mesh({{"data", 8}}), {}, {}, {}}, testing::test_plugin());
  std::string msg = error_of([&] {
    backend->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
  });
  EXPECT_NE(msg.find("the mesh uses device pjrt:"), std::string::npos) << msg;
}

}  // namespace
}  // namespace rlx::pjrt
