// Numerical round trips through a real PJRT plugin: every natively lowered op, a BERT-style
// encoder layer under AlwaysF32 and AutoMixedBf16, and repeated compile/run.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <set>

#include "common/test_util.h"
#include "ops/op_case.h"
#include "pjrt_test_util.h"
#include "rlx/ir/error.h"
#include "rlx/models/encoder_block.h"

namespace rlx::pjrt::testing {
namespace {

// Feeds for `g`: floats uniform in [lo, hi), integers in [-5, 5] (u8: [0, 10]), bools random.
TensorMap make_feeds(const Graph& g, uint64_t seed, double lo = -2, double hi = 2) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> real(lo, hi);
  std::uniform_int_distribution<int64_t> integer(-5, 5);
  TensorMap feeds;
  for (const auto& ids : {g.inputs(), g.params()}) {
    for (int32_t id : ids) {
      const TensorType& t = g.node(id).results[0];
      Tensor x(t.dtype, t.shape);
      for (int64_t i = 0; i < x.numel(); ++i) {
        if (is_float(t.dtype))
          x.set_f64(i, real(rng));
        else if (t.dtype == DType::bool_)
          x.set_i64(i, integer(rng) > 0);
        else if (t.dtype == DType::u8)
          x.set_i64(i, integer(rng) + 5);
        else
          x.set_i64(i, integer(rng));
      }
      feeds.emplace(g.node(id).name, x);
    }
  }
  return feeds;
}

// Compiles `g` for the plugin, binds params from `feeds`, runs and compares every output with
// the reference evaluator.
void expect_matches_reference(const Graph& g, const TensorMap& feeds, Tolerance tol,
                              const CompileOptions& options = f32_options()) {
  std::unique_ptr<Executable> exe =
      test_backend()->compile(g, options, Device{DeviceKind::Pjrt, 0});
  TensorMap inputs;
  for (int32_t id : g.params()) exe->set_param(g.node(id).name, feeds.at(g.node(id).name));
  for (int32_t id : g.inputs()) inputs.emplace(g.node(id).name, feeds.at(g.node(id).name));
  std::vector<Tensor> got = exe->run(inputs);
  std::vector<Tensor> want = evaluate(g, feeds);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], tol)) << "output " << i << " of\n" << g.to_string();
}

// XLA vs the reference evaluator, per op (XLA's numerics, not the case's): its f32
// transcendentals are fast polynomial approximations, contractions sum in another order, and
// composites decompose into chains of ops.
Tolerance tolerance(OpKind op) {
  const OpInfo& info = op_info(op);
  if (op == OpKind::DotGeneral || op == OpKind::Conv) return {1e-5, 1e-4};
  if (info.has(kComposite) && !info.has(kShapeOp)) return kF32LayerTol;
  if (info.has(kUnary) && info.dtypes == kFloatDTypes) return kF32TranscendentalTol;
  return kF32Tol;
}

// ---- every case of the op-case table (tests/ops/op_case.h) the PJRT suite runs: natively
// lowered ops and composites (decomposed by legalization), in f32 / f64 / i32 where the op
// accepts them.

using PjrtCase = std::pair<const rlx::testing::OpCase*, DType>;

class PjrtOpTest : public ::testing::TestWithParam<PjrtCase> {};

TEST_P(PjrtOpTest, MatchesReferenceEvaluator) {
  RLX_REQUIRE_PJRT_PLUGIN();
  const auto& [c, dtype] = GetParam();
  Graph g = rlx::testing::case_graph(*c, dtype);
  expect_matches_reference(g, rlx::testing::case_feeds(*c, dtype), tolerance(c->op));
}

std::vector<PjrtCase> pjrt_cases() {
  std::vector<PjrtCase> out;
  for (const rlx::testing::OpCase& c : rlx::testing::op_cases()) {
    if (!rlx::testing::runs_in(c, rlx::testing::kPjrtSuite)) continue;
    for (DType t : rlx::testing::suite_dtypes(c, rlx::testing::kPjrtSuite)) out.emplace_back(&c, t);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(OpCases, PjrtOpTest, ::testing::ValuesIn(pjrt_cases()),
                         [](const auto& info) {
                           return rlx::testing::test_name(
                               info.param.first->name + "@" +
                               std::string(dtype_name(info.param.second)));
                         });

TEST(PjrtOps, CompositesAreDecomposed) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g("composites");
  Value x = g.input("x", DType::f32, Shape{2, 4, 6});
  Value s = g.param("s", DType::f32, Shape{6});
  Value b = g.param("b", DType::f32, Shape{6});
  Value w = g.param("w", DType::f32, Shape{6, 6});
  Value h = g.layer_norm(g.gelu(g.matmul(x, w)), s, b);
  g.set_outputs({g.softmax(h, -1), g.log_softmax(h, 1), g.silu(h), g.relu(h), g.rms_norm(h, s),
                 g.gelu_tanh(h), g.squeeze(g.expand_dims(h, {0}), {0})});
  expect_matches_reference(g, make_feeds(g, 3), kF32LayerTol);
}

TEST(PjrtOps, AttentionWithCausalMaskIsDecomposed) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g("attention");
  Value q = g.input("q", DType::f32, Shape{1, 2, 5, 4});
  Value k = g.input("k", DType::f32, Shape{1, 2, 5, 4});
  Value v = g.input("v", DType::f32, Shape{1, 2, 5, 4});
  Graph::AttentionOptions opts;
  opts.mask = "causal";
  g.set_outputs({g.attention(q, k, v, opts)});
  expect_matches_reference(g, make_feeds(g, 5), kF32LayerTol);
}

