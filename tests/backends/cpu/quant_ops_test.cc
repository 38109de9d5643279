// The quantized-weight ops on the CPU backend: quant_matmul natively (the fused int8 kernel)
// and through its decomposition (dequantize + dot_general), both against a double-precision
// product of gguf-py's dequantized values (tests/ir/quant_ref.json) for every format, M in
// {1, 5, 64} and batch dims; dequantize bit-equal to the evaluator; packed weights bound with
// Executable::set_param; and the planned memory of a 4096 x 4096 q4_0 weight: its packed bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/quant_ref.h"
#include "common/test_util.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"
#include "rlx/ir/quant.h"
#include "rlx/runtime/backend_core.h"
#include "rlx/runtime/memory_limit.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

using testing::error_of;
using testing::from_hex;
using testing::quant_ref;

constexpr double kEps = 0x1p-24;  // f32 unit roundoff

Tensor u8_tensor(const uint8_t* bytes, Shape shape) {
  Tensor t(DType::u8, std::move(shape));
  std::memcpy(t.data(), bytes, t.nbytes());
  return t;
}

// N weight rows of one format built from the reference blocks (row j: the blocks rotated by j
// and repeated to K elements), with gguf-py's values for the same layout.
struct Weights {
  QuantFormat f;
  int64_t K, N, rb;
  std::vector<uint8_t> packed;
  std::vector<double> values;  // [N, K], from gguf-py
};

Weights weights(const nlohmann::json& c, int64_t N) {
  const QuantFormat f = quant_format_from_ggml_type(c["ggml_type"]);
  const QuantFormatInfo& info = quant_format_info(f);
  const std::vector<uint8_t> bytes = from_hex(c["bytes_hex"]);
  const std::vector<uint8_t> want = from_hex(c["expected_f32_hex"]);
  const int64_t nb_ref = int64_t(c["n"]) / info.block_size, bs = info.block_size;
  const int64_t nb = std::max<int64_t>(nb_ref, 256 / bs), K = nb * bs;  // K >= 256
  Weights w{f, K, N, nb * info.bytes_per_block, {}, {}};
  w.packed.resize(static_cast<size_t>(N * w.rb));
  w.values.resize(static_cast<size_t>(N * K));
  for (int64_t j = 0; j < N; ++j)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t src = (b + j) % nb_ref;
      std::memcpy(&w.packed[static_cast<size_t>(j * w.rb + b * info.bytes_per_block)],
                  &bytes[static_cast<size_t>(src * info.bytes_per_block)],
                  static_cast<size_t>(info.bytes_per_block));
      for (int64_t e = 0; e < bs; ++e) {
        float v;
        std::memcpy(&v, want.data() + 4 * (src * bs + e), 4);
        w.values[static_cast<size_t>(j * K + b * bs + e)] = v;
      }
    }
  return w;
}

bool is_float_format(QuantFormat f) {
  return f == QuantFormat::kF32 || f == QuantFormat::kF16 || f == QuantFormat::kBF16;
}

// sum_k |x_mk| |w_nk|.
double abs_dot(const std::vector<float>& x, const Weights& w, int64_t m, int64_t n) {
  double s = 0;
  for (int64_t k = 0; k < w.K; ++k)
    s += std::fabs(double(x[static_cast<size_t>(m * w.K + k)])) *
         std::fabs(w.values[static_cast<size_t>(n * w.K + k)]);
  return s;
}

// The bound of tests/backends/cpu/quant_matmul_test.cc: int8 rounding of each 32-block of x,
// sum_b max|x_b| / 254 * sum_b |w|, plus (K / 8 + 16) roundoffs of sum |x||w| (f32 sums).
double bound(const std::vector<float>& x, const Weights& w, int64_t m, int64_t n, bool int8) {
  double act = 0, abs_sum = 0;
  for (int64_t b = 0; b < w.K / 32; ++b) {
    double amax = 0, wsum = 0;
    for (int64_t k = 32 * b; k < 32 * b + 32; ++k) {
      const double xv = x[static_cast<size_t>(m * w.K + k)];
      const double wv = w.values[static_cast<size_t>(n * w.K + k)];
      amax = std::max(amax, std::fabs(xv));
      wsum += std::fabs(wv);
      abs_sum += std::fabs(xv) * std::fabs(wv);
    }
    act += amax / 254.0 * wsum * (1 + 1e-4);
  }
  return (int8 ? act : 0.0) + double(w.K / 8 + 16) * kEps * (abs_sum + act) + 1e-30;
}

