// The two sharding forms of SPMD modules (GSPMD's mhlo.sharding and Shardy's sdy.sharding):
// their texts against what jax 0.4.38 emits, the choice (config, RLX_PJRT_SHARDING, detection
// with a fallback), the compile cache key, and a golden 2-layer MLP train step on a 2x2 mesh in
// both forms, equal to one device.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <random>
#include <set>

#include "backend_internal.h"
#include "common/scoped_env.h"
#include "common/test_util.h"
#include "compile_cache.h"
#include "pjrt_client.h"
#include "pjrt_test_util.h"
#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/backends/pjrt/sharding.h"
#include "rlx/ir/error.h"
#include "rlx/runtime/backend_core.h"
#include "rlx/train/loss.h"
#include "rlx/train/optimizer.h"

namespace rlx::pjrt {
namespace {

using rlx::testing::ScopedEnv;
using testing::all_close;
using testing::f32_options;

using rlx::testing::error_of;

const Mesh kMesh2x2({{"data", 2}, {"model", 2}});

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The texts jax 0.4.38 writes with jax_use_shardy_partitioner for
// NamedSharding(Mesh(devices.reshape(2, 2), ('data', 'model')), spec).
TEST(PjrtShardingForm, ShardyTextsAsJaxWritesThem) {
  EXPECT_EQ(sdy_mesh(kMesh2x2), "sdy.mesh @mesh = <[\"data\"=2, \"model\"=2]>");
  EXPECT_EQ(sdy_mesh(Mesh({{"seq", 4}})), "sdy.mesh @mesh = <[\"seq\"=4]>");
  // Another device order is the compile options' device assignment, not the mesh's.
  EXPECT_EQ(sdy_mesh(Mesh({{"data", 2}, {"model", 2}}, {3, 2, 1, 0})), sdy_mesh(kMesh2x2));
  Shape s{8, 16};
  EXPECT_EQ(sdy_sharding(PartitionSpec({"data"}), s), "#sdy.sharding<@mesh, [{\"data\"}, {}]>");
  EXPECT_EQ(sdy_sharding(PartitionSpec({"", "model"}), s),
            "#sdy.sharding<@mesh, [{}, {\"model\"}]>");
  EXPECT_EQ(sdy_sharding(PartitionSpec({"data", "model"}), s),
            "#sdy.sharding<@mesh, [{\"data\"}, {\"model\"}]>");
  EXPECT_EQ(sdy_sharding(PartitionSpec::of({{"data", "model"}}), s),
            "#sdy.sharding<@mesh, [{\"data\", \"model\"}, {}]>");
  EXPECT_EQ(sdy_sharding(PartitionSpec::of({{"model", "data"}}), s),
            "#sdy.sharding<@mesh, [{\"model\", \"data\"}, {}]>");
  EXPECT_EQ(sdy_sharding(PartitionSpec(), s), "#sdy.sharding<@mesh, [{}, {}]>");
  EXPECT_EQ(sdy_sharding(PartitionSpec(), Shape{}), "#sdy.sharding<@mesh, []>");
  EXPECT_EQ(error_of([] {
              Mesh({{"a\"b", 2}});
            }),
            "Mesh: axis name 'a\"b' has a quote, backslash or control character (axis names are "
            "written into the compiled module)");
}

TEST(PjrtShardingForm, ConfigThenEnvironmentChooseTheForm) {
  ScopedEnv env;
  env.set("RLX_PJRT_SHARDING", std::nullopt);
  EXPECT_EQ(sharding_form_from_env(), ShardingForm::Auto);
  EXPECT_EQ(requested_sharding_form(ShardingForm::Auto), ShardingForm::Auto);
  EXPECT_EQ(requested_sharding_form(ShardingForm::Gspmd), ShardingForm::Gspmd);
  env.set("RLX_PJRT_SHARDING", "auto");
  EXPECT_EQ(sharding_form_from_env(), ShardingForm::Auto);
  env.set("RLX_PJRT_SHARDING", "");
  EXPECT_EQ(sharding_form_from_env(), ShardingForm::Auto);
  env.set("RLX_PJRT_SHARDING", "gspmd");
  EXPECT_EQ(requested_sharding_form(ShardingForm::Auto), ShardingForm::Gspmd);
  EXPECT_EQ(requested_sharding_form(ShardingForm::Shardy), ShardingForm::Shardy);  // config wins
  env.set("RLX_PJRT_SHARDING", "shardy");
  EXPECT_EQ(requested_sharding_form(ShardingForm::Auto), ShardingForm::Shardy);
  env.set("RLX_PJRT_SHARDING", "sdy");
  EXPECT_EQ(error_of([] { sharding_form_from_env(); }),
            "RLX_PJRT_SHARDING must be 'gspmd', 'shardy' or 'auto', got 'sdy'");
  // lower_to_stablehlo_sharded (no plugin) writes the requested form; Auto is Shardy.
  Graph g("dense");
  g.set_outputs(
      {g.matmul(g.input("x", DType::f32, Shape{8, 16}), g.param("w", DType::f32, Shape{16, 4}))});
  ShardingConfig c{kMesh2x2, {{"x", PartitionSpec({"data"})}}, {}, {}};
  EXPECT_NE(error_of([&] { lower_to_stablehlo_sharded(g, c); }).find("RLX_PJRT_SHARDING"),
            std::string::npos);
  env.set("RLX_PJRT_SHARDING", "gspmd");
  EXPECT_NE(lower_to_stablehlo_sharded(g, c).find("mhlo.sharding"), std::string::npos);
  env.set("RLX_PJRT_SHARDING", std::nullopt);
  EXPECT_NE(lower_to_stablehlo_sharded(g, c).find("sdy.sharding"), std::string::npos);
  c.form = ShardingForm::Gspmd;
  EXPECT_EQ(lower_to_stablehlo_sharded(g, c).find("sdy."), std::string::npos);
}

// Detection under Auto: Shardy first; a plugin that rejects it gets GSPMD, and the client
// remembers the form that compiled, so later compiles try only that.
TEST(PjrtShardingForm, AutoTriesShardyThenGspmdAndRemembers) {
  std::vector<ShardingForm> tried;
  auto accepts = [&](std::set<ShardingForm> ok) {
    return [&tried, ok](ShardingForm f) {
      tried.push_back(f);
      if (ok.count(f) == 0) throw Error(std::string("rejects ") + sharding_form_name(f));
    };
  };
  using F = ShardingForm;
  std::atomic<F> accepted{F::Auto};
  EXPECT_EQ(compile_in_sharding_form(F::Auto, accepted, accepts({F::Shardy, F::Gspmd})), F::Shardy);
  EXPECT_EQ(tried, (std::vector<F>{F::Shardy}));
  EXPECT_EQ(accepted.load(), F::Shardy);

  tried.clear();
  accepted = F::Auto;
  EXPECT_EQ(compile_in_sharding_form(F::Auto, accepted, accepts({F::Gspmd})), F::Gspmd);
  EXPECT_EQ(tried, (std::vector<F>{F::Shardy, F::Gspmd}));
  EXPECT_EQ(accepted.load(), F::Gspmd);
  tried.clear();
  EXPECT_EQ(compile_in_sharding_form(F::Auto, accepted, accepts({F::Gspmd})), F::Gspmd);
  EXPECT_EQ(tried, (std::vector<F>{F::Gspmd}));  // remembered: Shardy is not tried again

  // A forced form is compiled as is, whatever was remembered, and records nothing.
  tried.clear();
  EXPECT_EQ(compile_in_sharding_form(F::Shardy, accepted, accepts({F::Shardy})), F::Shardy);
  EXPECT_EQ(tried, (std::vector<F>{F::Shardy}));
  EXPECT_EQ(accepted.load(), F::Gspmd);
  EXPECT_EQ(error_of([&] { compile_in_sharding_form(F::Gspmd, accepted, accepts({})); }),
            "rejects gspmd");

  // Both fail (e.g. a module XLA refuses in any form): both errors, nothing recorded.
  tried.clear();
  accepted = F::Auto;
  EXPECT_EQ(error_of([&] { compile_in_sharding_form(F::Auto, accepted, accepts({})); }),
            "rejects gspmd\n(the Shardy form, tried first, failed too: rejects shardy)");
  EXPECT_EQ(accepted.load(), F::Auto);
}

// The compile options of a Shardy compile add use_shardy_partitioner (field 19 of
// xla.ExecutableBuildOptionsProto, tag 19 << 3 = 0x98 0x01, value 1).
TEST(PjrtShardingForm, ShardyCompileOptionsSetUseShardyPartitioner) {
  std::string gspmd = spmd_compile_options({0, 1}), shardy = spmd_compile_options({0, 1}, true);
  EXPECT_EQ(shardy.size(), gspmd.size() + 3);
  EXPECT_EQ(shardy.substr(shardy.size() - 3), std::string("\x98\x01\x01", 3));
  EXPECT_EQ(static_cast<unsigned char>(shardy[1]), static_cast<unsigned char>(gspmd[1]) + 3);
}

// The cache key names the sharding form: the same module text and options compiled under
// another form are another entry.
TEST(PjrtShardingForm, CacheKeyNamesTheForm) {
  RLX_REQUIRE_PJRT_PLUGIN();
  auto client = std::make_shared<Client>(Plugin::load(testing::test_plugin()));
  const std::string options = spmd_compile_options({0, 1});
  const std::string none = compile_cache_key(*client, "module @m {}", options);
  const std::string gspmd = compile_cache_key(*client, "module @m {}", options, "gspmd");
  const std::string shardy = compile_cache_key(*client, "module @m {}", options, "shardy");
  EXPECT_NE(none.find("\nsharding_form none\n"), std::string::npos) << none;
  EXPECT_NE(gspmd.find("\nsharding_form gspmd\n"), std::string::npos) << gspmd;
  EXPECT_NE(shardy.find("\nsharding_form shardy\n"), std::string::npos) << shardy;
  EXPECT_NE(compile_cache_entry_path("d", gspmd), compile_cache_entry_path("d", shardy));
  EXPECT_NE(compile_cache_entry_path("d", none), compile_cache_entry_path("d", gspmd));
}

// Switching forms with the persistent cache on compiles and stores each form once; a repeat
// loads its own form's entry (the kernel report still names it), never the other's.
TEST(PjrtShardingForm, CacheKeepsOneEntryPerForm) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (describe_plugin(testing::test_plugin()).devices.size() < 4)
    GTEST_SKIP() << "needs a plugin with 4 devices";
  rlx::testing::TempDir dir;
  ScopedEnv env;
  env.set("RLX_CACHE_DIR", dir.path().string());
  Graph g("dense");
  g.set_outputs(
      {g.matmul(g.input("x", DType::f32, Shape{8, 16}), g.param("w", DType::f32, Shape{16, 4}))});
  auto compile = [&](ShardingForm form) {
    ShardingConfig c{kMesh2x2, {{"x", PartitionSpec({"data"})}}, {}, {}, form};
    return make_pjrt_spmd_backend(c, testing::test_plugin())
        ->compile(g, f32_options(), Device::parse("pjrt:0"))
        ->kernels()
        .program;
  };
  const CompileCacheStats before = compile_cache_stats();
  compile(ShardingForm::Gspmd);
  compile(ShardingForm::Shardy);
  CompileCacheStats s = compile_cache_stats();
  EXPECT_EQ(s.misses - before.misses, 2);
  EXPECT_EQ(s.stores - before.stores, 2);
  EXPECT_EQ(s.hits - before.hits, 0);
  int entries = 0, shardy_keys = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "pjrt")) {
    ++entries;
    shardy_keys += read_file(e.path()).find("\nsharding_form shardy\n") != std::string::npos;
  }
  EXPECT_EQ(entries, 2);
  EXPECT_EQ(shardy_keys, 1);
  EXPECT_NE(compile(ShardingForm::Shardy).find("shardings in Shardy form"), std::string::npos);
  EXPECT_NE(compile(ShardingForm::Gspmd).find("shardings in GSPMD form"), std::string::npos);
  s = compile_cache_stats();
  EXPECT_EQ(s.hits - before.hits, 2);
  EXPECT_EQ(s.misses - before.misses, 2);
  EXPECT_EQ(s.rejected - before.rejected, 0);
}

