// Every vjp rule (and every decomposition autodiff differentiates) against f64 central finite
// differences on the reference evaluator — through grad, jvp and hvp — on every applicable
// case of the op-case table (tests/ops/op_case.h); the CPU backend runs each gradient graph too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>

#include "common/exe_util.h"
#include "common/test_util.h"
#include "ops/op_case.h"
#include "rlx/autodiff/grad.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"

namespace rlx::autodiff {
namespace {

using Ints = std::vector<int64_t>;

// Tolerance of the directional-derivative check, stated once: |ad - fd| <= kFdTol * (1 + |ad|
// + |fd|). With f64 and step kFdStep the central difference is accurate to ~1e-10 (truncation
// h^2 f''' / 6 plus rounding eps |L| / h), far inside it, while a wrong rule is off by O(1).
constexpr double kFdStep = 1e-6;
constexpr double kFdTol = 1e-6;
// hvp differences gradients (one order lower): a larger step balances truncation (h^2) and
// rounding (eps / h) at ~1e-10 again.
constexpr double kHvpStep = 1e-5;
// The CPU backend against the evaluator on the same f64 gradient graph.
constexpr double kCpuRtol = 1e-10;

// The graph of a case: the op case's graph in f64 (its leaves are inputs and params), with
// loss = sum_k sum(out_k * ct_k) over the float outputs and seeded random cotangent constants
// ct_k. Returns false when the case has no float output.
bool case_graph(const testing::OpCase& c, Graph& g, uint64_t seed) {
  g = testing::case_graph(c, DType::f64);
  std::vector<Value> outs = g.outputs();
  std::optional<Value> loss;
  for (size_t k = 0; k < outs.size(); ++k) {
    TensorType t = g.type(outs[k]);
    if (!is_float(t.dtype)) continue;
    Tensor ct = rlx::testing::random_tensor(t.dtype, t.shape, seed + 100 + k, -1, 1);
    Ints all;
    for (int a = 0; a < t.shape.rank(); ++a) all.push_back(a);
    Value term = g.reduce_sum(g.mul(outs[k], g.constant(ct)), all);
    loss = loss ? g.add(*loss, term) : term;
  }
  if (!loss) return false;
  g.set_outputs({*loss});
  return true;
}

double eval_loss(const Graph& g, const TensorMap& feeds) {
  return evaluate(g, feeds)[0].get_f64(0);
}

// Seeded random direction per float leaf (the tangent / FD direction), and x + s * dx.
TensorMap directions(const TensorMap& feeds, const std::vector<std::string>& wrt, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  TensorMap dirs;
  for (const std::string& n : wrt) {
    Tensor d(feeds.at(n).dtype(), feeds.at(n).shape());
    for (int64_t e = 0; e < d.numel(); ++e) d.set_f64(e, dist(rng));
    dirs[n] = d;
  }
  return dirs;
}
TensorMap moved(const TensorMap& feeds, const TensorMap& dirs, double s) {
  TensorMap out = feeds;
  for (const auto& [n, d] : dirs) {
    Tensor x = feeds.at(n).clone();
    for (int64_t e = 0; e < x.numel(); ++e) x.set_f64(e, x.get_f64(e) + s * d.get_f64(e));
    out[n] = x;
  }
  return out;
}
double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t e = 0; e < a.numel(); ++e) s += a.get_f64(e) * b.get_f64(e);
  return s;
}
void expect_close_fd(double ad, double fd, const char* what) {
  EXPECT_TRUE(std::isfinite(ad)) << what;
  EXPECT_LE(std::abs(ad - fd), kFdTol * (1 + std::abs(ad) + std::abs(fd)))
      << what << ": ad " << ad << " fd " << fd;
}

