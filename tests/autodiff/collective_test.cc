// Autodiff of the collectives over a simulated device axis: the vjp rules against f64 central
// differences of the global function F = sum_d <ct_d, y_d> with respect to every device's
// operand (evaluate_spmd runs both); jvp against differences of y; vmap against the
// per-example loop; tie splitting of all_reduce max; fold-constants leaves collectives alone.
#include "rlx/ir/collective.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "rlx/autodiff/grad.h"
#include "rlx/autodiff/vmap.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"
#include "rlx/opt/passes.h"

namespace rlx {
namespace {

struct Config {
  std::string name;
  OpKind op;
  AttrMap attrs;  // the op's own attributes
};

std::vector<Config> configs() {
  auto red = [](const char* r) { return AttrMap{{"reduce", std::string(r)}}; };
  return {{"all_reduce_sum", OpKind::AllReduce, red("sum")},
          {"all_reduce_mean", OpKind::AllReduce, red("mean")},
          {"all_reduce_max", OpKind::AllReduce, red("max")},
          {"all_reduce_min", OpKind::AllReduce, red("min")},
          {"all_gather_0", OpKind::AllGather, {{"axis", int64_t{0}}}},
          {"all_gather_1", OpKind::AllGather, {{"axis", int64_t{1}}}},
          {"reduce_scatter_1", OpKind::ReduceScatter, {{"scatter_dimension", int64_t{1}}}},
          {"all_to_all_1_0",
           OpKind::AllToAll,
           {{"split_axis", int64_t{1}}, {"concat_axis", int64_t{0}}}},
          {"all_to_all_0_1",
           OpKind::AllToAll,
           {{"split_axis", int64_t{0}}, {"concat_axis", int64_t{1}}}}};
}

struct Layout {
  const char* name;
  int64_t devices;
  ReplicaGroups groups;
};

std::vector<Layout> layouts() {
  return {{"one", 1, {{0}}},
          {"pair", 2, {{0, 1}}},
          {"four", 4, {{0, 1, 2, 3}}},
          {"pairs_adjacent", 4, {{0, 1}, {2, 3}}},
          {"pairs_strided", 4, {{0, 2}, {1, 3}}}};
}

// y = op(sin(x)) on x: f64[4, 8] per device (the chain rule through the collective).
Graph forward(const Config& c, const Layout& l) {
  Graph g("f");
  Value x = g.input("x", DType::f64, Shape{4, 8});
  AttrMap a = collective_attrs(l.groups, "i");
  for (const auto& [k, v] : c.attrs.entries()) a.set(k, v);
  g.set_outputs({g.emit1(c.op, {g.sin(x)}, a, "c")});
  return g;
}

Tensor random(const Shape& s, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = u(rng);
  return Tensor::from_doubles(DType::f64, s, v);
}

// F = sum_d <ct_d, y_d(xs)>.
double global_f(const Graph& g, const std::vector<TensorMap>& xs, const std::vector<Tensor>& cts) {
  auto ys = evaluate_spmd(g, xs);
  double f = 0;
  for (size_t d = 0; d < ys.size(); ++d)
    for (int64_t i = 0; i < ys[d][0].numel(); ++i) f += cts[d].get_f64(i) * ys[d][0].get_f64(i);
  return f;
}

TEST(CollectiveAutodiff, VjpMatchesFiniteDifferencesOfTheGlobalFunction) {
  for (const Layout& l : layouts())
    for (const Config& c : configs()) {
      SCOPED_TRACE(c.name + " on " + l.name);
      Graph g = forward(c, l);
      Graph vg = autodiff::vjp(g, {"x"});
      std::mt19937 rng(5);
      std::vector<TensorMap> xs(static_cast<size_t>(l.devices));
      std::vector<TensorMap> feeds(static_cast<size_t>(l.devices));
      std::vector<Tensor> cts;
      const TensorType yt = g.type(g.outputs()[0]);
      for (size_t d = 0; d < xs.size(); ++d) {
        xs[d]["x"] = random(Shape{4, 8}, rng);
        cts.push_back(random(yt.shape, rng));
        feeds[d] = {{"x", xs[d]["x"]}, {"ct.0", cts[d]}};
      }
      auto out = evaluate_spmd(vg, feeds);
      const double h = 1e-5;
      for (size_t e = 0; e < xs.size(); ++e)
        for (int64_t i = 0; i < 32; ++i) {
          auto plus = xs, minus = xs;
          plus[e]["x"] = xs[e]["x"].clone();
          minus[e]["x"] = xs[e]["x"].clone();
          plus[e]["x"].data_as<double>()[i] += h;
          minus[e]["x"].data_as<double>()[i] -= h;
          double fd = (global_f(g, plus, cts) - global_f(g, minus, cts)) / (2 * h);
          EXPECT_NEAR(out[e][1].get_f64(i), fd, 1e-7 * (1 + std::abs(fd)))
              << "device " << e << " element " << i;
        }
    }
}

TEST(CollectiveAutodiff, JvpMatchesFiniteDifferences) {
  for (const Layout& l : layouts())
    for (const Config& c : configs()) {
      SCOPED_TRACE(c.name + " on " + l.name);
      Graph g = forward(c, l);
      Graph jg = autodiff::jvp(g, {"x"});
      std::mt19937 rng(9);
      std::vector<TensorMap> xs(static_cast<size_t>(l.devices)), plus, minus, feeds;
      const double h = 1e-5;
      for (auto& m : xs) {
        Tensor x = random(Shape{4, 8}, rng), t = random(Shape{4, 8}, rng);
        m["x"] = x;
        feeds.push_back({{"x", x}, {"tangent.x", t}});
        Tensor p = x.clone(), q = x.clone();
        for (int64_t i = 0; i < 32; ++i) {
          p.data_as<double>()[i] += h * t.get_f64(i);
          q.data_as<double>()[i] -= h * t.get_f64(i);
        }
        plus.push_back({{"x", p}});
        minus.push_back({{"x", q}});
      }
      auto out = evaluate_spmd(jg, feeds);
      auto yp = evaluate_spmd(g, plus), ym = evaluate_spmd(g, minus);
      for (size_t d = 0; d < xs.size(); ++d)
        for (int64_t i = 0; i < out[d][1].numel(); ++i) {
          double fd = (yp[d][0].get_f64(i) - ym[d][0].get_f64(i)) / (2 * h);
          EXPECT_NEAR(out[d][1].get_f64(i), fd, 1e-7 * (1 + std::abs(fd)));
        }
    }
}

TEST(CollectiveAutodiff, VmapEqualsThePerExampleLoop) {
  for (const Layout& l : layouts())
    for (const Config& c : configs()) {
      SCOPED_TRACE(c.name + " on " + l.name);
      Graph g = forward(c, l);
      const int64_t b = 3;
      Graph vg = autodiff::vmap(g, {1}, {0}, b);  // batch at axis 1 of the input, 0 of the output
      std::mt19937 rng(3);
      std::vector<TensorMap> batched;
      std::vector<std::vector<TensorMap>> examples(b);
      for (int64_t d = 0; d < l.devices; ++d) {
        Tensor x = random(Shape{4, b, 8}, rng);
        batched.push_back({{"x", x}});
        for (int64_t k = 0; k < b; ++k) {
          std::vector<double> v;
          for (int64_t i = 0; i < 4; ++i)
            for (int64_t j = 0; j < 8; ++j) v.push_back(x.get_f64((i * b + k) * 8 + j));
          examples[static_cast<size_t>(k)].push_back(
              {{"x", Tensor::from_doubles(DType::f64, Shape{4, 8}, v)}});
        }
      }
      auto out = evaluate_spmd(vg, batched);
      for (int64_t k = 0; k < b; ++k) {
        auto ref = evaluate_spmd(g, examples[static_cast<size_t>(k)]);
        for (int64_t d = 0; d < l.devices; ++d) {
          const Tensor& r = ref[static_cast<size_t>(d)][0];
          const Tensor& o = out[static_cast<size_t>(d)][0];  // [b, ...]
          ASSERT_EQ(o.shape()[0], b);
          for (int64_t i = 0; i < r.numel(); ++i)
            EXPECT_EQ(o.get_f64(k * r.numel() + i), r.get_f64(i));
        }
      }
    }
}

// Devices holding the same maximum share the cotangent evenly.
TEST(CollectiveAutodiff, AllReduceMaxSplitsTiesEvenly) {
  Graph g("f");
  Value x = g.input("x", DType::f64, Shape{2});
  AttrMap a = collective_attrs({{0, 1, 2}});
  a.set("reduce", std::string("max"));
  g.set_outputs({g.emit1(OpKind::AllReduce, {x}, a)});
  Graph vg = autodiff::vjp(g, {"x"});
  std::vector<TensorMap> feeds;
  for (double v0 : {5.0, 5.0, 1.0})
    feeds.push_back(
        {{"x", Tensor::from_doubles(DType::f64, Shape{2}, std::vector<double>{v0, 2})},
         {"ct.0", Tensor::from_doubles(DType::f64, Shape{2}, std::vector<double>{1, 3})}});
  auto out = evaluate_spmd(vg, feeds);
  // Element 0: devices 0 and 1 tie at 5, total cotangent 3 -> 1.5 each, device 2 gets 0.
  // Element 1: all three tie at 2, total 9 -> 3 each.
  EXPECT_EQ(out[0][1].get_f64(0), 1.5);
  EXPECT_EQ(out[1][1].get_f64(0), 1.5);
  EXPECT_EQ(out[2][1].get_f64(0), 0.0);
  for (int d = 0; d < 3; ++d) EXPECT_EQ(out[static_cast<size_t>(d)][1].get_f64(1), 3.0);
}

TEST(CollectiveAutodiff, FoldConstantsKeepsCollectives) {
  Graph c("c");
  Value k = c.constant(Tensor::full(DType::f32, Shape{2}, 1.0));
  c.set_outputs({c.emit1(OpKind::AllReduce, {k}, AttrMap{})});
  create_fold_constants_pass()->run(c);
  EXPECT_EQ(c.node(c.outputs()[0]).op, OpKind::AllReduce);
  auto r = evaluate_spmd(c, std::vector<TensorMap>(4));
  EXPECT_EQ(r[3][0].get_f64(1), 4.0);
}

}  // namespace
}  // namespace rlx
