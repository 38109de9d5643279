// Llama-family decoders from GGUF: config reader, graph builder, LlamaModel (rlx/models/llama.h).
#include "rlx/models/llama.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
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

// The parts every decoder graph shares (llm_build_llama): the packed weights as params, the
// embedding, one transformer block around an attention callback, and the output head. The
// full-sequence forward and the cached step differ only in RoPE tables and attention.
class DecoderBuilder {
 public:
  // attention(layer, q [B,hq,S,dk] roped, k [B,hkv,S,dk] roped, v [B,hkv,S,dv]) -> [B,hq,S,dv]
  using Attend = std::function<Value(int64_t, Value, Value, Value)>;

  DecoderBuilder(Graph& g, const LlamaConfig& c, const LlamaWeightLayout& layout, int64_t batch,
                 int64_t seq)
      : g_(g), c_(c), layout_(layout), batch_(batch), seq_(seq) {}

  // ids i32[B,S] -> x f32[B,S,H]: gather the packed rows, dequantize only them.
  Value embed(Value ids) {
    const std::string embd = "token_embd.weight";
    return g_.dequantize(g_.gather(matrix(embd, c_.vocab_size, c_.embedding_length), ids, 0),
                         format_of(embd), c_.embedding_length);
  }

  // x' = h + ffn_down(silu(ffn_gate(n)) * ffn_up(n)), h = x + attn_output(attention(...)).
  Value layer(int64_t l, Value x, Value cos, Value sin, const Attend& attend) {
    const int64_t H = c_.embedding_length, hq = c_.head_count, hkv = c_.head_count_kv;
    const int64_t dk = c_.key_length, dv = c_.value_length;
    auto name = [&](const char* t) { return layer_name(l, t); };
    Value n = g_.rms_norm(x, vec_param(name("attn_norm.weight"), H), -1, c_.rms_epsilon);
    Value q = linear(n, name("attn_q.weight"), hq * dk, H);
    Value k = linear(n, name("attn_k.weight"), hkv * dk, H);
    Value v = linear(n, name("attn_v.weight"), hkv * dv, H);
    if (c_.qkv_bias) {
      q = g_.add(q, vec_param(name("attn_q.bias"), hq * dk));
      k = g_.add(k, vec_param(name("attn_k.bias"), hkv * dk));
      v = g_.add(v, vec_param(name("attn_v.bias"), hkv * dv));
    }
    std::optional<std::string> q_norm, k_norm;
    if (c_.qk_norm) {
      q_norm = name("attn_q_norm.weight");
      k_norm = name("attn_k_norm.weight");
    }
    q = g_.rope(heads(q, hq, dk, q_norm), cos, sin, c_.rope_layout);
    k = g_.rope(heads(k, hkv, dk, k_norm), cos, sin, c_.rope_layout);
    v = heads(v, hkv, dv, std::nullopt);
    Value a = attend(l, q, k, v);
    a = g_.reshape(g_.transpose(a, {0, 2, 1, 3}), {batch_, seq_, hq * dv});
    Value h = g_.add(x, linear(a, name("attn_output.weight"), H, hq * dv));
    Value m = g_.rms_norm(h, vec_param(name("ffn_norm.weight"), H), -1, c_.rms_epsilon);
    Value gate = g_.silu(linear(m, name("ffn_gate.weight"), c_.feed_forward_length, H));
    Value up = linear(m, name("ffn_up.weight"), c_.feed_forward_length, H);
    return g_.add(h, linear(g_.mul(gate, up), name("ffn_down.weight"), H, c_.feed_forward_length));
  }

  // logits = output(rms_norm(x, output_norm)), output = token_embd when tied.
  Value head(Value x) {
    const int64_t H = c_.embedding_length;
    Value out = g_.rms_norm(x, vec_param("output_norm.weight", H), -1, c_.rms_epsilon);
    return linear(out, layout_.separate_output ? "output.weight" : "token_embd.weight",
                  c_.vocab_size, H);
  }

