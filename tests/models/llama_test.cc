// LlamaModel on tiny GGUF files written here with rlx::write_gguf: the CPU logits equal the
// reference evaluator's on the same graph and weights, bucketing and batching do not change
// them, and bad files fail with errors naming the file and the key or tensor.
#include "rlx/models/llama.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "common/tiny_llama.h"
#include "rlx/io/gguf.h"
#include "rlx/ir/evaluator.h"
#include "rlx/models/bpe_tokenizer.h"

namespace rlx::models {
namespace {

using rlx::testing::error_of;
using rlx::testing::kDh;
using rlx::testing::kFfn;
using rlx::testing::kH;
using rlx::testing::kHeads;
using rlx::testing::kKv;
using rlx::testing::kLayers;
using rlx::testing::kVocab;
using rlx::testing::tiny_file;
using rlx::testing::TinyFile;
using rlx::testing::write;
using rlx::testing::write_edited;

TEST(Llama, ConfigFromMetadata) {
  LlamaModel m = LlamaModel::load(write(tiny_file(), "llama_config.gguf"));
  const LlamaConfig& c = m.config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.block_count, kLayers);
  EXPECT_EQ(c.head_count_kv, kKv);
  EXPECT_EQ(c.key_length, kDh);
  EXPECT_EQ(c.rope_dimension_count, kDh);
  EXPECT_EQ(c.vocab_size, kVocab);
  EXPECT_EQ(c.rope_layout, "gptj");
  EXPECT_FALSE(m.layout().separate_output);
  EXPECT_EQ(m.layout().formats.at("blk.1.ffn_up.weight"), QuantFormat::kF16);
  EXPECT_FALSE(m.has_tokenizer());
  // Resident weights are the file's tensor bytes (packed, not expanded).
  int64_t file_bytes = 0;
  const GgufFile file = GgufFile::open(m.path());
  for (const GgufTensorInfo& t : file.tensors()) file_bytes += static_cast<int64_t>(t.nbytes);
  EXPECT_EQ(m.weight_bytes(), file_bytes);
}

// The CPU executable (fused quant_matmul with int8 activations) against the reference
// evaluator (exact dequantize + f32 dot) on the same graph and the file's weights.
TEST(Llama, CpuLogitsMatchEvaluator) {
  const std::string path = write(tiny_file(), "llama_eval.gguf");
  LlamaModel m = LlamaModel::load(path);
  const int64_t batch = 2, seq = 5;
  std::vector<int32_t> ids = {3, 17, 0, 39, 8, 21, 21, 5, 12, 30};
  Tensor got = m.logits(ids, batch, seq);
  ASSERT_EQ(got.shape(), (Shape{batch, seq, kVocab}));

  Graph g = build_llama_decoder(m.config(), m.layout(), batch, seq);
  GgufFile file = GgufFile::open(path);
  TensorMap feeds;
  Tensor in(DType::i32, Shape{batch, seq});
  std::copy(ids.begin(), ids.end(), in.data_as<int32_t>());
  feeds.emplace("ids", in);
  for (int32_t id : g.params()) {
    const Node& n = g.node(id);
    GgufTensorBytes b = file.tensor_bytes(n.name);
    feeds.emplace(n.name,
                  Tensor::view_of(n.results[0].dtype, n.results[0].shape, b.data(), b.owner));
  }
  Tensor want = evaluate(g, feeds)[0];
  double max_ref = 0, max_err = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    max_ref = std::max(max_ref, std::abs(want.get_f64(i)));
    max_err = std::max(max_err, std::abs(want.get_f64(i) - got.get_f64(i)));
  }
  ASSERT_GT(max_ref, 0.5);  // logits of a real scale, so the bound below means something
  std::printf("tiny llama: CPU vs evaluator max |dlogit| %.4f of max |logit| %.3f\n", max_err,
              max_ref);
  // [2, 16] is 32 token rows: the CPU's quant_matmul dequantizes the weights and runs f32
  // sgemm there (kDequantGemmRows in src/backends/cpu/kernels/quant_matmul.h), as exact as the
  // evaluator up to f32 summation order.
  EXPECT_LT(max_err, 1e-4 * max_ref) << "max |dlogit| " << max_err << " of " << max_ref;
  // Fewer rows run the int8-activation kernel (ggml's scheme), whose rounding is the only
  // intended difference from here on: 1.7% of the logit scale over two layers at most.
  const double int8_tol = 0.03 * max_ref;

  // Each row alone, at an exact length (bucket 1), agrees with the reference.
  LlamaOptions exact;
  exact.bucket = 1;
  LlamaModel m1 = LlamaModel::load(path, exact);
  for (int64_t r = 0; r < batch; ++r) {
    Tensor row = m1.logits(std::span(ids).subspan(static_cast<size_t>(r * seq), seq), 1, seq);
    for (int64_t i = 0; i < seq * kVocab; ++i)
      ASSERT_NEAR(row.get_f64(i), want.get_f64(r * seq * kVocab + i), int8_tol) << "row " << r;
  }
  // A prefix at another length reuses the bucket-16 executable and agrees on its positions.
  Tensor prefix = m.logits(std::span(ids).subspan(0, 3), 1, 3);
  EXPECT_EQ(m.stats().compiles, 2);  // [2,16] and [1,16]
  for (int64_t i = 0; i < 3 * kVocab; ++i)
    ASSERT_NEAR(prefix.get_f64(i), want.get_f64(i), int8_tol);
}

