// Llama-family decoders from GGUF: config reader, graph builder, LlamaModel (rlx/models/llama.h).
#include "rlx/models/llama.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>

#include "rlx/io/gguf.h"
#include "rlx/ir/error.h"
#include "rlx/models/bpe_tokenizer.h"
#include "rlx/opt/precision.h"
#include "rlx/runtime/session.h"
#include "weight_format.h"

namespace rlx::models {
namespace {

// `key` as an integer of any GGUF integer type, or nullopt when the file lacks it.
std::optional<int64_t> int_key(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  std::optional<int64_t> out = std::visit(
      [](const auto& x) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_same_v<T, uint64_t>)
            if (x > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
          return static_cast<int64_t>(x);
        } else {
          return std::nullopt;
        }
      },
      *v);
  check(out.has_value(), f.path() + ": metadata key '" + key + "' (at byte " +
                             std::to_string(f.value_offset(key)) + ") has type " +
                             std::string(gguf_value_type_name(gguf_type(*v))) +
                             ", expected an integer");
  return out;
}

int64_t positive_key(const GgufFile& f, const std::string& key, std::optional<int64_t> fallback) {
  std::optional<int64_t> v = int_key(f, key);
  if (!v) {
    check(fallback.has_value(), f.path() + ": missing metadata key '" + key +
                                    "' (required by the " + f.get_string("general.architecture") +
                                    " decoder)");
    return *fallback;
  }
  check(*v > 0,
        f.path() + ": metadata key '" + key + "' must be positive, found " + std::to_string(*v));
  return *v;
}

std::optional<double> float_key(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  if (const float* x = std::get_if<float>(v)) return *x;
  if (const double* x = std::get_if<double>(v)) return *x;
  throw Error(f.path() + ": metadata key '" + key + "' (at byte " +
              std::to_string(f.value_offset(key)) + ") has type " +
              std::string(gguf_value_type_name(gguf_type(*v))) + ", expected f32 or f64");
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

std::string layer_name(int64_t layer, const char* tensor) {
  return "blk." + std::to_string(layer) + "." + tensor;
}

// RoPE tables cos/sin f32[seq, R/2]: angle(p, i) = p * freq_scale * base^(-2i/R) / factor[i].
std::pair<Tensor, Tensor> rope_tables(const LlamaConfig& c, int64_t seq,
                                      std::span<const double> freq_factors) {
  const int64_t half = c.rope_dimension_count / 2;
  check(freq_factors.empty() || static_cast<int64_t>(freq_factors.size()) == half,
        "build_llama_decoder: " + std::to_string(freq_factors.size()) +
            " rope frequency factors, expected rope.dimension_count / 2 = " + std::to_string(half));
  Tensor cos(DType::f32, Shape{seq, half}), sin(DType::f32, Shape{seq, half});
  const double freq_scale = c.rope_scaling_type == "linear" ? 1.0 / c.rope_scaling_factor : 1.0;
  for (int64_t p = 0; p < seq; ++p)
    for (int64_t i = 0; i < half; ++i) {
      double theta = static_cast<double>(p) * freq_scale *
                     std::pow(c.rope_freq_base, -2.0 * static_cast<double>(i) /
                                                    static_cast<double>(c.rope_dimension_count));
      if (!freq_factors.empty()) theta /= freq_factors[static_cast<size_t>(i)];
      cos.data_as<float>()[p * half + i] = static_cast<float>(std::cos(theta));
      sin.data_as<float>()[p * half + i] = static_cast<float>(std::sin(theta));
    }
  return {cos, sin};
}

}  // namespace

