// Every vjp rule (and every decomposition autodiff differentiates) against f64 central finite
// differences on the reference evaluator — through grad, jvp and hvp — and the coverage test
// over ops.def.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>

#include "common/test_util.h"
#include "rlx/autodiff/grad.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"

namespace rlx::autodiff {
namespace {

using Ints = std::vector<int64_t>;

// Tolerance of the directional-derivative check, stated once: |ad - fd| <= kFdTol * (1 + |ad|
// + |fd|). With f64 and step kFdStep the central difference is accurate to ~1e-10 (truncation
// h^2 f''' / 6 plus rounding eps |L| / h), far inside it, while a wrong rule is off by O(1).
constexpr double kFdStep = 1e-6;
constexpr double kFdTol = 1e-6;
// hvp differences gradients (one order lower): a larger step balances truncation (h^2) and
// rounding (eps / h) at ~1e-10 again.
constexpr double kHvpStep = 1e-5;
// The CPU backend against the evaluator on the same f64 gradient graph.
constexpr double kCpuRtol = 1e-10;

// One leaf of a case: float leaves are random in [lo, hi) and differentiated; integer / bool
// leaves hold `fixed` values.
struct Leaf {
  std::string name;
  Shape shape;
  double lo = -2, hi = 2;
  DType dtype = DType::f64;
  std::vector<double> fixed = {};
};

struct FdCase {
  std::string name;
  OpKind op;  // the op whose rule (or decomposition) the case checks
  std::vector<Leaf> leaves;
  std::function<std::vector<Value>(Graph&, const std::vector<Value>&)> build;
};

Leaf f(std::string name, Shape shape, double lo = -2, double hi = 2) {
  return {std::move(name), std::move(shape), lo, hi};
}
Leaf ints(std::string name, Shape shape, std::vector<double> v, DType t = DType::i32) {
  return {std::move(name), std::move(shape), 0, 0, t, std::move(v)};
}
template <class F>
std::function<std::vector<Value>(Graph&, const std::vector<Value>&)> one(F fn) {
  return [fn](Graph& g, const std::vector<Value>& in) { return std::vector<Value>{fn(g, in)}; };
}

// The graph of a case: leaves as inputs, loss = sum_k sum(out_k * ct_k) over the float
// outputs with seeded random cotangent constants ct_k.
Graph case_graph(const FdCase& c, TensorMap& feeds, uint64_t seed) {
  Graph g(c.name.substr(0, c.name.find('/')));
  std::vector<Value> in;
  for (size_t i = 0; i < c.leaves.size(); ++i) {
    const Leaf& l = c.leaves[i];
    in.push_back(g.input(l.name, l.dtype, l.shape));
    if (is_float(l.dtype)) {
      feeds[l.name] = testing::random_tensor(l.dtype, l.shape, seed + i, l.lo, l.hi);
    } else {
      feeds[l.name] = Tensor::from_doubles(l.dtype, l.shape, l.fixed);
    }
  }
  std::vector<Value> outs = c.build(g, in);
  std::optional<Value> loss;
  for (size_t k = 0; k < outs.size(); ++k) {
    TensorType t = g.type(outs[k]);
    if (!is_float(t.dtype)) continue;
    Tensor ct = testing::random_tensor(t.dtype, t.shape, seed + 100 + k, -1, 1);
    Ints all;
    for (int a = 0; a < t.shape.rank(); ++a) all.push_back(a);
    Value term = g.reduce_sum(g.mul(outs[k], g.constant(ct)), all);
    loss = loss ? g.add(*loss, term) : term;
  }
  g.set_outputs({*loss});
  return g;
}

double eval_loss(const Graph& g, const TensorMap& feeds) {
  return evaluate(g, feeds)[0].get_f64(0);
}

// Seeded random direction per float leaf (the tangent / FD direction), and x + s * dx.
TensorMap directions(const TensorMap& feeds, const std::vector<std::string>& wrt, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  TensorMap dirs;
  for (const std::string& n : wrt) {
    Tensor d(feeds.at(n).dtype(), feeds.at(n).shape());
    for (int64_t e = 0; e < d.numel(); ++e) d.set_f64(e, dist(rng));
    dirs[n] = d;
  }
  return dirs;
}
TensorMap moved(const TensorMap& feeds, const TensorMap& dirs, double s) {
  TensorMap out = feeds;
  for (const auto& [n, d] : dirs) {
    Tensor x = feeds.at(n).clone();
    for (int64_t e = 0; e < x.numel(); ++e) x.set_f64(e, x.get_f64(e) + s * d.get_f64(e));
    out[n] = x;
  }
  return out;
}
double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t e = 0; e < a.numel(); ++e) s += a.get_f64(e) * b.get_f64(e);
  return s;
}
void expect_close_fd(double ad, double fd, const char* what) {
  EXPECT_TRUE(std::isfinite(ad)) << what;
  EXPECT_LE(std::abs(ad - fd), kFdTol * (1 + std::abs(ad) + std::abs(fd)))
      << what << ": ad " << ad << " fd " << fd;
}

