// rlx quantize (quantize_model) on tiny models written per test, and the SentenceEmbedder
// loading the GGUF it writes: the round trip, the requantize rules and every error path.
// Parity on MiniLM and SmolLM2 against gguf-py is python/tests/test_gguf_models.py.
#include "rlx/models/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/scoped_env.h"
#include "common/test_util.h"
#include "common/tiny_bert.h"
#include "rlx/io/gguf.h"
#include "rlx/ir/error.h"
#include "rlx/models/sentence_embedder.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;
using rlx::testing::TempDir;
using rlx::testing::write_tiny_bert;

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "message: " << (haystack)

// Edits the JSON file `path` with `edit`.
template <class F>
void edit_json(const fs::path& path, F&& edit) {
  nlohmann::json j;
  std::ifstream(path) >> j;
  edit(j);
  std::ofstream(path) << j.dump();
}

TEST(Quantize, TinyBertGgufEmbedsAsItsDirectory) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "tiny");
  const std::string out = (tmp.path() / "tiny.gguf").string();
  QuantizeSummary s = quantize_model(dir, out, QuantFormat::kF32);
  EXPECT_EQ(s.source, "bert model directory");
  EXPECT_EQ(s.tensors, 21);  // 3 embeddings + 1 norm (2) + 1 layer (16)
  EXPECT_EQ(s.quantized, 0);
  EXPECT_EQ(s.bytes_out, static_cast<int64_t>(fs::file_size(out)));

  GgufFile f = GgufFile::open(out);
  EXPECT_EQ(f.get_string("general.architecture"), "bert");
  EXPECT_EQ(f.get<uint32_t>("bert.embedding_length"), 8u);
  EXPECT_EQ(f.get<uint32_t>("bert.pooling_type"), 1u);  // mean
  const std::vector<std::string>& tokens = f.get_array<std::string>("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 12u);
  EXPECT_EQ(tokens[2], "[CLS]");  // CONTROL: as is
  EXPECT_EQ(tokens[5],
            "\xE2\x96\x81"
            "man");            // a word start: the phantom space
  EXPECT_EQ(tokens[10], "s");  // "##s": the continuation without "##"
  EXPECT_EQ(f.tensor_info("blk.0.ffn_up.weight").shape, (std::vector<int64_t>{16, 8}));

  const std::vector<std::string> texts = {"a man is eating food.", "a horse", "mans"};
  SentenceEmbedder from_dir(dir), from_gguf(out);
  for (const std::string& t : texts)
    EXPECT_EQ(from_gguf.tokenizer().encode(t), from_dir.tokenizer().encode(t)) << t;
  EXPECT_EQ(from_gguf.model_name(), "tiny");
  Tensor a = from_dir.encode(texts), b = from_gguf.encode(texts);
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i)
    EXPECT_NEAR(a.data_as<float>()[i], b.data_as<float>()[i], 1e-6) << i;
}

// F16 matrices stay packed in the embedder (quant_matmul, gather + dequantize) and agree with
// the f32 model to f16's precision (11-bit significand: values of N(0, 0.2) weights round by
// at most 2^-11 relative).
TEST(Quantize, TinyBertF16StaysPacked) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "tiny");
  const std::string out = (tmp.path() / "tiny-f16.gguf").string();
  QuantizeSummary s = quantize_model(dir, out, QuantFormat::kF16);
  EXPECT_EQ(s.quantized, 7);  // token_embd + 6 Linear weights
  GgufFile f = GgufFile::open(out);
  EXPECT_EQ(f.tensor_info("token_embd.weight").type, GgmlType::F16);
  EXPECT_EQ(f.tensor_info("position_embd.weight").type, GgmlType::F32);
  EXPECT_EQ(f.tensor_info("token_types.weight").type, GgmlType::F32);
  EXPECT_EQ(f.tensor_info("blk.0.attn_q.weight").type, GgmlType::F16);
  EXPECT_EQ(f.tensor_info("blk.0.attn_q.bias").type, GgmlType::F32);
  EXPECT_EQ(f.get<uint32_t>("general.file_type"), 1u);  // MOSTLY_F16
  SentenceEmbedder from_dir(dir), from_gguf(out);
  EXPECT_EQ(from_gguf.weight_formats().size(), 7u);
  EXPECT_LT(from_gguf.weight_bytes(), from_dir.weight_bytes());
  Tensor a = from_dir.encode({"a man is eating food."}),
         b = from_gguf.encode({"a man is eating food."});
  for (int64_t i = 0; i < a.numel(); ++i)
    EXPECT_NEAR(a.data_as<float>()[i], b.data_as<float>()[i], 5e-3) << i;
}

