// Trainer with params and optimizer state kept in the executable (TrainerOptions::resident)
// on the CPU backend: the same run as host state, state owned per Trainer, errors.
#include <gtest/gtest.h>

#include "rlx/ir/error.h"
#include "rlx/runtime/session.h"
#include "rlx/train/init.h"
#include "rlx/train/loss.h"
#include "rlx/train/optimizer.h"
#include "rlx/train/trainer.h"
#include "train_test_util.h"

namespace rlx::train {
namespace {

using testing::expect_error;

// x [8,6] -> relu(x w1 + b1) [8,10] -> w2 [10,3]; b1 is not trained (a plain param), "scale" an
// input trained as a leaf.
Graph mlp() {
  Graph g("mlp");
  Value x = g.input("x", DType::f32, {8, 6});
  Value y = g.input("labels", DType::i32, {8});
  Value w1 = g.param("w1", DType::f32, {6, 10});
  Value b1 = g.param("b1", DType::f32, {10});
  Value w2 = g.param("w2", DType::f32, {10, 3});
  Value scale = g.input("scale", DType::f32, {3});
  Value h = g.relu(g.add(g.matmul(x, w1), b1));
  g.set_outputs({softmax_cross_entropy_loss(g, g.mul(g.matmul(h, w2), scale), y)});
  return g;
}

TensorMap init() {
  Rng rng(1);
  return {{"w1", initialize(Init::HeUniform, DType::f32, {6, 10}, rng)},
          {"b1", Tensor::full(DType::f32, {10}, 0.1)},
          {"w2", initialize(Init::GlorotUniform, DType::f32, {10, 3}, rng)},
          {"scale", Tensor::full(DType::f32, {3}, 1.0)}};
}

TensorMap batch(int s) {
  Rng rng(100 + static_cast<uint64_t>(s));
  Tensor y(DType::i32, {8});
  for (int i = 0; i < 8; ++i) y.data_as<int32_t>()[i] = (i * 7 + s) % 3;
  return {{"x", initialize(Init::GlorotNormal, DType::f32, {8, 6}, rng)}, {"labels", y}};
}

const std::vector<std::string> kWrt = {"w1", "w2", "scale"};

TEST(ResidentTrainer, EqualsHostStateBitForBit) {
  Session session(Device::cpu());
  Trainer host(session, mlp(), kWrt, AdamW(), init());
  Trainer dev(session, mlp(), kWrt, AdamW(), init(), TrainerOptions{});
  EXPECT_FALSE(host.resident());
  EXPECT_TRUE(dev.resident());
  for (int s = 0; s < 30; ++s) {
    double a = host.step(batch(s), 1e-2)[0].get_f64(0);
    double b = dev.step(batch(s), 1e-2)[0].get_f64(0);
    ASSERT_EQ(a, b) << "step " << s;
  }
  for (const auto& [name, t] : host.params()) EXPECT_TRUE(dev.param(name).bitwise_equal(t)) << name;
  EXPECT_TRUE(dev.params().at("w2").bitwise_equal(host.param("w2")));
  for (const auto& w : kWrt)
    for (const char* slot : {"m", "v"})
      EXPECT_TRUE(dev.state(w, slot).bitwise_equal(host.state(w, slot))) << w << "." << slot;
  EXPECT_EQ(dev.num_steps(), 30);
}

TEST(ResidentTrainer, TwoTrainersOfOneSessionKeepTheirOwnState) {
  Session session(Device::cpu());
  Trainer a(session, mlp(), kWrt, Sgd(), init(), TrainerOptions{});
  Trainer b(session, mlp(), kWrt, Sgd(), init(), TrainerOptions{});
  a.step(batch(0), 0.5);
  EXPECT_FALSE(a.param("w1").bitwise_equal(b.param("w1")));
  EXPECT_TRUE(b.param("w1").bitwise_equal(init().at("w1")));
}

TEST(ResidentTrainer, Errors) {
  Session session(Device::cpu());
  TrainerOptions o;
  o.compile.state = {{"x", "whatever"}};
  expect_error([&] { Trainer(session, mlp(), kWrt, Sgd(), init(), o); },
               {"resident training binds its own state"});
  expect_error([&] { Trainer(session, mlp(), {"nope"}, Sgd(), init(), TrainerOptions{}); },
               {"no leaf 'nope'"});
  Trainer t(session, mlp(), kWrt, Sgd(), init(), TrainerOptions{});
  expect_error([&] { t.param("zz"); }, {"no param 'zz'"});
  expect_error([&] { t.state("w1", "m"); }, {"no state 'm' for 'w1'"});
}

}  // namespace
}  // namespace rlx::train
