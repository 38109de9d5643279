// Session and its compile cache (hits, misses, LRU eviction, capacity, environment, threads,
// failed compiles), devices and the backend registry.
#include "rlx/runtime/session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <latch>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/test_util.h"
#include "rlx/ir/evaluator.h"

namespace rlx {
namespace {

using testing::EnvGuard;
using testing::error_of;
using testing::random_tensor;

// x: f32[shape] -> tanh(x) * w + 1, w a param of x's shape.
Graph small_graph(Shape shape, const std::string& param = "w") {
  Graph g("small");
  Value x = g.input("x", DType::f32, shape);
  Value w = g.param(param, DType::f32, shape);
  g.set_outputs({g.add(g.mul(g.tanh(x), w), g.scalar(1.0, DType::f32))});
  return g;
}

// Default CompileOptions with one change.
template <class F>
CompileOptions options_with(F&& change) {
  CompileOptions o;
  change(o);
  return o;
}

void expect_stats(const Session& s, int64_t hits, int64_t misses, int64_t evictions, size_t size) {
  CompileCacheStats st = s.cache_stats();
  EXPECT_EQ(st.hits, hits);
  EXPECT_EQ(st.misses, misses);
  EXPECT_EQ(st.evictions, evictions);
  EXPECT_EQ(st.size, size);
}

// A backend for DeviceKind::Pjrt that counts compilations, records the device it was asked for
// and compiles on the CPU backend after `delay` (to make concurrent compiles overlap); graphs
// named "bad" fail after the delay.
class FakeBackend final : public Backend {
 public:
  std::string name() const override { return "fake"; }
  DeviceKind device_kind() const override { return DeviceKind::Pjrt; }
  std::set<OpKind> supported_ops() const override {
    return backend_for(DeviceKind::Cpu)->supported_ops();
  }
  std::unique_ptr<Executable> compile(const Graph& graph, const CompileOptions& options,
                                      const Device& device) override {
    ++compiles;
    {
      std::lock_guard<std::mutex> lock(mu);
      devices.push_back(device);
    }
    std::this_thread::sleep_for(delay);
    check(graph.name() != "bad", "fake: cannot compile graph @bad");
    return backend_for(DeviceKind::Cpu)->compile(graph, options, Device::cpu());
  }
  std::atomic<int> compiles{0};
  std::chrono::milliseconds delay{0};
  std::mutex mu;
  std::vector<Device> devices;
};

FakeBackend& fake_backend() {
  static std::shared_ptr<FakeBackend> b = [] {
    auto fake = std::make_shared<FakeBackend>();
    register_backend(fake);
    return fake;
  }();
  return *b;
}

// The cache tests do not depend on the caller's environment.
class SessionCache : public ::testing::Test {
 private:
  EnvGuard size_{"RLX_COMPILE_CACHE_SIZE", nullptr};
  EnvGuard precision_{"RLX_PRECISION", nullptr};
  EnvGuard dispatch_{"RLX_KERNEL_DISPATCH", nullptr};
  EnvGuard memory_limit_{"RLX_MEMORY_LIMIT", nullptr};
};

TEST_F(SessionCache, CacheHitReturnsTheSameExecutable) {
  Session s;
  Graph g = small_graph(Shape{2, 3});
  auto a = s.compile(g);
  auto b = s.compile(small_graph(Shape{2, 3}));  // an equal graph built again
  EXPECT_EQ(a.get(), b.get());
  expect_stats(s, 1, 1, 0, 1);
  EXPECT_GT(s.cache_stats().compile_seconds, 0);
  // The same object, params included.
  a->set_param("w", Tensor::full(DType::f32, Shape{2, 3}, 2.0));
  EXPECT_EQ(b->run({{"x", Tensor(DType::f32, Shape{2, 3})}})[0].get_f64(0), 1.0);
}

TEST_F(SessionCache, ShapesNamesAndOptionsAreMisses) {
  Session s;
  Graph g = small_graph(Shape{2, 3});
  auto base = s.compile(g);
  std::vector<std::shared_ptr<Executable>> others{
      s.compile(small_graph(Shape{3, 2})),
      s.compile(small_graph(Shape{2, 3}, "v")),
      s.compile(g, options_with([](CompileOptions& o) {
                  o.dispatch = {KernelDispatch::ForceCommon, {}};
                })),
      s.compile(g, options_with([](CompileOptions& o) {
                  o.dispatch = DispatchOptions{};
                  o.dispatch->overrides[OpKind::Tanh] = KernelDispatch::ForceNative;
                })),
      s.compile(g, options_with([](CompileOptions& o) {
                  o.precision = parse_precision_policy("auto-mixed-bf16");
                })),
      s.compile(g, options_with([](CompileOptions& o) {
                  o.precision = parse_precision_policy("always-f32");
                })),
      s.compile(g, options_with([](CompileOptions& o) { o.dce = false; })),
      s.compile(g, options_with([](CompileOptions& o) { o.fold_constants = false; })),
      s.compile(g, options_with([](CompileOptions& o) { o.seed = 7; })),
  };
  std::set<Executable*> distinct{base.get()};
  for (auto& e : others) distinct.insert(e.get());
  EXPECT_EQ(distinct.size(), others.size() + 1);
  expect_stats(s, 0, static_cast<int64_t>(others.size()) + 1, 0, others.size() + 1);
  // Equal options built separately hit.
  EXPECT_EQ(s.compile(g, options_with([](CompileOptions& o) { o.seed = 7; })).get(),
            others.back().get());
  EXPECT_EQ(s.compile(g, options_with([](CompileOptions& o) {
                        o.precision = parse_precision_policy("auto-mixed-bf16");
                      }))
                .get(),
            others[4].get());
}

TEST_F(SessionCache, RlxPrecisionIsPartOfTheKey) {
  Session s;
  Graph g = small_graph(Shape{4});
  auto plain = s.compile(g);
  std::shared_ptr<Executable> bf16;
  {
    EnvGuard env("RLX_PRECISION", "always-bf16");
    bf16 = s.compile(g);
    EXPECT_NE(bf16.get(), plain.get());
    std::string text = bf16->compiled_graph().to_string();
    EXPECT_NE(text.find("tanh %x.bf16 : bf16[4]"), std::string::npos) << text;
  }
  EXPECT_EQ(s.compile(g).get(), plain.get());
}

// Session reads RLX_KERNEL_DISPATCH at each compile (CompileOptions no longer does when
// constructed): changing it compiles anew, and options that set dispatch ignore it.
TEST_F(SessionCache, RlxKernelDispatchIsPartOfTheKey) {
  Session s;
  Graph g("sm");
  g.set_outputs({g.softmax(g.input("x", DType::f32, Shape{2, 4}), -1)});
  auto plain = s.compile(g);
  auto count = [](const Graph& c, OpKind op) {
    int n = 0;
    for (const Node& node : c.nodes()) n += node.op == op;
    return n;
  };
  EXPECT_EQ(count(plain->compiled_graph(), OpKind::Softmax), 1);
  {
    EnvGuard env("RLX_KERNEL_DISPATCH", "force_common");
    auto common = s.compile(g);
    EXPECT_NE(common.get(), plain.get());
    EXPECT_EQ(count(common->compiled_graph(), OpKind::Softmax), 0);
    EXPECT_EQ(s.compile(g).get(), common.get());
    CompileOptions o;
    o.dispatch = DispatchOptions{};
    EXPECT_EQ(s.compile(g, o).get(), plain.get());  // explicit: the environment is not read
  }
  EXPECT_EQ(s.compile(g).get(), plain.get());
}

TEST_F(SessionCache, DevicesAreSeparateCaches) {
  FakeBackend& fake = fake_backend();
  fake.delay = std::chrono::milliseconds(0);
  int before = fake.compiles;
  Session s0(Device::parse("pjrt:0")), s1(Device::parse("pjrt:1"));
  Graph g = small_graph(Shape{2});
  auto a = s0.compile(g);
  auto b = s1.compile(g);
  EXPECT_NE(a.get(), b.get());
  EXPECT_EQ(s0.compile(g).get(), a.get());
  EXPECT_EQ(fake.compiles - before, 2);
  std::lock_guard<std::mutex> lock(fake.mu);
  ASSERT_GE(fake.devices.size(), 2u);
  EXPECT_EQ(fake.devices[fake.devices.size() - 2], Device::parse("pjrt:0"));
  EXPECT_EQ(fake.devices.back(), Device::parse("pjrt:1"));
}

TEST_F(SessionCache, LruEvictionAtCapacity) {
  Session s(Device::cpu(), SessionOptions{.cache_capacity = 2});
  Graph a = small_graph(Shape{1}), b = small_graph(Shape{2}), c = small_graph(Shape{3});
  auto ea = s.compile(a);
  auto eb = s.compile(b);
  EXPECT_EQ(s.compile(a).get(), ea.get());  // a is now the most recently used
  expect_stats(s, 1, 2, 0, 2);
  auto ec = s.compile(c);  // evicts b, the least recently used
  expect_stats(s, 1, 3, 1, 2);
  EXPECT_EQ(s.compile(a).get(), ea.get());
  EXPECT_EQ(s.compile(c).get(), ec.get());
  expect_stats(s, 3, 3, 1, 2);
  auto eb2 = s.compile(b);  // compiled again; evicts a
  EXPECT_NE(eb2.get(), eb.get());
  expect_stats(s, 3, 4, 2, 2);
  EXPECT_NE(s.compile(a).get(), ea.get());
  expect_stats(s, 3, 5, 3, 2);
  // An evicted executable stays valid for its holders.
  ea->set_param("w", Tensor::full(DType::f32, Shape{1}, 1.0));
  EXPECT_EQ(ea->run({{"x", Tensor(DType::f32, Shape{1})}})[0].get_f64(0), 1.0);
  s.clear_cache();
  expect_stats(s, 3, 5, 3, 0);
  s.compile(a);
  expect_stats(s, 3, 6, 3, 1);
}

TEST_F(SessionCache, CapacityZeroCachesNothing) {
  Session s(Device::cpu(), SessionOptions{.cache_capacity = 0});
  Graph g = small_graph(Shape{2});
  auto a = s.compile(g);
  auto b = s.compile(g);
  EXPECT_NE(a.get(), b.get());
  expect_stats(s, 0, 2, 0, 0);
}

TEST_F(SessionCache, CompileCacheSizeFromTheEnvironment) {
  {
    EnvGuard env("RLX_COMPILE_CACHE_SIZE", "1");
    Session s(Device::cpu(), SessionOptions{.cache_capacity = 10});
    s.compile(small_graph(Shape{1}));
    s.compile(small_graph(Shape{2}));
    expect_stats(s, 0, 2, 1, 1);
  }
  {
    EnvGuard env("RLX_COMPILE_CACHE_SIZE", "0");
    Session s;
    s.compile(small_graph(Shape{1}));
    expect_stats(s, 0, 1, 0, 0);
  }
  for (const char* bad : {"abc", "-1", "3x"}) {
    EnvGuard env("RLX_COMPILE_CACHE_SIZE", bad);
    EXPECT_EQ(
        error_of([] { Session s; }),
        "RLX_COMPILE_CACHE_SIZE must be a non-negative integer, found '" + std::string(bad) + "'");
  }
  {
    EnvGuard env("RLX_COMPILE_CACHE_SIZE", "");
    Session s(Device::cpu(), SessionOptions{.cache_capacity = 3});
    for (int64_t n = 1; n <= 4; ++n) s.compile(small_graph(Shape{n}));
    expect_stats(s, 0, 4, 1, 3);
  }
}

TEST_F(SessionCache, ConcurrentCompilesOfOneGraphShareOneCompilation) {
  FakeBackend& fake = fake_backend();
  fake.delay = std::chrono::milliseconds(200);
  int before = fake.compiles;
  Session s(Device::parse("pjrt"));
  Graph g = small_graph(Shape{5});
  constexpr int kThreads = 4;
  std::latch start(kThreads);
  std::vector<std::shared_ptr<Executable>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      got[static_cast<size_t>(t)] = s.compile(g);
    });
  for (std::thread& th : threads) th.join();
  fake.delay = std::chrono::milliseconds(0);
  for (const auto& e : got) EXPECT_EQ(e.get(), got[0].get());
  EXPECT_EQ(fake.compiles - before, 1);
  expect_stats(s, kThreads - 1, 1, 0, 1);
}

