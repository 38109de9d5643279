// f16 / bf16 inputs, params, outputs and state cross the host-device boundary in their own
// dtype (PJRT_Buffer_Type_F16 / BF16 buffers, no f32 widening): every one of the 65536 bit
// patterns (NaN payloads, subnormals, -0, infinities) comes back bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "pjrt_test_util.h"

namespace rlx::pjrt {
namespace {

// Every 16-bit pattern once, as a [256, 256] tensor of `dtype` (f16 or bf16).
Tensor all_patterns(DType dtype) {
  Tensor t(dtype, Shape{256, 256});
  auto* bits = reinterpret_cast<uint16_t*>(t.data());
  for (uint32_t i = 0; i < 65536; ++i) bits[i] = static_cast<uint16_t>(i);
  return t;
}

Tensor transposed(const Tensor& t) {
  Tensor out(t.dtype(), Shape{256, 256});
  const auto* in = reinterpret_cast<const uint16_t*>(t.data());
  auto* o = reinterpret_cast<uint16_t*>(out.data());
  for (int r = 0; r < 256; ++r)
    for (int c = 0; c < 256; ++c) o[c * 256 + r] = in[r * 256 + c];
  return out;
}

::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  if (got.type() != want.type())
    return ::testing::AssertionFailure()
           << got.type().to_string() << " vs " << want.type().to_string();
  const auto* a = reinterpret_cast<const uint16_t*>(got.data());
  const auto* b = reinterpret_cast<const uint16_t*>(want.data());
  for (int64_t i = 0; i < got.numel(); ++i)
    if (a[i] != b[i])
      return ::testing::AssertionFailure()
             << "element " << i << ": 0x" << std::hex << a[i] << " vs 0x" << b[i];
  return ::testing::AssertionSuccess();
}

class PjrtHalfTransfer : public ::testing::TestWithParam<DType> {};

// Input -> transpose -> output, param -> output, state kept on the device: all in the half
// dtype, under the backend's default policy (AutoMixedBf16) and AlwaysF32.
TEST_P(PjrtHalfTransfer, RoundTripsEveryBitPattern) {
  RLX_REQUIRE_PJRT_PLUGIN();
  const DType dt = GetParam();
  const std::string name(dtype_name(dt));
  Graph g("half_io");
  Value x = g.input("x", dt, Shape{256, 256});
  Value w = g.param("w", dt, Shape{256, 256});
  Value s = g.input("s", dt, Shape{256, 256});
  Value next = g.transpose(s, {1, 0});
  g.rename(next.node, "next");
  g.set_outputs({g.transpose(x, {1, 0}), g.transpose(g.transpose(w, {1, 0}), {1, 0}), next});
  const Tensor data = all_patterns(dt);
  for (bool f32 : {false, true}) {
    SCOPED_TRACE(name + (f32 ? " always-f32" : " default policy"));
    CompileOptions o = f32 ? testing::f32_options() : CompileOptions{};
    o.state = {{"s", "next"}};
    std::unique_ptr<Executable> exe =
        testing::test_backend()->compile(g, o, Device::parse("pjrt:0"));
    // The compiled function takes and returns the half dtype itself.
    const std::string module = exe->kernels().program;
    const std::string ty = "tensor<256x256x" + name + ">";
    EXPECT_NE(module.find("%arg0: " + ty), std::string::npos) << module;
    EXPECT_NE(module.find("-> (" + ty + ", " + ty + ", " + ty), std::string::npos) << module;
    exe->set_param("w", data);
    exe->set_state("s", data);
    std::vector<Tensor> out = exe->run({{"x", data}});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_TRUE(same_bits(out[0], transposed(data)));
    EXPECT_TRUE(same_bits(out[1], data));
    EXPECT_TRUE(same_bits(exe->get_state("s"), transposed(data)));
    exe->run({{"x", data}});
    EXPECT_TRUE(same_bits(exe->get_state("s"), data));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PjrtHalfTransfer, ::testing::Values(DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace rlx::pjrt
