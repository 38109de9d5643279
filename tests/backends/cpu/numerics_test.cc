// Edge-input numerics of issue 18, item 8 on the CPU backend, native kernels and the decomposed
// path (force_common): NaN through max / min, |erf| <= 1, f32 statistics of f16 / bf16
// normalisations, and an attention bias of f32's lowest value under auto-mixed-bf16. The
// expectations are independent references (NumPy / jax 0.4.38 / math.erf in double), written
// out below. The same cases run on the XLA plugin in tests/backends/pjrt/numerics_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/exe_util.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/decompose.h"
#include "rlx/runtime/backend.h"

namespace rlx {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Config {
  const char* name;
  KernelDispatch dispatch;
  std::optional<PrecisionPolicy> precision;
};

std::vector<Tensor> run_cpu(const Graph& g, const TensorMap& feeds, const Config& c) {
  CompileOptions o;
  o.dispatch = DispatchOptions{c.dispatch, {}};
  o.precision = c.precision;
  std::unique_ptr<Executable> exe = backend_for(DeviceKind::Cpu)->compile(g, o, Device::cpu());
  TensorMap inputs = testing::bind_params(*exe, feeds);
  return exe->run(inputs);
}

void expect_values(const Tensor& got, const std::vector<double>& want, double tol,
                   const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    double a = got.get_f64(static_cast<int64_t>(i));
    if (std::isnan(want[i]))
      EXPECT_TRUE(std::isnan(a)) << what << "[" << i << "]: got " << a << ", want NaN";
    else
      EXPECT_NEAR(a, want[i], tol * std::max(1.0, std::fabs(want[i]))) << what << "[" << i << "]";
  }
}

const Config kConfigs[] = {
    {"native", KernelDispatch::PreferNative, std::nullopt},
    {"force_common", KernelDispatch::ForceCommon, std::nullopt},
    {"native/always-f32", KernelDispatch::PreferNative,
     PrecisionPolicy{PrecisionMode::AlwaysF32, {}}},
    {"force_common/always-f32", KernelDispatch::ForceCommon,
     PrecisionPolicy{PrecisionMode::AlwaysF32, {}}},
    {"native/auto-mixed-bf16", KernelDispatch::PreferNative,
     PrecisionPolicy{PrecisionMode::AutoMixedBf16, {}}},
    {"force_common/auto-mixed-bf16", KernelDispatch::ForceCommon,
     PrecisionPolicy{PrecisionMode::AutoMixedBf16, {}}},
};

// jnp.maximum(1, nan) = nan, jnp.max([3, nan, 1, 5]) = nan, lax.clamp(0, nan, 1) = nan.
TEST(CpuNumerics, MaxMinPropagateNaN) {
  Graph g("max_min_nan");
  Value a = g.input("a", DType::f32, Shape{4}), b = g.input("b", DType::f32, Shape{4});
  g.set_outputs({g.max(a, b), g.min(b, a), g.reduce_max(a, {0}), g.reduce_min(a, {0}),
                 g.clamp(g.scalar(0, DType::f32), a, g.scalar(1, DType::f32)), g.relu(a)});
  TensorMap in{
      {"a", Tensor::from_doubles(DType::f32, Shape{4}, std::vector<double>{3, kNaN, 1, 5})},
      {"b", Tensor::from_doubles(DType::f32, Shape{4}, std::vector<double>{kNaN, 1, 2, 3})}};
  for (const Config& c : kConfigs) {
    std::vector<Tensor> out = run_cpu(g, in, c);
    expect_values(out[0], {kNaN, kNaN, 2, 5}, 0, std::string(c.name) + " max");
    expect_values(out[1], {kNaN, kNaN, 1, 3}, 0, std::string(c.name) + " min");
    expect_values(out[2], {kNaN}, 0, std::string(c.name) + " reduce_max");
    expect_values(out[3], {kNaN}, 0, std::string(c.name) + " reduce_min");
    expect_values(out[4], {1, kNaN, 1, 1}, 0, std::string(c.name) + " clamp");
    expect_values(out[5], {3, kNaN, 1, 5}, 0, std::string(c.name) + " relu");
  }
}

// |erf| <= 1 and exact gelu(x) <= x for x > 0 (math.erf(3.728841781616211) = 0.99999987).
TEST(CpuNumerics, ErfStaysInUnitInterval) {
  std::vector<double> xs;
  for (int i = -2000; i <= 2000; ++i) xs.push_back(i / 200.0);
  xs.push_back(3.7288418);
  const Shape s{static_cast<int64_t>(xs.size())};
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    Graph g("erf_range");
    Value x = g.input("x", t, s);
    g.set_outputs({g.erf(x), g.gelu(x)});
    Tensor in = Tensor::from_doubles(t, s, xs);
    for (const Config& c : kConfigs) {
      std::vector<Tensor> out = run_cpu(g, {{"x", in}}, c);
      for (int64_t i = 0; i < in.numel(); ++i) {
        double v = in.get_f64(i), e = out[0].get_f64(i);
        ASSERT_LE(std::fabs(e), 1.0) << c.name << " " << dtype_name(t) << " erf(" << v << ")";
        if (v > 0) {
          ASSERT_LE(out[1].get_f64(i), v) << c.name << " " << dtype_name(t) << " gelu(" << v << ")";
        }
      }
    }
  }
}