std::shared_ptr<Executable> compile(const Graph& g, KernelDispatch policy) {
  static Session session(Device::cpu(), SessionOptions{.cache_capacity = 0});
  CompileOptions o;
  o.dispatch = DispatchOptions{};
  o.dispatch->policy = policy;
  return session.compile(g, o);
}

int count_op(const Graph& g, OpKind op) {
  return static_cast<int>(std::count_if(g.nodes().begin(), g.nodes().end(),
                                        [op](const Node& n) { return n.op == op; }));
}

TEST(CpuQuantOps, QuantMatmulNativeAndDecomposedMatchDoubleReference) {
  for (const auto& c : quant_ref()["dequantize"]) {
    const Weights w = weights(c, 24);
    const std::string name(quant_format_info(w.f).name);
    for (const Shape& xs : {Shape{1, w.K}, Shape{5, w.K}, Shape{64, w.K}, Shape{2, 3, w.K}}) {
      SCOPED_TRACE(name + " x " + xs.to_string());
      Graph g("qmm");
      Value x = g.input("x", DType::f32, xs);
      Value wv = g.param("w", DType::u8, {w.N, w.rb});
      g.set_outputs({g.quant_matmul(x, wv, w.f)});
      Tensor xt(DType::f32, xs);
      std::vector<float> xf(static_cast<size_t>(xt.numel()));
      for (int64_t i = 0; i < xt.numel(); ++i) {
        xf[static_cast<size_t>(i)] = static_cast<float>(std::sin(0.731 * double(i)) * (1 + i % 5));
        xt.set_f64(i, xf[static_cast<size_t>(i)]);
      }
      const int64_t M = xt.numel() / w.K;
      for (KernelDispatch policy : {KernelDispatch::PreferNative, KernelDispatch::ForceCommon}) {
        const bool native = policy == KernelDispatch::PreferNative;
        SCOPED_TRACE(native ? "native" : "decomposed");
        auto exe = compile(g, policy);
        EXPECT_EQ(count_op(exe->compiled_graph(), OpKind::QuantMatMul), native ? 1 : 0);
        EXPECT_EQ(count_op(exe->compiled_graph(), OpKind::Dequantize), native ? 0 : 1);
        exe->set_param("w", u8_tensor(w.packed.data(), {w.N, w.rb}));
        const Tensor y = exe->run({{"x", xt}})[0];
        int bad = 0;
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < w.N; ++n) {
            double s = 0;
            for (int64_t k = 0; k < w.K; ++k)
              s += double(xf[static_cast<size_t>(m * w.K + k)]) *
                   w.values[static_cast<size_t>(n * w.K + k)];
            // The decomposed path is an f32 GEMM: K roundoffs of sum |x||w| bound it.
            const double tol = native ? bound(xf, w, m, n, !is_float_format(w.f))
                                      : double(w.K) * kEps * abs_dot(xf, w, m, n) + 1e-30;
            const double err = std::fabs(y.get_f64(m * w.N + n) - s);
            if (!(err <= tol) && bad++ < 3)
              ADD_FAILURE() << "y[" << m << "," << n << "] = " << y.get_f64(m * w.N + n)
                            << ", reference " << s << ", error " << err << " > " << tol;
          }
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

TEST(CpuQuantOps, DequantizeBitEqualToEvaluator) {
  for (const auto& c : quant_ref()["dequantize"]) {
    const Weights w = weights(c, 9);
    SCOPED_TRACE(std::string(quant_format_info(w.f).name));
    Graph g("deq");
    Value wv = g.input("w", DType::u8, {3, 3, w.rb});
    g.set_outputs({g.dequantize(wv, w.f, w.K)});
    const TensorMap feeds{{"w", u8_tensor(w.packed.data(), {3, 3, w.rb})}};
    auto exe = compile(g, KernelDispatch::PreferNative);
    ASSERT_EQ(exe->kernels().nodes.size(), 1u);
    EXPECT_TRUE(exe->kernels().nodes[0].native);
    const Tensor got = exe->run(feeds)[0];
    EXPECT_TRUE(got.bitwise_equal(evaluate(g, feeds)[0]));
  }
}

TEST(CpuQuantOps, PackedParamThroughSetParam) {
  const Weights w = weights(quant_ref()["dequantize"][7], 16);  // q8_0
  ASSERT_EQ(w.f, QuantFormat::kQ8_0);
  Graph g("linear");
  Value x = g.input("x", DType::f32, {3, w.K});
  Value wv = g.param("w", DType::u8, {w.N, w.rb});
  g.set_outputs({g.quant_matmul(x, wv, w.f)});
  auto exe = compile(g, KernelDispatch::PreferNative);
  Tensor xt = Tensor::full(DType::f32, {3, w.K}, 0.5);
  Tensor packed = u8_tensor(w.packed.data(), {w.N, w.rb});
  exe->set_param("w", packed);
  const Tensor y1 = exe->run({{"x", xt}})[0];
  const Tensor want = evaluate(g, {{"x", xt}, {"w", packed}})[0];
  for (int64_t i = 0; i < want.numel(); ++i)  // x = 0.5 rounds to int8 exactly
    EXPECT_NEAR(y1.get_f64(i), want.get_f64(i), 1e-5 * std::fabs(want.get_f64(i)) + 1e-6) << i;
  // Zero copy: rewriting the bound bytes (row 0 := row 1) changes the next run.
  std::memcpy(packed.data(), packed.data() + w.rb, static_cast<size_t>(w.rb));
  const Tensor y2 = exe->run({{"x", xt}})[0];
  EXPECT_EQ(y2.get_f64(0), y2.get_f64(1));
  EXPECT_NE(y1.get_f64(0), y2.get_f64(0));
  // The expanded f32 weight is not a packed param.
  EXPECT_EQ(error_of([&] {
              exe->set_param("w", Tensor(DType::f32, Shape{w.N, w.K}));
            }),
            "set_param 'w': expected u8[16," + std::to_string(w.rb) + "], got f32[16," +
                std::to_string(w.K) + "]");
  EXPECT_EQ(error_of([&] {
              exe->set_param("w", Tensor(DType::u8, Shape{w.N, w.rb - 1}));
            }),
            "set_param 'w': expected u8[16," + std::to_string(w.rb) + "], got u8[16," +
                std::to_string(w.rb - 1) + "]");
}

// A 4096 x 4096 q4_0 weight: the executable's params are its 4096 * 2304 packed bytes (not 4
// bytes per element), the compiled graph keeps quant_matmul (no dequantize, no f32 copy), and
// a memory limit the f32 weight alone would exceed still compiles.
TEST(CpuQuantOps, PlannedParamBytesArePackedBytes) {
  const int64_t N = 4096, K = 4096, rb = quant_row_bytes(QuantFormat::kQ4_0, K);
  ASSERT_EQ(rb, 2304);
  Graph g("big");
  Value x = g.input("x", DType::f32, {1, K});
  Value w = g.param("w", DType::u8, {N, rb});
  g.set_outputs({g.quant_matmul(x, w, QuantFormat::kQ4_0)});
  CompileOptions o;
  o.memory_limit = N * K * 4 - 1;  // below the f32 weight alone
  Session session(Device::cpu(), SessionOptions{.cache_capacity = 0});
  auto exe = session.compile(g, o);
  const IoSpecs specs = io_specs_of(g);
  const PlannedMemory pm =
      planned_memory(exe->compiled_graph(), exe->memory_plan(), specs.params, specs.outputs);
  EXPECT_EQ(pm.params, N * rb);
  EXPECT_EQ(pm.constants, 0);
  EXPECT_LT(pm.arena, 1 << 20);
  EXPECT_LT(pm.total(), N * rb + (1 << 20));
  EXPECT_EQ(count_op(exe->compiled_graph(), OpKind::QuantMatMul), 1);
  EXPECT_EQ(count_op(exe->compiled_graph(), OpKind::Dequantize), 0);
  // The same weight as f32 is refused by that limit.
  Graph f("f32");
  Value xf = f.input("x", DType::f32, {1, K});
  f.set_outputs({f.matmul(xf, f.param("w", DType::f32, {K, N}))});
  EXPECT_NE(error_of([&] { session.compile(f, o); }).find("exceeds the limit"), std::string::npos);
}

}  // namespace
}  // namespace rlx
