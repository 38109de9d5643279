// State on a device mesh (CompileOptions::state with an SPMD backend) and train::Trainer on a
// mesh: data-parallel, model-sharded and mixed AdamW training against one device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <random>

#include "common/scoped_env.h"
#include "pjrt_client.h"
#include "pjrt_test_util.h"
#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/backends/pjrt/sharding.h"
#include "rlx/ir/error.h"
#include "rlx/train/init.h"
#include "rlx/train/loss.h"
#include "rlx/train/trainer.h"

namespace rlx::pjrt {
namespace {

using rlx::testing::ScopedEnv;
using testing::all_close;
using testing::f32_options;
using testing::Tolerance;

bool have_devices(size_t n) {
  return !testing::test_plugin().empty() &&
         describe_plugin(testing::test_plugin()).devices.size() >= n;
}

// acc <- acc + x (f32[4,8], sharded by `spec`), n <- n + 1 (f32[], replicated); returns acc * 2.
Graph accumulator() {
  Graph g("accumulate");
  Value acc = g.input("acc", DType::f32, {4, 8});
  Value n = g.input("n", DType::f32, {});
  Value x = g.input("x", DType::f32, {4, 8});
  Value next = g.add(acc, x);
  g.set_outputs(
      {g.mul(next, g.scalar(2.0, DType::f32)), next, g.add(n, g.scalar(1.0, DType::f32))});
  return g;
}

Tensor iota_f32(Shape shape, double scale) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data_as<float>()[i] = static_cast<float>(scale * (i + 1));
  return t;
}

// The mesh runs below are repeated in both sharding forms (ShardingConfig::form, or
// RLX_PJRT_SHARDING for the Trainer, which leaves the form to Auto).
class PjrtMeshForm : public ::testing::TestWithParam<ShardingForm> {
 protected:
  bool shardy() const { return GetParam() == ShardingForm::Shardy; }
  // What the kernel report says of this form.
  std::string form_note() const {
    return shardy() ? "shardings in Shardy form" : "shardings in GSPMD form";
  }
};
INSTANTIATE_TEST_SUITE_P(Forms, PjrtMeshForm,
                         ::testing::Values(ShardingForm::Gspmd, ShardingForm::Shardy),
                         [](const ::testing::TestParamInfo<ShardingForm>& info) {
                           return std::string(sharding_form_name(info.param));
                         });

TEST_P(PjrtMeshForm, AccumulatorOn2x2EqualsOneDevice) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (!have_devices(4)) GTEST_SKIP() << "needs a plugin with 4 devices";
  Graph g = accumulator();
  CompileOptions o = f32_options();
  const std::string acc_out = g.node(g.outputs()[1]).name, n_out = g.node(g.outputs()[2]).name;
  o.state = {{"acc", acc_out}, {"n", n_out}};
  auto single = testing::test_backend()->compile(g, o, Device::parse("pjrt:0"));
  Mesh mesh({{"data", 2}, {"model", 2}});
  for (const PartitionSpec& spec :
       {PartitionSpec({"data", "model"}), PartitionSpec({"", "model"}), PartitionSpec()}) {
    ShardingConfig config{
        mesh, {{"acc", spec}, {"x", PartitionSpec({"data", ""})}}, {}, {}, GetParam()};
    auto sharded = make_pjrt_spmd_backend(config, testing::test_plugin())
                       ->compile(g, o, Device::parse("pjrt:0"));
    ASSERT_EQ(sharded->state().size(), 2u);
    EXPECT_NE(sharded->kernels().program.find(form_note()), std::string::npos);
    // The state argument is donated to (aliased with) its bound output, with its sharding.
    EXPECT_NE(sharded->kernels().program.find("tf.aliasing_output = 1 : i32"), std::string::npos);
    single->reset_state();
    single->set_state("acc", iota_f32({4, 8}, 0.5));
    sharded->set_state("acc", iota_f32({4, 8}, 0.5));
    for (int run = 0; run < 3; ++run) {
      Tensor x = iota_f32({4, 8}, run + 1.0);
      std::vector<Tensor> want = single->run({{"x", x}}), got = sharded->run({{"x", x}});
      ASSERT_EQ(got.size(), 1u);
      EXPECT_TRUE(all_close(got[0], want[0], {0, 0})) << spec.to_string() << " run " << run;
    }
    EXPECT_TRUE(all_close(sharded->get_state("acc"), single->get_state("acc"), {0, 0}))
        << spec.to_string();
    EXPECT_EQ(sharded->get_state("n").get_f64(0), 3.0);
    // A clone owns a copy of the state; reset gives zeros again.
    auto clone = sharded->clone();
    clone->run({{"x", iota_f32({4, 8}, 1.0)}});
    EXPECT_EQ(clone->get_state("n").get_f64(0), 4.0);
    EXPECT_EQ(sharded->get_state("n").get_f64(0), 3.0);
    sharded->reset_state();
    EXPECT_EQ(sharded->get_state("acc").get_f64(5), 0.0);
    sharded->run({{"x", iota_f32({4, 8}, 1.0)}});
    EXPECT_TRUE(all_close(sharded->get_state("acc"), iota_f32({4, 8}, 1.0), {0, 0}));
  }
}

