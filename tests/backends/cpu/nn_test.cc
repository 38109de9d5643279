// CPU backend nn kernels (softmax, log_softmax, layer_norm, rms_norm, the fused residual norms,
// rope, softmax_cross_entropy) against the reference evaluator, for every float dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/test_util.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

using testing::all_close;
using testing::random_tensor;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Tolerance of a kernel computing in f32 (f64 for f64) against the reference's double result
// rounded to the dtype: an ulp or two of the dtype, plus `atol` for results near 0.
struct Tol {
  double rtol, atol;
};
Tol tol(DType t, double f32_atol = 1e-6) {
  switch (t) {
    case DType::f16:
      return {2e-3, f32_atol * 1e3};
    case DType::bf16:
      return {1.6e-2, f32_atol * 1e4};
    case DType::f64:
      return {1e-12, f32_atol * 1e-7};
    default:
      return {1e-5, f32_atol};
  }
}

// Compiles g for the CPU, runs it on feeds and expects every output to match the reference
// evaluator within `t`, and `op` to have run natively (never through the fallback). An op with
// an empty result is folded away by the pipeline, so only its results are checked.
void expect_native_matches(const Graph& g, const TensorMap& feeds, OpKind op, Tol t) {
  Session session;
  auto exe = session.compile(g);
  KernelCounts counts = exe->kernels().count(op);
  bool empty = false;
  for (Value v : g.outputs()) empty = empty || g.type(v).shape.numel() == 0;
  if (!empty) {
    EXPECT_GE(counts.native, 1) << exe->kernel_report();
  }
  EXPECT_EQ(counts.fallback, 0) << exe->kernel_report();
  std::vector<Tensor> got = exe->run(feeds);
  std::vector<Tensor> want = evaluate(g, feeds);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], t.rtol, t.atol))
        << "output " << i << " of " << g.to_string();
}

std::string dtype_str(DType t) { return std::string(dtype_name(t)); }

TEST(CpuNnKernels, SoftmaxMatchesReferenceOnEveryAxis) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {Shape{3, 37}, {-1, 0}}, {Shape{1, 1024}, {-1}},  {Shape{2, 5, 17}, {0, 1, 2}},
      {Shape{2, 3, 70}, {1}},  {Shape{4, 1}, {-1, 0}},  {Shape{0, 8}, {-1, 0}},
      {Shape{6, 129}, {-1}},   {Shape{3, 5, 600}, {1}}, {Shape{3, 2, 19, 5}, {1, 2}},
      {Shape{7}, {0}},
  };
  uint64_t seed = 1;
  for (DType dt : kFloatTypes)
    for (OpKind op : {OpKind::Softmax, OpKind::LogSoftmax})
      for (const auto& [shape, axes] : cases)
        for (int64_t axis : axes) {
          SCOPED_TRACE(dtype_str(dt) + " " + shape.to_string() + " axis " + std::to_string(axis));
          Graph g("softmax");
          Value x = g.input("x", dt, shape);
          g.set_outputs({op == OpKind::Softmax ? g.softmax(x, axis) : g.log_softmax(x, axis)});
          // Probabilities of f16 rows can be f16 subnormals (absolute error 2^-25).
          Tol t = tol(dt, op == OpKind::Softmax ? 1e-9 : 1e-6);
          if (dt == DType::f16 && op == OpKind::Softmax) t.atol = 3e-8;
          expect_native_matches(g, {{"x", random_tensor(dt, shape, seed++, -4, 4)}}, op, t);
        }
}

