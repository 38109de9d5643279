// The quantized-weight ops in the IR (dequantize, quant_matmul): the reference evaluator
// against gguf-py's dequantizers (tests/ir/quant_ref.json, written by gen_quant_ref.py) and
// against dequantize_row, quant_matmul against a double-precision product of gguf-py's values,
// a quantized embedding (gather the packed rows, then dequantize), the verifier's messages and
// the text form.
#include <gtest/gtest.h>

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

namespace rlx {
namespace {

using testing::bits_of;
using testing::error_of;
using testing::from_hex;
using testing::quant_ref;

Tensor u8_tensor(const std::vector<uint8_t>& bytes, Shape shape) {
  Tensor t(DType::u8, std::move(shape));
  std::memcpy(t.data(), bytes.data(), bytes.size());
  return t;
}

// Every format: the reference blocks as rows (the bytes of one row of n elements each, split
// into two rows where there are two or more blocks), evaluated by dequantize, equal bit for
// bit to gguf-py's values and to dequantize_row.
TEST(QuantOps, DequantizeEvaluatorEqualsGgufPyAndDequantizeRow) {
  int formats = 0;
  for (const auto& c : quant_ref()["dequantize"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const QuantFormat f = quant_format_from_ggml_type(c["ggml_type"]);
    const int64_t n = c["n"];
    const std::vector<uint8_t> bytes = from_hex(c["bytes_hex"]);
    const std::vector<uint8_t> want = from_hex(c["expected_f32_hex"]);
    const int64_t bs = quant_format_info(f).block_size;
    const int64_t rows = (n / bs) % 2 == 0 ? 2 : 1, k = n / rows;
    Graph g("deq");
    Value w = g.input("w", DType::u8, {rows, quant_row_bytes(f, k)});
    g.set_outputs({g.dequantize(w, f, k)});
    const Tensor got = evaluate(g, {{"w", u8_tensor(bytes, {rows, quant_row_bytes(f, k)})}})[0];
    ASSERT_EQ(got.type().to_string(), TensorType(DType::f32, Shape{rows, k}).to_string());
    std::vector<float> row(static_cast<size_t>(n));
    dequantize_row(f, bytes.data(), row.data(), n);
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      float w_ref;
      std::memcpy(&w_ref, want.data() + 4 * i, 4);
      const float v = got.data_as<float>()[i];
      if ((bits_of(v) != bits_of(w_ref) || bits_of(v) != bits_of(row[static_cast<size_t>(i)])) &&
          bad++ < 5)
        ADD_FAILURE() << "elem " << i << ": evaluator " << v << ", gguf-py " << w_ref
                      << ", dequantize_row " << row[static_cast<size_t>(i)];
    }
    EXPECT_EQ(bad, 0);
    ++formats;
  }
  EXPECT_EQ(formats, static_cast<int>(quant_formats().size()));
}

// quant_matmul's evaluator: x [2, 3, K] against weights whose rows are the reference blocks
// rotated by whole blocks, compared with x . W^T in double from gguf-py's values (the f32
// result rounds once: 1 ulp of each output plus nothing else).
TEST(QuantOps, QuantMatmulEvaluatorEqualsDoubleProductOfGgufPyValues) {
  for (const auto& c : quant_ref()["dequantize"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const QuantFormat f = quant_format_from_ggml_type(c["ggml_type"]);
    const int64_t K = c["n"];
    const std::vector<uint8_t> bytes = from_hex(c["bytes_hex"]);
    const std::vector<uint8_t> want = from_hex(c["expected_f32_hex"]);
    const QuantFormatInfo& info = quant_format_info(f);
    const int64_t nb = K / info.block_size, bpb = info.bytes_per_block, rb = nb * bpb, N = 4;
    std::vector<uint8_t> w(static_cast<size_t>(N * rb));
    std::vector<double> wd(static_cast<size_t>(N * K));
    for (int64_t j = 0; j < N; ++j)
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t src = (b + j) % nb;
        std::memcpy(&w[static_cast<size_t>(j * rb + b * bpb)],
                    &bytes[static_cast<size_t>(src * bpb)], static_cast<size_t>(bpb));
        for (int64_t e = 0; e < info.block_size; ++e) {
          float v;
          std::memcpy(&v, want.data() + 4 * (src * info.block_size + e), 4);
          wd[static_cast<size_t>(j * K + b * info.block_size + e)] = v;
        }
      }
    Graph g("qmm");
    Value x = g.input("x", DType::f32, {2, 3, K});
    Value wv = g.param("w", DType::u8, {N, rb});
    g.set_outputs({g.quant_matmul(x, wv, f)});
    Tensor xt(DType::f32, Shape{2, 3, K});
    for (int64_t i = 0; i < xt.numel(); ++i)
      xt.set_f64(i, std::sin(0.37 * static_cast<double>(i)) * (1 + i % 3));
    const Tensor y = evaluate(g, {{"x", xt}, {"w", u8_tensor(w, {N, rb})}})[0];
    ASSERT_EQ(y.type().to_string(), "f32[2,3,4]");
    for (int64_t m = 0; m < 6; ++m)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t i = 0; i < K; ++i)
          s += xt.get_f64(m * K + i) * wd[static_cast<size_t>(j * K + i)];
        EXPECT_EQ(y.get_f64(m * N + j), static_cast<double>(static_cast<float>(s)))
            << "y[" << m << "," << j << "]";
      }
  }
}

