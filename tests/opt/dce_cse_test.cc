// dce, cse and decompose passes: text-in/text-out files plus semantics preserved (bit for bit)
// on seeded random graphs full of duplicate and dead subexpressions.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "../common/test_util.h"
#include "pass_file.h"
#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

using ::rlx::testing::all_close;
using ::rlx::testing::random_tensor;
using ::rlx::testing::run_pass_files;

PassManager manager(std::unique_ptr<Pass> pass) {
  PassManager pm;
  pm.add(std::move(pass));
  return pm;
}

TEST(PassFiles, Dce) {
  EXPECT_GE(run_pass_files("dce", [] { return manager(create_dce_pass()); }), 4);
}

TEST(PassFiles, Cse) {
  EXPECT_GE(run_pass_files("cse", [] { return manager(create_cse_pass()); }), 4);
}

TEST(PassFiles, Decompose) {
  // Keeps fused ops and softmax, so the files test both expansion and keep().
  EXPECT_GE(run_pass_files("decompose",
                           [] {
                             return manager(create_decompose_pass([](OpKind op) {
                               return op == OpKind::Softmax || op_info(op).has(kFused);
                             }));
                           }),
            2);
}

// A random well-typed graph over f32[3,4] (plus [4] and [] operands that broadcast), drawing
// operands from a small pool so identical and commuted expressions recur, with a few outputs
// so some nodes are dead.
Graph random_graph(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  Graph g("random");
  std::vector<Value> pool = {g.input("x", DType::f32, {3, 4}), g.input("y", DType::f32, {3, 4}),
                             g.param("b", DType::f32, {4})};
  g.input("unused", DType::f32, {2});
  for (int i = 0; i < 40; ++i) {
    Value a = pool[pick(pool.size())], b = pool[pick(pool.size())];
    Value v;
    switch (pick(10)) {
      case 0:
        v = g.add(a, b);
        break;
      case 1:
        v = g.mul(b, a);
        break;
      case 2:
        v = g.sub(a, b);
        break;
      case 3:
        v = g.max(a, b);
        break;
      case 4:
        v = g.tanh(a);
        break;
      case 5:
        v = g.mul(a, g.scalar(0.5, DType::f32));
        break;
      case 6:
        v = g.add(a, g.scalar(pick(2) ? 1.0 : -1.0, DType::f32));
        break;
      case 7:
        v = g.reduce_sum(a, {g.shape(a).rank() - 1}, true);
        break;
      case 8:
        v = g.leaky_relu(a, pick(2) ? 0.1 : 0.2);
        break;
      default:
        v = g.logistic(a);
        break;
    }
    pool.push_back(v);
  }
  std::vector<Value> outs;
  for (int i = 0; i < 3; ++i) outs.push_back(pool[pool.size() - 1 - pick(12)]);
  g.set_outputs(outs);
  return g;
}

TensorMap feeds_for(const Graph& g, uint64_t seed) {
  TensorMap feeds;
  for (int32_t id : g.inputs()) {
    const Node& n = g.node(id);
    feeds[n.name] = random_tensor(n.results[0].dtype, n.results[0].shape, seed++);
  }
  for (int32_t id : g.params()) {
    const Node& n = g.node(id);
    feeds[n.name] = random_tensor(n.results[0].dtype, n.results[0].shape, seed++);
  }
  return feeds;
}

// Outputs equal bit for bit: dce and cse only remove or share computations.
void expect_same_outputs(const Graph& before, const Graph& after, uint64_t seed) {
  TensorMap feeds = feeds_for(before, seed);
  auto want = evaluate(before, feeds);
  auto got = evaluate(after, feeds);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(all_close(got[i], want[i], 0, 0)) << i;
}

TEST(DceCse, RandomGraphsKeepTheirOutputs) {
  int dce_removed = 0, cse_removed = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Graph g = random_graph(seed);

    Graph c = g;
    bool cse_changed = create_cse_pass()->run(c);
    EXPECT_EQ(cse_changed, c.nodes().size() < g.nodes().size());
    cse_removed += static_cast<int>(g.nodes().size() - c.nodes().size());
    EXPECT_TRUE(c.verify().empty());
    EXPECT_FALSE(create_cse_pass()->run(c)) << "cse is not idempotent";
    expect_same_outputs(g, c, seed * 100);

    Graph d = g;
    bool dce_changed = create_dce_pass()->run(d);
    EXPECT_EQ(dce_changed, d.nodes().size() < g.nodes().size());
    dce_removed += static_cast<int>(g.nodes().size() - d.nodes().size());
    EXPECT_TRUE(d.verify().empty());
    EXPECT_EQ(d.inputs().size(), g.inputs().size());
    EXPECT_EQ(d.params().size(), g.params().size());
    // Every non-leaf survivor is used.
    auto uses = use_counts(d);
    for (size_t i = 0; i < d.nodes().size(); ++i) {
      if (d.nodes()[i].op == OpKind::Input || d.nodes()[i].op == OpKind::Param) continue;
      int total = 0;
      for (int u : uses[i]) total += u;
      EXPECT_GT(total, 0) << "dead node %" << d.nodes()[i].name;
    }
    EXPECT_FALSE(create_dce_pass()->run(d));
    expect_same_outputs(g, d, seed * 100);

    PassManager pm;
    pm.add(create_cse_pass()).add(create_dce_pass());
    pm.set_verify(true);
    Graph both = g;
    pm.run(both);
    EXPECT_LE(both.nodes().size(), std::min(c.nodes().size(), d.nodes().size()));
    expect_same_outputs(g, both, seed * 100 + 7);
  }
  // The generator really produces duplicates and dead code, so the passes were exercised.
  EXPECT_GT(cse_removed, 100);
  EXPECT_GT(dce_removed, 100);
}

// Merged results of a multi-result op are shared per result index.
TEST(Cse, MergesMultiResultNodes) {
  Graph g;
  Value x = g.input("x", DType::f32, {2, 5});
  auto [v1, i1] = g.top_k(x, 2);
  auto [v2, i2] = g.top_k(x, 2);
  auto [v3, i3] = g.top_k(x, 3);
  g.set_outputs({v1, i2, v3, i3});
  Graph c = g;
  EXPECT_TRUE(create_cse_pass()->run(c));
  EXPECT_EQ(c.nodes().size(), 3u);
  EXPECT_EQ(c.outputs()[0].node, c.outputs()[1].node);
  EXPECT_EQ(c.outputs()[1].index, 1);
  EXPECT_NE(c.outputs()[2].node, c.outputs()[0].node);
  expect_same_outputs(g, c, 3);
}

}  // namespace
}  // namespace rlx
