// Collectives on the reference evaluator over a simulated device axis (evaluate_spmd): each
// op against its definition written as index loops, on random data, for group sizes 1, 2 and 4
// and two layouts of 2-device groups on 4 devices; and the errors of bad shapes and groups.
#include "rlx/ir/collective.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/collective_layouts.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

using testing::Layout;
using testing::layouts;

// The groups a layout means (one group of all devices when it names none).
ReplicaGroups groups_of(const Layout& l) {
  if (!l.groups.empty()) return l.groups;
  ReplicaGroups all(1);
  for (int64_t d = 0; d < l.devices; ++d) all[0].push_back(d);
  return all;
}

AttrMap attrs_of(const Layout& l, AttrMap op_attrs) {
  AttrMap a = collective_attrs(l.groups, "x", l.groups.empty() ? l.devices : 0);
  for (const auto& [k, v] : op_attrs.entries()) a.set(k, v);
  return a;
}

// Random f64 operands [devices] of `shape`; integral values when `ints` (exact sums).
std::vector<TensorMap> feeds(int64_t devices, const Shape& shape, unsigned seed,
                             DType t = DType::f64) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(-9, 9);
  std::vector<TensorMap> out(static_cast<size_t>(devices));
  for (auto& m : out) {
    std::vector<double> v(static_cast<size_t>(shape.numel()));
    for (double& x : v) x = u(rng) + (t == DType::f64 ? 0.125 * u(rng) : 0.0);
    m["x"] = Tensor::from_doubles(t, shape, v);
  }
  return out;
}

std::vector<Tensor> run(OpKind op, const Layout& l, AttrMap op_attrs,
                        const std::vector<TensorMap>& in) {
  Graph g("c");
  const Tensor& x0 = in[0].at("x");
  Value x = g.input("x", x0.dtype(), x0.shape());
  g.set_outputs({g.emit1(op, {x}, attrs_of(l, std::move(op_attrs)), "c")});
  auto outs = evaluate_spmd(g, in);
  std::vector<Tensor> r;
  for (auto& o : outs) r.push_back(o[0]);
  return r;
}

double at(const Tensor& t, int64_t i) { return t.get_f64(i); }

// The group and rank of device d.
std::pair<std::vector<int64_t>, int64_t> group_of(const Layout& l, int64_t d) {
  for (const auto& g : groups_of(l))
    for (size_t r = 0; r < g.size(); ++r)
      if (g[r] == d) return {g, static_cast<int64_t>(r)};
  ADD_FAILURE() << "device " << d << " in no group";
  return {{}, 0};
}

TEST(Collective, AllReduceEqualsItsDefinition) {
  for (const Layout& l : layouts())
    for (std::string reduce : {"sum", "max", "min", "mean"}) {
      SCOPED_TRACE(std::string(l.name) + " " + reduce);
      Shape sh{3, 5};
      auto in = feeds(l.devices, sh, 7);
      auto out = run(OpKind::AllReduce, l, {{"reduce", reduce}}, in);
      for (int64_t d = 0; d < l.devices; ++d) {
        auto [g, r] = group_of(l, d);
        ASSERT_EQ(out[static_cast<size_t>(d)].shape(), sh);
        for (int64_t i = 0; i < sh.numel(); ++i) {
          std::vector<double> xs;
          for (int64_t e : g) xs.push_back(at(in[static_cast<size_t>(e)].at("x"), i));
          double want = reduce == "max"   ? *std::max_element(xs.begin(), xs.end())
                        : reduce == "min" ? *std::min_element(xs.begin(), xs.end())
                                          : 0;
          if (reduce == "sum" || reduce == "mean") {
            for (double x : xs) want += x;
            if (reduce == "mean") want /= static_cast<double>(xs.size());
          }
          EXPECT_DOUBLE_EQ(at(out[static_cast<size_t>(d)], i), want)
              << "device " << d << " i " << i;
        }
      }
    }
}

TEST(Collective, AllReduceIntegerSumWrapsAndMaxPropagatesNaN) {
  Layout l{"pair", 2, {{0, 1}}};
  std::vector<TensorMap> in(2);
  in[0]["x"] = Tensor::from_ints(DType::i32, Shape{2}, std::vector<int64_t>{2147483647, -5});
  in[1]["x"] = Tensor::from_ints(DType::i32, Shape{2}, std::vector<int64_t>{1, 7});
  auto out = run(OpKind::AllReduce, l, {{"reduce", std::string("sum")}}, in);
  EXPECT_EQ(out[1].get_f64(0), -2147483648.0);
  EXPECT_EQ(out[1].get_f64(1), 2.0);
  std::vector<TensorMap> nan(2);
  nan[0]["x"] = Tensor::from_doubles(DType::f32, Shape{1}, std::vector<double>{NAN});
  nan[1]["x"] = Tensor::from_doubles(DType::f32, Shape{1}, std::vector<double>{1});
  EXPECT_TRUE(
      std::isnan(run(OpKind::AllReduce, l, {{"reduce", std::string("max")}}, nan)[1].get_f64(0)));
}