// Rows of special values: -inf entries (masked logits), an all -inf row (NaN as jax), NaN and
// +inf entries (the row is NaN), huge finite values (no overflow: max-subtracted).
Tensor special_rows(DType dt, int64_t cols, uint64_t seed) {
  Tensor x = random_tensor(dt, Shape{6, cols}, seed, -3, 3);
  x.set_f64(0 * cols + 1, -kInf);
  x.set_f64(0 * cols + cols - 1, -kInf);
  for (int64_t j = 0; j < cols; ++j) x.set_f64(1 * cols + j, -kInf);
  x.set_f64(2 * cols + cols / 2, kNaN);
  x.set_f64(3 * cols + cols - 1, kInf);
  for (int64_t j = 0; j < cols; ++j) x.set_f64(4 * cols + j, j % 2 ? 6e4 : -6e4);  // f16-finite
  for (int64_t j = 0; j < cols; ++j) x.set_f64(5 * cols + j, j == 3 ? 0.0 : -kInf);
  return x;
}

TEST(CpuNnKernels, SoftmaxSpecialValues) {
  for (DType dt : kFloatTypes)
    for (OpKind op : {OpKind::Softmax, OpKind::LogSoftmax})
      for (int64_t cols : {5, 16, 37}) {
        SCOPED_TRACE(dtype_str(dt) + " cols " + std::to_string(cols));
        Tensor x = special_rows(dt, cols, static_cast<uint64_t>(cols));
        for (int64_t axis : {1, 0}) {  // the row path, and the strided path on the transpose
          Graph g("softmax_special");
          Value in = g.input("x", dt, axis == 1 ? Shape{6, cols} : Shape{cols, 6});
          g.set_outputs({op == OpKind::Softmax ? g.softmax(in, axis) : g.log_softmax(in, axis)});
          Tensor feed = x;
          if (axis == 0) {  // the same rows laid out as columns
            feed = Tensor(dt, Shape{cols, 6});
            for (int64_t r = 0; r < 6; ++r)
              for (int64_t j = 0; j < cols; ++j) feed.set_f64(j * 6 + r, x.get_f64(r * cols + j));
          }
          Tol t = tol(dt, 1e-9);
          if (dt == DType::f16) t.atol = 3e-8;
          expect_native_matches(g, {{"x", feed}}, op, t);
        }
      }
}

TEST(CpuNnKernels, SoftmaxAllNegInfRowIsNaN) {
  Graph g("softmax_neg_inf");
  Value x = g.input("x", DType::f32, Shape{2, 20});
  g.set_outputs({g.softmax(x)});
  Tensor in = Tensor::full(DType::f32, Shape{2, 20}, -kInf);
  in.set_f64(20 + 4, 1.0);
  Session session;
  Tensor out = session.compile(g)->run({{"x", in}})[0];
  for (int64_t j = 0; j < 20; ++j) {
    EXPECT_TRUE(std::isnan(out.get_f64(j)));
    EXPECT_EQ(out.get_f64(20 + j), j == 4 ? 1.0 : 0.0);
  }
}

