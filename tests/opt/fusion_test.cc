// The fusion passes and legalize-broadcast: text-in/text-out files, semantics preserved on every
// file and on random graphs, the inverse (decompose the fused ops) and idempotence.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../common/test_util.h"
#include "pass_file.h"
#include "random_graph.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/passes.h"

namespace rlx {
namespace {

using testing::all_close;
using testing::random_tensor;
using testing::run_pass_files;

struct PassCase {
  std::string folder;
  std::function<std::unique_ptr<Pass>()> make;
};

const std::vector<PassCase>& cases() {
  static const std::vector<PassCase> all = {
      {"legalize-broadcast", create_legalize_broadcast_pass},
      {"fuse-quant-matmul", create_fuse_quant_matmul_pass},
      {"fuse-matmul-bias-act", create_fuse_matmul_bias_act_pass},
      {"fuse-residual-norm", create_fuse_residual_norm_pass},
      {"fuse-attention", create_fuse_attention_pass},
      {"fuse-packed-attention", create_fuse_packed_attention_pass},
      {"mark-elementwise-regions", create_mark_elementwise_regions_pass},
  };
  return all;
}

// The pass under test followed by dce, which removes the nodes a fusion absorbed (fusions
// leave them dead, as in the standard pipeline).
PassManager with_dce(const PassCase& c) {
  PassManager pm;
  pm.add(c.make());
  pm.add(create_dce_pass());
  return pm;
}

// One .rlx file of a pass folder: the input graph and whether the expected graph differs.
struct FileCase {
  std::string path;
  Graph input;
  bool fires;
};

std::vector<FileCase> read_files(const std::string& folder) {
  namespace fs = std::filesystem;
  std::vector<FileCase> out;
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(fs::path(RLX_TEST_DATA_DIR) / "opt/passes" / folder))
    if (e.path().extension() == ".rlx") paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  for (const fs::path& p : paths) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    size_t x = text.find("// EXPECT:");
    Graph input = Graph::parse(text.substr(0, x));
    bool fires = input.to_string() != Graph::parse(text.substr(x + 10)).to_string();
    out.push_back({p.string(), std::move(input), fires});
  }
  return out;
}

// Random feeds for every input and param. With `visible_rows`, each row (last axis) of a bool
// feed keeps at least one true: an attention row whose keys are all masked is the documented
// difference between the unfused softmax (NaN) and the attention op (0).
TensorMap random_feeds(const Graph& g, uint64_t seed, bool visible_rows = false) {
  TensorMap feeds;
  std::vector<int32_t> leaves = g.inputs();
  for (int32_t p : g.params()) leaves.push_back(p);
  for (int32_t id : leaves) {
    const Node& n = g.node(id);
    Tensor t = random_tensor(n.results[0].dtype, n.results[0].shape, seed++);
    if (visible_rows && is_bool(t.dtype()) && t.shape().rank() > 0) {
      int64_t row = t.shape()[t.shape().rank() - 1];
      for (int64_t i = row - 1; i < t.numel(); i += row) t.set_i64(i, 1);
    }
    feeds[n.name] = std::move(t);
  }
  return feeds;
}

// Fused kernels round once where the unfused ops round after each step.
::testing::AssertionResult same_outputs(const Graph& want_g, const Graph& got_g,
                                        const TensorMap& feeds) {
  std::vector<Tensor> want = evaluate(want_g, feeds), got = evaluate(got_g, feeds);
  if (want.size() != got.size()) return ::testing::AssertionFailure() << "output count differs";
  for (size_t i = 0; i < want.size(); ++i) {
    double rtol = want[i].dtype() == DType::f16 ? 4e-3 : 2e-5;
    double atol = want[i].dtype() == DType::f16 ? 1e-3 : 1e-5;
    auto r = all_close(got[i], want[i], rtol, atol);
    if (!r) return r << " (output " << i << ")";
  }
  return ::testing::AssertionSuccess();
}

// The ops of `g` by kind, for counting what a pass produced.
std::multiset<OpKind> op_kinds(const Graph& g) {
  std::multiset<OpKind> out;
  for (const Node& n : g.nodes()) out.insert(n.op);
  return out;
}

TEST(FusionPasses, TextFiles) {
  for (const PassCase& c : cases()) {
    SCOPED_TRACE(c.folder);
    EXPECT_GE(run_pass_files(c.folder, [&] { return with_dce(c); }), 4);
  }
}

// Every file: the pass reports a change exactly when the expected graph differs from the
// input, verifies, computes the same outputs, is idempotent, and decomposing the ops it
// introduced (keep = every op kind of the input; for the fused passes that is keep = !kFused)
// computes the same outputs again.
TEST(FusionPasses, FilesPreserveSemanticsAndInvert) {
  int positives = 0;
  for (const PassCase& c : cases()) {
    for (const FileCase& f : read_files(c.folder)) {
      SCOPED_TRACE(f.path);
      Graph g = f.input;
      bool changed = c.make()->run(g);
      EXPECT_EQ(changed, f.fires);
      ASSERT_TRUE(g.verify().empty()) << g.verify()[0];
      Graph again = g;
      EXPECT_FALSE(c.make()->run(again)) << "second run changed:\n" << again.to_string();
      if (!f.fires) continue;
      ++positives;
      TensorMap feeds = random_feeds(f.input, 7, c.folder == "fuse-attention");
      EXPECT_TRUE(same_outputs(f.input, g, feeds));

      std::multiset<OpKind> before = op_kinds(f.input), after = op_kinds(g);
      Graph undone = g;
      create_decompose_pass([&](OpKind op) { return before.count(op) > 0; })->run(undone);
      std::multiset<OpKind> left = op_kinds(undone);
      for (OpKind op : after) {
        // legalize-broadcast adds only primitives (broadcast_in_dim), which stay.
        if (!before.count(op) && op_info(op).has(kComposite)) {
          EXPECT_FALSE(left.count(op)) << "not undone: " << op_name(op);
        }
      }
      EXPECT_TRUE(same_outputs(f.input, undone, feeds));
    }
  }
  EXPECT_GE(positives, 15);
}

