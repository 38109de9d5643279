// PJRT: the StableHLO lowering of threefry2x32 (and rng_key's constant) against jax.random
// (tests/golden/random_ref.json, bit exact), and the compile seed giving the same stream on XLA
// as on the CPU backend.
#include <gtest/gtest.h>

#include "common/random_ref.h"
#include "pjrt_test_util.h"
#include "rlx/runtime/session.h"

namespace rlx::pjrt {
namespace {

using testing::f32_options;
using testing::test_backend;

std::vector<Tensor> run_pjrt(const Graph& g, const TensorMap& feeds, uint64_t seed = 0) {
  CompileOptions o = f32_options();
  o.seed = seed;
  return test_backend()->compile(g, o, Device::parse("pjrt:0"))->run(feeds);
}

TEST(RandomPjrt, MatchesJax) {
  RLX_REQUIRE_PJRT_PLUGIN();
  rlx::testing::expect_random_ref(
      [](const Graph& g, const TensorMap& feeds) { return run_pjrt(g, feeds); });
}

TEST(RandomPjrt, CompileSeedGivesTheCpuStream) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g("draw");
  Value key = g.rng_key();
  g.set_outputs({random::bits(g, key, Shape{3, 50}), random::uniform(g, key, Shape{77})});
  Session cpu;
  for (uint64_t seed : {uint64_t{0}, uint64_t{7}, uint64_t{1} << 40}) {
    CompileOptions o;
    o.seed = seed;
    std::vector<Tensor> want = cpu.compile(g, o)->run({});
    std::vector<Tensor> got = run_pjrt(g, {}, seed);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(got[i].bitwise_equal(want[i])) << "seed " << seed << " output " << i;
  }
  EXPECT_FALSE(run_pjrt(g, {}, 1)[0].bitwise_equal(run_pjrt(g, {}, 2)[0]));
}

}  // namespace
}  // namespace rlx::pjrt
