// dequantize and quant_matmul on a real PJRT plugin: every ggml format of rlx/ir/quant.h on
// random packed rows (every byte random, so scales of both signs, every nibble / bit pattern,
// high scale bits set) against the scalar dequantize_row bit for bit, batched (leading dims),
// and quant_matmul against the reference evaluator.
#include "rlx/ir/quant.h"

#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <random>

#include "common/quantized_mlp.h"
#include "pjrt_test_util.h"

namespace rlx::pjrt::testing {
namespace {

Tensor random_bytes(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor t(DType::u8, s);
  auto* p = reinterpret_cast<uint8_t*>(t.data());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = uint8_t(rng());
  return t;
}

class PjrtDequantize : public ::testing::TestWithParam<QuantFormatInfo> {};

// u8[2, 3, R] -> f32[2, 3, k] on pjrt equals dequantize_row of each row bit for bit (NaN
// payloads aside: random f16 scales can be NaN, and any NaN matches any NaN).
TEST_P(PjrtDequantize, EqualsDequantizeRowBitForBit) {
  RLX_REQUIRE_PJRT_PLUGIN();
  const QuantFormatInfo& info = GetParam();
  const int64_t k = 2 * std::max<int64_t>(info.block_size, 32);
  const int64_t r = quant_row_bytes(info.format, k);
  Graph g("deq");
  Value w = g.param("w", DType::u8, Shape{2, 3, r});
  g.set_outputs({g.dequantize(w, info.format, k)});
  Tensor packed = random_bytes(Shape{2, 3, r}, 14 + uint64_t(info.ggml_type));
  std::unique_ptr<Executable> exe =
      test_backend()->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
  exe->set_param("w", packed);
  std::vector<Tensor> got = exe->run({});
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].type().to_string(), "f32[2,3," + std::to_string(k) + "]");
  std::vector<float> want(size_t(6 * k));
  for (int row = 0; row < 6; ++row)
    dequantize_row(info.format, reinterpret_cast<const uint8_t*>(packed.data()) + row * r,
                   want.data() + row * k, k);
  const auto* y = reinterpret_cast<const float*>(got[0].data());
  int mismatches = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    bool same = std::isnan(want[i])
                    ? std::isnan(y[i])
                    : std::bit_cast<uint32_t>(want[i]) == std::bit_cast<uint32_t>(y[i]);
    if (!same && mismatches++ < 5)
      ADD_FAILURE() << info.name << " element " << i << ": pjrt " << y[i] << " vs " << want[i];
  }
  EXPECT_EQ(mismatches, 0) << info.name;
}

INSTANTIATE_TEST_SUITE_P(AllFormats, PjrtDequantize, ::testing::ValuesIn(quant_formats()),
                         [](const auto& p) { return std::string(p.param.name); });

// quant_matmul runs on pjrt through its decomposition (dequantize + dot_general) and equals the
// reference evaluator within f32 tolerance (sums of 256 products: |d| <= 1e-4 + 1e-5 |ref|).
TEST(PjrtQuantMatMul, EqualsEvaluator) {
  RLX_REQUIRE_PJRT_PLUGIN();
  for (QuantFormat f :
       {QuantFormat::kQ8_0, QuantFormat::kQ4_K, QuantFormat::kQ6_K, QuantFormat::kIQ4_NL}) {
    const int64_t n = 8, k = 256, r = quant_row_bytes(f, k);
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<float> real(-1, 1);
    Tensor x(DType::f32, Shape{2, 5, k});
    for (int64_t i = 0; i < x.numel(); ++i) x.set_f64(i, real(rng));
    Tensor packed(DType::u8, Shape{n, r});
    auto* p = reinterpret_cast<uint8_t*>(packed.data());
    if (quant_format_info(f).has_quantizer) {
      std::vector<float> wf(size_t(n * k));
      for (float& v : wf) v = real(rng);
      for (int64_t row = 0; row < n; ++row) quantize_row(f, wf.data() + row * k, p + row * r, k);
    } else {  // IQ4_NL: random nibbles under a finite scale
      packed = random_bytes(Shape{n, r}, 3);
      p = reinterpret_cast<uint8_t*>(packed.data());
      for (int64_t b = 0; b < n * r; b += 18) p[b + 1] = 0x1C;  // f16 in [2^-8, 2^-7)
    }
    Graph g("qmm");
    Value xv = g.input("x", DType::f32, Shape{2, 5, k});
    Value w = g.param("w", DType::u8, Shape{n, r});
    g.set_outputs({g.quant_matmul(xv, w, f)});
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Executable> exe =
        test_backend()->compile(g, f32_options(), Device{DeviceKind::Pjrt, 0});
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::cout << quant_format_info(f).name
              << ": quant_matmul [2,5,256] x [8,256] compiled on pjrt in " << ms << " ms\n";
    exe->set_param("w", packed);
    std::vector<Tensor> got = exe->run({{"x", x}});
    std::vector<Tensor> want = evaluate(g, {{"x", x}, {"w", packed}});
    double err = 0;
    EXPECT_TRUE(all_close(got[0], want[0], Tolerance{1e-4, 1e-5}, &err))
        << quant_format_info(f).name;
  }
}

// CompileOptions::quantized_params on pjrt: the same packed specs as on the CPU, the weights
// bound as f32 (packed at bind) or as packed bytes, the same values as the reference evaluator
// and as the CPU backend's decomposed path.
TEST(PjrtQuantizedParams, EqualReferenceAndCpu) {
  RLX_REQUIRE_PJRT_PLUGIN();
  CompileOptions o = f32_options();
  o.quantized_params = rlx::testing::quantized_mlp_bindings();
  const Graph g = rlx::testing::quantized_mlp();
  std::unique_ptr<Executable> exe = test_backend()->compile(g, o, Device{DeviceKind::Pjrt, 0});
  ASSERT_EQ(exe->params().size(), 3u);
  EXPECT_EQ(exe->params()[0].type.to_string(), "u8[96,68]");
  EXPECT_EQ(exe->params()[2].type.to_string(), "u8[32,54]");
  ASSERT_TRUE(exe->params()[2].quantized.has_value());
  EXPECT_EQ(exe->params()[2].quantized->declared.to_string(), "f32[32,96]");

  const TensorMap feeds = rlx::testing::quantized_mlp_feeds();
  for (const IoSpec& p : exe->params()) exe->set_param(p.name, feeds.at(p.name));
  std::vector<Tensor> got = exe->run({{"x", feeds.at("x")}});
  const std::vector<Tensor> want = rlx::testing::quantized_mlp_reference();
  EXPECT_TRUE(all_close(got[0], want[0], Tolerance{1e-4, 1e-5}));

  const TensorMap packed = rlx::testing::packed_feeds(feeds, o.quantized_params);
  for (const IoSpec& p : exe->params()) exe->set_param(p.name, packed.at(p.name));
  EXPECT_TRUE(exe->run({{"x", feeds.at("x")}})[0].bitwise_equal(got[0]));

  CompileOptions cpu = o;
  cpu.dispatch = DispatchOptions{KernelDispatch::ForceCommon, {}};
  std::unique_ptr<Executable> on_cpu = backend_for(DeviceKind::Cpu)->compile(g, cpu, Device::cpu());
  for (const IoSpec& p : on_cpu->params()) on_cpu->set_param(p.name, feeds.at(p.name));
  EXPECT_TRUE(all_close(got[0], on_cpu->run({{"x", feeds.at("x")}})[0], Tolerance{1e-4, 1e-5}));
}

}  // namespace
}  // namespace rlx::pjrt::testing
