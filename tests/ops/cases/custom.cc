// Test custom ops (rlx/ir/custom_op.h) and their op cases: `test.softplus` (an attribute, a CPU
// kernel, a decomposition and a vjp rule), `test.sincos` (two results, a decomposition and a
// batching rule, no CPU kernel or vjp rule) and `test.host_cube` (a reference kernel only).
// The cases run custom_call through every suite but the JAX one (no jax counterpart).
#include <algorithm>
#include <cmath>
#include <mutex>

#include "common.h"
#include "rlx/ir/custom_op.h"

namespace rlx::testing {
namespace {

using namespace cases;

// The operand of a float unary custom op: f32 or f64 only (the CPU kernel's dtypes).
std::vector<TensorType> unary_float(const InferContext& ctx) {
  const TensorType& x = ctx.operands[0];
  if (x.dtype != DType::f32 && x.dtype != DType::f64)
    ctx.fail("operand must be f32 or f64, got " + std::string(dtype_name(x.dtype)));
  return {x};
}

// Applies `f` elementwise in double to a tensor, keeping its type.
template <class F>
Tensor map_doubles(const Tensor& x, F f) {
  std::vector<double> v(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) v[static_cast<size_t>(i)] = f(x.get_f64(i));
  return Tensor::from_doubles(x.dtype(), x.shape(), v);
}

double softplus_ref(double x, double beta) {
  double z = beta * x;
  return (std::max(z, 0.0) + std::log1p(std::exp(-std::fabs(z)))) / beta;
}

template <class T>
void softplus_loop(const CustomKernelIO& io, double beta) {
  const T* x = reinterpret_cast<const T*>(io.operands[0]);
  T* y = reinterpret_cast<T*>(io.results[0]);
  int64_t n = io.result_types[0].shape.numel();
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<T>(softplus_ref(static_cast<double>(x[i]), beta));
}

void register_softplus() {
  CustomOpDef d;
  d.name = "test.softplus";
  d.doc = "softplus(beta * x) / beta";
  d.attrs = {{"beta", AttrType::Float, AttrPresence::Default, 1.0}};
  d.num_operands = 1;
  d.infer = [](const InferContext& ctx) {
    if (ctx.attrs.get_float("beta") <= 0)
      ctx.fail("beta must be > 0, got " + std::to_string(ctx.attrs.get_float("beta")));
    return unary_float(ctx);
  };
  d.reference = [](std::span<const Tensor> in, const AttrMap& attrs) {
    double beta = attrs.get_float("beta");
    return std::vector<Tensor>{map_doubles(in[0], [&](double x) { return softplus_ref(x, beta); })};
  };
  d.cpu_kernel = [](const CustomKernelIO& io) {
    double beta = io.attrs.get_float("beta");
    if (io.operand_types[0].dtype == DType::f32)
      softplus_loop<float>(io, beta);
    else
      softplus_loop<double>(io, beta);
  };
  d.decompose = [](Graph& g, const Node& node, std::span<const Value> x) {
    Value beta = g.scalar_like(x[0], node.attrs.get_float("beta"));
    return std::vector<Value>{g.div(g.softplus(g.mul(x[0], beta)), beta)};
  };
  // d/dx softplus(beta x) / beta = logistic(beta x).
  d.vjp = [](Graph& g, const Node& node, std::span<const Value> x, std::span<const Value>,
             std::span<const Value> ct) {
    Value beta = g.scalar_like(x[0], node.attrs.get_float("beta"));
    return std::vector<Value>{g.mul(ct[0], g.logistic(g.mul(x[0], beta)))};
  };
  register_custom_op(std::move(d));
}

void register_sincos() {
  CustomOpDef d;
  d.name = "test.sincos";
  d.doc = "(sin x, cos x)";
  d.num_operands = 1;
  d.infer = [](const InferContext& ctx) {
    std::vector<TensorType> t = unary_float(ctx);
    return std::vector<TensorType>{t[0], t[0]};
  };
  d.reference = [](std::span<const Tensor> in, const AttrMap&) {
    return std::vector<Tensor>{map_doubles(in[0], [](double x) { return std::sin(x); }),
                               map_doubles(in[0], [](double x) { return std::cos(x); })};
  };
  d.decompose = [](Graph& g, const Node&, std::span<const Value> x) {
    return std::vector<Value>{g.sin(x[0]), g.cos(x[0])};
  };
  // Elementwise: the batched op is the op on the batched operand.
  d.batch = [](Graph& g, const Node&, std::span<const Value> x, int64_t) {
    return custom_call(g, "test.sincos", {x[0]});
  };
  register_custom_op(std::move(d));
}

void register_host_cube() {
  CustomOpDef d;
  d.name = "test.host_cube";
  d.doc = "x^3 on the host";
  d.num_operands = 1;
  d.infer = unary_float;
  d.reference = [](std::span<const Tensor> in, const AttrMap&) {
    return std::vector<Tensor>{map_doubles(in[0], [](double x) { return x * x * x; })};
  };
  register_custom_op(std::move(d));
}

}  // namespace

void register_test_custom_ops() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_softplus();
    register_sincos();
    register_host_cube();
  });
}

void add_custom_cases(CaseList& cs) {
  register_test_custom_ops();
  const std::string why =
      "a custom op has no jax counterpart (python/tests/test_custom_ops.py "
      "checks rlx.custom_vjp and rlx.pure_callback against jax)";
  const DTypeSet floats{DType::f32, DType::f64};
  AttrMap softplus;
  softplus.set("name", std::string("test.softplus"));
  softplus.set("beta", 0.75);
  cs.add(OpKind::CustomCall, "softplus")
      .in(floats)
      .sample({T({2, 5})}, softplus)
      .only(kAllSuites & ~kPythonSuite, why);
  AttrMap sincos;
  sincos.set("name", std::string("test.sincos"));
  cs.add(OpKind::CustomCall, "sincos")
      .in(floats)
      .sample({T({3, 4})}, sincos)
      .only(kAllSuites & ~kPythonSuite, why);
  AttrMap cube;
  cube.set("name", std::string("test.host_cube"));
  cs.add(OpKind::CustomCall, "host_cube")
      .in(floats)
      .sample({T({4})}, cube)
      .only(kTextSuite | kCpuSuite,
            "a reference-only custom op runs on the evaluator and the CPU; grad, vmap and XLA "
            "need a rule or a decomposition (tests/ir/custom_op_test.cc checks their errors)");
}

}  // namespace rlx::testing
