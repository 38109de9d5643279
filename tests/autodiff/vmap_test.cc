// vmap on the reference evaluator against the per-example loop (run g on each slice of the
// batch, stack the results): every batching rule and decomposition path, several in_axes /
// out_axes combinations each, per-example gradients (vmap of grad), coverage and errors.
#include "rlx/autodiff/vmap.h"

#include <gtest/gtest.h>

#include <functional>
#include <iostream>
#include <set>

#include "common/test_util.h"
#include "ops/op_case.h"
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
  ex.reserve(xs.size());
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

// vmaps g with these axes, evaluates it on batched feeds (of op case `c` when given, drawn from
// its operands' value ranges, else random_feed) and compares with the loop.
void check_vmap(const Graph& g, const std::vector<BatchAxis>& in_axes,
                const std::vector<BatchAxis>& out_axes, int64_t size,
                const std::map<std::string, int64_t>& param_axes = {},
                const rlx::testing::OpCase* c = nullptr, DType dtype = DType::f64) {
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
  if (c != nullptr) {
    std::map<std::string, Shape> shapes;
    for (const auto& ids : {v.inputs(), v.params()})
      for (int32_t id : ids) shapes[v.node(id).name] = v.node(id).results[0].shape;
    feeds = rlx::testing::case_feeds(*c, dtype, shapes);
  } else {
    uint64_t seed = 7;
    for (const auto& ids : {v.inputs(), v.params()})
      for (int32_t id : ids) {
        const Node& n = v.node(id);
        feeds[n.name] = random_feed(n.name, n.results[0], seed++);
      }
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
void check_combinations(const Graph& g, const rlx::testing::OpCase& c, DType dtype,
                        int64_t size = 3) {
  std::vector<int32_t> ins = g.inputs();
  const size_t n = ins.size();
  auto rank = [&](size_t i) { return g.node(ins[i]).results[0].shape.rank(); };
  std::vector<BatchAxis> zeros(n, 0), last(n, -1), mixed_a(n), mixed_b(n);
  for (size_t i = 0; i < n; ++i) {
    if (i % 2 == 0) mixed_a[i] = std::min<int64_t>(1, rank(i));
    if (i % 2 == 1 || n == 1) mixed_b[i] = rank(i);
  }
  const std::vector<BatchAxis> out0(g.outputs().size(), 0), out_last(g.outputs().size(), -1);
  check_vmap(g, zeros, {}, size, {}, &c, dtype);
  check_vmap(g, last, out_last, size, {}, &c, dtype);
  check_vmap(g, mixed_a, out_last, size, {}, &c, dtype);
  check_vmap(g, mixed_b, out0, size + 1, {}, &c, dtype);
}

// ---- every case of the op-case table (tests/ops/op_case.h), in f64 where the op accepts it

class VmapOp : public ::testing::TestWithParam<const rlx::testing::OpCase*> {};

TEST_P(VmapOp, MatchesPerExampleLoop) {
  const rlx::testing::OpCase& c = *GetParam();
  for (DType t : rlx::testing::suite_dtypes(c, rlx::testing::kVmapSuite))
    check_combinations(rlx::testing::case_graph(c, t), c, t);
}

std::vector<const rlx::testing::OpCase*> vmap_cases() {
  std::vector<const rlx::testing::OpCase*> out;
  for (const rlx::testing::OpCase& c : rlx::testing::op_cases()) {
    if (!rlx::testing::runs_in(c, rlx::testing::kVmapSuite)) continue;
    // A case without inputs (iota, a splat constant, a param) has nothing to batch.
    DType t = rlx::testing::suite_dtypes(c, rlx::testing::kVmapSuite).front();
    if (!rlx::testing::case_graph(c, t).inputs().empty()) out.push_back(&c);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(OpCases, VmapOp, ::testing::ValuesIn(vmap_cases()),
                         [](const auto& i) { return rlx::testing::test_name(i.param->name); });

// The f64 graph of op case `name` and the case.
std::pair<Graph, const rlx::testing::OpCase*> case_f64(const std::string& name) {
  const rlx::testing::OpCase& c = rlx::testing::op_case(name);
  return {rlx::testing::case_graph(c, DType::f64), &c};
}

// Rules that decline an operand pattern fall back to the decomposition: per-example scales of
// the norms, per-example rope tables, a per-example kernel with shared input for conv.
TEST(Vmap, DecliningRulesAndBatchedOperandPatterns) {
  auto [ln, ln_case] = case_f64("layer_norm/basic");
  check_vmap(ln, {0, 0, std::nullopt}, {}, 3, {}, ln_case);
  check_vmap(ln, {std::nullopt, 1, 0}, {1}, 2, {}, ln_case);
  auto [rms, rms_case] = case_f64("rms_norm/basic");
  check_vmap(rms, {0, 0}, {}, 3, {}, rms_case);
  check_vmap(rms, {std::nullopt, 1}, {0}, 2, {}, rms_case);
  auto [rope, rope_case] = case_f64("rope/neox");
  check_vmap(rope, {std::nullopt, 0, 2, std::nullopt, 0, 2}, {}, 3, {}, rope_case);
  auto [conv, conv_case] = case_f64("conv/groups");
  check_vmap(conv, {std::nullopt, 0}, {2}, 2, {}, conv_case);
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
  for (const char* name : {"dot_general/batch_mid", "attention/bool", "gather/axes"}) {
    auto [g, c] = case_f64(name);
    SCOPED_TRACE(name);
    std::vector<BatchAxis> inner_axes(g.inputs().size(), 0);
    inner_axes.back() = std::nullopt;
    Graph inner = vmap(g, inner_axes, {}, 2);
    std::vector<BatchAxis> outer_axes(g.inputs().size(), -1);
    outer_axes.front() = std::nullopt;
    check_vmap(inner, outer_axes, std::vector<BatchAxis>(g.outputs().size(), 1), 3, {}, c);
  }
}

// Per-example gradients of a BERT-style encoder layer (f32; attention with a padding mask,
// layer_norm, gelu, matmuls): vmap(grad) over the example and its mask against the loop (the
// transform's cost: rlx_bench_autodiff).
TEST(Vmap, PerExampleEncoderGradients) {
  testing::EncoderConfig cfg;
  cfg.batch = 1;
  cfg.seq = 4;
  Graph g = testing::encoder_layer_loss(cfg);
  std::vector<std::string> wrt;
  for (int32_t id : g.params()) wrt.push_back(g.node(id).name);
  Graph dg = grad(g, wrt);
  check_vmap(dg, {0, 0}, {}, 3);
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