// Each device's state shard is donated: the module gives the state argument its sharding and
// the alias, and the plugin deletes every input shard buffer of the run.
TEST_P(PjrtMeshForm, StateShardsAreDonatedPerDevice) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (!have_devices(4)) GTEST_SKIP() << "needs a plugin with 4 devices";
  Graph g = accumulator();
  CompileOptions o = f32_options();
  o.state = {{"acc", g.node(g.outputs()[1]).name}};
  Mesh mesh({{"data", 2}, {"model", 2}});
  ShardingConfig config{
      mesh,
      {{"acc", PartitionSpec({"data", "model"})}, {"x", PartitionSpec({"data", "model"})}},
      {},
      {},
      GetParam()};
  const std::string module = lower_to_stablehlo_sharded(g, config, o);
  EXPECT_NE(module.find(shardy() ? "%arg0: tensor<4x8xf32> {tf.aliasing_output = 1 : i32, "
                                   "sdy.sharding = #sdy.sharding<@mesh, [{\"data\"}, {\"model\"}]>}"
                                 : "%arg0: tensor<4x8xf32> {tf.aliasing_output = 1 : i32, "
                                   "mhlo.sharding = \"{devices=[2,2]<=[4]}\"}"),
            std::string::npos)
      << module;
  // The plugin honours it: run the module by hand and look at the argument buffers.
  auto client = std::make_shared<Client>(Plugin::load(testing::test_plugin()));
  std::vector<int64_t> ids;
  for (size_t d = 0; d < 4; ++d) ids.push_back(client->describe_device(d).id);
  LoadedProgram program(client, module, spmd_compile_options(ids, shardy()));
  std::vector<capi::PJRT_Device*> devices = program.addressable_devices();
  ASSERT_EQ(devices.size(), 4u);
  std::vector<std::unique_ptr<DeviceBuffer>> acc, n, x;
  std::vector<std::vector<capi::PJRT_Buffer*>> args(4);
  for (size_t d = 0; d < 4; ++d) {
    acc.push_back(client->upload(Tensor::full(DType::f32, Shape{2, 4}, 1.0), devices[d]));
    n.push_back(client->upload(Tensor::full(DType::f32, Shape{}, 0.0), devices[d]));
    x.push_back(client->upload(Tensor::full(DType::f32, Shape{2, 4}, 2.0), devices[d]));
    args[d] = {acc[d]->raw(), n[d]->raw(), x[d]->raw()};
  }
  auto outs = program.execute_all(args, 3);
  for (size_t d = 0; d < 4; ++d) {
    EXPECT_TRUE(acc[d]->is_deleted()) << "device slot " << d << " kept its donated state shard";
    EXPECT_FALSE(x[d]->is_deleted()) << d;
    Tensor next(DType::f32, Shape{2, 4});
    outs[d][1]->download(next);
    EXPECT_EQ(next.get_f64(0), 3.0);
  }
}