// ---- A 2-layer MLP train step (forward, mean squared error, vjp, SGD with momentum 0.9) on
// the 2x2 mesh

Graph mlp_loss() {
  Graph g("mlp_train");
  Value x = g.input("x", DType::f32, Shape{8, 4});
  Value t = g.input("target", DType::f32, Shape{8, 2});
  Value w1 = g.param("w1", DType::f32, Shape{4, 8});
  Value b1 = g.param("b1", DType::f32, Shape{8});
  Value w2 = g.param("w2", DType::f32, Shape{8, 2});
  Value b2 = g.param("b2", DType::f32, Shape{2});
  Value h = g.relu(g.add(g.matmul(x, w1), b1));
  g.set_outputs({train::mse_loss(g, g.add(g.matmul(h, w2), b2), t)});
  return g;
}

Graph train_step() {
  return train::build_train_step(mlp_loss(), {"w1", "b1", "w2", "b2"}, train::Sgd());
}

// Batch on "data", w1 and its momentum (and their updates) by columns on "model"; everything
// else replicated.
ShardingConfig train_sharding(const Graph& step, ShardingForm form) {
  // Outputs: loss, w1', b1', w2', b2', then the momenta in the same order.
  std::vector<IoSpec> outs = io_specs_of(step).outputs;
  const PartitionSpec columns({"", "model"});
  return {kMesh2x2,
          {{"x", PartitionSpec({"data"})}, {"target", PartitionSpec({"data"})}},
          {{"w1", columns}, {train::state_name("w1", "momentum"), columns}},
          {{outs.at(1).name, columns}, {outs.at(5).name, columns}},
          form};
}