// Reverse mode (grad) and forward mode (jvp) against the central difference of the loss along
// a random direction, and hvp against the central difference of the gradient.
void run_fd_case(const FdCase& c) {
  SCOPED_TRACE(c.name);
  TensorMap feeds;
  Graph g = case_graph(c, feeds, 7);
  std::vector<std::string> wrt;
  for (const Leaf& l : c.leaves)
    if (is_float(l.dtype)) wrt.push_back(l.name);
  Graph dg = grad(g, wrt);
  ASSERT_TRUE(dg.verify().empty()) << dg.verify()[0];
  std::vector<Tensor> res = evaluate(dg, feeds);
  ASSERT_EQ(res.size(), wrt.size() + 1);
  EXPECT_DOUBLE_EQ(res[0].get_f64(0), eval_loss(g, feeds));  // the loss is passed through
  TensorMap dirs = directions(feeds, wrt, 99);
  double ad = 0;
  for (size_t i = 0; i < wrt.size(); ++i) {
    ASSERT_EQ(res[i + 1].type(), feeds.at(wrt[i]).type()) << wrt[i];
    ad += dot(res[i + 1], dirs.at(wrt[i]));
  }
  double fd =
      (eval_loss(g, moved(feeds, dirs, kFdStep)) - eval_loss(g, moved(feeds, dirs, -kFdStep))) /
      (2 * kFdStep);
  expect_close_fd(ad, fd, "grad");

  // The gradient graph through the full pipeline on the CPU backend gives the evaluator's
  // values (f64 kernels; sums in another order: kCpuRtol).
  std::shared_ptr<Executable> exe = Session(Device::cpu()).compile(dg);
  std::vector<Tensor> cpu = exe->run(feeds);
  for (size_t i = 0; i < res.size(); ++i)
    EXPECT_TRUE(rlx::testing::all_close(cpu[i], res[i], kCpuRtol, kCpuRtol)) << "cpu output " << i;

  // jvp: the tangent of the loss along dirs.
  Graph jg = jvp(g, wrt);
  TensorMap jfeeds = feeds;
  for (const auto& [n, d] : dirs) jfeeds["tangent." + n] = d;
  std::vector<Tensor> jr = evaluate(jg, jfeeds);
  ASSERT_EQ(jr.size(), 2u);
  expect_close_fd(jr[1].get_f64(0), fd, "jvp");

  // hvp: <H v, w> against <(grad(x + h v) - grad(x - h v)) / 2h, w>, v = dirs.
  Graph hg = hvp(g, wrt);
  std::vector<Tensor> hr = evaluate(hg, jfeeds);
  ASSERT_EQ(hr.size(), wrt.size() + 1);
  TensorMap ws = directions(feeds, wrt, 5);
  std::vector<Tensor> gp = evaluate(dg, moved(feeds, dirs, kHvpStep));
  std::vector<Tensor> gm = evaluate(dg, moved(feeds, dirs, -kHvpStep));
  double had = 0, hfd = 0;
  for (size_t i = 0; i < wrt.size(); ++i) {
    ASSERT_EQ(hr[i + 1].type(), feeds.at(wrt[i]).type()) << wrt[i];
    had += dot(hr[i + 1], ws.at(wrt[i]));
    hfd += (dot(gp[i + 1], ws.at(wrt[i])) - dot(gm[i + 1], ws.at(wrt[i]))) / (2 * kHvpStep);
  }
  expect_close_fd(had, hfd, "hvp");
}

// gtest prints a parameter by name instead of its bytes.
void PrintTo(const FdCase& c, std::ostream* os) { *os << c.name; }

