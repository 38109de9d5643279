// The CPU backend against the reference evaluator, op by op: every golden case of
// tests/golden/ops.json (real attributes, NaN/inf, integer wrap, size-0 dims) and every case
// of the op-case table (tests/ops/op_case.h: sizes that exercise vector tails, thread splits,
// broadcasting and size-0 dims) in every dtype each op accepts. Each graph runs under three
// configurations: the default pipeline (fusions on), force_common dispatch (composites decomposed)
// and auto-mixed-bf16 (compared with the evaluator of the compiled graph, which isolates kernel
// error from the precision change).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/exe_util.h"
#include "common/test_util.h"
#include "golden/golden_data.h"
#include "ops/op_case.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

using testing::json;

enum class Config { Default, ForceCommon, AmpBf16 };

const char* config_name(Config c) {
  switch (c) {
    case Config::Default:
      return "default";
    case Config::ForceCommon:
      return "force_common";
    case Config::AmpBf16:
      return "amp_bf16";
  }
  return "?";
}

// ---- tolerances: the one table of this sweep.

struct Tolerance {
  double rtol = 0;
  double atol = 0;  // relative to max(1, max |expected|) of the output (norm-wise, as for GEMM)
};

// Kernel vs reference evaluator for one output dtype. Native kernels compute f16/bf16 in f32
// and round once, like the evaluator (double, rounded once), so they differ by at most one
// rounding of the dtype per op; f32 kernels differ by summation order and vectorized
// transcendentals (a few ulp); integers and bool are exact. Under auto-mixed-bf16 the compared
// graphs carry bf16 intermediates, so one bf16 rounding can surface in any float output.
Tolerance tolerance(DType t, Config c) {
  Tolerance tol;
  switch (t) {
    case DType::f64:
      tol = {1e-12, 1e-12};
      break;
    case DType::f32:
      tol = {1e-5, 1e-6};
      break;
    case DType::f16:
      tol = {2e-3, 1e-3};
      break;
    case DType::bf16:
      tol = {1.6e-2, 8e-3};
      break;
    default:
      return {};
  }
  if (c == Config::AmpBf16) tol = {std::max(tol.rtol, 1.6e-2), std::max(tol.atol, 8e-3)};
  return tol;
}

// |got - want| <= rtol |want| + atol max(1, max |want|) elementwise; NaN matches NaN and an
// infinity the same infinity; integers and bool compare exactly.
::testing::AssertionResult close(const Tensor& got, const Tensor& want, Tolerance tol) {
  if (got.type() != want.type())
    return ::testing::AssertionFailure()
           << "type " << got.type().to_string() << " vs " << want.type().to_string();
  if (!is_float(want.dtype())) {
    for (int64_t i = 0; i < want.numel(); ++i)
      if (got.get_i64(i) != want.get_i64(i))
        return ::testing::AssertionFailure()
               << "element " << i << ": got " << got.get_i64(i) << ", expected " << want.get_i64(i);
    return ::testing::AssertionSuccess();
  }
  double scale = 1;
  for (int64_t i = 0; i < want.numel(); ++i)
    if (std::isfinite(want.get_f64(i))) scale = std::max(scale, std::fabs(want.get_f64(i)));
  for (int64_t i = 0; i < want.numel(); ++i) {
    double x = got.get_f64(i), y = want.get_f64(i);
    bool ok = std::isnan(y)   ? std::isnan(x)
              : std::isinf(y) ? x == y
                              : std::fabs(x - y) <= tol.rtol * std::fabs(y) + tol.atol * scale;
    if (!ok)
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << x << ", expected " << y << " (rtol " << tol.rtol
             << ", atol " << tol.atol << " x " << scale << ")";
  }
  return ::testing::AssertionSuccess();
}

// ---- known differences: "<case-name prefix>" or "<case-name prefix>@<config>" -> the skip
// message naming the difference. Empty when every kernel (and the evaluator) is right.
const std::map<std::string, std::string>& known_failures() {
  static const std::map<std::string, std::string> known{
      {"reduce_sum/f32/cancellation",
       "known kernel difference (reported): reduce_sum f32 accumulates in f32, so "
       "[1e8, 1, -1e8, 1, 3e-8] sums to 1 where the evaluator and the golden value (double "
       "accumulation) give 2; the accumulation precision of f32 sums is not pinned yet"},
  };
  static const std::map<std::string, std::string> all = [] {
    std::map<std::string, std::string> m = known;
    for (const char* mask : {"causal", "sliding_window", "bool", "bias"})
      m[std::string("attention/nonfinite_values_") + mask + "/@force_common"] =
          "documented (docs/ir.md): attention's decomposition is softmax(scores) @ v, as "
          "jax.nn.dot_product_attention, so NaN/inf in v at a masked key gives 0 * inf = NaN; "
          "the native kernel and the evaluator skip masked keys";
    return m;
  }();
  return all;
}