// A quantized embedding table: gather rows of the packed u8 tensor, then dequantize, equals
// dequantizing the table and gathering f32 rows (indices clamped alike).
TEST(QuantOps, GatherOfPackedRowsThenDequantize) {
  const int64_t V = 7, rb = quant_row_bytes(QuantFormat::kQ4_K, 256);
  std::vector<float> table(static_cast<size_t>(V * 256));
  for (size_t i = 0; i < table.size(); ++i) table[i] = std::cos(0.11f * static_cast<float>(i));
  std::vector<uint8_t> packed(static_cast<size_t>(V * rb));
  for (int64_t r = 0; r < V; ++r)
    quantize_row(QuantFormat::kQ4_K, table.data() + r * 256, packed.data() + r * rb, 256);
  Graph g("embed");
  Value w = g.param("table", DType::u8, {V, rb});
  Value ids = g.input("ids", DType::i32, {2, 3});
  Value a = g.dequantize(g.gather(w, ids, 0), QuantFormat::kQ4_K, 256);
  Value b = g.gather(g.dequantize(w, QuantFormat::kQ4_K, 256), ids, 0);
  g.set_outputs({a, b});
  const Tensor idt =
      Tensor::from_ints(DType::i32, {2, 3}, std::vector<int64_t>{6, 0, 3, 3, 12, -4});
  const std::vector<Tensor> out =
      evaluate(g, {{"table", u8_tensor(packed, {V, rb})}, {"ids", idt}});
  ASSERT_EQ(out[0].type().to_string(), "f32[2,3,256]");
  EXPECT_TRUE(out[0].bitwise_equal(out[1]));
  std::vector<float> row(256);
  dequantize_row(QuantFormat::kQ4_K, packed.data() + 6 * rb, row.data(), 256);
  EXPECT_EQ(std::memcmp(out[0].data(), row.data(), 256 * 4), 0);  // ids[0] = 6
}