TEST(CpuNnKernels, NormsMatchReference) {
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {Shape{7, 33}, -1}, {Shape{5, 384}, -1}, {Shape{2, 3, 40}, 1}, {Shape{0, 16}, -1},
      {Shape{1, 1}, -1},  {Shape{3, 4, 5}, 0}, {Shape{9, 17}, 1},
  };
  uint64_t seed = 100;
  // Every other case of the fused norms leaves the sum h unread (a post-norm encoder's case: the
  // kernel then keeps it in a row buffer).
  bool read_sum = false;
  for (DType dt : kFloatTypes)
    for (OpKind op : {OpKind::LayerNorm, OpKind::RmsNorm, OpKind::FusedResidualLayerNorm,
                      OpKind::FusedResidualRmsNorm})
      for (const auto& [shape, axis] : cases) {
        read_sum = !read_sum;
        SCOPED_TRACE(dtype_str(dt) + " " + std::string(op_name(op)) + " " + shape.to_string() +
                     " axis " + std::to_string(axis) + (read_sum ? "" : " h unread"));
        const int a = shape.normalize_axis(axis);
        Shape feat(std::vector<int64_t>(shape.dims().begin() + a, shape.dims().end()));
        Graph g("norm");
        Value x = g.input("x", dt, shape);
        Value r = g.input("r", dt, shape);
        Value scale = g.input("scale", dt, feat);
        Value bias = g.input("bias", dt, feat);
        switch (op) {
          case OpKind::LayerNorm:
            g.set_outputs({g.layer_norm(x, scale, bias, axis, 1e-5)});
            break;
          case OpKind::RmsNorm:
            g.set_outputs({g.rms_norm(x, scale, axis, 1e-6)});
            break;
          case OpKind::FusedResidualLayerNorm: {
            auto [y, h] = g.fused_residual_layer_norm(x, r, scale, bias, axis, 1e-5);
            g.set_outputs(read_sum ? std::vector<Value>{y, h} : std::vector<Value>{y});
            break;
          }
          default: {
            auto [y, h] = g.fused_residual_rms_norm(x, r, scale, axis, 1e-6);
            g.set_outputs(read_sum ? std::vector<Value>{y, h} : std::vector<Value>{y});
            break;
          }
        }
        TensorMap feeds{{"x", random_tensor(dt, shape, seed++, -3, 5)},
                        {"r", random_tensor(dt, shape, seed++)},
                        {"scale", random_tensor(dt, feat, seed++, 0.5, 1.5)},
                        {"bias", random_tensor(dt, feat, seed++)}};
        // Unused inputs are dropped by DCE; feed only what the graph declares.
        TensorMap used;
        for (int32_t id : g.inputs()) used[g.node(id).name] = feeds.at(g.node(id).name);
        expect_native_matches(g, used, op, tol(dt, 4e-6));
      }
}

TEST(CpuNnKernels, NormsPropagateNaNAndInf) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_str(dt));
    Tensor x = random_tensor(dt, Shape{4, 20}, 7);
    x.set_f64(3, kNaN);
    x.set_f64(20 + 5, kInf);
    for (int64_t j = 0; j < 20; ++j) x.set_f64(40 + j, 1.5);  // zero variance: rsqrt(eps)
    Graph g("norm_special");
    Value in = g.input("x", dt, Shape{4, 20});
    Value scale = g.input("scale", dt, Shape{20});
    Value bias = g.input("bias", dt, Shape{20});
    g.set_outputs({g.layer_norm(in, scale, bias), g.rms_norm(in, scale)});
    TensorMap feeds{{"x", x},
                    {"scale", random_tensor(dt, Shape{20}, 8)},
                    {"bias", random_tensor(dt, Shape{20}, 9)}};
    expect_native_matches(g, feeds, OpKind::LayerNorm, tol(dt, 4e-6));
    expect_native_matches(g, feeds, OpKind::RmsNorm, tol(dt, 4e-6));
  }
}

TEST(CpuNnKernels, RopeMatchesReference) {
  struct Case {
    Shape x, table;
  };
  const std::vector<Case> cases = {
      {Shape{2, 3, 7, 16}, Shape{7, 8}},         // full rotary
      {Shape{2, 3, 7, 16}, Shape{7, 3}},         // partial: R = 6 < D = 16
      {Shape{2, 3, 7, 16}, Shape{2, 1, 7, 8}},   // per-batch positions
      {Shape{1, 2, 5, 80}, Shape{5, 40}},        // vector body and tail
      {Shape{1, 2, 5, 80}, Shape{1, 1, 1, 32}},  // one position for every row
      {Shape{7, 9}, Shape{7, 4}},                // odd D, rank 2
      {Shape{0, 4, 16}, Shape{4, 8}},            // empty batch
      {Shape{3, 64}, Shape{3, 32}},
  };
  uint64_t seed = 300;
  for (DType dt : kFloatTypes)
    for (const char* layout : {"neox", "gptj"})
      for (const Case& c : cases) {
        SCOPED_TRACE(dtype_str(dt) + " " + layout + " x " + c.x.to_string() + " cos " +
                     c.table.to_string());
        Graph g("rope");
        Value x = g.input("x", dt, c.x);
        Value cs = g.input("cos", dt, c.table);
        Value sn = g.input("sin", dt, c.table);
        g.set_outputs({g.rope(x, cs, sn, layout)});
        TensorMap feeds{{"x", random_tensor(dt, c.x, seed++)},
                        {"cos", random_tensor(dt, c.table, seed++, -1, 1)},
                        {"sin", random_tensor(dt, c.table, seed++, -1, 1)}};
        expect_native_matches(g, feeds, OpKind::Rope, tol(dt, 2e-6));
      }
}

