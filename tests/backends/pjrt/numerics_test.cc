// Edge-input numerics on the XLA plugin (issue 18, item 8): NaN through max / min and the ops
// built on them, |erf| <= 1, f32 statistics of f16 normalisations, and an attention bias of
// f32's lowest value under auto-mixed-bf16. Each expectation is an independent reference
// (jax 0.4.38 / NumPy / math.erf in double, values written out below), not XLA's output.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "pjrt_test_util.h"

namespace rlx::pjrt::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<Tensor> run_on_plugin(const Graph& g, const TensorMap& inputs,
                                  const CompileOptions& options = f32_options()) {
  std::unique_ptr<Executable> exe =
      test_backend()->compile(g, options, Device{DeviceKind::Pjrt, 0});
  return exe->run(inputs);
}

// Elementwise: NaN where `want` is NaN, else |got - want| <= atol + rtol |want|.
void expect_values(const Tensor& got, const std::vector<double>& want, Tolerance tol,
                   const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    double a = got.get_f64(static_cast<int64_t>(i));
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(a)) << what << "[" << i << "]: got " << a << ", want NaN";
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(a, want[i]) << what << "[" << i << "]";
    } else {
      EXPECT_NEAR(a, want[i], tol.atol + tol.rtol * std::fabs(want[i])) << what << "[" << i << "]";
    }
  }
}

// ---- max / min and the ops lowered through them propagate NaN (lax.max: NaN if either is
// NaN; jnp.maximum(1, nan) = nan, jnp.max([3, nan, 1, 5]) = nan). XLA CPU's fast min/max would
// return the other operand.

TEST(PjrtNumerics, MaxMinPropagateNaN) {
  RLX_REQUIRE_PJRT_PLUGIN();
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Graph g("max_min_nan");
    Value a = g.input("a", t, Shape{5}), b = g.input("b", t, Shape{5});
    g.set_outputs({g.max(a, b), g.min(a, b), g.max(b, a), g.min(b, a)});
    TensorMap in{
        {"a", Tensor::from_doubles(t, Shape{5}, std::vector<double>{1, kNaN, kNaN, 2, -kInf})},
        {"b", Tensor::from_doubles(t, Shape{5}, std::vector<double>{kNaN, 1, kNaN, 3, kInf})}};
    std::vector<Tensor> out = run_on_plugin(g, in);
    std::string name(dtype_name(t));
    expect_values(out[0], {kNaN, kNaN, kNaN, 3, kInf}, kF32Tol, "max(a, b) " + name);
    expect_values(out[1], {kNaN, kNaN, kNaN, 2, -kInf}, kF32Tol, "min(a, b) " + name);
    expect_values(out[2], {kNaN, kNaN, kNaN, 3, kInf}, kF32Tol, "max(b, a) " + name);
    expect_values(out[3], {kNaN, kNaN, kNaN, 2, -kInf}, kF32Tol, "min(b, a) " + name);
  }
}

TEST(PjrtNumerics, ReduceMaxMinPropagateNaN) {
  RLX_REQUIRE_PJRT_PLUGIN();
  for (DType t : {DType::f32, DType::f64, DType::bf16}) {
    Graph g("reduce_nan");
    Value x = g.input("x", t, Shape{3, 4});
    g.set_outputs({g.reduce_max(x, {1}), g.reduce_min(x, {1}), g.reduce_max(x, {0, 1})});
    TensorMap in{{"x", Tensor::from_doubles(t, Shape{3, 4},
                                            std::vector<double>{3, kNaN, 1, 5,  //
                                                                1, 2, 3, kNaN,  //
                                                                -1, -kInf, 4, 0})}};
    std::vector<Tensor> out = run_on_plugin(g, in);
    std::string name(dtype_name(t));
    expect_values(out[0], {kNaN, kNaN, 4}, kF32Tol, "reduce_max " + name);
    expect_values(out[1], {kNaN, kNaN, -kInf}, kF32Tol, "reduce_min " + name);
    expect_values(out[2], {kNaN}, kF32Tol, "reduce_max all " + name);
  }
}

