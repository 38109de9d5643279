// vmap'd graphs on the CPU backend (full pipeline through rlx::Session) and on the reference
// evaluator against jax.vmap (tests/autodiff/vmap_ref.json, written by gen_vmap_ref.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "golden/golden_data.h"
#include "rlx/autodiff/vmap.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"

namespace rlx::autodiff {
namespace {

using nlohmann::json;

// Tolerance against JAX (f32 everywhere), stated once: |rlx - jax| <= atol * max(1, max|jax|)
// + rtol |jax|. The f32 kernels and XLA sum in other orders and use other erf/exp
// implementations, as in grad_ref_test.cc.
constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-5;

const json& reference() {
  static const json doc = [] {
    std::ifstream in(RLX_TEST_DATA_DIR "/autodiff/vmap_ref.json");
    return in.good() ? json::parse(in) : json();
  }();
  return doc;
}

// The per-example graphs of gen_vmap_ref.py (GRAPHS there), over per-example leaf types
// `t` given in input order.
Graph build_graph(const std::string& name,
                  const std::vector<std::pair<std::string, TensorType>>& t) {
  Graph g(name);
  std::vector<Value> in;
  for (const auto& [n, type] : t) in.push_back(g.input(n, type.dtype, type.shape));
  if (name == "mlp") {
    g.set_outputs({g.matmul(g.gelu(g.add(g.matmul(in[0], in[1]), in[2])), in[3])});
  } else if (name == "attention") {
    // The bool key mask combined with a causal mask built from iotas (one mask operand).
    const int64_t s = g.shape(in[0])[2];
    Value causal = g.le(g.iota(DType::i32, {s, s}, 1), g.iota(DType::i32, {s, s}, 0));
    Graph::AttentionOptions o;
    o.mask = "bool";
    g.set_outputs({g.attention(in[0], in[1], in[2], o, g.logical_and(in[3], causal))});
  } else if (name == "layer_norm") {
    g.set_outputs({g.layer_norm(in[0], in[1], in[2])});
  } else if (name == "conv") {
    g.set_outputs({g.conv(in[0], in[1], {1}, {1}, {1})});
  } else if (name == "gather") {
    g.set_outputs({g.gather(in[0], in[1], 0)});
  } else if (name == "dot_general") {
    g.set_outputs({g.dot_general(in[0], in[1], {0}, {0}, {2}, {1})});
  } else if (name == "cross_entropy") {
    g.set_outputs({g.softmax_cross_entropy(in[0], in[1])});
  } else if (name == "cumsum_softmax") {
    g.set_outputs({g.reduce_max(g.cumsum(in[0], 1), {0}), g.softmax(in[0], 0)});
  } else if (name == "scatter_add") {
    g.set_outputs({g.scatter_add(in[0], in[1], in[2], 0)});
  } else {
    ADD_FAILURE() << "no builder for graph " << name;
  }
  return g;
}

BatchAxis axis_of(const json& j) { return j.is_null() ? BatchAxis{} : BatchAxis{j.get<int64_t>()}; }

void expect_close(const Tensor& got, const json& want, const std::string& what) {
  ASSERT_EQ(got.shape().dims(), want.at("shape").get<std::vector<int64_t>>()) << what;
  std::vector<double> w = want.at("data").get<std::vector<double>>();
  double scale = 0;
  for (double x : w) scale = std::max(scale, std::abs(x));
  int bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double a = got.get_f64(i), b = w[static_cast<size_t>(i)];
    if (!(std::abs(a - b) <= kAtol * std::max(1.0, scale) + kRtol * std::abs(b)) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: rlx " << a << ", jax " << b;
  }
}

TEST(VmapRefFile, HasTheCases) {
  ASSERT_TRUE(reference().contains("cases")) << "missing tests/autodiff/vmap_ref.json";
  EXPECT_GE(reference().at("cases").size(), 25u);
}

class VmapRef : public ::testing::TestWithParam<std::string> {};

TEST_P(VmapRef, CpuBackendMatchesJax) {
  const json* c = nullptr;
  for (const json& e : reference().at("cases"))
    if (e.at("name") == GetParam()) c = &e;
  ASSERT_NE(c, nullptr);
  const int64_t size = c->at("size").get<int64_t>();
  std::vector<BatchAxis> in_axes, out_axes;
  for (const json& a : c->at("in_axes")) in_axes.push_back(axis_of(a));
  for (const json& a : c->at("out_axes")) out_axes.push_back(axis_of(a));
  std::vector<std::pair<std::string, TensorType>> types;
  TensorMap feeds;
  for (size_t i = 0; i < in_axes.size(); ++i) {
    const json& in = c->at("inputs")[i];
    Tensor t = rlx::testing::json_tensor(in);
    TensorType per = t.type();
    if (in_axes[i]) {  // the per-example type: drop the batch dim
      int64_t a = *in_axes[i] < 0 ? *in_axes[i] + per.shape.rank() : *in_axes[i];
      per.shape.dims().erase(per.shape.dims().begin() + a);
    }
    types.emplace_back(in.at("name").get<std::string>(), per);
    feeds[types.back().first] = t;
  }
  Graph g = build_graph(c->at("graph").get<std::string>(), types);
  Graph v = vmap(g, in_axes, out_axes, size);
  ASSERT_TRUE(v.verify().empty()) << v.verify()[0];

  std::shared_ptr<Executable> exe = Session(Device::cpu()).compile(v);
  std::vector<Tensor> got = exe->run(feeds);
  std::vector<Tensor> ref = evaluate(v, feeds);
  const json& outs = c->at("outputs");
  ASSERT_EQ(got.size(), outs.size());
  for (size_t j = 0; j < got.size(); ++j) {
    expect_close(got[j], outs[j], "cpu output " + std::to_string(j));
    expect_close(ref[j], outs[j], "evaluator output " + std::to_string(j));
  }
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  if (reference().contains("cases"))
    for (const json& e : reference().at("cases")) names.push_back(e.at("name").get<std::string>());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Jax, VmapRef, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace rlx::autodiff
