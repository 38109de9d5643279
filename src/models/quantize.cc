// rlx quantize: BERT model directories and GGUF files to GGUF files of one ggml format.
#include "rlx/models/quantize.h"

#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "json_file.h"
#include "rlx/io/file.h"
#include "rlx/io/gguf.h"
#include "rlx/io/safetensors.h"
#include "rlx/ir/error.h"
#include "rlx/models/bert.h"
#include "rlx/models/tokenizer.h"
#include "rlx/runtime/threading.h"
#include "weight_format.h"

namespace rlx::models {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The --type names rlx quantize writes (a llama.cpp file type and an rlx quantizer).
constexpr std::string_view kTargetNames =
    "f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K or q6_K";

// gguf-py's LlamaFileType for a file whose matrices are in `f` (K-quants: the _S presets, the
// closest to one format throughout). Throws for formats without one.
uint32_t llama_file_type(QuantFormat f) {
  switch (f) {
    case QuantFormat::kF32:
      return 0;  // ALL_F32
    case QuantFormat::kF16:
      return 1;  // MOSTLY_F16
    case QuantFormat::kQ4_0:
      return 2;
    case QuantFormat::kQ4_1:
      return 3;
    case QuantFormat::kQ8_0:
      return 7;
    case QuantFormat::kQ5_0:
      return 8;
    case QuantFormat::kQ5_1:
      return 9;
    case QuantFormat::kQ2_K:
      return 10;
    case QuantFormat::kQ3_K:
      return 11;  // MOSTLY_Q3_K_S
    case QuantFormat::kQ4_K:
      return 14;  // MOSTLY_Q4_K_S
    case QuantFormat::kQ5_K:
      return 16;  // MOSTLY_Q5_K_S
    case QuantFormat::kQ6_K:
      return 18;
    case QuantFormat::kBF16:
      return 32;  // MOSTLY_BF16
    default:
      throw Error("rlx quantize: --type " + std::string(quant_format_info(f).name) +
                  " has no llama.cpp file type" +
                  (f == QuantFormat::kQ8_K ? " (ggml's intermediate format for activations)" : "") +
                  "; expected " + std::string(kTargetNames));
  }
}

GgmlType ggml_type_of_format(QuantFormat f) {
  return static_cast<GgmlType>(quant_format_info(f).ggml_type);
}

// The tensors of the output file: bytes either owned here or views of the input's mapping.
class OutTensors {
 public:
  void add_owned(std::string name, QuantFormat f, std::vector<int64_t> shape,
                 std::vector<uint8_t> bytes) {
    owned_.push_back(std::move(bytes));
    const std::vector<uint8_t>& b = owned_.back();
    tensors_.push_back({std::move(name), ggml_type_of_format(f), std::move(shape),
                        std::as_bytes(std::span(b.data(), b.size()))});
  }
  void add_view(std::string name, GgmlType type, std::vector<int64_t> shape,
                std::span<const std::byte> bytes) {
    tensors_.push_back({std::move(name), type, std::move(shape), bytes});
  }
  const std::vector<GgufTensorData>& tensors() const { return tensors_; }

 private:
  std::vector<std::vector<uint8_t>> owned_;  // a moved vector keeps its buffer
  std::vector<GgufTensorData> tensors_;
};

// `rows` rows of `row` f32 values at `src` in format `f` (llama.cpp's reference quantizers),
// rows in parallel.
std::vector<uint8_t> quantize_rows(QuantFormat f, const float* src, int64_t rows, int64_t row) {
  const int64_t row_bytes = quant_row_bytes(f, row);
  std::vector<uint8_t> out(static_cast<size_t>(rows * row_bytes));
  parallel_for(0, rows, 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      quantize_row(f, src + r * row, out.data() + r * row_bytes, row);
  });
  return out;
}

void check_target_format(QuantFormat f) {
  check(quant_format_info(f).has_quantizer,
        "rlx quantize: --type " + std::string(quant_format_info(f).name) +
            " is read by rlx but not written (no quantizer); expected " +
            std::string(kTargetNames));
  llama_file_type(f);  // throws for a format llama.cpp has no file type for
}