Graph build_llama_decoder(const LlamaConfig& c, const LlamaWeightLayout& layout, int64_t batch,
                          int64_t seq, std::span<const double> freq_factors) {
  check(batch > 0 && seq > 0, "build_llama_decoder: batch and seq must be positive, got [" +
                                  std::to_string(batch) + ", " + std::to_string(seq) + "]");
  check(seq <= c.context_length, "build_llama_decoder: seq " + std::to_string(seq) +
                                     " exceeds context_length " + std::to_string(c.context_length));
  const int64_t H = c.embedding_length, hq = c.head_count, hkv = c.head_count_kv;
  const int64_t dk = c.key_length, dv = c.value_length;
  Graph g("llama");
  Value ids = g.input("ids", DType::i32, Shape{batch, seq});
  auto vec_param = [&](const std::string& name, int64_t n) {
    return g.param(name, DType::f32, Shape{n});
  };
  auto format_of = [&](const std::string& name) {
    auto it = layout.formats.find(name);
    check(it != layout.formats.end(),
          "build_llama_decoder: the weight layout has no format for '" + name + "'");
    return it->second;
  };
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    return g.param(name, DType::u8, Shape{rows, quant_row_bytes(format_of(name), cols)});
  };
  std::unordered_map<std::string, Value> matrices;
  auto linear = [&](Value x, const std::string& name, int64_t out, int64_t in) {
    auto it = matrices.find(name);
    if (it == matrices.end()) it = matrices.emplace(name, matrix(name, out, in)).first;
    return g.quant_matmul(x, it->second, format_of(name));
  };

  // Embedding: gather the packed rows, dequantize only them.
  const std::string embd = "token_embd.weight";
  matrices.emplace(embd, matrix(embd, c.vocab_size, H));
  Value x = g.dequantize(g.gather(matrices.at(embd), ids, 0), format_of(embd), H);

  auto [cos_t, sin_t] = rope_tables(c, seq, freq_factors);
  Value cos = g.constant(cos_t, "rope_cos"), sin = g.constant(sin_t, "rope_sin");
  Graph::AttentionOptions attn;
  attn.mask = "causal";
  attn.scale = 1.0 / std::sqrt(static_cast<double>(dk));
  // [B,S,heads*d] -> [B,heads,S,d], with qwen3's per-head RMSNorm before the transpose.
  auto heads = [&](Value t, int64_t n, int64_t d, const std::optional<std::string>& norm) {
    t = g.reshape(t, {batch, seq, n, d});
    if (norm) t = g.rms_norm(t, vec_param(*norm, d), -1, c.rms_epsilon);
    return g.transpose(t, {0, 2, 1, 3});
  };
  for (int64_t l = 0; l < c.block_count; ++l) {
    auto name = [&](const char* t) { return layer_name(l, t); };
    Value n = g.rms_norm(x, vec_param(name("attn_norm.weight"), H), -1, c.rms_epsilon);
    Value q = linear(n, name("attn_q.weight"), hq * dk, H);
    Value k = linear(n, name("attn_k.weight"), hkv * dk, H);
    Value v = linear(n, name("attn_v.weight"), hkv * dv, H);
    if (c.qkv_bias) {
      q = g.add(q, vec_param(name("attn_q.bias"), hq * dk));
      k = g.add(k, vec_param(name("attn_k.bias"), hkv * dk));
      v = g.add(v, vec_param(name("attn_v.bias"), hkv * dv));
    }
    std::optional<std::string> q_norm, k_norm;
    if (c.qk_norm) {
      q_norm = name("attn_q_norm.weight");
      k_norm = name("attn_k_norm.weight");
    }
    q = g.rope(heads(q, hq, dk, q_norm), cos, sin, c.rope_layout);
    k = g.rope(heads(k, hkv, dk, k_norm), cos, sin, c.rope_layout);
    v = heads(v, hkv, dv, std::nullopt);
    Value a = g.attention(q, k, v, attn);
    a = g.reshape(g.transpose(a, {0, 2, 1, 3}), {batch, seq, hq * dv});
    Value h = g.add(x, linear(a, name("attn_output.weight"), H, hq * dv));
    Value m = g.rms_norm(h, vec_param(name("ffn_norm.weight"), H), -1, c.rms_epsilon);
    Value gate = g.silu(linear(m, name("ffn_gate.weight"), c.feed_forward_length, H));
    Value up = linear(m, name("ffn_up.weight"), c.feed_forward_length, H);
    x = g.add(h, linear(g.mul(gate, up), name("ffn_down.weight"), H, c.feed_forward_length));
  }
  Value out = g.rms_norm(x, vec_param("output_norm.weight", H), -1, c.rms_epsilon);
  Value logits = linear(out, layout.separate_output ? "output.weight" : embd, c.vocab_size, H);
  g.set_outputs({logits});
  return g;
}

namespace {

// A 1-D tensor of the file as f32 (a view when it is F32, else converted once).
Tensor f32_vector(const GgufFile& f, const GgufTensorInfo& info) {
  check(info.type == GgmlType::F32 || info.type == GgmlType::F16 || info.type == GgmlType::BF16,
        f.path() + ": tensor '" + info.name + "' has ggml type " +
            std::string(ggml_type_info(info.type).name) + ", expected F32, F16 or BF16");
  Tensor t = f.tensor(info.name);
  if (t.dtype() == DType::f32) return t;
  Tensor out(DType::f32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) out.set_f64(i, t.get_f64(i));
  return out;
}

}  // namespace