// clamp (lax.clamp = min(max(x, lo), hi)), relu (max(x, 0)), max_pool (a max over windows)
// and softmax (max-subtracted) on NaN; argmax / argmin count NaN as the extremum.
TEST(PjrtNumerics, OpsBuiltOnMaxMinPropagateNaN) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g("built_on_max");
  Value x = g.input("x", DType::f32, Shape{1, 1, 4});
  Value lo = g.scalar(0, DType::f32), hi = g.scalar(1, DType::f32);
  g.set_outputs({g.clamp(lo, x, hi), g.relu(x), g.max_pool(x, {2}, {2}), g.softmax(x),
                 g.argmax(x, -1), g.argmin(x, -1)});
  TensorMap in{{"x", Tensor::from_doubles(DType::f32, Shape{1, 1, 4},
                                          std::vector<double>{0.5, kNaN, 2, -3})}};
  std::vector<Tensor> out = run_on_plugin(g, in);
  expect_values(out[0], {0.5, kNaN, 1, 0}, kF32Tol, "clamp");
  expect_values(out[1], {0.5, kNaN, 2, 0}, kF32Tol, "relu");
  expect_values(out[2], {kNaN, 2}, kF32Tol, "max_pool");
  expect_values(out[3], {kNaN, kNaN, kNaN, kNaN}, kF32Tol, "softmax");
  EXPECT_EQ(out[4].get_i64(0), 1) << "argmax";
  EXPECT_EQ(out[5].get_i64(0), 1) << "argmin";
}

// ---- erf stays in [-1, 1]: XLA's f32 erf approximation gives 1.0000001 at 3.7288418 (jax
// 0.4.38 on the same plugin too); math.erf in double rounds to 0.9999999 in f32. Exact gelu
// (x * (1 + erf(x / sqrt 2)) / 2) then never exceeds x for x > 0.
TEST(PjrtNumerics, ErfStaysInUnitInterval) {
  RLX_REQUIRE_PJRT_PLUGIN();
  std::vector<double> xs;
  for (int i = -2000; i <= 2000; ++i) xs.push_back(i / 200.0);  // [-10, 10] step 0.005
  xs.push_back(3.7288418);
  xs.push_back(-3.7288418);
  const Shape s{static_cast<int64_t>(xs.size())};
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    Graph g("erf_range");
    Value x = g.input("x", t, s);
    g.set_outputs({g.erf(x), g.gelu(x)});
    Tensor in = Tensor::from_doubles(t, s, xs);
    std::vector<Tensor> out = run_on_plugin(g, {{"x", in}});
    for (int64_t i = 0; i < in.numel(); ++i) {
      double v = in.get_f64(i), e = out[0].get_f64(i), ge = out[1].get_f64(i);
      ASSERT_LE(std::fabs(e), 1.0) << dtype_name(t) << " erf(" << v << ") = " << e;
      // XLA's f32 erf is within a few ulp (4e-7 is 6 ulp below 1); f16 / bf16 round once more.
      EXPECT_NEAR(e, std::erf(v), 4e-7 + (t == DType::f32 ? 0 : 8e-3)) << "erf(" << v << ")";
      if (v > 0) {
        EXPECT_LE(ge, v) << dtype_name(t) << " gelu(" << v << ")";
      }
    }
  }
  Graph g("erf_point");
  g.set_outputs({g.erf(g.input("x", DType::f32, Shape{1}))});
  std::vector<Tensor> out = run_on_plugin(
      g, {{"x", Tensor::from_doubles(DType::f32, Shape{1}, std::vector<double>{3.7288418})}});
  EXPECT_LE(out[0].get_f64(0), 1.0);
  EXPECT_NEAR(out[0].get_f64(0), 0.9999998660651517, 2e-7);  // math.erf(3.728841781616211)
}