// Common metadata of every output file: general.file_type and general.quantization_version.
void set_file_type(GgufMetadata& md, QuantFormat f) {
  auto set = [&](const std::string& key, GgufValue v) {
    for (auto& [k, value] : md)
      if (k == key) {
        value = std::move(v);
        return;
      }
    md.emplace_back(key, std::move(v));
  };
  set("general.file_type", GgufValue(llama_file_type(f)));
  set("general.quantization_version", GgufValue(uint32_t{2}));  // GGML_QUANT_VERSION
}

// ---- a Hugging Face BERT directory ----------------------------------------------------------

// The vocabulary of tokenizer.json in llama.cpp's BERT form (convert_hf_to_gguf.py's
// get_vocab_base + BertModel.set_vocab): one token per id up to vocab_size ("[PAD<i>]",
// UNUSED, for ids without one), special added tokens CONTROL and stored as is, other added
// tokens USER_DEFINED, "##x" as "x" and any other non-CONTROL token as U+2581 + token.
void add_bert_vocab(GgufMetadata& md, const std::string& dir, const BertConfig& config) {
  const std::string path = (fs::path(dir) / "tokenizer.json").string();
  // Validates the file as the embedder reads it, and gives the special tokens.
  const WordPieceTokenizer tok = WordPieceTokenizer::from_tokenizer_json(path);
  const json j = read_json_file(path);
  const json* normalizer = j.contains("normalizer") ? &j.at("normalizer") : nullptr;
  check(normalizer != nullptr && normalizer->is_object() &&
            normalizer->value("lowercase", false) == true,
        path +
            ": the normalizer does not lowercase; llama.cpp's WordPiece (WPM) tokenizer "
            "always lowercases, so a cased vocabulary cannot be written as a BERT GGUF");
  constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;
  const auto n = static_cast<size_t>(config.vocab_size);
  std::vector<std::string> tokens(n);
  std::vector<int32_t> types(n, kUnused);
  for (const auto& [token, id] : j.at("model").at("vocab").items()) {
    const int64_t i = id.get<int64_t>();
    if (i < 0 || i >= config.vocab_size) continue;
    tokens[static_cast<size_t>(i)] = token;
    types[static_cast<size_t>(i)] = kNormal;
  }
  if (j.contains("added_tokens") && j.at("added_tokens").is_array())
    for (const json& a : j.at("added_tokens")) {
      const int64_t i = a.at("id").get<int64_t>();
      if (i < 0 || i >= config.vocab_size) continue;
      tokens[static_cast<size_t>(i)] = a.at("content").get<std::string>();
      types[static_cast<size_t>(i)] = a.value("special", false) ? kControl : kUserDefined;
    }
  for (size_t i = 0; i < n; ++i) {
    if (types[i] == kUnused) tokens[i] = "[PAD" + std::to_string(i) + "]";
    if (types[i] == kControl) continue;
    if (tokens[i].rfind("##", 0) == 0 && tokens[i].size() > 2)
      tokens[i] = tokens[i].substr(2);
    else
      tokens[i] = "\xE2\x96\x81" + tokens[i];
  }
  md.emplace_back("tokenizer.ggml.model", GgufValue(std::string("bert")));
  md.emplace_back("tokenizer.ggml.pre", GgufValue(std::string("default")));
  md.emplace_back("tokenizer.ggml.tokens", GgufValue(GgufArray(std::move(tokens))));
  md.emplace_back("tokenizer.ggml.token_type", GgufValue(GgufArray(std::move(types))));
  auto id = [](int32_t v) { return GgufValue(static_cast<uint32_t>(v)); };
  md.emplace_back("tokenizer.ggml.bos_token_id", id(tok.cls_id()));
  md.emplace_back("tokenizer.ggml.eos_token_id", id(tok.sep_id()));
  md.emplace_back("tokenizer.ggml.unknown_token_id", id(tok.unk_id()));
  md.emplace_back("tokenizer.ggml.seperator_token_id", id(tok.sep_id()));
  md.emplace_back("tokenizer.ggml.padding_token_id", id(tok.pad_id()));
  const std::vector<int32_t> mask = tok.encode("[MASK]", false);
  if (mask.size() == 1 && tok.id_to_token(mask[0]) == "[MASK]")
    md.emplace_back("tokenizer.ggml.mask_token_id", id(mask[0]));
  md.emplace_back("tokenizer.ggml.add_bos_token", GgufValue(true));
  md.emplace_back("tokenizer.ggml.add_eos_token", GgufValue(true));
  md.emplace_back("tokenizer.ggml.add_sep_token", GgufValue(false));
}

