// The jax.random reference draws of tests/golden/random_ref.json (gen_random_ref.py) as rlx
// graphs: each case becomes a graph built with the rng_key / threefry2x32 ops and the
// rlx/ir/random.h builders, its feeds, and the bits jax produced. The golden suite runs them on
// the reference evaluator, the CPU and PJRT suites on their backends; all compare bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../golden/golden_data.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/random.h"

namespace rlx::testing {

/// One reference draw: the graph, its feeds and the expected outputs.
struct RandomRefCase {
  std::string name;
  Graph graph;
  TensorMap feeds;
  std::vector<Tensor> expected;
};

/// Every case of random_ref.json; throws rlx::Error for a file that does not parse.
inline std::vector<RandomRefCase> random_ref_cases() {
  std::ifstream in(RLX_TEST_DATA_DIR "/golden/random_ref.json");
  check(in.good(), "cannot open " RLX_TEST_DATA_DIR "/golden/random_ref.json");
  const json doc = json::parse(in);
  std::vector<RandomRefCase> out;
  for (const json& c : doc.at("cases")) {
    const std::string fn = c.at("fn").get<std::string>();
    RandomRefCase r{fn + "/" + std::to_string(out.size()), Graph("random_ref"), {}, {}};
    Graph& g = r.graph;
    r.expected.push_back(json_tensor(c.at("expected")));
    auto fed = [&](const std::string& name, const Tensor& t) {
      r.feeds[name] = t;
      return g.input(name, t.dtype(), t.shape());
    };
    auto ints = [&](const char* field) {
      std::vector<int64_t> v;
      const json& j = c.at(field);
      if (j.is_array() && !j.empty() && j[0].is_array()) {
        for (const json& row : j)
          for (const json& x : row) v.push_back(x.get<int64_t>());
      } else {
        v = j.get<std::vector<int64_t>>();
      }
      return v;
    };
    auto key_input = [&] {
      std::vector<int64_t> words = ints("key");
      Shape s =
          c.at("key")[0].is_array() ? Shape{static_cast<int64_t>(c.at("key").size()), 2} : Shape{2};
      Tensor t(DType::i32, s);
      for (size_t i = 0; i < words.size(); ++i) t.set_i64(static_cast<int64_t>(i), words[i]);
      return fed("key", t);
    };
    auto i32_input = [&](const std::string& name, const std::vector<int64_t>& v, Shape s) {
      Tensor t(DType::i32, std::move(s));
      for (size_t i = 0; i < v.size(); ++i) t.set_i64(static_cast<int64_t>(i), v[i]);
      return fed(name, t);
    };
    std::vector<Value> outs;
    if (fn == "key") {
      outs.push_back(g.rng_key(std::stoull(c.at("seed").get<std::string>())));
    } else if (fn == "threefry2x32") {
      std::vector<Value> w;
      for (size_t i = 0; i < 4; ++i)
        w.push_back(fed("w" + std::to_string(i), json_tensor(c.at("operands")[i])));
      auto [y0, y1] = g.threefry2x32(w[0], w[1], w[2], w[3]);
      outs = {y0, y1};
      r.expected.push_back(json_tensor(c.at("expected1")));
    } else if (fn == "bits") {
      outs.push_back(random::bits(g, key_input(), Shape(ints("shape"))));
    } else if (fn == "uniform") {
      auto dt = parse_dtype(c.at("dtype").get<std::string>());
      check(dt.has_value(), "random_ref: bad dtype");
      outs.push_back(random::uniform(g, key_input(), Shape(ints("shape")), *dt));
    } else if (fn == "fold_in") {
      Value d = i32_input("data", {c.at("data").get<int64_t>()}, Shape{});
      outs.push_back(random::fold_in(g, key_input(), d));
    } else if (fn == "split") {
      outs.push_back(random::split(g, key_input(), c.at("num").get<int64_t>()));
    } else if (fn == "bernoulli") {
      outs.push_back(
          random::bernoulli(g, key_input(), c.at("p").get<double>(), Shape(ints("shape"))));
    } else if (fn == "row_uniform") {
      std::vector<int64_t> seeds = ints("seeds"), steps = ints("steps");
      const auto n = static_cast<int64_t>(seeds.size());
      Value k = key_input();
      Value rows = random::fold_in(g, random::fold_in(g, k, i32_input("seeds", seeds, {n})),
                                   i32_input("steps", steps, {n}));
      outs.push_back(random::uniform(g, rows, Shape{}));
    } else {
      throw Error("random_ref: unknown fn '" + fn + "'");
    }
    g.set_outputs(outs);
    out.push_back(std::move(r));
  }
  return out;
}

/// Runs every case through `run` (graph, feeds -> outputs) and expects jax's bits exactly.
template <class Run>
void expect_random_ref(Run&& run) {
  std::vector<RandomRefCase> cases = random_ref_cases();
  ASSERT_GE(cases.size(), 60u);
  for (const RandomRefCase& c : cases) {
    std::vector<Tensor> got = run(c.graph, c.feeds);
    ASSERT_EQ(got.size(), c.expected.size()) << c.name;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(got[i].bitwise_equal(c.expected[i]))
          << c.name << " output " << i << ":\n  got      " << got[i].to_string(12)
          << "\n  expected " << c.expected[i].to_string(12);
  }
}

}  // namespace rlx::testing
