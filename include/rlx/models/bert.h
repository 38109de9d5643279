// BERT-family encoders (BERT, MiniLM, ...) built with the graph builder from a Hugging Face
// config.json, plus the sentence-transformers pooling head.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/ir/graph.h"
#include "rlx/ir/quant.h"

namespace rlx {
class GgufFile;
}

namespace rlx::models {

/// The fields of a Hugging Face BertConfig (config.json) the encoder needs.
struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  /// "gelu" (exact, erf), "gelu_new" / "gelu_pytorch_tanh" (tanh approximation) or "relu".
  std::string hidden_act = "gelu";

  /// Reads config.json. Throws rlx::Error naming the file and the field for a missing file,
  /// malformed JSON, a model_type other than bert-like encoders, position_embedding_type other
  /// than "absolute", non-positive sizes, or hidden_size not divisible by the head count.
  static BertConfig from_json_file(const std::string& path);
  /// Parses the text of a config.json, checked as from_json_file() checks a file; `source`
  /// (e.g. its path) starts every error message.
  static BertConfig from_json(std::string_view text, const std::string& source);
  /// The hyper-parameters of a BERT GGUF file in llama.cpp's conventions (what `rlx quantize`
  /// and llama.cpp's convert_hf_to_gguf.py write): general.architecture "bert"; u32
  /// bert.context_length (max_position_embeddings), bert.embedding_length (hidden_size),
  /// bert.feed_forward_length, bert.block_count, bert.attention.head_count; f32
  /// bert.attention.layer_norm_epsilon; vocab_size = the length of tokenizer.ggml.tokens;
  /// type_vocab_size = u32 tokenizer.ggml.token_type_count (2 when absent); hidden_act "gelu"
  /// (llama.cpp's BERT graph has no other). Throws rlx::Error naming the file and the key for
  /// another architecture, a missing key or one of another type, and as from_json for
  /// inconsistent sizes.
  static BertConfig from_gguf(const GgufFile& file);
};

/// The name llama.cpp's BERT conventions (gguf-py's TensorNameMap for MODEL_ARCH.BERT) give the
/// Hugging Face checkpoint tensor `name` that build_bert_encoder declares as a param:
/// embeddings.word_embeddings / position_embeddings / token_type_embeddings.weight ->
/// token_embd / position_embd / token_types.weight, embeddings.LayerNorm -> token_embd_norm,
/// and per layer N (encoder.layer.N.) attention.self.query / key / value -> blk.N.attn_q /
/// attn_k / attn_v, attention.self.qkv (build_bert_encoder's fused_qkv param; gguf-py's
/// ATTN_QKV, listed for MODEL_ARCH.BERT: q, k and v rows appended) -> attn_qkv,
/// attention.output.dense -> attn_output, attention.output.LayerNorm ->
/// attn_output_norm, intermediate.dense -> ffn_up, output.dense -> ffn_down, output.LayerNorm
/// -> layer_output_norm (each with its .weight / .bias suffix). Throws rlx::Error naming
/// `name` for any other tensor.
std::string bert_gguf_tensor_name(const std::string& name);

/// How token states become one vector per sequence (sentence-transformers' Pooling module).
struct PoolingOptions {
  /// "mean" (attention-masked mean of token states) or "cls" (the first token's state).
  std::string mode = "mean";
  /// L2-normalise the pooled vector (sentence-transformers' Normalize module; torch's
  /// F.normalize with eps 1e-12).
  bool normalize = true;
};

/// One module of a sentence-transformers modules.json: its class ("type", e.g.
/// "sentence_transformers.models.Pooling") and its folder relative to the model ("path").
struct SentenceTransformersModule {
  std::string type;
  std::string path;
};

/// Parses the text of a sentence-transformers modules.json: an array of objects, each with
/// string fields "type" and "path" (other fields such as "idx" and "name" are ignored).
/// Throws rlx::Error starting with `source` for malformed JSON (naming the byte), a value that
/// is not an array, or a module that is not an object or lacks a string type or path.
std::vector<SentenceTransformersModule> parse_modules_json(std::string_view text,
                                                           const std::string& source);

/// The pooling mode ("cls" or "mean") of a sentence-transformers Pooling config.json
/// (1_Pooling/config.json): "cls" when pooling_mode_cls_token is true, else "mean" when
/// pooling_mode_mean_tokens is true. Throws rlx::Error starting with `source` for malformed
/// JSON, a value that is not an object, one of those two fields that is not a boolean, or
/// neither mode set (max and sqrt-length pooling are not supported).
std::string parse_pooling_config(std::string_view text, const std::string& source);

