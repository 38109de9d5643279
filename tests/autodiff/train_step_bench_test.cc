// Disabled by default (a measurement, not a check): the cost of a training step (the grad
// graph of the encoder layer's loss w.r.t. every param) relative to the forward pass, on the
// CPU backend. Run: ./build/rlx_autodiff_tests --gtest_also_run_disabled_tests
//   --gtest_filter='*TrainStep*'   (numbers mean something only on an idle machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "ref_graphs.h"
#include "rlx/autodiff/grad.h"
#include "rlx/runtime/session.h"

namespace rlx::autodiff {
namespace {

constexpr int kRuns = 15;  // median of these, after one warm-up run each

// Median run times of a and b, their runs interleaved so that load from other processes
// affects both alike.
std::pair<double, double> median_seconds(Executable& a, Executable& b, const TensorMap& inputs) {
  a.run(inputs);
  b.run(inputs);
  std::vector<double> ta, tb;
  auto time = [&](Executable& e) {
    auto start = std::chrono::steady_clock::now();
    e.run(inputs);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (int i = 0; i < kRuns; ++i) {
    ta.push_back(time(a));
    tb.push_back(time(b));
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

TEST(Bench, DISABLED_TrainStepVsForwardEncoderLayer) {
  testing::EncoderConfig cfg{8, 128, 384, 12, 1536};
  Graph fwd = testing::encoder_layer_loss(cfg);
  std::vector<std::string> params;
  for (int32_t id : fwd.params()) params.push_back(fwd.node(id).name);
  auto t0 = std::chrono::steady_clock::now();
  Graph step = grad(fwd, params);
  double transform_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  Session session(Device::cpu());
  std::shared_ptr<Executable> fe = session.compile(fwd), se = session.compile(step);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(-0.5, 0.5);
  auto random = [&](const TensorType& t, double base, double amp) {
    Tensor x(t.dtype, t.shape);
    for (int64_t i = 0; i < x.numel(); ++i) x.set_f64(i, base + amp * u(rng));
    return x;
  };
  for (int32_t id : fwd.params()) {
    const Node& n = fwd.node(id);
    bool scale = n.name.find("norm.weight") != std::string::npos;
    Tensor v = random(n.results[0], scale ? 1.0 : 0.0, scale ? 0.2 : 0.1);
    fe->set_param(n.name, v);
    se->set_param(n.name, v);
  }
  Tensor mask(DType::bool_, {cfg.batch, cfg.seq});
  for (int64_t i = 0; i < mask.numel(); ++i)
    mask.set_f64(i, (i % cfg.seq) < cfg.seq - 16 * (i / cfg.seq % 2));
  TensorMap inputs{{"x", random({DType::f32, {cfg.batch, cfg.seq, cfg.hidden}}, 0, 1)},
                   {"mask", mask}};
  auto [f, s] = median_seconds(*fe, *se, inputs);
  std::printf(
      "encoder layer (hidden %lld, %lld heads, ffn %lld, seq %lld, batch %lld), cpu, "
      "median of %d runs:\n  forward %.1f ms, training step (loss + %zu param grads) "
      "%.1f ms, ratio %.2fx; grad transform %.1f ms; graph nodes %zu -> %zu\n",
      static_cast<long long>(cfg.hidden), static_cast<long long>(cfg.heads),
      static_cast<long long>(cfg.ffn), static_cast<long long>(cfg.seq),
      static_cast<long long>(cfg.batch), kRuns, f * 1e3, params.size(), s * 1e3, s / f,
      transform_s * 1e3, fwd.nodes().size(), step.nodes().size());
  std::printf("training step kernels:\n%s", se->kernel_report().c_str());
  EXPECT_GT(s, 0.0);
}

}  // namespace
}  // namespace rlx::autodiff
