// Malformed model directories and inputs the embedder must refuse rather than abort on or
// compute garbage from: JSON of the wrong shape, directories where files belong, checkpoint
// tensors the config does not use, NaN/Inf weights and outputs, token ids outside the vocab,
// max_length beyond the model, and the precision / name the embedder reports. A tiny model
// written per test (tests/common/tiny_bert.h) keeps each case to milliseconds.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>

#include "common/scoped_env.h"
#include "common/test_util.h"
#include "common/tiny_bert.h"
#include "rlx/ir/error.h"
#include "rlx/models/sentence_embedder.h"
#include "rlx/models/tokenizer.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;
using rlx::testing::ScopedEnv;
using rlx::testing::TempDir;
using rlx::testing::TinyBertOptions;
using rlx::testing::write_tiny_bert;

using rlx::testing::error_of;

std::string load_error(const std::string& dir, const EmbedderOptions& o = {}) {
  return error_of([&] { SentenceEmbedder e(dir, o); });
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "message: " << (haystack)

TEST(ModelFiles, TinyModelLoadsAndEmbeds) {
  TempDir tmp;
  SentenceEmbedder e(write_tiny_bert(tmp.path() / "tiny"));
  EXPECT_EQ(e.dim(), 8);
  EXPECT_EQ(e.max_length(), 16);  // sentence_bert_config.json's max_seq_length
  EXPECT_EQ(e.max_length_limit(), 32);
  Tensor v = e.encode({"a man is eating food.", "a horse"});
  ASSERT_EQ(v.shape(), (Shape{2, 8}));
  for (int64_t r = 0; r < 2; ++r) {
    double norm = 0;
    for (int64_t k = 0; k < 8; ++k) norm += std::pow(v.data_as<float>()[r * 8 + k], 2);
    EXPECT_NEAR(norm, 1.0, 1e-5);
  }
}

TEST(ModelFiles, ModulesJsonOfTheWrongShapeNamesTheFileAndField) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "m");
  const std::string modules = dir + "/modules.json";
  auto with_modules = [&](const std::string& text) {
    std::ofstream(modules) << text;
    return load_error(dir);
  };
  EXPECT_EQ(with_modules("[1, 2]"), modules + ": expected module 0 to be a JSON object, found 1");
  EXPECT_EQ(with_modules("{\"a\": 1}"),
            modules + ": expected a JSON array of module objects, found {\"a\":1}");
  EXPECT_EQ(with_modules("[{\"type\": 3}]"), modules + ": field 'type' must be a string, found 3");
  EXPECT_EQ(with_modules("[{\"type\": \"sentence_transformers.models.Pooling\", \"path\": []}]"),
            modules + ": field 'path' must be a string, found []");
  std::string msg = with_modules("[1, ");
  EXPECT_HAS(msg, modules + ": malformed JSON at byte 5");
}

TEST(ModelFiles, PoolingAndSentenceBertConfigFieldsOfTheWrongType) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "m");
  const std::string pooling = dir + "/1_Pooling/config.json";
  std::ofstream(pooling) << R"({"pooling_mode_mean_tokens": "yes"})";
  EXPECT_EQ(load_error(dir), pooling +
                                 ": field 'pooling_mode_mean_tokens' must be true or false, "
                                 "found \"yes\"");
  std::ofstream(pooling) << "[true]";
  EXPECT_EQ(load_error(dir),
            pooling + ": expected the pooling config to be a JSON object, found [true]");
  std::ofstream(pooling) << R"({"pooling_mode_mean_tokens": true})";
  const std::string st = dir + "/sentence_bert_config.json";
  std::ofstream(st) << R"({"max_seq_length": "16"})";
  EXPECT_EQ(load_error(dir), st + ": field 'max_seq_length' must be an integer >= 2, found \"16\"");
  std::ofstream(st) << R"({"max_seq_length": 64})";
  EXPECT_HAS(load_error(dir), st + ": max_seq_length 64 exceeds the model's limit 32");
}

TEST(ModelFiles, ADirectoryWhereAFileBelongsIsNamed) {
  for (const char* file : {"config.json", "tokenizer.json", "modules.json", "model.safetensors",
                           "1_Pooling/config.json", "sentence_bert_config.json"}) {
    TempDir tmp;
    const std::string dir = write_tiny_bert(tmp.path() / "m");
    fs::remove(fs::path(dir) / file);
    fs::create_directory(fs::path(dir) / file);
    EXPECT_EQ(load_error(dir), "'" + dir + "/" + file + "' is a directory, expected a file")
        << file;
  }
}

TEST(ModelFiles, AMissingModelPathIsNamedNotItsConfigJson) {
  TempDir tmp;
  for (const char* name : {"no-such-model", "no-such-model.gguf"}) {
    const std::string path = (tmp.path() / name).string();
    EXPECT_EQ(load_error(path), path +
                                    ": no such file or directory (expected a model directory "
                                    "with config.json, or a .gguf file)");
  }
}