TEST_F(SessionCache, ConcurrentCompilesOfManyGraphs) {
  Session s;
  constexpr int kThreads = 4, kGraphs = 6;
  std::vector<Graph> graphs;
  for (int64_t k = 1; k <= kGraphs; ++k) graphs.push_back(small_graph(Shape{k, 3}));
  std::latch start(kThreads);
  std::vector<std::vector<std::shared_ptr<Executable>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int k = 0; k < kGraphs; ++k)
        got[static_cast<size_t>(t)].push_back(
            s.compile(graphs[static_cast<size_t>((k + t) % kGraphs)]));
    });
  for (std::thread& th : threads) th.join();
  expect_stats(s, kThreads * kGraphs - kGraphs, kGraphs, 0, kGraphs);
  for (int t = 0; t < kThreads; ++t) {
    for (int k = 0; k < kGraphs; ++k) {
      const Graph& g = graphs[static_cast<size_t>((k + t) % kGraphs)];
      Executable& exe = *got[static_cast<size_t>(t)][static_cast<size_t>(k)];
      EXPECT_EQ(&exe, s.compile(g).get());
      Shape shape = g.shape(g.outputs()[0]);
      TensorMap feeds{{"x", random_tensor(DType::f32, shape, 1)},
                      {"w", random_tensor(DType::f32, shape, 2)}};
      exe.set_param("w", feeds.at("w"));
      EXPECT_TRUE(testing::all_close(exe.run({{"x", feeds.at("x")}})[0], evaluate(g, feeds)[0],
                                     2e-6, 1e-6));
    }
  }
}