LlamaConfig LlamaConfig::from_gguf(const GgufFile& f) {
  LlamaConfig c;
  check(f.contains("general.architecture"),
        f.path() + ": missing metadata key 'general.architecture'");
  c.architecture = f.get_string("general.architecture");
  const std::string& arch = c.architecture;
  check(arch == "llama" || arch == "qwen2" || arch == "qwen3",
        f.path() + ": general.architecture '" + arch +
            "' is not a supported decoder (llama, qwen2, qwen3)");
  const std::string p = arch + ".";
  c.block_count = positive_key(f, p + "block_count", std::nullopt);
  c.embedding_length = positive_key(f, p + "embedding_length", std::nullopt);
  c.feed_forward_length = positive_key(f, p + "feed_forward_length", std::nullopt);
  c.head_count = positive_key(f, p + "attention.head_count", std::nullopt);
  c.head_count_kv = positive_key(f, p + "attention.head_count_kv", c.head_count);
  c.context_length = positive_key(f, p + "context_length", std::nullopt);
  check(c.embedding_length % c.head_count == 0 || f.contains(p + "attention.key_length"),
        f.path() + ": " + p + "embedding_length " + std::to_string(c.embedding_length) +
            " is not divisible by " + p + "attention.head_count " + std::to_string(c.head_count) +
            " and " + p + "attention.key_length is absent");
  c.key_length = positive_key(f, p + "attention.key_length", c.embedding_length / c.head_count);
  c.value_length = positive_key(f, p + "attention.value_length", c.key_length);
  c.rope_dimension_count = positive_key(f, p + "rope.dimension_count", c.key_length);
  check(c.head_count % c.head_count_kv == 0,
        f.path() + ": " + p + "attention.head_count " + std::to_string(c.head_count) +
            " is not a multiple of " + p + "attention.head_count_kv " +
            std::to_string(c.head_count_kv));
  check(c.rope_dimension_count % 2 == 0 && c.rope_dimension_count <= c.key_length,
        f.path() + ": " + p + "rope.dimension_count " + std::to_string(c.rope_dimension_count) +
            " must be even and at most the head size " + std::to_string(c.key_length));
  std::optional<double> eps = float_key(f, p + "attention.layer_norm_rms_epsilon");
  check(eps.has_value(), f.path() + ": missing metadata key '" + p +
                             "attention.layer_norm_rms_epsilon' (required by the " + arch +
                             " decoder)");
  check(*eps > 0 && std::isfinite(*eps),
        f.path() + ": metadata key '" + p + "attention.layer_norm_rms_epsilon' must be positive");
  c.rms_epsilon = *eps;
  if (auto base = float_key(f, p + "rope.freq_base")) {
    check(*base > 0 && std::isfinite(*base),
          f.path() + ": metadata key '" + p + "rope.freq_base' must be positive");
    c.rope_freq_base = *base;
  }
  if (f.contains(p + "rope.scaling.type"))
    c.rope_scaling_type = f.get_string(p + "rope.scaling.type");
  check(c.rope_scaling_type == "none" || c.rope_scaling_type == "linear",
        f.path() + ": metadata key '" + p + "rope.scaling.type' is '" + c.rope_scaling_type +
            "', supported: none, linear");
  if (auto factor = float_key(f, p + "rope.scaling.factor")) {
    check(*factor > 0 && std::isfinite(*factor),
          f.path() + ": metadata key '" + p + "rope.scaling.factor' must be positive");
    c.rope_scaling_factor = *factor;
  }
  const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
  check(embd != nullptr && embd->shape.size() == 2,
        f.path() + ": missing 2-D tensor 'token_embd.weight' (the token embedding)");
  c.vocab_size = embd->shape[0];
  if (f.contains("tokenizer.ggml.tokens")) {
    const int64_t n =
        static_cast<int64_t>(f.get_array<std::string>("tokenizer.ggml.tokens").size());
    check(n == c.vocab_size, f.path() + ": tokenizer.ggml.tokens holds " + std::to_string(n) +
                                 " tokens but token_embd.weight has " +
                                 std::to_string(c.vocab_size) + " rows");
  }
  c.rope_layout = arch == "llama" ? "gptj" : "neox";
  c.qkv_bias = arch == "qwen2";
  c.qk_norm = arch == "qwen3";
  return c;
}

