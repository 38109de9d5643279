// Loss values and gradients against host float64 formulas; the Trainer's input checks.
#include "rlx/train/loss.h"

#include <gtest/gtest.h>

#include <cmath>

#include "rlx/autodiff/grad.h"
#include "rlx/ir/error.h"
#include "rlx/runtime/session.h"
#include "rlx/train/optimizer.h"
#include "rlx/train/trainer.h"
#include "train_test_util.h"

namespace rlx::train {
namespace {

using testing::expect_error;
using testing::f32;
using testing::kTrainAtol;
using testing::kTrainRtol;

// Runs grad(g, wrt) compiled on the CPU backend: (loss, d loss / d wrt[0]).
std::vector<Tensor> run_grad(const Graph& g, const std::string& wrt, const TensorMap& feeds) {
  Session session(Device::cpu());
  return session.compile(autodiff::grad(g, {wrt}))->run(feeds);
}

// Cross-entropy reference in float64: loss = mean_n (logsumexp(z_n) - z_n[y_n]) and
// d loss / d z = (softmax(z) - onehot(y)) / N.
TEST(Loss, SoftmaxCrossEntropyValueAndGradient) {
  const int64_t n = 3, c = 4;
  const std::vector<double> z = {1.0, -2.0, 0.5, 3.0, 0.0, 0.0, 0.0, 0.0, -1.5, 4.0, 2.5, -0.5};
  const std::vector<int64_t> y = {3, 1, 0};
  Graph g("ce");
  Value logits = g.input("logits", DType::f32, Shape{n, c});
  Value labels = g.input("labels", DType::i32, Shape{n});
  g.set_outputs({softmax_cross_entropy_loss(g, logits, labels)});
  auto out = run_grad(
      g, "logits",
      {{"logits", f32(Shape{n, c}, z)}, {"labels", Tensor::from_ints(DType::i32, Shape{n}, y)}});

  double loss = 0;
  std::vector<double> dz(z.size());
  for (int64_t r = 0; r < n; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t k = 0; k < c; ++k) m = std::max(m, z[r * c + k]);
    for (int64_t k = 0; k < c; ++k) s += std::exp(z[r * c + k] - m);
    loss += (m + std::log(s) - z[r * c + y[r]]) / n;
    for (int64_t k = 0; k < c; ++k)
      dz[r * c + k] = (std::exp(z[r * c + k] - m) / s - (k == y[r] ? 1.0 : 0.0)) / n;
  }
  EXPECT_TRUE(testing::all_close(out[0], f32(Shape{}, {loss}), kTrainRtol, kTrainAtol));
  EXPECT_TRUE(testing::all_close(out[1], f32(Shape{n, c}, dz), kTrainRtol, kTrainAtol));
}

// MSE reference: mean((p - t)^2) and d/dp = 2 (p - t) / numel.
TEST(Loss, MseValueAndGradient) {
  const std::vector<double> p = {0.5, -1.0, 2.0, 0.0, 3.0, -0.25};
  const std::vector<double> t = {1.0, -1.0, 0.0, 0.5, 2.0, 0.25};
  Graph g("mse");
  Value pred = g.input("pred", DType::f32, Shape{2, 3});
  Value target = g.input("target", DType::f32, Shape{2, 3});
  g.set_outputs({mse_loss(g, pred, target)});
  auto out = run_grad(g, "pred", {{"pred", f32(Shape{2, 3}, p)}, {"target", f32(Shape{2, 3}, t)}});
  double loss = 0;
  std::vector<double> dp(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    loss += (p[i] - t[i]) * (p[i] - t[i]) / 6.0;
    dp[i] = 2.0 * (p[i] - t[i]) / 6.0;
  }
  EXPECT_TRUE(testing::all_close(out[0], f32(Shape{}, {loss}), kTrainRtol, kTrainAtol));
  EXPECT_TRUE(testing::all_close(out[1], f32(Shape{2, 3}, dp), kTrainRtol, kTrainAtol));
}

TEST(Loss, ShapeMismatchesAreNamed) {
  Graph g("bad");
  Value logits = g.input("logits", DType::f32, Shape{4, 10});
  Value labels = g.input("labels", DType::i32, Shape{5});
  Value flabels = g.input("flabels", DType::f32, Shape{4});
  expect_error([&] { softmax_cross_entropy_loss(g, logits, labels); },
               {"softmax_cross_entropy_loss", "batch size", "f32[4,10]", "i32[5]"});
  expect_error([&] { softmax_cross_entropy_loss(g, logits, flabels); }, {"integer [N]", "f32[4]"});
  Value a = g.input("a", DType::f32, Shape{4, 1});
  Value b = g.input("b", DType::f32, Shape{4});
  expect_error([&] { mse_loss(g, a, b); }, {"mse_loss", "f32[4,1]", "f32[4]"});
}

TEST(Loss, CheckClassLabels) {
  check_class_labels(Tensor::from_ints(DType::i32, Shape{3}, std::vector<int64_t>{0, 9, 4}), 10,
                     "t");
  expect_error(
      [] {
        check_class_labels(
            Tensor::from_ints(DType::i64, Shape{4}, std::vector<int64_t>{0, 1, 2, 12}), 10, "t");
      },
      {"label 12 at index 3 is outside [0, 10)"});
  expect_error([] { check_class_labels(Tensor::full(DType::i32, Shape{1}, -1), 10, "t"); },
               {"label -1"});
  expect_error([] { check_class_labels(Tensor::full(DType::f32, Shape{1}, 1), 10, "t"); },
               {"integers", "f32[1]"});
}

// A linear classifier trained by the Trainer: bad batches are rejected before anything runs.
class TrainerErrors : public ::testing::Test {
 protected:
  Graph loss_graph() {
    Graph g("linear_ce");
    Value x = g.input("x", DType::f32, Shape{2, 3});
    Value y = g.input("labels", DType::i32, Shape{2});
    Value w = g.param("w", DType::f32, Shape{3, 4});
    g.set_outputs({softmax_cross_entropy_loss(g, g.matmul(x, w), y)});
    return g;
  }
  Session session{Device::cpu()};
};

TEST_F(TrainerErrors, LabelsOutOfRange) {
  Trainer t(session, loss_graph(), {"w"}, Sgd(),
            {{"w", Tensor::full(DType::f32, Shape{3, 4}, 0.1)}});
  TensorMap batch = {
      {"x", Tensor::full(DType::f32, Shape{2, 3}, 1.0)},
      {"labels", Tensor::from_ints(DType::i32, Shape{2}, std::vector<int64_t>{1, 4})}};
  expect_error([&] { t.step(batch, 0.1); },
               {"Trainer::step", "'labels'", "label 4 at index 1 is outside [0, 4)"});
  EXPECT_EQ(t.num_steps(), 0);
  EXPECT_EQ(t.param("w").get_f64(0), static_cast<float>(0.1));  // unchanged
}

TEST_F(TrainerErrors, BatchShapeMismatch) {
  Trainer t(session, loss_graph(), {"w"}, Sgd(),
            {{"w", Tensor::full(DType::f32, Shape{3, 4}, 0.1)}});
  TensorMap batch = {{"x", Tensor::full(DType::f32, Shape{3, 3}, 1.0)},
                     {"labels", Tensor::full(DType::i32, Shape{2}, 0)}};
  expect_error([&] { t.step(batch, 0.1); }, {"'x'", "f32[2,3]", "f32[3,3]"});
  EXPECT_EQ(t.num_steps(), 0);
}

TEST_F(TrainerErrors, MissingOrMistypedInitialValue) {
  expect_error([&] { Trainer(session, loss_graph(), {"w"}, Sgd(), {}); },
               {"missing initial value for 'w'"});
  expect_error(
      [&] {
        Trainer(session, loss_graph(), {"w"}, Sgd(),
                {{"w", Tensor::full(DType::f32, Shape{4, 3}, 0.1)}});
      },
      {"'w' expected f32[3,4], got f32[4,3]"});
}

// One plain SGD step equals w - lr * dL/dw with the gradient written out by hand:
// logits = x w = 0 for w = 0, so softmax is uniform and dL/dw = x^T (1/4 - onehot(y)) / N.
TEST_F(TrainerErrors, OneSgdStepIsTheHandGradient) {
  Trainer t(session, loss_graph(), {"w"}, Sgd(SgdOptions{0.0, false, 0.0}),
            {{"w", Tensor::full(DType::f32, Shape{3, 4}, 0.0)}});
  const std::vector<double> x = {1.0, 2.0, -1.0, 0.5, 0.0, 3.0};
  const std::vector<int64_t> y = {2, 0};
  auto out = t.step(
      {{"x", f32(Shape{2, 3}, x)}, {"labels", Tensor::from_ints(DType::i32, Shape{2}, y)}}, 0.5);
  EXPECT_NEAR(out[0].get_f64(0), std::log(4.0), 1e-6);
  std::vector<double> w(12, 0.0);
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 4; ++k)
        w[i * 4 + k] -= 0.5 * x[n * 3 + i] * (0.25 - (k == y[n] ? 1.0 : 0.0)) / 2.0;
  EXPECT_TRUE(testing::all_close(t.param("w"), f32(Shape{3, 4}, w), kTrainRtol, kTrainAtol));
}

}  // namespace
}  // namespace rlx::train