// The committed module text of each form (tests/backends/pjrt/golden/). RLX_PRINT_GOLDEN=1
// prints the current text; RLX_WRITE_GOLDEN=DIR writes it to DIR/<file>.
TEST(PjrtShardingForm, GoldenMlpTrainStepModules) {
  Graph step = train_step();
  std::vector<std::string> bodies;  // each module after @main's signature
  for (auto [form, file] : {std::pair{ShardingForm::Gspmd, "mlp_train_step.gspmd.mlir"},
                            std::pair{ShardingForm::Shardy, "mlp_train_step.shardy.mlir"}}) {
    std::string got = lower_to_stablehlo_sharded(step, train_sharding(step, form), f32_options());
    if (std::getenv("RLX_PRINT_GOLDEN") != nullptr) std::cout << got;
    if (const char* dir = std::getenv("RLX_WRITE_GOLDEN"))
      std::ofstream(std::filesystem::path(dir) / file, std::ios::binary) << got;
    std::filesystem::path golden =
        std::filesystem::path(RLX_TEST_DATA_DIR) / "backends" / "pjrt" / "golden" / file;
    EXPECT_EQ(got, read_file(golden)) << file;
    // Every argument and result of @main carries a sharding of this form.
    size_t at = got.find("func.func public @main(");
    std::string sig = got.substr(at, got.find('\n', at) - at);
    const std::string attr =
        form == ShardingForm::Shardy ? "sdy.sharding = #sdy.sharding<@mesh" : "mhlo.sharding = \"";
    size_t count = 0;
    for (size_t p = sig.find(attr); p != std::string::npos; p = sig.find(attr, p + 1)) ++count;
    EXPECT_EQ(count, step.inputs().size() + step.params().size() + step.outputs().size()) << sig;
    bodies.push_back(got.substr(got.find('\n', at)));
  }
  EXPECT_EQ(bodies[0], bodies[1]);  // the form changes the annotations only
}