// Semantics preserved on generated graphs (elementwise chains with broadcasting, matmul with
// params, softmax, layer_norm, activations): each pass alone and all of them in pipeline order.
TEST(FusionPasses, RandomGraphsPreserveSemantics) {
  std::map<std::string, int> fired;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    testing::RandomGraph r = testing::make_random_graph(seed, 14);
    SCOPED_TRACE("seed " + std::to_string(seed) + "\n" + r.graph.to_string());
    for (const PassCase& c : cases()) {
      SCOPED_TRACE(c.folder);
      Graph g = r.graph;
      if (c.make()->run(g)) ++fired[c.folder];
      ASSERT_TRUE(g.verify().empty()) << g.verify()[0];
      EXPECT_TRUE(same_outputs(r.graph, g, r.feeds));
    }
    PassManager pm;
    pm.set_verify(true);
    for (const PassCase& c : cases()) pm.add(c.make());
    pm.add(create_dce_pass());
    Graph g = r.graph;
    pm.run(g);
    EXPECT_TRUE(same_outputs(r.graph, g, r.feeds));
  }
  // The generator must exercise the passes, or this test proves little.
  EXPECT_GT(fired["legalize-broadcast"], 100);
  EXPECT_GT(fired["mark-elementwise-regions"], 100);
  EXPECT_GT(fired["fuse-matmul-bias-act"], 0);
}

// A post-norm transformer block as the builder writes it: projections with biases, multi-head
// attention with a bias mask, residual + layer_norm twice, a gelu MLP. Every fusion fires where
// it should, and the fused graph computes what the block does.
TEST(FusionPasses, TransformerBlock) {
  const int64_t b = 2, s = 5, h = 2, d = 4, e = h * d, f = 16;
  Graph g("block");
  Value x = g.input("x", DType::f32, {b, s, e});
  Value mask = g.input("mask", DType::f32, {b, 1, 1, s});
  auto proj = [&](Value in, int64_t n_in, int64_t n_out, const std::string& name) {
    Value w = g.param(name + ".w", DType::f32, {n_in, n_out});
    Value bias = g.param(name + ".b", DType::f32, {n_out});
    return g.add(g.matmul(in, w), bias);
  };
  auto heads = [&](Value t) { return g.transpose(g.reshape(t, {b, s, h, d}), {0, 2, 1, 3}); };
  Value q = heads(proj(x, e, e, "q")), k = heads(proj(x, e, e, "k")), v = heads(proj(x, e, e, "v"));
  Value scores = g.matmul(q, g.transpose(k, {0, 1, 3, 2}));
  scores = g.add(g.mul(scores, g.scalar(0.5, DType::f32)), mask);
  Value ctx = g.matmul(g.softmax(scores, -1), v);
  ctx = g.reshape(g.transpose(ctx, {0, 2, 1, 3}), {b, s, e});
  auto norm = [&](Value t, const std::string& name) {
    return g.layer_norm(t, g.param(name + ".g", DType::f32, {e}),
                        g.param(name + ".b", DType::f32, {e}));
  };
  Value h1 = norm(g.add(x, proj(ctx, e, e, "o")), "ln1");
  Value mlp = proj(g.gelu(proj(h1, e, f, "fc1")), f, e, "fc2");
  g.set_outputs({norm(g.add(h1, mlp), "ln2")});

  PassManager pm;
  pm.set_verify(true);
  pm.add(create_fuse_attention_pass());
  pm.add(create_fuse_matmul_bias_act_pass());
  pm.add(create_fuse_residual_norm_pass());
  pm.add(create_dce_pass());
  Graph fused = g;
  pm.run(fused);
  std::multiset<OpKind> kinds = op_kinds(fused);
  EXPECT_EQ(kinds.count(OpKind::Attention), 1u);
  // q, k, v, o (activation none), fc1 (gelu), fc2 (none).
  EXPECT_EQ(kinds.count(OpKind::FusedMatMulBiasAct), 6u);
  // x + attention output -> ln1, ln1 + mlp output -> ln2.
  EXPECT_EQ(kinds.count(OpKind::FusedResidualLayerNorm), 2u);
  EXPECT_EQ(kinds.count(OpKind::MatMul) + kinds.count(OpKind::Softmax) +
                kinds.count(OpKind::LayerNorm) + kinds.count(OpKind::Gelu),
            0u)
      << fused.to_string();
  EXPECT_TRUE(same_outputs(g, fused, random_feeds(g, 11)));
}

}  // namespace
}  // namespace rlx
