// SGD / AdamW updates run through the compiled train step, against PyTorch's optimizers
// (values from tests/train/gen_optimizer_refs.py) and against closed forms.
#include "rlx/train/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "rlx/ir/error.h"
#include "rlx/train/trainer.h"
#include "train_test_util.h"

namespace rlx::train {
namespace {

using testing::f32;
using testing::kTrainAtol;
using testing::kTrainRtol;

// loss(w) = sum(0.5 * a * w^2), a = [1, 2, 0.5]: gradient a * w (changes every step).
// `w` is a param, or with `w_is_input` a graph input (the Trainer feeds it each step).
Graph quadratic_loss(bool w_is_input = false) {
  Graph g("quadratic");
  Value w = w_is_input ? g.input("w", DType::f32, Shape{3}) : g.param("w", DType::f32, Shape{3});
  Value a = g.constant(f32(Shape{3}, {1.0, 2.0, 0.5}));
  g.set_outputs({g.reduce_sum(g.mul(g.scalar(0.5, DType::f32), g.mul(a, g.mul(w, w))), {0})});
  return g;
}

// Runs three steps with lr 0.1 and compares w after each with `expected`.
void expect_trajectory(const Optimizer& opt, const std::vector<std::vector<double>>& expected,
                       bool w_is_input = false) {
  Session session(Device::cpu());
  Trainer t(session, quadratic_loss(w_is_input), {"w"}, opt,
            {{"w", f32(Shape{3}, {0.5, -1.0, 2.0})}});
  for (size_t s = 0; s < expected.size(); ++s) {
    t.step({}, 0.1);
    EXPECT_TRUE(
        testing::all_close(t.param("w"), f32(Shape{3}, expected[s]), kTrainRtol, kTrainAtol))
        << opt.name() << " after step " << s + 1;
  }
  EXPECT_EQ(t.num_steps(), static_cast<int64_t>(expected.size()));
}

// torch.optim.AdamW(lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01).
TEST(Optimizer, AdamWMatchesPyTorch) {
  expect_trajectory(AdamW(AdamWOptions{0.9, 0.999, 1e-8, 0.01}),
                    {{0.399500002, -0.8990000005, 1.898000001},
                     {0.30029784133, -0.798519027169, 1.79627259016},
                     {0.203712386151, -0.698911183158, 1.69494451668}});
}

// torch.optim.SGD(lr=0.1, momentum=0.9).
TEST(Optimizer, SgdMomentumMatchesPyTorch) {
  expect_trajectory(Sgd(SgdOptions{0.9, false, 0.0}),
                    {{0.45, -0.8, 1.9}, {0.36, -0.46, 1.715}, {0.243, -0.062, 1.46275}});
}

// The same trajectory when the trained leaf is an input of the loss graph, not a param.
TEST(Optimizer, TrainedInputLeafMatchesPyTorch) {
  expect_trajectory(Sgd(SgdOptions{0.9, false, 0.0}),
                    {{0.45, -0.8, 1.9}, {0.36, -0.46, 1.715}, {0.243, -0.062, 1.46275}},
                    /*w_is_input=*/true);
}

// torch.optim.SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1).
TEST(Optimizer, SgdNesterovWeightDecayMatchesPyTorch) {
  expect_trajectory(Sgd(SgdOptions{0.9, true, 0.1}), {{0.3955, -0.601, 1.772},
                                                      {0.2682905, -0.191101, 1.472792},
                                                      {0.1368837355, 0.140468399, 1.131294512}});
}

// loss(w) = sum(c * w): a constant gradient c, for which both optimizers have closed forms.
Graph linear_loss(const std::vector<double>& c) {
  Graph g("linear");
  Value w = g.param("w", DType::f32, Shape{2});
  g.set_outputs({g.reduce_sum(g.mul(g.constant(f32(Shape{2}, c)), w), {0})});
  return g;
}

// With g constant, m_t = (1 - b1^t) g and v_t = (1 - b2^t) g^2, so bias correction gives
// m^ = g and v^ = g^2 exactly: every step is p -= lr (g / (|g| + eps) + wd p). A missing or
// wrong bias correction shows up at once (m_1 would be 0.1 g).
TEST(Optimizer, AdamWBiasCorrectionClosedForm) {
  const std::vector<double> c = {0.3, -2.0};
  const double lr = 0.05, wd = 0.1, eps = 1e-8;
  Session session(Device::cpu());
  AdamW opt(AdamWOptions{0.8, 0.99, eps, wd});
  Trainer t(session, linear_loss(c), {"w"}, opt, {{"w", f32(Shape{2}, {1.0, -1.0})}});
  std::vector<double> p = {1.0, -1.0};
  for (int s = 1; s <= 5; ++s) {
    t.step({}, lr);
    for (size_t i = 0; i < 2; ++i) p[i] -= lr * (c[i] / (std::fabs(c[i]) + eps) + wd * p[i]);
    EXPECT_TRUE(testing::all_close(t.param("w"), f32(Shape{2}, p), kTrainRtol, kTrainAtol))
        << "step " << s;
    // The raw moments are the uncorrected ones: m_t = (1 - 0.8^t) c.
    const double f = 1.0 - std::pow(0.8, s);
    EXPECT_TRUE(testing::all_close(t.state("w", "m"), f32(Shape{2}, {f * c[0], f * c[1]}),
                                   kTrainRtol, kTrainAtol));
  }
}

// Heavy-ball momentum with constant g: b_t = g (1 - mu^t) / (1 - mu), p_t = p_0 - lr sum b_k.
TEST(Optimizer, SgdMomentumClosedForm) {
  const std::vector<double> c = {1.0, -0.5};
  const double lr = 0.1, mu = 0.5;
  Session session(Device::cpu());
  Trainer t(session, linear_loss(c), {"w"}, Sgd(SgdOptions{mu, false, 0.0}),
            {{"w", f32(Shape{2}, {0.0, 0.0})}});
  double sum_b = 0;
  for (int s = 1; s <= 4; ++s) {
    t.step({}, lr);
    const double b = (1 - std::pow(mu, s)) / (1 - mu);
    sum_b += b;
    EXPECT_TRUE(testing::all_close(t.param("w"),
                                   f32(Shape{2}, {-lr * sum_b * c[0], -lr * sum_b * c[1]}),
                                   kTrainRtol, kTrainAtol))
        << "step " << s;
    EXPECT_TRUE(testing::all_close(t.state("w", "momentum"), f32(Shape{2}, {b * c[0], b * c[1]}),
                                   kTrainRtol, kTrainAtol));
  }
}

TEST(Optimizer, PlainSgdKeepsNoState) {
  Sgd sgd(SgdOptions{0.0, false, 0.0});
  EXPECT_TRUE(sgd.slots().empty());
  Graph step = build_train_step(linear_loss({1.0, 2.0}), {"w"}, sgd);
  // loss, new w; inputs train.step and train.lr were added.
  EXPECT_EQ(step.outputs().size(), 2u);
  EXPECT_GE(step.find(kLrInput), 0);
  EXPECT_GE(step.find(kStepInput), 0);
}

TEST(Optimizer, TrainStepGraphLayout) {
  Graph step = build_train_step(quadratic_loss(), {"w"}, AdamW());
  ASSERT_EQ(step.outputs().size(), 4u);  // loss, w, w.m, w.v
  EXPECT_EQ(step.node(step.find("w.m")).op, OpKind::Param);
  EXPECT_EQ(step.type(step.outputs()[3]), step.type(Value{step.find("w"), 0}));
  EXPECT_TRUE(step.verify().empty());
}

TEST(Optimizer, BadOptionsAndNames) {
  EXPECT_THROW(Sgd(SgdOptions{1.0, false, 0.0}), Error);
  EXPECT_THROW(Sgd(SgdOptions{0.0, true, 0.0}), Error);
  EXPECT_THROW(AdamW(AdamWOptions{0.9, -0.1, 1e-8, 0.01}), Error);
  EXPECT_THROW(AdamW(AdamWOptions{0.9, 0.999, 0.0, 0.01}), Error);
  try {
    build_train_step(quadratic_loss(), {"nope"}, AdamW());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos) << e.what();
  }
  // A leaf that collides with the step's own names.
  Graph g = quadratic_loss();
  Graph clash("clash");
  Value w = clash.param("w", DType::f32, Shape{3});
  clash.param("w.m", DType::f32, Shape{3});
  clash.set_outputs({clash.reduce_sum(clash.mul(w, w), {0})});
  try {
    build_train_step(clash, {"w"}, AdamW());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w.m'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rlx::train