TEST(PjrtMeshState, StateOutputShardedOtherwiseIsAnError) {
  Graph g = accumulator();
  CompileOptions o = f32_options();
  const std::string acc_out = g.node(g.outputs()[1]).name;
  o.state = {{"acc", acc_out}};
  Mesh mesh({{"data", 2}, {"model", 2}});
  ShardingConfig config{
      mesh, {{"acc", PartitionSpec({"data"})}}, {}, {{acc_out, PartitionSpec({"", "model"})}}};
  try {
    lower_to_stablehlo_sharded(g, config, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("state 'acc' is P('data') but its output"),
              std::string::npos)
        << e.what();
  }
}

// ---- Trainer on a mesh: a 2-layer MLP [16,16] -> 32 -> 4 with softmax cross-entropy.

constexpr int64_t kBatch = 16, kIn = 16, kHidden = 32, kClasses = 4;

Graph mlp_loss() {
  Graph g("mlp_loss");
  Value x = g.input("x", DType::f32, {kBatch, kIn});
  Value y = g.input("labels", DType::i32, {kBatch});
  Value w1 = g.param("w1", DType::f32, {kIn, kHidden});
  Value b1 = g.param("b1", DType::f32, {kHidden});
  Value w2 = g.param("w2", DType::f32, {kHidden, kClasses});
  Value b2 = g.param("b2", DType::f32, {kClasses});
  Value h = g.relu(g.add(g.matmul(x, w1), b1));
  g.set_outputs({train::softmax_cross_entropy_loss(g, g.add(g.matmul(h, w2), b2), y)});
  return g;
}

TensorMap mlp_init() {
  train::Rng rng(7);
  using train::Init;
  return {{"w1", train::initialize(Init::HeUniform, DType::f32, {kIn, kHidden}, rng)},
          {"b1", iota_f32({kHidden}, 0.003)},
          {"w2", train::initialize(Init::HeUniform, DType::f32, {kHidden, kClasses}, rng)},
          {"b2", train::initialize(Init::Zeros, DType::f32, {kClasses}, rng)}};
}

// A fixed set of batches: x ~ U(-1, 1), labels = argmax of a fixed linear map (learnable).
std::vector<TensorMap> batches(int count) {
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<TensorMap> out;
  for (int b = 0; b < count; ++b) {
    Tensor x(DType::f32, {kBatch, kIn}), y(DType::i32, {kBatch});
    for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = u(gen);
    for (int64_t r = 0; r < kBatch; ++r) {
      int best = 0;
      float best_v = -1e9f;
      for (int c = 0; c < kClasses; ++c) {
        float v = 0;
        for (int64_t k = 0; k < kIn; ++k)
          v += x.data_as<float>()[r * kIn + k] * static_cast<float>(((k * 7 + c * 3) % 5) - 2);
        if (v > best_v) best_v = v, best = c;
      }
      y.data_as<int32_t>()[r] = best;
    }
    out.push_back({{"x", x}, {"labels", y}});
  }
  return out;
}

const std::vector<std::string> kWrt = {"w1", "b1", "w2", "b2"};

struct TrainRun {
  std::vector<double> losses;
  TensorMap params;
  TensorMap m;  // AdamW's first moments
};

TrainRun train_steps(train::Trainer& t, int steps) {
  std::vector<TensorMap> data = batches(8);
  TrainRun r;
  for (int s = 0; s < steps; ++s)
    r.losses.push_back(t.step(data[static_cast<size_t>(s % 8)], 1e-2)[0].get_f64(0));
  r.params = t.params();
  for (const auto& w : kWrt) r.m[w] = t.state(w, "m");
  return r;
}

TrainRun single_device(int steps, bool resident = true) {
  if (const char* env = std::getenv("RLX_PJRT_PLUGIN"); env == nullptr || *env == '\0')
    setenv("RLX_PJRT_PLUGIN", testing::test_plugin().c_str(), 1);
  Session session(Device::parse("pjrt:0"));
  train::TrainerOptions o{f32_options(), resident};
  train::Trainer t(session, mlp_loss(), kWrt, train::AdamW(), mlp_init(), o);
  return train_steps(t, steps);
}