Graph::AttentionOptions mask(std::string kind, int64_t window = 0) {
  Graph::AttentionOptions o;
  o.mask = std::move(kind);
  o.window = window;
  return o;
}

Graph region_body() {
  Graph body("body");
  Value a = body.input("a", DType::f64, {2, 3});
  Value b = body.input("b", DType::f64, {3});
  Value t = body.tanh(body.mul(body.sub(a, b), body.scalar(0.5, DType::f64)));
  body.set_outputs({body.mul(t, b), body.exp(a)});
  return body;
}

std::vector<FdCase> unary_cases() {
  std::vector<FdCase> cs;
  struct U {
    OpKind op;
    double lo, hi;
  };
  for (U u : {U{OpKind::Neg, -2, 2},   U{OpKind::Abs, -2, 2},      U{OpKind::Exp, -2, 2},
              U{OpKind::Expm1, -2, 2}, U{OpKind::Log, 0.3, 3},     U{OpKind::Log1p, -0.5, 3},
              U{OpKind::Sqrt, 0.3, 3}, U{OpKind::Rsqrt, 0.3, 3},   U{OpKind::Sin, -3, 3},
              U{OpKind::Cos, -3, 3},   U{OpKind::Tan, -1.2, 1.2},  U{OpKind::Tanh, -2, 2},
              U{OpKind::Atan, -3, 3},  U{OpKind::Logistic, -4, 4}, U{OpKind::Erf, -2, 2},
              U{OpKind::Relu, -2, 2},  U{OpKind::Gelu, -3, 3},     U{OpKind::GeluTanh, -3, 3},
              U{OpKind::Silu, -3, 3},  U{OpKind::Softplus, -3, 3}, U{OpKind::LeakyRelu, -2, 2}}) {
    OpKind op = u.op;
    cs.push_back(
        {std::string(op_name(op)), op, {f("x", {2, 3}, u.lo, u.hi)}, one([op](Graph& g, auto& in) {
           return g.emit1(op, {in[0]});
         })});
  }
  cs.push_back({"leaky_relu/alpha", OpKind::LeakyRelu, {f("x", {7})}, one([](Graph& g, auto& in) {
                  return g.leaky_relu(in[0], 0.3);
                })});
  // A float -> float convert passes the cotangent back (f64 -> f32 would swamp the FD step;
  // the f32 <-> f64 and bf16 paths are in grad_ref_test); the float -> int path carries none.
  cs.push_back({"convert", OpKind::Convert, {f("x", {2, 3})}, one([](Graph& g, auto& in) {
                  return g.mul(g.convert(in[0], DType::f64),
                               g.convert(g.convert(in[0], DType::i32), DType::f64));
                })});
  return cs;
}

std::vector<FdCase> binary_cases() {
  std::vector<FdCase> cs;
  struct B {
    OpKind op;
    double xlo, xhi, ylo, yhi;
  };
  for (B b : {B{OpKind::Add, -2, 2, -2, 2}, B{OpKind::Sub, -2, 2, -2, 2},
              B{OpKind::Mul, -2, 2, -2, 2}, B{OpKind::Div, -2, 2, 0.5, 2},
              B{OpKind::Pow, 0.5, 2, -1.5, 1.5}, B{OpKind::Max, -2, 2, -2, 2},
              B{OpKind::Min, -2, 2, -2, 2}, B{OpKind::Rem, -3, 3, 0.7, 1.3}}) {
    OpKind op = b.op;
    auto fn = one([op](Graph& g, auto& in) { return g.emit1(op, {in[0], in[1]}); });
    std::string n(op_name(op));
    cs.push_back(
        {n + "/bcast_row", op, {f("x", {2, 3}, b.xlo, b.xhi), f("y", {3}, b.ylo, b.yhi)}, fn});
    cs.push_back(
        {n + "/bcast_outer", op, {f("x", {2, 1}, b.xlo, b.xhi), f("y", {1, 3}, b.ylo, b.yhi)}, fn});
  }
  // A value used twice accumulates both cotangents.
  cs.push_back({"mul/same_operand", OpKind::Mul, {f("x", {4})}, one([](Graph& g, auto& in) {
                  return g.mul(in[0], in[0]);
                })});
  cs.push_back({"select",
                OpKind::Select,
                {ints("p", {2, 3}, {1, 0, 1, 0, 0, 1}, DType::bool_), f("a", {2, 3}), f("b", {3})},
                one([](Graph& g, auto& in) { return g.select(in[0], in[1], in[2]); })});
  cs.push_back({"clamp",
                OpKind::Clamp,
                {f("lo", {3}, -1, 0), f("x", {2, 3}), f("hi", {}, 0.5, 1)},
                one([](Graph& g, auto& in) { return g.clamp(in[0], in[1], in[2]); })});
  return cs;
}