 private:
  Value vec_param(const std::string& name, int64_t n) {
    return g_.param(name, DType::f32, Shape{n});
  }
  QuantFormat format_of(const std::string& name) const {
    auto it = layout_.formats.find(name);
    check(it != layout_.formats.end(),
          "build_llama_decoder: the weight layout has no format for '" + name + "'");
    return it->second;
  }
  // The packed matrix param `name` (declared once; the tied head reuses the embedding's).
  Value matrix(const std::string& name, int64_t rows, int64_t cols) {
    auto it = matrices_.find(name);
    if (it == matrices_.end())
      it = matrices_
               .emplace(name, g_.param(name, DType::u8,
                                       Shape{rows, quant_row_bytes(format_of(name), cols)}))
               .first;
    return it->second;
  }
  Value linear(Value x, const std::string& name, int64_t out, int64_t in) {
    // int8 activations for the block formats, as llama.cpp (its vec_dot kernels quantize x to
    // Q8 blocks): the CPU's integer kernels, and the same rounding on every other backend.
    const QuantFormat f = format_of(name);
    return g_.quant_matmul(x, matrix(name, out, in), f,
                           quant_format_info(f).block_size >= 32 ? layout_.act_quant : "none");
  }
  // [B,S,heads*d] -> [B,heads,S,d], with qwen3's per-head RMSNorm before the transpose.
  Value heads(Value t, int64_t n, int64_t d, const std::optional<std::string>& norm) {
    t = g_.reshape(t, {batch_, seq_, n, d});
    if (norm) t = g_.rms_norm(t, vec_param(*norm, d), -1, c_.rms_epsilon);
    return g_.transpose(t, {0, 2, 1, 3});
  }

  Graph& g_;
  const LlamaConfig& c_;
  const LlamaWeightLayout& layout_;
  int64_t batch_, seq_;
  std::unordered_map<std::string, Value> matrices_;
};

Graph::AttentionOptions attention_options(const LlamaConfig& c, std::string mask) {
  Graph::AttentionOptions attn;
  attn.mask = std::move(mask);
  attn.scale = 1.0 / std::sqrt(static_cast<double>(c.key_length));
  return attn;
}

// The KV-cache / attention operand dtype of `layout` (cache_type "f32" or "f16").
DType cache_dtype(const LlamaWeightLayout& layout, const char* what) {
  check(layout.cache_type == "f32" || layout.cache_type == "f16",
        std::string(what) + ": cache_type must be \"f32\" or \"f16\", got \"" + layout.cache_type +
            "\"");
  return layout.cache_type == "f16" ? DType::f16 : DType::f32;
}

// Attention over q, k, v rounded to dtype `dt` (those not of it already), the result widened
// back to f32: f16 is llama.cpp's non-flash path (K and V held in f16, q rounded for QK^T
// against an f16 K), f32 a plain attention.
Value attend_as(Graph& g, DType dt, Value q, Value k, Value v, const Graph::AttentionOptions& attn,
                std::optional<Value> mask = std::nullopt) {
  if (dt == DType::f32) return g.attention(q, k, v, attn, mask);
  auto as_dt = [&](Value x) { return g.dtype(x) == dt ? x : g.convert(x, dt); };
  return g.convert(g.attention(as_dt(q), as_dt(k), as_dt(v), attn, mask), DType::f32);
}

// `v` with its node named `name` (outputs and state are found by name).
Value named(Graph& g, Value v, const std::string& name) {
  g.rename(v.node, name);
  return v;
}

}  // namespace

Graph build_llama_decoder(const LlamaConfig& c, const LlamaWeightLayout& layout, int64_t batch,
                          int64_t seq, std::span<const double> freq_factors) {
  check(batch > 0 && seq > 0, "build_llama_decoder: batch and seq must be positive, got [" +
                                  std::to_string(batch) + ", " + std::to_string(seq) + "]");
  check(seq <= c.context_length, "build_llama_decoder: seq " + std::to_string(seq) +
                                     " exceeds context_length " + std::to_string(c.context_length));
  const DType kv = cache_dtype(layout, "build_llama_decoder");
  Graph g("llama");
  DecoderBuilder b(g, c, layout, batch, seq);
  Value x = b.embed(g.input("ids", DType::i32, Shape{batch, seq}));
  auto [cos_t, sin_t] = rope_tables(c, seq, freq_factors);
  Value cos = g.constant(cos_t, "rope_cos"), sin = g.constant(sin_t, "rope_sin");
  Graph::AttentionOptions attn = attention_options(c, "causal");
  if (c.sliding_window > 0) {
    attn.mask = "sliding_window";
    attn.window = c.sliding_window;
  }
  for (int64_t l = 0; l < c.block_count; ++l)
    x = b.layer(l, x, cos, sin, [&](int64_t, Value q, Value k, Value v) {
      return attend_as(g, kv, q, k, v, attn);
    });
  g.set_outputs({b.head(x)});
  return g;
}

Value greedy_tokens(Graph& g, Value logits) { return g.argmax(logits, -1, false, DType::i32); }

std::vector<StateBinding> llama_cache_state(const LlamaConfig& c) {
  std::vector<StateBinding> state;
  for (int64_t l = 0; l < c.block_count; ++l)
    for (const char* kv : {"k_cache.", "v_cache."}) {
      std::string name = kv + std::to_string(l);
      state.push_back({name, name + ".next"});
    }
  return state;
}

