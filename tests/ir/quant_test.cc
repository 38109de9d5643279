// ggml block formats (rlx/ir/quant.h): the table against ggml's sizes, the dequantizers bit for
// bit and the simple quantizers byte for byte against gguf-py (quant_ref.json, written by
// gen_quant_ref.py), the K-quant quantizers against llama.cpp's test-quantize-fns criterion, and
// every error message.
#include "rlx/ir/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../common/quant_ref.h"
#include "../common/test_util.h"
#include "rlx/ir/error.h"

namespace rlx {
namespace {

using testing::bits_of;
using testing::error_of;
using testing::floats_from_hex;
using testing::from_hex;
using testing::quant_ref;

TEST(QuantFormats, TableMatchesGgml) {
  // (ggml type id, block size, bytes per block) as ggml-common.h's block structs give them.
  struct Row {
    QuantFormat f;
    const char* name;
    int id;
    int64_t bs, bytes;
  };
  const Row rows[] = {
      {QuantFormat::kF32, "f32", 0, 1, 4},        {QuantFormat::kF16, "f16", 1, 1, 2},
      {QuantFormat::kQ4_0, "q4_0", 2, 32, 18},    {QuantFormat::kQ4_1, "q4_1", 3, 32, 20},
      {QuantFormat::kQ5_0, "q5_0", 6, 32, 22},    {QuantFormat::kQ5_1, "q5_1", 7, 32, 24},
      {QuantFormat::kQ8_0, "q8_0", 8, 32, 34},    {QuantFormat::kQ2_K, "q2_K", 10, 256, 84},
      {QuantFormat::kQ3_K, "q3_K", 11, 256, 110}, {QuantFormat::kQ4_K, "q4_K", 12, 256, 144},
      {QuantFormat::kQ5_K, "q5_K", 13, 256, 176}, {QuantFormat::kQ6_K, "q6_K", 14, 256, 210},
      {QuantFormat::kQ8_K, "q8_K", 15, 256, 292}, {QuantFormat::kIQ4_NL, "iq4_nl", 20, 32, 18},
      {QuantFormat::kBF16, "bf16", 30, 1, 2},
  };
  ASSERT_EQ(quant_formats().size(), std::size(rows));
  for (const Row& r : rows) {
    const QuantFormatInfo& i = quant_format_info(r.f);
    EXPECT_EQ(i.name, r.name);
    EXPECT_EQ(i.ggml_type, r.id);
    EXPECT_EQ(int(r.f), r.id);
    EXPECT_EQ(i.block_size, r.bs) << r.name;
    EXPECT_EQ(i.bytes_per_block, r.bytes) << r.name;
    EXPECT_EQ(quant_format_from_ggml_type(r.id), r.f);
    EXPECT_EQ(quant_format_from_name(r.name), r.f);
    EXPECT_EQ(quant_row_bytes(r.f, r.bs * 3), r.bytes * 3);
  }
  EXPECT_EQ(quant_format_from_name("Q4_K"), QuantFormat::kQ4_K);
}

TEST(QuantFormats, Errors) {
  EXPECT_EQ(error_of([] { quant_format_from_ggml_type(9); }).substr(0, 60),
            "ggml type id 9 is not a supported format; supported: 0 (f32)");
  EXPECT_NE(error_of([] {
              quant_format_from_name("q9_0");
            }).find("unknown quantization format 'q9_0'; known: f32, f16, q4_0"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              quant_format_info(QuantFormat(99));
            }).find("unknown quantization format (ggml type id 99)"),
            std::string::npos);
  EXPECT_EQ(error_of([] { quant_row_bytes(QuantFormat::kQ4_K, 100); }),
            "q4_K: a row of 100 elements is not a multiple of the block size 256");
  EXPECT_EQ(error_of([] { quant_row_bytes(QuantFormat::kQ8_0, -32); }),
            "q8_0: a row of -32 elements is not a multiple of the block size 32");
  std::vector<uint8_t> bytes(17);
  std::vector<float> out(32);
  EXPECT_EQ(error_of([&] { dequantize(QuantFormat::kQ4_0, bytes, out); }),
            "q4_0: dequantizing 32 elements needs 18 bytes, got 17");
  EXPECT_EQ(error_of([&] { quantize(QuantFormat::kQ4_0, out, bytes); }),
            "q4_0: quantizing 32 elements needs 18 bytes of output, got 17");
  EXPECT_EQ(error_of([&] { dequantize_row(QuantFormat::kQ6_K, bytes.data(), out.data(), 32); }),
            "q6_K: a row of 32 elements is not a multiple of the block size 256");
  std::vector<uint8_t> iq(18);
  EXPECT_EQ(error_of([&] { quantize(QuantFormat::kIQ4_NL, out, iq); }),
            "iq4_nl: quantization is not implemented (the format is dequantize-only)");
}

// Every format's dequantizer equals gguf-py's numpy dequantizer bit for bit (Q8_K: numpy's
// d * q, gguf-py has none) on crafted random blocks.
TEST(QuantFormats, DequantizeBitExactAgainstGgufPy) {
  int formats = 0;
  for (const auto& c : quant_ref()["dequantize"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const QuantFormat f = quant_format_from_ggml_type(c["ggml_type"]);
    const int64_t n = c["n"];
    std::vector<uint8_t> bytes = from_hex(c["bytes_hex"]);
    std::vector<float> want = floats_from_hex(c["expected_f32_hex"]);
    ASSERT_EQ(int64_t(want.size()), n);
    std::vector<float> got(static_cast<size_t>(n));
    dequantize(f, bytes, got);
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (bits_of(got[i]) != bits_of(want[i]) && bad++ < 5)
        ADD_FAILURE() << "elem " << i << ": got " << got[i] << " want " << want[i];
    }
    EXPECT_EQ(bad, 0);
    ++formats;
  }
  EXPECT_EQ(formats, int(quant_formats().size()));  // every format has reference data
}

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16 and BF16 quantizers equal gguf-py's numpy quantizers byte
// for byte on random rows (including an all-zero and a constant block).
TEST(QuantFormats, QuantizeByteExactAgainstGgufPy) {
  int rows = 0;
  for (const auto& c : quant_ref()["quantize"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name + " row " + std::to_string(rows));
    const QuantFormat f = quant_format_from_ggml_type(c["ggml_type"]);
    std::vector<float> x = floats_from_hex(c["input_f32_hex"]);
    std::vector<uint8_t> want = from_hex(c["expected_hex"]);
    std::vector<uint8_t> got(static_cast<size_t>(quant_row_bytes(f, int64_t(x.size()))));
    quantize(f, x, got);
    ASSERT_EQ(got.size(), want.size());
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want[i] && bad++ < 5)
        ADD_FAILURE() << "byte " << i << ": got " << int(got[i]) << " want " << int(want[i]);
    EXPECT_EQ(bad, 0);
    ++rows;
  }
  EXPECT_EQ(rows, 28);
}

