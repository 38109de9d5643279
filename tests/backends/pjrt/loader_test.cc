// The plugin loader and its errors: bad path, not a plugin, wrong API version, XLA compile
// errors, unsupported ops (legalization report), device selection.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

#include "pjrt_client.h"
#include "pjrt_test_util.h"
#include "rlx/ir/error.h"

namespace rlx::pjrt::testing {
namespace {

// The message of the rlx::Error `f` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Graph small_graph() {
  Graph g("small");
  g.set_outputs({g.exp(g.input("x", DType::f32, Shape{2}))});
  return g;
}

const Device kPjrt0{DeviceKind::Pjrt, 0};

TEST(PjrtLoader, MissingFileNamesThePath) {
  std::string msg = error_of(
      [] { make_pjrt_backend("/nonexistent/libfoo_pjrt.so")->compile(small_graph(), {}, kPjrt0); });
  EXPECT_NE(msg.find("cannot load plugin '/nonexistent/libfoo_pjrt.so'"), std::string::npos) << msg;
}

TEST(PjrtLoader, NoPluginConfiguredSaysHowToSetOne) {
  // Clear the three variables for this test and restore them afterwards.
  std::vector<std::pair<const char*, std::optional<std::string>>> saved;
  for (const char* var : {"RLX_PJRT_PLUGIN", "TPU_LIBRARY_PATH", "LIBTPU_PATH"}) {
    const char* v = std::getenv(var);
    saved.push_back({var, v ? std::optional<std::string>(v) : std::nullopt});
    ::unsetenv(var);
  }
  EXPECT_EQ(plugin_path_from_env(), std::nullopt);
  std::string msg = error_of([] { make_pjrt_backend()->compile(small_graph(), {}, kPjrt0); });
  ::setenv("LIBTPU_PATH", "/opt/libtpu.so", 1);
  EXPECT_EQ(plugin_path_from_env(), "/opt/libtpu.so");
  ::unsetenv("LIBTPU_PATH");
  for (const auto& [var, value] : saved)
    if (value) ::setenv(var, value->c_str(), 1);
  EXPECT_NE(msg.find("pjrt: no PJRT plugin: set RLX_PJRT_PLUGIN"), std::string::npos) << msg;
}

TEST(PjrtLoader, NonPluginLibraryIsRejected) {
  // libc is a valid shared library without GetPjrtApi.
  std::string msg = error_of([] { describe_plugin("/lib/x86_64-linux-gnu/libc.so.6"); });
  EXPECT_NE(msg.find("is not a PJRT plugin (no symbol GetPjrtApi)"), std::string::npos) << msg;
}

TEST(PjrtLoader, WrongApiVersionNamesBothVersionsAndTheFile) {
  std::string msg = error_of([] { describe_plugin(RLX_PJRT_FAKE_PLUGIN); });
  EXPECT_NE(msg.find("implements PJRT C API 99.0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rlx is built against 0.33"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fake_plugin"), std::string::npos) << msg;
}

TEST(PjrtLoader, LoweredPrimitivePassesLegalizationAndFailsOnlyAtLoading) {
  // top_k was the last primitive without a lowering; now every op of ops.def lowers or
  // decomposes, so compile gets past legalization (no "cannot run" report) and fails only when
  // it needs the plugin, naming the missing file.
  Graph g("topk");
  g.set_outputs({g.top_k(g.input("x", DType::f32, Shape{2, 5}), 2).first});
  std::string msg = error_of([&] { make_pjrt_backend("/nonexistent.so")->compile(g, {}, kPjrt0); });
  EXPECT_EQ(msg.find("cannot run"), std::string::npos) << msg;
  EXPECT_NE(msg.find("/nonexistent.so"), std::string::npos) << msg;
}

TEST(PjrtLoader, DescribesTheRealPlugin) {
  RLX_REQUIRE_PJRT_PLUGIN();
  PluginInfo info = describe_plugin(test_plugin());
  EXPECT_EQ(info.api_major, 0);
  EXPECT_GE(info.api_minor, 33);
  EXPECT_FALSE(info.platform.empty());
  ASSERT_FALSE(info.devices.empty());
  for (size_t i = 0; i < info.devices.size(); ++i) {
    const DeviceInfo& d = info.devices[i];
    EXPECT_EQ(d.index, static_cast<int>(i));
    EXPECT_FALSE(d.kind.empty());
    EXPECT_EQ(d.platform, info.platform);
    EXPECT_EQ(d.to_string().rfind("pjrt:" + std::to_string(i) + "  id ", 0), 0u) << d.to_string();
  }
}

TEST(PjrtLoader, MissingDeviceIsAnError) {
  RLX_REQUIRE_PJRT_PLUGIN();
  std::string msg = error_of([] {
    test_backend()->compile(small_graph(), {}, Device{DeviceKind::Pjrt, 4096});
  });
  EXPECT_NE(msg.find("device 'pjrt:4096' does not exist"), std::string::npos) << msg;
}

// Every addressable device runs a program compiled for it (the compile options carry its
// device assignment; without one XLA compiled for pjrt:0 and refused to execute elsewhere:
// "ExecuteShard attempted to execute on device id 3 which is not addressable").
TEST(PjrtLoader, EveryDeviceRunsItsProgram) {
  RLX_REQUIRE_PJRT_PLUGIN();
  const Tensor x = Tensor::from_doubles(DType::f32, Shape{2}, std::vector<double>{0.5, -1});
  const size_t n = describe_plugin(test_plugin()).devices.size();
  ASSERT_GE(n, 2u);
  for (size_t d = 0; d < n; ++d) {
    std::unique_ptr<Executable> exe =
        test_backend()->compile(small_graph(), {}, Device{DeviceKind::Pjrt, static_cast<int>(d)});
    std::vector<Tensor> y = exe->run({{"x", x}});
    EXPECT_FLOAT_EQ(static_cast<float>(y[0].get_f64(0)), std::exp(0.5f)) << "pjrt:" << d;
    EXPECT_FLOAT_EQ(static_cast<float>(y[0].get_f64(1)), std::exp(-1.0f)) << "pjrt:" << d;
  }
}

TEST(PjrtLoader, XlaCompileErrorCarriesXlaDiagnostic) {
  RLX_REQUIRE_PJRT_PLUGIN();
  // A malformed module straight to the plugin: XLA's parser diagnostic must come through.
  auto client = std::make_shared<Client>(Plugin::load(test_plugin()));
  std::string msg = error_of([&] {
    LoadedProgram(client,
                  "module @bad { func.func public @main(%arg0: tensor<2xf32>) -> "
                  "(tensor<3xf32>) { return %arg0 : tensor<2xf32> } }");
  });
  EXPECT_NE(msg.find("pjrt: compile failed: "), std::string::npos) << msg;
  EXPECT_GT(msg.size(), std::string("pjrt: compile failed: ").size() + 10) << msg;
}

}  // namespace
}  // namespace rlx::pjrt::testing
