// CompileOptions::quantized_params on the CPU backend: the packed param specs, set_param with
// the declared f32 data (packed at bind), with packed bytes (zero copy) and with converted
// typed bytes, the fused quant_matmul kernel against the reference evaluator (within the int8
// activation rounding) and the decomposition (tightly), the planned memory, the errors, and
// the Session cache keying on the bindings.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "common/quantized_mlp.h"
#include "common/test_util.h"
#include "rlx/runtime/memory_limit.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

using testing::error_of;
using testing::packed_feeds;
using testing::quantized_mlp;
using testing::quantized_mlp_bindings;
using testing::quantized_mlp_feeds;
using testing::quantized_mlp_reference;

CompileOptions quantized_options(KernelDispatch quant_matmul = KernelDispatch::PreferNative) {
  CompileOptions o;
  o.quantized_params = quantized_mlp_bindings();
  o.dispatch = DispatchOptions{KernelDispatch::PreferNative, {{OpKind::QuantMatMul, quant_matmul}}};
  return o;
}

// ||got - want|| / ||want||: the fused kernel rounds each 32-element block of x to int8 (an
// error of up to max|x_b| / 254 per element, src/backends/cpu/kernels/quant_matmul.h), which
// over two layers is about 0.7 % of the output's norm here; the exact paths give ~1e-7.
double relative_error(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double d = got.get_f64(i) - want.get_f64(i);
    num += d * d;
    den += want.get_f64(i) * want.get_f64(i);
  }
  return std::sqrt(num / den);
}
constexpr double kInt8Activations = 1.5e-2;

std::vector<Tensor> run_with(Executable& exe, const TensorMap& feeds) {
  for (const IoSpec& p : exe.params()) exe.set_param(p.name, feeds.at(p.name));
  return exe.run({{"x", feeds.at("x")}});
}

TEST(CpuQuantizedParams, SpecsArePackedAndBothBindingsRun) {
  Session session(Device::cpu(), SessionOptions{.cache_capacity = 0});
  auto exe = session.compile(quantized_mlp(), quantized_options());
  ASSERT_EQ(exe->params().size(), 3u);
  const IoSpec& w1 = exe->params()[0];
  EXPECT_EQ(w1.name, "w1");
  EXPECT_EQ(w1.type.to_string(), "u8[96,68]");  // 96 rows of 64 elements: 2 q8_0 blocks
  ASSERT_TRUE(w1.quantized.has_value());
  EXPECT_EQ(w1.quantized->declared.to_string(), "f32[64,96]");
  EXPECT_EQ(w1.quantized->binding, (QuantizedParamBinding{QuantFormat::kQ8_0, 0}));
  EXPECT_EQ(exe->params()[1].type.to_string(), "f32[96]");
  EXPECT_FALSE(exe->params()[1].quantized.has_value());
  EXPECT_EQ(exe->params()[2].type.to_string(), "u8[32,54]");  // 3 q4_0 blocks per row
  // Both matmuls read their weight packed, through the fused kernel.
  EXPECT_EQ(exe->kernels().counts()[OpKind::QuantMatMul].native, 2);
  EXPECT_EQ(exe->kernels().counts()[OpKind::Dequantize].native, 0);

  const TensorMap feeds = quantized_mlp_feeds();
  const std::vector<Tensor> want = quantized_mlp_reference();
  std::vector<Tensor> from_f32 = run_with(*exe, feeds);
  const double err = relative_error(from_f32[0], want[0]);
  std::printf("fused quant_matmul vs reference: relative error %.2e\n", err);
  EXPECT_LT(err, kInt8Activations);
  std::vector<Tensor> from_packed = run_with(*exe, packed_feeds(feeds, quantized_mlp_bindings()));
  EXPECT_TRUE(from_packed[0].bitwise_equal(from_f32[0]));

  // Typed bytes of the declared shape (bf16 here) are converted, then packed: the same as
  // binding their f32 values.
  Tensor w2_bf16(DType::bf16, Shape{32, 96}), w2_rounded(DType::f32, Shape{32, 96});
  for (int64_t i = 0; i < w2_bf16.numel(); ++i) {
    w2_bf16.set_f64(i, feeds.at("w2").get_f64(i));
    w2_rounded.set_f64(i, w2_bf16.get_f64(i));
  }
  exe->set_param_typed("w2", DType::bf16, Shape{32, 96},
                       std::span<const std::byte>(w2_bf16.data(), w2_bf16.nbytes()));
  Tensor from_bf16 = exe->run({{"x", feeds.at("x")}})[0];
  exe->set_param("w2", w2_rounded);
  EXPECT_TRUE(exe->run({{"x", feeds.at("x")}})[0].bitwise_equal(from_bf16));

  // The planned params are the packed bytes: 96 * 68 + 96 * 4 + 32 * 54.
  PlannedMemory pm =
      planned_memory(exe->compiled_graph(), exe->memory_plan(), exe->params(), exe->outputs());
  EXPECT_EQ(pm.params, 96 * 68 + 96 * 4 + 32 * 54);
}