// `form_note`: what the step's kernel report must say of its sharding form ("": not checked).
TrainRun on_mesh(const train::MeshTraining& mesh, int steps, bool resident = true,
                 const std::string& form_note = "") {
  train::Trainer t(mesh, mlp_loss(), kWrt, train::AdamW(), mlp_init(),
                   train::TrainerOptions{f32_options(), resident});
  EXPECT_EQ(t.resident(), resident);
  EXPECT_NE(t.executable().kernels().program.find(form_note), std::string::npos) << form_note;
  return train_steps(t, steps);
}

// Largest |a - b| over the losses, params and first moments; fails above `tol`.
void expect_same_run(const TrainRun& got, const TrainRun& want, Tolerance tol,
                     const std::string& what) {
  double worst = 0;
  for (size_t s = 0; s < want.losses.size(); ++s) {
    double d = std::fabs(got.losses[s] - want.losses[s]);
    EXPECT_LE(d, tol.atol + tol.rtol * std::fabs(want.losses[s])) << what << " step " << s;
    worst = std::max(worst, d);
  }
  for (const auto& [name, w] : want.params) {
    double err = 0;
    EXPECT_TRUE(all_close(got.params.at(name), w, tol, &err)) << what << " param " << name;
    worst = std::max(worst, err);
  }
  for (const auto& [name, m] : want.m) {
    double err = 0;
    EXPECT_TRUE(all_close(got.m.at(name), m, tol, &err)) << what << " m of " << name;
    worst = std::max(worst, err);
  }
  std::cout << "[ mesh train ] " << what << ": max |diff| = " << worst << " (loss "
            << want.losses.front() << " -> " << want.losses.back() << ")\n";
}

// Data parallelism reassociates the batch mean of the gradients (per-device partial sums,
// then XLA's all-reduce); AdamW divides by sqrt(v), so a gradient component near zero can
// move an update by a sizeable fraction of lr. Measured: at most 2.4e-7 (docs/training.md).
constexpr Tolerance kDataParallelTol{2e-5, 2e-5};

TEST_P(PjrtMeshForm, DataParallel200AdamWStepsEqualOneDevice) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (!have_devices(4)) GTEST_SKIP() << "needs a plugin with 4 devices";
  ScopedEnv env;
  env.set("RLX_PJRT_SHARDING", sharding_form_name(GetParam()));
  TrainRun want = single_device(200);
  EXPECT_LT(want.losses.back(), 0.5 * want.losses.front());  // it learns
  train::MeshTraining dp{Mesh({{"data", 4}}),
                         {{"x", PartitionSpec({"data"})}, {"labels", PartitionSpec({"data"})}},
                         {},
                         testing::test_plugin()};
  expect_same_run(on_mesh(dp, 200, true, form_note()), want, kDataParallelTol,
                  "data parallel 4, 200 steps");
}

TEST_P(PjrtMeshForm, ModelShardedAndMixedEqualOneDevice) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (!have_devices(4)) GTEST_SKIP() << "needs a plugin with 4 devices";
  ScopedEnv env;
  env.set("RLX_PJRT_SHARDING", sharding_form_name(GetParam()));
  constexpr int kSteps = 40;
  TrainRun want = single_device(kSteps);
  // FSDP-style: every weight split along the model axis (its optimizer state too): XLA
  // all-gathers them for the forward and reduce-scatters the gradients.
  std::map<std::string, PartitionSpec> fsdp = {{"w1", PartitionSpec({"model"})},
                                               {"b1", PartitionSpec({"model"})},
                                               {"w2", PartitionSpec({"model"})}};
  // Megatron-style: w1 by columns, w2 by rows.
  std::map<std::string, PartitionSpec> megatron = {{"w1", PartitionSpec({"", "model"})},
                                                   {"b1", PartitionSpec({"model"})},
                                                   {"w2", PartitionSpec({"model", ""})}};
  std::map<std::string, PartitionSpec> batch = {{"x", PartitionSpec({"data"})},
                                                {"labels", PartitionSpec({"data"})}};
  const std::string note = form_note();
  expect_same_run(
      on_mesh({Mesh({{"model", 4}}), {}, fsdp, testing::test_plugin()}, kSteps, true, note), want,
      kDataParallelTol, "fsdp model 4");
  expect_same_run(
      on_mesh({Mesh({{"model", 4}}), {}, megatron, testing::test_plugin()}, kSteps, true, note),
      want, kDataParallelTol, "megatron model 4");
  expect_same_run(on_mesh({Mesh({{"data", 2}, {"model", 2}}), batch, fsdp, testing::test_plugin()},
                          kSteps, true, note),
                  want, kDataParallelTol, "mixed 2x2 (batch x fsdp)");
  // Host copies per step (the old way) on the mesh give the same run.
  expect_same_run(
      on_mesh({Mesh({{"data", 2}, {"model", 2}}), batch, megatron, testing::test_plugin()}, kSteps,
              /*resident=*/false, note),
      want, kDataParallelTol, "mixed 2x2 (batch x megatron), host state");
}