TEST(Collective, AllGatherEqualsItsDefinition) {
  for (const Layout& l : layouts())
    for (int64_t axis : {0, 1, -1}) {
      SCOPED_TRACE(std::string(l.name) + " axis " + std::to_string(axis));
      auto in = feeds(l.devices, Shape{2, 3}, 11);
      auto out = run(OpKind::AllGather, l, {{"axis", axis}}, in);
      int a = axis == 0 ? 0 : 1;
      for (int64_t d = 0; d < l.devices; ++d) {
        auto [g, r] = group_of(l, d);
        int64_t s = static_cast<int64_t>(g.size());
        const Tensor& o = out[static_cast<size_t>(d)];
        ASSERT_EQ(o.shape(), a == 0 ? Shape({2 * s, 3}) : Shape({2, 3 * s}));
        for (int64_t k = 0; k < s; ++k)
          for (int64_t i = 0; i < 2; ++i)
            for (int64_t j = 0; j < 3; ++j) {
              int64_t oi = a == 0 ? k * 2 + i : i, oj = a == 0 ? j : k * 3 + j;
              EXPECT_EQ(at(o, oi * o.shape()[1] + oj),
                        at(in[static_cast<size_t>(g[static_cast<size_t>(k)])].at("x"), i * 3 + j));
            }
      }
    }
}

TEST(Collective, ReduceScatterEqualsItsDefinition) {
  for (const Layout& l : layouts()) {
    SCOPED_TRACE(l.name);
    auto in = feeds(l.devices, Shape{3, 8}, 13);
    auto out = run(OpKind::ReduceScatter, l, {{"scatter_dimension", int64_t{1}}}, in);
    for (int64_t d = 0; d < l.devices; ++d) {
      auto [g, r] = group_of(l, d);
      int64_t n = 8 / static_cast<int64_t>(g.size());
      const Tensor& o = out[static_cast<size_t>(d)];
      ASSERT_EQ(o.shape(), Shape({3, n}));
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double want = 0;
          for (int64_t e : g) want += at(in[static_cast<size_t>(e)].at("x"), i * 8 + r * n + j);
          EXPECT_DOUBLE_EQ(at(o, i * n + j), want);
        }
    }
  }
}

TEST(Collective, AllToAllEqualsItsDefinition) {
  for (const Layout& l : layouts())
    for (auto [split, concat] : std::vector<std::pair<int64_t, int64_t>>{{1, 0}, {0, 1}, {1, 1}}) {
      SCOPED_TRACE(std::string(l.name) + " split " + std::to_string(split) + " concat " +
                   std::to_string(concat));
      Shape sh{4, 8};
      auto in = feeds(l.devices, sh, 17);
      auto out = run(OpKind::AllToAll, l, {{"split_axis", split}, {"concat_axis", concat}}, in);
      for (int64_t d = 0; d < l.devices; ++d) {
        auto [g, j] = group_of(l, d);
        int64_t s = static_cast<int64_t>(g.size());
        const Tensor& o = out[static_cast<size_t>(d)];
        Shape want = sh;
        want[static_cast<int>(split)] /= s;
        want[static_cast<int>(concat)] *= s;
        ASSERT_EQ(o.shape(), want);
        // Element (p, q) of o: the block of rank k along concat, then its block j along split.
        for (int64_t p = 0; p < want[0]; ++p)
          for (int64_t q = 0; q < want[1]; ++q) {
            int64_t idx[2] = {p, q};
            int64_t blk =
                split == concat ? sh[static_cast<int>(split)] / s : sh[static_cast<int>(concat)];
            int64_t k = idx[concat] / blk;
            int64_t src[2] = {p, q};
            src[concat] = idx[concat] % blk;
            src[split] += j * (sh[static_cast<int>(split)] / s);
            const Tensor& x = in[static_cast<size_t>(g[static_cast<size_t>(k)])].at("x");
            EXPECT_EQ(at(o, p * want[1] + q), at(x, src[0] * 8 + src[1]))
                << "device " << d << " (" << p << ", " << q << ")";
          }
      }
    }
}

// evaluate() is the run over one device: every collective of a group of one is the identity.
TEST(Collective, SingleDeviceEvaluateIsAGroupOfOne) {
  Layout l{"one", 1, {{0}}};
  auto in = feeds(1, Shape{2, 4}, 3);
  Graph g("c");
  Value x = g.input("x", DType::f64, Shape{2, 4});
  g.set_outputs(
      {g.emit1(OpKind::AllReduce, {x}, attrs_of(l, {{"reduce", std::string("sum")}})),
       g.emit1(OpKind::AllGather, {x}, attrs_of(l, {{"axis", int64_t{0}}})),
       g.emit1(OpKind::ReduceScatter, {x}, attrs_of(l, {{"scatter_dimension", int64_t{1}}})),
       g.emit1(OpKind::AllToAll, {x},
               attrs_of(l, {{"split_axis", int64_t{1}}, {"concat_axis", int64_t{0}}}))});
  auto out = evaluate(g, in[0]);
  for (const Tensor& o : out)
    for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(o.get_f64(i), in[0].at("x").get_f64(i));
  // One group of all devices without a size: all_reduce of a constant over 4 devices.
  Graph c("c");
  Value k = c.constant(Tensor::full(DType::f32, Shape{2}, 1.0));
  c.set_outputs({c.emit1(OpKind::AllReduce, {k}, AttrMap{})});
  std::vector<TensorMap> four(4);
  auto r = evaluate_spmd(c, four);
  EXPECT_EQ(r[3][0].get_f64(1), 4.0);
}

