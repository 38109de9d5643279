// Data parallelism from a device string: Session / SentenceEmbedder on a pjrt device set
// ("pjrt:0-3", "pjrt:0,2", "pjrt:all") against one device and the CPU backend, and its errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "common/scoped_env.h"
#include "common/test_util.h"
#include "pjrt_test_util.h"
#include "rlx/ir/error.h"
#include "rlx/models/sentence_embedder.h"
#include "rlx/runtime/session.h"

namespace rlx::pjrt {
namespace {

using rlx::testing::ScopedEnv;
using testing::all_close;
using testing::f32_options;
using testing::random_feeds;

using rlx::testing::error_of;

// The registered pjrt backend (what Session uses) finds the plugin under test.
struct PluginEnv {
  ScopedEnv env;
  PluginEnv() { env.set("RLX_PJRT_PLUGIN", testing::test_plugin()); }
};

// A 2-layer MLP over a batch of `batch` rows, plus a scalar output (the sum of all rows,
// replicated: a reduction over the batch that XLA's partitioner must all-reduce).
Graph mlp(int64_t batch) {
  Graph g("mlp");
  Value x = g.input("x", DType::f32, Shape{batch, 16});
  Value w1 = g.param("w1", DType::f32, Shape{16, 32});
  Value b1 = g.param("b1", DType::f32, Shape{32});
  Value w2 = g.param("w2", DType::f32, Shape{32, 4});
  Value h = g.relu(g.add(g.matmul(x, w1), b1));
  Value y = g.matmul(h, w2);
  g.set_outputs({y, g.reduce_sum(y, {0, 1})});
  return g;
}

std::vector<Tensor> run_on(const std::string& device, const Graph& g, const TensorMap& feeds) {
  Session session(Device::parse(device));
  std::shared_ptr<Executable> exe = session.compile(g, f32_options());
  EXPECT_EQ(exe->device().to_string(), Device::parse(device).to_string());
  if (Device::parse(device).is_set()) {  // one SPMD program over the set, batch split
    const int64_t n = backend_for(DeviceKind::Pjrt)->batch_multiple(Device::parse(device));
    EXPECT_NE(exe->kernel_report().find("mhlo.num_partitions = " + std::to_string(n)),
              std::string::npos);
  }
  for (int32_t id : g.params()) exe->set_param(g.node(id).name, feeds.at(g.node(id).name));
  return exe->run({{"x", feeds.at("x")}});
}

// Every device-set form through Session equals pjrt:0 (tolerance of the SPMD MLP tests: the
// batch split changes no per-row sum; the scalar's all-reduce reassociates a float sum).
TEST(PjrtDataParallel, SessionOnADeviceSetEqualsOneDevice) {
  RLX_REQUIRE_PJRT_PLUGIN();
  PluginEnv plugin;
  const Graph g = mlp(8);
  const TensorMap feeds = random_feeds(g, 7);
  const std::vector<Tensor> one = run_on("pjrt:0", g, feeds);
  for (const char* device : {"pjrt:0-3", "pjrt:3,1", "pjrt:all", "pjrt:2-3"}) {
    SCOPED_TRACE(device);
    std::vector<Tensor> got = run_on(device, g, feeds);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].shape(), (Shape{8, 4}));
    EXPECT_TRUE(all_close(got[0], one[0], testing::kF32Tol));
    EXPECT_TRUE(all_close(got[1], one[1], {1e-4, 1e-5}));
  }
  // A set of one device is that device.
  EXPECT_EQ(Device::parse("pjrt:2-2"), Device::parse("pjrt:2"));
}

TEST(PjrtDataParallel, BatchMultipleIsTheDeviceCount) {
  RLX_REQUIRE_PJRT_PLUGIN();
  PluginEnv plugin;
  Backend& b = *backend_for(DeviceKind::Pjrt);
  EXPECT_EQ(b.batch_multiple(Device::parse("pjrt:1")), 1);
  EXPECT_EQ(b.batch_multiple(Device::parse("pjrt:0,2,3")), 3);
  const auto count = static_cast<int64_t>(describe_plugin(testing::test_plugin()).devices.size());
  EXPECT_EQ(b.batch_multiple(Device::parse("pjrt:all")), count);
  EXPECT_EQ(backend_for(DeviceKind::Cpu)->batch_multiple(Device::cpu()), 1);
}