/// The sentence-transformers head of the model directory `dir`: the Pooling module's mode and
/// whether a Normalize module follows, read from modules.json and the Pooling module's
/// config.json as parse_modules_json / parse_pooling_config read them. A directory without
/// modules.json (a plain BERT checkpoint) gives mean pooling, normalised. Throws rlx::Error as
/// those functions and read_file (rlx/io/file.h) do.
PoolingOptions read_pooling_options(const std::string& dir);

/// Builds the encoder + pooling head for a fixed [batch, seq]:
/// - inputs `input_ids`, `attention_mask`, `token_type_ids`: i32[batch, seq] (mask 1 = real
///   token, 0 = padding; padded keys are masked out exactly with a bool attention mask);
/// - params named as in the Hugging Face checkpoint ("embeddings.word_embeddings.weight",
///   "encoder.layer.N.attention.self.query.weight", ...), except that every Linear weight is
///   declared transposed, [in, out], so it feeds matmul (and the matmul+bias+activation fusion)
///   directly; SentenceEmbedder transposes the checkpoint's [out, in] tensors once at load;
/// - Linear weights named in `weight_formats` (a QuantFormat other than kF32) are instead
///   declared u8[out, quant_row_bytes(format, in)], ggml's packed [out, in] layout, and run as
///   Graph::quant_matmul + bias (with act_quant `act_quant` for the block formats: "none"
///   multiplies the activations exactly, "int8" rounds them to int8 blocks first and runs the
///   CPU's integer kernels, see Graph::quant_matmul; F16 / BF16 weights always multiply exactly);
///   "embeddings.word_embeddings.weight" named there is declared u8[vocab_size,
///   quant_row_bytes(format, hidden_size)] and its gathered rows are dequantized (gather, then
///   Graph::dequantize: exact); every other param (position and token type embeddings, LayerNorms,
///   biases) stays f32;
/// - the other Linear weights are declared `linear_dtype` (f32, bf16 or f16) [in, out] and, when
///   that is not f32, widened by a convert to f32 before their matmul: the graph computes in f32
///   on weights whose values that dtype holds. Under a precision policy whose matmuls compute in
///   `linear_dtype` (auto-mixed-bf16 / always-bf16 for bf16), AMP looks through the widening and
///   the matmul reads the param as stored, so no run converts weights (with f32 weights the
///   compiled graph rounds every weight on every run); the result is identical, since AMP
///   would round the f32 weights to that dtype the same way (round to nearest even). Other
///   linear_dtype values throw rlx::Error;
/// - `fused_qkv`: each layer declares one Linear "encoder.layer.N.attention.self.qkv" (weight
///   [H, 3H] in linear_dtype, or u8[3H, quant_row_bytes(format, H)] when weight_formats names
///   it; bias f32[3H]) instead of query / key / value: columns (packed rows) 0..H-1 are the
///   query's, H..2H-1 the key's, 2H..3H-1 the value's, so one GEMM (one quant_matmul, one
///   activation quantization) projects all three, like the packed QKV of ONNX Runtime's
///   transformer optimizer. Its [B, S, 3H] result is reshaped to [B, S, 3, heads, dh],
///   transposed once to [3, B, heads, S, dh] and sliced along the leading axis. The three-param
///   form (false) is what a Hugging Face checkpoint binds by name; SentenceEmbedder builds the
///   fused weight at load;
/// - output `embeddings`: f32[batch, hidden_size].
/// Post-LN BERT (Devlin et al. 2019): embeddings (word + position + token type) -> LayerNorm,
/// then per layer self-attention -> dense -> residual + LayerNorm -> FFN (activation) ->
/// residual + LayerNorm. Throws rlx::Error when seq > max_position_embeddings or a size is
/// not positive, or a quantized weight's row is not a multiple of its format's block size.
Graph build_bert_encoder(const BertConfig& config, int64_t batch, int64_t seq,
                         const PoolingOptions& pooling = {},
                         const std::map<std::string, QuantFormat>& weight_formats = {},
                         const std::string& act_quant = "none", DType linear_dtype = DType::f32,
                         bool fused_qkv = false);

/// True for the checkpoint tensors a sentence embedder never reads by design (with or without a
/// "bert." prefix): BertModel's pooler.*, the pre-training heads cls.* (sentence-transformers
/// runs neither) and the embeddings.position_ids buffer.
bool is_ignored_checkpoint_tensor(std::string_view name);

/// True when graph param `name` is a Linear weight that build_bert_encoder declares transposed
/// relative to the checkpoint.
bool is_transposed_linear_weight(const std::string& name);

}  // namespace rlx::models
