// Quantized param storage (rlx/opt/quantize_params.h): packed types and their errors, the
// packing against quantize_row of hand-gathered rows, and the rewrite against the original
// graph fed the dequantized weights.
#include "rlx/opt/quantize_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "../common/test_util.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/passes.h"

namespace rlx {
namespace {

using testing::error_of;
using testing::random_tensor;

TEST(QuantizedParamType, MovesTheAxisLastAndPacksIt) {
  auto type = [](DType dt, Shape s, QuantFormat f, int64_t axis) {
    return quantized_param_type({dt, std::move(s)}, {f, axis}, "w").to_string();
  };
  EXPECT_EQ(type(DType::f32, {64, 3}, QuantFormat::kQ8_0, 0), "u8[3,68]");
  EXPECT_EQ(type(DType::f32, {3, 64}, QuantFormat::kQ8_0, -1), "u8[3,68]");
  EXPECT_EQ(type(DType::f16, {2, 256, 5}, QuantFormat::kQ4_K, 1), "u8[2,5,144]");
  EXPECT_EQ(type(DType::bf16, {7}, QuantFormat::kF16, 0), "u8[14]");
  EXPECT_EQ(error_of([&] { type(DType::i32, {32}, QuantFormat::kQ8_0, 0); }),
            "quantized param 'w' (i32[32] as q8_0): only float params can be stored quantized");
  EXPECT_EQ(error_of([&] { type(DType::f32, {}, QuantFormat::kQ8_0, 0); }),
            "quantized param 'w' (f32[] as q8_0): a scalar has no axis to quantize along");
  EXPECT_EQ(error_of([&] {
              type(DType::f32, {32, 4}, QuantFormat::kQ8_0, 2);
            }),
            "quantized param 'w' (f32[32,4]): axis 2 is out of range for rank 2");
  EXPECT_EQ(error_of([&] {
              type(DType::f32, {32, 4}, QuantFormat::kQ8_0, -3);
            }),
            "quantized param 'w' (f32[32,4]): axis -3 is out of range for rank 2");
  EXPECT_EQ(error_of([&] {
              type(DType::f32, {32, 100}, QuantFormat::kQ4_K, 1);
            }),
            "quantized param 'w' (f32[32,100] as q4_K): axis 1 has 100 elements, not a multiple "
            "of the block size 256");
}

// Every packed row equals quantize_row of the elements along the axis, gathered by hand.
TEST(PackQuantizedParam, RowsAreTheAxisQuantized) {
  for (QuantFormat f : {QuantFormat::kQ8_0, QuantFormat::kQ4_1, QuantFormat::kQ6_K}) {
    const int64_t k = quant_format_info(f).block_size * 2;
    Tensor w = random_tensor(DType::f32, Shape{2, k, 3}, 5);
    Tensor packed = pack_quantized_param(w, {f, 1}, "w");
    const int64_t r = quant_row_bytes(f, k);
    ASSERT_EQ(packed.type().to_string(), "u8[2,3," + std::to_string(r) + "]");
    std::vector<float> row(static_cast<size_t>(k));
    std::vector<uint8_t> want(static_cast<size_t>(r));
    for (int64_t o = 0; o < 2; ++o) {
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t j = 0; j < k; ++j)
          row[static_cast<size_t>(j)] = w.data_as<float>()[(o * k + j) * 3 + i];
        quantize_row(f, row.data(), want.data(), k);
        const uint8_t* got = packed.data_as<uint8_t>() + (o * 3 + i) * r;
        EXPECT_EQ(std::vector<uint8_t>(got, got + r), want) << quant_format_info(f).name;
      }
    }
  }
  // Non-f32 data are read exactly (bf16 -> f32 is exact), so they pack like their f32 copy.
  Tensor w16 = random_tensor(DType::bf16, Shape{32, 4}, 9);
  Tensor w32(DType::f32, Shape{32, 4});
  for (int64_t i = 0; i < w16.numel(); ++i) w32.set_f64(i, w16.get_f64(i));
  EXPECT_TRUE(pack_quantized_param(w16, {QuantFormat::kQ8_0, 0}, "w")
                  .bitwise_equal(pack_quantized_param(w32, {QuantFormat::kQ8_0, 0}, "w")));
}

TEST(PackQuantizedParam, Errors) {
  Tensor w = random_tensor(DType::f32, Shape{4, 32}, 1);
  w.set_f64(37, std::numeric_limits<double>::quiet_NaN());
  Tensor before = w.clone();
  EXPECT_EQ(error_of([&] {
              pack_quantized_param(w, {QuantFormat::kQ8_0, -1}, "w");
            }),
            "quantized param 'w': element 37 is nan; q8_0 blocks store only finite values");
  EXPECT_TRUE(w.bitwise_equal(before));  // the caller's data are unchanged
  // F16 storage keeps a NaN as it is.
  Tensor packed = pack_quantized_param(w, {QuantFormat::kF16, -1}, "w");
  std::vector<float> row(32);
  dequantize_row(QuantFormat::kF16, packed.data_as<uint8_t>() + 64, row.data(), 32);
  EXPECT_TRUE(std::isnan(row[5]));
  EXPECT_EQ(error_of([&] {
              pack_quantized_param(w, {QuantFormat::kIQ4_NL, -1}, "w");
            }),
            "quantized param 'w': rlx has no iq4_nl quantizer; bind packed u8 data (u8[4,18]) "
            "instead");
  EXPECT_NE(error_of([&] {
              pack_quantized_param(w, {QuantFormat::kQ8_0, 0}, "w");
            }).find("axis 0 has 4 elements, not a multiple of the block size 32"),
            std::string::npos);
}