// ---- f16 normalisations keep their statistics in f32 (NumPy in double, rounded to f16):
// layer_norm([60000, 60032, 60064, 60096]) = [-1.342, -0.4473, 0.4473, 1.342] (mean 60048 is
// not an f16: rounded, it gives [-0.816, 0, 0.816, 1.633]); rms_norm([300] * 4) = 1 (300^2 is
// past f16's 65504). Under every precision policy: always-f16 / always-bf16 decompose them
// after AMP (run_standard_pipeline), which would otherwise round the f32 statistics.
// References of layer_norm, rms_norm, softmax and log_softmax over rows of 4 of `v`, in double.
struct NormRefs {
  std::vector<double> ln, rms, sm, lsm;
};
NormRefs norm_references(const std::vector<double>& v) {
  NormRefs r{std::vector<double>(v.size()), std::vector<double>(v.size()),
             std::vector<double>(v.size()), std::vector<double>(v.size())};
  for (size_t row = 0; row < v.size() / 4; ++row) {
    double mean = 0, ms = 0, mx = -kInf, var = 0, se = 0;
    for (size_t k = row * 4; k < row * 4 + 4; ++k) {
      mean += v[k] / 4;
      ms += v[k] * v[k] / 4;
      mx = std::max(mx, v[k]);
    }
    for (size_t k = row * 4; k < row * 4 + 4; ++k) {
      var += (v[k] - mean) * (v[k] - mean) / 4;
      se += std::exp(v[k] - mx);
    }
    for (size_t k = row * 4; k < row * 4 + 4; ++k) {
      r.ln[k] = (v[k] - mean) / std::sqrt(var + 1e-5);
      r.rms[k] = v[k] / std::sqrt(ms + 1e-6);
      r.sm[k] = std::exp(v[k] - mx) / se;
      r.lsm[k] = v[k] - mx - std::log(se);
    }
  }
  return r;
}

TEST(PjrtNumerics, HalfNormsKeepF32Statistics) {
  RLX_REQUIRE_PJRT_PLUGIN();
  const std::vector<double> values = {60000, 60032, 60064, 60096, 300, 300, 300, 300};
  for (DType t : {DType::f16, DType::bf16}) {
    Graph g("half_norms");
    Value x = g.input("x", t, Shape{2, 4});
    Value scale = g.constant(Tensor::full(t, Shape{4}, 1));
    Value bias = g.constant(Tensor::full(t, Shape{4}, 0));
    g.set_outputs(
        {g.layer_norm(x, scale, bias), g.rms_norm(x, scale), g.softmax(x), g.log_softmax(x)});
    Tensor in = Tensor::from_doubles(t, Shape{2, 4}, values);
    std::vector<PrecisionPolicy> policies = {{PrecisionMode::AlwaysF32, {}},
                                             {PrecisionMode::AutoMixedBf16, {}},
                                             {PrecisionMode::AutoMixedF16, {}},
                                             {PrecisionMode::AlwaysF16, {}},
                                             {PrecisionMode::AlwaysBf16, {}}};
    for (const PrecisionPolicy& p : policies) {
      // The values the normalisation sees: the input (exact in f16; bf16 keeps 8 bits), rounded
      // once more to the low dtype under always-f16 / always-bf16. The references are computed
      // from those, in double; the tolerance is one rounding of an O(1) result to the coarser
      // of the two dtypes (the statistics themselves are f32).
      bool always_low = !p.is_auto() && p.low_dtype() != DType::f32;
      Tensor seen = always_low ? Tensor::from_doubles(p.low_dtype(), Shape{2, 4},
                                                      std::vector<double>(values.size()))
                               : in;
      for (int64_t i = 0; always_low && i < 8; ++i) seen.set_f64(i, in.get_f64(i));
      std::vector<double> v(8);
      for (int64_t i = 0; i < 8; ++i) v[static_cast<size_t>(i)] = seen.get_f64(i);
      NormRefs ref = norm_references(v);
      bool coarse = t == DType::bf16 || (always_low && p.low_dtype() == DType::bf16);
      Tolerance tol = coarse ? Tolerance{1.6e-2, 1.6e-2} : Tolerance{2e-3, 2e-3};
      CompileOptions o;
      o.precision = p;
      std::vector<Tensor> out = run_on_plugin(g, {{"x", in}}, o);
      std::string what = std::string(dtype_name(t)) + " under " + to_string(p) + ": ";
      expect_values(out[0], ref.ln, tol, what + "layer_norm");
      expect_values(out[1], ref.rms, tol, what + "rms_norm");
      expect_values(out[2], ref.sm, tol, what + "softmax");
      expect_values(out[3], ref.lsm, tol, what + "log_softmax");
    }
  }
}