struct LlamaModel::Impl {
  std::string path;
  GgufFile file;
  LlamaOptions options;
  LlamaConfig config;
  LlamaWeightLayout layout;
  std::optional<BpeTokenizer> tokenizer;
  std::map<std::string, Tensor> weights;
  std::vector<double> freq_factors;
  PrecisionPolicy precision;
  Session session;
  std::map<std::pair<int64_t, int64_t>, std::shared_ptr<Executable>> executables;
  LlamaStats stats;

  Impl(const std::string& p, const LlamaOptions& o)
      : path(p), file(GgufFile::open(p)), options(o), session(o.device) {
    check(o.bucket >= 1, "LlamaModel: bucket must be at least 1, got " + std::to_string(o.bucket));
    precision = o.precision
                    ? *o.precision
                    : precision_from_env().value_or(PrecisionPolicy{PrecisionMode::AlwaysF32, {}});
    config = LlamaConfig::from_gguf(file);
    if (file.contains("tokenizer.ggml.model")) tokenizer = BpeTokenizer::from_gguf(file);
    load_weights();
  }

  const GgufTensorInfo& expect(const std::string& name, std::vector<int64_t> shape) {
    const GgufTensorInfo* info = file.find_tensor(name);
    check(info != nullptr,
          path + ": missing tensor '" + name + "' (expected shape " + shape_text(shape) + ")");
    check(info->shape == shape, path + ": tensor '" + name + "': expected shape " +
                                    shape_text(shape) + ", found " + shape_text(info->shape));
    return *info;
  }

  void matrix(const std::string& name, int64_t rows, int64_t cols) {
    const GgufTensorInfo& info = expect(name, {rows, cols});
    const QuantFormat format = gguf_tensor_format(info.type, path + ": tensor '" + name + "'");
    GgufTensorBytes bytes = file.tensor_bytes(name);
    layout.formats[name] = format;
    weights.emplace(name, Tensor::view_of(DType::u8, Shape{rows, quant_row_bytes(format, cols)},
                                          bytes.data(), bytes.owner));
  }

  void vector_weight(const std::string& name, int64_t n) {
    weights.emplace(name, f32_vector(file, expect(name, {n})));
  }

  void load_weights() {
    const LlamaConfig& c = config;
    const int64_t H = c.embedding_length;
    matrix("token_embd.weight", c.vocab_size, H);
    layout.separate_output = file.find_tensor("output.weight") != nullptr;
    if (layout.separate_output) matrix("output.weight", c.vocab_size, H);
    vector_weight("output_norm.weight", H);
    if (file.find_tensor("rope_freqs.weight")) {
      const Tensor t = f32_vector(file, expect("rope_freqs.weight", {c.rope_dimension_count / 2}));
      for (int64_t i = 0; i < t.numel(); ++i) {
        double v = t.get_f64(i);
        check(v > 0 && std::isfinite(v), path + ": tensor 'rope_freqs.weight' element " +
                                             std::to_string(i) + " is not a positive number");
        freq_factors.push_back(v);
      }
    }
    const int64_t q = c.head_count * c.key_length, k = c.head_count_kv * c.key_length,
                  v = c.head_count_kv * c.value_length, ffn = c.feed_forward_length;
    for (int64_t l = 0; l < c.block_count; ++l) {
      auto name = [&](const char* t) { return layer_name(l, t); };
      vector_weight(name("attn_norm.weight"), H);
      matrix(name("attn_q.weight"), q, H);
      matrix(name("attn_k.weight"), k, H);
      matrix(name("attn_v.weight"), v, H);
      matrix(name("attn_output.weight"), H, c.head_count * c.value_length);
      if (c.qkv_bias) {
        vector_weight(name("attn_q.bias"), q);
        vector_weight(name("attn_k.bias"), k);
        vector_weight(name("attn_v.bias"), v);
      }
      if (c.qk_norm) {
        vector_weight(name("attn_q_norm.weight"), c.key_length);
        vector_weight(name("attn_k_norm.weight"), c.key_length);
      }
      vector_weight(name("ffn_norm.weight"), H);
      matrix(name("ffn_gate.weight"), ffn, H);
      matrix(name("ffn_up.weight"), ffn, H);
      matrix(name("ffn_down.weight"), H, ffn);
    }
  }

