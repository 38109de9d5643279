// CPU gemm kernels (dot_general, matmul, fused_matmul_bias_act) against the reference evaluator:
// dim layouts, broadcasting, every dtype, size-0 dims, NaN/inf, the fusion through Session and
// concurrent clones. Every case also checks that the native kernel ran, not the fallback.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../../../src/backends/cpu/kernel.h"
#include "alloc_count.h"
#include "common/test_util.h"
#include "common/thread_count_guard.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"
#include "rlx/runtime/threading.h"

namespace rlx {
namespace {

using testing::random_tensor;
using Build = std::function<Value(Graph&, const std::vector<Value>&)>;

// A graph with inputs in0, in1, ... of `types` and the single output build(inputs).
Graph op_graph(const std::vector<TensorType>& types, const Build& build) {
  Graph g("case");
  std::vector<Value> ins;
  for (size_t i = 0; i < types.size(); ++i)
    ins.push_back(g.input("in" + std::to_string(i), types[i].dtype, types[i].shape));
  g.set_outputs({build(g, ins)});
  return g;
}

TensorMap feeds_of(const std::vector<Tensor>& ts) {
  TensorMap m;
  for (size_t i = 0; i < ts.size(); ++i) m["in" + std::to_string(i)] = ts[i];
  return m;
}

// Compiles `g` for the CPU, runs it on `feeds` and returns its outputs; checks that the nodes
// of op `op` run native kernels.
std::vector<Tensor> run_native(const Graph& g, const TensorMap& feeds, const std::string& op) {
  Session session;
  auto exe = session.compile(g);
  // An empty result needs no kernel (the pipeline folds it to a constant).
  if (g.type(g.outputs()[0]).shape.numel() > 0) {
    auto [native, fallback] = exe->kernels().count(*op_from_name(op));
    EXPECT_GE(native, 1) << exe->kernel_report();
    EXPECT_EQ(fallback, 0) << exe->kernel_report();
  }
  return exe->run(feeds);
}

Tensor abs_of(const Tensor& t) {
  Tensor a = t;
  if (is_float(t.dtype()))
    for (int64_t i = 0; i < a.numel(); ++i) a.set_f64(i, std::fabs(t.get_f64(i)));
  return a;
}

// Tolerances of a result against the reference (which sums in double and rounds once):
// |got - want| <= out * |want| + acc * scale, where scale is the sum of |products| (and |bias|)
// of that element. `acc` bounds the f32 accumulation, `out` the rounding of the result (and
// oneDNN's activation approximations).
struct Tol {
  double out, acc;
};
Tol tol_for(DType result, DType operands) {
  double acc = operands == DType::f64 && result == DType::f64 ? 1e-13 : 1e-5;
  switch (result) {
    case DType::f64:
      return {1e-15, acc};
    case DType::f32:
      return {1e-6, acc};
    case DType::f16:
      return {1e-3, acc};
    case DType::bf16:
      return {8e-3, acc};
    default:
      return {0, 0};
  }
}

// got == want within `tol` (scale per element); NaN must match NaN and inf the same inf;
// integers exactly.
::testing::AssertionResult matches(const Tensor& got, const Tensor& want, const Tensor& scale,
                                   Tol tol) {
  if (got.type() != want.type())
    return ::testing::AssertionFailure()
           << "type " << got.type().to_string() << " vs " << want.type().to_string();
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (!is_float(got.dtype())) {
      if (got.get_i64(i) != want.get_i64(i))
        return ::testing::AssertionFailure()
               << "element " << i << ": " << got.get_i64(i) << " vs " << want.get_i64(i);
      continue;
    }
    double x = got.get_f64(i), y = want.get_f64(i);
    bool ok;
    if (std::isnan(y) || std::isinf(y))
      ok = std::isnan(y) ? std::isnan(x) : x == y;
    else
      ok = std::fabs(x - y) <= tol.out * std::fabs(y) + tol.acc * scale.get_f64(i);
    if (!ok)
      return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs " << y
                                           << " (scale " << scale.get_f64(i) << ")";
  }
  return ::testing::AssertionSuccess();
}

// Runs the one-op graph `build` on random inputs of `types` natively and through the
// reference; `scale_build` (default: `build`) evaluated on |inputs| gives each element's
// error scale.
void check_op(const std::vector<TensorType>& types, const Build& build, const std::string& op,
              uint64_t seed, const Build& scale_build = nullptr) {
  Graph g = op_graph(types, build);
  std::vector<Tensor> ins, abs_ins;
  for (size_t i = 0; i < types.size(); ++i) {
    DType t = types[i].dtype;
    // Integers span their whole range so sums wrap; floats stay in [-2, 2).
    double lo = -2, hi = 2;
    if (t == DType::i8) lo = -128, hi = 128;
    if (t == DType::u8) lo = 0, hi = 256;
    if (t == DType::i32) lo = -3e9, hi = 3e9;
    if (t == DType::i64) lo = -1e18, hi = 1e18;
    ins.push_back(random_tensor(t, types[i].shape, seed * 31 + i, lo, hi));
    abs_ins.push_back(abs_of(ins.back()));
  }
  std::vector<Tensor> got = run_native(g, feeds_of(ins), op);
  std::vector<Tensor> want = evaluate(g, feeds_of(ins));
  Graph sg = op_graph(types, scale_build ? scale_build : build);
  Tensor scale = evaluate(sg, feeds_of(abs_ins))[0];
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(matches(got[0], want[0], scale, tol_for(want[0].dtype(), types[0].dtype)))
      << g.to_string();
}

const DType kAllDtypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64,
                            DType::i8,  DType::u8,   DType::i32, DType::i64};