// llama.cpp's tests/test-quantize-fns.cpp criterion: on 0.1 + 2 cos(i + offset), the
// quantize -> dequantize round trip has sqrt(sum of squared errors) / n below 0.002 (0.004
// for 3-bit, 0.0075 for 2-bit formats).
TEST(QuantFormats, RoundTripErrorAsLlamaCppTest) {
  const int64_t n = 32 * 128;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = 0.1f + 2 * std::cos(float(i) + 0.0f);
  for (const QuantFormatInfo& info : quant_formats()) {
    if (!info.has_quantizer) continue;
    SCOPED_TRACE(std::string(info.name));
    std::vector<uint8_t> q(static_cast<size_t>(quant_row_bytes(info.format, n)));
    std::vector<float> y(static_cast<size_t>(n));
    quantize_row(info.format, x.data(), q.data(), n);
    dequantize_row(info.format, q.data(), y.data(), n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i)
      sum += double(x[size_t(i)] - y[size_t(i)]) * (x[size_t(i)] - y[size_t(i)]);
    const double err = std::sqrt(sum) / double(n);
    const double limit = info.format == QuantFormat::kQ2_K   ? 0.0075
                         : info.format == QuantFormat::kQ3_K ? 0.0040
                                                             : 0.002;
    EXPECT_LT(err, limit);
  }
}

// Every K-quant element reconstructs within one step of its super-block (2 max|x| / levels
// over the 256 elements): the levels are nearest-rounded against the stored scales, so a larger
// error means a packing or scale-decoding bug. Random Gaussian rows.
TEST(QuantFormats, KQuantsReconstructWithinOneStep) {
  const int64_t n = 256 * 8;
  std::vector<float> x(static_cast<size_t>(n));
  uint64_t s = 12345;
  auto uniform = [&] {  // 64-bit LCG
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (double(s >> 11) + 0.5) / 9007199254740992.0;
  };
  for (auto& v : x)
    v = float(std::sqrt(-2 * std::log(uniform())) * std::cos(6.283185307 * uniform()));
  // (format, number of levels - 1)
  const std::pair<QuantFormat, int> cases[] = {{QuantFormat::kQ2_K, 3},  {QuantFormat::kQ3_K, 7},
                                               {QuantFormat::kQ4_K, 15}, {QuantFormat::kQ5_K, 31},
                                               {QuantFormat::kQ6_K, 63}, {QuantFormat::kQ8_K, 254}};
  for (auto [f, levels] : cases) {
    SCOPED_TRACE(std::string(quant_format_info(f).name));
    std::vector<uint8_t> q(static_cast<size_t>(quant_row_bytes(f, n)));
    std::vector<float> y(static_cast<size_t>(n));
    quantize_row(f, x.data(), q.data(), n);
    dequantize_row(f, q.data(), y.data(), n);
    double worst = 0;
    for (int64_t b = 0; b < n / 256; ++b) {
      double amax = 0;
      for (int i = 0; i < 256; ++i)
        amax = std::max(amax, double(std::fabs(x[size_t(b * 256 + i)])));
      const double step = 2 * amax / levels;
      for (int i = 0; i < 256; ++i) {
        const size_t k = size_t(b * 256 + i);
        worst = std::max(worst, std::fabs(double(x[k]) - y[k]) / step);
      }
    }
    EXPECT_LT(worst, 1.0);
  }
}

}  // namespace
}  // namespace rlx