TEST(QuantizeErrors, BadInputsNameTheFileAndWhatWasExpected) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "tiny");
  const std::string out = (tmp.path() / "out.gguf").string();
  auto error = [&](const std::string& in, QuantFormat f) {
    return testing::error_of([&] { quantize_model(in, out, f); });
  };
  std::string msg = error((tmp.path() / "missing").string(), QuantFormat::kQ8_0);
  EXPECT_HAS(msg, "missing: no such file or directory");
  EXPECT_HAS(error(dir, QuantFormat::kQ8_K), "q8_K has no llama.cpp file type (ggml's");
  EXPECT_HAS(error(dir, QuantFormat::kIQ4_NL),
             "--type iq4_nl is read by rlx but not written (no quantizer); expected f32, f16");
  // The --type names: an unknown one lists only the formats quantize_model writes.
  auto type_error = [](const std::string& name) {
    return testing::error_of([&] { quantize_target_format(name); });
  };
  msg = type_error("q9_0");
  EXPECT_HAS(msg, "rlx quantize: unknown --type 'q9_0'; expected f32, f16, bf16, q4_0");
  EXPECT_EQ(msg.find("iq4_nl"), std::string::npos) << msg;
  EXPECT_HAS(type_error("iq4_nl"), "no quantizer");
  EXPECT_HAS(type_error("q8_K"), "no llama.cpp file type");
  EXPECT_EQ(quantize_target_format("q4_K"), QuantFormat::kQ4_K);
  // Rows of 8 fit no 32-element block: the first matrix is named with its shape.
  msg = error(dir, QuantFormat::kQ8_0);
  EXPECT_HAS(msg, "tensor 'embeddings.word_embeddings.weight' [12,8]");
  EXPECT_HAS(msg, "rows of 8 elements are not a multiple of the q8_0 block size 32");
  fs::create_directories(tmp.path() / "empty");
  EXPECT_HAS(error((tmp.path() / "empty").string(), QuantFormat::kF16),
             "not a BERT model directory (no config.json)");
  EXPECT_FALSE(fs::exists(out));  // nothing written on failure

  rlx::testing::TinyBertOptions two_layers;
  two_layers.checkpoint_layers = 2;
  msg = error(write_tiny_bert(tmp.path() / "two", two_layers), QuantFormat::kF16);
  EXPECT_HAS(msg, "16 tensor(s) not used by the 1-layer encoder");
  EXPECT_HAS(msg, "config.json does not match the checkpoint");
  edit_json(fs::path(dir) / "config.json", [](nlohmann::json& j) { j["hidden_act"] = "relu"; });
  EXPECT_HAS(error(dir, QuantFormat::kF16), "hidden_act 'relu' cannot be written as a BERT GGUF");
  edit_json(fs::path(dir) / "config.json", [](nlohmann::json& j) { j["hidden_act"] = "gelu"; });
  edit_json(fs::path(dir) / "tokenizer.json",
            [](nlohmann::json& j) { j["normalizer"]["lowercase"] = false; });
  msg = error(dir, QuantFormat::kF16);
  EXPECT_HAS(msg, "tokenizer.json: the normalizer does not lowercase");
  edit_json(fs::path(dir) / "config.json", [](nlohmann::json& j) { j["model_type"] = "gpt2"; });
  EXPECT_HAS(error(dir, QuantFormat::kF16), "model_type 'gpt2' is not a BERT-family encoder");
}

// A GGUF of another architecture: requantized by llama-quantize's rules (2-D weights, not
// norms), but refused by the embedder, naming the architecture.
TEST(Quantize, RequantizesAGgufKeepingMetadataAndOtherTensors) {
  TempDir tmp;
  const std::string in = (tmp.path() / "llm.gguf").string(),
                    out = (tmp.path() / "llm-q8.gguf").string();
  Tensor w(DType::f32, Shape{2, 64}), norm(DType::f32, Shape{64});
  for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] = std::sin(0.1 * i);
  for (int64_t i = 0; i < norm.numel(); ++i) norm.data_as<float>()[i] = 1.0f + 0.01f * i;
  GgufMetadata md = {{"general.architecture", GgufValue(std::string("llama"))},
                     {"llama.block_count", GgufValue(uint32_t{1})}};
  write_gguf(in, md,
             {GgufTensorData::of("blk.0.attn_q.weight", w),
              GgufTensorData::of("blk.0.attn_norm.weight", norm)});
  QuantizeSummary s = quantize_model(in, out, QuantFormat::kQ8_0);
  EXPECT_EQ(s.source, "gguf");
  EXPECT_EQ(s.tensors, 2);
  EXPECT_EQ(s.quantized, 1);
  GgufFile f = GgufFile::open(out);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get<uint32_t>("llama.block_count"), 1u);
  EXPECT_EQ(f.get<uint32_t>("general.file_type"), 7u);  // MOSTLY_Q8_0
  EXPECT_EQ(f.tensor_info("blk.0.attn_q.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(f.tensor_info("blk.0.attn_q.weight").shape, (std::vector<int64_t>{2, 64}));
  EXPECT_EQ(f.tensor_info("blk.0.attn_norm.weight").type, GgmlType::F32);
  // Q8_0 of sin values (max|x| <= 1): within half a step (d / 2 = max|x| / 254) plus the f16
  // rounding of d (2^-11 relative, times |q| <= 127) of the source.
  GgufTensorBytes q = f.tensor_bytes("blk.0.attn_q.weight");
  std::vector<float> back(128);
  dequantize(QuantFormat::kQ8_0, std::span(reinterpret_cast<const uint8_t*>(q.data()), q.size()),
             back);
  for (int64_t i = 0; i < 128; ++i)
    EXPECT_NEAR(back[i], w.data_as<float>()[i], 1.0 / 254 + 1.0 / 2048);

  std::string msg = testing::error_of([&] { SentenceEmbedder e(out); });
  EXPECT_HAS(msg, "llm-q8.gguf: general.architecture is 'llama', expected 'bert'");
}

TEST(QuantizeErrors, GgufTensorRlxCannotDequantize) {
  TempDir tmp;
  const std::string in = (tmp.path() / "iq.gguf").string();
  std::vector<std::byte> bytes(66);  // one IQ2_XXS block of 256 elements
  write_gguf(in, {}, {{"blk.0.ffn_up.weight", GgmlType::IQ2_XXS, {1, 256}, bytes}});
  std::string msg = testing::error_of(
      [&] { quantize_model(in, (tmp.path() / "out.gguf").string(), QuantFormat::kQ8_0); });
  EXPECT_HAS(msg,
             "tensor 'blk.0.ffn_up.weight' [1,256] has ggml type IQ2_XXS, which rlx cannot "
             "dequantize");
}

}  // namespace
}  // namespace rlx::models