const DType kFloatDtypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64};

// ---- dot_general

struct DotCase {
  Shape lhs, rhs;
  std::vector<int64_t> lb, rb, lc, rc;
};

const DotCase kDotCases[] = {
    {Shape{5, 7}, Shape{7, 3}, {}, {}, {1}, {0}},                      // plain
    {Shape{7, 5}, Shape{7, 3}, {}, {}, {0}, {0}},                      // lhs transposed
    {Shape{5, 7}, Shape{3, 7}, {}, {}, {1}, {1}},                      // rhs transposed
    {Shape{33, 17}, Shape{19, 33}, {}, {}, {0}, {1}},                  // both transposed
    {Shape{4, 5, 7}, Shape{4, 7, 3}, {0}, {0}, {2}, {1}},              // leading batch
    {Shape{5, 4, 7}, Shape{7, 4, 3}, {1}, {1}, {2}, {0}},              // batch in the middle
    {Shape{5, 7, 4}, Shape{3, 7, 4}, {2}, {2}, {1}, {1}},              // batch innermost
    {Shape{4, 7, 5}, Shape{3, 4, 7}, {0}, {1}, {1}, {2}},              // mixed positions
    {Shape{2, 3, 5, 7}, Shape{2, 3, 7, 6}, {0, 1}, {0, 1}, {3}, {2}},  // two batch dims
    {Shape{3, 2, 5, 7}, Shape{2, 3, 7, 6}, {1, 0}, {0, 1}, {3}, {2}},  // batch order swapped
    {Shape{5, 3, 4}, Shape{3, 4, 6}, {}, {}, {1, 2}, {0, 1}},          // two contracting dims
    {Shape{4, 5, 3}, Shape{3, 6, 4}, {}, {}, {2, 0}, {0, 2}},          // ...permuted
    {Shape{4, 5, 3}, Shape{4, 6, 3}, {}, {}, {0, 2}, {0, 2}},          // ...rhs not mergeable
    {Shape{3, 7, 2}, Shape{7, 4, 5}, {}, {}, {1}, {0}},                // split free dims (pack)
    {Shape{6}, Shape{5}, {}, {}, {}, {}},                              // outer product (K = 1)
    {Shape{9}, Shape{9}, {}, {}, {0}, {0}},                            // full contraction
    {Shape{8}, Shape{8}, {0}, {0}, {}, {}},                            // batch only
    {Shape{1, 7}, Shape{7, 1}, {}, {}, {1}, {0}},                      // M = N = 1
    {Shape{2, 30, 40}, Shape{2, 40, 300}, {0}, {0}, {2}, {1}},         // N over one loop chunk
    {Shape{5, 0}, Shape{0, 3}, {}, {}, {1}, {0}},                      // K = 0: zeros
    {Shape{2, 5, 0}, Shape{2, 0, 3}, {0}, {0}, {2}, {1}},              // batched K = 0
    {Shape{0, 7}, Shape{7, 3}, {}, {}, {1}, {0}},                      // M = 0: empty result
    {Shape{0, 5, 7}, Shape{0, 7, 3}, {0}, {0}, {2}, {1}},              // B = 0
};

Build dot_build(const DotCase& c, std::optional<DType> preferred = std::nullopt) {
  return [c, preferred](Graph& g, const std::vector<Value>& in) {
    return g.dot_general(in[0], in[1], c.lb, c.rb, c.lc, c.rc, preferred);
  };
}