TEST(Llama, ErrorsNameTheFileAndKey) {
  std::string path = write_edited("llama_no_key.gguf", [](TinyFile& f) {
    std::erase_if(f.metadata, [](const auto& kv) { return kv.first == "llama.block_count"; });
  });
  std::string e = error_of([&] { LlamaModel::load(path); });
  EXPECT_NE(e.find("'llama.block_count'"), std::string::npos) << e;
  EXPECT_NE(e.find(path), std::string::npos) << e;

  path = write_edited("llama_arch.gguf",
                      [](TinyFile& f) { f.metadata[0].second = std::string("mamba"); });
  e = error_of([&] { LlamaModel::load(path); });
  EXPECT_NE(e.find("'mamba'"), std::string::npos) << e;
  EXPECT_NE(e.find(path), std::string::npos) << e;

  path = write_edited("llama_type.gguf", [](TinyFile& f) {
    for (auto& [k, v] : f.metadata)
      if (k == "llama.attention.layer_norm_rms_epsilon") v = std::string("small");
  });
  e = error_of([&] { LlamaModel::load(path); });
  EXPECT_NE(e.find("'llama.attention.layer_norm_rms_epsilon'"), std::string::npos) << e;
  EXPECT_NE(e.find("expected f32 or f64"), std::string::npos) << e;

  path = write_edited("llama_gqa.gguf", [](TinyFile& f) {
    for (auto& [k, v] : f.metadata)
      if (k == "llama.attention.head_count_kv") v = uint32_t{3};
  });
  e = error_of([&] { LlamaModel::load(path); });
  EXPECT_NE(e.find("not a multiple of llama.attention.head_count_kv 3"), std::string::npos) << e;

  path = write_edited("llama_swa.gguf", [](TinyFile& f) {
    f.metadata.emplace_back("llama.attention.sliding_window", int32_t{-2});
  });
  e = error_of([&] { LlamaModel::load(path); });
  EXPECT_NE(e.find("'llama.attention.sliding_window' must not be negative, found -2"),
            std::string::npos)
      << e;

  path = write_edited("llama_shape.gguf", [](TinyFile& f) {
    for (auto& [name, spec] : f.specs)
      if (name == "blk.1.attn_k.weight") spec.second = {kHeads * kDh, kH};
    f.bytes["blk.1.attn_k.weight"].resize(
        static_cast<size_t>(kHeads * kDh * quant_row_bytes(QuantFormat::kQ8_0, kH)));
  });
  e = error_of([&] { LlamaModel::load(path); });
  EXPECT_NE(e.find("tensor 'blk.1.attn_k.weight': expected shape [32,64], found [64,64]"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find(path), std::string::npos) << e;

  path = write_edited("llama_missing.gguf", [](TinyFile& f) {
    std::erase_if(f.specs, [](const auto& s) { return s.first == "blk.0.ffn_down.weight"; });
  });
  e = error_of([&] { LlamaModel::load(path); });
  EXPECT_NE(e.find("missing tensor 'blk.0.ffn_down.weight'"), std::string::npos) << e;

  LlamaModel m = LlamaModel::load(write(tiny_file(), "llama_ids.gguf"));
  std::vector<int32_t> ids = {1, 2, kVocab};
  e = error_of([&] { m.logits(ids, 1, 3); });
  EXPECT_NE(e.find("position 2: token id 40 is outside the vocabulary [0, 40)"), std::string::npos)
      << e;
  e = error_of([&] { m.tokenizer(); });
  EXPECT_NE(e.find("'tokenizer.ggml.model'"), std::string::npos) << e;
}

// The installed SmolLM2-135M-Instruct Q4_1 file: the greedy next token of a plain prompt, and
// resident memory ~ the file's bytes (the packed weights are read in the mapping, not
// expanded: an f32 copy of the tied embedding alone would be 113 MB).
TEST(Llama, SmolLm2RunsFromTheMappedFile) {
  const int64_t before = rlx::testing::rss_bytes();
  LlamaModel m = LlamaModel::load(default_llm_gguf_path());
  const BpeTokenizer& tok = m.tokenizer();
  std::vector<int32_t> ids = tok.encode("The capital of France is");
  Tensor logits = m.logits(ids, 1, static_cast<int64_t>(ids.size()));
  const int64_t V = m.config().vocab_size;
  const float* last = logits.data_as<float>() + (static_cast<int64_t>(ids.size()) - 1) * V;
  const int32_t next = static_cast<int32_t>(std::max_element(last, last + V) - last);
  EXPECT_EQ(tok.token_bytes(next), " Paris");
  const int64_t grown = rlx::testing::rss_bytes() - before;
  const auto file_size = static_cast<int64_t>(std::filesystem::file_size(m.path()));
  std::printf("SmolLM2: RSS grew %.1f MB for a %.1f MB file (weights bound: %.1f MB)\n",
              static_cast<double>(grown) / 1e6, static_cast<double>(file_size) / 1e6,
              static_cast<double>(m.weight_bytes()) / 1e6);
  if (!rlx::testing::kSanitized) {
    EXPECT_LT(grown, file_size + (48 << 20));
  }
}

}  // namespace
}  // namespace rlx::models