std::vector<FdCase> linalg_reduce_cases() {
  std::vector<FdCase> cs;
  cs.push_back(
      {"dot_general/batch_mid",
       OpKind::DotGeneral,
       {f("a", {2, 3, 4}), f("b", {4, 2, 5})},
       one([](Graph& g, auto& in) { return g.dot_general(in[0], in[1], {0}, {1}, {2}, {0}); })});
  cs.push_back({"dot_general/two_contract_swapped",
                OpKind::DotGeneral,
                {f("a", {3, 4, 2}), f("b", {2, 5, 4})},
                one([](Graph& g, auto& in) {
                  return g.dot_general(in[0], in[1], {}, {}, {1, 2}, {2, 0});
                })});
  cs.push_back({"matmul/broadcast_batch",
                OpKind::MatMul,
                {f("a", {2, 3, 4}), f("b", {4, 5})},
                one([](Graph& g, auto& in) { return g.matmul(in[0], in[1]); })});
  cs.push_back({"matmul/vector",
                OpKind::MatMul,
                {f("a", {4}), f("b", {2, 4, 3})},
                one([](Graph& g, auto& in) { return g.matmul(in[0], in[1]); })});
  cs.push_back({"reduce_sum", OpKind::ReduceSum, {f("x", {2, 3, 4})}, one([](Graph& g, auto& in) {
                  return g.reduce_sum(in[0], {0, -1});
                })});
  cs.push_back(
      {"reduce_mean/keepdims", OpKind::ReduceMean, {f("x", {2, 3, 4})}, one([](Graph& g, auto& in) {
         return g.reduce_mean(in[0], {1}, true);
       })});
  cs.push_back({"reduce_max", OpKind::ReduceMax, {f("x", {3, 4})}, one([](Graph& g, auto& in) {
                  return g.reduce_max(in[0], {1});
                })});
  cs.push_back(
      {"reduce_min/keepdims", OpKind::ReduceMin, {f("x", {3, 4})}, one([](Graph& g, auto& in) {
         return g.reduce_min(in[0], {0}, true);
       })});
  cs.push_back(
      {"reduce_prod", OpKind::ReduceProd, {f("x", {3, 4}, 0.5, 1.5)}, one([](Graph& g, auto& in) {
         return g.reduce_prod(in[0], {1});
       })});
  // Rows with one zero and with two zeros: the exact zero-aware rule.
  cs.push_back({"reduce_prod/zeros",
                OpKind::ReduceProd,
                {f("x", {3, 4}, 0.5, 1.5)},
                one([](Graph& g, auto& in) {
                  Tensor m = Tensor::from_doubles(
                      DType::f64, {3, 4}, std::vector<double>{1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 1, 1});
                  return g.reduce_prod(g.mul(in[0], g.constant(m)), {1});
                })});
  cs.push_back({"cumsum", OpKind::CumSum, {f("x", {3, 4})}, one([](Graph& g, auto& in) {
                  return g.cumsum(in[0], 1);
                })});
  cs.push_back(
      {"cumsum/exclusive_reverse", OpKind::CumSum, {f("x", {3, 4})}, one([](Graph& g, auto& in) {
         return g.cumsum(in[0], 0, true, true);
       })});
  return cs;
}