TEST(CpuGemm, DotGeneralLayoutsEveryDtype) {
  uint64_t seed = 1;
  for (const DotCase& c : kDotCases)
    for (DType t : kAllDtypes) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + c.lhs.to_string() + " x " +
                   c.rhs.to_string());
      check_op({{t, c.lhs}, {t, c.rhs}}, dot_build(c), "dot_general", seed++);
    }
}

TEST(CpuGemm, DotGeneralPreferredResultDtype) {
  struct Pref {
    DType in, out;
  };
  const Pref prefs[] = {
      {DType::bf16, DType::f32}, {DType::f16, DType::f32},  {DType::f32, DType::bf16},
      {DType::f32, DType::f16},  {DType::bf16, DType::f16}, {DType::f32, DType::f64},
      {DType::bf16, DType::f64}, {DType::f64, DType::f32},  {DType::i8, DType::i32},
      {DType::u8, DType::i64},   {DType::i32, DType::i8},   {DType::i8, DType::f32},
      {DType::i64, DType::f64}};
  uint64_t seed = 100;
  for (const Pref& p : prefs)
    for (const DotCase& c : {kDotCases[0], kDotCases[4], kDotCases[6], kDotCases[19]}) {
      SCOPED_TRACE(std::string(dtype_name(p.in)) + " -> " + std::string(dtype_name(p.out)) + " " +
                   c.lhs.to_string());
      if (is_integer(p.in) && is_float(p.out)) {
        // Integer operands with a float result: small values keep the double sums exact.
        Graph g = op_graph({{p.in, c.lhs}, {p.in, c.rhs}}, dot_build(c, p.out));
        TensorMap f =
            feeds_of({random_tensor(p.in, c.lhs, seed), random_tensor(p.in, c.rhs, seed + 1)});
        seed += 2;
        std::vector<Tensor> got = run_native(g, f, "dot_general");
        EXPECT_TRUE(testing::all_close(got[0], evaluate(g, f)[0], 0, 0));
        continue;
      }
      check_op({{p.in, c.lhs}, {p.in, c.rhs}}, dot_build(c, p.out), "dot_general", seed++);
    }
}

// ---- matmul

struct MatCase {
  Shape x, w;
};

const MatCase kMatCases[] = {
    {Shape{5, 7}, Shape{7, 3}},
    {Shape{4, 6, 9}, Shape{9, 5}},  // batch folds into M
    {Shape{2, 3, 6, 9}, Shape{9, 5}},
    {Shape{9, 5}, Shape{3, 5, 4}},  // lhs broadcast over the batch
    {Shape{3, 6, 9}, Shape{3, 9, 5}},
    {Shape{2, 1, 6, 9}, Shape{3, 9, 5}},  // both broadcast
    {Shape{1, 6, 9}, Shape{4, 9, 5}},
    {Shape{4, 1, 6, 9}, Shape{1, 3, 9, 5}},
    {Shape{7}, Shape{7, 3}},  // 1-D lhs
    {Shape{5, 7}, Shape{7}},  // 1-D rhs
    {Shape{7}, Shape{7}},     // dot product
    {Shape{3, 5, 7}, Shape{7}},
    {Shape{7}, Shape{2, 7, 4}},
    {Shape{1, 1}, Shape{1, 1}},
    {Shape{17, 33}, Shape{33, 65}},  // odd sizes
    {Shape{5, 0}, Shape{0, 3}},      // K = 0
    {Shape{2, 5, 0}, Shape{0, 3}},
    {Shape{0}, Shape{0}},        // empty dot product: 0
    {Shape{0, 7}, Shape{7, 3}},  // empty results
    {Shape{3, 0, 7}, Shape{7, 3}},
    {Shape{0, 5, 7}, Shape{7, 3}},
};

TEST(CpuGemm, MatMulBroadcastingEveryDtype) {
  uint64_t seed = 1000;
  for (const MatCase& c : kMatCases)
    for (DType t : kAllDtypes) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + c.x.to_string() + " @ " + c.w.to_string());
      check_op(
          {{t, c.x}, {t, c.w}},
          [](Graph& g, const std::vector<Value>& in) { return g.matmul(in[0], in[1]); }, "matmul",
          seed++);
    }
}

// ---- fused_matmul_bias_act

struct FusedCase {
  Shape x, w, bias;
};