TEST(CpuNnKernels, CrossEntropyMatchesReference) {
  const std::vector<Shape> shapes = {Shape{8, 10}, Shape{3, 4, 1000}, Shape{1, 1}, Shape{0, 5},
                                     Shape{5, 33}};
  uint64_t seed = 500;
  for (DType dt : kFloatTypes)
    for (DType lt : {DType::i32, DType::i64, DType::i8, DType::u8})
      for (const Shape& s : shapes) {
        SCOPED_TRACE(dtype_str(dt) + " labels " + dtype_str(lt) + " " + s.to_string());
        const int64_t c = s[s.rank() - 1];
        Shape batch(std::vector<int64_t>(s.dims().begin(), s.dims().end() - 1));
        Graph g("xent");
        Value logits = g.input("logits", dt, s);
        Value labels = g.input("labels", lt, batch);
        g.set_outputs({g.softmax_cross_entropy(logits, labels)});
        // Labels in [-3, c + 3): out-of-range ones clamp (u8 wraps the negatives to >= c).
        Tensor lab = random_tensor(lt, batch, seed++, -3, static_cast<double>(c) + 3);
        Tensor lg = random_tensor(dt, s, seed++, -5, 5);
        if (lg.numel() > 2 * c) {  // special rows: a -inf logit, a NaN, +inf, all -inf
          lg.set_f64(0, -kInf);
          lg.set_f64(c + 1 % c, kNaN);
          if (lg.numel() > 4 * c) {
            lg.set_f64(2 * c, kInf);
            for (int64_t j = 0; j < c; ++j) lg.set_f64(3 * c + j, -kInf);
          }
        }
        expect_native_matches(g, {{"logits", lg}, {"labels", lab}}, OpKind::SoftmaxCrossEntropy,
                              tol(dt, 4e-6));
      }
}

// Clones share kernels and run concurrently: per-call scratch must not be shared.
TEST(CpuNnKernels, ClonesRunConcurrently) {
  Graph g("clones");
  Value x = g.input("x", DType::bf16, Shape{64, 200});
  Value scale = g.input("scale", DType::bf16, Shape{200});
  Value bias = g.input("bias", DType::bf16, Shape{200});
  g.set_outputs({g.softmax(g.layer_norm(x, scale, bias), 0)});
  Session session;
  auto exe = session.compile(g);
  std::vector<TensorMap> feeds;
  std::vector<Tensor> want;
  for (uint64_t i = 0; i < 4; ++i) {
    feeds.push_back({{"x", random_tensor(DType::bf16, Shape{64, 200}, 40 + i)},
                     {"scale", random_tensor(DType::bf16, Shape{200}, 50 + i)},
                     {"bias", random_tensor(DType::bf16, Shape{200}, 60 + i)}});
    want.push_back(exe->run(feeds.back())[0]);
  }
  std::vector<std::unique_ptr<Executable>> clones;
  clones.reserve(4);
  for (int i = 0; i < 4; ++i) clones.push_back(exe->clone());
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 20; ++rep)
        if (!clones[i]->run(feeds[i])[0].bitwise_equal(want[i])) ++mismatches[i];
    });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(mismatches[i], 0) << "clone " << i;
}

}  // namespace
}  // namespace rlx
