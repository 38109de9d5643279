// Train-step benchmark on the pjrt backend: median wall time of one AdamW step of an MLP with
// two hidden layers (train::Trainer) with params and optimizer state kept on the device between
// steps (TrainerOptions::resident, the default) vs copied through the host each step (the old way:
// params and the two Adam moments uploaded by set_param before the step, the new values
// downloaded after it), on pjrt:0 and as one data-parallel SPMD program over a 4-device mesh
// (batch split 4 ways, params replicated). Two sizes: 64-128-128-10, batch 32 (26 K params,
// about the digits demo's MLP) and 784-1024-1024-10, batch 64 (1.86 M params: 7.5 MB of params
// + 15 MB of Adam state that the host way moves both directions every step). The plugin:
// RLX_PJRT_PLUGIN, else the lammps-jax-pjrt-cpu plugin CMake found. On the XLA CPU plugin "device"
// memory is host memory and the 4 devices share this machine's cores: the numbers measure transfer
// (memcpy) and dispatch overhead, not accelerator speed; on a 2-core machine the mesh is no
// speed-up.
//
// Then asynchronous dispatch (Trainer::step_async): 200 steps on pjrt:0 with state on the device
// read synchronously (step(): every step waits for its loss), dispatched asynchronously
// (step_async: nothing is read until the last step's loss), and copied through the host; the
// wall time of the 200 steps over 200, after 5 warm-up steps. Prints the CPU model.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/error.h"
#include "rlx/runtime/session.h"
#include "rlx/train/init.h"
#include "rlx/train/loss.h"
#include "rlx/train/trainer.h"

