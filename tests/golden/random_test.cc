// jax.random parity of the rng_key / threefry2x32 ops and the rlx/ir/random.h builders on the
// reference evaluator and through their decompositions (tests/golden/random_ref.json, bit
// exact), the compile seed's path into rng_key (bind-rng-seed), and the builders' errors.
#include <gtest/gtest.h>

#include "../common/random_ref.h"
#include "../common/test_util.h"
#include "rlx/opt/decompose.h"
#include "rlx/opt/passes.h"
#include "rlx/opt/pipeline.h"

namespace rlx {
namespace {

using testing::error_of;

TEST(RandomRef, EvaluatorMatchesJax) {
  testing::expect_random_ref(
      [](const Graph& g, const TensorMap& feeds) { return evaluate(g, feeds); });
}

// rng_key decomposes to its constant; every other op the builders emit is a primitive.
TEST(RandomRef, DecompositionMatchesJax) {
  testing::expect_random_ref(
      [](const Graph& g, const TensorMap& feeds) { return evaluate(decompose(g), feeds); });
}

Tensor key_of(const Graph& g) { return evaluate(g, {})[0]; }

TEST(RngKey, CompileSeedIsBoundOnlyWhereNoSeedIsGiven) {
  Graph g("keys");
  g.set_outputs({g.rng_key(), g.rng_key(7)});
  // The evaluator's unbound key is seed 0's.
  std::vector<Tensor> plain = evaluate(g, {});
  EXPECT_EQ(plain[0].get_i64(0), 0);
  EXPECT_EQ(plain[0].get_i64(1), 0);
  EXPECT_EQ(plain[1].get_i64(1), 7);

  Graph bound = g;
  EXPECT_TRUE(create_bind_rng_seed_pass(0x123456789abcdefull)->run(bound));
  std::vector<Tensor> b = evaluate(bound, {});
  EXPECT_EQ(b[0].get_i64(0), 0x01234567);
  EXPECT_EQ(static_cast<uint32_t>(b[0].get_i64(1)), 0x89abcdefu);
  EXPECT_EQ(b[1].get_i64(1), 7);  // an explicit seed wins
  EXPECT_NE(bound.to_string().find("seed=81985529216486895"), std::string::npos)
      << bound.to_string();
  EXPECT_FALSE(create_bind_rng_seed_pass(5)->run(bound));  // nothing left to bind

  // The standard pipeline binds PipelineOptions::seed first, then decomposes rng_key.
  PipelineOptions o;
  o.seed = 99;
  o.supported = {OpKind::Add};  // a backend without rng_key: it becomes a constant
  PipelineResult r = run_standard_pipeline(g, o);
  std::vector<Tensor> p = evaluate(r.graph, {});
  EXPECT_EQ(p[0].get_i64(1), 99);
  EXPECT_EQ(p[1].get_i64(1), 7);
  for (const Node& n : r.graph.nodes()) EXPECT_NE(n.op, OpKind::RngKey);
}

// Only a compile knows the compile seed: a transform that decomposes an unseeded rng_key would
// fold it to seed 0, so decomposing one is an error (autodiff keeps it as a leaf).
TEST(RngKey, DecomposingAnUnboundKeyIsAnError) {
  Graph g("unbound");
  g.set_outputs({g.rng_key()});
  EXPECT_NE(error_of([&] {
              decompose(g);
            }).find("rng_key (node %0) has no seed: its key is the compile seed"),
            std::string::npos);
}

TEST(RngKey, FoldConstantsLeavesAnUnboundKey) {
  Graph g("fold");
  g.set_outputs({g.rng_key(), g.rng_key(3)});
  create_fold_constants_pass()->run(g);
  EXPECT_EQ(g.node(g.outputs()[0]).op, OpKind::RngKey);
  EXPECT_EQ(g.node(g.outputs()[1]).op, OpKind::Constant);
}

TEST(RngKey, SeedAbove2To63RoundTripsThroughText) {
  Graph g("big");
  g.set_outputs({g.rng_key(0xfedcba9876543210ull)});
  Tensor k = key_of(Graph::parse(g.to_string()));
  EXPECT_EQ(static_cast<uint32_t>(k.get_i64(0)), 0xfedcba98u);
  EXPECT_EQ(static_cast<uint32_t>(k.get_i64(1)), 0x76543210u);
}

TEST(RandomBuilders, ErrorsNameTheFunctionAndTheKey) {
  Graph g("bad");
  Value f = g.input("f", DType::f32, {2});
  Value k3 = g.input("k3", DType::i32, {3});
  Value k = g.rng_key();
  EXPECT_NE(error_of([&] {
              random::bits(g, f, {4});
            }).find("random::bits: key must be i32[..., 2] (two threefry key words), got f32[2]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { random::uniform(g, k3, {4}); }).find("random::uniform: key"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              random::uniform(g, k, {4}, DType::i32);
            }).find("random::uniform: dtype must be f32, f64, f16 or bf16, got i32"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              random::fold_in(g, k, f);
            }).find("random::fold_in: data must be an integer array, got f32[2]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              random::bits(g, k, {1 << 16, 1 << 15});
            }).find("has 2^31 elements or more"),
            std::string::npos);
  EXPECT_NE(error_of([&] { random::split(g, k, -1); }).find("num must be >= 0"), std::string::npos);
  // The op itself: i32 words only, broadcasting operands.
  EXPECT_NE(error_of([&] {
              g.threefry2x32(k, k, f, k);
            }).find("operand x0 (32-bit words are carried as i32 bit patterns)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { g.threefry2x32(k, k, k3, k); }).find("threefry2x32"), std::string::npos);
}

// A fold_in of a u8 / i64 counter takes its low 32 bits, as jnp.uint32(data) does.
TEST(RandomBuilders, FoldInConvertsOtherIntegerDtypes) {
  Graph g("fold");
  Value k = g.rng_key(3);
  g.set_outputs({random::fold_in(g, k, g.scalar(4294967301.0, DType::i64)),
                 random::fold_in(g, k, g.scalar(5, DType::i32))});
  std::vector<Tensor> r = evaluate(g, {});
  EXPECT_TRUE(r[0].bitwise_equal(r[1]));
}

}  // namespace
}  // namespace rlx