Graph build_llama_step(const LlamaConfig& c, const LlamaWeightLayout& layout,
                       const LlamaStepOptions& o, std::span<const double> freq_factors) {
  const int64_t B = o.batch, S = o.seq, ctx = o.ctx > 0 ? o.ctx : c.context_length;
  check(B > 0 && S > 0, "build_llama_step: batch and seq must be positive, got [" +
                            std::to_string(B) + ", " + std::to_string(S) + "]");
  check(ctx <= c.context_length && S <= ctx,
        "build_llama_step: need seq " + std::to_string(S) + " <= ctx " + std::to_string(ctx) +
            " <= context_length " + std::to_string(c.context_length));
  check(o.cache_batch == 0 || o.cache_batch >= B,
        "build_llama_step: cache_batch " + std::to_string(o.cache_batch) +
            " is below the step's batch " + std::to_string(B));
  check(static_cast<bool>(o.select), "build_llama_step: no token selector");
  const DType kv = cache_dtype(layout, "build_llama_step");
  const int64_t hkv = c.head_count_kv, half = c.rope_dimension_count / 2;
  // Rows of the cache; a subset step names its rows in the input "rows".
  const int64_t NC = o.cache_batch > 0 ? o.cache_batch : B;
  const bool subset = NC != B;
  Graph g(S == 1 ? "llama_decode" : "llama_prefill");
  std::optional<Value> rows;
  if (subset) rows = g.input("rows", DType::i32, Shape{B});
  Value ids = g.input("ids", DType::i32, Shape{B, S});
  Value pos = g.input("pos", DType::i32, Shape{B});
  std::optional<Value> last;
  if (S > 1) last = g.input("last", DType::i32, Shape{B});
  DecoderBuilder b(g, c, layout, B, S);
  Value x = b.embed(ids);

  // Row b's token i sits at position pos[b] + i: its RoPE rows gathered from the ctx tables.
  Value positions = g.add(g.reshape(pos, {B, 1}), g.iota(DType::i32, Shape{1, S}, 1));
  auto [cos_t, sin_t] = rope_tables(c, ctx, freq_factors);
  auto table_rows = [&](const Tensor& table, const char* name) {
    return g.reshape(g.gather(g.constant(table, name), positions, 0), {B, 1, S, half});
  };
  Value cos = table_rows(cos_t, "rope_cos"), sin = table_rows(sin_t, "rope_sin");
  // Row b's cache row and start (scalars) and its valid length after this step.
  Value zero = g.scalar(0, DType::i32);
  std::vector<Value> row_index, row_start;
  for (int64_t r = 0; r < B; ++r) {
    row_index.push_back(subset ? g.reshape(g.slice(*rows, {r}, {r + 1}), {})
                               : g.scalar(static_cast<double>(r), DType::i32));
    row_start.push_back(g.reshape(g.slice(pos, {r}, {r + 1}), {}));
  }
  Value lengths = g.add(pos, g.scalar(static_cast<double>(S), DType::i32));
  const Graph::AttentionOptions attn =
      attention_options(c, c.sliding_window > 0 ? "bool" : "causal_lengths");
  // Sliding window: key j is seen from position p = pos[b] + i iff p - W < j <= p.
  std::optional<Value> window_mask;
  if (c.sliding_window > 0) {
    Value p = g.reshape(positions, {B, 1, S, 1});
    Value j = g.iota(DType::i32, Shape{1, 1, 1, ctx}, 3);
    Value first = g.sub(p, g.scalar(static_cast<double>(c.sliding_window - 1), DType::i32));
    window_mask = g.logical_and(g.le(j, p), g.ge(j, first));
  }
  std::vector<Value> caches;
  // Writes row r of `update` [B,hkv,S,d] into `cache` at (row r, 0, pos[r], 0), row by row;
  // returns what attention reads: the cache, or the step's rows of it.
  auto write = [&](const std::string& name, Value update, int64_t d) {
    Value cache = g.input(name, kv, Shape{NC, hkv, ctx, d});
    if (kv != DType::f32) update = g.convert(update, kv);
    for (int64_t r = 0; r < B; ++r) {
      Value row = B == 1 ? update : g.slice(update, {r, 0, 0, 0}, {r + 1, hkv, S, d});
      cache = g.dynamic_update_slice(
          cache, row,
          {row_index[static_cast<size_t>(r)], zero, row_start[static_cast<size_t>(r)], zero});
    }
    caches.push_back(named(g, cache, name + ".next"));
    return subset ? g.gather(cache, *rows, 0) : cache;
  };
  for (int64_t l = 0; l < c.block_count; ++l)
    x = b.layer(l, x, cos, sin, [&](int64_t layer, Value q, Value k, Value v) {
      Value kc = write("k_cache." + std::to_string(layer), k, c.key_length);
      Value vc = write("v_cache." + std::to_string(layer), v, c.value_length);
      return attend_as(g, kv, q, kc, vc, attn, window_mask ? *window_mask : lengths);
    });

  // The last real token of each row: row-major index b * S + last[b] of [B*S, H].
  const int64_t H = c.embedding_length;
  Value final_x = g.reshape(x, {B * S, H});
  if (last) {
    Value base =
        g.mul(g.iota(DType::i32, Shape{B}, 0), g.scalar(static_cast<double>(S), DType::i32));
    final_x = g.gather(final_x, g.add(base, *last), 0);
  }
  Value logits = named(g, b.head(final_x), "logits");
  std::vector<Value> outputs{named(g, o.select(g, logits), "next")};
  if (o.logits) outputs.push_back(logits);
  outputs.insert(outputs.end(), caches.begin(), caches.end());
  g.set_outputs(outputs);
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
  if (std::optional<int64_t> w = int_key(f, p + "attention.sliding_window")) {
    check(*w >= 0, f.path() + ": metadata key '" + p +
                       "attention.sliding_window' must not be negative, found " +
                       std::to_string(*w));
    c.sliding_window = *w;
  }
  c.rope_layout = arch == "llama" ? "gptj" : "neox";
  c.qkv_bias = arch == "qwen2";
  c.qk_norm = arch == "qwen3";
  return c;
}