TEST_F(SessionCache, FailedCompileCachesNothing) {
  Session s;
  Graph g = small_graph(Shape{2});
  CompileOptions q;
  q.quantized_params["v"] = {QuantFormat::kQ8_0, -1};
  std::string message = "quantized_params: graph 'small' has no param 'v' (params: w)";
  EXPECT_EQ(error_of([&] { s.compile(g, q); }), message);
  EXPECT_EQ(error_of([&] { s.compile(g, q); }), message);  // tried again, not cached
  expect_stats(s, 0, 2, 0, 0);

  // A value too large for any arena: the memory plan's error.
  Graph huge("huge");
  huge.set_outputs({huge.neg(huge.input("x", DType::f64, Shape{int64_t{1} << 62}))});
  EXPECT_NE(error_of([&] { s.compile(huge); }).find("needs more than 2^63 - 1 bytes"),
            std::string::npos);
  expect_stats(s, 0, 3, 0, 0);

  // An op the backend cannot run under force_native: the legalization report names it.
  std::set<OpKind> claimed = s.backend().supported_ops();
  for (OpKind op : {OpKind::Softplus, OpKind::LeakyRelu, OpKind::GeluTanh, OpKind::Silu}) {
    if (claimed.count(op)) continue;
    Graph u("unclaimed");
    u.set_outputs({u.emit1(op, {u.input("x", DType::f32, Shape{3})})});
    CompileOptions native;
    native.dispatch = DispatchOptions{KernelDispatch::ForceNative, {}};
    std::string error = error_of([&] { s.compile(u, native); });
    EXPECT_NE(error.find("backend 'cpu' cannot run: " + std::string(op_name(op))),
              std::string::npos)
        << error;
    break;
  }
  EXPECT_EQ(s.cache_stats().size, 0u);
  // The session still works.
  EXPECT_EQ(s.compile(g).get(), s.compile(g).get());
}

