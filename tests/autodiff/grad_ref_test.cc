// rlx gradients on the CPU backend (full pipeline through rlx::Session) against jax.grad
// (tests/autodiff/grad_ref.json, written by gen_grad_ref.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "golden/golden_data.h"
#include "ref_graphs.h"
#include "rlx/autodiff/grad.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"

namespace rlx::autodiff {
namespace {

using nlohmann::json;

// Tolerances against JAX, stated once: elementwise |rlx - jax| <= atol + rtol |jax|, with
// atol relative to the largest |jax| of that gradient (a gradient's small entries come from
// sums of cancelling terms whose rounding scales with the large ones). f32: the f32 kernels
// and JAX round differently (sums in other orders, erf/exp implementations): 1e-4 / 1e-5.
// bf16: every intermediate is rounded to 8 bits in both, in different places: 5e-2 / 2e-2.
struct Tol {
  double rtol, atol;
};
Tol tolerance(DType t) { return t == DType::bf16 ? Tol{5e-2, 2e-2} : Tol{1e-4, 1e-5}; }

const json& reference() {
  static const json doc = [] {
    std::ifstream in(RLX_TEST_DATA_DIR "/autodiff/grad_ref.json");
    return in.good() ? json::parse(in) : json();
  }();
  return doc;
}

void expect_close(const Tensor& got, const std::vector<double>& want, Tol tol,
                  const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  int bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double w = want[static_cast<size_t>(i)], a = got.get_f64(i);
    if (!(std::abs(a - w) <= tol.atol * std::max(1.0, scale) + tol.rtol * std::abs(w)) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: rlx " << a << ", jax " << w << " (max |jax| "
                    << scale << ")";
  }
}

class GradRef : public ::testing::TestWithParam<std::string> {};

TEST(GradRefFile, HasTheCases) {
  ASSERT_TRUE(reference().contains("cases")) << "missing tests/autodiff/grad_ref.json";
  EXPECT_GE(reference().at("cases").size(), 15u);
}

TEST_P(GradRef, CpuBackendMatchesJax) {
  const json* c = nullptr;
  for (const json& e : reference().at("cases"))
    if (e.at("name") == GetParam()) c = &e;
  ASSERT_NE(c, nullptr);
  std::map<std::string, TensorType> types;
  std::map<std::string, Tensor> values;
  for (const auto& [n, j] : c->at("inputs").items()) {
    values[n] = rlx::testing::json_tensor(j);
    types[n] = values[n].type();
  }
  Graph g = testing::reference_graph(GetParam(), types);
  std::vector<std::string> wrt = c->at("wrt").get<std::vector<std::string>>();
  Graph dg = grad(g, wrt);
  ASSERT_TRUE(dg.verify().empty()) << dg.verify()[0];

  Session session(Device::cpu());
  std::shared_ptr<Executable> exe = session.compile(dg);
  TensorMap inputs, all;
  for (const auto& [n, t] : values) {
    int32_t id = dg.find(n);
    ASSERT_GE(id, 0) << n;
    if (dg.node(id).op == OpKind::Param)
      exe->set_param(n, t);
    else
      inputs[n] = t;
    all[n] = t;
  }
  std::vector<Tensor> got = exe->run(inputs);
  ASSERT_EQ(got.size(), wrt.size() + 1);
  DType dt = *parse_dtype(c->at("dtype").get<std::string>());
  Tol tol = tolerance(dt);
  expect_close(got[0], {c->at("loss").get<double>()}, tol, "loss");
  for (size_t i = 0; i < wrt.size(); ++i) {
    EXPECT_EQ(got[i + 1].type(), types[wrt[i]]) << wrt[i];
    expect_close(got[i + 1], c->at("grads").at(wrt[i]).get<std::vector<double>>(), tol,
                 "d/d " + wrt[i]);
  }
  // The same gradient graph on the reference evaluator (rounding once per op) agrees too.
  std::vector<Tensor> ref = evaluate(dg, all);
  for (size_t i = 0; i < wrt.size(); ++i)
    expect_close(ref[i + 1], c->at("grads").at(wrt[i]).get<std::vector<double>>(), tol,
                 "evaluator d/d " + wrt[i]);
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  if (reference().contains("cases"))
    for (const json& e : reference().at("cases")) names.push_back(e.at("name").get<std::string>());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Jax, GradRef, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace rlx::autodiff
