// `rlx quantize`: a BERT model directory or a GGUF file -> a GGUF file whose weight matrices
// are stored in one ggml format, in llama.cpp's conventions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rlx/ir/quant.h"

namespace rlx::models {

/// What quantize_model() wrote.
struct QuantizeSummary {
  /// "bert model directory" or "gguf": what `in` was.
  std::string source;
  /// Tensors written, and how many of them are stored in the requested format or its fallback.
  int64_t tensors = 0, quantized = 0;
  /// Size of the input's weight file (model.safetensors or the GGUF) and of the written file.
  int64_t bytes_in = 0, bytes_out = 0;
  /// Wall time of the whole conversion, reading and writing included.
  double seconds = 0;
  /// Tensors stored in llama.cpp's fallback format because their rows do not fill the
  /// requested format's blocks (K-quants on 384-wide rows: Q4_K -> Q5_0, Q5_K -> Q5_1,
  /// Q6_K -> Q8_0), in file order.
  std::vector<std::pair<std::string, QuantFormat>> fallbacks;
};

/// Writes `out` (atomically: a temporary file renamed into place, rlx/io/atomic_file.h) from
/// `in` with the weight matrices in `format` (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0,
/// q2_K ... q6_K).
///
/// `in` a Hugging Face BERT model directory (config.json, tokenizer.json, model.safetensors;
/// a sentence-transformers modules.json gives the pooling): a GGUF in llama.cpp's BERT
/// conventions, as its convert_hf_to_gguf.py writes one: general.architecture "bert",
/// general.type/name/file_type (gguf-py's LlamaFileType; the K-quants get the _S presets, Q4_K
/// -> MOSTLY_Q4_K_S) and general.quantization_version 2; u32 bert.context_length,
/// embedding_length, feed_forward_length, block_count, attention.head_count, f32
/// attention.layer_norm_epsilon, bool attention.causal false, u32 pooling_type (MEAN 1, CLS
/// 2); the WordPiece vocabulary in llama.cpp's "phantom space" form
/// (WordPieceTokenizer::from_gguf documents it) with tokenizer.ggml.model "bert",
/// tokenizer.ggml.pre "default" (llama.cpp reads no pre-tokenizer for WPM vocabularies),
/// tokens, token_type (i32), token_type_count, and the special token ids and add_*_token flags
/// gguf-py's SpecialVocab derives ([CLS] as bos, [SEP] as eos and separator, unknown, padding,
/// mask; add_bos and add_eos true, add_sep false). Tensors are named by bert_gguf_tensor_name
/// and keep the checkpoint's [out, in] shapes; as convert_hf_to_gguf.py, 1-D tensors (norms,
/// biases) and position_embd / token_types stay F32 and every other matrix (the Linear
/// weights and token_embd) is stored in `format`, or its fallback (above; the fallbacks are
/// listed in the summary). The checkpoint's weights must be f32.
///
/// `in` a GGUF file (any architecture, e.g. SmolLM2's llama): the same file with every tensor
/// llama-quantize would quantize (a name ending in "weight", 2 or more dims, not
/// position_embd, token_types or ffn_gate_inp) dequantized exactly and re-quantized to
/// `format` (or its fallback; a tensor already in the target type is copied), every other
/// tensor copied, the metadata kept except general.file_type and general.quantization_version.
///
/// Throws rlx::Error naming the file and what was expected for: a missing `in`, a directory
/// without config.json, a model_type other than a BERT-family encoder, hidden_act other than
/// gelu or position embeddings other than absolute (llama.cpp's BERT has no others), a
/// tokenizer that does not lowercase (llama.cpp's WPM tokenizer does), checkpoint tensors the
/// encoder does not use, a non-f32 checkpoint tensor, a format llama.cpp has no file type for
/// (q8_K, an intermediate format for activations) or rlx cannot quantize (iq4_nl), a matrix
/// whose rows fit neither the format nor its fallback (naming the tensor and block size), a
/// GGUF tensor in a type rlx cannot dequantize; and as write_gguf for I/O failures (then
/// `out` is unchanged).
QuantizeSummary quantize_model(const std::string& in, const std::string& out, QuantFormat format);

/// The format `rlx quantize --type NAME` writes: quant_format_from_name(name), restricted to the
/// formats quantize_model() takes (a llama.cpp file type and an rlx quantizer: f32, f16, bf16,
/// q4_0, q4_1, q5_0, q5_1, q8_0, q2_K ... q6_K). Throws rlx::Error listing those for an unknown
/// name, and saying why for a known format it cannot write (q8_K: no llama.cpp file type;
/// iq4_nl: no quantizer).
QuantFormat quantize_target_format(std::string_view name);

}  // namespace rlx::models