// A BERT-style encoder layer (rlx/models/encoder_block.h) under both precision policies.
TEST(PjrtEncoder, MatchesReferenceUnderF32AndBf16) {
  RLX_REQUIRE_PJRT_PLUGIN();
  models::EncoderBlockConfig cfg;  // batch 2, seq 16, hidden 64, 4 heads, ffn 256
  Graph g = models::build_encoder_block(cfg);
  TensorMap feeds = models::encoder_block_feeds(g, 11);
  std::vector<Tensor> want = evaluate(g, feeds);
  for (PrecisionMode mode : {PrecisionMode::AlwaysF32, PrecisionMode::AutoMixedBf16}) {
    CompileOptions o;
    o.precision = PrecisionPolicy{mode, {}};
    std::unique_ptr<Executable> exe = test_backend()->compile(g, o, Device{DeviceKind::Pjrt, 0});
    TensorMap inputs;
    for (int32_t id : g.params()) exe->set_param(g.node(id).name, feeds.at(g.node(id).name));
    for (int32_t id : g.inputs()) inputs.emplace(g.node(id).name, feeds.at(g.node(id).name));
    std::vector<Tensor> got = exe->run(inputs);
    double err = 0;
    Tolerance tol = mode == PrecisionMode::AlwaysF32 ? kF32LayerTol : kBf16LayerTol;
    EXPECT_TRUE(all_close(got[0], want[0], tol, &err)) << precision_mode_name(mode);
    std::cout << "[ encoder ] " << precision_mode_name(mode) << " max |err| = " << err << "\n";
  }
}

// The default policy is AutoMixedBf16: the compiled graph's matmuls run in bf16.
TEST(PjrtEncoder, DefaultPrecisionIsAutoMixedBf16) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (const char* env = std::getenv("RLX_PRECISION"); env != nullptr && *env != '\0')
    GTEST_SKIP() << "RLX_PRECISION is set";
  Graph g("mm");
  g.set_outputs(
      {g.matmul(g.input("x", DType::f32, Shape{4, 8}), g.param("w", DType::f32, Shape{8, 3}))});
  std::unique_ptr<Executable> exe =
      test_backend()->compile(g, CompileOptions{}, Device{DeviceKind::Pjrt, 0});
  bool has_bf16 = false;
  for (const Node& n : exe->compiled_graph().nodes())
    has_bf16 = has_bf16 || (n.op == OpKind::Convert && n.results[0].dtype == DType::bf16);
  EXPECT_TRUE(has_bf16) << exe->compiled_graph().to_string();
  EXPECT_NE(exe->kernel_report().find("bf16"), std::string::npos);
}

// The kernel report names the one XLA executable: every computing node of the compiled graph
// is part of it (native, kernel "xla"), and its text is the StableHLO module.
TEST(PjrtRuntime, KernelReportIsTheOneXlaExecutable) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g("rep");
  Value x = g.input("x", DType::f32, Shape{4, 8});
  g.set_outputs({g.tanh(g.matmul(x, g.param("w", DType::f32, Shape{8, 3})))});
  CompileOptions f32;
  f32.precision = parse_precision_policy("always-f32");
  std::unique_ptr<Executable> exe = test_backend()->compile(g, f32, Device{DeviceKind::Pjrt, 0});
  const KernelReport& r = exe->kernels();
  EXPECT_EQ(r.backend, "pjrt");
  const Graph& cg = exe->compiled_graph();
  size_t computing = 0;
  for (const Node& n : cg.nodes())
    computing += n.op != OpKind::Input && n.op != OpKind::Param && n.op != OpKind::Constant;
  EXPECT_EQ(r.nodes.size(), computing);
  for (const KernelReport::Node& n : r.nodes) {
    EXPECT_EQ(n.kernel, "xla");
    EXPECT_TRUE(n.native);
    EXPECT_EQ(n.op, cg.node(n.node).op);
  }
  EXPECT_EQ(r.total(), (KernelCounts{static_cast<int>(computing), 0}));
  EXPECT_EQ(r.count(OpKind::Tanh), (KernelCounts{1, 0}));
  EXPECT_EQ(exe->kernel_report(), r.program);
  EXPECT_EQ(r.program.rfind("pjrt: one XLA executable compiled from StableHLO:\nmodule @rep", 0),
            0u)
      << r.program;
}