std::vector<FdCase> shape_cases() {
  std::vector<FdCase> cs;
  cs.push_back({"reshape", OpKind::Reshape, {f("x", {2, 6})}, one([](Graph& g, auto& in) {
                  return g.reshape(in[0], {3, -1});
                })});
  cs.push_back({"transpose", OpKind::Transpose, {f("x", {2, 3, 4})}, one([](Graph& g, auto& in) {
                  return g.transpose(in[0], {2, 0, 1});
                })});
  cs.push_back(
      {"broadcast_in_dim", OpKind::BroadcastInDim, {f("x", {3, 1})}, one([](Graph& g, auto& in) {
         return g.broadcast_in_dim(in[0], {2, 3, 4}, {1, 2});
       })});
  cs.push_back({"expand", OpKind::Expand, {f("x", {3, 1})}, one([](Graph& g, auto& in) {
                  return g.expand(in[0], {2, 3, 4});
                })});
  cs.push_back({"slice/strided", OpKind::Slice, {f("x", {5, 7})}, one([](Graph& g, auto& in) {
                  return g.slice(in[0], {1, 0}, {5, 6}, {2, 3});
                })});
  cs.push_back({"concatenate",
                OpKind::Concatenate,
                {f("a", {2, 3}), f("b", {2, 1}), f("c", {2, 2})},
                one([](Graph& g, auto& in) {
                  return g.concatenate({in[0], in[1], in[2], in[0]}, 1);
                })});
  cs.push_back({"pad/negative_interior",
                OpKind::Pad,
                {f("x", {3, 4}), f("v", {})},
                one([](Graph& g, auto& in) {
                  return g.pad(in[0], in[1], {1, -1}, {2, 0}, {1, 2});
                })});
  cs.push_back({"gather/dups_clamped",
                OpKind::Gather,
                {f("x", {4, 3}), ints("i", {2, 3}, {0, 3, 3, -2, 9, 1})},
                one([](Graph& g, auto& in) { return g.gather(in[0], in[1], 0); })});
  cs.push_back({"gather/axis1",
                OpKind::Gather,
                {f("x", {2, 4, 3}), ints("i", {5}, {1, 1, 0, 3, 2})},
                one([](Graph& g, auto& in) { return g.gather(in[0], in[1], 1); })});
  cs.push_back({"take_along_axis",
                OpKind::TakeAlongAxis,
                {f("x", {3, 4}), ints("i", {3, 2}, {0, 0, 3, 1, 2, 7})},
                one([](Graph& g, auto& in) { return g.take_along_axis(in[0], in[1], 1); })});
  cs.push_back({"take_along_axis/broadcast",
                OpKind::TakeAlongAxis,
                {f("x", {3, 1}), ints("i", {1, 4}, {0, 0, -1, 0})},
                one([](Graph& g, auto& in) { return g.take_along_axis(in[0], in[1], 0); })});
  cs.push_back({"scatter_add/dups_dropped",
                OpKind::ScatterAdd,
                {f("x", {4, 3}), ints("i", {5}, {1, 1, 7, -1, 3}), f("u", {5, 3})},
                one([](Graph& g, auto& in) { return g.scatter_add(in[0], in[1], in[2], 0); })});
  cs.push_back({"reverse", OpKind::Reverse, {f("x", {2, 3, 4})}, one([](Graph& g, auto& in) {
                  return g.reverse(in[0], {0, 2});
                })});
  cs.push_back({"squeeze", OpKind::Squeeze, {f("x", {2, 1, 3})}, one([](Graph& g, auto& in) {
                  return g.squeeze(in[0], {1});
                })});
  cs.push_back({"expand_dims", OpKind::ExpandDims, {f("x", {2, 3})}, one([](Graph& g, auto& in) {
                  return g.expand_dims(in[0], {0, 3});
                })});
  return cs;
}