// f16 layer_norm([60000, 60032, 60064, 60096]) = [-1.342, -0.4473, 0.4473, 1.342] and
// rms_norm([300] * 4) = 1 (NumPy in double); with f16 statistics they were [-0.816, 0, 0.816,
// 1.633] and 0. The reference evaluator of the decomposed graph (each op rounded to its
// dtype) is checked too: it is what the decomposition means.
TEST(CpuNumerics, HalfNormsKeepF32Statistics) {
  const std::vector<double> values = {60000, 60032, 60064, 60096, 300, 300, 300, 300};
  std::vector<Config> configs(std::begin(kConfigs), std::end(kConfigs));
  for (KernelDispatch d : {KernelDispatch::PreferNative, KernelDispatch::ForceCommon})
    for (PrecisionMode m : {PrecisionMode::AlwaysF16, PrecisionMode::AlwaysBf16})
      configs.push_back(
          {d == KernelDispatch::PreferNative ? "native/always-low" : "force_common/always-low", d,
           PrecisionPolicy{m, {}}});
  for (DType t : {DType::f16, DType::bf16}) {
    Graph g("half_norms");
    Value x = g.input("x", t, Shape{2, 4});
    Value scale = g.constant(Tensor::full(t, Shape{4}, 1));
    Value bias = g.constant(Tensor::full(t, Shape{4}, 0));
    g.set_outputs(
        {g.layer_norm(x, scale, bias), g.rms_norm(x, scale), g.softmax(x), g.log_softmax(x)});
    Tensor in = Tensor::from_doubles(t, Shape{2, 4}, values);
    std::string dt(dtype_name(t));
    auto check = [&](const std::vector<Tensor>& out, const std::optional<PrecisionPolicy>& p,
                     const std::string& what) {
      // The values the normalisation sees (under always-f16 / always-bf16 the input is rounded
      // once more to the low dtype); references from those in double, tolerance one rounding
      // of an O(1) result to the coarser dtype.
      bool always_low = p && !p->is_auto() && p->low_dtype() != DType::f32;
      DType seen = always_low ? p->low_dtype() : t;
      std::vector<double> v(8), ln(8), rms(8), sm(8), lsm(8);
      Tensor rounded = Tensor::from_doubles(seen, Shape{2, 4}, std::vector<double>(8));
      for (int64_t i = 0; i < 8; ++i) rounded.set_f64(i, in.get_f64(i));
      for (int64_t i = 0; i < 8; ++i) v[static_cast<size_t>(i)] = rounded.get_f64(i);
      for (size_t r = 0; r < 2; ++r) {
        double mean = 0, ms = 0, mx = -kInf, var = 0, se = 0;
        for (size_t j = 0; j < 4; ++j) {
          mean += v[r * 4 + j] / 4;
          ms += v[r * 4 + j] * v[r * 4 + j] / 4;
          mx = std::max(mx, v[r * 4 + j]);
        }
        for (size_t j = 0; j < 4; ++j) {
          var += (v[r * 4 + j] - mean) * (v[r * 4 + j] - mean) / 4;
          se += std::exp(v[r * 4 + j] - mx);
        }
        for (size_t j = 0; j < 4; ++j) {
          size_t k = r * 4 + j;
          ln[k] = (v[k] - mean) / std::sqrt(var + 1e-5);
          rms[k] = v[k] / std::sqrt(ms + 1e-6);
          sm[k] = std::exp(v[k] - mx) / se;
          lsm[k] = v[k] - mx - std::log(se);
        }
      }
      double tol = t == DType::bf16 || seen == DType::bf16 ? 1.6e-2 : 2e-3;
      std::string name = dt + " " + what + (p ? " " + to_string(*p) : "");
      expect_values(out[0], ln, tol, name + " layer_norm");
      expect_values(out[1], rms, tol, name + " rms_norm");
      expect_values(out[2], sm, tol, name + " softmax");
      expect_values(out[3], lsm, tol, name + " log_softmax");
    };
    for (const Config& c : configs) check(run_cpu(g, {{"x", in}}, c), c.precision, c.name);
    check(evaluate(decompose(g), {{"x", in}}), std::nullopt, "evaluator of the decomposed graph");
  }
}

// Under auto-mixed-bf16 an additive attention bias holding f32's lowest value must not become
// -inf (bf16 rounds it up to inf): a row whose keys all carry it is uniform, its output the
// mean of V = (3, 5), as in f32 (jax: softmax of equal scores).
TEST(CpuNumerics, AttentionLowestBiasUnderBf16) {
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
  std::vector<Tensor> ref = evaluate(g, in);
  for (const Config& c : kConfigs) {
    std::vector<Tensor> out = run_cpu(g, in, c);
    EXPECT_NEAR(out[0].get_f64(0), 3, 5e-2) << c.name;
    EXPECT_NEAR(out[0].get_f64(1), 5, 5e-2) << c.name;
    for (int64_t i = 2; i < 4; ++i)
      EXPECT_NEAR(out[0].get_f64(i), ref[0].get_f64(i), 5e-2) << c.name;
  }
}

}  // namespace
}  // namespace rlx
