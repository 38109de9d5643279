// grad and jvp through scan, cond, switch and while_loop (bounded; jvp of an unbounded one, also
// inside a scan body) on the reference evaluator
// against jax.grad / jax.jvp (tests/autodiff/control_flow_ref.json, written by
// gen_control_flow_ref.py; the graphs below are the generator's, built with the C++ builder).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "golden/golden_data.h"
#include "rlx/autodiff/grad.h"
#include "rlx/ir/evaluator.h"

namespace rlx::autodiff {
namespace {

using nlohmann::json;

// |rlx - jax| <= atol * max(1, max |jax|) + rtol |jax| per output. f32: 50 steps whose sums
// round in other orders than XLA's: 1e-4 / 1e-5 (as grad_ref_test). f64: 1e-10 / 1e-12.
struct Tol {
  double rtol, atol;
};
Tol tolerance(DType t) { return t == DType::f64 ? Tol{1e-10, 1e-12} : Tol{1e-4, 1e-5}; }

const json& reference() {
  static const json doc = [] {
    std::ifstream in(RLX_TEST_DATA_DIR "/autodiff/control_flow_ref.json");
    return in.good() ? json::parse(in) : json();
  }();
  return doc;
}

void expect_close(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
  ASSERT_EQ(got.type(), want.type()) << what;
  double scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::abs(want.get_f64(i)));
  int bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double w = want.get_f64(i), a = got.get_f64(i);
    if (!(std::abs(a - w) <= tol.atol * std::max(1.0, scale) + tol.rtol * std::abs(w)) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: rlx " << a << ", jax " << w;
  }
}

// The generator's functions, by graph name, over inputs of the case's types.
Graph rnn_graph(const std::map<std::string, TensorType>& ty, bool loss) {
  Graph g(loss ? "rnn_loss" : "rnn");
  std::map<std::string, Value> in;
  for (const char* n : {"w", "u", "b", "h0", "xs"})
    in[n] = g.input(n, ty.at(n).dtype, ty.at(n).shape);
  const TensorType h = ty.at("h0");
  Shape xt(
      std::vector<int64_t>(ty.at("xs").shape.dims().begin() + 1, ty.at("xs").shape.dims().end()));
  Graph cell("cell");
  Value w = cell.input("w", ty.at("w").dtype, ty.at("w").shape);
  Value u = cell.input("u", ty.at("u").dtype, ty.at("u").shape);
  Value b = cell.input("b", ty.at("b").dtype, ty.at("b").shape);
  Value ch = cell.input("h", h.dtype, h.shape);
  Value cx = cell.input("x", h.dtype, xt);
  Value h2 = cell.tanh(cell.add(cell.add(cell.matmul(cx, w), cell.matmul(ch, u)), b));
  cell.set_outputs({h2, h2});
  std::vector<Value> r =
      g.scan(std::move(cell), {in["h0"]}, {in["xs"]}, {in["w"], in["u"], in["b"]});
  if (!loss) {
    g.set_outputs(r);
    return g;
  }
  Value ys = g.mul(g.reduce_sum(r[1], {0, 1, 2}), g.scalar(0.1, h.dtype));
  g.set_outputs({g.add(g.reduce_sum(g.mul(r[0], r[0]), {0, 1}), ys)});
  return g;
}

Graph cond_graph(const std::map<std::string, TensorType>& ty, bool loss) {
  Graph g(loss ? "cond_loss" : "cond");
  Value p = g.input("p", DType::bool_, {});
  const TensorType t = ty.at("x");
  Value x = g.input("x", t.dtype, t.shape);
  Value y = g.input("y", t.dtype, t.shape);
  Graph tb("t"), fb("f");
  Value ta = tb.input("a", t.dtype, t.shape), tc = tb.input("c", t.dtype, t.shape);
  tb.set_outputs({tb.mul(tb.sin(ta), tc), ta});
  Value fa = fb.input("a", t.dtype, t.shape), fc = fb.input("c", t.dtype, t.shape);
  fb.set_outputs({fb.sub(fb.exp(fc), fa), fb.mul(fa, fc)});
  std::vector<Value> r = g.cond(p, std::move(tb), std::move(fb), {x, y});
  if (!loss) {
    g.set_outputs(r);
    return g;
  }
  g.set_outputs({g.add(g.reduce_sum(g.mul(r[0], r[0]), {0}), g.reduce_sum(r[1], {0}))});
  return g;
}

Graph switch_graph(const std::map<std::string, TensorType>& ty) {
  Graph g("switch_loss");
  Value i = g.input("i", DType::i32, {});
  const TensorType t = ty.at("x");
  Value x = g.input("x", t.dtype, t.shape);
  Value y = g.input("y", t.dtype, t.shape);
  std::vector<Graph> bs;
  for (int k = 0; k < 3; ++k) {
    Graph b("b" + std::to_string(k));
    Value a = b.input("a", t.dtype, t.shape), c = b.input("c", t.dtype, t.shape);
    if (k == 0) b.set_outputs({b.mul(b.sin(a), c)});
    if (k == 1) b.set_outputs({b.add(a, b.mul(c, c))});
    if (k == 2) b.set_outputs({b.sub(b.exp(c), a)});
    bs.push_back(std::move(b));
  }
  Value r = g.switch_case(i, std::move(bs), {x, y})[0];
  g.set_outputs({g.reduce_sum(g.mul(r, r), {0})});
  return g;
}

// while i < 4 (max_trip_count 6): x' = sin(x) a + x; loss sum(x^2).
Graph loop_graph(const std::map<std::string, TensorType>& ty) {
  Graph g("loop_loss");
  const TensorType t = ty.at("a");
  Value a = g.input("a", t.dtype, t.shape);
  Value x0 = g.input("x0", t.dtype, t.shape);
  Graph c("c");
  c.input("a", t.dtype, t.shape);
  Value n = c.input("i", DType::i32, {});
  c.input("x", t.dtype, t.shape);
  c.set_outputs({c.lt(n, c.scalar(4, DType::i32))});
  Graph b("b");
  Value ba = b.input("a", t.dtype, t.shape);
  Value bi = b.input("i", DType::i32, {});
  Value bx = b.input("x", t.dtype, t.shape);
  b.set_outputs({b.add(bi, b.scalar(1, DType::i32)), b.add(b.mul(b.sin(bx), ba), bx)});
  Value r = g.while_loop(std::move(c), std::move(b), {g.scalar(0, DType::i32), x0}, {a}, 6)[1];
  g.set_outputs({g.reduce_sum(g.mul(r, r), {0})});
  return g;
}

// Newton's iteration for sqrt(a) until max |x^2 - a| <= 1e-12 (or 100 steps), no trip bound;
// outputs the step count and x.
// Newton's sqrt(a) to convergence as an unbounded while_loop in `g`: results (trips, sqrt(a)).
std::vector<Value> newton_loop(Graph& g, Value a) {
  const TensorType t = g.type(a);
  auto region = [&](const std::string& name, Value& ra, Value& ri, Value& rx) {
    Graph r(name);
    ra = r.input("a", t.dtype, t.shape);
    ri = r.input("i", DType::i32, {});
    rx = r.input("x", t.dtype, t.shape);
    return r;
  };
  Value ca, ci, cx, ba, bi, bx;
  Graph c = region("c", ca, ci, cx);
  Value err = c.reduce_max(c.abs(c.sub(c.mul(cx, cx), ca)), {0});
  c.set_outputs(
      {c.logical_and(c.gt(err, c.scalar(1e-12, t.dtype)), c.lt(ci, c.scalar(100, DType::i32)))});
  Graph b = region("b", ba, bi, bx);
  b.set_outputs({b.add(bi, b.scalar(1, DType::i32)),
                 b.mul(b.add(bx, b.div(ba, bx)), b.scalar(0.5, t.dtype))});
  return g.while_loop(std::move(c), std::move(b), {g.scalar(0, DType::i32), a}, {a});
}

Graph newton_graph(const std::map<std::string, TensorType>& ty) {
  Graph g("newton");
  const TensorType t = ty.at("a");
  g.set_outputs(newton_loop(g, g.input("a", t.dtype, t.shape)));
  return g;
}

// A scan whose body runs newton_loop: a = x_t + c^2, c' = 0.5 sqrt(a), y_t = sqrt(a).
Graph newton_scan_graph(const std::map<std::string, TensorType>& ty) {
  Graph g("newton_scan");
  const TensorType tc = ty.at("c0"), tx = ty.at("xs");
  Value c0 = g.input("c0", tc.dtype, tc.shape);
  Value xs = g.input("xs", tx.dtype, tx.shape);
  Graph b("step");
  Value bc = b.input("c", tc.dtype, tc.shape);
  Value bx = b.input("x", tc.dtype, tc.shape);
  Value r = newton_loop(b, b.add(bx, b.mul(bc, bc)))[1];
  b.set_outputs({b.mul(r, b.scalar(0.5, tc.dtype)), r});
  g.set_outputs(g.scan(std::move(b), {c0}, {xs}));
  return g;
}

Graph reference_graph(const std::string& name, const std::map<std::string, TensorType>& ty) {
  if (name == "rnn_loss" || name == "rnn") return rnn_graph(ty, name == "rnn_loss");
  if (name == "cond_loss" || name == "cond") return cond_graph(ty, name == "cond_loss");
  if (name == "switch_loss") return switch_graph(ty);
  if (name == "loop_loss") return loop_graph(ty);
  if (name == "newton") return newton_graph(ty);
  if (name == "newton_scan") return newton_scan_graph(ty);
  throw Error("control_flow_ref_test: no graph named '" + name + "'");
}

class ControlFlowRef : public ::testing::TestWithParam<std::string> {};

TEST(ControlFlowRefFile, HasTheCases) {
  ASSERT_TRUE(reference().contains("cases")) << "missing tests/autodiff/control_flow_ref.json";
  EXPECT_GE(reference().at("cases").size(), 12u);
}

TEST_P(ControlFlowRef, EvaluatorMatchesJax) {
  const json* c = nullptr;
  for (const json& e : reference().at("cases"))
    if (e.at("name") == GetParam()) c = &e;
  ASSERT_NE(c, nullptr);
  TensorMap feeds;
  std::map<std::string, TensorType> types;
  for (const auto& [n, j] : c->at("inputs").items()) {
    feeds[n] = rlx::testing::json_tensor(j);
    types[n] = feeds[n].type();
  }
  Graph g = reference_graph(c->at("graph").get<std::string>(), types);
  const std::string transform = c->at("transform").get<std::string>();
  Graph t;
  if (transform == "grad") {
    t = grad(g, c->at("wrt").get<std::vector<std::string>>());
  } else {
    ASSERT_EQ(transform, "jvp");
    t = jvp(g, c->at("primals").get<std::vector<std::string>>());
    for (const auto& [n, j] : c->at("tangents").items())
      feeds["tangent." + n] = rlx::testing::json_tensor(j);
  }
  ASSERT_TRUE(t.verify().empty()) << t.verify()[0];
  std::vector<Tensor> got = evaluate(t, feeds);
  const json& want = c->at("outputs");
  ASSERT_EQ(got.size(), want.size());
  Tol tol = tolerance(*parse_dtype(c->at("dtype").get<std::string>()));
  for (size_t i = 0; i < got.size(); ++i)
    expect_close(got[i], rlx::testing::json_tensor(want[i]), tol, "output " + std::to_string(i));
  // Checkpointed scans (every 10th carry of 50; the loop's 6 trips in 3 segments of 2) give
  // bitwise the same gradients.
  if (transform == "grad" && (GetParam() == "rnn50_grad" || GetParam() == "while_bounded_grad")) {
    GradOptions o;
    o.scan_checkpoint_every = GetParam() == "rnn50_grad" ? 10 : 2;
    std::vector<Tensor> ck =
        evaluate(grad(g, c->at("wrt").get<std::vector<std::string>>(), {}, o), feeds);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(std::memcmp(ck[i].data(), got[i].data(), got[i].nbytes()), 0) << "output " << i;
  }
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  if (reference().contains("cases"))
    for (const json& e : reference().at("cases")) names.push_back(e.at("name").get<std::string>());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Jax, ControlFlowRef, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace rlx::autodiff