const FusedCase kFusedCases[] = {
    {Shape{5, 7}, Shape{7, 3}, Shape{3}},  // per column: the matmul's bias input
    {Shape{5, 7}, Shape{7, 3}, Shape{1, 3}},
    {Shape{5, 7}, Shape{7, 3}, Shape{5, 3}},  // full
    {Shape{5, 7}, Shape{7, 3}, Shape{5, 1}},  // per row
    {Shape{5, 7}, Shape{7, 3}, Shape{1}},     // scalar
    {Shape{5, 7}, Shape{7, 3}, Shape{}},
    {Shape{4, 6, 9}, Shape{9, 5}, Shape{5}},     // folded batch
    {Shape{4, 6, 9}, Shape{9, 5}, Shape{6, 5}},  // bias repeats per batch: no fold
    {Shape{4, 6, 9}, Shape{9, 5}, Shape{4, 1, 5}},
    {Shape{4, 6, 9}, Shape{9, 5}, Shape{4, 6, 1}},
    {Shape{4, 6, 9}, Shape{4, 9, 5}, Shape{4, 6, 5}},
    {Shape{4, 6, 9}, Shape{4, 9, 5}, Shape{4, 1, 1}},
    {Shape{2, 1, 6, 9}, Shape{3, 9, 5}, Shape{3, 1, 5}},
    {Shape{7}, Shape{7, 3}, Shape{3}},            // 1-D x
    {Shape{5, 7}, Shape{7}, Shape{5}},            // 1-D w
    {Shape{31, 65}, Shape{65, 129}, Shape{129}},  // odd sizes
    {Shape{5, 0}, Shape{0, 3}, Shape{3}},         // K = 0: act(bias)
    {Shape{5, 0}, Shape{0, 3}, Shape{5, 1}},
    {Shape{0, 7}, Shape{7, 3}, Shape{3}},  // empty result
};

const char* kActivations[] = {"none", "relu", "gelu", "gelu_tanh", "silu"};

TEST(CpuGemm, FusedMatMulBiasActEveryActivationBiasShapeDtype) {
  uint64_t seed = 5000;
  for (const FusedCase& c : kFusedCases)
    for (const char* act : kActivations)
      for (DType t : kFloatDtypes) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + act + " " + c.x.to_string() + " @ " +
                     c.w.to_string() + " + " + c.bias.to_string());
        std::string a = act;
        check_op(
            {{t, c.x}, {t, c.w}, {t, c.bias}},
            [a](Graph& g, const std::vector<Value>& in) {
              return g.fused_matmul_bias_act(in[0], in[1], in[2], a);
            },
            "fused_matmul_bias_act", seed++,
            [](Graph& g, const std::vector<Value>& in) {
              return g.fused_matmul_bias_act(in[0], in[1], in[2], "none");
            });
      }
}

// ---- NaN / inf

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// x [1, 1] = 1 times w [1, N] of special values plus bias 0: each pre-activation is one of
// them, so every activation sees NaN, ±inf, ±0, huge and tiny values.
TEST(CpuGemm, FusedActivationsOnSpecialValues) {
  const std::vector<double> vals = {kNaN, -kInf, kInf, -0.0, 0.0,    -1e30, 1e30, -100,
                                    100,  -88.5, -3,   -1,   -1e-30, 1e-30, 0.5,  3};
  int64_t n = static_cast<int64_t>(vals.size());
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64})
    for (const char* act : kActivations) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + act);
      std::string a = act;
      Graph g = op_graph({{t, Shape{1, 1}}, {t, Shape{1, n}}, {t, Shape{n}}},
                         [a](Graph& gr, const std::vector<Value>& in) {
                           return gr.fused_matmul_bias_act(in[0], in[1], in[2], a);
                         });
      std::vector<double> w = vals;
      if (t == DType::f16)  // beyond the f16 range: use the largest finite f16 values instead
        for (double& v : w)
          if (std::isfinite(v) && std::fabs(v) > 65504) v = std::copysign(65504, v);
      TensorMap f =
          feeds_of({Tensor::full(t, Shape{1, 1}, 1.0), Tensor::from_doubles(t, Shape{1, n}, w),
                    Tensor::full(t, Shape{n}, 0.0)});
      Tensor got = run_native(g, f, "fused_matmul_bias_act")[0];
      Tensor want = evaluate(g, f)[0];
      for (int64_t i = 0; i < n; ++i) {
        double x = got.get_f64(i), y = want.get_f64(i);
        SCOPED_TRACE("pre-activation " + std::to_string(w[static_cast<size_t>(i)]));
        if (std::isnan(y)) {
          EXPECT_TRUE(std::isnan(x)) << x;
        } else if (std::isinf(y) || a == "relu" || a == "none") {
          EXPECT_EQ(x, y);  // exact: relu and none involve no approximation
        } else {
          // oneDNN's gelu / gelu_tanh err by up to ~2e-7 * max(1, |pre-activation|), silu
          // by ~3e-7 relative (dnnl_util.h).
          double pre = std::fabs(w[static_cast<size_t>(i)]);
          EXPECT_NEAR(x, y, tol_for(t, t).out * std::fabs(y) + 3e-7 * std::max(1.0, pre));
        }
      }
    }
}

