// BERT encoder builder and config reader.
#include "rlx/models/bert.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "json_file.h"
#include "rlx/io/file.h"
#include "rlx/io/gguf.h"
#include "rlx/ir/error.h"

namespace rlx::models {
namespace {

using json = nlohmann::json;

int64_t positive_int(const json& j, const std::string& path, const char* field, int64_t fallback,
                     bool required) {
  if (!j.contains(field)) {
    check(!required, path + ": missing field '" + field + "'");
    return fallback;
  }
  const json& v = j.at(field);
  check(v.is_number_integer() && v.get<int64_t>() > 0,
        path + ": field '" + field + "' must be a positive integer, found " + json_excerpt(v));
  return v.get<int64_t>();
}

}  // namespace

BertConfig BertConfig::from_json_file(const std::string& path) {
  return from_json(read_file(path), path);
}

BertConfig BertConfig::from_json(std::string_view text, const std::string& source) {
  const std::string& path = source;  // the file's path when it came from from_json_file
  json j = parse_json(text, path);
  expect_object(j, path, "the config");
  if (j.contains("model_type")) {
    std::string type = j.at("model_type").is_string() ? j.at("model_type").get<std::string>() : "";
    check(type == "bert" || type == "roberta" || type == "xlm-roberta" || type == "distilbert" ||
              type == "minilm",
          path + ": model_type '" + type + "' is not a BERT-family encoder");
  }
  if (j.contains("position_embedding_type"))
    check(j.at("position_embedding_type") == "absolute",
          path + ": position_embedding_type " + j.at("position_embedding_type").dump() +
              " is not supported (only \"absolute\")");
  BertConfig c;
  c.vocab_size = positive_int(j, path, "vocab_size", 0, true);
  c.hidden_size = positive_int(j, path, "hidden_size", 0, true);
  c.num_hidden_layers = positive_int(j, path, "num_hidden_layers", 0, true);
  c.num_attention_heads = positive_int(j, path, "num_attention_heads", 0, true);
  c.intermediate_size = positive_int(j, path, "intermediate_size", 0, true);
  c.max_position_embeddings = positive_int(j, path, "max_position_embeddings", 512, false);
  c.type_vocab_size = positive_int(j, path, "type_vocab_size", 2, false);
  if (j.contains("layer_norm_eps")) {
    check(j.at("layer_norm_eps").is_number() && j.at("layer_norm_eps").get<double>() > 0,
          path + ": field 'layer_norm_eps' must be a positive number");
    c.layer_norm_eps = j.at("layer_norm_eps").get<double>();
  }
  if (j.contains("hidden_act")) {
    check(j.at("hidden_act").is_string(), path + ": field 'hidden_act' must be a string");
    c.hidden_act = j.at("hidden_act").get<std::string>();
  }
  check(c.hidden_act == "gelu" || c.hidden_act == "gelu_new" ||
            c.hidden_act == "gelu_pytorch_tanh" || c.hidden_act == "relu",
        path + ": hidden_act '" + c.hidden_act +
            "' is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu)");
  check(c.hidden_size % c.num_attention_heads == 0,
        path + ": hidden_size " + std::to_string(c.hidden_size) +
            " is not divisible by num_attention_heads " + std::to_string(c.num_attention_heads));
  return c;
}

BertConfig BertConfig::from_gguf(const GgufFile& file) {
  const std::string& path = file.path();
  const std::string& arch = file.get_string("general.architecture");
  check(arch == "bert",
        path + ": general.architecture is '" + arch +
            "', expected 'bert' (a BERT-family encoder in llama.cpp's conventions)");
  auto size = [&](const std::string& key) {
    uint32_t v = file.get<uint32_t>(key);
    check(v > 0, path + ": metadata key '" + key + "' must be positive, found 0");
    return static_cast<int64_t>(v);
  };
  BertConfig c;
  c.vocab_size = static_cast<int64_t>(file.get_array<std::string>("tokenizer.ggml.tokens").size());
  check(c.vocab_size > 0, path + ": tokenizer.ggml.tokens is empty");
  c.hidden_size = size("bert.embedding_length");
  c.num_hidden_layers = size("bert.block_count");
  c.num_attention_heads = size("bert.attention.head_count");
  c.intermediate_size = size("bert.feed_forward_length");
  c.max_position_embeddings = size("bert.context_length");
  if (file.contains("tokenizer.ggml.token_type_count"))
    c.type_vocab_size = size("tokenizer.ggml.token_type_count");
  const float eps = file.get<float>("bert.attention.layer_norm_epsilon");
  check(eps > 0, path + ": metadata key 'bert.attention.layer_norm_epsilon' must be positive");
  c.layer_norm_eps = eps;
  c.hidden_act = "gelu";
  check(c.hidden_size % c.num_attention_heads == 0,
        path + ": bert.embedding_length " + std::to_string(c.hidden_size) +
            " is not divisible by bert.attention.head_count " +
            std::to_string(c.num_attention_heads));
  return c;
}

std::string bert_gguf_tensor_name(const std::string& name) {
  static const std::pair<std::string_view, std::string_view> kEmbeddings[] = {
      {"embeddings.word_embeddings.weight", "token_embd.weight"},
      {"embeddings.position_embeddings.weight", "position_embd.weight"},
      {"embeddings.token_type_embeddings.weight", "token_types.weight"},
      {"embeddings.LayerNorm.weight", "token_embd_norm.weight"},
      {"embeddings.LayerNorm.bias", "token_embd_norm.bias"},
  };
  static const std::pair<std::string_view, std::string_view> kLayer[] = {
      {"attention.self.query", "attn_q"},
      {"attention.self.key", "attn_k"},
      {"attention.self.value", "attn_v"},
      {"attention.self.qkv", "attn_qkv"},  // build_bert_encoder's fused_qkv
      {"attention.output.dense", "attn_output"},
      {"attention.output.LayerNorm", "attn_output_norm"},
      {"intermediate.dense", "ffn_up"},
      {"output.dense", "ffn_down"},
      {"output.LayerNorm", "layer_output_norm"},
  };
  for (const auto& [hf, gguf] : kEmbeddings)
    if (name == hf) return std::string(gguf);
  const std::string_view prefix = "encoder.layer.";
  if (name.rfind(prefix, 0) == 0) {
    size_t dot = name.find('.', prefix.size());
    std::string layer = name.substr(prefix.size(), dot - prefix.size());
    bool digits = !layer.empty() && dot != std::string::npos &&
                  layer.find_first_not_of("0123456789") == std::string::npos;
    if (digits) {
      std::string rest = name.substr(dot + 1);
      for (const auto& [hf, gguf] : kLayer)
        for (std::string_view suffix : {".weight", ".bias"})
          if (rest == std::string(hf) + std::string(suffix))
            return "blk." + layer + "." + std::string(gguf) + std::string(suffix);
    }
  }
  throw Error("tensor '" + name + "' has no name in llama.cpp's BERT GGUF conventions");
}

std::vector<SentenceTransformersModule> parse_modules_json(std::string_view text,
                                                           const std::string& source) {
  json list = parse_json(text, source);
  check(list.is_array(),
        source + ": expected a JSON array of module objects, found " + json_excerpt(list));
  std::vector<SentenceTransformersModule> modules;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& m = list[i];
    expect_object(m, source, "module " + std::to_string(i));
    SentenceTransformersModule module;
    module.type = string_field(m, source, "type", "");
    module.path = string_field(m, source, "path", "");
    modules.push_back(std::move(module));
  }
  return modules;
}

