// A synthetic BERT-style encoder (post-LN self-attention + GELU FFN layers) built with the graph
// builder alone: the `rlx demo` graph, and the workload of the pipeline and CPU benchmarks and of
// the XLA backend's encoder tests. Unlike build_bert_encoder (bert.h) it reads no config.json
// and no checkpoint, so it needs only rlx_ir (library rlx_model_graphs).
#pragma once

#include <cstdint>

#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"

namespace rlx::models {

/// Sizes of the encoder. `hidden` must be a multiple of `heads` (head size hidden / heads).
struct EncoderBlockConfig {
  int64_t batch = 2, seq = 16, hidden = 64, heads = 4, ffn = 256, layers = 1;
  bool causal = false;  ///< causal attention mask instead of none

  /// The layer sizes of all-MiniLM-L6-v2 / BERT-small (hidden 384, 12 heads, FFN 1536) at
  /// sequence length 128: the size the benchmarks and the XLA agreement test run.
  static EncoderBlockConfig minilm(int64_t batch, int64_t layers = 1) {
    return EncoderBlockConfig{batch, 128, 384, 12, 1536, layers, false};
  }
};

/// Builds `layers` post-LN BERT encoder layers (Devlin et al. 2019, without embeddings or
/// pooling), all f32:
/// - input "x": f32[batch, seq, hidden]; output: f32[batch, seq, hidden];
/// - per layer: q/k/v = x W + b split into heads [batch, heads, seq, hidden / heads], the
///   composite `attention` (mask "none", or "causal" when cfg.causal), heads merged, then
///   h = layer_norm(x + a W_out + b_out) and x' = layer_norm(h + gelu(h W_in + b_in) W_ffn + b),
///   layer_norm over the last axis with epsilon 1e-12, gelu exact (erf);
/// - params, named like Hugging Face BERT's modules and prefixed "layer.N." when layers > 1:
///   "attention.{q,k,v,out}.{weight [hidden, hidden], bias [hidden]}",
///   "attention.norm.{weight, bias}" [hidden], "ffn.in.weight" [hidden, ffn], "ffn.in.bias" [ffn],
///   "ffn.out.weight" [ffn, hidden], "ffn.out.bias" [hidden], "ffn.norm.{weight, bias}" [hidden].
///   Linear weights are [in, out], so they feed matmul directly.
/// The graph is named "encoder_block" (one layer) or "encoder". Throws rlx::Error naming the
/// field when a size is not positive or heads does not divide hidden.
Graph build_encoder_block(const EncoderBlockConfig& cfg);

/// Seeded values for every input and param of `g` (any graph; made for build_encoder_block's):
/// uniform in [-0.5, 0.5), plus 1 for params whose name contains "norm.weight" (layer-norm
/// scales around 1). Deterministic for a given seed (std::mt19937_64).
TensorMap encoder_block_feeds(const Graph& g, uint64_t seed);

}  // namespace rlx::models
