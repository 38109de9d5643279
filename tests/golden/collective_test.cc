// jax parity of the collectives on the reference evaluator's simulated device axis: every case
// of tests/golden/collectives_ref.json (jax's psum / pmax / pmin / pmean, all_gather,
// psum_scatter and all_to_all, tiled, under jax.vmap(axis_name) over 1, 2 and 4 devices, written
// by gen_collectives_ref.py) run with evaluate_spmd; f32 / i32 bit-exact, f64 to 1e-12.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>
#include <string>

#include "golden_data.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

using testing::json;

const json& ref() {
  static const json j = [] {
    std::ifstream f(std::string(RLX_TEST_DATA_DIR) + "/golden/collectives_ref.json");
    return json::parse(f);
  }();
  return j;
}

TEST(CollectivesRef, EvaluatorMatchesJax) {
  std::set<std::string> ops;
  int n_cases = 0;
  for (const json& c : ref().at("cases")) {
    const std::string op = c.at("op").get<std::string>();
    SCOPED_TRACE(op + " " + c.at("attrs").dump() + " on " +
                 std::to_string(c.at("devices").get<int>()) + " devices, " +
                 c.at("inputs")[0].at("dtype").get<std::string>());
    std::vector<TensorMap> feeds;
    for (const json& t : c.at("inputs")) feeds.push_back({{"x", testing::json_tensor(t)}});
    const Tensor& x0 = feeds[0].at("x");
    AttrMap attrs{{"axis_name", std::string("i")}, {"axis_size", c.at("devices").get<int64_t>()}};
    for (const auto& [k, v] : c.at("attrs").items()) {
      if (v.is_string())
        attrs.set(k, v.get<std::string>());
      else
        attrs.set(k, v.get<int64_t>());
    }
    Graph g("c");
    std::optional<OpKind> kind = op_from_name(op);
    ASSERT_TRUE(kind.has_value()) << op;
    g.set_outputs({g.emit1(*kind, {g.input("x", x0.dtype(), x0.shape())}, attrs)});
    auto got = evaluate_spmd(g, feeds);
    for (size_t d = 0; d < got.size(); ++d) {
      Tensor want = testing::json_tensor(c.at("expected")[d]);
      ASSERT_EQ(got[d][0].type(), want.type()) << "device " << d;
      for (int64_t i = 0; i < want.numel(); ++i) {
        double a = got[d][0].get_f64(i), b = want.get_f64(i);
        if (want.dtype() == DType::f64)
          EXPECT_NEAR(a, b, 1e-12 * (1 + std::abs(b))) << "device " << d << " element " << i;
        else
          EXPECT_EQ(a, b) << "device " << d << " element " << i;
      }
    }
    ops.insert(op);
    ++n_cases;
  }
  EXPECT_EQ(ops,
            (std::set<std::string>{"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}));
  EXPECT_GE(n_cases, 90);
}

}  // namespace
}  // namespace rlx