TEST(PjrtDataParallel, ErrorsNameTheInputTheSetAndTheDevices) {
  RLX_REQUIRE_PJRT_PLUGIN();
  PluginEnv plugin;
  const int count = static_cast<int>(describe_plugin(testing::test_plugin()).devices.size());
  // A batch that does not split evenly: no padding (the graph reduces over the batch).
  Session four(Device::parse("pjrt:0-3"));
  EXPECT_EQ(error_of([&] { four.compile(mlp(6), f32_options()); }),
            "pjrt: device set 'pjrt:0-3' splits dim 0 (the batch) of every input and output over "
            "its 4 devices, but input 'x' [6,16] has batch 6, not a multiple of 4; pad the batch "
            "to a multiple of 4 or use fewer devices");
  // A device the plugin does not have.
  const std::string set = "pjrt:0-" + std::to_string(count);
  Session too_many(Device::parse(set));
  const std::string err = error_of([&] { too_many.compile(mlp(8), f32_options()); });
  EXPECT_EQ(err.rfind("pjrt: device set '" + set + "' names pjrt:" + std::to_string(count) +
                          ", but plugin '",
                      0),
            0u)
      << err;
  EXPECT_NE(err.find("' has " + std::to_string(count) + " addressable device(s) (pjrt:0-" +
                     std::to_string(count - 1) + ")"),
            std::string::npos)
      << err;
  EXPECT_EQ(error_of([&] { backend_for(DeviceKind::Pjrt)->batch_multiple(Device::parse(set)); }),
            err);
}

// MiniLM sentence embeddings through SentenceEmbedder (a Session inside) on device sets equal
// pjrt:0 and the CPU backend within the MiniLM parity bound (max |diff| <= 2e-4, f32). The
// batches are padded to a multiple of the device count (5 texts: 8 rows; on 3 devices 3 texts:
// 4 rows, padded to 6).
TEST(PjrtDataParallel, MiniLMEmbeddingsOnADeviceSetEqualOneDeviceAndTheCpu) {
  RLX_REQUIRE_PJRT_PLUGIN();
  const char* model = std::getenv("RLX_MODEL_DIR");
  if (model == nullptr || *model == '\0') GTEST_SKIP() << "RLX_MODEL_DIR is not set";
  PluginEnv plugin;
  const std::vector<std::string> texts = {
      "A man is eating food.", "A man is riding a horse.", "The new movie is awesome.",
      "Data parallelism splits the batch over devices.", "short"};
  auto embed = [&](const std::string& device, const std::vector<std::string>& t) {
    models::EmbedderOptions o;
    o.device = Device::parse(device);
    o.precision = f32_options().precision;
    models::SentenceEmbedder e(model, o);
    return e.encode(t);
  };
  const Tensor cpu = embed("cpu", texts), one = embed("pjrt:0", texts);
  const testing::Tolerance parity{2e-4, 0};
  double err = 0;
  EXPECT_TRUE(all_close(one, cpu, parity, &err));
  std::cout << "pjrt:0 vs cpu: max |diff| " << err << "\n";
  for (const char* device : {"pjrt:0-3", "pjrt:all", "pjrt:1,3"}) {
    SCOPED_TRACE(device);
    const Tensor got = embed(device, texts);
    EXPECT_EQ(got.shape(), cpu.shape());
    EXPECT_TRUE(all_close(got, one, parity, &err));
    std::cout << device << " vs pjrt:0: max |diff| " << err;
    EXPECT_TRUE(all_close(got, cpu, parity, &err));
    std::cout << ", vs cpu: " << err << "\n";
  }
  const std::vector<std::string> three(texts.begin(), texts.begin() + 3);
  const Tensor got = embed("pjrt:0-2", three), want = embed("cpu", three);
  EXPECT_EQ(got.shape(), (Shape{3, cpu.shape()[1]}));
  EXPECT_TRUE(all_close(got, want, parity));
}

}  // namespace
}  // namespace rlx::pjrt