TEST_F(SessionCache, ConcurrentWaitersShareAFailedCompile) {
  FakeBackend& fake = fake_backend();
  fake.delay = std::chrono::milliseconds(200);
  int before = fake.compiles;
  Session s(Device::parse("pjrt:0"));
  Graph bad("bad");
  bad.set_outputs({bad.neg(bad.input("x", DType::f32, Shape{2}))});
  constexpr int kThreads = 3;
  std::latch start(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      errors[static_cast<size_t>(t)] = error_of([&] { s.compile(bad); });
    });
  for (std::thread& th : threads) th.join();
  fake.delay = std::chrono::milliseconds(0);
  for (const std::string& e : errors) EXPECT_EQ(e, "fake: cannot compile graph @bad");
  EXPECT_EQ(fake.compiles - before, 1);
  EXPECT_EQ(s.cache_stats().size, 0u);
  EXPECT_EQ(error_of([&] { s.compile(bad); }), "fake: cannot compile graph @bad");
  EXPECT_EQ(fake.compiles - before, 2);
}

constexpr const char* kDeviceForms =
    "expected cpu, cuda, cuda:N, pjrt or pjrt:N, or a pjrt device set pjrt:A-B, pjrt:I,J,... or "
    "pjrt:all";

TEST(Devices, ParseAndPrint) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cpu:0"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), (Device{DeviceKind::Cuda, 0}));
  EXPECT_EQ(Device::parse("cuda:3"), (Device{DeviceKind::Cuda, 3}));
  EXPECT_EQ(Device::parse("pjrt:12"), (Device{DeviceKind::Pjrt, 12}));
  EXPECT_EQ(Device::parse("cuda:3").to_string(), "cuda:3");
  EXPECT_EQ(Device::parse("cuda").to_string(), "cuda:0");
  EXPECT_EQ(Device::cpu().to_string(), "cpu");
  for (const char* bad : {"", "gpu", "CPU", "cpu:1", "cuda:", "cuda:-1", "cuda:x", "cuda:1:2",
                          "cuda:1 ", " cpu", "pjrt:99999999999"}) {
    EXPECT_EQ(error_of([&] { Device::parse(bad); }),
              "unknown device '" + std::string(bad) + "'; " + kDeviceForms);
  }
}

