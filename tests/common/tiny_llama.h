// A tiny Llama GGUF file written by the tests (rlx::write_gguf) with random weights: the
// models suite checks LlamaModel on it against the reference evaluator, the PJRT suite runs
// its cached decode on the plugin.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/scoped_env.h"
#include "rlx/io/gguf.h"
#include "rlx/ir/quant.h"

namespace rlx::testing {

// A 2-layer llama file: hidden 64, 4 query heads of 16, 2 KV heads (GQA), FFN 96, vocab 40.
// Matrices are Q8_0 (packed with quantize_row) except attn_v (F32) and ffn_up (F16), norms F32.
struct TinyFile {
  GgufMetadata metadata;
  std::vector<std::pair<std::string, std::pair<GgmlType, std::vector<int64_t>>>> specs;
  std::map<std::string, std::vector<std::byte>> bytes;
};

constexpr int64_t kH = 64, kHeads = 4, kKv = 2, kDh = 16, kFfn = 96, kVocab = 40, kLayers = 2;

inline TinyFile tiny_file(int64_t vocab = kVocab, uint32_t context = 64) {
  TinyFile f;
  f.metadata = {{"general.architecture", std::string("llama")},
                {"llama.block_count", uint32_t{kLayers}},
                {"llama.context_length", context},
                {"llama.embedding_length", uint32_t{kH}},
                {"llama.feed_forward_length", uint32_t{kFfn}},
                {"llama.attention.head_count", uint32_t{kHeads}},
                {"llama.attention.head_count_kv", uint32_t{kKv}},
                {"llama.attention.layer_norm_rms_epsilon", 1e-5f},
                {"llama.rope.freq_base", 10000.0f}};
  auto add = [&](const std::string& name, GgmlType type, std::vector<int64_t> shape) {
    f.specs.push_back({name, {type, shape}});
  };
  add("token_embd.weight", GgmlType::Q8_0, {vocab, kH});
  add("output_norm.weight", GgmlType::F32, {kH});
  for (int64_t l = 0; l < kLayers; ++l) {
    std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", GgmlType::F32, {kH});
    add(p + "attn_q.weight", GgmlType::Q8_0, {kHeads * kDh, kH});
    add(p + "attn_k.weight", GgmlType::Q8_0, {kKv * kDh, kH});
    add(p + "attn_v.weight", GgmlType::F32, {kKv * kDh, kH});
    add(p + "attn_output.weight", GgmlType::Q8_0, {kH, kHeads * kDh});
    add(p + "ffn_norm.weight", GgmlType::F32, {kH});
    add(p + "ffn_gate.weight", GgmlType::Q8_0, {kFfn, kH});
    add(p + "ffn_up.weight", GgmlType::F16, {kFfn, kH});
    add(p + "ffn_down.weight", GgmlType::Q8_0, {kH, kFfn});
  }
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [name, spec] : f.specs) {
    const auto& [type, shape] = spec;
    const int64_t cols = shape.back(), rows = shape.size() == 2 ? shape[0] : 1;
    const bool norm = shape.size() == 1;
    std::vector<float> values(static_cast<size_t>(rows * cols));
    for (float& v : values) v = norm ? 1.0f + 0.1f * normal(rng) : 0.15f * normal(rng);
    const QuantFormat format = quant_format_from_ggml_type(static_cast<int>(type));
    std::vector<std::byte> out(static_cast<size_t>(rows * quant_row_bytes(format, cols)));
    for (int64_t r = 0; r < rows; ++r)
      quantize_row(format, values.data() + r * cols,
                   reinterpret_cast<uint8_t*>(out.data()) + r * quant_row_bytes(format, cols),
                   cols);
    f.bytes[name] = std::move(out);
  }
  return f;
}

inline std::string write(const TinyFile& f, const std::string& name) {
  std::string path = process_temp_dir().file(name);
  std::vector<GgufTensorData> tensors;
  for (const auto& [tname, spec] : f.specs)
    tensors.push_back({tname, spec.first, spec.second, std::span(f.bytes.at(tname))});
  write_gguf(path, f.metadata, tensors);
  return path;
}

// The ChatML template SmolLM2's file has (with its default system line shortened).
inline constexpr const char* kChatMlTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a tiny test model.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

// Tokens of tiny_chat_file: GPT-2's 256 byte tokens (in byte order), the merge "h e", and
// ChatML's control tokens; EOS is <|im_end|>.
inline constexpr int64_t kChatVocab = 260;
inline constexpr int32_t kImStart = 257, kImEnd = 258;

// tiny_file with a byte-level BPE tokenizer (tokenizer.ggml.model gpt2) and a ChatML template,
// context 256: what `rlx serve` and `rlx generate` need, at the tiny model's cost.
// GPT-2's byte alphabet as GGUF token texts, in byte order: printable bytes stand for
// themselves, the others for U+0100 + k in order (what BpeTokenizer maps back to bytes).
inline std::vector<std::string> gpt2_byte_tokens() {
  std::vector<std::string> tokens;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
    std::string s;
    if (c < 0x80) {
      s.push_back(static_cast<char>(c));
    } else {
      s.push_back(static_cast<char>(0xC0 | (c >> 6)));
      s.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
    tokens.push_back(s);
  }
  return tokens;
}

// The bytes of a hex string ("e697a5" -> "\xe6\x97\xa5"): the texts of the tokenizer
// reference files (bpe_ref.json, spm_ref.json).
inline std::string text_from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// Sets `key` in `md` to `v`, replacing its value where present, else appending it.
inline void set_key(GgufMetadata& md, const std::string& key, GgufValue v) {
  for (auto& [k, val] : md)
    if (k == key) {
      val = std::move(v);
      return;
    }
  md.emplace_back(key, std::move(v));
}

inline TinyFile tiny_chat_file() {
  TinyFile f = tiny_file(kChatVocab, 256);
  std::vector<std::string> tokens = gpt2_byte_tokens();
  tokens.insert(tokens.end(), {"he", "<|im_start|>", "<|im_end|>", "<|endoftext|>"});
  std::vector<int32_t> types(tokens.size(), 1);
  types[kImStart] = types[kImEnd] = types[259] = 3;  // control
  f.metadata.emplace_back("tokenizer.ggml.model", std::string("gpt2"));
  f.metadata.emplace_back("tokenizer.ggml.pre", std::string("smollm"));
  f.metadata.emplace_back("tokenizer.ggml.tokens", GgufArray(tokens));
  f.metadata.emplace_back("tokenizer.ggml.token_type", GgufArray(types));
  f.metadata.emplace_back("tokenizer.ggml.merges", GgufArray(std::vector<std::string>{"h e"}));
  f.metadata.emplace_back("tokenizer.ggml.bos_token_id", uint32_t{kImStart});
  f.metadata.emplace_back("tokenizer.ggml.eos_token_id", uint32_t{kImEnd});
  f.metadata.emplace_back("tokenizer.chat_template", std::string(kChatMlTemplate));
  return f;
}

inline std::string write_edited(const std::string& name,
                                const std::function<void(TinyFile&)>& edit) {
  TinyFile f = tiny_file();
  edit(f);
  return write(f, name);
}

}  // namespace rlx::testing
