// A tiny sentence-transformers model directory written by a test: a BERT config (hidden 8,
// 2 heads), a 12-token WordPiece tokenizer.json, seeded random weights in model.safetensors,
// modules.json with mean pooling and Normalize. Loading it takes milliseconds, so model-file
// error tests need neither the installed MiniLM nor copies of its 90 MB of weights.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "rlx/io/safetensors.h"

namespace rlx::testing {

/// How write_tiny_bert lays the model out.
struct TinyBertOptions {
  int64_t config_layers = 1;      ///< num_hidden_layers of config.json
  int64_t checkpoint_layers = 1;  ///< encoder layers model.safetensors holds
  int64_t vocab_size = 12;        ///< vocab_size of config.json (rows of word_embeddings)
  bool with_pooler = true;        ///< add pooler.dense.* (as BertModel checkpoints have)
};

/// The tokens of the tiny tokenizer, by id.
inline const std::vector<std::string>& tiny_bert_vocab() {
  static const std::vector<std::string> v = {"[PAD]", "[UNK]",  "[CLS]", "[SEP]", "a",   "man",
                                             "is",    "eating", "food",  "horse", "##s", "."};
  return v;
}

/// Writes the model into `dir` (created if needed) and returns dir as a string.
inline std::string write_tiny_bert(const std::filesystem::path& dir,
                                   const TinyBertOptions& o = {}) {
  using json = nlohmann::json;
  namespace fs = std::filesystem;
  fs::create_directories(dir / "1_Pooling");
  constexpr int64_t kHidden = 8, kFfn = 16, kPositions = 32;
  auto write = [&](const fs::path& rel, const json& j) { std::ofstream(dir / rel) << j.dump(); };
  write("config.json", {{"model_type", "bert"},
                        {"vocab_size", o.vocab_size},
                        {"hidden_size", kHidden},
                        {"num_hidden_layers", o.config_layers},
                        {"num_attention_heads", 2},
                        {"intermediate_size", kFfn},
                        {"max_position_embeddings", kPositions},
                        {"type_vocab_size", 2},
                        {"hidden_act", "gelu"}});
  json vocab = json::object();
  const auto& tokens = tiny_bert_vocab();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  json added = json::array();
  for (int i = 0; i < 4; ++i)
    added.push_back({{"id", i}, {"content", tokens[static_cast<size_t>(i)]}, {"special", true}});
  write("tokenizer.json",
        {{"version", "1.0"},
         {"added_tokens", added},
         {"normalizer", {{"type", "BertNormalizer"}, {"lowercase", true}}},
         {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
         {"post_processor",
          {{"type", "BertProcessing"}, {"sep", {"[SEP]", 3}}, {"cls", {"[CLS]", 2}}}},
         {"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"vocab", vocab}}}});
  write("tokenizer_config.json", {{"model_max_length", kPositions}});
  write("modules.json",
        json::array(
            {{{"idx", 0}, {"type", "sentence_transformers.models.Transformer"}, {"path", ""}},
             {{"idx", 1}, {"type", "sentence_transformers.models.Pooling"}, {"path", "1_Pooling"}},
             {{"idx", 2},
              {"type", "sentence_transformers.models.Normalize"},
              {"path", "2_Normalize"}}}));
  write("1_Pooling/config.json",
        {{"pooling_mode_cls_token", false}, {"pooling_mode_mean_tokens", true}});
  write("sentence_bert_config.json", {{"max_seq_length", 16}});

  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  std::vector<std::pair<std::string, Tensor>> tensors;
  // Random N(0, 0.2) values, or `fill` everywhere.
  auto add = [&](const std::string& name, Shape shape, std::optional<float> fill = {}) {
    Tensor t(DType::f32, std::move(shape));
    float* p = t.data_as<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = fill ? *fill : normal(rng);
    tensors.emplace_back(name, t);
  };
  auto norm = [&](const std::string& prefix) {
    add(prefix + ".weight", Shape{kHidden}, 1.0f);
    add(prefix + ".bias", Shape{kHidden}, 0.0f);
  };
  add("embeddings.word_embeddings.weight", Shape{o.vocab_size, kHidden});
  add("embeddings.position_embeddings.weight", Shape{kPositions, kHidden});
  add("embeddings.token_type_embeddings.weight", Shape{2, kHidden});
  norm("embeddings.LayerNorm");
  for (int64_t l = 0; l < o.checkpoint_layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    for (const char* m : {"attention.self.query", "attention.self.key", "attention.self.value",
                          "attention.output.dense"}) {
      add(p + m + ".weight", Shape{kHidden, kHidden});  // [out, in], as PyTorch stores Linear
      add(p + m + ".bias", Shape{kHidden});
    }
    norm(p + "attention.output.LayerNorm");
    add(p + "intermediate.dense.weight", Shape{kFfn, kHidden});
    add(p + "intermediate.dense.bias", Shape{kFfn});
    add(p + "output.dense.weight", Shape{kHidden, kFfn});
    add(p + "output.dense.bias", Shape{kHidden});
    norm(p + "output.LayerNorm");
  }
  if (o.with_pooler) {
    add("pooler.dense.weight", Shape{kHidden, kHidden});
    add("pooler.dense.bias", Shape{kHidden});
  }
  write_safetensors((dir / "model.safetensors").string(), tensors);
  return dir.string();
}

/// Overwrites element `index` of tensor `name` in dir/model.safetensors with `value` (e.g.
/// NaN), keeping every other byte.
inline void poke_tiny_bert_weight(const std::filesystem::path& dir, const std::string& name,
                                  int64_t index, float value) {
  const std::string path = (dir / "model.safetensors").string();
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    SafetensorsFile f = SafetensorsFile::open(path);
    for (const std::string& n : f.names()) tensors.emplace_back(n, f.get(n).clone());
  }
  for (auto& [n, t] : tensors)
    if (n == name) t.data_as<float>()[index] = value;
  write_safetensors(path, tensors);
}

}  // namespace rlx::testing