// Reverse mode (grad) and forward mode (jvp) against the central difference of the loss along
// a random direction, and hvp against the central difference of the gradient.
void run_fd_case(const testing::OpCase& c) {
  SCOPED_TRACE(c.name);
  Graph g;
  ASSERT_TRUE(case_graph(c, g, 7)) << "the case has no float output";
  TensorMap feeds = testing::case_feeds(c, DType::f64);
  std::vector<std::string> wrt;
  for (auto ids : {g.inputs(), g.params()})
    for (int32_t id : ids)
      if (is_float(g.node(id).results[0].dtype)) wrt.push_back(g.node(id).name);
  ASSERT_FALSE(wrt.empty()) << "the case has no float leaf";
  Graph dg = grad(g, wrt);
  ASSERT_TRUE(dg.verify().empty()) << dg.verify()[0];
  std::vector<Tensor> res = evaluate(dg, feeds);
  ASSERT_EQ(res.size(), wrt.size() + 1);
  EXPECT_DOUBLE_EQ(res[0].get_f64(0), eval_loss(g, feeds));  // the loss is passed through
  TensorMap dirs = directions(feeds, wrt, 99);
  double ad = 0;
  for (size_t i = 0; i < wrt.size(); ++i) {
    ASSERT_EQ(res[i + 1].type(), feeds.at(wrt[i]).type()) << wrt[i];
    ad += dot(res[i + 1], dirs.at(wrt[i]));
  }
  double fd =
      (eval_loss(g, moved(feeds, dirs, kFdStep)) - eval_loss(g, moved(feeds, dirs, -kFdStep))) /
      (2 * kFdStep);
  expect_close_fd(ad, fd, "grad");

  // The gradient graph through the full pipeline on the CPU backend gives the evaluator's
  // values (f64 kernels; sums in another order: kCpuRtol), for the cases the CPU suite runs
  // (ops the CPU backend cannot run yet, as control flow, are checked on the evaluator only).
  if (testing::runs_in(c, testing::kCpuSuite)) {
    std::shared_ptr<Executable> exe = Session(Device::cpu()).compile(dg);
    std::vector<Tensor> cpu = exe->run(rlx::testing::bind_params(*exe, feeds));
    for (size_t i = 0; i < res.size(); ++i)
      EXPECT_TRUE(rlx::testing::all_close(cpu[i], res[i], kCpuRtol, kCpuRtol))
          << "cpu output " << i;
  }

  // jvp: the tangent of the loss along dirs.
  Graph jg = jvp(g, wrt);
  TensorMap jfeeds = feeds;
  for (const auto& [n, d] : dirs) jfeeds["tangent." + n] = d;
  std::vector<Tensor> jr = evaluate(jg, jfeeds);
  ASSERT_EQ(jr.size(), 2u);
  expect_close_fd(jr[1].get_f64(0), fd, "jvp");

  // hvp: <H v, w> against <(grad(x + h v) - grad(x - h v)) / 2h, w>, v = dirs.
  Graph hg = hvp(g, wrt);
  std::vector<Tensor> hr = evaluate(hg, jfeeds);
  ASSERT_EQ(hr.size(), wrt.size() + 1);
  TensorMap ws = directions(feeds, wrt, 5);
  std::vector<Tensor> gp = evaluate(dg, moved(feeds, dirs, kHvpStep));
  std::vector<Tensor> gm = evaluate(dg, moved(feeds, dirs, -kHvpStep));
  double had = 0, hfd = 0;
  for (size_t i = 0; i < wrt.size(); ++i) {
    ASSERT_EQ(hr[i + 1].type(), feeds.at(wrt[i]).type()) << wrt[i];
    had += dot(hr[i + 1], ws.at(wrt[i]));
    hfd += (dot(gp[i + 1], ws.at(wrt[i])) - dot(gm[i + 1], ws.at(wrt[i]))) / (2 * kHvpStep);
  }
  expect_close_fd(had, hfd, "hvp");
}

// The op cases finite differences apply to: f64, no special values, and an op that autodiff
// differentiates (a rule or its decomposition; non-differentiable ops contribute zero, which
// NonDifferentiable.ContributeZero checks).
std::vector<const testing::OpCase*> fd_cases() {
  std::vector<const testing::OpCase*> out;
  for (const testing::OpCase& c : testing::op_cases()) {
    VjpSupport s = vjp_support(c.op);
    bool differentiable = s == VjpSupport::Rule || s == VjpSupport::Decomposition;
    Graph g;
    if (differentiable && testing::runs_in(c, testing::kFdSuite) && case_graph(c, g, 7))
      out.push_back(&c);
  }
  return out;
}

class FdTest : public ::testing::TestWithParam<const testing::OpCase*> {};

TEST_P(FdTest, VjpMatchesCentralDifferences) { run_fd_case(*GetParam()); }

INSTANTIATE_TEST_SUITE_P(OpCases, FdTest, ::testing::ValuesIn(fd_cases()),
                         [](const auto& i) { return testing::test_name(i.param->name); });

// Non-differentiable ops contribute exactly zero (stop_gradient cuts a path that would
// otherwise carry gradient; the rounding ops and sign are piecewise constant).
TEST(NonDifferentiable, ContributeZero) {
  Graph g;
  Value x = g.input("x", DType::f64, {4});
  Value y = g.add(g.mul(x, g.stop_gradient(x)), g.floor(x));
  y = g.add(y, g.add(g.ceil(x), g.add(g.round(x), g.sign(x))));
  Value idx = g.argmax(x, 0);
  y = g.add(y, g.gather(x, g.expand_dims(idx, {0}), 0));  // the index path carries nothing
  y = g.add(y, g.convert(g.lt(x, g.scalar(0.0, DType::f64)), DType::f64));
  g.set_outputs({g.reduce_sum(y, {0})});
  Graph dg = grad(g, {"x"});
  TensorMap feeds{
      {"x", Tensor::from_doubles(DType::f64, {4}, std::vector<double>{0.3, -1.7, 2.2, 0.9})}};
  std::vector<Tensor> r = evaluate(dg, feeds);
  // d/dx [x * sg(x)] = sg(x) = x; x[argmax] (index 2) is broadcast into all 4 sums: + 4.
  std::vector<double> want{0.3, -1.7, 6.2, 0.9};
  for (int64_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(r[1].get_f64(i), want[static_cast<size_t>(i)]);
}

}  // namespace
}  // namespace rlx::autodiff