std::vector<FdCase> nn_cases() {
  std::vector<FdCase> cs;
  cs.push_back({"softmax", OpKind::Softmax, {f("x", {3, 5})}, one([](Graph& g, auto& in) {
                  return g.softmax(in[0], 0);
                })});
  cs.push_back({"log_softmax", OpKind::LogSoftmax, {f("x", {3, 5})}, one([](Graph& g, auto& in) {
                  return g.log_softmax(in[0]);
                })});
  cs.push_back(
      {"layer_norm",
       OpKind::LayerNorm,
       {f("x", {2, 3, 4}), f("s", {3, 4}), f("b", {3, 4})},
       one([](Graph& g, auto& in) { return g.layer_norm(in[0], in[1], in[2], 1, 1e-3); })});
  cs.push_back(
      {"rms_norm", OpKind::RmsNorm, {f("x", {3, 4}), f("s", {4})}, one([](Graph& g, auto& in) {
         return g.rms_norm(in[0], in[1], -1, 1e-3);
       })});
  for (auto [kind, window] :
       {std::pair<const char*, int64_t>{"none", 0}, {"causal", 0}, {"sliding_window", 2}}) {
    Graph::AttentionOptions o = mask(kind, window);
    cs.push_back({std::string("attention/gqa_") + kind,
                  OpKind::Attention,
                  {f("q", {1, 4, 3, 4}), f("k", {1, 2, 5, 4}), f("v", {1, 2, 5, 3})},
                  one([o](Graph& g, auto& in) { return g.attention(in[0], in[1], in[2], o); })});
  }
  cs.push_back({"attention/bool",
                OpKind::Attention,
                {f("q", {2, 2, 3, 4}), f("k", {2, 2, 4, 4}), f("v", {2, 2, 4, 4}),
                 ints("m", {2, 1, 1, 4}, {1, 1, 0, 1, 1, 0, 0, 0}, DType::bool_)},
                one([](Graph& g, auto& in) {
                  return g.attention(in[0], in[1], in[2], mask("bool"), in[3]);
                })});
  cs.push_back(
      {"attention/bias",
       OpKind::Attention,
       {f("q", {1, 2, 3, 4}), f("k", {1, 2, 4, 4}), f("v", {1, 2, 4, 4}), f("m", {1, 1, 3, 4})},
       one([](Graph& g, auto& in) {
         Graph::AttentionOptions o = mask("bias");
         o.scale = 0.7;
         return g.attention(in[0], in[1], in[2], o, in[3]);
       })});
  for (const char* layout : {"neox", "gptj"})
    cs.push_back(
        {std::string("rope/") + layout,
         OpKind::Rope,
         {f("x", {2, 3, 6}), f("c", {3, 2}), f("s", {3, 2})},
         one([layout](Graph& g, auto& in) { return g.rope(in[0], in[1], in[2], layout); })});
  cs.push_back({"conv/2d_stride_pad_dilation",
                OpKind::Conv,
                {f("x", {2, 2, 6, 5}), f("w", {3, 2, 3, 2})},
                one([](Graph& g, auto& in) {
                  return g.conv(in[0], in[1], {2, 1}, {1, 0}, {2, 1}, {1, 2});
                })});
  cs.push_back({"conv/groups",
                OpKind::Conv,
                {f("x", {1, 4, 5, 5}), f("w", {6, 2, 2, 2})},
                one([](Graph& g, auto& in) {
                  return g.conv(in[0], in[1], {1, 2}, {1, 1}, {0, 1}, {}, 2);
                })});
  cs.push_back({"conv/1d_uneven",
                OpKind::Conv,
                {f("x", {2, 3, 9}), f("w", {4, 3, 3})},
                one([](Graph& g, auto& in) { return g.conv(in[0], in[1], {3}, {1}, {0}); })});
  cs.push_back({"max_pool", OpKind::MaxPool, {f("x", {1, 2, 5, 5})}, one([](Graph& g, auto& in) {
                  return g.max_pool(in[0], {2, 3}, {2, 1}, {1, 0}, {0, 1});
                })});
  cs.push_back(
      {"avg_pool/exclude_pad", OpKind::AvgPool, {f("x", {1, 2, 5, 4})}, one([](Graph& g, auto& in) {
         return g.avg_pool(in[0], {3, 2}, {2, 2}, {1, 1}, {1, 0}, false);
       })});
  cs.push_back({"top_k", OpKind::TopK, {f("x", {3, 6})}, [](Graph& g, auto& in) {
                  auto [v, i] = g.top_k(in[0], 3);
                  return std::vector<Value>{v, i};
                }});
  cs.push_back({"softmax_cross_entropy",
                OpKind::SoftmaxCrossEntropy,
                {f("x", {2, 3, 5}), ints("l", {2, 3}, {0, 4, 2, 9, -1, 1})},
                one([](Graph& g, auto& in) { return g.softmax_cross_entropy(in[0], in[1]); })});
  cs.push_back({"fused_matmul_bias_act",
                OpKind::FusedMatMulBiasAct,
                {f("x", {2, 3, 4}), f("w", {4, 5}), f("b", {5})},
                one([](Graph& g, auto& in) {
                  return g.fused_matmul_bias_act(in[0], in[1], in[2], "gelu_tanh");
                })});
  cs.push_back({"fused_residual_layer_norm",
                OpKind::FusedResidualLayerNorm,
                {f("x", {2, 4}), f("r", {2, 4}), f("s", {4}), f("b", {4})},
                [](Graph& g, auto& in) {
                  auto [y, h] = g.fused_residual_layer_norm(in[0], in[1], in[2], in[3]);
                  return std::vector<Value>{y, h};
                }});
  cs.push_back({"fused_residual_rms_norm",
                OpKind::FusedResidualRmsNorm,
                {f("x", {2, 4}), f("r", {2, 4}), f("s", {4})},
                [](Graph& g, auto& in) {
                  auto [y, h] = g.fused_residual_rms_norm(in[0], in[1], in[2]);
                  return std::vector<Value>{y, h};
                }});
  cs.push_back({"elementwise_region",
                OpKind::ElementwiseRegion,
                {f("x", {2, 3}), f("y", {3})},
                [](Graph& g, auto& in) {
                  return g.elementwise_region({in[0], in[1]}, region_body());
                }});
  return cs;
}