TEST(ModelFiles, CheckpointTensorsTheConfigDoesNotUseAreAnErrorUnlessAllowed) {
  TempDir tmp;
  TinyBertOptions o;
  o.config_layers = 1;
  o.checkpoint_layers = 2;  // config.json says 1 layer: 16 tensors of layer 1 would be ignored
  const std::string dir = write_tiny_bert(tmp.path() / "m", o);
  std::string msg = load_error(dir);
  EXPECT_HAS(msg, dir + "/model.safetensors: 16 tensors are not used by the 1-layer encoder that " +
                      dir + "/config.json describes: 'encoder.layer.1.");
  EXPECT_HAS(msg, "(12 more)");
  EXPECT_HAS(msg, "allow_unused_weights");
  EXPECT_HAS(msg, "--allow-unused-weights");
  EmbedderOptions allow;
  allow.allow_unused_weights = true;
  SentenceEmbedder e(dir, allow);
  EXPECT_EQ(e.encode({"a man"}).shape(), (Shape{1, 8}));
}

TEST(ModelFiles, NonFiniteWeightsNameTheTensorAndElement) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "m");
  const std::string t = "encoder.layer.0.attention.output.dense.weight";
  rlx::testing::poke_tiny_bert_weight(dir, t, 8 * 3 + 5, std::nanf(""));
  EXPECT_EQ(load_error(dir), dir + "/model.safetensors: tensor '" + t +
                                 "' holds NaN at [3, 5]; a model's weights must be finite");
  rlx::testing::poke_tiny_bert_weight(dir, t, 8 * 3 + 5, 0.5f);
  rlx::testing::poke_tiny_bert_weight(dir, "embeddings.LayerNorm.bias", 2,
                                      -std::numeric_limits<float>::infinity());
  EXPECT_HAS(load_error(dir), "tensor 'embeddings.LayerNorm.bias' holds -Inf at [2]");
}

TEST(ModelFiles, NonFiniteEmbeddingsAreAnError) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "m");
  // Finite weights whose sum overflows: word + position embedding of the same element = +Inf,
  // and LayerNorm turns the row into NaN.
  const float big = std::numeric_limits<float>::max();
  rlx::testing::poke_tiny_bert_weight(dir, "embeddings.word_embeddings.weight", 4 * 8 + 1, big);
  rlx::testing::poke_tiny_bert_weight(dir, "embeddings.position_embeddings.weight", 1 * 8 + 1, big);
  SentenceEmbedder e(dir);
  EXPECT_EQ(e.encode({"man"}).shape(), (Shape{1, 8}));  // token "a" (id 4) is not in it
  std::string msg = error_of([&] { e.encode({"man", "a man"}); });
  EXPECT_HAS(msg, "SentenceEmbedder::encode: text 1: the embedding is not finite (NaN at element");
  EXPECT_HAS(msg, "under precision always-f32");
}

TEST(ModelFiles, TokenIdsOutsideTheVocabularyAreAnError) {
  TempDir tmp;
  TinyBertOptions o;
  o.vocab_size = 10;  // the tokenizer has 12 tokens: "##s" (10) and "." (11) have no row
  const std::string dir = write_tiny_bert(tmp.path() / "m", o);
  SentenceEmbedder e(dir);
  EXPECT_EQ(e.encode({"a horse"}).shape(), (Shape{1, 8}));
  EXPECT_EQ(error_of([&] {
              e.encode({"a horse", "a man eating food."});
            }),
            "SentenceEmbedder::encode: text 1: token id 11 at position 5 is outside the model's "
            "vocabulary of vocab_size 10 (" +
                dir + "/config.json); the tokenizer does not match the model");

  BatchEncoding b = e.tokenizer().encode_batch({"a man"}, e.max_length());
  b.ids[1] = 10;
  EXPECT_HAS(error_of([&] { e.embed(b); }),
             "SentenceEmbedder::embed: row 0: token id 10 at position 1 is outside");
  b.ids[1] = -1;
  EXPECT_HAS(error_of([&] { e.embed(b); }), "row 0: token id -1 at position 1 is outside");
  b.ids[1] = 4;
  b.token_type_ids[2] = 2;
  EXPECT_HAS(error_of([&] { e.embed(b); }),
             "row 0: token type id 2 at position 2 is outside [0, type_vocab_size 2)");
  b.token_type_ids[2] = 0;
  b.attention_mask[0] = 3;
  EXPECT_HAS(error_of([&] { e.embed(b); }),
             "row 0: attention mask value 3 at position 0 is not 0 or 1");
  b.attention_mask[0] = 1;
  EXPECT_EQ(e.embed(b).shape(), (Shape{1, 8}));
}