// 8 CPU devices (the plugin's cpu_device_count option): batch x FSDP on a 2x4 mesh.
TEST(PjrtMeshTrain, EightDevicesWhenConfigured) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (describe_plugin(testing::test_plugin()).platform != "cpu")
    GTEST_SKIP() << "RLX_PJRT_CPU_DEVICE_COUNT is an XLA CPU plugin option";
  constexpr int kSteps = 20;
  TrainRun want = single_device(kSteps);
  ::rlx::testing::ScopedEnv env;  // restores the variable
  env.set("RLX_PJRT_CPU_DEVICE_COUNT", "8");
  ASSERT_EQ(describe_plugin(testing::test_plugin()).devices.size(), 8u);
  std::map<std::string, PartitionSpec> fsdp = {{"w1", PartitionSpec({"model"})},
                                               {"b1", PartitionSpec({"model"})},
                                               {"w2", PartitionSpec({"model"})}};
  expect_same_run(on_mesh({Mesh({{"data", 2}, {"model", 4}}),
                           {{"x", PartitionSpec({"data"})}, {"labels", PartitionSpec({"data"})}},
                           fsdp,
                           testing::test_plugin()},
                          kSteps),
                  want, kDataParallelTol, "mixed 2x4 on 8 devices (batch x fsdp)");
}

TEST(PjrtMeshTrain, ResidentEqualsHostStateOnOneDevice) {
  RLX_REQUIRE_PJRT_PLUGIN();
  TrainRun host = single_device(20, /*resident=*/false), dev = single_device(20);
  expect_same_run(dev, host, {0, 0}, "pjrt:0 resident vs host");
}

// The comparison can fail: another learning rate on one device is caught.
TEST(PjrtMeshTrain, AnotherRunWouldBeCaught) {
  TrainRun a{{1.0}, {{"w", iota_f32({2}, 1.0)}}, {}}, b{{1.0}, {{"w", iota_f32({2}, 1.001)}}, {}};
  EXPECT_FALSE(all_close(a.params["w"], b.params["w"], kDataParallelTol));
}

TEST(PjrtMeshTrain, BatchNotDivisibleNamesInputShapeAndMesh) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (!have_devices(4)) GTEST_SKIP() << "needs a plugin with 4 devices";
  Graph g("odd");
  Value x = g.input("x", DType::f32, {6, kIn});
  Value w = g.param("w", DType::f32, {kIn, 1});
  g.set_outputs({g.reduce_mean(g.matmul(x, w), {0, 1})});
  train::MeshTraining dp{
      Mesh({{"data", 4}}), {{"x", PartitionSpec({"data"})}}, {}, testing::test_plugin()};
  try {
    train::Trainer t(dp, g, {"w"}, train::Sgd(), {{"w", Tensor(DType::f32, Shape{kIn, 1})}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sharding of input 'x' [6,16] with P('data') on "
                                         "Mesh('data': 4): dim 0 of size 6 is not divisible by 4"),
              std::string::npos)
        << e.what();
  }
  train::MeshTraining bad{
      Mesh({{"data", 4}}), {}, {{"nope", PartitionSpec()}}, testing::test_plugin()};
  try {
    train::Trainer t(bad, g, {"w"}, train::Sgd(), {{"w", Tensor(DType::f32, Shape{kIn, 1})}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shards 'nope', which is neither a param nor a trained"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace rlx::pjrt