std::vector<FdCase> all_cases() {
  std::vector<FdCase> all;
  for (auto part :
       {unary_cases(), binary_cases(), linalg_reduce_cases(), shape_cases(), nn_cases()})
    all.insert(all.end(), part.begin(), part.end());
  return all;
}

class FdTest : public ::testing::TestWithParam<FdCase> {};

TEST_P(FdTest, VjpMatchesCentralDifferences) { run_fd_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rules, FdTest, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<FdCase>& i) {
                           std::string n = i.param.name;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// Every op of ops.def is a leaf, has a rule, is differentiated through its decomposition, or
// is declared non-differentiable; every op of the first two kinds has at least one FD case.
// Prints the coverage table docs/autodiff.md publishes.
TEST(Coverage, EveryOpHasARuleADecompositionOrIsNonDifferentiable) {
  std::map<OpKind, int> cases;
  for (const FdCase& c : all_cases()) ++cases[c.op];
  std::map<VjpSupport, int> count;
  std::string missing, untested, table;
  for (int k = 0; k < kNumOps; ++k) {
    auto op = static_cast<OpKind>(k);
    VjpSupport s = vjp_support(op);
    ++count[s];
    table += "  " + std::string(op_name(op)) + ": " + vjp_support_name(s) + " (" +
             std::to_string(cases[op]) + " fd cases)\n";
    if (s == VjpSupport::Missing) missing += " " + std::string(op_name(op));
    if ((s == VjpSupport::Rule || s == VjpSupport::Decomposition) && cases[op] == 0)
      untested += " " + std::string(op_name(op));
  }
  std::printf("%s", table.c_str());
  std::printf("vjp coverage: %d ops: %d rule, %d decomposition, %d non-differentiable, %d leaf\n",
              kNumOps, count[VjpSupport::Rule], count[VjpSupport::Decomposition],
              count[VjpSupport::NonDifferentiable], count[VjpSupport::Leaf]);
  EXPECT_EQ(missing, "") << "ops with neither a vjp rule, a decomposition nor a "
                            "non-differentiable entry:"
                         << missing;
  EXPECT_EQ(untested, "") << "differentiable ops without a finite-difference case:" << untested;
}

// Non-differentiable ops contribute exactly zero (stop_gradient cuts a path that would
// otherwise carry gradient; the rounding ops and sign are piecewise constant).
TEST(NonDifferentiable, ContributeZero) {
  Graph g;
  Value x = g.input("x", DType::f64, {4});
  Value y = g.add(g.mul(x, g.stop_gradient(x)), g.floor(x));
  y = g.add(y, g.add(g.ceil(x), g.add(g.round(x), g.sign(x))));
  Value idx = g.argmax(x, 0);
  y = g.add(y, g.gather(x, g.expand_dims(idx, {0}), 0));  // the index path carries nothing
  y = g.add(y, g.convert(g.lt(x, g.scalar(0.0, DType::f64)), DType::f64));
  g.set_outputs({g.reduce_sum(y, {0})});
  Graph dg = grad(g, {"x"});
  TensorMap feeds{
      {"x", Tensor::from_doubles(DType::f64, {4}, std::vector<double>{0.3, -1.7, 2.2, 0.9})}};
  std::vector<Tensor> r = evaluate(dg, feeds);
  // d/dx [x * sg(x)] = sg(x) = x; x[argmax] (index 2) is broadcast into all 4 sums: + 4.
  std::vector<double> want{0.3, -1.7, 6.2, 0.9};
  for (int64_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(r[1].get_f64(i), want[static_cast<size_t>(i)]);
}

}  // namespace
}  // namespace rlx::autodiff