TEST(ModelFiles, InvalidUtf8NamesTheText) {
  TempDir tmp;
  SentenceEmbedder e(write_tiny_bert(tmp.path() / "m"));
  EXPECT_EQ(error_of([&] {
              e.encode({"a man", "bad \xff text"});
            }),
            "SentenceEmbedder::encode: text 1: WordPieceTokenizer: invalid UTF-8 at byte offset 4 "
            "(byte 0xFF); the text must be valid UTF-8");
}

TEST(ModelFiles, MaxLengthMayExceedMaxSeqLengthUpToTheModelsLimit) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "m");
  EmbedderOptions o;
  o.max_length = 32;  // above max_seq_length 16, at max_position_embeddings 32: allowed
  EXPECT_EQ(SentenceEmbedder(dir, o).max_length(), 32);
  o.max_length = 4;
  EXPECT_EQ(SentenceEmbedder(dir, o).max_length(), 4);
  o.max_length = 33;
  EXPECT_EQ(load_error(dir, o),
            "SentenceEmbedder: max_length 33 exceeds the model's limit 32 "
            "(max_position_embeddings 32 in " +
                dir + "/config.json, model_max_length 32 of the tokenizer)");
  for (int64_t bad : {1, -1}) {
    o.max_length = bad;
    EXPECT_HAS(load_error(dir, o), "SentenceEmbedder: max_length must be >= 2");
  }
}

TEST(ModelFiles, PrecisionIsF32OnEveryDeviceUnlessAsked) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "m");
  ScopedEnv env;
  env.set("RLX_PRECISION", std::nullopt);
  EmbedderOptions o;
  EXPECT_EQ(to_string(SentenceEmbedder(dir, o).precision()), "always-f32");
  // The pjrt backend's own default is auto-mixed-bf16; the embedder does not take it. (No
  // compile happens in the constructor, so no plugin is needed.)
  o.device = Device::parse("pjrt:0");
  EXPECT_EQ(to_string(SentenceEmbedder(dir, o).precision()), "always-f32");
  env.set("RLX_PRECISION", "auto-mixed-bf16");
  EXPECT_EQ(to_string(SentenceEmbedder(dir, o).precision()), "auto-mixed-bf16");
  o.precision = parse_precision_policy("always-f16");
  EXPECT_EQ(to_string(SentenceEmbedder(dir, o).precision()), "always-f16");
}

TEST(ModelFiles, ModelNameIsTheDirectorysOwnName) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "my-model");
  EXPECT_EQ(SentenceEmbedder(dir).model_name(), "my-model");
  EXPECT_EQ(SentenceEmbedder(dir + "/").model_name(), "my-model");
  EXPECT_EQ(SentenceEmbedder(dir + "/.").model_name(), "my-model");
  EmbedderOptions o;
  o.model_name = "given";
  EXPECT_EQ(SentenceEmbedder(dir, o).model_name(), "given");
  ScopedEnv env;
  env.set("RLX_MODEL_DIR", std::nullopt);
  EXPECT_EQ(default_model_name(), "all-MiniLM-L6-v2");
  env.set("RLX_MODEL_DIR", dir + "/");
  EXPECT_EQ(default_model_name(), "my-model");
}

TEST(Utf8, FindInvalid) {
  EXPECT_EQ(find_invalid_utf8("plain ascii"), std::nullopt);
  EXPECT_EQ(find_invalid_utf8("caf\xc3\xa9 \xf0\x9f\x98\x80"), std::nullopt);
  EXPECT_EQ(find_invalid_utf8("bad \xff"), 4u);
  EXPECT_EQ(find_invalid_utf8("ok\xe2\x82"), 2u);    // truncated
  EXPECT_EQ(find_invalid_utf8("\xed\xa0\x80"), 0u);  // a surrogate
  EXPECT_EQ(find_invalid_utf8("ab\xc0\xaf"), 2u);    // overlong
}

// Expected strings are Python's bytes.decode("utf-8", "replace") of the same bytes.
TEST(Utf8, ReplaceEachMaximalSubpartLikePython) {
  const std::string r = "\xef\xbf\xbd";  // U+FFFD
  EXPECT_EQ(replace_invalid_utf8("ok \xf0\x9f\x98\x80"), "ok \xf0\x9f\x98\x80");
  EXPECT_EQ(replace_invalid_utf8("\xff"), r);
  EXPECT_EQ(replace_invalid_utf8("a\xe2\x82"), "a" + r);
  EXPECT_EQ(replace_invalid_utf8("\xe2(\xa1"), r + "(" + r);
  EXPECT_EQ(replace_invalid_utf8("\xed\xa0\x80"), r + r + r);
  EXPECT_EQ(replace_invalid_utf8("\xf0\x9f\x98"), r);
  EXPECT_EQ(replace_invalid_utf8("\xf0\x9f\x98x"), r + "x");
  EXPECT_EQ(replace_invalid_utf8("\xc0\xaf"), r + r);
  EXPECT_EQ(replace_invalid_utf8("\xf4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(replace_invalid_utf8("\xe0\x80\x80"), r + r + r);
}

}  // namespace
}  // namespace rlx::models