// NaN and inf operands propagate through the sums as in the reference: NaN anywhere in a row
// or column gives NaN, inf * 0 gives NaN, inf + finite stays inf, inf - inf gives NaN.
TEST(CpuGemm, NaNAndInfPropagateThroughMatMul) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Graph g =
        op_graph({{t, Shape{4, 3}}, {t, Shape{3, 5}}},
                 [](Graph& gr, const std::vector<Value>& in) { return gr.matmul(in[0], in[1]); });
    Tensor x = random_tensor(t, Shape{4, 3}, 7), w = random_tensor(t, Shape{3, 5}, 8);
    x.set_f64(0 * 3 + 1, kNaN);  // row 0: NaN
    x.set_f64(1 * 3 + 0, kInf);  // row 1: inf (times column 2's 0 -> NaN)
    w.set_f64(0 * 5 + 2, 0.0);
    x.set_f64(2 * 3 + 0, kInf);  // row 2: inf - inf in column 3
    x.set_f64(2 * 3 + 1, kInf);
    w.set_f64(0 * 5 + 3, 1.0);
    w.set_f64(1 * 5 + 3, -1.0);
    w.set_f64(2 * 5 + 4, -kInf);  // column 4: -inf
    TensorMap f = feeds_of({x, w});
    Tensor got = run_native(g, f, "matmul")[0];
    Tensor want = evaluate(g, f)[0];
    int specials = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      double a = got.get_f64(i), b = want.get_f64(i);
      if (std::isnan(b)) {
        EXPECT_TRUE(std::isnan(a)) << "element " << i;
        ++specials;
      } else if (std::isinf(b)) {
        EXPECT_EQ(a, b) << "element " << i;
        ++specials;
      }
    }
    EXPECT_GE(specials, 8);
  }
}

// ---- the pipeline and the executable

// matmul + add + gelu compiled through Session becomes one fused_matmul_bias_act node that
// runs natively and matches the unfused reference.
TEST(CpuGemm, SessionFusesMatMulAddGeluIntoOneNativeNode) {
  Graph g("ffn");
  Value x = g.input("x", DType::f32, Shape{2, 8, 16});
  Value w = g.param("w", DType::f32, Shape{16, 32});
  Value b = g.param("b", DType::f32, Shape{32});
  g.set_outputs({g.gelu(g.add(g.matmul(x, w), b))});
  Session session;
  auto exe = session.compile(g);
  int fused = 0, others = 0;
  for (const Node& n : exe->compiled_graph().nodes()) {
    if (n.op == OpKind::FusedMatMulBiasAct) {
      ++fused;
      EXPECT_EQ(n.attrs.get_string("activation"), "gelu");
    } else if (!op_info(n.op).has(kLeaf)) {
      ++others;
    }
  }
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(others, 0) << exe->compiled_graph().to_string();
  EXPECT_EQ(exe->kernels().count(OpKind::FusedMatMulBiasAct), (KernelCounts{1, 0}))
      << exe->kernel_report();
  Tensor xt = random_tensor(DType::f32, Shape{2, 8, 16}, 1);
  Tensor wt = random_tensor(DType::f32, Shape{16, 32}, 2);
  Tensor bt = random_tensor(DType::f32, Shape{32}, 3);
  exe->set_param("w", wt);
  exe->set_param("b", bt);
  Tensor got = exe->run({{"x", xt}})[0];
  Tensor want = evaluate(g, {{"x", xt}, {"w", wt}, {"b", bt}})[0];
  EXPECT_TRUE(testing::all_close(got, want, 1e-5, 1e-5));
}