TEST(QuantOps, VerifierErrorsNameOpNodeAndShapes) {
  Graph g("bad");
  Value w = g.param("w", DType::u8, {4, 35});
  EXPECT_EQ(error_of([&] { g.dequantize(w, QuantFormat::kQ4_0, 64); }),
            "op 'dequantize' (node %0): the packed weight's last dim is 35 bytes, but a q4_0 row "
            "of k = 64 elements is 2 blocks of 18 bytes = 36 bytes; operand types: u8[4,35]");
  Value w36 = g.param("w36", DType::u8, {4, 36});
  EXPECT_EQ(error_of([&] { g.dequantize(w36, QuantFormat::kQ4_0, 48); }),
            "op 'dequantize' (node %0): k = 48 is not a multiple of the q4_0 block size 32; "
            "operand types: u8[4,36]");
  Value wf = g.param("wf", DType::f32, {4, 36});
  EXPECT_NE(error_of([&] {
              g.dequantize(wf, QuantFormat::kQ4_0, 64);
            }).find("the packed weight must be one of u8, got f32"),
            std::string::npos);
  Value x = g.input("x", DType::f32, {2, 48});
  EXPECT_EQ(error_of([&] {
              g.emit1(OpKind::QuantMatMul, {x, w36},
                      {{"format", std::string("q4_0")}, {"k", int64_t{64}}});
            }),
            "op 'quant_matmul' (node %0): x's last dim 48 differs from k = 64 (the weight's row "
            "length); operand types: f32[2,48], u8[4,36]");
  Value xi = g.input("xi", DType::i32, {2, 64});
  EXPECT_NE(error_of([&] {
              g.quant_matmul(xi, w36, QuantFormat::kQ4_0);
            }).find("x must be a float type (f32, f16, bf16, f64), got i32"),
            std::string::npos);
  Value x64 = g.input("x64", DType::f32, {2, 64});
  Value w3 = g.param("w3", DType::u8, {1, 4, 36});
  EXPECT_NE(error_of([&] {
              g.quant_matmul(x64, w3, QuantFormat::kQ4_0);
            }).find("the packed weight must be u8[N, R] (rank 2), got rank 3"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] {
        g.emit1(OpKind::Dequantize, {w36}, {{"format", std::string("q4_2")}, {"k", int64_t{64}}});
      }).find("attribute 'format' is \"q4_2\"; expected one of f32, f16, q4_0"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              g.quant_matmul(x64, w36, QuantFormat::kQ4_0, "int4");
            }).find("attribute 'act_quant' is \"int4\"; expected one of none, int8"),
            std::string::npos);
  Value wh = g.param("wh", DType::u8, {4, 128});
  EXPECT_NE(error_of([&] { g.quant_matmul(x64, wh, QuantFormat::kF16, "int8"); })
                .find("act_quant \"int8\" rounds x per 32-element block for a block-quantized "
                      "weight; f16 weights are multiplied in float (use \"none\")"),
            std::string::npos);
  // The bias: [N] of x's dtype, at most one; the activation one of fused_matmul_bias_act's.
  Value b4 = g.param("b4", DType::f32, {4});
  Value b14 = g.param("b14", DType::f32, {1, 4});
  EXPECT_EQ(error_of([&] { g.quant_matmul(x64, w36, QuantFormat::kQ4_0, "none", b14); }),
            "op 'quant_matmul' (node %0): the bias must be f32[4] (x's dtype, one value per "
            "weight row), got f32[1,4]; operand types: f32[2,64], u8[4,36], f32[1,4]");
  EXPECT_EQ(error_of([&] {
              g.emit1(OpKind::QuantMatMul, {x64, w36, b4, b4},
                      {{"format", std::string("q4_0")}, {"k", int64_t{64}}});
            }),
            "op 'quant_matmul' (node %0): takes x, the packed weight and an optional bias (2 or 3 "
            "operands), got 4; operand types: f32[2,64], u8[4,36], f32[4], f32[4]");
  EXPECT_NE(error_of([&] {
              g.quant_matmul(x64, w36, QuantFormat::kQ4_0, "none", b4, "tanh");
            }).find("attribute 'activation' is \"tanh\"; expected one of none, relu, gelu"),
            std::string::npos);
  // The failed builder calls left the graph unchanged.
  EXPECT_EQ(g.nodes().size(), 10u);
}

TEST(QuantOps, TextFormRoundTripsAndParsesFormatByName) {
  Graph g("linear");
  Value x = g.input("x", DType::f32, {5, 256});
  Value w = g.param("w", DType::u8, {8, quant_row_bytes(QuantFormat::kQ6_K, 256)});
  Value e = g.param("emb", DType::u8, {10, quant_row_bytes(QuantFormat::kQ8_0, 64)});
  g.set_outputs({g.quant_matmul(x, w, QuantFormat::kQ6_K), g.dequantize(e, QuantFormat::kQ8_0, 64),
                 g.quant_matmul(x, w, QuantFormat::kQ6_K, "int8")});
  const std::string text = g.to_string();
  EXPECT_NE(text.find("quant_matmul %x, %w {format=\"q6_K\", k=256, act_quant=\"none\", "
                      "activation=\"none\"} : f32[5,8]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("act_quant=\"int8\", activation=\"none\"} : f32[5,8]"), std::string::npos)
      << text;
  EXPECT_NE(text.find("%emb = param : u8[10,68]"), std::string::npos) << text;
  EXPECT_EQ(Graph::parse(text).to_string(), text);
  // A parsed type that disagrees with inference is located.
  std::string wrong = text;
  wrong.replace(wrong.find("f32[10,64]"), 10, "f32[10,32]");
  EXPECT_NE(error_of([&] { Graph::parse(wrong); }).find("f32[10,64]"), std::string::npos);
}

}  // namespace
}  // namespace rlx