// Data-parallel pjrt device sets: ranges, lists, all; a set of one is that device.
TEST(Devices, PjrtDeviceSets) {
  Device range = Device::parse("pjrt:0-3");
  EXPECT_EQ(range.kind, DeviceKind::Pjrt);
  EXPECT_EQ(range.index, 0);
  EXPECT_EQ(range.devices, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(range.is_set());
  EXPECT_EQ(range.to_string(), "pjrt:0-3");
  EXPECT_EQ(Device::parse("pjrt:0,2").devices, (std::vector<int>{0, 2}));
  EXPECT_EQ(Device::parse("pjrt:0,2").to_string(), "pjrt:0,2");
  EXPECT_EQ(Device::parse("pjrt:3,1").devices, (std::vector<int>{3, 1}));  // mesh order kept
  EXPECT_EQ(Device::parse("pjrt:3,1").index, 3);
  EXPECT_EQ(Device::parse("pjrt:4-5,0").devices, (std::vector<int>{4, 5, 0}));
  EXPECT_EQ(Device::parse("pjrt:1,2,3").to_string(), "pjrt:1-3");  // one canonical form
  EXPECT_EQ(Device::parse("pjrt:1,2,3"), Device::parse("pjrt:1-3"));
  Device all = Device::parse("pjrt:all");
  EXPECT_TRUE(all.all_devices);
  EXPECT_TRUE(all.is_set());
  EXPECT_EQ(all.to_string(), "pjrt:all");
  EXPECT_EQ(Device::parse("pjrt:2-2"), (Device{DeviceKind::Pjrt, 2}));
  EXPECT_FALSE(Device::parse("pjrt:2-2").is_set());
  for (const std::string text : {"pjrt:0-3", "pjrt:0,2", "pjrt:all", "pjrt:7,1-2"})
    EXPECT_EQ(Device::parse(Device::parse(text).to_string()), Device::parse(text)) << text;
  // The existing forms are unchanged.
  EXPECT_FALSE(Device::parse("pjrt:1").is_set());
  EXPECT_EQ(Device::parse("pjrt").to_string(), "pjrt:0");
}

TEST(Devices, BadDeviceSetsNameTheTextAndTheForms) {
  for (const char* bad :
       {"pjrt:", "pjrt:0-", "pjrt:-3", "pjrt:0--1", "pjrt:a-b", "pjrt:0,", "pjrt:,0", "pjrt:0,,1",
        "pjrt:All", "pjrt:all,0", "pjrt:0-3 ", "cuda:0-3", "cuda:all", "cpu:0,1", "cpu:all"})
    EXPECT_EQ(error_of([&] { Device::parse(bad); }),
              "unknown device '" + std::string(bad) + "'; " + kDeviceForms);
  EXPECT_EQ(error_of([] { Device::parse("pjrt:3-1"); }),
            "unknown device 'pjrt:3-1': the range 3-1 is empty; " + std::string(kDeviceForms));
  EXPECT_EQ(
      error_of([] { Device::parse("pjrt:0,1,0"); }),
      "unknown device 'pjrt:0,1,0': device pjrt:0 is listed twice; " + std::string(kDeviceForms));
  EXPECT_EQ(
      error_of([] { Device::parse("pjrt:0-2,2"); }),
      "unknown device 'pjrt:0-2,2': device pjrt:2 is listed twice; " + std::string(kDeviceForms));
  EXPECT_EQ(error_of([] { Device::parse("pjrt:0-99999"); }),
            "unknown device 'pjrt:0-99999': more than 4096 devices; " + std::string(kDeviceForms));
}

TEST(Devices, BackendRegistry) {
  EXPECT_EQ(backend_for(DeviceKind::Cpu)->name(), "cpu");
  std::vector<Device> devices = available_devices();
  EXPECT_NE(std::find(devices.begin(), devices.end(), Device::cpu()), devices.end());
  std::string message = error_of([] { backend_for(DeviceKind::Cuda); });
  EXPECT_EQ(message.rfind("no backend for device 'cuda' (registered: cpu", 0), 0u) << message;
  EXPECT_EQ(error_of([] { Session s(Device::parse("cuda:1")); }), message);
  EXPECT_EQ(error_of([] { register_backend(nullptr); }), "register_backend: null backend");
  // The CPU backend claims every primitive, control flow included (docs/runtime.md "Control
  // flow on the CPU"); a composite only with a native kernel.
  std::set<OpKind> ops = backend_for(DeviceKind::Cpu)->supported_ops();
  for (int k = 0; k < kNumOps; ++k) {
    OpKind op = static_cast<OpKind>(k);
    if (!op_info(op).has(kComposite)) {
      EXPECT_EQ(ops.count(op), 1u) << op_name(op);
    }
  }
  EXPECT_EQ(
      error_of([&] {
        backend_for(DeviceKind::Cpu)->compile(small_graph(Shape{1}), {}, Device::parse("cuda:0"));
      }),
      "cpu backend cannot compile for device 'cuda:0'");
}

}  // namespace
}  // namespace rlx
