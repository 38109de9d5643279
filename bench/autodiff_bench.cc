// Autodiff benchmark: the cost of a training step (the grad graph of a BERT-style encoder
// layer's loss w.r.t. every param) relative to the forward pass on the CPU backend, and the
// wall time of the grad and vmap transforms themselves. Numbers mean something only on an idle
// machine. The layer is the one of the autodiff reference tests (tests/autodiff/ref_graphs.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "autodiff/ref_graphs.h"
#include "rlx/autodiff/grad.h"
#include "rlx/autodiff/vmap.h"
#include "rlx/ir/error.h"
#include "rlx/runtime/session.h"

namespace {

using namespace rlx;
using Clock = std::chrono::steady_clock;

constexpr int kRuns = 15;  // median of these, after one warm-up run each

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Median run times (ms) of a and b, their runs interleaved so that load from other processes
// affects both alike.
std::pair<double, double> median_ms(Executable& a, Executable& b, const TensorMap& inputs) {
  a.run(inputs);
  b.run(inputs);
  std::vector<double> ta, tb;
  for (int i = 0; i < kRuns; ++i) {
    auto t0 = Clock::now();
    a.run(inputs);
    ta.push_back(ms_since(t0));
    t0 = Clock::now();
    b.run(inputs);
    tb.push_back(ms_since(t0));
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

std::vector<std::string> param_names(const Graph& g) {
  std::vector<std::string> names;
  for (int32_t id : g.params()) names.push_back(g.node(id).name);
  return names;
}

void run() {
  autodiff::testing::EncoderConfig cfg{8, 128, 384, 12, 1536};
  Graph fwd = autodiff::testing::encoder_layer_loss(cfg);
  const std::vector<std::string> params = param_names(fwd);
  auto t0 = Clock::now();
  Graph step = autodiff::grad(fwd, params);
  const double grad_ms = ms_since(t0);

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
  auto [f, s] = median_ms(*fe, *se, inputs);
  std::printf(
      "encoder layer (hidden %lld, %lld heads, ffn %lld, seq %lld, batch %lld), cpu, "
      "median of %d runs:\n  forward %.1f ms, training step (loss + %zu param grads) "
      "%.1f ms, ratio %.2fx; grad transform %.1f ms; graph nodes %zu -> %zu\n",
      static_cast<long long>(cfg.hidden), static_cast<long long>(cfg.heads),
      static_cast<long long>(cfg.ffn), static_cast<long long>(cfg.seq),
      static_cast<long long>(cfg.batch), kRuns, f, params.size(), s, s / f, grad_ms,
      fwd.nodes().size(), step.nodes().size());

  // Per-example gradients: vmap of the one-example gradient graph over the batch.
  autodiff::testing::EncoderConfig one = cfg;
  one.batch = 1;
  Graph g1 = autodiff::grad(autodiff::testing::encoder_layer_loss(one), params);
  t0 = Clock::now();
  Graph per_example = autodiff::vmap(g1, {0, 0}, {}, cfg.batch);
  std::printf(
      "  vmap of the one-example gradient graph over %lld examples: %zu -> %zu nodes in "
      "%.1f ms\n",
      static_cast<long long>(cfg.batch), g1.nodes().size(), per_example.nodes().size(),
      ms_since(t0));
  std::printf("training step kernels:\n%s", se->kernel_report().c_str());
}

}  // namespace

int main() {
  try {
    run();
  } catch (const Error& e) {
    std::fprintf(stderr, "rlx_bench_autodiff: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