namespace {

// The text of generated tokens as it streams: complete UTF-8 characters only (StreamDecoder),
// cut before the first stop string, and no byte that may start a stop string passed to
// on_text before the following tokens decide it. Without a tokenizer there is no text.
class TextStream {
 public:
  TextStream(const BpeTokenizer* tokenizer, const GenerateOptions& o) : o_(o) {
    if (tokenizer != nullptr) decoder_.emplace(*tokenizer);
    for (const std::string& s : o.stop) longest_stop_ = std::max(longest_stop_, s.size());
  }

  // Adds token `id`; true when the text now holds a stop string (it is cut before it).
  bool push(int32_t id) {
    if (!decoder_) return false;
    text_ += decoder_->push(id);
    return settle(false);
  }

  // The whole text, after streaming what was held back.
  std::string finish() {
    if (decoder_ && !stopped_) {
      text_ += decoder_->finish();
      settle(true);
    }
    return text_;
  }

 private:
  bool settle(bool final) {
    // A match starts at or after the streamed part (a possible start is never streamed).
    const size_t from = emitted_ >= longest_stop_ ? emitted_ - longest_stop_ : 0;
    size_t cut = std::string::npos;
    for (const std::string& s : o_.stop)
      if (!s.empty()) cut = std::min(cut, text_.find(s, from));
    if (cut != std::string::npos) {
      text_.resize(cut);
      emit(cut);
      stopped_ = true;
      return true;
    }
    size_t safe = text_.size();
    if (!final)
      for (const std::string& s : o_.stop)
        for (size_t k = std::min(s.size() - (s.empty() ? 0 : 1), text_.size()); k > 0; --k)
          if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
            safe = std::min(safe, text_.size() - k);
            break;
          }
    emit(safe);
    return false;
  }

  void emit(size_t upto) {
    if (upto <= emitted_) return;
    if (o_.on_text) o_.on_text(std::string_view(text_).substr(emitted_, upto - emitted_));
    emitted_ = upto;
  }

  std::optional<BpeTokenizer::StreamDecoder> decoder_;
  const GenerateOptions& o_;
  std::string text_;
  size_t emitted_ = 0, longest_stop_ = 0;
  bool stopped_ = false;
};

}  // namespace

struct Generation::Impl {
  GenerateOptions options;
  TextStream text;
  int32_t eos;
  std::vector<int32_t> ids;
  std::string stop_reason;
  Impl(const BpeTokenizer* tokenizer, GenerateOptions o)
      : options(std::move(o)),
        text(tokenizer, options),
        eos(tokenizer != nullptr ? tokenizer->eos_id() : -1) {}
};

Generation::Generation(const BpeTokenizer* tokenizer, GenerateOptions options)
    : impl_(std::make_unique<Impl>(tokenizer, std::move(options))) {
  check(impl_->options.max_tokens >= 0,
        "Generation: max_tokens must be >= 0, got " + std::to_string(impl_->options.max_tokens));
  if (impl_->options.max_tokens == 0) impl_->stop_reason = "length";
}
Generation::~Generation() = default;
Generation::Generation(Generation&&) noexcept = default;
Generation& Generation::operator=(Generation&&) noexcept = default;