// x[3, 64] . A[64, 8] (A quantized along its axis 0) + B[8, 32] . C[32] ... as a graph with
// f32, f16 and an untouched param; the rewrite computes what the original graph computes on
// the dequantized weights, exactly (the evaluator's dequantize is dequantize_row).
TEST(QuantizeParams, RewriteEqualsTheGraphOnDequantizedWeights) {
  Graph g("mlp");
  Value x = g.input("x", DType::f32, {3, 64});
  Value a = g.param("a", DType::f32, {64, 8});
  Value b = g.param("b", DType::f16, {8, 32});
  Value bias = g.param("bias", DType::f32, {8});
  Value h = g.add(g.matmul(x, a), bias);
  Value y = g.matmul(g.convert(h, DType::f16), b);
  g.set_outputs({y, h});
  std::map<std::string, QuantizedParamBinding> bindings = {{"a", {QuantFormat::kQ4_0, 0}},
                                                           {"b", {QuantFormat::kQ8_0, -1}}};
  const std::string before = g.to_string();
  Graph q = quantize_params(g, bindings);
  EXPECT_EQ(g.to_string(), before);
  ASSERT_TRUE(q.verify().empty()) << q.verify()[0];
  ASSERT_EQ(q.params().size(), 3u);
  EXPECT_EQ(q.node(q.params()[0]).name, "a");
  EXPECT_EQ(q.node(q.params()[0]).results[0].to_string(), "u8[8,36]");
  EXPECT_EQ(q.node(q.params()[1]).results[0].to_string(), "u8[8,34]");
  EXPECT_EQ(q.node(q.params()[2]).results[0].to_string(), "f32[8]");

  TensorMap feeds{{"x", random_tensor(DType::f32, {3, 64}, 1)},
                  {"bias", random_tensor(DType::f32, {8}, 2)}};
  Tensor a_val = random_tensor(DType::f32, {64, 8}, 3),
         b_val = random_tensor(DType::f16, {8, 32}, 4);
  TensorMap packed = feeds, dequantized = feeds;
  packed["a"] = pack_quantized_param(a_val, bindings["a"], "a");
  packed["b"] = pack_quantized_param(b_val, bindings["b"], "b");
  // The original graph on the weights the packed bytes stand for: dequantize_row of each row,
  // put back in the declared layout (a is stored transposed).
  Tensor a_deq(DType::f32, {64, 8}), b_deq(DType::f16, {8, 32});
  std::vector<float> row(64);
  for (int64_t n = 0; n < 8; ++n) {
    dequantize_row(QuantFormat::kQ4_0, packed["a"].data_as<uint8_t>() + n * 36, row.data(), 64);
    for (int64_t k = 0; k < 64; ++k) a_deq.set_f64(k * 8 + n, row[static_cast<size_t>(k)]);
    dequantize_row(QuantFormat::kQ8_0, packed["b"].data_as<uint8_t>() + n * 34, row.data(), 32);
    for (int64_t k = 0; k < 32; ++k) b_deq.set_f64(n * 32 + k, row[static_cast<size_t>(k)]);
  }
  dequantized["a"] = a_deq;
  dequantized["b"] = b_deq;
  std::vector<Tensor> want = evaluate(g, dequantized), got = evaluate(q, packed);
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(got[i].bitwise_equal(want[i])) << i;
  // And the packed weights are close to the originals (Q4_0: at most one step d = max|w| / 8, where
  // the far end of the range clips).
  for (int64_t i = 0; i < a_val.numel(); ++i)
    EXPECT_NEAR(a_deq.get_f64(i), a_val.get_f64(i), 2.0 / 8 + 1e-6) << i;

  // fuse-quant-matmul then reads `a` packed (b's matmul has f16 x: not fused).
  Graph fused = q;
  EXPECT_TRUE(create_fuse_quant_matmul_pass()->run(fused));
  create_dce_pass()->run(fused);
  int quant_matmuls = 0;
  for (const Node& n : fused.nodes()) quant_matmuls += n.op == OpKind::QuantMatMul;
  EXPECT_EQ(quant_matmuls, 1);
  std::vector<Tensor> got_fused = evaluate(fused, packed);
  EXPECT_TRUE(testing::all_close(got_fused[1], want[1], 2e-5, 1e-5));
}

TEST(QuantizeParams, Errors) {
  Graph g("g");
  Value x = g.input("x", DType::f32, {2, 32});
  Value w = g.param("w", DType::f32, {32, 4});
  Value n = g.param("n", DType::i32, {32});
  g.set_outputs({g.matmul(x, w), n});
  EXPECT_EQ(error_of([&] {
              quantize_params(g, {{"v", {QuantFormat::kQ8_0, 0}}});
            }),
            "quantized_params: graph 'g' has no param 'v' (params: w, n)");
  EXPECT_EQ(error_of([&] {
              quantize_params(g, {{"x", {QuantFormat::kQ8_0, 0}}});
            }),
            "quantized_params: graph 'g' has no param 'x' (params: w, n)");
  EXPECT_EQ(error_of([&] {
              quantize_params(g, {{"n", {QuantFormat::kQ8_0, 0}}});
            }),
            "quantized param 'n' (i32[32] as q8_0): only float params can be stored quantized");
  EXPECT_EQ(quantize_params(g, {}).to_string(), g.to_string());
}

}  // namespace
}  // namespace rlx