std::string parse_pooling_config(std::string_view text, const std::string& source) {
  json p = parse_json(text, source);
  expect_object(p, source, "the pooling config");
  if (bool_field(p, source, "pooling_mode_cls_token", false)) return "cls";
  if (bool_field(p, source, "pooling_mode_mean_tokens", false)) return "mean";
  throw Error(source + ": only mean and cls pooling are supported");
}

PoolingOptions read_pooling_options(const std::string& dir) {
  namespace fs = std::filesystem;
  PoolingOptions pooling;
  const std::string modules = (fs::path(dir) / "modules.json").string();
  if (!fs::exists(modules)) return pooling;  // a plain BERT dir: mean pooling, normalised
  pooling.normalize = false;
  for (const SentenceTransformersModule& m : parse_modules_json(read_file(modules), modules)) {
    if (m.type.find("Normalize") != std::string::npos) pooling.normalize = true;
    if (m.type.find("Pooling") == std::string::npos) continue;
    const std::string cfg = (fs::path(dir) / m.path / "config.json").string();
    pooling.mode = parse_pooling_config(read_file(cfg), cfg);
  }
  return pooling;
}

bool is_ignored_checkpoint_tensor(std::string_view name) {
  if (name.rfind("bert.", 0) == 0) name.remove_prefix(5);
  return name.rfind("pooler.", 0) == 0 || name.rfind("cls.", 0) == 0 ||
         name == "embeddings.position_ids";
}