// One step of the sharded program in each form equals one device's (loss, the four new params
// and their momenta); prints the compile time of each.
TEST(PjrtShardingForm, MlpTrainStepEqualsOneDeviceInBothForms) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (describe_plugin(testing::test_plugin()).devices.size() < 4)
    GTEST_SKIP() << "needs a plugin with 4 devices";
  Graph step = train_step();
  std::mt19937 gen(17);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  TensorMap feeds;
  for (const std::vector<int32_t>& leaves : {step.inputs(), step.params()})
    for (int32_t id : leaves) {
      const Node& n = step.node(id);
      Tensor t(n.results[0].dtype, n.results[0].shape);
      for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = u(gen);
      feeds.emplace(n.name, std::move(t));
    }
  feeds[train::kStepInput] = Tensor::full(DType::f32, Shape{}, 1.0);
  feeds[train::kLrInput] = Tensor::full(DType::f32, Shape{}, 0.1);
  auto run = [&](Backend& backend, double* compile_ms) {
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Executable> exe = backend.compile(step, f32_options(), Device::parse("pjrt:0"));
    if (compile_ms != nullptr)
      *compile_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    TensorMap inputs;
    for (int32_t id : step.params())
      exe->set_param(step.node(id).name, feeds.at(step.node(id).name));
    for (int32_t id : step.inputs())
      inputs.emplace(step.node(id).name, feeds.at(step.node(id).name));
    return std::make_pair(exe->run(inputs), exe->kernels().program);
  };
  std::vector<Tensor> want = run(*testing::test_backend(), nullptr).first;
  ASSERT_EQ(want.size(), 9u);
  for (ShardingForm form : {ShardingForm::Gspmd, ShardingForm::Shardy}) {
    auto backend = make_pjrt_spmd_backend(train_sharding(step, form), testing::test_plugin());
    double ms = 0;
    auto [got, program] = run(*backend, &ms);
    const std::string name = sharding_form_name(form);
    EXPECT_NE(program.find(form == ShardingForm::Shardy ? "shardings in Shardy form"
                                                        : "shardings in GSPMD form"),
              std::string::npos)
        << program.substr(0, 200);
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      double err = 0;
      EXPECT_TRUE(all_close(got[i], want[i], testing::kF32Tol, &err)) << name << " output " << i;
      worst = std::max(worst, err);
    }
    std::cout << "[ train step ] " << name << ": compile " << ms << " ms, max |err| vs one device "
              << worst << "\n";
  }
}

