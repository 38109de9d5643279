// vmap on the reference evaluator against the per-example loop (run g on each slice of the
// batch, stack the results): every batching rule and decomposition path, several in_axes /
// out_axes combinations each, per-example gradients (vmap of grad), coverage and errors.
#include "rlx/autodiff/vmap.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <set>

#include "common/test_util.h"
#include "ref_graphs.h"
#include "rlx/autodiff/grad.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"

namespace rlx::autodiff {
namespace {

using rlx::testing::error_of;

// The oracle and vmap compute the same math per example; the reference evaluator works in
// double, so f64 differs only by reordered sums (dot_general / conv over a merged batch).
// Integer and bool results must match exactly. f32 rounds once per op in both; merged-batch
// sums may round differently by a few ulp. Stated once here.
struct Tol {
  double rtol, atol;
};
Tol tolerance(DType t) { return t == DType::f64 ? Tol{1e-12, 1e-12} : Tol{1e-5, 1e-6}; }

// Example b of `t` along `axis`: slice [b, b+1) there, then drop the dim.
Tensor take_example(const Tensor& t, int axis, int64_t b) {
  std::vector<int64_t> start(static_cast<size_t>(t.shape().rank()), 0), limit = t.shape().dims();
  start[static_cast<size_t>(axis)] = b;
  limit[static_cast<size_t>(axis)] = b + 1;
  Tensor s = evaluate_op(OpKind::Slice, {t}, {{"start", start}, {"limit", limit}})[0];
  return evaluate_op(OpKind::Squeeze, {s}, {{"axes", std::vector<int64_t>{axis}}})[0];
}

// Stacks per-example tensors along `axis` (a new dim).
Tensor stack(const std::vector<Tensor>& xs, int64_t axis) {
  std::vector<Tensor> ex;
  for (const Tensor& x : xs)
    ex.push_back(evaluate_op(OpKind::ExpandDims, {x}, {{"axes", std::vector<int64_t>{axis}}})[0]);
  return evaluate_op(OpKind::Concatenate, ex, {{"dimension", axis}})[0];
}

int64_t norm_axis(int64_t a, int rank) { return a < 0 ? a + rank + 1 : a; }

// The independent oracle: g evaluated on every example separately, outputs stacked.
std::vector<Tensor> per_example_loop(const Graph& g, const TensorMap& feeds,
                                     const std::map<std::string, BatchAxis>& leaf_axes,
                                     const std::vector<BatchAxis>& out_axes, int64_t size) {
  std::vector<std::vector<Tensor>> per_out(g.outputs().size());
  for (int64_t b = 0; b < size; ++b) {
    TensorMap ex;
    for (const auto& [name, t] : feeds) {
      BatchAxis a = leaf_axes.count(name) ? leaf_axes.at(name) : BatchAxis{};
      ex[name] = a ? take_example(t, static_cast<int>(norm_axis(*a, t.shape().rank() - 1)), b) : t;
    }
    std::vector<Tensor> r = evaluate(g, ex);
    for (size_t j = 0; j < r.size(); ++j) per_out[j].push_back(r[j]);
  }
  std::vector<Tensor> out;
  for (size_t j = 0; j < per_out.size(); ++j) {
    BatchAxis a = out_axes.empty() ? BatchAxis{0} : out_axes[j];
    if (!a) {
      out.push_back(per_out[j][0]);
      continue;
    }
    out.push_back(stack(per_out[j], norm_axis(*a, per_out[j][0].shape().rank())));
  }
  return out;
}

// Random feed for a leaf: floats in [-2, 2) (leaves named "pos*" in [0.25, 2): log, sqrt,
// pow, div stay finite), integers in [-1, 6) so index ops see out-of-range values too.
Tensor random_feed(const std::string& name, const TensorType& t, uint64_t seed) {
  if (is_float(t.dtype) && name.rfind("pos", 0) == 0)
    return rlx::testing::random_tensor(t.dtype, t.shape, seed, 0.25, 2.0);
  if (is_integer(t.dtype)) return rlx::testing::random_tensor(t.dtype, t.shape, seed, -1.0, 6.0);
  return rlx::testing::random_tensor(t.dtype, t.shape, seed);
}

// vmaps g with these axes, evaluates it on random batched feeds and compares with the loop.
void check_vmap(const Graph& g, const std::vector<BatchAxis>& in_axes,
                const std::vector<BatchAxis>& out_axes, int64_t size,
                const std::map<std::string, int64_t>& param_axes = {}) {
  std::string label = "graph @" + g.name() + " in_axes (";
  for (const BatchAxis& a : in_axes) label += a ? std::to_string(*a) + "," : "None,";
  label += ")";
  SCOPED_TRACE(label);
  Graph v = vmap(g, in_axes, out_axes, size, param_axes);
  std::vector<std::string> problems = v.verify();
  ASSERT_TRUE(problems.empty()) << problems[0];
  std::map<std::string, BatchAxis> leaf_axes;
  std::vector<int32_t> ins = g.inputs();
  for (size_t i = 0; i < ins.size(); ++i) leaf_axes[g.node(ins[i]).name] = in_axes[i];
  for (const auto& [n, a] : param_axes) leaf_axes[n] = a;
  TensorMap feeds;
  uint64_t seed = 7;
  for (auto ids : {v.inputs(), v.params()})
    for (int32_t id : ids) {
      const Node& n = v.node(id);
      feeds[n.name] = random_feed(n.name, n.results[0], seed++);
    }
  std::vector<Tensor> got = evaluate(v, feeds);
  std::vector<Tensor> want = per_example_loop(g, feeds, leaf_axes, out_axes, size);
  ASSERT_EQ(got.size(), want.size());
  for (size_t j = 0; j < got.size(); ++j)
    EXPECT_TRUE(rlx::testing::all_close(got[j], want[j], tolerance(got[j].dtype()).rtol,
                                        tolerance(got[j].dtype()).atol))
        << "output " << j;
}

// Several in_axes / out_axes combinations for a graph: all at 0; all at the last position
// (negative); odd inputs unbatched with the rest at axis 1 (or 0 for scalars) and outputs at
// -1; even inputs unbatched with the rest at their last position. At least one input is
// batched in each combination that runs.
void check_combinations(const Graph& g, int64_t size = 3) {
  std::vector<int32_t> ins = g.inputs();
  const size_t n = ins.size();
  auto rank = [&](size_t i) { return g.node(ins[i]).results[0].shape.rank(); };
  std::vector<BatchAxis> zeros(n, 0), last(n, -1), mixed_a(n), mixed_b(n);
  for (size_t i = 0; i < n; ++i) {
    if (i % 2 == 0) mixed_a[i] = std::min<int64_t>(1, rank(i));
    if (i % 2 == 1 || n == 1) mixed_b[i] = rank(i);
  }
  const std::vector<BatchAxis> out0(g.outputs().size(), 0), out_last(g.outputs().size(), -1);
  check_vmap(g, zeros, {}, size);
  check_vmap(g, last, out_last, size);
  check_vmap(g, mixed_a, out_last, size);
  check_vmap(g, mixed_b, out0, size + 1);
}

// ---- op cases: each builds a per-example graph; together they use every op of ops.def that is
// not a leaf (CoversEveryOp checks that).
using Build = std::function<Graph()>;

Graph::AttentionOptions mask_opt(std::string mask) {
  Graph::AttentionOptions o;
  o.mask = std::move(mask);
  return o;
}

std::vector<std::pair<std::string, Build>> op_cases() {
  std::vector<std::pair<std::string, Build>> c;
  constexpr DType F = DType::f64;
  // Every elementwise unary op, emitted generically (convert and not need their own dtypes).
  for (int k = 0; k < kNumOps; ++k) {
    OpKind op = static_cast<OpKind>(k);
    const OpInfo& info = op_info(op);
    if (!info.has(kUnary) || info.has(kLeaf)) continue;
    c.emplace_back(std::string(info.name), [op] {
      Graph g(std::string(op_name(op)));
      bool logical = op == OpKind::Not;
      Value x = g.input("pos_x", logical ? DType::bool_ : F, {3, 4});
      AttrMap a;
      if (op == OpKind::Convert) a.set("dtype", DType::f32);
      g.set_outputs({g.emit1(op, {x}, a)});
      return g;
    });
  }
  // Every binary op, with a lower-rank second operand (broadcasting).
  for (int k = 0; k < kNumOps; ++k) {
    OpKind op = static_cast<OpKind>(k);
    const OpInfo& info = op_info(op);
    if (!info.has(kBinary)) continue;
    c.emplace_back(std::string(info.name), [op] {
      Graph g(std::string(op_name(op)));
      bool logical = op == OpKind::And || op == OpKind::Or || op == OpKind::Xor;
      DType t = logical ? DType::bool_ : F;
      Value x = g.input("pos_x", t, {3, 4});
      Value y = g.input("pos_y", t, {4});
      g.set_outputs({g.emit1(op, {x, y})});
      return g;
    });
  }
  c.emplace_back("select", [] {
    Graph g("select");
    Value p = g.input("p", DType::bool_, {3, 1});
    Value x = g.input("x", F, {3, 4});
    Value y = g.input("y", F, {4});
    g.set_outputs({g.select(p, x, y)});
    return g;
  });
  c.emplace_back("clamp", [] {
    Graph g("clamp");
    Value lo = g.input("lo", F, {});
    Value x = g.input("x", F, {3, 4});
    Value hi = g.input("hi", F, {4});
    g.set_outputs({g.clamp(lo, x, g.add(hi, g.scalar(2.0, F)))});
    return g;
  });
  c.emplace_back("reductions", [] {
    Graph g("reductions");
    Value x = g.input("pos_x", F, {3, 4, 2});
    g.set_outputs({g.reduce_sum(x, {1}), g.reduce_mean(x, {0, -1}, true), g.reduce_max(x, {2}),
                   g.reduce_min(x, {-2}), g.reduce_prod(x, {0}), g.argmax(x, 1),
                   g.argmin(x, -1, true), g.cumsum(x, 1, true, true)});
    return g;
  });
  c.emplace_back("top_k", [] {
    Graph g("top_k");
    auto [v, i] = g.top_k(g.input("x", F, {3, 5}), 2);
    g.set_outputs({v, i});
    return g;
  });
  c.emplace_back("shape_ops", [] {
    Graph g("shape_ops");
    Value x = g.input("x", F, {2, 3, 4});
    Value r = g.reshape(x, {4, -1});
    Value t = g.transpose(x, {2, 0, 1});
    Value b = g.broadcast_in_dim(g.input("y", F, {3}), {2, 3, 5}, {1});
    Value e = g.expand(g.input("z", F, {3, 1}), {2, 3, 4});
    Value s = g.slice(x, {0, 1, 0}, {2, 3, 4}, {1, 1, 2});
    Value rv = g.reverse(x, {0, -1});
    Value sq = g.squeeze(g.slice(x, {0, 0, 0}, {1, 3, 4}), {0});
    Value ed = g.expand_dims(x, {0, -1});
    g.set_outputs({r, t, b, e, s, rv, sq, ed});
    return g;
  });
  c.emplace_back("concatenate", [] {
    Graph g("concatenate");
    Value a = g.input("a", F, {2, 3});
    Value b = g.input("b", F, {2, 1});
    Value d = g.input("d", F, {2, 2});
    g.set_outputs({g.concatenate({a, b, d}, -1)});
    return g;
  });
  c.emplace_back("pad", [] {
    Graph g("pad");
    Value x = g.input("x", F, {3, 4});
    Value p = g.input("p", F, {});
    g.set_outputs({g.pad(x, p, {1, -1}, {0, 2}, {1, 0})});
    return g;
  });
  c.emplace_back("gather", [] {
    Graph g("gather");
    Value x = g.input("x", F, {5, 3});
    Value i = g.input("idx", DType::i32, {2, 2});
    g.set_outputs({g.gather(x, i, 0), g.gather(x, g.convert(i, DType::i64), -1)});
    return g;
  });
  c.emplace_back("take_along_axis", [] {
    Graph g("take_along_axis");
    Value x = g.input("x", F, {3, 5});
    Value i = g.input("idx", DType::i32, {3, 2});
    g.set_outputs({g.take_along_axis(x, i, 1)});
    return g;
  });
  c.emplace_back("scatter_add", [] {
    Graph g("scatter_add");
    Value x = g.input("x", F, {3, 5});
    Value i = g.input("idx", DType::i32, {4});
    Value u = g.input("u", F, {3, 4});
    g.set_outputs({g.scatter_add(x, i, u, 1)});
    return g;
  });
  c.emplace_back("dot_general", [] {
    Graph g("dot_general");
    Value a = g.input("a", F, {2, 3, 4});
    Value b = g.input("b", F, {4, 2, 5});
    g.set_outputs({g.dot_general(a, b, {0}, {1}, {2}, {0})});
    return g;
  });
  c.emplace_back("matmul", [] {
    Graph g("matmul");
    Value a = g.input("a", F, {3, 4});
    Value b = g.input("b", F, {4, 2});
    Value v = g.input("v", F, {4});
    g.set_outputs({g.matmul(a, b), g.matmul(a, v)});
    return g;
  });
  c.emplace_back("softmax", [] {
    Graph g("softmax");
    Value x = g.input("x", F, {3, 4});
    g.set_outputs({g.softmax(x, 0), g.log_softmax(x, -1)});
    return g;
  });
  c.emplace_back("norms", [] {
    Graph g("norms");
    Value x = g.input("x", F, {3, 4});
    Value s = g.input("s", F, {4});
    Value b = g.input("b", F, {4});
    g.set_outputs({g.layer_norm(x, s, b), g.rms_norm(x, s)});
    return g;
  });
  c.emplace_back("attention", [] {
    Graph g("attention");
    Value q = g.input("q", F, {2, 2, 3, 4});
    Value k = g.input("k", F, {2, 1, 5, 4});
    Value v = g.input("v", F, {2, 1, 5, 2});
    Value m = g.input("m", DType::bool_, {2, 1, 1, 5});
    Value bias = g.input("bias", F, {1, 1, 3, 5});
    Value bias2 = g.input("bias2", F, {3, 5});  // rank < 4: broadcasts over batch and heads
    g.set_outputs(
        {g.attention(q, k, v, mask_opt("bool"), m), g.attention(q, k, v, mask_opt("bias"), bias),
         g.attention(q, k, v, mask_opt("causal")), g.attention(q, k, v, mask_opt("bias"), bias2)});
    return g;
  });
  c.emplace_back("rope", [] {
    Graph g("rope");
    Value x = g.input("x", F, {2, 3, 6});
    Value cs = g.input("cos", F, {3, 2});
    Value sn = g.input("sin", F, {3, 2});
    g.set_outputs({g.rope(x, cs, sn, "neox"), g.rope(x, cs, sn, "gptj")});
    return g;
  });
  c.emplace_back("conv", [] {
    Graph g("conv");
    Value x = g.input("x", F, {2, 4, 5, 5});
    Value w = g.input("w", F, {6, 2, 3, 2});
    g.set_outputs({g.conv(x, w, {2, 1}, {1, 0}, {0, 1}, {1, 2}, 2)});
    return g;
  });
  c.emplace_back("pool", [] {
    Graph g("pool");
    Value x = g.input("x", F, {2, 3, 6});
    g.set_outputs({g.max_pool(x, {3}, {2}, {1}, {1}), g.avg_pool(x, {2}, {1}, {1}, {0}, false)});
    return g;
  });
  c.emplace_back("softmax_cross_entropy", [] {
    Graph g("softmax_cross_entropy");
    Value l = g.input("logits", F, {3, 5});
    Value y = g.input("labels", DType::i32, {3});
    g.set_outputs({g.softmax_cross_entropy(l, y)});
    return g;
  });
  c.emplace_back("fused", [] {
    Graph g("fused");
    Value x = g.input("x", F, {3, 4});
    Value w = g.input("w", F, {4, 4});
    Value b = g.input("b", F, {4});
    Value r = g.input("r", F, {3, 4});
    Value s = g.input("s", F, {4});
    Value h = g.fused_matmul_bias_act(x, w, b, "gelu");
    auto [ln, h2] = g.fused_residual_layer_norm(h, r, s, b);
    auto [rn, h3] = g.fused_residual_rms_norm(ln, h2, s);
    g.set_outputs({rn, h3});
    return g;
  });
  c.emplace_back("elementwise_region", [] {
    Graph body("body");
    Value bx = body.input("a", F, {3, 4});
    Value by = body.input("b", F, {4});
    body.set_outputs({body.tanh(body.mul(bx, by)), body.add(bx, by)});
    Graph g("elementwise_region");
    Value x = g.input("x", F, {3, 4});
    Value y = g.input("y", F, {4});
    g.set_outputs(g.elementwise_region({x, y}, body));
    return g;
  });
  return c;
}

class VmapOp : public ::testing::TestWithParam<std::string> {};

TEST_P(VmapOp, MatchesPerExampleLoop) {
  for (const auto& [name, build] : op_cases())
    if (name == GetParam()) check_combinations(build());
}

std::vector<std::string> op_case_names() {
  std::vector<std::string> names;
  for (const auto& [name, build] : op_cases()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Ops, VmapOp, ::testing::ValuesIn(op_case_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// Rules that decline an operand pattern fall back to the decomposition: per-example scales of
// the norms, per-example rope tables, a per-example kernel with shared input for conv.
TEST(Vmap, DecliningRulesAndBatchedOperandPatterns) {
  Graph norms;
  for (const auto& [name, build] : op_cases())
    if (name == "norms") norms = build();
  check_vmap(norms, {0, 0, std::nullopt}, {}, 3);
  check_vmap(norms, {std::nullopt, 1, 0}, {1, 0}, 2);
  Graph rope;
  for (const auto& [name, build] : op_cases())
    if (name == "rope") rope = build();
  check_vmap(rope, {std::nullopt, 0, 2}, {}, 3);
  Graph conv;
  for (const auto& [name, build] : op_cases())
    if (name == "conv") conv = build();
  check_vmap(conv, {std::nullopt, 0}, {2}, 2);
}

// A batched param (listed in param_axes) next to batched and unbatched inputs, and an output
// that depends on nothing batched (broadcast along the batch, or kept with out_axes None).
TEST(Vmap, BatchedParamsAndUnbatchedOutputs) {
  Graph g("params");
  Value x = g.input("x", DType::f64, {4});
  Value w = g.param("w", DType::f64, {4, 3});
  Value c = g.param("c", DType::f64, {3});
  g.set_outputs({g.add(g.matmul(x, w), c), g.mul(c, c)});
  check_vmap(g, {0}, {0, 0}, 3);
  check_vmap(g, {std::nullopt}, {1, std::nullopt}, 2, {{"w", -1}});
  check_vmap(g, {0}, {-1, 0}, 2, {{"w", 1}, {"c", 0}});
}

// Per-example gradients: vmap(grad(loss)) against grad on each example, for an MLP with a
// softmax cross-entropy loss.
TEST(Vmap, PerExampleGradients) {
  Graph g("mlp_loss");
  Value x = g.input("x", DType::f64, {4});
  Value y = g.input("y", DType::i32, {});
  Value w1 = g.param("w1", DType::f64, {4, 5});
  Value w2 = g.param("w2", DType::f64, {5, 3});
  Value h = g.gelu(g.matmul(x, w1));
  g.set_outputs({g.softmax_cross_entropy(g.matmul(h, w2), y)});
  Graph dg = grad(g, {"w1", "w2"});
  check_vmap(dg, {0, 0}, {0, 0, 0}, 4);
  check_vmap(dg, {1 - 2, std::nullopt}, {0, -1, 1}, 3);
  // And grad of the batch mean of vmap(loss) is the mean of the per-example gradients.
  Graph bg = vmap(g, {0, 0}, {0}, 4);
  Graph mean_loss = bg;
  mean_loss.set_outputs({mean_loss.reduce_mean(bg.outputs()[0], {0})});
  Graph dmean = grad(mean_loss, {"w1"});
  Graph per = vmap(dg, {0, 0}, {0, 0, 0}, 4);
  TensorMap feeds{{"x", random_feed("x", {DType::f64, Shape{4, 4}}, 1)},
                  {"y", random_feed("y", {DType::i32, Shape{4}}, 2)},
                  {"w1", random_feed("w1", {DType::f64, Shape{4, 5}}, 3)},
                  {"w2", random_feed("w2", {DType::f64, Shape{5, 3}}, 4)}};
  Tensor want = evaluate_op(OpKind::ReduceMean, {evaluate(per, feeds)[1]},
                            {{"axes", std::vector<int64_t>{0}}})[0];
  EXPECT_TRUE(rlx::testing::all_close(evaluate(dmean, feeds)[1], want, 1e-12, 1e-14));
}

// vmap of a vmapped graph (two batch dims) against the loop over the outer batch, whose body
// is itself checked against its own loop by the op cases.
TEST(Vmap, Nested) {
  for (const auto& [name, build] : op_cases()) {
    if (name != "dot_general" && name != "attention" && name != "gather") continue;
    Graph g = build();
    std::vector<BatchAxis> inner_axes(g.inputs().size(), 0);
    inner_axes.back() = std::nullopt;
    Graph inner = vmap(g, inner_axes, {}, 2);
    std::vector<BatchAxis> outer_axes(g.inputs().size(), -1);
    outer_axes.front() = std::nullopt;
    check_vmap(inner, outer_axes, std::vector<BatchAxis>(g.outputs().size(), 1), 3);
  }
}

// Per-example gradients of a BERT-style encoder layer (f32; attention with a padding mask,
// layer_norm, gelu, matmuls): vmap(grad) over the example and its mask against the loop. Also
// prints the transform's cost.
TEST(Vmap, PerExampleEncoderGradients) {
  testing::EncoderConfig cfg;
  cfg.batch = 1;
  cfg.seq = 4;
  Graph g = testing::encoder_layer_loss(cfg);
  std::vector<std::string> wrt;
  for (int32_t id : g.params()) wrt.push_back(g.node(id).name);
  Graph dg = grad(g, wrt);
  auto t0 = std::chrono::steady_clock::now();
  Graph v = vmap(dg, {0, 0}, {}, 3);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "vmap of the encoder-layer gradient graph: " << dg.nodes().size() << " -> "
            << v.nodes().size() << " nodes in " << ms << " ms\n";
  check_vmap(dg, {0, 0}, {}, 3);
}

// Every op of ops.def has a batching rule or goes through its decomposition; the table is the
// one docs/autodiff.md publishes. Every non-leaf op is exercised by an op case above.
TEST(Vmap, CoversEveryOp) {
  std::set<OpKind> used;
  for (const auto& [name, build] : op_cases()) {
    const Graph g = build();
    for (const Node& n : g.nodes()) used.insert(n.op);
  }
  std::map<std::string, std::vector<std::string>> by_support;
  for (int k = 0; k < kNumOps; ++k) {
    OpKind op = static_cast<OpKind>(k);
    BatchSupport s = batch_support(op);
    EXPECT_NE(s, BatchSupport::Missing) << op_name(op) << " has no batching rule";
    if (s != BatchSupport::Leaf) {
      EXPECT_TRUE(used.count(op)) << op_name(op) << " has no vmap op case";
    }
    by_support[batch_support_name(s)].push_back(std::string(op_name(op)));
  }
  std::cout << "vmap coverage of " << kNumOps << " ops:\n";
  for (const auto& [s, ops] : by_support) {
    std::cout << "  " << s << " (" << ops.size() << "):";
    for (const std::string& o : ops) std::cout << " " << o;
    std::cout << "\n";
  }
}

TEST(Vmap, Errors) {
  Graph g("e");
  Value x = g.input("x", DType::f32, {2, 3});
  Value y = g.input("y", DType::f32, {3});
  g.param("w", DType::f32, {3});
  g.set_outputs({g.add(x, y), g.mul(y, y)});
  EXPECT_EQ(error_of([&] { vmap(g, {0}, {}, 4); }),
            "vmap: in_axes has 1 entries but graph @e has 2 inputs");
  EXPECT_EQ(error_of([&] {
              vmap(g, {3, 0}, {}, 4);
            }),
            "vmap: in_axes[0] of input 'x' (f32[2,3]) axis 3 is out of range for rank 2 "
            "(allowed: -3..2)");
  EXPECT_EQ(error_of([&] {
              vmap(g, {0, -3}, {}, 4);
            }),
            "vmap: in_axes[1] of input 'y' (f32[3]) axis -3 is out of range for rank 1 "
            "(allowed: -2..1)");
  EXPECT_EQ(error_of([&] {
              vmap(g, {0, 0}, {0}, 4);
            }),
            "vmap: out_axes has 1 entries but graph @e has 2 outputs");
  EXPECT_EQ(error_of([&] {
              vmap(g, {0, 0}, {0, 2}, 4);
            }),
            "vmap: out_axes[1] of output 1 (f32[3]) axis 2 is out of range for rank 1 "
            "(allowed: -2..1)");
  EXPECT_EQ(error_of([&] {
              vmap(g, {0, std::nullopt}, {std::nullopt, 0}, 4);
            }),
            "vmap: out_axes[0] of output 0 (f32[2,3]) is None, but the output depends on a "
            "batched value");
  EXPECT_EQ(error_of([&] { vmap(g, {0, 0}, {}, 0); }), "vmap: batch_size must be >= 1, got 0");
  EXPECT_EQ(error_of([&] {
              vmap(g, {0, 0}, {}, 2, {{"x", 0}});
            }),
            "vmap: param_axes names 'x', which is not a param of graph @e");
  // Inconsistent batch sizes show up when feeding: the evaluator names the input and types.
  Graph v = vmap(g, {0, 1}, {}, 4);
  TensorMap feeds{{"x", Tensor(DType::f32, Shape{4, 2, 3})},
                  {"y", Tensor(DType::f32, Shape{3, 5})},
                  {"w", Tensor(DType::f32, Shape{3})}};
  std::string msg = error_of([&] { evaluate(v, feeds); });
  EXPECT_NE(msg.find("'y'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[3,4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[3,5]"), std::string::npos) << msg;
  std::string run_msg = error_of([&] {
    std::shared_ptr<Executable> exe = Session(Device::cpu()).compile(v);
    exe->set_param("w", feeds.at("w"));
    exe->run({{"x", feeds.at("x")}, {"y", feeds.at("y")}});
  });
  EXPECT_NE(run_msg.find("'y'"), std::string::npos) << run_msg;
  EXPECT_NE(run_msg.find("[3,5]"), std::string::npos) << run_msg;
}

// The result keeps g's leaf names and order with batched types, and the ops stay few: a
// shared-weight matmul batches to one dot_general plus layout moves, no per-example copies.
TEST(Vmap, ResultLayout) {
  Graph g("layout");
  Value x = g.input("x", DType::f32, {2, 3});
  Value w = g.param("w", DType::f32, {3, 4});
  g.set_outputs({g.dot_general(x, w, {}, {}, {1}, {0})});
  Graph v = vmap(g, {1}, {2}, 5);
  EXPECT_EQ(v.type(Value{v.find("x"), 0}).to_string(), "f32[2,5,3]");
  EXPECT_EQ(v.type(Value{v.find("w"), 0}).to_string(), "f32[3,4]");
  EXPECT_EQ(v.type(v.outputs()[0]).to_string(), "f32[2,4,5]");
  int dots = 0;
  for (const Node& n : v.nodes()) dots += n.op == OpKind::DotGeneral;
  EXPECT_EQ(dots, 1);
}

}  // namespace
}  // namespace rlx::autodiff