namespace {

using namespace rlx;

constexpr int kSteps = 30;  // median of these, after 3 warm-up steps

struct Mlp {
  int64_t batch, in, hidden, classes;
};

// Two hidden layers: in -> hidden -> hidden -> classes.
Graph loss_graph(const Mlp& m) {
  Graph g("mlp");
  Value x = g.input("x", DType::f32, {m.batch, m.in});
  Value y = g.input("labels", DType::i32, {m.batch});
  Value w1 = g.param("w1", DType::f32, {m.in, m.hidden});
  Value b1 = g.param("b1", DType::f32, {m.hidden});
  Value w2 = g.param("w2", DType::f32, {m.hidden, m.hidden});
  Value b2 = g.param("b2", DType::f32, {m.hidden});
  Value w3 = g.param("w3", DType::f32, {m.hidden, m.classes});
  Value h = g.relu(g.add(g.matmul(x, w1), b1));
  h = g.relu(g.add(g.matmul(h, w2), b2));
  g.set_outputs({train::softmax_cross_entropy_loss(g, g.matmul(h, w3), y)});
  return g;
}

TensorMap init(const Mlp& m) {
  train::Rng rng(0);
  using train::Init;
  return {{"w1", train::initialize(Init::HeUniform, DType::f32, {m.in, m.hidden}, rng)},
          {"b1", Tensor::full(DType::f32, {m.hidden}, 0.0)},
          {"w2", train::initialize(Init::HeUniform, DType::f32, {m.hidden, m.hidden}, rng)},
          {"b2", Tensor::full(DType::f32, {m.hidden}, 0.0)},
          {"w3", train::initialize(Init::HeUniform, DType::f32, {m.hidden, m.classes}, rng)}};
}

TensorMap batch(const Mlp& m) {
  train::Rng rng(1);
  Tensor y(DType::i32, {m.batch});
  for (int64_t i = 0; i < m.batch; ++i)
    y.data_as<int32_t>()[i] = static_cast<int32_t>(i % m.classes);
  return {{"x", train::initialize(train::Init::GlorotUniform, DType::f32, {m.batch, m.in}, rng)},
          {"labels", y}};
}

// Median ms of one step; `loss` gets the last step's loss.
double median_step_ms(train::Trainer& t, const TensorMap& b, double* loss) {
  for (int i = 0; i < 3; ++i) t.step(b, 1e-3);
  std::vector<double> ms;
  for (int i = 0; i < kSteps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    *loss = t.step(b, 1e-3)[0].get_f64(0);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

const std::vector<std::string> kWrt = {"w1", "b1", "w2", "b2", "w3"};

void bench(const Mlp& m, const std::string& plugin) {
  Graph g = loss_graph(m);
  TensorMap b = batch(m);
  CompileOptions f32;
  f32.precision = PrecisionPolicy{PrecisionMode::AlwaysF32, {}};
  Session session(Device::parse("pjrt:0"));
  train::MeshTraining dp{
      pjrt::Mesh({{"data", 4}}),
      {{"x", pjrt::PartitionSpec({"data"})}, {"labels", pjrt::PartitionSpec({"data"})}},
      {},
      plugin};
  int64_t params = 0;
  for (const auto& [name, t] : init(m)) params += t.numel();
  std::printf(
      "MLP %lld-%lld-%lld-%lld, batch %lld, %lld params, AdamW, f32 (median of %d steps):\n",
      static_cast<long long>(m.in), static_cast<long long>(m.hidden),
      static_cast<long long>(m.hidden), static_cast<long long>(m.classes),
      static_cast<long long>(m.batch), static_cast<long long>(params), kSteps);
  for (bool mesh : {false, true}) {
    double ms[2], loss[2];
    for (bool resident : {true, false}) {
      train::TrainerOptions o{f32, resident};
      train::Trainer t = mesh ? train::Trainer(dp, g, kWrt, train::AdamW(), init(m), o)
                              : train::Trainer(session, g, kWrt, train::AdamW(), init(m), o);
      ms[resident ? 0 : 1] = median_step_ms(t, b, &loss[resident ? 0 : 1]);
    }
    std::printf(
        "  %-18s state on device %8.3f ms   through the host %8.3f ms   (%.2fx)   "
        "|loss diff| %.2g\n",
        mesh ? "mesh data:4" : "pjrt:0", ms[0], ms[1], ms[1] / ms[0], std::fabs(loss[0] - loss[1]));
  }
}

constexpr int kLoopSteps = 200;

// Mean ms per step over kLoopSteps steps (after 5 warm-up steps); `loss` gets the last loss.
double loop_ms(train::Trainer& t, const TensorMap& b, bool async, double* loss) {
  for (int i = 0; i < 5; ++i) t.step(b, 1e-3);
  auto t0 = std::chrono::steady_clock::now();
  if (async) {
    AsyncResult last;
    for (int i = 0; i < kLoopSteps; ++i) last = t.step_async(b, 1e-3);
    *loss = last.output(0).get_f64(0);  // the only read: waits for all 200 steps
  } else {
    for (int i = 0; i < kLoopSteps; ++i) *loss = t.step(b, 1e-3)[0].get_f64(0);
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
         kLoopSteps;
}

void bench_async(const Mlp& m) {
  Graph g = loss_graph(m);
  TensorMap b = batch(m);
  CompileOptions f32;
  f32.precision = PrecisionPolicy{PrecisionMode::AlwaysF32, {}};
  Session session(Device::parse("pjrt:0"));
  double ms[3], loss[3];
  const bool resident[3] = {true, true, false}, async[3] = {false, true, false};
  for (int k = 0; k < 3; ++k) {
    train::Trainer t(session, g, kWrt, train::AdamW(), init(m),
                     train::TrainerOptions{f32, resident[k]});
    ms[k] = loop_ms(t, b, async[k], &loss[k]);
  }
  std::printf(
      "  MLP %lld-%lld-%lld-%lld batch %lld, pjrt:0, %d steps: on device sync %8.3f ms/step   "
      "async %8.3f ms/step (%.2fx)   through the host %8.3f ms/step (%.2fx)   |loss diff| "
      "%.2g, %.2g\n",
      static_cast<long long>(m.in), static_cast<long long>(m.hidden),
      static_cast<long long>(m.hidden), static_cast<long long>(m.classes),
      static_cast<long long>(m.batch), kLoopSteps, ms[0], ms[1], ms[0] / ms[1], ms[2],
      ms[2] / ms[1], std::fabs(loss[0] - loss[1]), std::fabs(loss[0] - loss[2]));
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

int run() {
  std::string plugin = pjrt::plugin_path_from_env().value_or(RLX_PJRT_DEFAULT_PLUGIN);
  if (plugin.empty()) {
    std::fprintf(stderr,
                 "rlx_bench_pjrt_train: no PJRT plugin: set RLX_PJRT_PLUGIN or pip install "
                 "lammps-jax-pjrt-cpu and re-run cmake\n");
    return 1;
  }
  setenv("RLX_PJRT_PLUGIN", plugin.c_str(), 0);  // for the Session's registered backend
  std::printf("plugin: %s\n", plugin.c_str());
  bench({32, 64, 128, 10}, plugin);
  bench({64, 784, 1024, 10}, plugin);
  std::printf("asynchronous dispatch (Trainer::step_async), AdamW, f32, CPU: %s:\n",
              cpu_model().c_str());
  bench_async({32, 64, 128, 10});
  bench_async({64, 784, 1024, 10});
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const Error& e) {
    std::fprintf(stderr, "rlx_bench_pjrt_train: error: %s\n", e.what());
    return 1;
  }
}
