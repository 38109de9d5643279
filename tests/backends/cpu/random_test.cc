// CPU backend: the random-number ops against jax.random (tests/golden/random_ref.json, bit
// exact, through the full compile pipeline), the compile seed as the key of rng_key (two
// compiles with one seed give one stream, different seeds different streams), and the
// threefry2x32 kernel's throughput.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "common/random_ref.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

Session& session() {
  static Session s;
  return s;
}

TEST(RandomCpu, MatchesJax) {
  testing::expect_random_ref(
      [](const Graph& g, const TensorMap& feeds) { return session().compile(g)->run(feeds); });
}

// bits of the compile seed's key: what every rng_key without a seed draws from.
Tensor draw(uint64_t seed) {
  Graph g("draw");
  g.set_outputs({random::bits(g, g.rng_key(), Shape{64})});
  CompileOptions o;
  o.seed = seed;
  return session().compile(g, o)->run({})[0];
}

TEST(RandomCpu, CompileSeedKeysTheStream) {
  Tensor a = draw(1), b = draw(2), a2 = draw(1);
  EXPECT_TRUE(a.bitwise_equal(a2));
  EXPECT_FALSE(a.bitwise_equal(b));
  // Executables compiled separately (a new session: no cache) give the same stream too.
  Session other;
  Graph g("draw");
  g.set_outputs({random::bits(g, g.rng_key(), Shape{64})});
  CompileOptions o;
  o.seed = 1;
  EXPECT_TRUE(other.compile(g, o)->run({})[0].bitwise_equal(a));
  // And it is the evaluator's stream of that seed.
  Graph seeded("seeded");
  seeded.set_outputs({random::bits(seeded, seeded.rng_key(1), Shape{64})});
  EXPECT_TRUE(evaluate(seeded, {})[0].bitwise_equal(a));
}

// Throughput of uniform f32 draws (threefry2x32 kernel + the elementwise chain), printed for
// the docs; the bound only catches a kernel that fell back to the reference evaluator.
TEST(RandomCpu, UniformThroughput) {
  const int64_t n = int64_t{1} << 20;
  Graph g("uniform");
  Value k = g.input("key", DType::i32, {2});
  g.set_outputs({random::uniform(g, k, Shape{n})});
  auto exe = session().compile(g);
  TensorMap feeds{{"key", Tensor(DType::i32, Shape{2})}};
  feeds["key"].set_i64(0, 0);
  feeds["key"].set_i64(1, 42);
  exe->run(feeds);
  const auto t0 = std::chrono::steady_clock::now();
  const int reps = 5;
  for (int i = 0; i < reps; ++i) exe->run(feeds);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double per_sec = static_cast<double>(n) * reps / s;
  std::printf("uniform f32: %.0f M draws/s (%lld draws per run)\n", per_sec / 1e6,
              static_cast<long long>(n));
  EXPECT_GT(per_sec, 5e6);
}

}  // namespace
}  // namespace rlx