QuantizeSummary quantize_bert_dir(const std::string& dir, const std::string& out,
                                  QuantFormat format) {
  QuantizeSummary summary;
  summary.source = "bert model directory";
  const std::string config_path = (fs::path(dir) / "config.json").string();
  check(fs::is_regular_file(config_path),
        dir + ": not a BERT model directory (no config.json) and not a .gguf file");
  const BertConfig config = BertConfig::from_json_file(config_path);
  check(config.hidden_act == "gelu",
        config_path + ": hidden_act '" + config.hidden_act +
            "' cannot be written as a BERT GGUF (llama.cpp's BERT graph uses gelu)");
  const PoolingOptions pooling = read_pooling_options(dir);

  GgufMetadata md;
  md.emplace_back("general.architecture", GgufValue(std::string("bert")));
  md.emplace_back("general.type", GgufValue(std::string("model")));
  fs::path name = fs::absolute(fs::path(dir)).lexically_normal();
  if (name.filename().empty()) name = name.parent_path();  // "/a/model/" -> "model"
  md.emplace_back("general.name", GgufValue(name.filename().string()));
  auto u32 = [](int64_t v) { return GgufValue(static_cast<uint32_t>(v)); };
  md.emplace_back("bert.context_length", u32(config.max_position_embeddings));
  md.emplace_back("bert.embedding_length", u32(config.hidden_size));
  md.emplace_back("bert.feed_forward_length", u32(config.intermediate_size));
  md.emplace_back("bert.block_count", u32(config.num_hidden_layers));
  md.emplace_back("bert.attention.head_count", u32(config.num_attention_heads));
  md.emplace_back("bert.attention.layer_norm_epsilon",
                  GgufValue(static_cast<float>(config.layer_norm_eps)));
  md.emplace_back("bert.attention.causal", GgufValue(false));
  md.emplace_back("bert.pooling_type", u32(pooling.mode == "cls" ? 2 : 1));  // PoolingType
  set_file_type(md, format);
  md.emplace_back("tokenizer.ggml.token_type_count", u32(config.type_vocab_size));
  add_bert_vocab(md, dir, config);

  const std::string st_path = (fs::path(dir) / "model.safetensors").string();
  SafetensorsFile st = SafetensorsFile::open(st_path);
  summary.bytes_in = static_cast<int64_t>(fs::file_size(st_path));
  OutTensors outs;
  std::set<std::string> used;
  Graph g = build_bert_encoder(config, 1, 1, pooling);
  for (int32_t id : g.params()) {
    const Node& n = g.node(id);
    std::string key = n.name;
    if (!st.contains(key) && st.contains("bert." + key)) key = "bert." + key;
    check(st.contains(key), st_path + ": missing tensor '" + n.name + "'");
    used.insert(key);
    Tensor t = st.get(key);
    const bool linear = is_transposed_linear_weight(n.name);
    const Shape& want = n.results[0].shape;
    const Shape expected = linear ? Shape{want[1], want[0]} : want;
    check(t.dtype() == DType::f32 && t.shape() == expected,
          st_path + ": tensor '" + key + "': expected f32" + expected.to_string() + ", found " +
              t.type().to_string());
    const std::string name = bert_gguf_tensor_name(n.name);
    // convert_hf_to_gguf.py: 1-D tensors and position / token type embeddings stay F32.
    const bool matrix =
        t.shape().rank() == 2 && name != "position_embd.weight" && name != "token_types.weight";
    QuantFormat f = QuantFormat::kF32;
    if (matrix && format != QuantFormat::kF32) {
      const int64_t row = t.shape()[1];
      f = fitting_quant_format(format, row,
                               st_path + ": tensor '" + key + "' " + t.shape().to_string());
      if (f != format) summary.fallbacks.emplace_back(name, f);
      ++summary.quantized;
    }
    const int64_t row = t.shape()[t.shape().rank() - 1];
    outs.add_owned(name, f, t.shape().dims(),
                   quantize_rows(f, t.data_as<float>(), t.numel() / row, row));
  }
  std::vector<std::string> unused;
  for (const std::string& key : st.names()) {
    if (!used.count(key) && !is_ignored_checkpoint_tensor(key)) unused.push_back(key);
  }
  if (!unused.empty())
    throw Error(st_path + ": " + std::to_string(unused.size()) + " tensor(s) not used by the " +
                std::to_string(config.num_hidden_layers) + "-layer encoder that " + config_path +
                " describes, the first '" + unused[0] +
                "'; config.json does not match the checkpoint");
  write_gguf(out, md, outs.tensors());
  summary.tensors = static_cast<int64_t>(outs.tensors().size());
  return summary;
}

