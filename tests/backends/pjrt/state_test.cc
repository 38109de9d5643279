// Executable state (CompileOptions::state) on the XLA plugin: the shared cases of
// common/state_cases.h, the aliasing attribute of the emitted module, that the plugin really
// donates a state argument (its buffer is deleted by the run, the output takes it), and a
// Llama decoder's KV-cache decode on pjrt:0 against its full forward there and the CPU's
// greedy tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/scoped_env.h"
#include "common/state_cases.h"
#include "common/tiny_llama.h"
#include "pjrt_client.h"
#include "pjrt_test_util.h"
#include "rlx/models/llama.h"

namespace rlx::pjrt {
namespace {

std::unique_ptr<Executable> pjrt_compile(const Graph& g, const CompileOptions& o) {
  CompileOptions f32 = o;
  f32.precision = PrecisionPolicy{PrecisionMode::AlwaysF32, {}};
  return testing::test_backend()->compile(g, f32, Device::parse("pjrt:0"));
}

TEST(PjrtStateTest, RunningSum) {
  RLX_REQUIRE_PJRT_PLUGIN();
  rlx::testing::check_running_sum(pjrt_compile);
}

TEST(PjrtStateTest, CacheWrite) {
  RLX_REQUIRE_PJRT_PLUGIN();
  rlx::testing::check_cache_write(pjrt_compile);
}

TEST(PjrtStateTest, Errors) {
  RLX_REQUIRE_PJRT_PLUGIN();
  rlx::testing::check_state_errors(pjrt_compile);
}

// The state argument carries tf.aliasing_output (jax's donation) naming its output's index, and
// the XLA CPU plugin honours it: running the module deletes the donated buffer.
TEST(PjrtStateTest, StateArgumentIsDonated) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g = rlx::testing::cache_write_graph(8);
  std::unique_ptr<Executable> exe = pjrt_compile(g, rlx::testing::cache_write_options());
  const std::string module = exe->kernels().program;
  EXPECT_NE(module.find("%arg0: tensor<1x2x8x4xf32> {tf.aliasing_output = 0 : i32}"),
            std::string::npos)
      << module;

  auto client = std::make_shared<Client>(Plugin::load(testing::test_plugin()));
  std::string text = emit_stablehlo(exe->compiled_graph(), {{g.find("cache"), 0}});
  LoadedProgram program(client, text);
  auto cache =
      client->upload(Tensor::full(DType::f32, Shape{1, 2, 8, 4}, 1.0), client->devices().front());
  auto row =
      client->upload(Tensor::full(DType::f32, Shape{1, 2, 1, 4}, 5.0), client->devices().front());
  auto pos = client->upload(Tensor::from_ints(DType::i32, Shape{}, std::vector<int64_t>{2}),
                            client->devices().front());
  auto outs = program.execute({cache->raw(), row->raw(), pos->raw()}, 2, nullptr);
  EXPECT_TRUE(cache->is_deleted()) << "the plugin did not take the donated state buffer";
  EXPECT_FALSE(row->is_deleted());
  Tensor next(DType::f32, Shape{1, 2, 8, 4});
  outs[0]->download(next);
  EXPECT_EQ(next.get_f64(2 * 4), 5.0);
  EXPECT_EQ(next.get_f64(0), 1.0);
}

// The tiny llama file of tests/common/tiny_llama.h decoded over its KV cache on the plugin:
// each step's logits equal the plugin's own full-sequence forward at that position, and the
// greedy tokens equal the CPU backend's.
TEST(PjrtStateTest, LlamaDecodeOnThePlugin) {
  RLX_REQUIRE_PJRT_PLUGIN();
  rlx::testing::ScopedEnv env;
  env.set("RLX_PJRT_PLUGIN", testing::test_plugin());
  const std::string path = rlx::testing::write(rlx::testing::tiny_file(), "pjrt_llama.gguf");
  models::LlamaOptions o;
  o.ctx = 16;
  o.device = Device::parse("pjrt:0");
  models::LlamaModel xla = models::LlamaModel::load(path, o);
  o.device = Device::cpu();
  models::LlamaModel cpu = models::LlamaModel::load(path, o);
  const std::vector<int32_t> prompt{3, 17, 5, 30, 8};
  const int64_t V = rlx::testing::kVocab;

  Tensor full = xla.logits(prompt, 1, 5);
  models::LlamaStep step = xla.append(std::span(prompt).first(3), 1, 3, {}, true);
  for (size_t t = 2; t < prompt.size(); ++t) {
    if (t > 2) step = xla.append(std::span(prompt).subspan(t, 1), 1, 1, {}, true);
    const float* want = full.data_as<float>() + static_cast<int64_t>(t) * V;
    double worst = 0;
    for (int64_t i = 0; i < V; ++i)
      worst = std::max(worst, std::fabs(double(step.logits.data_as<float>()[i]) - want[i]));
    EXPECT_LE(worst, 1e-4) << "position " << t;
  }

  models::GenerateOptions g;
  g.max_tokens = 8;
  models::GenerateResult on_xla = xla.generate(prompt, g), on_cpu = cpu.generate(prompt, g);
  EXPECT_EQ(on_xla.ids, on_cpu.ids);
  EXPECT_EQ(on_xla.ids.size(), 8u);
}

}  // namespace
}  // namespace rlx::pjrt