// Calls the native kernel of `g`'s output node directly (the executor's own per-run
// allocations are not the kernel's) on random inputs, once to warm up (the thread's scratch
// and stream, oneDNN's lazily made state), then once more; returns the operator new calls of
// that second call, and checks its result against the reference evaluator (relative and
// absolute tolerance `tol`).
int64_t steady_state_allocations(const Graph& g, const std::vector<TensorType>& types, double tol) {
  std::vector<Tensor> ins;
  for (size_t i = 0; i < types.size(); ++i)
    ins.push_back(random_tensor(types[i].dtype, types[i].shape, 40 + i));
  const Node& node = g.node(g.outputs()[0]);
  Session session;
  session.compile(g);  // registers the kernels
  cpu::Kernel kernel = cpu::kernel_table().at(node.op).factory(g, node);
  EXPECT_TRUE(kernel);
  if (!kernel) return -1;
  std::vector<const std::byte*> in;
  for (const Tensor& t : ins) in.push_back(t.data());
  Tensor out(node.results[0].dtype, node.results[0].shape);
  std::byte* outs[] = {out.data()};
  cpu::KernelIO io{in.data(), outs};
  kernel(io);
  int64_t n = testing::allocations_of([&] { kernel(io); });
  Tensor want = evaluate(g, feeds_of(ins))[0];
  EXPECT_TRUE(testing::all_close(out, want, tol, tol));
  return n;
}

struct AllocCase {
  const char* label;
  std::vector<TensorType> types;
  Build build;
};

TensorType f32_type(Shape s) { return {DType::f32, std::move(s)}; }

// A steady-state call of a small f32 gemm (the small path: an RNN step, a layer of a few
// rows) allocates nothing, whatever the bias broadcast, activation, batch or strides; its
// result equals the reference evaluator's.
TEST(CpuGemm, SmallPathCallAllocatesNothing) {
  if (!RLX_COUNT_ALLOCATIONS) GTEST_SKIP() << "a sanitizer owns operator new in this build";
  const AllocCase cases[] = {
      {"matmul 8x64 @ 64x64",
       {f32_type({8, 64}), f32_type({64, 64})},
       [](Graph& g, const std::vector<Value>& v) { return g.matmul(v[0], v[1]); }},
      {"fused per-column bias, relu",
       {f32_type({8, 64}), f32_type({64, 64}), f32_type({64})},
       [](Graph& g, const std::vector<Value>& v) {
         return g.fused_matmul_bias_act(v[0], v[1], v[2], "relu");
       }},
      {"fused per-row bias, gelu, 21 columns (masked tail)",
       {f32_type({6, 40}), f32_type({40, 21}), f32_type({6, 1})},
       [](Graph& g, const std::vector<Value>& v) {
         return g.fused_matmul_bias_act(v[0], v[1], v[2], "gelu");
       }},
      {"batched, broadcast weights",
       {f32_type({3, 5, 16}), f32_type({16, 8})},
       [](Graph& g, const std::vector<Value>& v) { return g.matmul(v[0], v[1]); }},
      {"dot_general, batch dim in the middle (strided views)",
       {f32_type({2, 16, 5}), f32_type({2, 16, 7})},
       [](Graph& g, const std::vector<Value>& v) {
         return g.dot_general(v[0], v[1], {1}, {1}, {0}, {0});
       }},
  };
  for (const AllocCase& c : cases) {
    SCOPED_TRACE(c.label);
    EXPECT_EQ(steady_state_allocations(op_graph(c.types, c.build), c.types, 1e-5), 0);
  }
}

// The oneDNN path (larger problems, fewer than 4 rows, f16 / bf16) makes no memory object,
// argument map or std::function per call (its arguments are bound once, gemm.cc BoundArgs);
// what remains is oneDNN 2.6's own: dnnl_primitive_execute copies the argument array into its
// own argument map and execution context, 2 allocations per argument (src, weights, dst, and
// the bias when there is one; before this, a call made 13 to 21). The fused cases have an
// activation post-op: a bias with none (also relu on an f32 result, which runs after the matmul)
// measures 7 here, one fewer.
TEST(CpuGemm, DnnlPathCallAllocatesOnlyInsideOneDnn) {
  if (!RLX_COUNT_ALLOCATIONS) GTEST_SKIP() << "a sanitizer owns operator new in this build";
  const AllocCase cases[] = {
      {"matmul 1x64 @ 64x64",
       {f32_type({1, 64}), f32_type({64, 64})},
       [](Graph& g, const std::vector<Value>& v) { return g.matmul(v[0], v[1]); }},
      {"fused 2 rows, per-column bias, gelu",
       {f32_type({2, 64}), f32_type({64, 64}), f32_type({64})},
       [](Graph& g, const std::vector<Value>& v) {
         return g.fused_matmul_bias_act(v[0], v[1], v[2], "gelu");
       }},
      {"matmul 64x64 @ 64x64 (above the small path)",
       {f32_type({64, 64}), f32_type({64, 64})},
       [](Graph& g, const std::vector<Value>& v) { return g.matmul(v[0], v[1]); }},
      {"f16 fused, converted copies",
       {{DType::f16, {4, 24}}, {DType::f16, {24, 16}}, {DType::f16, {16}}},
       [](Graph& g, const std::vector<Value>& v) {
         return g.fused_matmul_bias_act(v[0], v[1], v[2], "silu");
       }},
  };
  for (const AllocCase& c : cases) {
    SCOPED_TRACE(c.label);
    int64_t args = static_cast<int64_t>(c.types.size()) + 1;  // the operands and the result
    EXPECT_EQ(steady_state_allocations(op_graph(c.types, c.build), c.types, 1e-2), 2 * args);
  }
}