// ---- a GGUF file ----------------------------------------------------------------------------

// llama-quantize's rule (llama-quant.cpp): weights of 2 or more dims, except the positional
// and token type embeddings (BERT) and MoE router weights.
bool requantizable(const GgufTensorInfo& t) {
  auto ends_with = [&](std::string_view suffix) {
    return t.name.size() >= suffix.size() &&
           t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with("weight") && t.shape.size() >= 2 && t.name != "position_embd.weight" &&
         t.name != "token_types.weight" && !ends_with("ffn_gate_inp.weight");
}

QuantizeSummary requantize_gguf(const std::string& in, const std::string& out, QuantFormat format) {
  QuantizeSummary summary;
  summary.source = "gguf";
  GgufFile file = GgufFile::open(in);
  summary.bytes_in = static_cast<int64_t>(file.file_size());
  GgufMetadata md = file.metadata();
  set_file_type(md, format);
  OutTensors outs;
  for (const GgufTensorInfo& t : file.tensors()) {
    GgufTensorBytes bytes = file.tensor_bytes(t.name);
    if (!requantizable(t)) {
      outs.add_view(t.name, t.type, t.shape, bytes.bytes);
      continue;
    }
    const int64_t row = t.shape.back(), rows = t.numel() / row;
    const std::string what = in + ": tensor '" + t.name + "' " + Shape(t.shape).to_string();
    const QuantFormat f = fitting_quant_format(format, row, what);
    if (f != format) summary.fallbacks.emplace_back(t.name, f);
    ++summary.quantized;
    if (t.type == ggml_type_of_format(f)) {  // already in the target type: copied
      outs.add_view(t.name, t.type, t.shape, bytes.bytes);
      continue;
    }
    const QuantFormat source = gguf_tensor_format(t.type, what);
    std::vector<float> values(static_cast<size_t>(t.numel()));
    const auto* src = reinterpret_cast<const uint8_t*>(bytes.data());
    const int64_t src_row_bytes = quant_row_bytes(source, row);
    parallel_for(0, rows, 8, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        dequantize_row(source, src + r * src_row_bytes, values.data() + r * row, row);
    });
    outs.add_owned(t.name, f, t.shape, quantize_rows(f, values.data(), rows, row));
  }
  write_gguf(out, md, outs.tensors(), file.alignment());
  summary.tensors = static_cast<int64_t>(outs.tensors().size());
  return summary;
}

}  // namespace

QuantFormat quantize_target_format(std::string_view name) {
  QuantFormat f{};
  try {
    f = quant_format_from_name(name);
  } catch (const Error&) {
    throw Error("rlx quantize: unknown --type '" + std::string(name) + "'; expected " +
                std::string(kTargetNames));
  }
  check_target_format(f);
  return f;
}

QuantizeSummary quantize_model(const std::string& in, const std::string& out, QuantFormat format) {
  const auto t0 = std::chrono::steady_clock::now();
  check_target_format(format);
  check(fs::exists(in), in + ": no such file or directory (expected a BERT model directory or a "
                             ".gguf file)");
  QuantizeSummary s =
      fs::is_directory(in) ? quantize_bert_dir(in, out, format) : requantize_gguf(in, out, format);
  s.bytes_out = static_cast<int64_t>(fs::file_size(out));
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace rlx::models