bool Generation::push(int32_t token, bool cache_full) {
  Impl& m = *impl_;
  check(m.stop_reason.empty(), "Generation::push: the sequence has ended (" + m.stop_reason + ")");
  if (m.options.stop_at_eos && token == m.eos) {
    m.stop_reason = "eos";
  } else {
    m.ids.push_back(token);
    if (m.text.push(token))
      m.stop_reason = "stop";
    else if (static_cast<int64_t>(m.ids.size()) >= m.options.max_tokens)
      m.stop_reason = "length";
    else if (cache_full)
      m.stop_reason = "context";
  }
  return !m.stop_reason.empty();
}
bool Generation::done() const { return !impl_->stop_reason.empty(); }
const std::string& Generation::stop_reason() const { return impl_->stop_reason; }
const std::vector<int32_t>& Generation::ids() const { return impl_->ids; }
std::string Generation::finish() { return impl_->text.finish(); }

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
  int64_t ctx = 0;  // KV-cache positions
  // One KV cache per batch size: the state of its first step executable, which the others of
  // that batch size share; each row's tokens (its length is the row's position).
  struct Cache {
    std::shared_ptr<Executable> owner;
    std::vector<std::vector<int32_t>> tokens;
  };
  std::map<int64_t, Cache> caches;
  // Step executables by (cache batch, batch, seq, logits output, sampler history or 0).
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, int64_t>, std::shared_ptr<Executable>> steps;

  Impl(const std::string& p, const LlamaOptions& o)
      : path(p), file(GgufFile::open(p)), options(o), session(o.device) {
    check(o.bucket >= 1, "LlamaModel: bucket must be at least 1, got " + std::to_string(o.bucket));
    check(o.sampler_history >= 1, "LlamaModel: sampler_history must be at least 1, got " +
                                      std::to_string(o.sampler_history));
    check(o.sampler.max_candidates >= 1,
          "LlamaModel: sampler.max_candidates must be at least 1, got " +
              std::to_string(o.sampler.max_candidates));
    precision = o.precision
                    ? *o.precision
                    : precision_from_env().value_or(PrecisionPolicy{PrecisionMode::AlwaysF32, {}});
    config = LlamaConfig::from_gguf(file);
    check(o.ctx >= 0 && o.ctx <= config.context_length,
          "LlamaModel: ctx " + std::to_string(o.ctx) + " is outside [1, context_length " +
              std::to_string(config.context_length) + "] of " + p);
    ctx = o.ctx > 0 ? o.ctx : std::min<int64_t>(config.context_length, 4096);
    check(o.act_quant == "none" || o.act_quant == "int8",
          "LlamaModel: act_quant must be \"none\" or \"int8\", got \"" + o.act_quant + "\"");
    layout.act_quant = o.act_quant;
    layout.cache_type = o.cache_type;
    cache_dtype(layout, "LlamaModel");  // rejects anything but "f32" / "f16" at load
    // An f16 cache is read by attention in f16 (the kernels widen tiles as they read them):
    // always-f32 would otherwise compute it in f32 behind a converted copy of every cache.
    if (o.cache_type == "f16" && !precision.overrides.contains(OpKind::Attention))
      precision.overrides[OpKind::Attention] = DType::f16;
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

  // `graph` compiled (options `co` plus the model's precision) with the weights bound.
  std::shared_ptr<Executable> compile(const Graph& graph, CompileOptions co) {
    auto start = std::chrono::steady_clock::now();
    co.precision = precision;
    std::shared_ptr<Executable> exe = session.compile(graph, co);
    for (const IoSpec& p : exe->params()) exe->set_param(p.name, weights.at(p.name));
    stats.compiles += 1;
    stats.compile_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return exe;
  }

  std::shared_ptr<Executable> executable(int64_t batch, int64_t seq) {
    auto key = std::make_pair(batch, seq);
    if (auto it = executables.find(key); it != executables.end()) return it->second;
    std::shared_ptr<Executable> exe =
        compile(build_llama_decoder(config, layout, batch, seq, freq_factors), {});
    executables.emplace(key, exe);
    return exe;
  }

  // Throws naming the row, position and id when an id of `ids` [batch, seq] (the first
  // counts[r] of each row when given) is outside the vocabulary.
  void check_ids(const char* what, std::span<const int32_t> ids, int64_t batch, int64_t seq,
                 std::span<const int64_t> counts = {}) const {
    for (int64_t r = 0; r < batch; ++r)
      for (int64_t j = 0; j < (counts.empty() ? seq : counts[static_cast<size_t>(r)]); ++j) {
        int32_t id = ids[static_cast<size_t>(r * seq + j)];
        if (id < 0 || id >= config.vocab_size)
          throw Error(std::string(what) + ": row " + std::to_string(r) + " position " +
                      std::to_string(j) + ": token id " + std::to_string(id) +
                      " is outside the vocabulary [0, " + std::to_string(config.vocab_size) +
                      ") of " + path);
      }
  }

  // The bucket above `n` (a multiple of options.bucket), at most `limit`.
  int64_t bucketed(int64_t n, int64_t limit) const {
    return std::min(limit, (n + options.bucket - 1) / options.bucket * options.bucket);
  }

  Tensor logits(std::span<const int32_t> ids, int64_t batch, int64_t seq) {
    check(batch >= 1 && seq >= 1 && seq <= config.context_length,
          "LlamaModel::logits: need batch >= 1 and 1 <= seq <= context_length " +
              std::to_string(config.context_length) + ", got [" + std::to_string(batch) + ", " +
              std::to_string(seq) + "]");
    check(static_cast<int64_t>(ids.size()) == batch * seq,
          "LlamaModel::logits: ids holds " + std::to_string(ids.size()) +
              " values, expected batch * seq = " + std::to_string(batch * seq));
    check_ids("LlamaModel::logits", ids, batch, seq);
    const int64_t padded = bucketed(seq, config.context_length);
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

  Cache& cache(int64_t batch) {
    Cache& c = caches[batch];
    if (c.tokens.empty()) c.tokens.resize(static_cast<size_t>(batch));
    return c;
  }

  // The step executable of (cache batch, batch, seq, logits, sampler history), sharing the
  // cache's state.
  std::shared_ptr<Executable> step_executable(int64_t cache_batch, int64_t batch, int64_t seq,
                                              bool want_logits, int64_t history) {
    auto key = std::make_tuple(cache_batch, batch, seq, want_logits, history);
    if (auto it = steps.find(key); it != steps.end()) return it->second;
    LlamaStepOptions so;
    so.batch = batch;
    so.seq = seq;
    so.ctx = ctx;
    so.logits = want_logits;
    so.cache_batch = cache_batch;
    if (history > 0) so.select = token_sampler(history, options.sampler);
    CompileOptions co;
    co.state = llama_cache_state(config);
    std::shared_ptr<Executable> exe =
        compile(build_llama_step(config, layout, so, freq_factors), co);
    Cache& c = cache(cache_batch);
    if (c.owner)
      exe->share_state(*c.owner);  // before any run: it never allocates a cache of its own
    else
      c.owner = exe;
    steps.emplace(key, exe);
    return exe;
  }

  LlamaStep append(std::span<const int32_t> ids, int64_t batch, int64_t seq,
                   const AppendOptions& o) {
    const char* what = "LlamaModel::append";
    auto fail = [&](const std::string& msg) { throw Error(std::string(what) + ": " + msg); };
    if (batch < 1 || seq < 1)
      fail("batch and seq must be positive, got [" + std::to_string(batch) + ", " +
           std::to_string(seq) + "]");
    if (static_cast<int64_t>(ids.size()) != batch * seq)
      fail("ids holds " + std::to_string(ids.size()) +
           " values, expected batch * seq = " + std::to_string(batch * seq));
    if (!o.counts.empty() && static_cast<int64_t>(o.counts.size()) != batch)
      fail("counts holds " + std::to_string(o.counts.size()) +
           " values, expected batch = " + std::to_string(batch));
    // The cache rows of the step's rows.
    const int64_t cache_batch = o.rows.empty() ? batch : o.cache_batch;
    std::vector<int64_t> rows = o.rows;
    if (rows.empty()) {
      for (int64_t r = 0; r < batch; ++r) rows.push_back(r);
    } else {
      if (static_cast<int64_t>(rows.size()) != batch)
        fail("rows holds " + std::to_string(rows.size()) +
             " values, expected batch = " + std::to_string(batch));
      for (size_t r = 0; r < rows.size(); ++r)
        if (rows[r] < 0 || rows[r] >= cache_batch || (r > 0 && rows[r] <= rows[r - 1]))
          fail("rows must be strictly ascending in [0, cache_batch " + std::to_string(cache_batch) +
               "), got " + std::to_string(rows[r]) + " at index " + std::to_string(r));
    }
    if (o.sampler != nullptr && o.sampler->batch() != cache_batch)
      fail("the sampler state has " + std::to_string(o.sampler->batch()) +
           " rows, expected the cache's " + std::to_string(cache_batch));
    std::vector<int64_t> n(static_cast<size_t>(batch), seq);
    if (!o.counts.empty()) n.assign(o.counts.begin(), o.counts.end());
    for (int64_t r = 0; r < batch; ++r)
      if (n[static_cast<size_t>(r)] < 0 || n[static_cast<size_t>(r)] > seq)
        fail("row " + std::to_string(r) + " count " + std::to_string(n[static_cast<size_t>(r)]) +
             " is outside [0, seq " + std::to_string(seq) + "]");
    check_ids(what, ids, batch, seq, n);
    Cache& c = cache(cache_batch);
    int64_t longest = 0, most = 0;  // the longest row before this step, the most new tokens
    for (int64_t r = 0; r < batch; ++r) {
      const auto held = static_cast<int64_t>(c.tokens[static_cast<size_t>(rows[size_t(r)])].size());
      const int64_t add = n[static_cast<size_t>(r)];
      check(held + add <= ctx,
            "LlamaModel: the KV cache is full: row " + std::to_string(rows[size_t(r)]) + " holds " +
                std::to_string(held) + " of " + std::to_string(ctx) + " positions, " +
                std::to_string(add) + " more do not fit (LlamaOptions::ctx, --ctx)");
      longest = std::max(longest, held);
      most = std::max(most, add);
    }
    if (most == 0) fail("every row is idle (count 0): nothing to append");
    // Padding beyond a row's count is written to the cache too (and overwritten by later
    // appends): the bucket must fit behind every row, or dynamic_update_slice would clamp the
    // start and overwrite real entries.
    const int64_t padded = most == 1 ? 1 : std::max(most, bucketed(most, ctx - longest));
    for (int64_t r = 0; r < batch; ++r) {
      const auto held = static_cast<int64_t>(c.tokens[static_cast<size_t>(rows[size_t(r)])].size());
      if (held + padded > ctx)
        fail("row " + std::to_string(rows[size_t(r)]) + " holds " + std::to_string(held) + " of " +
             std::to_string(ctx) + " positions: this step's " + std::to_string(padded) +
             " positions (its longest row's new tokens) do not fit behind it; step it apart "
             "from the rows with more new tokens, or reset it");
    }
    Tensor in(DType::i32, Shape{batch, padded}), pos(DType::i32, Shape{batch}),
        last(DType::i32, Shape{batch}), row_t(DType::i32, Shape{batch});
    for (int64_t r = 0; r < batch; ++r) {
      const auto row = static_cast<size_t>(r);
      std::copy_n(ids.data() + r * seq, n[row], in.data_as<int32_t>() + r * padded);
      pos.data_as<int32_t>()[r] = static_cast<int32_t>(c.tokens[size_t(rows[row])].size());
      last.data_as<int32_t>()[r] = static_cast<int32_t>(std::max<int64_t>(n[row] - 1, 0));
      row_t.data_as<int32_t>()[r] = static_cast<int32_t>(rows[row]);
    }
    TensorMap feeds{{"ids", in}, {"pos", pos}};
    if (padded > 1) feeds.emplace("last", last);
    const bool subset = batch != cache_batch;
    if (subset) feeds.emplace("rows", row_t);
    const int64_t history = o.sampler != nullptr ? o.sampler->history() : 0;
    if (o.sampler != nullptr)
      for (auto& [name, t] : o.sampler->feeds(rows)) feeds.emplace(name, t);
    std::vector<Tensor> out =
        step_executable(cache_batch, batch, padded, o.want_logits, history)->run(feeds);
    ++stats.runs;
    LlamaStep result;
    result.next.assign(out[0].data_as<int32_t>(), out[0].data_as<int32_t>() + batch);
    for (int64_t r = 0; r < batch; ++r) {
      const auto row = static_cast<size_t>(r);
      std::vector<int32_t>& held = c.tokens[size_t(rows[row])];
      held.insert(held.end(), ids.begin() + r * seq, ids.begin() + r * seq + n[row]);
      if (n[row] == 0) result.next[row] = -1;
    }
    if (o.want_logits) result.logits = out[1];
    return result;
  }

  std::vector<int64_t> positions(int64_t batch) const {
    std::vector<int64_t> p(static_cast<size_t>(std::max<int64_t>(batch, 0)), 0);
    if (auto it = caches.find(batch); it != caches.end())
      for (size_t r = 0; r < p.size(); ++r)
        p[r] = static_cast<int64_t>(it->second.tokens[r].size());
    return p;
  }

  GenerateResult generate(std::span<const int32_t> prompt, const GenerateOptions& o) {
    check(tokenizer.has_value() || (o.stop.empty() && !o.on_text),
          "LlamaModel::generate: stop strings and on_text need the tokenizer, which " + path +
              " lacks (metadata key 'tokenizer.ggml.model')");
    check(!prompt.empty(), "LlamaModel::generate: the prompt is empty");
    check(o.max_tokens >= 0,
          "LlamaModel::generate: max_tokens must be >= 0, got " + std::to_string(o.max_tokens));
    check_ids("LlamaModel::generate", prompt, 1, static_cast<int64_t>(prompt.size()));
    // The sampler's state (row 0), when the settings need more than the argmax.
    std::optional<SamplerState> sampler;
    if (o.sampling && !is_greedy(*o.sampling)) {
      sampler.emplace(1, options.sampler_history);
      sampler->reset(0, *o.sampling, prompt);
    }
    AppendOptions step;
    step.sampler = sampler ? &*sampler : nullptr;
    GenerateResult result;
    GenerateStats& st = result.stats;
    st.prompt_tokens = static_cast<int64_t>(prompt.size());
    // Keep the cached prefix the prompt starts with; at least one token is appended, whose
    // logits give the first new token.
    std::vector<int32_t>& held = cache(1).tokens[0];
    size_t keep = 0;
    if (o.reuse_prefix)
      while (keep < held.size() && keep + 1 < prompt.size() && held[keep] == prompt[keep]) ++keep;
    held.resize(keep);
    st.reused_tokens = static_cast<int64_t>(keep);
    using Clock = std::chrono::steady_clock;
    auto seconds = [](Clock::time_point since) {
      return std::chrono::duration<double>(Clock::now() - since).count();
    };
    // Compiles the first append of a shape does are counted apart from the run times.
    const double compiled_before = stats.compile_seconds;
    auto t0 = Clock::now();
    const auto rest = static_cast<int64_t>(prompt.size() - keep);
    int32_t next = append(prompt.subspan(keep), 1, rest, step).next[0];
    st.prefill_seconds = seconds(t0) - (stats.compile_seconds - compiled_before);
    const double compiled_prefill = stats.compile_seconds;

    Generation gen(tokenizer ? &*tokenizer : nullptr, o);
    auto t1 = Clock::now();
    while (!gen.done()) {
      if (gen.push(next, static_cast<int64_t>(held.size()) >= ctx)) break;
      if (sampler) sampler->accept(0, next);
      next = append(std::span<const int32_t>(&next, 1), 1, 1, step).next[0];
    }
    st.decode_seconds = seconds(t1) - (stats.compile_seconds - compiled_prefill);
    st.compile_seconds = stats.compile_seconds - compiled_before;
    st.stop_reason = gen.stop_reason();
    result.ids = gen.ids();
    st.generated_tokens = static_cast<int64_t>(result.ids.size());
    result.text = gen.finish();
    return result;
  }
};

LlamaModel::LlamaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LlamaModel::~LlamaModel() = default;
LlamaModel::LlamaModel(LlamaModel&&) noexcept = default;
LlamaModel& LlamaModel::operator=(LlamaModel&&) noexcept = default;

LlamaModel LlamaModel::load(const std::string& path, const LlamaOptions& options) {
  auto start = std::chrono::steady_clock::now();
  auto impl = std::make_unique<Impl>(path, options);
  impl->stats.load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return LlamaModel(std::move(impl));
}

const LlamaConfig& LlamaModel::config() const { return impl_->config; }
const std::string& LlamaModel::path() const { return impl_->path; }
const LlamaOptions& LlamaModel::options() const { return impl_->options; }
bool LlamaModel::has_tokenizer() const { return impl_->tokenizer.has_value(); }
const BpeTokenizer& LlamaModel::tokenizer() const {
  check(impl_->tokenizer.has_value(),
        impl_->path + ": the file has no tokenizer (metadata key 'tokenizer.ggml.model')");
  return *impl_->tokenizer;
}
Tensor LlamaModel::logits(std::span<const int32_t> ids, int64_t batch, int64_t seq) {
  return impl_->logits(ids, batch, seq);
}
int64_t LlamaModel::ctx() const { return impl_->ctx; }
LlamaStep LlamaModel::append(std::span<const int32_t> ids, int64_t batch, int64_t seq,
                             std::span<const int64_t> counts, bool want_logits) {
  AppendOptions o;
  o.counts.assign(counts.begin(), counts.end());
  o.want_logits = want_logits;
  return impl_->append(ids, batch, seq, o);
}
LlamaStep LlamaModel::append(std::span<const int32_t> ids, int64_t batch, int64_t seq,
                             const AppendOptions& options) {
  return impl_->append(ids, batch, seq, options);
}
std::vector<int64_t> LlamaModel::positions(int64_t batch) const { return impl_->positions(batch); }
void LlamaModel::reset(int64_t batch) {
  check(batch >= 1, "LlamaModel::reset: batch must be >= 1, got " + std::to_string(batch));
  for (std::vector<int32_t>& row : impl_->cache(batch).tokens) row.clear();
}
void LlamaModel::reset(int64_t batch, int64_t row) {
  check(batch >= 1 && row >= 0 && row < batch, "LlamaModel::reset: row " + std::to_string(row) +
                                                   " is outside [0, batch " +
                                                   std::to_string(batch) + ")");
  impl_->cache(batch).tokens[static_cast<size_t>(row)].clear();
}
GenerateResult LlamaModel::generate(std::span<const int32_t> prompt,
                                    const GenerateOptions& options) {
  return impl_->generate(prompt, options);
}
GenerateResult LlamaModel::generate(std::string_view prompt, const GenerateOptions& options) {
  std::vector<int32_t> ids = tokenizer().encode(prompt, true, true);
  return impl_->generate(ids, options);
}
const LlamaWeightLayout& LlamaModel::layout() const { return impl_->layout; }
int64_t LlamaModel::weight_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, t] : impl_->weights) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}
LlamaStats LlamaModel::stats() const { return impl_->stats; }

}  // namespace rlx::models