// Threads of this process (entries of /proc/self/task).
int64_t process_threads() {
  int64_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// With more than one thread, a large enough 2-D oneDNN GEMM runs as a grid of single-threaded
// chunks over rlx's pool (gemm.cc GemmGrid): one parallel region per call, no OpenMP team of
// oneDNN's own (the process gains no threads beyond the pool), and results bitwise equal for
// 2, 3 and 4 threads (the grid depends on the shape only), also with clones running at once.
// Against the unsplit matmul (1 thread): bitwise equal for row blocks, within rounding for
// column blocks (oneDNN picks a chunk's K blocking from its width). Tails in M and N, bias and
// activation post-ops, f32 and bf16.
TEST(CpuGemm, GridChunksDoNotDependOnTheThreadCount) {
  testing::ThreadCountGuard restore_threads;
  struct GridCase {
    const char* label;
    std::vector<TensorType> types;
    Build build;
    bool rows;  // split into row blocks (else column blocks)
  };
  const GridCase cases[] = {
      // 1100 rows: 3 row blocks of at most 512 made 4 of 275 (an even count).
      {"f32 per-column bias, gelu, row blocks with a tail",
       {f32_type({1100, 16}), f32_type({16, 150}), f32_type({150})},
       [](Graph& g, const std::vector<Value>& v) {
         return g.fused_matmul_bias_act(v[0], v[1], v[2], "gelu");
       },
       true},
      // 192 rows, 360 columns: column blocks of 192 and 168.
      {"f32 matmul, batch folded into M, column blocks with a tail",
       {f32_type({2, 96, 64}), f32_type({64, 360})},
       [](Graph& g, const std::vector<Value>& v) { return g.matmul(v[0], v[1]); },
       false},
      {"f32 full [M, N] bias (post-op), relu",
       {f32_type({200, 48}), f32_type({48, 300}), f32_type({200, 300})},
       [](Graph& g, const std::vector<Value>& v) {
         return g.fused_matmul_bias_act(v[0], v[1], v[2], "relu");
       },
       false},
      // The shape of MiniLM's FFN output projection (K = 1536, N = 384), fewer rows: 2 column
      // blocks.
      {"f32 K = 1536, per-column bias",
       {f32_type({32, 1536}), f32_type({1536, 384}), f32_type({384})},
       [](Graph& g, const std::vector<Value>& v) {
         return g.fused_matmul_bias_act(v[0], v[1], v[2], "none");
       },
       false},
      // 520 columns: 3 blocks of at most 192 made 4 (144, 144, 144 and a tail of 88), the
      // count of the 512 x 512 sgemm's grid (was 3).
      {"f32 odd column count made even, tail",
       {f32_type({96, 64}), f32_type({64, 520})},
       [](Graph& g, const std::vector<Value>& v) { return g.matmul(v[0], v[1]); },
       false},
      // GELU applied per column chunk (4 blocks of 160, 160, 160 and 120).
      {"f32 per-column bias, gelu, column blocks with a tail",
       {f32_type({64, 64}), f32_type({64, 600}), f32_type({600})},
       [](Graph& g, const std::vector<Value>& v) {
         return g.fused_matmul_bias_act(v[0], v[1], v[2], "gelu");
       },
       false},
      // Wide: 1025 rows and 2100 columns split both ways, row blocks of 513 and 512 by column
      // blocks of 1056 and 1044.
      {"f32 wide 2-D grid with tails, per-column bias",
       {f32_type({1025, 2}), f32_type({2, 2100}), f32_type({2100})},
       [](Graph& g, const std::vector<Value>& v) {
         return g.fused_matmul_bias_act(v[0], v[1], v[2], "none");
       },
       false},
      // Rows and 1024-2048 columns split both ways too (MiniLM batch 32's QKV and FFN input
      // projections): 2 row blocks of 515 by column blocks of 560 and 540.
      {"f32 2-D grid from 1024 columns with tails, per-column bias, relu",
       {f32_type({1030, 8}), f32_type({8, 1100}), f32_type({1100})},
       [](Graph& g, const std::vector<Value>& v) {
         return g.fused_matmul_bias_act(v[0], v[1], v[2], "relu");
       },
       false},
      {"bf16 per-column bias, silu",
       {{DType::bf16, {160, 64}}, {DType::bf16, {64, 330}}, {DType::bf16, {330}}},
       [](Graph& g, const std::vector<Value>& v) {
         return g.fused_matmul_bias_act(v[0], v[1], v[2], "silu");
       },
       false},
  };
  for (const GridCase& c : cases) {
    SCOPED_TRACE(c.label);
    Graph g = op_graph(c.types, c.build);
    std::vector<Tensor> ins;
    for (size_t i = 0; i < c.types.size(); ++i)
      ins.push_back(random_tensor(c.types[i].dtype, c.types[i].shape, 60 + i));
    TensorMap feeds = feeds_of(ins);
    Tensor want = evaluate(g, feeds)[0];
    // Sums of up to 1536 products of values in [-2, 2] (|C| ~ 100): f32 rounding, or a bf16
    // result's (2^-9 relative).
    bool bf16 = c.types[0].dtype == DType::bf16;
    double tol = bf16 ? 1e-2 : 1e-5, atol = bf16 ? 0.1 : 1e-3;
    set_num_threads(1);
    Session session;
    auto exe = session.compile(g);
    EXPECT_EQ(exe->kernels().count(g.node(g.outputs()[0]).op), (KernelCounts{1, 0}));
    Tensor serial = exe->run(feeds)[0];
    EXPECT_TRUE(testing::all_close(serial, want, tol, atol));
    std::optional<Tensor> split;
    for (int n : {2, 3, 4}) {
      SCOPED_TRACE(std::to_string(n) + " threads");
      set_num_threads(n);
      exe->run(feeds);  // the pool's threads exist from here on
      const int64_t threads = process_threads(), regions = parallel_regions();
      Tensor got = exe->run(feeds)[0];
      EXPECT_EQ(parallel_regions() - regions, 1);
      EXPECT_LE(process_threads(), threads);
      if (c.rows)
        EXPECT_TRUE(got.bitwise_equal(serial));
      else
        EXPECT_TRUE(testing::all_close(got, serial, tol, atol));
      if (!split) split = got;
      EXPECT_TRUE(got.bitwise_equal(*split));
      if (n != 2) continue;
      // Clones running at once: each chunk binds an argument set of its own.
      std::vector<Tensor> concurrent(3);
      std::vector<std::thread> callers;
      for (Tensor& out : concurrent)
        callers.emplace_back([&, clone = std::shared_ptr<Executable>(exe->clone())] {
          for (int rep = 0; rep < 3; ++rep) out = clone->run(feeds)[0];
        });
      for (std::thread& t : callers) t.join();
      for (const Tensor& out : concurrent) EXPECT_TRUE(out.bitwise_equal(*split));
    }
  }
}

// Clones of one executable share its kernels (and oneDNN primitives) and run concurrently:
// each thread's results must equal a serial run on the same inputs.
TEST(CpuGemm, ConcurrentClonesShareKernels) {
  Graph g("mm");
  Value x = g.input("x", DType::f16, Shape{3, 20, 24});  // f16: scratch copies per call
  Value w = g.input("w", DType::f16, Shape{24, 18});
  Value b = g.input("b", DType::f16, Shape{20, 1});
  g.set_outputs({g.fused_matmul_bias_act(x, w, b, "silu"), g.matmul(x, w)});
  Session session;
  auto exe = session.compile(g);
  const int kThreads = 12;  // more than a kernel pools argument sets for (8)
  std::vector<TensorMap> feeds(kThreads);
  std::vector<std::vector<Tensor>> serial(kThreads), concurrent(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    uint64_t s = static_cast<uint64_t>(10 * i);
    feeds[static_cast<size_t>(i)] = {{"x", random_tensor(DType::f16, Shape{3, 20, 24}, s)},
                                     {"w", random_tensor(DType::f16, Shape{24, 18}, s + 1)},
                                     {"b", random_tensor(DType::f16, Shape{20, 1}, s + 2)}};
    serial[static_cast<size_t>(i)] = exe->run(feeds[static_cast<size_t>(i)]);
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      auto clone = exe->clone();
      for (int rep = 0; rep < 20; ++rep)
        concurrent[static_cast<size_t>(i)] = clone->run(feeds[static_cast<size_t>(i)]);
    });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < static_cast<size_t>(kThreads); ++i)
    for (size_t o = 0; o < 2; ++o)
      EXPECT_TRUE(testing::all_close(concurrent[i][o], serial[i][o], 0, 0));
}

}  // namespace
}  // namespace rlx