std::optional<std::string> known_failure(const std::string& name, Config c) {
  for (const auto& [key, why] : known_failures()) {
    size_t at = key.find('@');
    std::string prefix = key.substr(0, at);
    if (name.rfind(prefix, 0) != 0) continue;
    if (at == std::string::npos || key.substr(at + 1) == config_name(c)) return why;
  }
  return std::nullopt;
}

// ---- native vs reference counts over the sweep (default configuration), printed at the end.

struct NativeCounts {
  std::mutex mu;
  std::map<std::string, std::pair<int64_t, int64_t>> by_op;
};
NativeCounts& native_counts() {
  static NativeCounts c;
  return c;
}

void record_kernels(const Executable& exe) {
  NativeCounts& c = native_counts();
  std::lock_guard<std::mutex> lock(c.mu);
  for (const auto& [op, k] : exe.kernels().counts()) {
    auto& counts = c.by_op[std::string(op_name(op))];
    counts.first += k.native;
    counts.second += k.fallback;
  }
}

class PrintNativeCounts : public ::testing::Environment {
 public:
  void TearDown() override {
    NativeCounts& c = native_counts();
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.by_op.empty()) return;
    std::printf("cpu parity sweep, nodes per op (default pipeline): native / reference\n");
    for (const auto& [op, n] : c.by_op)
      std::printf("  %-26s %6lld / %lld\n", op.c_str(), static_cast<long long>(n.first),
                  static_cast<long long>(n.second));
  }
};
const auto* const kPrintNativeCounts = ::testing::AddGlobalTestEnvironment(new PrintNativeCounts);

// ---- running one graph

// Compiles `g` through a Session under `c`, feeds inputs and params from `feeds`, runs it and
// compares every output with the reference evaluator (`reference`: evaluate(g, feeds) when
// already computed), widening the tolerance of float outputs to `floor` when given.
void expect_parity(const Graph& g, const TensorMap& feeds, Config c,
                   std::optional<Tolerance> floor = std::nullopt,
                   const std::vector<Tensor>* reference = nullptr) {
  static Session session(Device::cpu(), SessionOptions{.cache_capacity = 0});
  CompileOptions options;
  options.dispatch = DispatchOptions{};
  if (c == Config::ForceCommon) options.dispatch->policy = KernelDispatch::ForceCommon;
  if (c == Config::AmpBf16) options.precision = parse_precision_policy("auto-mixed-bf16");
  std::shared_ptr<Executable> exe;
  std::vector<Tensor> got, want;
  try {
    exe = session.compile(g, options);
    got = exe->run(testing::bind_params(*exe, feeds));
    if (c == Config::AmpBf16)
      want = evaluate(exe->compiled_graph(), feeds);
    else
      want = reference != nullptr ? *reference : evaluate(g, feeds);
  } catch (const std::exception& e) {
    FAIL() << "threw: " << e.what();
  }
  if (c == Config::Default) record_kernels(*exe);
  // A node may run on the reference kernel only for a reason the CPU kernel table declares.
  for (const KernelReport::Node& n : exe->kernels().nodes)
    EXPECT_EQ(n.fallback_reason.rfind("UNDECLARED", 0), std::string::npos)
        << op_name(n.op) << ": " << n.fallback_reason;
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    Tolerance tol = tolerance(want[i].dtype(), c);
    if (floor && is_float(want[i].dtype()))
      tol = {std::max(tol.rtol, floor->rtol), std::max(tol.atol, floor->atol)};
    EXPECT_TRUE(close(got[i], want[i], tol))
        << "output " << i << " (" << want[i].type().to_string() << ")\n  got      "
        << got[i].to_string(48) << "\n  expected " << want[i].to_string(48) << "\n"
        << exe->kernel_report() << "compiled:\n"
        << exe->compiled_graph().to_string();
  }
}

// ---- golden cases

struct GoldenCase {
  std::string name;
  Graph graph;
  TensorMap feeds;
  // The case's own tolerance where the golden file widens it (with a note: f32 inputs whose
  // exact result is ill-conditioned, or a composite decomposed in f16/bf16 that rounds every
  // step: rtol/atol, decomposed_rtol/decomposed_atol), the larger of the two.
  std::optional<Tolerance> widened;
};