// The text form keeps every participant attribute.
TEST(Collective, TextRoundTrip) {
  Graph g("c");
  Value x = g.input("x", DType::f32, Shape{4, 6});
  g.set_outputs({g.emit1(OpKind::AllToAll, {x}, [] {
    AttrMap a = collective_attrs({{0, 2}, {1, 3}}, "model");
    a.set("split_axis", int64_t{0});
    a.set("concat_axis", int64_t{1});
    return a;
  }())});
  std::string text = g.to_string();
  EXPECT_NE(text.find("replica_groups"), std::string::npos) << text;
  EXPECT_NE(text.find("\"model\""), std::string::npos) << text;
  EXPECT_EQ(Graph::parse(text).to_string(), text);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Collective, ErrorsNameOpNodeShapeAndGroupSize) {
  Graph g("c");
  Value x = g.input("x", DType::f32, Shape{2, 3});
  std::string e = error_of([&] {
    g.emit1(
        OpKind::ReduceScatter, {x},
        [] {
          AttrMap a = collective_attrs({{0, 1}});
          a.set("scatter_dimension", int64_t{1});
          return a;
        }(),
        "rs");
  });
  EXPECT_NE(e.find("reduce_scatter"), std::string::npos) << e;
  EXPECT_NE(e.find("%rs"), std::string::npos) << e;
  EXPECT_NE(e.find("f32[2,3]"), std::string::npos) << e;
  EXPECT_NE(e.find("not divisible by the group size 2"), std::string::npos) << e;

  e = error_of([&] {
    g.emit1(OpKind::AllToAll, {x}, {{"split_axis", int64_t{0}}, {"concat_axis", int64_t{1}}},
            "a2a");
  });
  EXPECT_NE(e.find("all_to_all"), std::string::npos) << e;
  EXPECT_NE(e.find("give replica_groups or axis_size"), std::string::npos) << e;

  e = error_of([&] {
    AttrMap a;
    a.set("replica_groups",
          Tensor::from_ints(DType::i64, Shape{2, 2}, std::vector<int64_t>{0, 1, 1, 3}));
    a.set("axis", int64_t{0});
    g.emit1(OpKind::AllGather, {x}, a, "ag");
  });
  EXPECT_NE(e.find("exactly once"), std::string::npos) << e;
  EXPECT_NE(e.find("%ag"), std::string::npos) << e;

  e = error_of([&] {
    AttrMap a = collective_attrs({{0, 1}}, "", 4);
    a.set("axis", int64_t{0});
    g.emit1(OpKind::AllGather, {x}, a);
  });
  EXPECT_NE(e.find("axis_size 4 differs from the group size 2"), std::string::npos) << e;

  e = error_of([&] { g.emit1(OpKind::AllReduce, {x}, {{"reduce", std::string("prod")}}); });
  EXPECT_NE(e.find("prod"), std::string::npos) << e;

  Graph i("c");
  Value xi = i.input("x", DType::i32, Shape{2});
  e = error_of([&] { i.emit1(OpKind::AllReduce, {xi}, {{"reduce", std::string("mean")}}); });
  EXPECT_NE(e.find("float"), std::string::npos) << e;

  // A run whose device count the groups do not cover.
  Graph h("c");
  Value y = h.input("x", DType::f32, Shape{2});
  h.set_outputs({h.emit1(OpKind::AllReduce, {y}, collective_attrs({{0, 1}, {2, 3}}), "ar")});
  e = error_of([&] {
    evaluate_spmd(h, std::vector<TensorMap>(2, {{"x", Tensor(DType::f32, Shape{2})}}));
  });
  EXPECT_NE(e.find("all_reduce (node %ar)"), std::string::npos) << e;
  EXPECT_NE(e.find("name 4 devices, the run has 2"), std::string::npos) << e;
  e = error_of([&] { evaluate(h, {{"x", Tensor(DType::f32, Shape{2})}}); });
  EXPECT_NE(e.find("evaluate_spmd"), std::string::npos) << e;
  e = error_of([&] { evaluate_spmd(h, std::vector<TensorMap>(4)); });
  EXPECT_NE(e.find("missing input 'x'"), std::string::npos) << e;
  EXPECT_NE(e.find("(device 0)"), std::string::npos) << e;
}

}  // namespace
}  // namespace rlx