// Compiling and running 50 times frees every executable and buffer: the process's resident
// memory stays bounded (a leak of one executable or a buffer per run would grow it steadily).
TEST(PjrtLifetime, RepeatedCompileAndRunDoesNotLeak) {
  RLX_REQUIRE_PJRT_PLUGIN();
  if (rlx::testing::kSanitized) GTEST_SKIP() << "RSS is not meaningful under ASan/TSan";
  auto rss_kib = [] { return rlx::testing::rss_bytes() / 1024; };
  Graph g("loop");
  Value x = g.input("x", DType::f32, Shape{256, 256});
  g.set_outputs({g.tanh(g.matmul(x, g.param("w", DType::f32, Shape{256, 256})))});
  TensorMap feeds = make_feeds(g, 1);
  long after_warmup = 0;
  for (int i = 0; i < 50; ++i) {
    std::unique_ptr<Executable> exe =
        test_backend()->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
    exe->set_param("w", feeds.at("w"));
    for (int r = 0; r < 3; ++r) exe->run({{"x", feeds.at("x")}});
    if (i == 4) after_warmup = rss_kib();
  }
  long growth = rss_kib() - after_warmup;
  // 45 leaked executables plus 135 leaked 256 KiB outputs would be tens of MiB.
  EXPECT_LT(growth, 16 * 1024) << "resident memory grew by " << growth << " KiB";
}

TEST(PjrtExecutable, TypedIoClonesAndErrors) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g("typed");
  Value x = g.input("x", DType::f32, Shape{2, 3});
  g.set_outputs({g.add(x, g.param("b", DType::f32, Shape{3}))});
  std::unique_ptr<Executable> exe =
      test_backend()->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
  EXPECT_THROW(exe->run({{"x", Tensor::full(DType::f32, Shape{2, 3}, 1)}}), Error);  // b unset
  Tensor b = Tensor::from_doubles(DType::bf16, Shape{3}, std::vector<double>{1, 2, 3});
  exe->set_param_typed("b", DType::bf16, Shape{3}, std::span(b.data(), b.nbytes()));
  Tensor xi = Tensor::from_ints(DType::i32, Shape{2, 3}, std::vector<int64_t>{1, 2, 3, 4, 5, 6});
  std::vector<Tensor> y = exe->run_typed({{"x", xi}}, DType::f64);
  ASSERT_EQ(y[0].dtype(), DType::f64);
  EXPECT_EQ(y[0].get_f64(5), 9);
  std::unique_ptr<Executable> c = exe->clone();
  c->set_param("b", Tensor::full(DType::f32, Shape{3}, 0));  // copy on write
  EXPECT_EQ(c->run({{"x", Tensor::full(DType::f32, Shape{2, 3}, 1)}})[0].get_f64(0), 1);
  EXPECT_EQ(exe->run({{"x", Tensor::full(DType::f32, Shape{2, 3}, 1)}})[0].get_f64(0), 2);
  try {
    exe->run({{"x", Tensor::full(DType::f32, Shape{3, 2}, 1)}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected f32[2,3], got f32[3,2]"), std::string::npos)
        << e.what();
  }
}

// At BERT-small size (1x128x384, 12 heads, FFN 1536, f32) the plugin and rlx's CPU backend agree
// (their timing: rlx_bench_pjrt).
TEST(PjrtEncoder, AgreesWithCpuBackendAtBertSize) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g = models::build_encoder_block(models::EncoderBlockConfig::minilm(1));
  TensorMap feeds = models::encoder_block_feeds(g, 2);
  auto run_once = [&](Executable& exe) {
    for (int32_t id : g.params()) exe.set_param(g.node(id).name, feeds.at(g.node(id).name));
    return exe.run({{"x", feeds.at("x")}});
  };
  auto xla = test_backend()->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
  auto cpu = backend_for(DeviceKind::Cpu)->compile(g, f32_options(), Device::cpu());
  EXPECT_TRUE(all_close(run_once(*xla)[0], run_once(*cpu)[0], kF32LayerTol));
}

}  // namespace
}  // namespace rlx::pjrt::testing