struct GoldenFile {
  std::vector<GoldenCase> cases;
  std::string error;
};

const GoldenFile& golden() {
  static const GoldenFile file = [] {
    GoldenFile f;
    try {
      std::ifstream in(RLX_TEST_DATA_DIR "/golden/ops.json");
      check(in.good(), "cannot open " RLX_TEST_DATA_DIR "/golden/ops.json");
      json doc = json::parse(in);
      for (const json& c : doc.at("cases")) {
        GoldenCase g{c.at("name").get<std::string>(),
                     Graph::parse(c.at("ir").get<std::string>()),
                     {},
                     std::nullopt};
        for (const auto& [name, t] : c.at("inputs").items())
          g.feeds.emplace(name, testing::json_tensor(t));
        for (const char* prefix : {"", "decomposed_"}) {
          std::string rtol = std::string(prefix) + "rtol", atol = std::string(prefix) + "atol";
          if (!c.contains(rtol)) continue;
          Tolerance t = g.widened.value_or(Tolerance{});
          g.widened = Tolerance{std::max(t.rtol, c.at(rtol).get<double>()),
                                std::max(t.atol, c.value(atol, 0.0))};
        }
        f.cases.push_back(std::move(g));
      }
    } catch (const std::exception& e) {
      f.error = e.what();
    }
    return f;
  }();
  return file;
}

constexpr Config kConfigs[] = {Config::Default, Config::ForceCommon, Config::AmpBf16};

using CaseParam = std::tuple<size_t, Config>;

class GoldenParity : public ::testing::TestWithParam<CaseParam> {};

TEST_P(GoldenParity, MatchesTheEvaluator) {
  const auto& [index, config] = GetParam();
  const GoldenCase& c = golden().cases[index];
  if (auto bug = known_failure(c.name, config)) GTEST_SKIP() << *bug;
  SCOPED_TRACE(c.name + " [" + config_name(config) + "]\n" + c.graph.to_string());
  expect_parity(c.graph, c.feeds, config, c.widened);
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenParity,
                         ::testing::Combine(::testing::Range(size_t{0}, golden().cases.size()),
                                            ::testing::ValuesIn(kConfigs)),
                         [](const ::testing::TestParamInfo<CaseParam>& info) {
                           return testing::test_name(golden().cases[std::get<0>(info.param)].name +
                                                     "@" + config_name(std::get<1>(info.param)));
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenParity);

TEST(GoldenParityFile, Loads) {
  ASSERT_EQ(golden().error, "");
  EXPECT_GT(golden().cases.size(), 1000u);
}

// ---- every case of the op-case table (tests/ops/op_case.h) in every dtype it runs in

using OpCaseParam = std::tuple<const testing::OpCase*, DType, Config>;

class OpCaseParity : public ::testing::TestWithParam<OpCaseParam> {};

TEST_P(OpCaseParity, MatchesTheEvaluator) {
  const auto& [c, dtype, config] = GetParam();
  std::string name = c->name + "/" + std::string(dtype_name(dtype));
  if (auto bug = known_failure(name, config)) GTEST_SKIP() << *bug;
  SCOPED_TRACE(name + " [" + config_name(config) + "]");
  // The configurations of one case run one after the other: its feeds and reference results
  // are computed once.
  static std::string cached;
  static Graph graph;
  static TensorMap feeds;
  static std::vector<Tensor> reference;
  if (cached != name) {
    graph = testing::case_graph(*c, dtype);
    feeds = testing::case_feeds(*c, dtype);
    reference = evaluate(graph, feeds);
    cached = name;
  }
  expect_parity(graph, feeds, config, std::nullopt, &reference);
}

std::vector<OpCaseParam> op_case_params() {
  std::vector<OpCaseParam> out;
  for (const testing::OpCase& c : testing::op_cases()) {
    if (!testing::runs_in(c, testing::kCpuSuite)) continue;
    for (DType t : testing::suite_dtypes(c, testing::kCpuSuite))
      for (Config config : kConfigs) out.emplace_back(&c, t, config);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(OpCases, OpCaseParity, ::testing::ValuesIn(op_case_params()),
                         [](const ::testing::TestParamInfo<OpCaseParam>& info) {
                           return testing::test_name(
                               std::get<0>(info.param)->name + "@" +
                               std::string(dtype_name(std::get<1>(info.param))) + "@" +
                               config_name(std::get<2>(info.param)));
                         });

}  // namespace
}  // namespace rlx
