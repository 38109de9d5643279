// Dropout (rlx/train/dropout.h): keep-rate statistics, inverted scaling, the mask as a function
// of (compile seed, step, stream), gradients (the mask times 1 / (1 - rate)), and dropout in a
// model trained with Trainer (a run replays under one seed, each step draws a fresh mask).
#include "rlx/train/dropout.h"

#include <gtest/gtest.h>

#include <cmath>

#include "rlx/autodiff/grad.h"
#include "rlx/ir/error.h"
#include "rlx/ir/random.h"
#include "rlx/runtime/session.h"
#include "rlx/train/init.h"
#include "rlx/train/loss.h"
#include "rlx/train/optimizer.h"
#include "rlx/train/trainer.h"
#include "train_test_util.h"

namespace rlx::train {
namespace {

using testing::expect_error;

// dropout(x, rate) of the step-t key (stream `stream`), compiled with `seed`.
Tensor dropped(const Tensor& x, double rate, float t, uint64_t seed = 0, int64_t stream = 0) {
  Graph g("drop");
  Value xv = g.input("x", x.dtype(), x.shape());
  g.set_outputs({dropout(g, xv, rate, step_key(g, stream))});
  CompileOptions o;
  o.seed = seed;
  Session session(Device::cpu());
  return session.compile(g, o)->run({{"x", x}, {kStepInput, Tensor::full(DType::f32, {}, t)}})[0];
}

TEST(Dropout, KeepRateAndInvertedScaling) {
  const Tensor x = Tensor::full(DType::f32, Shape{200, 100}, 1.0);
  for (double rate : {0.1, 0.5, 0.8}) {
    Tensor y = dropped(x, rate, 1);
    int64_t kept = 0;
    const auto scale = static_cast<float>(1.0 / (1.0 - rate));
    for (int64_t i = 0; i < y.numel(); ++i) {
      const float v = y.data_as<float>()[i];
      ASSERT_TRUE(v == 0.0f || v == scale) << "element " << i << " = " << v;
      kept += v != 0.0f;
    }
    // Binomial(20000, 1 - rate): 5 standard deviations.
    const double n = static_cast<double>(y.numel()), p = 1.0 - rate;
    EXPECT_NEAR(static_cast<double>(kept) / n, p, 5 * std::sqrt(p * (1 - p) / n)) << rate;
  }
  // rate 0 is the identity; f64 / bf16 activations keep their dtype.
  Tensor x16 = Tensor::full(DType::bf16, Shape{8}, 3.0);
  EXPECT_TRUE(dropped(x16, 0.0, 1).bitwise_equal(x16));
  EXPECT_EQ(dropped(Tensor::full(DType::f64, Shape{8}, 3.0), 0.5, 1).dtype(), DType::f64);
}

TEST(Dropout, MaskIsAFunctionOfSeedStepAndStream) {
  const Tensor x = Tensor::full(DType::f32, Shape{256}, 1.0);
  Tensor base = dropped(x, 0.5, 3, 11, 0);
  EXPECT_TRUE(dropped(x, 0.5, 3, 11, 0).bitwise_equal(base));
  EXPECT_FALSE(dropped(x, 0.5, 4, 11, 0).bitwise_equal(base));  // next step
  EXPECT_FALSE(dropped(x, 0.5, 3, 12, 0).bitwise_equal(base));  // another seed
  EXPECT_FALSE(dropped(x, 0.5, 3, 11, 1).bitwise_equal(base));  // another site
  // The mask is jax.random.bernoulli(key, 1 - rate) of that key: flax's Dropout.
  Graph g("mask");
  Value key = step_key(g, 0);
  g.set_outputs({random::bernoulli(g, key, 0.5, Shape{256})});
  CompileOptions o;
  o.seed = 11;
  Session session(Device::cpu());
  Tensor mask = session.compile(g, o)->run({{kStepInput, Tensor::full(DType::f32, {}, 3)}})[0];
  for (int64_t i = 0; i < 256; ++i) EXPECT_EQ(mask.get_i64(i) != 0, base.get_f64(i) != 0.0) << i;
}

// d/dx sum(dropout(x) * w) = mask * w / (1 - rate), with the forward pass's mask.
TEST(Dropout, GradientIsTheScaledMask) {
  const double rate = 0.25;
  Graph g("loss");
  Value x = g.input("x", DType::f32, Shape{64});
  Value w = g.input("w", DType::f32, Shape{64});
  Value d = dropout(g, x, rate, step_key(g, 2));
  g.set_outputs({g.reduce_sum(g.mul(d, w), {0}), d});
  Tensor xv(DType::f32, Shape{64}), wv(DType::f32, Shape{64});
  for (int64_t i = 0; i < 64; ++i) {
    xv.set_f64(i, 0.5 + 0.01 * static_cast<double>(i));
    wv.set_f64(i, std::sin(static_cast<double>(i)));
  }
  Session session(Device::cpu());
  auto exe = session.compile(autodiff::value_and_grad(g, {"x"}, 0));
  std::vector<Tensor> r =
      exe->run({{"x", xv}, {"w", wv}, {kStepInput, Tensor::full(DType::f32, {}, 7)}});
  int dropped_count = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const bool kept = r[1].get_f64(i) != 0.0;
    dropped_count += !kept;
    const float want =
        kept ? static_cast<float>(wv.get_f64(i)) / static_cast<float>(1 - rate) : 0.0f;
    EXPECT_FLOAT_EQ(static_cast<float>(r[2].get_f64(i)), want) << i;
  }
  EXPECT_GT(dropped_count, 4);  // the mask is not all ones
}

TEST(Dropout, Errors) {
  Graph g("bad");
  Value x = g.input("x", DType::f32, Shape{4});
  Value k = g.rng_key();
  expect_error([&] { dropout(g, x, 1.0, k); }, {"dropout: rate must be in [0, 1), got 1"});
  expect_error([&] { dropout(g, g.input("i", DType::i32, Shape{4}), 0.5, k); },
               {"dropout: x must be float, got i32[4]"});
  expect_error([&] { dropout(g, x, 0.5, g.input("k2", DType::i32, Shape{3})); },
               {"dropout: key must be i32[2], got i32[3]"});
  Graph h("taken");
  h.param(kStepInput, DType::f32, Shape{});
  expect_error([&] { step_key(h); }, {"step_key: graph 'taken' has a leaf 'train.step' that is "
                                      "not an f32[] input (it is param f32[])"});
}

// An MLP with dropout trained by Trainer: the loss graph reads train.step through step_key,
// Trainer feeds it; the same compile seed replays the losses, another seed changes them, and
// each step's mask differs from the last.
std::vector<std::vector<Tensor>> train(uint64_t seed, int steps) {
  Graph g("mlp");
  Value x = g.input("x", DType::f32, Shape{16, 8});
  Value y = g.input("labels", DType::i32, Shape{16});
  Value w1 = g.param("w1", DType::f32, Shape{8, 32});
  Value w2 = g.param("w2", DType::f32, Shape{32, 4});
  Value h = dropout(g, g.relu(g.matmul(x, w1)), 0.5, step_key(g));
  g.set_outputs({softmax_cross_entropy_loss(g, g.matmul(h, w2), y), h});
  Rng rng(3);
  TensorMap init{{"w1", initialize(Init::HeUniform, DType::f32, {8, 32}, rng)},
                 {"w2", initialize(Init::HeUniform, DType::f32, {32, 4}, rng)}};
  Tensor xb = initialize(Init::GlorotUniform, DType::f32, {16, 8}, rng);
  Tensor yb(DType::i32, Shape{16});
  for (int64_t i = 0; i < 16; ++i) yb.set_i64(i, i % 4);
  Session session(Device::cpu());
  CompileOptions o;
  o.seed = seed;
  Trainer t(session, g, {"w1", "w2"}, AdamW(), init, o);
  std::vector<std::vector<Tensor>> out;
  for (int s = 0; s < steps; ++s) out.push_back(t.step({{"x", xb}, {"labels", yb}}, 1e-2));
  return out;
}

TEST(Dropout, TrainerReplaysUnderOneSeed) {
  auto a = train(5, 3), b = train(5, 3), c = train(6, 3);
  for (int s = 0; s < 3; ++s) {
    EXPECT_TRUE(a[s][0].bitwise_equal(b[s][0])) << "step " << s;
    EXPECT_TRUE(a[s][1].bitwise_equal(b[s][1])) << "step " << s;
  }
  EXPECT_FALSE(a[0][1].bitwise_equal(c[0][1]));  // another seed, another mask
  // Step 2's mask is not step 1's: compare where the activations are zero.
  int differ = 0;
  for (int64_t i = 0; i < a[0][1].numel(); ++i)
    differ += (a[0][1].get_f64(i) == 0.0) != (a[1][1].get_f64(i) == 0.0);
  EXPECT_GT(differ, 50);
  EXPECT_TRUE(std::isfinite(a[2][0].get_f64(0)));
}

}  // namespace
}  // namespace rlx::train