// With nothing forced, the installed plugin compiles the Shardy form (the kernel report says
// which), and RLX_PJRT_SHARDING=gspmd forces the other.
TEST(PjrtShardingForm, AutoOnTheInstalledPluginAndForcedByEnvironment) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (describe_plugin(testing::test_plugin()).devices.size() < 4)
    GTEST_SKIP() << "needs a plugin with 4 devices";
  Graph step = train_step();
  ScopedEnv env;
  env.set("RLX_PJRT_SHARDING", std::nullopt);
  auto backend =
      make_pjrt_spmd_backend(train_sharding(step, ShardingForm::Auto), testing::test_plugin());
  std::string auto_program =
      backend->compile(step, f32_options(), Device::parse("pjrt:0"))->kernels().program;
  std::cout << "[ auto ] " << auto_program.substr(0, auto_program.find('\n')) << "\n";
  EXPECT_NE(auto_program.find("shardings in Shardy form"), std::string::npos);
  EXPECT_NE(auto_program.find("sdy.mesh @mesh"), std::string::npos);
  env.set("RLX_PJRT_SHARDING", "gspmd");
  std::string forced =
      backend->compile(step, f32_options(), Device::parse("pjrt:0"))->kernels().program;
  EXPECT_NE(forced.find("shardings in GSPMD form"), std::string::npos);
  EXPECT_EQ(forced.find("sdy."), std::string::npos);
}

}  // namespace
}  // namespace rlx::pjrt