// ---- an additive attention bias of f32's lowest value (a "heavily masked" key, not a masked
// one) under auto-mixed-bf16: converted to bf16 it would round to -inf. A row whose keys all
// carry it is uniform: the output is the mean of V, as in f32 (jax: softmax of equal scores).
TEST(PjrtNumerics, AttentionLowestBiasUnderBf16) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g("lowest_bias");
  Value q = g.input("q", DType::f32, Shape{1, 1, 2, 4});
  Value k = g.input("k", DType::f32, Shape{1, 1, 3, 4});
  Value v = g.input("v", DType::f32, Shape{1, 1, 3, 2});
  Value bias = g.input("bias", DType::f32, Shape{1, 1, 2, 3});
  Graph::AttentionOptions ao;
  ao.mask = "bias";
  g.set_outputs({g.attention(q, k, v, ao, bias)});
  double lowest = std::numeric_limits<float>::lowest();
  TensorMap in{
      {"q", Tensor::from_doubles(DType::f32, Shape{1, 1, 2, 4},
                                 std::vector<double>{0, 0, 0, 0, 1, 0, -0.5, 0.75})},
      {"k",
       Tensor::from_doubles(DType::f32, Shape{1, 1, 3, 4},
                            std::vector<double>{1, 0.5, -1, 0, 0, 1, 1, -0.5, 0.25, 0, 0.5, 1})},
      {"v",
       Tensor::from_doubles(DType::f32, Shape{1, 1, 3, 2}, std::vector<double>{1, 2, 3, 4, 5, 9})},
      // Row 0 (q = 0: equal scores, so uniform in any arithmetic): every key heavily masked;
      // row 1: key 2 only.
      {"bias", Tensor::from_doubles(DType::f32, Shape{1, 1, 2, 3},
                                    std::vector<double>{lowest, lowest, lowest, 0, 0, lowest})}};
  // Under always-bf16 attention reaches AMP whole (decomposed after it), whose bias
  // conversion must saturate.
  for (PrecisionMode m :
       {PrecisionMode::AlwaysF32, PrecisionMode::AutoMixedBf16, PrecisionMode::AlwaysBf16}) {
    CompileOptions o;
    o.precision = PrecisionPolicy{m, {}};
    std::vector<Tensor> out = run_on_plugin(g, in, o);
    // Row 0: mean of V = (3, 5). Row 1 is a softmax over keys 0 and 1 only: checked against
    // the reference evaluator in f32.
    std::vector<Tensor> ref = evaluate(g, in);
    for (int64_t i = 0; i < 4; ++i) {
      double want = i < 2 ? std::vector<double>{3, 5}[static_cast<size_t>(i)] : ref[0].get_f64(i);
      EXPECT_NEAR(out[0].get_f64(i), want, 5e-2) << precision_mode_name(m) << " element " << i;
    }
  }
}

}  // namespace
}  // namespace rlx::pjrt::testing