TEST(CpuQuantizedParams, DecomposedEqualsTheReference) {
  Session session(Device::cpu(), SessionOptions{.cache_capacity = 0});
  auto exe = session.compile(quantized_mlp(), quantized_options(KernelDispatch::ForceCommon));
  EXPECT_EQ(exe->kernels().counts()[OpKind::QuantMatMul].native, 0);
  std::vector<Tensor> got = run_with(*exe, quantized_mlp_feeds());
  EXPECT_LT(relative_error(got[0], quantized_mlp_reference()[0]), 1e-6);
}

TEST(CpuQuantizedParams, Errors) {
  Session session(Device::cpu(), SessionOptions{.cache_capacity = 0});
  auto exe = session.compile(quantized_mlp(), quantized_options());
  TensorMap feeds = quantized_mlp_feeds();
  exe->set_param("w1", feeds.at("w1"));
  Tensor f16(DType::f16, Shape{64, 96});
  EXPECT_EQ(error_of([&] { exe->set_param("w1", f16); }),
            "set_param 'w1': expected u8[96,68] (q8_0 packed) or f32[64,96], got f16[64,96]");
  Tensor bad = feeds.at("w1").clone();
  bad.set_f64(5, std::numeric_limits<double>::infinity());
  EXPECT_EQ(error_of([&] { exe->set_param("w1", bad); }),
            "quantized param 'w1': element 5 is inf; q8_0 blocks store only finite values");
  // The earlier binding is kept.
  exe->set_param("b1", feeds.at("b1"));
  exe->set_param("w2", feeds.at("w2"));
  EXPECT_LT(relative_error(exe->run({{"x", feeds.at("x")}})[0], quantized_mlp_reference()[0]),
            kInt8Activations);

  CompileOptions k_quant;
  k_quant.quantized_params["w2"] = {QuantFormat::kQ4_K, -1};
  EXPECT_EQ(error_of([&] { session.compile(quantized_mlp(), k_quant); }),
            "quantized param 'w2' (f32[32,96] as q4_K): axis 1 has 96 elements, not a multiple of "
            "the block size 256");
}

TEST(CpuQuantizedParams, BindingsArePartOfTheCacheKey) {
  CompileOptions a = quantized_options(), b = a;
  b.quantized_params["w2"].format = QuantFormat::kQ8_0;
  EXPECT_NE(a.cache_key(), b.cache_key());
  EXPECT_NE(a.cache_key(), CompileOptions{}.cache_key());
  Session session(Device::cpu());
  session.compile(quantized_mlp(), a);
  auto e2 = session.compile(quantized_mlp(), b);
  session.compile(quantized_mlp(), a);
  EXPECT_EQ(session.cache_stats().misses, 2);
  EXPECT_EQ(session.cache_stats().hits, 1);
  EXPECT_EQ(e2->params()[2].type.to_string(), "u8[32,102]");
}

}  // namespace
}  // namespace rlx