  std::shared_ptr<Executable> executable(int64_t batch, int64_t seq) {
    auto key = std::make_pair(batch, seq);
    if (auto it = executables.find(key); it != executables.end()) return it->second;
    auto start = std::chrono::steady_clock::now();
    CompileOptions co;
    co.precision = precision;
    std::shared_ptr<Executable> exe =
        session.compile(build_llama_decoder(config, layout, batch, seq, freq_factors), co);
    for (const IoSpec& p : exe->params()) exe->set_param(p.name, weights.at(p.name));
    stats.compiles += 1;
    stats.compile_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    executables.emplace(key, exe);
    return exe;
  }

  Tensor logits(std::span<const int32_t> ids, int64_t batch, int64_t seq) {
    check(batch >= 1 && seq >= 1 && seq <= config.context_length,
          "LlamaModel::logits: need batch >= 1 and 1 <= seq <= context_length " +
              std::to_string(config.context_length) + ", got [" + std::to_string(batch) + ", " +
              std::to_string(seq) + "]");
    check(static_cast<int64_t>(ids.size()) == batch * seq,
          "LlamaModel::logits: ids holds " + std::to_string(ids.size()) +
              " values, expected batch * seq = " + std::to_string(batch * seq));
    for (int64_t r = 0; r < batch; ++r)
      for (int64_t j = 0; j < seq; ++j) {
        int32_t id = ids[static_cast<size_t>(r * seq + j)];
        if (id < 0 || id >= config.vocab_size)
          throw Error("LlamaModel::logits: row " + std::to_string(r) + " position " +
                      std::to_string(j) + ": token id " + std::to_string(id) +
                      " is outside the vocabulary [0, " + std::to_string(config.vocab_size) +
                      ") of " + path);
      }
    const int64_t padded = std::min(config.context_length,
                                    (seq + options.bucket - 1) / options.bucket * options.bucket);
    Tensor in(DType::i32, Shape{batch, padded});
    for (int64_t r = 0; r < batch; ++r)
      std::copy_n(ids.data() + r * seq, seq, in.data_as<int32_t>() + r * padded);
    Tensor full = executable(batch, padded)->run({{"ids", in}})[0];
    ++stats.runs;
    const int64_t V = config.vocab_size;
    Tensor out = full;
    if (padded != seq) {
      out = Tensor(DType::f32, Shape{batch, seq, V});
      for (int64_t r = 0; r < batch; ++r)
        std::copy_n(full.data_as<float>() + r * padded * V, seq * V,
                    out.data_as<float>() + r * seq * V);
    }
    const float* o = out.data_as<float>();
    for (int64_t i = 0; i < out.numel(); ++i)
      if (!std::isfinite(o[i]))
        throw Error("LlamaModel::logits: logit " + std::to_string(i % V) + " at row " +
                    std::to_string(i / V / seq) + " position " + std::to_string(i / V % seq) +
                    " is not finite under precision " + to_string(precision));
    return out;
  }
};

LlamaModel::LlamaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LlamaModel::~LlamaModel() = default;
LlamaModel::LlamaModel(LlamaModel&&) noexcept = default;
LlamaModel& LlamaModel::operator=(LlamaModel&&) noexcept = default;

LlamaModel LlamaModel::load(const std::string& path, const LlamaOptions& options) {
  return LlamaModel(std::make_unique<Impl>(path, options));
}

const LlamaConfig& LlamaModel::config() const { return impl_->config; }
const std::string& LlamaModel::path() const { return impl_->path; }
bool LlamaModel::has_tokenizer() const { return impl_->tokenizer.has_value(); }
const BpeTokenizer& LlamaModel::tokenizer() const {
  check(impl_->tokenizer.has_value(),
        impl_->path + ": the file has no tokenizer (metadata key 'tokenizer.ggml.model')");
  return *impl_->tokenizer;
}
Tensor LlamaModel::logits(std::span<const int32_t> ids, int64_t batch, int64_t seq) {
  return impl_->logits(ids, batch, seq);
}
const LlamaWeightLayout& LlamaModel::layout() const { return impl_->layout; }
int64_t LlamaModel::weight_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, t] : impl_->weights) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}
LlamaStats LlamaModel::stats() const { return impl_->stats; }

}  // namespace rlx::models