bool is_transposed_linear_weight(const std::string& name) {
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return name.rfind("encoder.layer.", 0) == 0 && ends_with(".weight") &&
         name.find("LayerNorm") == std::string::npos;
}

Graph build_bert_encoder(const BertConfig& c, int64_t batch, int64_t seq,
                         const PoolingOptions& pooling,
                         const std::map<std::string, QuantFormat>& weight_formats,
                         const std::string& act_quant, DType linear_dtype, bool fused_qkv) {
  check(batch > 0 && seq > 0, "build_bert_encoder: batch and seq must be positive, got [" +
                                  std::to_string(batch) + ", " + std::to_string(seq) + "]");
  check(seq <= c.max_position_embeddings, "build_bert_encoder: seq " + std::to_string(seq) +
                                              " exceeds max_position_embeddings " +
                                              std::to_string(c.max_position_embeddings));
  check(pooling.mode == "mean" || pooling.mode == "cls",
        "build_bert_encoder: pooling mode '" + pooling.mode + "' is not mean or cls");
  check(linear_dtype == DType::f32 || linear_dtype == DType::bf16 || linear_dtype == DType::f16,
        "build_bert_encoder: linear_dtype must be f32, bf16 or f16, got " +
            std::string(dtype_name(linear_dtype)));
  const int64_t H = c.hidden_size, heads = c.num_attention_heads, dh = H / heads;
  Graph g("bert");
  Value ids = g.input("input_ids", DType::i32, Shape{batch, seq});
  Value mask = g.input("attention_mask", DType::i32, Shape{batch, seq});
  Value types = g.input("token_type_ids", DType::i32, Shape{batch, seq});

  auto param = [&](const std::string& name, Shape shape) {
    return g.param(name, DType::f32, std::move(shape));
  };
  auto layer_norm = [&](Value x, const std::string& prefix) {
    return g.layer_norm(x, param(prefix + ".weight", Shape{H}), param(prefix + ".bias", Shape{H}),
                        -1, c.layer_norm_eps);
  };
  auto linear = [&](Value x, const std::string& prefix, int64_t in, int64_t out) {
    Value bias = param(prefix + ".bias", Shape{out});
    const std::string name = prefix + ".weight";
    auto it = weight_formats.find(name);
    if (it == weight_formats.end() || it->second == QuantFormat::kF32) {
      Value w = g.param(name, linear_dtype, Shape{in, out});
      // Exact widening: AMP looks through it when the matmul computes in linear_dtype.
      if (linear_dtype != DType::f32) w = g.convert(w, DType::f32);
      return g.add(g.matmul(x, w), bias);
    }
    Value w = g.param(name, DType::u8, Shape{out, quant_row_bytes(it->second, in)});
    // int8 activations need a block format: f16 / bf16 weights multiply in float either way.
    const bool block = quant_format_info(it->second).block_size >= 32;
    return g.add(g.quant_matmul(x, w, it->second, block ? act_quant : "none"), bias);
  };
  auto activation = [&](Value x) {
    if (c.hidden_act == "gelu") return g.gelu(x);
    if (c.hidden_act == "relu") return g.relu(x);
    return g.gelu_tanh(x);
  };

  // Embeddings: word + absolute position + token type, then LayerNorm.
  Value word;
  const std::string word_name = "embeddings.word_embeddings.weight";
  if (auto it = weight_formats.find(word_name);
      it != weight_formats.end() && it->second != QuantFormat::kF32) {
    Value table =
        g.param(word_name, DType::u8, Shape{c.vocab_size, quant_row_bytes(it->second, H)});
    word = g.dequantize(g.gather(table, ids, 0), it->second, H);
  } else {
    word = g.gather(param(word_name, Shape{c.vocab_size, H}), ids, 0);
  }
  Value pos_table =
      param("embeddings.position_embeddings.weight", Shape{c.max_position_embeddings, H});
  Value pos = g.slice(pos_table, {0, 0}, {seq, H});
  Value type = g.gather(
      param("embeddings.token_type_embeddings.weight", Shape{c.type_vocab_size, H}), types, 0);
  Value x = layer_norm(g.add(g.add(word, pos), type), "embeddings.LayerNorm");

  // Padded keys are excluded exactly: a bool mask [B,1,1,S] broadcast over heads and queries.
  Value zero = g.scalar(0, DType::i32);
  Value key_mask = g.reshape(g.ne(mask, zero), {batch, 1, 1, seq});
  Graph::AttentionOptions attn;
  attn.mask = "bool";
  auto split_heads = [&](Value t) {  // [B,S,H] -> [B,heads,S,dh]
    return g.transpose(g.reshape(t, {batch, seq, heads, dh}), {0, 2, 1, 3});
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    std::string p = "encoder.layer." + std::to_string(l) + ".";
    Value q, k, v;
    if (fused_qkv) {
      // One [B*S, H] x [H, 3H] projection; [B,S,3H] -> [B,S,3,heads,dh] -> one transpose to
      // [3,B,heads,S,dh], whose leading-axis slices are q, k and v.
      Value qkv = linear(x, p + "attention.self.qkv", H, 3 * H);
      Value t = g.transpose(g.reshape(qkv, {batch, seq, 3, heads, dh}), {2, 0, 3, 1, 4});
      auto part = [&](int64_t i) {
        return g.reshape(g.slice(t, {i, 0, 0, 0, 0}, {i + 1, batch, heads, seq, dh}),
                         {batch, heads, seq, dh});
      };
      q = part(0), k = part(1), v = part(2);
    } else {
      q = split_heads(linear(x, p + "attention.self.query", H, H));
      k = split_heads(linear(x, p + "attention.self.key", H, H));
      v = split_heads(linear(x, p + "attention.self.value", H, H));
    }
    Value a = g.attention(q, k, v, attn, key_mask);
    a = g.reshape(g.transpose(a, {0, 2, 1, 3}), {batch, seq, H});
    Value h = layer_norm(g.add(linear(a, p + "attention.output.dense", H, H), x),
                         p + "attention.output.LayerNorm");
    Value f = activation(linear(h, p + "intermediate.dense", H, c.intermediate_size));
    x = layer_norm(g.add(linear(f, p + "output.dense", c.intermediate_size, H), h),
                   p + "output.LayerNorm");
  }

  Value pooled;
  if (pooling.mode == "cls") {
    pooled = g.reshape(g.slice(x, {0, 0, 0}, {batch, 1, H}), {batch, H});
  } else {
    // sentence-transformers mean pooling: sum(h * mask) / max(sum(mask), 1e-9).
    Value m = g.reshape(g.convert(mask, DType::f32), {batch, seq, 1});
    Value summed = g.reduce_sum(g.mul(x, m), {1});
    Value count = g.max(g.reduce_sum(m, {1}), g.scalar(1e-9, DType::f32));
    pooled = g.div(summed, count);
  }
  if (pooling.normalize) {
    // torch.nn.functional.normalize: x / max(||x||_2, 1e-12).
    Value norm = g.sqrt(g.reduce_sum(g.mul(pooled, pooled), {1}, true));
    pooled = g.div(pooled, g.max(norm, g.scalar(1e-12, DType::f32)));
  }
  std::vector<Value> outs{pooled};
  g.set_outputs(outs);
  return g;
}

}  // namespace rlx::models
